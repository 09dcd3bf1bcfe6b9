//! Bulk import: read a source record by record (any of the `formats`), in batches: validate,
//! embed what is new on the rayon pool outside the write lock, write each batch in one
//! transaction together with the task's checkpoint. Idempotent (a record already imported, by
//! source id, name or content, is left alone) and resumable (a task goes on after the last
//! committed batch, with the counts it had).

mod apply;
pub mod source;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};

use serde::{Deserialize, Serialize};

use crate::engine::control::{Control, WorkKind, WorkProgress};
use crate::engine::vectors::{embed_parallel, embed_text};
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::formats::{self, Flow, InFormat, Record};
use crate::model::{DEFAULT_NAMESPACE, now_millis};
use crate::store::tasks;

use apply::Item;
pub use source::{Source, SourceFile};

/// Records per transaction.
const BATCH: usize = 2_000;
/// Errors a report lists (all are counted).
pub const MAX_REPORTED_ERRORS: usize = 20;
/// Bytes of a source read to tell its format.
const SNIFF_BYTES: usize = 64 * 1024;
/// Roughly how many source bytes an import gets through per millisecond (for the estimate).
const BYTES_PER_MS: f64 = 1_500.0;

/// One import, as a caller asks for it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImportRequest {
    pub source: Source,
    /// `None`: told from the data (per file for a folder).
    pub format: Option<InFormat>,
    /// Namespace of every record; `None`: the records' own (mnemograph JSONL) or the default.
    pub namespace: Option<String>,
    /// Report what would happen; write nothing.
    pub dry_run: bool,
    /// Who imports, for history (`tool:import`, `cli`).
    pub actor: String,
    /// Stop once about this many records changed the database (checked per batch; callers
    /// that cannot wait). A repeat of the call goes on: what is stored is skipped.
    pub max_records: Option<u64>,
    /// The namespaces the importer may write: a record for another namespace, or a relation
    /// with an end outside them, is a bad record.
    pub access: Access,
    /// The job the memories it adds (or adds to) are filed under, with the batch that writes
    /// them: what the import learned, when the job is resumed.
    #[serde(default)]
    pub job: Option<crate::model::JobRef>,
}

/// What an import did (or, for a dry run, would do).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ImportReport {
    /// Formats read, by name.
    pub formats: Vec<String>,
    pub files: u64,
    /// Records read, good and bad.
    pub records: u64,
    pub memories_added: u64,
    /// Records already stored (imported before, same name and content, same content).
    pub memories_existing: u64,
    /// Named memories that gained lines (MCP memory observations).
    pub memories_merged: u64,
    pub relations_added: u64,
    pub relations_existing: u64,
    /// Vectors stored with the new memories (embedded now or carried by the source).
    pub vectors_added: u64,
    pub errors: u64,
    /// The first errors, "file:line N: reason".
    pub first_errors: Vec<String>,
    pub dry_run: bool,
    /// Stopped at `max_records`: import again to go on (what is stored is skipped).
    pub truncated: bool,
    /// Records skipped because a previous run of the same task had committed them.
    pub resumed_after: u64,
    /// Problems that did not stop the import (e.g. the embedder failed: vectors come later).
    pub warnings: Vec<String>,
}

/// Where a task's import stands after a committed batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    /// Items (records, good or bad) of the source consumed, in reading order.
    items: u64,
    report: ImportReport,
    /// Names and sizes of the source's files: a resume skips `items` only from the same files.
    #[serde(default)]
    source: String,
    /// The namespaces the records consumed so far write to (see [`Run::written`]).
    #[serde(default)]
    namespaces: Vec<String>,
}

/// What a checkpoint was taken over: the files of the source in order, with their sizes.
fn fingerprint(files: &[SourceFile]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for f in files {
        h.update(f.name.as_bytes());
        h.update([0]);
        h.update(f.size.to_le_bytes());
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The state of one running import.
struct Run<'a> {
    engine: &'a Engine,
    req: &'a ImportRequest,
    ctl: &'a dyn Control,
    report: ImportReport,
    /// Items consumed so far (those of a resumed run's earlier life included).
    items: u64,
    /// Items to skip: committed by an earlier life of this task.
    skip: u64,
    total: u64,
    batch: Vec<Item>,
    file_name: String,
    multi_file: bool,
    dry_seen: HashSet<String>,
    source_print: String,
    /// The namespaces this import writes to: the one it was given (or the default) and those
    /// of its memory records so far. Relation ends given by id are looked up in these only,
    /// so a relation never attaches to a memory of another namespace that happens to hold
    /// the id a record of the file had to give up.
    written: BTreeSet<String>,
}

impl Engine {
    /// Checks an import request (source within the roots, inline size, format known) and
    /// estimates its cost in milliseconds, without reading more than the file sizes.
    pub fn estimate_import(&self, req: &ImportRequest) -> Result<f64> {
        if let Some(ns) = &req.namespace {
            self.resolve_namespace("namespace", Some(ns))?;
            req.access.check("namespace", ns)?;
        }
        let files = source::files("source", &req.source, &self.cfg.transfer_roots())?;
        let bytes: u64 = files.iter().map(|f| f.size).sum();
        Ok(bytes as f64 / BYTES_PER_MS)
    }

    /// Runs an import to its end (or to `max_records`), reporting progress to `ctl`, which
    /// also stops it (committed batches stay). See the module documentation.
    pub fn import(&self, req: &ImportRequest, ctl: &dyn Control) -> Result<ImportReport> {
        struct Bulk<'e>(&'e std::sync::atomic::AtomicUsize);
        impl Drop for Bulk<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            }
        }
        self.bulk.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _bulk = Bulk(&self.bulk);
        if let Some(ns) = &req.namespace {
            self.resolve_namespace("namespace", Some(ns))?;
            req.access.check("namespace", ns)?;
        }
        let files = source::files("source", &req.source, &self.cfg.transfer_roots())?;
        let resume: Option<Checkpoint> = ctl
            .resume_from()
            .and_then(|v| serde_json::from_value(v).ok());
        let mut run = Run {
            engine: self,
            req,
            ctl,
            report: ImportReport {
                dry_run: req.dry_run,
                ..ImportReport::default()
            },
            items: 0,
            skip: 0,
            total: 0,
            batch: Vec::with_capacity(BATCH),
            file_name: String::new(),
            multi_file: files.len() > 1,
            dry_seen: HashSet::new(),
            source_print: String::new(),
            written: BTreeSet::from([req
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())]),
        };
        let source_print = fingerprint(&files);
        match resume {
            Some(cp) if cp.source == source_print => {
                tracing::info!(
                    items = cp.items,
                    "import resumes after its last committed batch"
                );
                run.skip = cp.items;
                run.written.extend(cp.namespaces);
                run.report = cp.report;
                run.report.resumed_after = cp.items;
            }
            Some(_) => {
                tracing::warn!(
                    "the source changed since the import stopped; reading it again from the start"
                );
                run.report.warnings.push("the source changed since this import stopped: it was read again from the start (what was stored is skipped)".into());
            }
            None => {}
        }
        run.source_print = source_print;
        run.report.files = files.len() as u64;
        for f in &files {
            run.total += count_items(f, &req.source, req.format).unwrap_or(0);
        }
        for f in &files {
            if run.stopped() {
                break;
            }
            run.read_file(f)?;
        }
        run.flush()?;
        if !req.dry_run && self.has_background() {
            // What was imported is found by meaning as soon as the import returns: the vectors
            // the background job has not staged yet are staged now (the graph takes them in
            // later; searches read staged vectors meanwhile).
            if let Err(e) = self.sync_vectors(None) {
                tracing::warn!(error = %e, "the vector index could not catch up after the import");
            }
        }
        if run.report.records == 0 && run.skip == 0 {
            return Err(Error::invalid(
                "source",
                "is empty: it holds no records",
                "give a source with at least one memory or relation",
            ));
        }
        if req.dry_run {
            run.report
                .warnings
                .push("dry run: nothing was written".into());
        }
        run.progress();
        Ok(run.report)
    }
}

/// Items in a JSONL source (one per non-blank line), for the progress total; `None` when the
/// format is not line-based.
fn count_items(f: &SourceFile, src: &Source, format: Option<InFormat>) -> Option<u64> {
    let mut reader = open(f, src).ok()?;
    let head = reader.fill_buf().ok()?.to_vec();
    let format = format.or_else(|| formats::detect::detect(&head, Some(&f.name)))?;
    if !matches!(format, InFormat::Mnemograph | InFormat::McpMemory) {
        return None;
    }
    let mut n = 0u64;
    let mut last = b'\n';
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let got = reader.read(&mut buf).ok()?;
        if got == 0 {
            break;
        }
        for &b in &buf[..got] {
            if b == b'\n' && last != b'\n' {
                n += 1;
            }
            last = b;
        }
    }
    if last != b'\n' {
        n += 1;
    }
    // The header line of an export is not an item (its keys come in any order).
    let head = head.strip_prefix(formats::BOM).unwrap_or(&head);
    let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let header =
        serde_json::from_slice::<serde_json::Value>(first).is_ok_and(|v| v["type"] == "header");
    Some(n.saturating_sub(u64::from(header)))
}

fn open<'s>(f: &SourceFile, src: &'s Source) -> Result<Box<dyn BufRead + 's>> {
    match (&f.path, src) {
        (None, Source::Inline(text)) => Ok(Box::new(text.as_bytes())),
        (Some(p), _) => {
            let file = std::fs::File::open(p).map_err(|e| {
                Error::invalid(
                    "source",
                    format!("{} could not be opened ({e})", f.name),
                    "check that the file still exists and is readable, then import again",
                )
            })?;
            Ok(Box::new(BufReader::with_capacity(SNIFF_BYTES, file)))
        }
        (None, _) => Err(Error::Internal("inline file without inline data".into())),
    }
}

impl Run<'_> {
    fn stopped(&self) -> bool {
        self.report.truncated
    }

    /// Records that changed the database (what `max_records` limits; records already stored
    /// do not count, so a repeated call goes on where the last one stopped).
    fn changed(&self) -> u64 {
        let r = &self.report;
        r.memories_added + r.memories_merged + r.relations_added
    }

    fn error(&mut self, at: String, reason: &str) {
        self.report.add_error(&at, None, reason);
    }

    /// How a report names line `l` of the file being read.
    fn place(&self) -> impl Fn(u64) -> String + use<> {
        let file = self.multi_file.then(|| self.file_name.clone());
        move |l| match &file {
            Some(f) => format!("{f}:{l}"),
            None => format!("line {l}"),
        }
    }

    fn read_file(&mut self, f: &SourceFile) -> Result<()> {
        self.file_name = f.name.clone();
        let mut reader = match open(f, &self.req.source) {
            Ok(r) => r,
            Err(e) if self.multi_file => {
                self.error(f.name.clone(), &e.to_string());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let head = reader.fill_buf()?;
        let format = match self
            .req
            .format
            .or_else(|| formats::detect::detect(head, Some(&f.name)))
        {
            Some(fmt) => fmt,
            None if head.is_empty() && !self.multi_file => {
                return Err(Error::invalid(
                    "source",
                    format!("{} is empty", f.name),
                    "give a source with at least one record",
                ));
            }
            None => {
                let err = Error::invalid(
                    "format",
                    format!("cannot tell the format of {}", f.name),
                    format!(
                        "name it with `format`: one of {}",
                        InFormat::ALL.map(|f| f.name()).join(", ")
                    ),
                );
                if self.multi_file {
                    self.error(f.name.clone(), &err.to_string());
                    return Ok(());
                }
                return Err(err);
            }
        };
        if !self.report.formats.iter().any(|n| n == format.name()) {
            self.report.formats.push(format.name().to_owned());
        }
        let doc = f.name.clone();
        let mut failure: Option<Error> = None;
        let res = formats::read(
            format,
            &mut reader,
            &doc,
            &mut |item| match self.on_item(item) {
                Ok(flow) => Ok(flow),
                Err(e) => {
                    failure = Some(e);
                    Ok(Flow::Stop)
                }
            },
        );
        if let Some(e) = failure {
            return Err(e);
        }
        match res {
            Ok(()) => Ok(()),
            // A source that turns unreadable part-way: what was read is kept.
            Err(e @ (Error::InvalidArgument { .. } | Error::Io(_))) if self.multi_file => {
                self.error(f.name.clone(), &e.to_string());
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn on_item(&mut self, item: formats::Item) -> Result<Flow> {
        self.items += 1;
        if self.items <= self.skip {
            return Ok(Flow::Continue);
        }
        self.report.records += 1;
        let ns = self.req.namespace.as_deref();
        let it = match item {
            Err(bad) => Item::Bad {
                line: bad.line,
                reason: bad.reason,
            },
            Ok((line, Record::Memory(m))) => self.engine.validate_record(line, *m, ns),
            Ok((line, Record::Relation(r))) => self.engine.validate_relation(line, r),
        };
        self.batch.push(it);
        if self.batch.len() >= BATCH {
            self.flush()?;
            if let Some(max) = self.req.max_records
                && self.changed() >= max
            {
                self.report.truncated = true;
                return Ok(Flow::Stop);
            }
        }
        if self.ctl.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(Flow::Continue)
    }

    fn progress(&self) {
        // A resumed import reads its skipped records again first: it counts from where it was.
        let done = self.items.max(self.skip);
        self.ctl.report(&WorkProgress {
            kind: WorkKind::Import,
            visited: done,
            done,
            total: self.total,
            errors: self.report.errors,
            ..WorkProgress::default()
        });
    }

    /// Writes the pending batch (with the checkpoint) and folds its counts into the report.
    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let items: Vec<Item> = std::mem::take(&mut self.batch)
            .into_iter()
            .map(|it| it.within(&self.req.access))
            .collect();
        let engine = self.engine;
        let ns = self.req.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        for it in &items {
            if let Item::Memory { new, .. } = it
                && !self.written.contains(&new.namespace)
            {
                self.written.insert(new.namespace.clone());
            }
        }
        let place = self.place();
        if self.req.dry_run {
            let counts = engine.dry_batch(&items, ns, &self.written, &mut self.dry_seen)?;
            self.report.add(&counts, place);
        } else {
            let vectors = self.embed_new(&items);
            let written = &self.written;
            let now = now_millis();
            let task = self.ctl.task_id();
            let mut report = self.report.clone();
            let checkpoint = engine.store.write(|tx| {
                let counts = engine.apply_batch(tx, &items, &vectors, self.req, written, now)?;
                report.add(&counts, place);
                let cp = serde_json::to_value(Checkpoint {
                    items: self.items,
                    report: report.clone(),
                    source: self.source_print.clone(),
                    namespaces: written.iter().cloned().collect(),
                })?;
                if let Some(id) = &task {
                    tasks::set_checkpoint(tx, id, &cp)?;
                }
                Ok(cp)
            })?;
            self.report = report;
            // Progress first, so what is recorded with the checkpoint counts this batch.
            self.progress();
            self.ctl.checkpointed(&checkpoint);
            engine.mark_dirty();
            return Ok(());
        }
        self.progress();
        Ok(())
    }

    /// Embeddings of the batch's new memories that carry no usable vector, computed on the
    /// rayon pool before the write lock is taken. A failing embedder is a warning: the
    /// background job embeds what is missing later.
    fn embed_new(&mut self, items: &[Item]) -> HashMap<usize, Vec<f32>> {
        let Some(embedder) = self.engine.embedder.clone() else {
            return HashMap::new();
        };
        let fresh = match self.engine.new_records(items) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "could not look up which records are new");
                return HashMap::new();
            }
        };
        let (model, dim) = (embedder.model_id(), embedder.dim());
        let wanted: Vec<(usize, String)> = fresh
            .into_iter()
            .filter_map(|i| match &items[i] {
                Item::Memory { rec, new, .. } => {
                    let carried = rec
                        .vector
                        .as_ref()
                        .is_some_and(|v| v.model == model && v.vec.len() == dim);
                    (!carried).then(|| (i, embed_text(new.name.as_deref(), &new.content)))
                }
                _ => None,
            })
            .collect();
        if wanted.is_empty() {
            return HashMap::new();
        }
        let texts: Vec<String> = wanted.iter().map(|(_, t)| t.clone()).collect();
        match embed_parallel(embedder.as_ref(), &texts) {
            Ok(vecs) => wanted.into_iter().map(|(i, _)| i).zip(vecs).collect(),
            Err(e) => {
                let w = format!(
                    "embeddings could not be computed now ({e}); the background job adds them later"
                );
                if !self.report.warnings.contains(&w) {
                    tracing::warn!(error = %e, "import could not embed a batch");
                    self.report.warnings.push(w);
                }
                HashMap::new()
            }
        }
    }
}

impl ImportReport {
    /// Counts one failed record and lists it among the first errors, at `at` ("line 7",
    /// "notes/a.md:7"); a reason that already starts with its line loses that prefix.
    fn add_error(&mut self, at: &str, line: Option<u64>, reason: &str) {
        self.errors += 1;
        if self.first_errors.len() >= MAX_REPORTED_ERRORS {
            return;
        }
        let mut reason = reason.strip_prefix(&format!("{at}: ")).unwrap_or(reason);
        if let Some(l) = line {
            reason = reason
                .strip_prefix(&format!("line {l}: "))
                .or_else(|| reason.strip_prefix(&format!("line {l} ")))
                .unwrap_or(reason);
        }
        self.first_errors.push(format!("{at}: {reason}"));
    }

    /// Adds one batch's counts; `at` names the place of an error line.
    fn add(&mut self, c: &apply::Counts, at: impl Fn(u64) -> String) {
        self.memories_added += c.memories_added;
        self.memories_existing += c.memories_existing;
        self.memories_merged += c.memories_merged;
        self.relations_added += c.relations_added;
        self.relations_existing += c.relations_existing;
        self.vectors_added += c.vectors_added;
        for (l, reason) in &c.errors {
            self.add_error(&at(*l), Some(*l), reason);
        }
    }
}

#[cfg(test)]
mod tests;
