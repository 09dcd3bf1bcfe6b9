//! `mnemograph import` and `mnemograph export` for operators: progress on stderr (a bar on a
//! terminal, a plain line every few seconds otherwise), the report on stdout.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::engine::control::status_message;
use crate::engine::control::{Control, WorkProgress};
use crate::engine::export::{ExportRequest, ExportTarget, OutFormat};
use crate::engine::import::{ImportRequest, Source};
use crate::engine::traverse::TraverseRequest;
use crate::formats::InFormat;

/// Prints progress to stderr, not more often than every `every`.
pub(super) struct Progress {
    terminal: bool,
    every: Duration,
    last: Mutex<Option<Instant>>,
}

impl Progress {
    pub(super) fn new() -> Progress {
        let terminal = std::io::stderr().is_terminal();
        Progress {
            terminal,
            every: if terminal {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(2)
            },
            last: Mutex::new(None),
        }
    }

    fn line(p: &WorkProgress) -> String {
        let msg = status_message(p);
        if p.total == 0 {
            return msg;
        }
        Progress::bar(p.done, p.total, &msg)
    }

    /// `[#########                     ]  30%  msg`: `done` of `total` as a bar before `msg`.
    pub(super) fn bar(done: u64, total: u64, msg: &str) -> String {
        let share = (done as f64 / total.max(1) as f64).clamp(0.0, 1.0);
        let filled = (share * 30.0).round() as usize;
        format!(
            "[{}{}] {:>3.0}%  {msg}",
            "#".repeat(filled),
            " ".repeat(30 - filled),
            share * 100.0
        )
    }

    /// Shows the line `make` makes, unless one was shown less than a period ago: rewritten in
    /// place on a terminal, a line of its own otherwise.
    #[allow(clippy::print_stderr)]
    pub(super) fn show(&self, make: impl FnOnce() -> String) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.is_some_and(|t| t.elapsed() < self.every) {
            return;
        }
        *last = Some(Instant::now());
        let line = make();
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }

    pub(super) fn finish(&self) {
        if self.terminal {
            let _ = writeln!(std::io::stderr());
        }
    }
}

impl Control for Progress {
    fn report(&self, p: &WorkProgress) {
        self.show(|| Progress::line(p));
    }

    fn is_cancelled(&self) -> bool {
        false
    }
}

/// Imports each path in turn, printing one report per path, then brings the text index up to
/// date (also after a failure: what was committed is indexed), so the next process on the
/// database does not index the whole import on its first read.
pub(super) fn import(
    engine: &Engine,
    paths: &[PathBuf],
    format: Option<&str>,
    namespace: Option<String>,
    dry_run: bool,
) -> anyhow::Result<bool> {
    let res = import_each(engine, paths, format, namespace, dry_run);
    let caught_up = if dry_run {
        Ok(())
    } else {
        catch_up_text(engine).and_then(|()| write_vector_file(engine))
    };
    let clean = res?;
    caught_up?;
    Ok(clean)
}

/// Writes the compact vector file from the stored vectors, so the next process searches by
/// meaning from its first call (its HNSW graph is built in the background meanwhile).
fn write_vector_file(engine: &Engine) -> anyhow::Result<()> {
    let started = Instant::now();
    if let Some(n) = engine.write_flat_from_store()? {
        writeln!(
            std::io::stdout().lock(),
            "vector file: {n} vectors written in {:.1} s",
            started.elapsed().as_secs_f64()
        )?;
    }
    Ok(())
}

/// Indexes the text of what the import wrote, saying so on stderr (it takes seconds at 100,000
/// memories).
#[allow(clippy::print_stderr)]
fn catch_up_text(engine: &Engine) -> anyhow::Result<()> {
    let lag = engine.text_lag()?;
    if lag == 0 {
        return Ok(());
    }
    let started = Instant::now();
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "indexing the text of {lag} changes…");
    drop(err);
    engine.sync_text()?;
    let left = engine.text_lag()?;
    let mut out = std::io::stdout().lock();
    if left == 0 {
        writeln!(
            out,
            "text index: {lag} changes indexed in {:.1} s",
            started.elapsed().as_secs_f64()
        )?;
    } else {
        writeln!(
            out,
            "text index: {left} of {lag} changes left to the process that holds the index writer (a running server indexes them)"
        )?;
    }
    Ok(())
}

fn import_each(
    engine: &Engine,
    paths: &[PathBuf],
    format: Option<&str>,
    namespace: Option<String>,
    dry_run: bool,
) -> anyhow::Result<bool> {
    let format = match format {
        None => None,
        Some(f) => Some(InFormat::parse(f).ok_or_else(|| {
            anyhow::anyhow!(
                "unknown --format {f:?}; use one of {}",
                InFormat::ALL.map(|f| f.name()).join(", ")
            )
        })?),
    };
    let mut all_ok = true;
    let mut out = std::io::stdout().lock();
    for path in paths {
        let req = ImportRequest {
            source: Source::Path(path.clone()),
            format,
            namespace: namespace.clone(),
            dry_run,
            actor: "cli:import".into(),
            max_records: None,
            access: crate::engine::Access::All,
            job: None,
        };
        let progress = Progress::new();
        let started = Instant::now();
        let res = engine.import(&req, &progress);
        progress.finish();
        let report = res.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        all_ok &= report.errors == 0;
        writeln!(
            out,
            "{}: {} records in {:.1} s · memories +{} ({} already there, {} merged) · relations +{} ({} already there) · vectors +{} · {} errors{}",
            path.display(),
            report.records,
            started.elapsed().as_secs_f64(),
            report.memories_added,
            report.memories_existing,
            report.memories_merged,
            report.relations_added,
            report.relations_existing,
            report.vectors_added,
            report.errors,
            if report.dry_run {
                " · dry run, nothing written"
            } else {
                ""
            }
        )?;
        for e in &report.first_errors {
            writeln!(out, "  {e}")?;
        }
        if report.errors > report.first_errors.len() as u64 {
            writeln!(
                out,
                "  … and {} more",
                report.errors - report.first_errors.len() as u64
            )?;
        }
        for w in &report.warnings {
            writeln!(out, "  warning: {w}")?;
        }
    }
    Ok(all_ok)
}

/// Exports to `out` (a new file) or to stdout: the namespaces named (all when none), or what a
/// walk reaches; with each memory's vector and history when asked (jsonl).
pub(super) fn export(
    engine: &Engine,
    format: &str,
    namespaces: Vec<String>,
    subgraph: Option<TraverseRequest>,
    (vectors, history): (bool, bool),
    out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let format = OutFormat::parse(format).ok_or_else(|| {
        anyhow::anyhow!("unknown --format {format:?}; use jsonl, graphml, dot or html")
    })?;
    let req = ExportRequest {
        namespaces: (!namespaces.is_empty()).then_some(namespaces),
        format,
        subgraph,
        vectors,
        history,
    };
    let progress = Progress::new();
    let started = Instant::now();
    match out {
        Some(path) => {
            let done = engine.export_to(&req, &ExportTarget::Path(path), &progress);
            progress.finish();
            let done = done?;
            let mut o = std::io::stdout().lock();
            writeln!(
                o,
                "{}: {} memories, {} relations, {} bytes in {:.2} s",
                done.path
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                done.counts.memories,
                done.counts.relations,
                done.bytes,
                started.elapsed().as_secs_f64()
            )?;
        }
        None => {
            let mut o = std::io::BufWriter::new(std::io::stdout().lock());
            let counts = engine.export(&req, &mut o, &progress);
            progress.finish();
            counts?;
            o.flush()?;
        }
    }
    Ok(())
}
