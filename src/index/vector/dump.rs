//! The dump of a vector index on disk: the graph in usearch's format, the slot table, and a
//! metadata file naming both with their lengths and SHA-256, whose rename into place commits a
//! dump (a crash leaves the old one or the new one, never a mix).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::graph::Graph;
use super::state::*;
use crate::error::{Error, Result};
use crate::model::LogPosition;

/// Every file of a dump starts with this, so the cleanup after a dump touches nothing else.
pub(super) const FILE_PREFIX: &str = "vectors.";
/// The metadata of the current dump; renaming it into place is what commits a dump.
pub(super) const META_FILE: &str = "vectors.meta.json";
pub(super) const META_TEMP: &str = "vectors.meta.json.tmp";
/// Bumped whenever anything written by [`VectorIndex::dump`] changes meaning.
pub(super) const DUMP_FORMAT: u32 = 3;
/// The graph file is usearch's own format; a dump from another version of it is rebuilt.
pub(super) const GRAPH_ENGINE: &str = "usearch 2.26.6 bf16";
pub(super) const SLOTS_MAGIC: &[u8; 8] = b"MGVSLOT3";

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Meta {
    pub(super) format: u32,
    pub(super) engine: String,
    pub(super) model: String,
    pub(super) dim: usize,
    pub(super) seq: i64,
    pub(super) generation: String,
    pub(super) slots: usize,
    pub(super) live: usize,
    pub(super) connectivity: usize,
    pub(super) expansion_add: usize,
    pub(super) files: Vec<FileMeta>,
    /// The change-log position of `seq` (absent in dumps of older versions).
    #[serde(default)]
    pub(super) position: Option<LogPosition>,
    /// The centre the graph's directions are taken from, once fixed.
    pub(super) centre: Option<Vec<f32>>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct FileMeta {
    pub(super) name: String,
    pub(super) len: u64,
    pub(super) sha256: String,
}

/// File names of one generation.
pub(super) struct DumpNames {
    /// `vectors.<generation>.`: what every file of the generation starts with.
    pub(super) prefix: String,
    pub(super) slots: String,
    pub(super) graph: String,
}

impl DumpNames {
    pub(super) fn new(generation: &str) -> DumpNames {
        let prefix = format!("{FILE_PREFIX}{generation}.");
        DumpNames {
            slots: format!("{prefix}slots"),
            graph: format!("{prefix}usearch"),
            prefix,
        }
    }

    pub(super) fn all(&self) -> [&str; 2] {
        [&self.slots, &self.graph]
    }

    /// The files a dump of `slots` slots consists of.
    pub(super) fn expected(&self, slots: usize) -> Vec<&str> {
        if slots == 0 {
            vec![&self.slots]
        } else {
            self.all().to_vec()
        }
    }
}

/// A generation name no file in `dir` uses yet (time-based, in hex).
pub(super) fn fresh_generation(dir: &Path) -> String {
    let mut n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    loop {
        let generation = format!("{n:016x}");
        let names = DumpNames::new(&generation);
        if names.all().iter().all(|name| !dir.join(name).exists()) {
            return generation;
        }
        n = n.wrapping_add(1);
    }
}

/// Writes and syncs this generation's files; returns their lengths and digests.
pub(super) fn write_files(dir: &Path, names: &DumpNames, st: &State) -> Result<Vec<FileMeta>> {
    write_slots(&dir.join(&names.slots), st)?;
    if !st.keys.is_empty() {
        let path = dir.join(&names.graph);
        let path = path.to_str().ok_or_else(|| {
            Error::Internal(format!(
                "vector dump: the folder {} is not a UTF-8 path, which the graph library needs",
                dir.display()
            ))
        })?;
        st.graph.save(path).map_err(Error::Internal)?;
        File::open(path)?.sync_all()?;
    }
    names
        .expected(st.keys.len())
        .par_iter()
        .map(|name| {
            let path = dir.join(name);
            Ok(FileMeta {
                name: (*name).to_owned(),
                len: fs::metadata(&path)?.len(),
                sha256: file_sha256(&path)?,
            })
        })
        .collect()
}

/// Slot table: magic, slot count (u64 LE), each slot's key (u64 LE), live flag (one byte),
/// vector print (u64 LE), distance from the centre (f32 LE) and lean toward it (f32 LE).
pub(super) fn write_slots(path: &Path, st: &State) -> io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    out.write_all(SLOTS_MAGIC)?;
    out.write_all(&(st.keys.len() as u64).to_le_bytes())?;
    for key in &st.keys {
        out.write_all(&key.to_le_bytes())?;
    }
    for &l in &st.live {
        out.write_all(&[u8::from(l)])?;
    }
    for print in &st.prints {
        out.write_all(&print.to_le_bytes())?;
    }
    for norm in &st.norms {
        out.write_all(&norm.to_le_bytes())?;
    }
    for lean in &st.leans {
        out.write_all(&lean.to_le_bytes())?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// The keys, live flags, prints, norms and leans of a slot table of `slots` slots.
pub(super) type SlotTable = (Vec<u64>, Vec<bool>, Vec<u64>, Vec<f32>, Vec<f32>);

pub(super) fn read_slots(path: &Path, slots: usize) -> std::result::Result<SlotTable, String> {
    let bytes = fs::read(path).map_err(|e| format!("slot table unreadable: {e}"))?;
    let header = SLOTS_MAGIC.len() + 8;
    if bytes.len() != header + 25 * slots || !bytes.starts_with(SLOTS_MAGIC) {
        return Err("slot table malformed".to_owned());
    }
    let count = u64::from_le_bytes(
        bytes[SLOTS_MAGIC.len()..header]
            .try_into()
            .unwrap_or([0; 8]),
    );
    if count != slots as u64 {
        return Err(format!(
            "slot table holds {count} slots, metadata says {slots}"
        ));
    }
    let words = |b: &[u8]| -> Vec<u64> {
        b.chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .collect()
    };
    let (key_bytes, rest) = bytes[header..].split_at(8 * slots);
    let (live_bytes, rest) = rest.split_at(slots);
    let (print_bytes, rest) = rest.split_at(8 * slots);
    let (norm_bytes, lean_bytes) = rest.split_at(4 * slots);
    let floats = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
            .collect()
    };
    let (norms, leans) = (floats(norm_bytes), floats(lean_bytes));
    if norms.iter().any(|r| !r.is_finite() || *r < 0.0) {
        return Err("slot table has a bad norm".to_owned());
    }
    if leans.iter().any(|l| !l.is_finite()) {
        return Err("slot table has a bad lean".to_owned());
    }
    let live = live_bytes
        .iter()
        .map(|&b| match b {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err("slot table has a bad live flag".to_owned()),
        })
        .collect::<std::result::Result<_, _>>()?;
    Ok((words(key_bytes), live, words(print_bytes), norms, leans))
}

pub(super) fn file_sha256(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Deletes dump files of other generations and a leftover temporary metadata file.
pub(super) fn remove_stale_files(dir: &Path, current: &DumpNames) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(FILE_PREFIX) && name != META_FILE && !name.starts_with(&current.prefix)
        {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The dump in `dir`: `Ok(None)` when there is none, `Err(why)` when it cannot be used.
pub(super) fn read_dump(
    dir: &Path,
    model: &str,
    dim: usize,
) -> std::result::Result<Option<(State, i64, Option<LogPosition>)>, String> {
    let bytes = match fs::read(dir.join(META_FILE)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("metadata unreadable: {e}")),
    };
    let meta: Meta =
        serde_json::from_slice(&bytes).map_err(|e| format!("metadata unreadable: {e}"))?;
    if meta.format != DUMP_FORMAT || meta.engine != GRAPH_ENGINE {
        return Err(format!(
            "dump format {} of {}, expected {DUMP_FORMAT} of {GRAPH_ENGINE}",
            meta.format, meta.engine
        ));
    }
    if meta.model != model {
        return Err(format!(
            "dump is of model {:?}, the embedder is {model:?}",
            meta.model
        ));
    }
    if meta.dim != dim {
        return Err(format!(
            "dump has {} dimensions, the embedder {dim}",
            meta.dim
        ));
    }
    if meta.generation.is_empty() || !meta.generation.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err("metadata names a bad generation".to_owned());
    }
    let names = DumpNames::new(&meta.generation);
    let expected = names.expected(meta.slots);
    if meta.files.len() != expected.len()
        || expected
            .iter()
            .any(|name| !meta.files.iter().any(|f| f.name == *name))
    {
        return Err("metadata lists other files than the dump has".to_owned());
    }
    // The graph's loader trusts its file (offsets and counts in it are followed as written), so
    // it only ever sees files that are byte for byte what the dump wrote: present, regular, of
    // the recorded length and SHA-256.
    meta.files.par_iter().try_for_each(|f| check_file(dir, f))?;
    let (keys, live, prints, norms, leans) = read_slots(&dir.join(&names.slots), meta.slots)?;
    let centre = match meta.centre {
        Some(c) if c.len() != dim || c.iter().any(|x| !x.is_finite()) => {
            return Err("metadata has a bad centre".to_owned());
        }
        Some(c) => Some(c),
        None => None,
    };
    let graph = if meta.slots == 0 {
        Graph::new(dim, INITIAL_CAPACITY)?
    } else {
        let path = dir.join(&names.graph);
        let path = path
            .to_str()
            .ok_or("the folder is not a UTF-8 path, which the graph library needs")?;
        Graph::load(path, dim)?
    };
    let mut slot_of = HashMap::with_capacity(meta.live);
    for (slot, _) in live.iter().enumerate().filter(|(_, l)| **l) {
        if slot_of.insert(keys[slot], slot as u32).is_some() {
            return Err(format!("key {} has two live slots", keys[slot]));
        }
    }
    if slot_of.len() != meta.live {
        return Err(format!(
            "{} live slots, metadata says {}",
            slot_of.len(),
            meta.live
        ));
    }
    if graph.len() != meta.live {
        return Err(format!(
            "graph holds {} points, metadata says {} live slots",
            graph.len(),
            meta.live
        ));
    }
    // Namespaces are not dumped: unknown until the engine places the vectors again.
    let unplaced = live.iter().filter(|&&l| l).count();
    let state = State {
        spaces: vec![UNPLACED; keys.len()],
        unplaced,
        keys,
        live,
        prints,
        norms,
        leans,
        slot_of,
        centred: centre.is_some(),
        centre: centre.unwrap_or_else(|| vec![0.0; dim]),
        ..State::with_graph(graph, dim)
    };
    Ok(Some((state, meta.seq, meta.position)))
}

pub(super) fn check_file(dir: &Path, f: &FileMeta) -> std::result::Result<(), String> {
    let path = dir.join(&f.name);
    let md = fs::metadata(&path).map_err(|e| format!("{} unreadable: {e}", f.name))?;
    if !md.is_file() {
        return Err(format!("{} is not a regular file", f.name));
    }
    if md.len() != f.len {
        return Err(format!(
            "{} is {} bytes, the dump wrote {}",
            f.name,
            md.len(),
            f.len
        ));
    }
    let digest = file_sha256(&path).map_err(|e| format!("{} unreadable: {e}", f.name))?;
    if digest != f.sha256 {
        return Err(format!("{} does not match its checksum", f.name));
    }
    Ok(())
}
