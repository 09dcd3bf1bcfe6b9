//! CPU time one `recall` costs in-process, by mode, over the cached benchmark corpus: every
//! thread of the process counted (the vector search's, the access-count writer's), read from
//! `/proc` before and after a series of distinct queries, so other load on the machine does not
//! inflate it as it does wall time. Prints a markdown table of the median over the rounds.
//! Run: `cargo run --release --example recall_cpu` (100,000 memories; `-- --memories N`,
//! `--queries N`, `--rounds N` change the corpus, the queries per round and the rounds;
//! `--mode text|vector|hybrid` measures one mode only, as when profiling it; `--written N`
//! first writes N more memories ten at a time, each write committed to the text index as a
//! serving store commits it, which leaves the index in several segments as a store written
//! over time has them, where the cached corpus's is one merged segment); `--namespace NAME`
//! scopes every recall to one namespace (the corpus's are `default`, 40 % of the memories,
//! `project-atlas` 25 %, `user-prefs` 15 %, `research` 12 % and `ops` 8 %).

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;
#[allow(dead_code, unused_macros)]
#[macro_use]
#[path = "common/report.rs"]
mod report;

use std::process::ExitCode;
use std::sync::Arc;

use mnemograph::model::{NamespaceScope, RecallMode, RecallQuery};
use mnemograph::{Config, Engine};

use fixture::{BIG_CORPUS, Corpus};

struct Args {
    memories: usize,
    queries: usize,
    rounds: usize,
    modes: Vec<RecallMode>,
    written: usize,
    namespace: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        memories: BIG_CORPUS,
        queries: 2_000,
        rounds: 5,
        modes: vec![RecallMode::Text, RecallMode::Vector, RecallMode::Hybrid],
        written: 0,
        namespace: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        if flag == "--mode" {
            let mode = match value.as_str() {
                "text" => RecallMode::Text,
                "vector" => RecallMode::Vector,
                "hybrid" => RecallMode::Hybrid,
                _ => return Err(format!("--mode {value:?}: use text, vector or hybrid")),
            };
            a.modes = vec![mode];
            continue;
        }
        if flag == "--namespace" {
            a.namespace = Some(value);
            continue;
        }
        let n: usize = value
            .parse()
            .map_err(|_| format!("{flag} {value:?}: give a whole number"))?;
        match flag.as_str() {
            "--memories" => a.memories = n,
            "--queries" => a.queries = n.max(1),
            "--rounds" => a.rounds = n.max(1),
            "--written" => a.written = n,
            _ => {
                return Err(format!(
                    "unknown flag {flag}: use --memories, --queries, --rounds, --mode, --written, \
                     --namespace"
                ));
            }
        }
    }
    Ok(a)
}

/// One measured round: its own function, so that a profiler can count its instructions alone,
/// every thread's (`valgrind --tool=callgrind --dump-before=recall_cpu::round
/// --dump-after=recall_cpu::round`: the second part is the round).
#[inline(never)]
fn round(engine: &Engine, queries: &[RecallQuery]) {
    for q in queries {
        engine.recall(q).expect("recall");
    }
}

/// Memories per write of `--written`.
const WRITE_BATCH: usize = 10;

/// The sizes of the text index's segments, largest first, as its metadata lists them.
fn text_segments(db: &std::path::Path) -> String {
    let meta = db.with_extension("db.index").join("text").join("meta.json");
    let meta: serde_json::Value = std::fs::read_to_string(&meta)
        .ok()
        .and_then(|m| serde_json::from_str(&m).ok())
        .unwrap_or_default();
    let mut sizes: Vec<u64> = meta["segments"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["max_doc"].as_u64()).collect())
        .unwrap_or_default();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    format!("{} ({sizes:?} documents)", sizes.len())
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            note!("recall_cpu: {e}");
            return ExitCode::from(2);
        }
    };
    let corpus = Corpus::new();
    let (dir, db) = fixture::scratch_copy(a.memories);
    let engine = Arc::new(Engine::open(Config::for_db(&db)).expect("open engine"));
    engine.sync_text().expect("sync the text index");
    // The vector index loads in the background: wait until it answers by meaning. A cached
    // dump of another format is not loaded; the index is then built from the stored vectors.
    let waiting = std::time::Instant::now();
    while engine.vector_lag().expect("lag") != 0 {
        if waiting.elapsed() > std::time::Duration::from_secs(5) {
            note!("recall_cpu: the cached vector dump was not loaded; building the index");
            engine.reindex_vectors().expect("build the vector index");
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Fresh memories (keys never in the cached corpus), each write of ten committed to the text
    // index before the next.
    // The background job embeds and indexes their vectors as a server's does; it stops before
    // the measurement.
    if a.written > 0 {
        let jobs = engine.start_background().expect("start the background job");
        for start in (0..a.written).step_by(WRITE_BATCH) {
            let n = WRITE_BATCH.min(a.written - start);
            let items = corpus.memories(fixture::FRESH_BASE + start as u64, n);
            engine.remember(&items).expect("remember");
            engine.sync_text().expect("commit the text index");
        }
        let waiting = std::time::Instant::now();
        while engine.vector_lag().expect("lag") != 0 {
            assert!(
                waiting.elapsed() < std::time::Duration::from_secs(300),
                "the written memories' vectors were not indexed in 5 minutes"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        drop(jobs);
        note!(
            "recall_cpu: {} memories written {WRITE_BATCH} at a time; text index segments: {}",
            a.written,
            text_segments(&db)
        );
    }
    let pid = std::process::id();
    out!(
        "| mode | memories | queries × rounds | CPU per recall, median (min–max) |\n|---|---:|---:|---:|"
    );
    for &mode in &a.modes {
        let query = |i: usize| RecallQuery {
            text: corpus.query(i as u64),
            limit: 10,
            mode,
            namespaces: match &a.namespace {
                Some(ns) => NamespaceScope::Only(vec![ns.clone()]),
                None => NamespaceScope::All,
            },
            ..RecallQuery::default()
        };
        for i in 0..200 {
            engine.recall(&query(5_000_000 + i)).expect("recall");
        }
        let mut per: Vec<f64> = Vec::with_capacity(a.rounds);
        for r in 0..a.rounds {
            let queries: Vec<RecallQuery> =
                (0..a.queries).map(|i| query(r * a.queries + i)).collect();
            let before = report::cpu_seconds(pid).expect("CPU time from /proc");
            round(&engine, &queries);
            let after = report::cpu_seconds(pid).expect("CPU time from /proc");
            per.push((after - before) * 1e3 / a.queries as f64);
        }
        per.sort_by(f64::total_cmp);
        out!(
            "| {mode:?} | {} | {} × {} | {:.2} ms ({:.2}–{:.2}) |",
            a.memories,
            a.queries,
            a.rounds,
            per[per.len() / 2],
            per[0],
            per[per.len() - 1]
        );
    }
    drop(engine);
    drop(dir);
    ExitCode::SUCCESS
}
