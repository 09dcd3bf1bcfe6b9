//! `mnemograph consolidate` for operators and cron: progress on stderr, one summary line (or the
//! report as JSON) on stdout; exit code 0 when the run completed, [`EXIT_BUSY`] when another run
//! holds the database (nothing was done: cron must see it).

use std::io::Write;
use std::process::ExitCode;

use crate::cli::transfer::Progress;
use crate::engine::Engine;
use crate::engine::curate::{ConsolidateRequest, RunReport};
use crate::model::format_time;

/// Exit code of a run that did nothing because another run holds the database.
pub(super) const EXIT_BUSY: u8 = 4;

/// What the command was asked to do.
#[derive(Debug, clap::Args)]
pub(super) struct Call {
    /// Only these namespaces (repeatable; default all).
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// Only these steps (repeatable): merge, summarise, contradictions, decay, archive, hygiene.
    #[arg(long = "step")]
    pub steps: Vec<String>,
    /// Policy overrides as JSON, e.g. '{"archive_unused_days": 180}'.
    #[arg(long)]
    pub policy: Option<String>,
    /// Report what would change (with examples); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report (or with --runs, the list) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Undo this run instead.
    #[arg(long)]
    pub undo: Option<String>,
    /// With --undo: undo later runs built on it first, newest first.
    #[arg(long)]
    pub cascade: bool,
    /// List the recent runs instead.
    #[arg(long)]
    pub runs: bool,
}

fn summary(r: &RunReport) -> String {
    let c = &r.counts;
    let what = if r.dry_run { "dry run" } else { "run" };
    let id = r.run_id.as_deref().unwrap_or("");
    let apart = if c.kept_apart > 0 {
        format!(
            " · {} near-duplicate pairs kept apart (they differ in a number, id, name or negation)",
            c.kept_apart
        )
    } else {
        String::new()
    };
    format!(
        "{what} {id} {} in {:.1} s: examined {} memories · {} merged into {} · {} summaries · {} contradictions ({} resolved) · {} archived · relations {} moved, {} folded, {} closed{apart}",
        r.state,
        r.millis as f64 / 1e3,
        c.examined,
        c.merged,
        c.survivors,
        c.summaries,
        c.contradictions,
        c.resolved,
        c.archived,
        c.relations_moved,
        c.relations_folded,
        c.relations_closed
    )
    .replace("  ", " ")
}

pub(super) fn run(engine: &Engine, call: Call) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if call.runs && call.json {
        // The shape of the tool's `runs: true`.
        let runs: Vec<serde_json::Value> = engine
            .consolidation_runs(20)?
            .iter()
            .map(|r| {
                let mut v = r.listing();
                v["task_id"] = serde_json::json!(r.task_id);
                v
            })
            .collect();
        writeln!(out, "{}", serde_json::json!({ "runs": runs }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if call.runs {
        for r in engine.consolidation_runs(20)? {
            writeln!(
                out,
                "{}  {:<11} {}  by {}  {}",
                r.id,
                r.state,
                format_time(r.started_at),
                r.started_by,
                r.counts
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(id) = &call.undo {
        let r = engine.undo_consolidation(id, call.cascade, "cli")?;
        if call.json {
            writeln!(out, "{}", serde_json::to_string(&r)?)?;
        } else {
            writeln!(
                out,
                "undid {}: {} memories and {} relations put back",
                r.runs.join(", "),
                r.memories,
                r.relations
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let policy = match &call.policy {
        Some(p) => Some(serde_json::from_str(p).map_err(|e| {
            anyhow::anyhow!(
                "--policy is not JSON ({e}); give an object like '{{\"archive_below\": 0.1}}'"
            )
        })?),
        None => None,
    };
    let req = ConsolidateRequest {
        namespaces: (!call.namespaces.is_empty()).then_some(call.namespaces),
        steps: (!call.steps.is_empty()).then_some(call.steps),
        policy,
        dry_run: call.dry_run,
        started_by: "cli".into(),
        ..ConsolidateRequest::default()
    };
    let progress = Progress::new();
    let res = engine.consolidate(&req, &progress);
    progress.finish();
    let report = res?;
    if let Some(holder) = &report.held_by {
        if call.json {
            writeln!(out, "{}", serde_json::to_string(&report)?)?;
        } else {
            writeln!(
                out,
                "skipped: run {holder} holds the database; nothing done"
            )?;
        }
        drop(out);
        let _ = writeln!(
            std::io::stderr(),
            "nothing done: consolidation run {holder} is running on this database (its process keeps its lease); try again when it ends (`mnemograph consolidate --runs` lists it)"
        );
        return Ok(ExitCode::from(EXIT_BUSY));
    }
    if call.json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        writeln!(out, "{}", summary(&report))?;
        for w in &report.warnings {
            writeln!(out, "warning: {w}")?;
        }
        if report.dry_run {
            for ex in &report.examples {
                let into = ex
                    .into
                    .as_deref()
                    .map(|i| format!(" → {i}"))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "  {:<8} {}{into}: {}",
                    ex.step,
                    ex.ids.join(", "),
                    ex.text
                )?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
