//! Bulk export: live memories (all, some namespaces, or the subgraph a traversal reaches) and
//! the relations between them, streamed from one read snapshot into mnemograph JSONL, GraphML
//! or DOT.

use std::collections::HashSet;
use std::io::Write;

use crate::engine::Engine;
use crate::engine::control::{Control, Progressing, WorkKind, WorkProgress};
use crate::engine::traverse::TraverseRequest;
use crate::error::{Error, Result};
use crate::formats::{dot, graphml, html, jsonl};
use crate::model::{Memory, MemoryKey, Relation, now_millis};
use crate::store::history::{self, Entity};
use crate::store::{Db, memories, relations, vectors};

/// Memories read per page.
const PAGE: usize = 5_000;
/// Most previous versions exported per memory.
const MAX_HISTORY: usize = 1_000;

/// Formats an export can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OutFormat {
    Jsonl,
    Graphml,
    Dot,
    /// One self-contained page: a list and a graph view, no server, no network.
    Html,
}

impl OutFormat {
    pub fn parse(s: &str) -> Option<OutFormat> {
        match s.trim().to_ascii_lowercase().as_str() {
            "jsonl" | "mnemograph" => Some(OutFormat::Jsonl),
            "graphml" => Some(OutFormat::Graphml),
            "dot" | "graphviz" => Some(OutFormat::Dot),
            "html" => Some(OutFormat::Html),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OutFormat::Jsonl => "jsonl",
            OutFormat::Graphml => "graphml",
            OutFormat::Dot => "dot",
            OutFormat::Html => "html",
        }
    }
}

/// One export, as a caller asks for it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExportRequest {
    /// `None`: every namespace.
    pub namespaces: Option<Vec<String>>,
    pub format: OutFormat,
    /// Only the memories this walk reaches (and the relations between them).
    pub subgraph: Option<TraverseRequest>,
    /// Include each memory's vector and model (JSONL only).
    pub vectors: bool,
    /// Include each memory's previous versions (JSONL only).
    pub history: bool,
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportCounts {
    pub memories: u64,
    pub relations: u64,
}

fn io(e: std::io::Error) -> Error {
    Error::Io(e)
}

impl Engine {
    /// Writes the export to `out`, reporting progress to `ctl` (which may stop it).
    ///
    /// A subgraph or namespace export reads only what it exports: the keys it covers (the walk's
    /// reach, or the namespace index), their rows by key and the relations leaving them by the
    /// source index. Only a whole-database export pages through the tables.
    pub fn export(
        &self,
        req: &ExportRequest,
        out: &mut dyn Write,
        ctl: &dyn Control,
    ) -> Result<ExportCounts> {
        self.check_export_namespaces(req)?;
        let reached: Option<Vec<MemoryKey>> = match &req.subgraph {
            None => None,
            Some(walk) => {
                let mut keys = self.reach(walk, ctl)?;
                keys.sort_unstable();
                keys.dedup();
                Some(keys)
            }
        };
        let model = match (&self.embedder, req.vectors, req.format) {
            (Some(e), true, OutFormat::Jsonl) => Some(e.model_id().to_owned()),
            _ => None,
        };
        self.store.snapshot(|c| {
            let keys: Option<Vec<MemoryKey>> = match (&reached, &req.namespaces) {
                (Some(keys), _) => Some(keys.clone()),
                (None, Some(nss)) => {
                    let mut keys = memories::keys_in(c, nss)?;
                    keys.sort_unstable();
                    Some(keys)
                }
                (None, None) => None,
            };
            let total = match &keys {
                Some(keys) => keys.len() as u64,
                None => memories::count_live(c, None)? as u64,
            };
            match req.format {
                OutFormat::Jsonl => {
                    jsonl::write_header(out, &jsonl::Header::new(now_millis(), model.clone()))
                        .map_err(io)?
                }
                OutFormat::Graphml => graphml::begin(out).map_err(io)?,
                OutFormat::Dot => dot::begin(out).map_err(io)?,
                OutFormat::Html => html::begin(out).map_err(io)?,
            }
            let mut page_out = PageWriter {
                req,
                model: model.as_deref(),
                out: &mut *out,
                exported: HashSet::new(),
                counts: ExportCounts::default(),
                progress: WorkProgress {
                    kind: WorkKind::Export,
                    total,
                    ..WorkProgress::default()
                },
            };
            match &keys {
                Some(keys) => {
                    for chunk in keys.chunks(PAGE) {
                        let mut page = memories::by_keys(c, chunk)?;
                        page.retain(|m| {
                            m.deleted_at.is_none()
                                && req
                                    .namespaces
                                    .as_ref()
                                    .is_none_or(|nss| nss.contains(&m.namespace))
                        });
                        page.sort_unstable_by_key(|m| m.key);
                        page_out.memories(c, &page, ctl)?;
                    }
                }
                None => {
                    let mut after = MemoryKey(0);
                    loop {
                        let page = memories::live_page(c, after, PAGE)?;
                        let Some(last) = page.last() else { break };
                        after = last.key;
                        page_out.memories(c, &page, ctl)?;
                    }
                }
            }
            if keys.is_some() {
                let mut written: Vec<MemoryKey> = page_out.exported.iter().copied().collect();
                written.sort_unstable();
                for chunk in written.chunks(PAGE) {
                    let page = relations::live_from(c, chunk)?;
                    page_out.relations(&page, ctl)?;
                }
            } else {
                let mut after = 0i64;
                loop {
                    let page = relations::live_page(c, after, PAGE)?;
                    let Some(last) = page.last() else { break };
                    after = last.0;
                    page_out.relations(&page, ctl)?;
                }
            }
            let counts = page_out.counts;
            match req.format {
                OutFormat::Jsonl => {}
                OutFormat::Graphml => graphml::end(out).map_err(io)?,
                OutFormat::Dot => dot::end(out).map_err(io)?,
                OutFormat::Html => html::end(out).map_err(io)?,
            }
            out.flush().map_err(io)?;
            Ok(counts)
        })
    }

    /// Every namespace an export names must be one the caller may read.
    fn check_export_namespaces(&self, req: &ExportRequest) -> Result<()> {
        if let Some(nss) = &req.namespaces {
            for ns in nss {
                self.resolve_namespace("namespaces", Some(ns))?;
            }
        }
        Ok(())
    }
}

/// Writes the pages of one export in its format, keeping count of what it wrote.
struct PageWriter<'a> {
    req: &'a ExportRequest,
    /// The model whose vectors are written, when they are.
    model: Option<&'a str>,
    out: &'a mut dyn Write,
    /// Memories written: a relation is written when both its ends were.
    exported: HashSet<MemoryKey>,
    counts: ExportCounts,
    progress: WorkProgress,
}

impl PageWriter<'_> {
    fn memories(&mut self, c: &Db, page: &[Memory], ctl: &dyn Control) -> Result<()> {
        let vecs = match self.model {
            Some(model) => {
                let keys: Vec<MemoryKey> = page.iter().map(|m| m.key).collect();
                vectors::current(c, model, &keys)?
            }
            None => Default::default(),
        };
        for m in page {
            match self.req.format {
                OutFormat::Jsonl => {
                    let v = vecs
                        .get(&m.key)
                        .map(|v| (self.model.unwrap_or(""), v.vec.as_slice()));
                    let past = if self.req.history {
                        history::of(c, Entity::Memory, m.key.0, MAX_HISTORY)?
                    } else {
                        Vec::new()
                    };
                    jsonl::write_memory(self.out, m, v, &past)
                }
                OutFormat::Graphml => graphml::node(self.out, m),
                OutFormat::Dot => dot::node(self.out, m),
                OutFormat::Html => html::node(self.out, m),
            }
            .map_err(io)?;
            self.exported.insert(m.key);
        }
        self.counts.memories += page.len() as u64;
        self.progress.done = self.counts.memories;
        self.progress.visited = self.counts.memories;
        ctl.report(&self.progress);
        if ctl.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(())
    }

    fn relations(
        &mut self,
        page: &[(i64, MemoryKey, MemoryKey, Relation)],
        ctl: &dyn Control,
    ) -> Result<()> {
        for (_, src, dst, r) in page {
            if !self.exported.contains(src) || !self.exported.contains(dst) {
                continue;
            }
            match self.req.format {
                OutFormat::Jsonl => jsonl::write_relation(self.out, r),
                OutFormat::Graphml => graphml::edge(self.out, r),
                OutFormat::Dot => dot::edge(self.out, r),
                OutFormat::Html => html::edge(self.out, r),
            }
            .map_err(io)?;
            self.counts.relations += 1;
        }
        if ctl.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(())
    }
}

/// Memories and relations an export's size is estimated from.
const SAMPLE_MEMORIES: usize = 256;
const SAMPLE_RELATIONS: usize = 64;
/// Memories written per millisecond by an export (for the estimate).
const EXPORT_PER_MS: f64 = 50.0;
/// Bytes a vector element takes in JSONL, roughly (`-0.0123456,`).
const VECTOR_BYTES_PER_DIM: f64 = 11.0;

/// Discards what is written, counting it.
#[derive(Default)]
struct Measure(u64);

impl Write for Measure {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Engine {
    /// The cost of an export in milliseconds, after its cheap checks (the target, the
    /// namespaces, the subgraph's seeds): in proportion to what it covers — the subgraph's
    /// expected reach, the namespaces' memories, or the whole database. An export into the
    /// answer that is expected to be larger than an answer carries is refused here, before any
    /// work or task starts.
    pub fn estimate_export(&self, req: &ExportRequest, target: &ExportTarget) -> Result<f64> {
        self.check_export_target(target)?;
        self.check_export_namespaces(req)?;
        let (mut n, walk_ms) = match &req.subgraph {
            Some(walk) => {
                let seeds = self.check_traverse(walk)?;
                let e = self.estimate_traverse(walk, &seeds)?;
                (e.reach, e.ms)
            }
            None => (self.count_live(req.namespaces.as_deref())? as f64, 0.0),
        };
        if let ExportTarget::Inline(cap) = target {
            let per_memory = self.export_bytes_per_memory(req)?;
            if n * per_memory > *cap as f64
                && let Some(walk) = &req.subgraph
            {
                // The reach was extrapolated: walk it (a fraction of the export's own cost)
                // rather than refuse an export that fits.
                n = self.reach(walk, &Progressing::default())?.len() as f64;
            }
            let bytes = n * per_memory;
            if bytes > *cap as f64 {
                return Err(too_big_inline(
                    &format!("is about {}", mib(bytes)),
                    &format!(" ({n:.0} memories and their relations)"),
                    *cap,
                ));
            }
        }
        Ok(walk_ms + n / EXPORT_PER_MS)
    }

    /// Expected bytes an export writes per memory, its share of the relations included, from
    /// a sample written in the export's own format.
    fn export_bytes_per_memory(&self, req: &ExportRequest) -> Result<f64> {
        let dims = match (&self.embedder, req.vectors, req.format) {
            (Some(e), true, OutFormat::Jsonl) => e.dim() as f64,
            _ => 0.0,
        };
        self.store.read(|c| {
            let sample = memories::live_page_in(
                c,
                req.namespaces.as_deref(),
                MemoryKey(0),
                SAMPLE_MEMORIES,
            )?;
            let mut w = Measure::default();
            for m in &sample {
                match req.format {
                    OutFormat::Jsonl => jsonl::write_memory(&mut w, m, None, &[]),
                    OutFormat::Graphml => graphml::node(&mut w, m),
                    OutFormat::Dot => dot::node(&mut w, m),
                    OutFormat::Html => html::node(&mut w, m),
                }
                .map_err(io)?;
            }
            let memory = w.0 as f64 / sample.len().max(1) as f64 + dims * VECTOR_BYTES_PER_DIM;
            let rels = relations::live_page(c, 0, SAMPLE_RELATIONS)?;
            let mut w = Measure::default();
            for (_, _, _, r) in &rels {
                match req.format {
                    OutFormat::Jsonl => jsonl::write_relation(&mut w, r),
                    OutFormat::Graphml => graphml::edge(&mut w, r),
                    OutFormat::Dot => dot::edge(&mut w, r),
                    OutFormat::Html => html::edge(&mut w, r),
                }
                .map_err(io)?;
            }
            let relation = w.0 as f64 / rels.len().max(1) as f64;
            let per_memory = relations::approximate_count(c)? as f64
                / memories::approximate_count(c)?.max(1) as f64;
            Ok(memory + per_memory * relation)
        })
    }
}

/// `bytes` as "12.3 MiB".
fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

/// An export too big for the answer: `what` it is (and `detail`), against the cap.
fn too_big_inline(what: &str, detail: &str, cap: usize) -> Error {
    Error::invalid(
        "export",
        format!(
            "{what}{detail}, too big to send to the client (an answer carries at most {})",
            mib(cap as f64)
        ),
        "give `path` (a new file inside the import roots) to write it to a file, or narrow it with `namespaces` or `subgraph`",
    )
}

#[cfg(test)]
thread_local! {
    /// Runs just before an export file is put into place (tests make a competitor appear there).
    #[allow(clippy::type_complexity)]
    pub(crate) static BEFORE_PUBLISH: std::cell::RefCell<Option<Box<dyn Fn(&std::path::Path)>>> =
        const { std::cell::RefCell::new(None) };
}

/// Where an export goes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ExportTarget {
    /// A new file within the roots (written beside, then linked into place).
    Path(std::path::PathBuf),
    /// Into the answer, at most this many bytes.
    Inline(usize),
}

/// What an export produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportOutput {
    pub counts: ExportCounts,
    pub bytes: u64,
    /// The file written (canonical), for a path target.
    pub path: Option<std::path::PathBuf>,
    /// The exported text, for an inline target.
    pub text: Option<String>,
}

/// A writer that refuses to grow past a cap.
struct Capped {
    buf: Vec<u8>,
    cap: usize,
    over: bool,
}

impl Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + b.len() > self.cap {
            self.over = true;
            return Err(std::io::Error::other("inline export cap reached"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Counts bytes on their way to a file.
struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl Engine {
    /// Live memories in `namespaces`, all for `None` (what an export of them writes).
    pub fn count_live(&self, namespaces: Option<&[String]>) -> Result<i64> {
        self.store.read(|c| memories::count_live(c, namespaces))
    }

    /// Removes the partial files that unfinished exports left at the top of the folder roots
    /// (see `clean_stale_partials`); returns how many.
    pub fn clean_stale_exports(&self) -> usize {
        self.cfg
            .transfer_roots()
            .allowed
            .iter()
            .filter(|r| r.is_dir())
            .map(|r| clean_stale_partials(r))
            .sum()
    }

    /// Checks an export's target before any work: a new file inside the roots.
    pub fn check_export_target(&self, target: &ExportTarget) -> Result<()> {
        if let ExportTarget::Path(p) = target {
            crate::engine::import::source::confine_new_file("path", p, &self.cfg.transfer_roots())?;
        }
        Ok(())
    }

    /// Runs an export into a new file (never left half-written: a temporary file beside it is
    /// linked into place at the end, which fails rather than replace a file that appeared
    /// meanwhile) or into memory up to a cap. Partial files that dead exports left in the
    /// target's folder are removed first.
    pub fn export_to(
        &self,
        req: &ExportRequest,
        target: &ExportTarget,
        ctl: &dyn Control,
    ) -> Result<ExportOutput> {
        match target {
            ExportTarget::Inline(cap) => {
                let mut w = Capped {
                    buf: Vec::new(),
                    cap: *cap,
                    over: false,
                };
                match self.export(req, &mut w, ctl) {
                    Ok(counts) => Ok(ExportOutput {
                        counts,
                        bytes: w.buf.len() as u64,
                        path: None,
                        text: Some(String::from_utf8_lossy(&w.buf).into_owned()),
                    }),
                    Err(_) if w.over => Err(too_big_inline(
                        &format!("is larger than {}", mib(*cap as f64)),
                        " (found while writing it)",
                        *cap,
                    )),
                    Err(e) => Err(e),
                }
            }
            ExportTarget::Path(p) => {
                let roots = self.cfg.transfer_roots();
                let target = crate::engine::import::source::confine_new_file("path", p, &roots)?;
                if let Some(dir) = target.parent() {
                    clean_stale_partials(dir);
                }
                let tmp = partial_path(&target);
                // `create_new` never follows a link planted at that name.
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&tmp)?;
                let mut w = Counting {
                    inner: std::io::BufWriter::with_capacity(1 << 20, file),
                    n: 0,
                };
                let res = self.export(req, &mut w, ctl).and_then(|counts| {
                    w.flush()?;
                    w.inner.get_ref().sync_all()?;
                    #[cfg(test)]
                    BEFORE_PUBLISH.with(|h| {
                        if let Some(f) = &*h.borrow() {
                            f(&target);
                        }
                    });
                    publish(&tmp, &target).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::AlreadyExists {
                            Error::invalid(
                                "path",
                                format!("{} exists (it appeared while exporting)", p.display()),
                                "choose a new file name (exports never overwrite)",
                            )
                        } else {
                            Error::Io(e)
                        }
                    })?;
                    Ok(counts)
                });
                match res {
                    Ok(counts) => Ok(ExportOutput {
                        counts,
                        bytes: w.n,
                        path: Some(target),
                        text: None,
                    }),
                    Err(e) => {
                        let _ = std::fs::remove_file(&tmp);
                        Err(e)
                    }
                }
            }
        }
    }
}

/// Untouched this long, a partial export of a process that is gone is removed (the wait leaves
/// alone an export that another machine may be writing into a shared folder).
const STALE_OF_DEAD: std::time::Duration = std::time::Duration::from_secs(120);
/// Untouched this long, a partial export is removed whoever wrote it (a live export writes
/// continuously; a process id may have been reused).
const STALE_OF_ANY: std::time::Duration = std::time::Duration::from_secs(24 * 3_600);

/// The temporary name an export is written under: `<file>.partial-<pid>`, beside the target.
fn partial_path(target: &std::path::Path) -> std::path::PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".partial-{}", std::process::id()));
    target.with_file_name(name)
}

/// The process id in a name of the form `<file>.partial-<pid>`, else `None`.
fn partial_pid(name: &str) -> Option<u32> {
    let (base, pid) = name.rsplit_once(".partial-")?;
    if base.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` is gone from this machine; `None` when this cannot be told here.
fn process_gone(pid: u32) -> Option<bool> {
    let proc = std::path::Path::new("/proc");
    if cfg!(target_os = "linux") && proc.join("self").exists() {
        Some(!proc.join(pid.to_string()).exists())
    } else {
        None
    }
}

/// Removes the partial export files in `dir` (only regular files named `<file>.partial-<pid>`)
/// whose process is gone and that were untouched for [`STALE_OF_DEAD`], or that were untouched
/// for [`STALE_OF_ANY`]; returns how many. Never fails: what cannot be read or removed stays.
pub(crate) fn clean_stale_partials(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(partial_pid) else {
            continue;
        };
        // The entry's own metadata: a link is not followed, and is not a regular file.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let idle = meta
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .unwrap_or_default();
        let stale =
            idle >= STALE_OF_ANY || (idle >= STALE_OF_DEAD && process_gone(pid) == Some(true));
        if stale && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
            tracing::info!(
                file = %entry.path().display(),
                bytes = meta.len(),
                "removed the partial file of an export that did not finish"
            );
        }
    }
    removed
}

/// Puts the finished `tmp` at `target` unless something exists there, atomically: a hard link
/// fails when the name is taken (no window between a check and a rename), then the temporary
/// name goes. Where hard links are not supported, the data is copied into a file created with
/// `create_new` (equally never overwriting; removed again if the copy fails).
fn publish(tmp: &std::path::Path, target: &std::path::Path) -> std::io::Result<()> {
    match std::fs::hard_link(tmp, target) {
        Ok(()) => {
            if let Err(e) = std::fs::remove_file(tmp) {
                tracing::warn!(error = %e, file = %tmp.display(), "could not remove an export's temporary name");
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
        Err(e) => {
            tracing::debug!(error = %e, "no hard link for the export; copying it into place");
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(target)?;
            let copied = std::fs::File::open(tmp)
                .and_then(|mut src| std::io::copy(&mut src, &mut out))
                .and_then(|_| out.sync_all());
            if let Err(e) = copied {
                let _ = std::fs::remove_file(target);
                return Err(e);
            }
            let _ = std::fs::remove_file(tmp);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishing_never_replaces_a_file_and_names_are_ours_only() {
        let dir = tempfile::tempdir().unwrap();
        let (tmp, target) = (dir.path().join("t.partial-1"), dir.path().join("t"));
        std::fs::write(&tmp, "mine").unwrap();
        std::fs::write(&target, "theirs").unwrap();
        let err = publish(&tmp, &target).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs");
        std::fs::remove_file(&target).unwrap();
        publish(&tmp, &target).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
        assert!(!tmp.exists());

        assert_eq!(partial_pid("out.jsonl.partial-42"), Some(42));
        assert_eq!(partial_pid("a.partial-b.partial-7"), Some(7));
        for other in [
            ".partial-42",
            "out.partial-",
            "out.partial-4x",
            "out.partial-42.txt",
        ] {
            assert_eq!(partial_pid(other), None, "{other}");
        }
        assert_eq!(process_gone(std::process::id()), Some(false));
    }
}
