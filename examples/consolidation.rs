//! Consolidation at scale: 100,000 memories of the seeded benchmark corpus plus 10,000
//! near-duplicates (every tenth memory stored again with a word added), embedded and indexed;
//! then a dry run and a real run with the default steps and policy, while another thread keeps
//! recalling (hybrid, 10 hits, one query every [`RECALL_GAP_MS`] — a busy agent, not a loop
//! that takes a whole core from the run). Prints a markdown table: dry-run and run times, what the run did,
//! the peak resident memory of the run, and recall p50/p99 during it, against the floors.
//! Run: `cargo run --release --example consolidation [-- --memories N]` (default 100,000).

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use mnemograph::engine::RememberItem;
use mnemograph::engine::control::Progressing;
use mnemograph::engine::curate::ConsolidateRequest;
use mnemograph::model::{RecallMode, RecallQuery};
use mnemograph::{Config, Engine};

use fixture::{BIG_CORPUS, BUILD_BATCH, Corpus};

/// Every this many memories one is stored again, slightly changed.
const DUPLICATE_EVERY: usize = 10;
/// Pause between two recall queries during the run.
const RECALL_GAP_MS: u64 = 10;
const FLOOR_RUN_S: f64 = 60.0;
const FLOOR_DRY_S: f64 = 30.0;
const FLOOR_RSS_MIB: f64 = 1024.0;
const FLOOR_RECALL_P99_MS: f64 = 50.0;

macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// A memory said again: the same words and one more.
fn again(mut m: RememberItem) -> RememberItem {
    m.content.push_str(" Indeed.");
    m.name = None;
    m
}

/// Peak resident memory since the last reset, in MiB (Linux; `None` elsewhere).
fn peak_rss_mib() -> Option<f64> {
    status_mib("VmHWM:")
}

/// Resident memory now, in MiB (Linux; `None` elsewhere).
fn rss_mib() -> Option<f64> {
    status_mib("VmRSS:")
}

fn status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Starts a new peak for [`peak_rss_mib`] (Linux ≥ 4.0).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The corpus size: `--memories N`, or the benchmark's 100,000.
fn corpus_size() -> anyhow::Result<usize> {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next()) {
        (None, _) => Ok(BIG_CORPUS),
        (Some("--memories"), Some(n)) => n
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= BUILD_BATCH)
            .ok_or_else(|| anyhow::anyhow!("--memories needs a count of at least {BUILD_BATCH}")),
        _ => anyhow::bail!("usage: consolidation [--memories N]"),
    }
}

fn run() -> anyhow::Result<()> {
    let n = corpus_size()?;
    let dir = tempfile::tempdir()?;
    let engine = Arc::new(Engine::open(Config::for_db(dir.path().join("bench.db")))?);
    let corpus = Corpus::new();
    let started = Instant::now();
    let mut stored = 0usize;
    for start in (0..n).step_by(BUILD_BATCH) {
        let mut batch = corpus.memories(start as u64, BUILD_BATCH);
        let dups: Vec<RememberItem> = batch
            .iter()
            .step_by(DUPLICATE_EVERY)
            .cloned()
            .map(again)
            .collect();
        batch.extend(dups);
        stored += engine
            .remember(&batch)?
            .into_iter()
            .filter(|r| r.as_ref().is_ok_and(|r| !r.duplicate))
            .count();
    }
    engine.reindex_vectors()?;
    say!(
        "{stored} memories stored and embedded in {:.1} s ({} cores)\n",
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let _jobs = engine.start_background()?;
    let req = |dry_run| ConsolidateRequest {
        dry_run,
        started_by: "example:consolidation".into(),
        ..ConsolidateRequest::default()
    };
    let t = Instant::now();
    let dry = engine.consolidate(&req(true), &Progressing::default())?;
    let dry_s = t.elapsed().as_secs_f64();

    let running = Arc::new(AtomicBool::new(true));
    let reader = {
        let (engine, running) = (Arc::clone(&engine), Arc::clone(&running));
        std::thread::spawn(move || {
            let corpus = Corpus::new();
            let mut times = Vec::new();
            let mut i = 0u64;
            while running.load(Ordering::Acquire) {
                let q = RecallQuery {
                    text: corpus.query(i),
                    limit: 10,
                    mode: RecallMode::Hybrid,
                    ..RecallQuery::default()
                };
                let t = Instant::now();
                let _ = engine.recall(&q);
                times.push(t.elapsed().as_secs_f64() * 1e3);
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(RECALL_GAP_MS));
            }
            times
        })
    };
    let before = rss_mib();
    reset_peak_rss();
    let t = Instant::now();
    let report = engine.consolidate(&req(false), &Progressing::default())?;
    let run_s = t.elapsed().as_secs_f64();
    let rss = peak_rss_mib();
    running.store(false, Ordering::Release);
    let mut times = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the recall thread panicked"))?;
    times.sort_by(f64::total_cmp);
    let c = &report.counts;
    say!(
        "dry run: would merge {} into {} survivors, archive {}",
        dry.counts.merged,
        dry.counts.survivors,
        dry.counts.archived
    );
    say!(
        "run: examined {}, merged {} into {} survivors, archived {}, relations moved {} folded {} closed {}\n",
        c.examined,
        c.merged,
        c.survivors,
        c.archived,
        c.relations_moved,
        c.relations_folded,
        c.relations_closed
    );
    let steps = |r: &mnemograph::engine::curate::RunReport| {
        r.step_millis
            .iter()
            .map(|(s, ms)| format!("{s} {:.1} s", *ms as f64 / 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    };
    say!("dry run by step: {}", steps(&dry));
    say!("run by step: {}\n", steps(&report));
    say!("| measure | value | floor | |");
    say!("|---|---:|---:|---|");
    say!(
        "| run, default steps | {run_s:.1} s | ≤ {FLOOR_RUN_S} s | {} |",
        verdict(run_s <= FLOOR_RUN_S)
    );
    say!(
        "| dry run | {dry_s:.1} s | ≤ {FLOOR_DRY_S} s | {} |",
        verdict(dry_s <= FLOOR_DRY_S)
    );
    match (rss, before) {
        (Some(mib), Some(before)) => say!(
            "| peak RSS during the run (before it: {before:.0} MiB) | {mib:.0} MiB | ≤ {FLOOR_RSS_MIB} MiB | {} |",
            verdict(mib <= FLOOR_RSS_MIB)
        ),
        _ => say!("| peak RSS during the run | n/a | ≤ {FLOOR_RSS_MIB} MiB | |"),
    }
    let p99 = percentile(&times, 0.99);
    say!(
        "| recall p50 during the run ({} queries, one every {RECALL_GAP_MS} ms) | {:.1} ms | | |",
        times.len(),
        percentile(&times, 0.5)
    );
    say!(
        "| recall p99 during the run | {p99:.1} ms | ≤ {FLOOR_RECALL_P99_MS} ms | {} |",
        verdict(p99 <= FLOOR_RECALL_P99_MS)
    );
    Ok(())
}
