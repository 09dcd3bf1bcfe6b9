//! Bulk export: live memories (all, some namespaces, or the subgraph a traversal reaches) and
//! the relations between them, streamed from one read snapshot into mnemograph JSONL, GraphML
//! or DOT.

use std::collections::HashSet;
use std::io::Write;

use crate::engine::Engine;
use crate::engine::traverse::{Control, TraverseRequest, WorkKind, WorkProgress};
use crate::error::{Error, Result};
use crate::formats::{dot, graphml, jsonl};
use crate::model::{Memory, MemoryKey, now_millis};
use crate::store::history::{self, Entity};
use crate::store::{memories, relations, vectors};

/// Memories read per page.
const PAGE: usize = 5_000;
/// Most previous versions exported per memory.
const MAX_HISTORY: usize = 1_000;

/// Formats an export can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFormat {
    Jsonl,
    Graphml,
    Dot,
}

impl OutFormat {
    pub fn parse(s: &str) -> Option<OutFormat> {
        match s.trim().to_ascii_lowercase().as_str() {
            "jsonl" | "mnemograph" => Some(OutFormat::Jsonl),
            "graphml" => Some(OutFormat::Graphml),
            "dot" | "graphviz" => Some(OutFormat::Dot),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OutFormat::Jsonl => "jsonl",
            OutFormat::Graphml => "graphml",
            OutFormat::Dot => "dot",
        }
    }
}

/// One export, as a caller asks for it.
#[derive(Debug, Clone, PartialEq)]
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
    pub fn export(
        &self,
        req: &ExportRequest,
        out: &mut dyn Write,
        ctl: &dyn Control,
    ) -> Result<ExportCounts> {
        if let Some(nss) = &req.namespaces {
            for ns in nss {
                self.resolve_namespace("namespaces", Some(ns))?;
            }
        }
        let only: Option<HashSet<MemoryKey>> = match &req.subgraph {
            None => None,
            Some(walk) => Some(self.reach(walk, ctl)?.into_iter().collect()),
        };
        let model = match (&self.embedder, req.vectors, req.format) {
            (Some(e), true, OutFormat::Jsonl) => Some(e.model_id().to_owned()),
            _ => None,
        };
        let total = match &only {
            Some(set) => set.len() as u64,
            None => self.count_live(req.namespaces.as_deref())? as u64,
        };
        self.store.snapshot(|c| {
            match req.format {
                OutFormat::Jsonl => {
                    jsonl::write_header(out, &jsonl::Header::new(now_millis(), model.clone()))
                        .map_err(io)?
                }
                OutFormat::Graphml => graphml::begin(out).map_err(io)?,
                OutFormat::Dot => dot::begin(out).map_err(io)?,
            }
            let mut counts = ExportCounts::default();
            let mut exported: HashSet<MemoryKey> = HashSet::new();
            let mut after = MemoryKey(0);
            let mut progress = WorkProgress {
                kind: WorkKind::Export,
                total,
                ..WorkProgress::default()
            };
            loop {
                let page: Vec<Memory> =
                    memories::live_page_in(c, req.namespaces.as_deref(), after, PAGE)?;
                let Some(last) = page.last() else { break };
                after = last.key;
                let page: Vec<Memory> = match &only {
                    Some(set) => page.into_iter().filter(|m| set.contains(&m.key)).collect(),
                    None => page,
                };
                let vecs = match &model {
                    Some(model) => {
                        let keys: Vec<MemoryKey> = page.iter().map(|m| m.key).collect();
                        vectors::current(c, model, &keys)?
                    }
                    None => Default::default(),
                };
                for m in &page {
                    match req.format {
                        OutFormat::Jsonl => {
                            let v = vecs
                                .get(&m.key)
                                .map(|v| (model.as_deref().unwrap_or(""), v.vec.as_slice()));
                            let past = if req.history {
                                history::of(c, Entity::Memory, m.key.0, MAX_HISTORY)?
                            } else {
                                Vec::new()
                            };
                            jsonl::write_memory(out, m, v, &past)
                        }
                        OutFormat::Graphml => graphml::node(out, m),
                        OutFormat::Dot => dot::node(out, m),
                    }
                    .map_err(io)?;
                    exported.insert(m.key);
                }
                counts.memories += page.len() as u64;
                progress.done = counts.memories;
                progress.visited = counts.memories;
                ctl.report(&progress);
                if ctl.is_cancelled() {
                    return Err(Error::Cancelled);
                }
            }
            let mut after = 0i64;
            loop {
                let page = relations::live_page(c, after, PAGE)?;
                let Some(last) = page.last() else { break };
                after = last.0;
                for (_, src, dst, r) in &page {
                    if !exported.contains(src) || !exported.contains(dst) {
                        continue;
                    }
                    match req.format {
                        OutFormat::Jsonl => jsonl::write_relation(out, r),
                        OutFormat::Graphml => graphml::edge(out, r),
                        OutFormat::Dot => dot::edge(out, r),
                    }
                    .map_err(io)?;
                    counts.relations += 1;
                }
                if ctl.is_cancelled() {
                    return Err(Error::Cancelled);
                }
            }
            match req.format {
                OutFormat::Jsonl => {}
                OutFormat::Graphml => graphml::end(out).map_err(io)?,
                OutFormat::Dot => dot::end(out).map_err(io)?,
            }
            out.flush().map_err(io)?;
            Ok(counts)
        })
    }
}

/// Where an export goes.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportTarget {
    /// A new file within the roots (written beside, then renamed into place).
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

    /// Checks an export's target before any work: a new file inside the roots.
    pub fn check_export_target(&self, target: &ExportTarget) -> Result<()> {
        if let ExportTarget::Path(p) = target {
            crate::engine::import::source::confine_new_file("path", p, &self.cfg.transfer_roots())?;
        }
        Ok(())
    }

    /// Runs an export into a new file (never left half-written: a temporary file beside it is
    /// renamed into place at the end) or into memory up to a cap.
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
                    Err(_) if w.over => Err(Error::invalid(
                        "path",
                        format!("the export is larger than {cap} bytes, too big to answer inline"),
                        "give `path` (a new file inside the import roots) to write it to a file, or narrow it with namespaces/subgraph",
                    )),
                    Err(e) => Err(e),
                }
            }
            ExportTarget::Path(p) => {
                let roots = self.cfg.transfer_roots();
                let target = crate::engine::import::source::confine_new_file("path", p, &roots)?;
                let mut tmp_name = target.file_name().unwrap_or_default().to_os_string();
                tmp_name.push(format!(".partial-{}", std::process::id()));
                let tmp = target.with_file_name(tmp_name);
                let file = std::fs::File::create(&tmp)?;
                let mut w = Counting {
                    inner: std::io::BufWriter::with_capacity(1 << 20, file),
                    n: 0,
                };
                let res = self.export(req, &mut w, ctl).and_then(|counts| {
                    w.flush()?;
                    w.inner.get_ref().sync_all()?;
                    if target.symlink_metadata().is_ok() {
                        return Err(Error::invalid(
                            "path",
                            format!("{} appeared while exporting", p.display()),
                            "choose a new file name (exports never overwrite)",
                        ));
                    }
                    std::fs::rename(&tmp, &target)?;
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
