//! PostgreSQL as the shared store, measured against SQLite on this machine: `remember` latency
//! (one memory per call) and batch throughput, `recall` latency (the indexes are local either
//! way), change propagation from a write on one instance to a hit on another (A's write and B's
//! catch-up timed apart), and the time a fresh instance takes to build its indexes from the
//! database: its text index, then its vector index from the vectors the loader's background job
//! stored (none embedded again). Prints a markdown table.
//!
//! Run: `cargo run --release --example postgres` (starts a throwaway PostgreSQL cluster with
//! the installed binaries, durable settings: fsync and synchronous commit on; or set
//! `MNEMOGRAPH_TEST_PG=postgres://…` to a server whose user may create databases). With
//! `-- --memories N` the fresh-instance row builds from N memories (default 100,000; the
//! figure in docs/figures.md is for 1,000,000, which takes a few minutes to load).

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;
#[allow(dead_code, unused_macros)]
#[macro_use]
#[path = "common/report.rs"]
mod report;
#[allow(dead_code)]
#[path = "../tests/it/pg.rs"]
mod pg;

use std::io::Write;
use std::time::{Duration, Instant};

use mnemograph::engine::RememberItem;
use mnemograph::model::{RecallMode, RecallQuery};
use mnemograph::{Config, Engine};

use fixture::{Corpus, FRESH_BASE};
use report::summarize;

/// `remember` calls of one memory, timed one by one.
const SINGLE_CALLS: usize = 1_000;
/// Memories per batch call.
const BATCH: usize = 1_000;
/// Batch calls, timed one by one.
const BATCHES: usize = 20;
/// Recall queries, timed one by one.
const RECALLS: usize = 500;
/// Writes whose propagation to the other instance is timed.
const PROPAGATIONS: usize = 200;
/// How often the fresh instance's progress is checked.
const POLL: Duration = Duration::from_millis(50);
/// Untimed calls before each series.
const WARMUP: usize = 50;

/// The two stores to compare: a SQLite file and a fresh PostgreSQL database, as configs for one
/// instance (`index` names the instance's index folder).
struct Target {
    name: &'static str,
    cfg: Box<dyn Fn(&str) -> Config>,
}

fn targets(dir: &std::path::Path, url: &str) -> Vec<Target> {
    let (lite, pgdir, url) = (dir.join("m.db"), dir.join("pg-index"), url.to_owned());
    vec![
        Target {
            name: "SQLite",
            cfg: Box::new(move |_| Config::for_db(&lite)),
        },
        Target {
            name: "PostgreSQL",
            cfg: Box::new(move |instance| {
                let mut cfg = Config::for_postgres(url.clone(), pgdir.join(instance));
                cfg.index_dir_per_database = false;
                cfg
            }),
        },
    ]
}

fn remember_single(corpus: &Corpus, engine: &Engine, base: u64) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(SINGLE_CALLS);
    for i in 0..WARMUP + SINGLE_CALLS {
        let items = [corpus.memory(base + i as u64)];
        let started = Instant::now();
        let out = engine.remember(&items).expect("remember");
        let took = started.elapsed();
        assert!(matches!(&out[0], Ok(r) if !r.duplicate));
        if i >= WARMUP {
            samples.push(took);
        }
    }
    samples
}

/// Batches of [`BATCH`]; the overall rate in memories per second.
fn remember_batches(corpus: &Corpus, engine: &Engine, base: u64, n: usize) -> f64 {
    let mut total = Duration::ZERO;
    for b in 0..n {
        let items = corpus.memories(base + (b * BATCH) as u64, BATCH);
        let started = Instant::now();
        let out = engine.remember(&items).expect("remember");
        total += started.elapsed();
        assert!(out.iter().all(|r| matches!(r, Ok(r) if !r.duplicate)));
    }
    (n * BATCH) as f64 / total.as_secs_f64()
}

fn recall(corpus: &Corpus, engine: &Engine) -> Vec<Duration> {
    engine.sync_text().expect("sync the text index");
    let query = |i: usize| RecallQuery {
        text: corpus.query(i as u64),
        limit: 10,
        mode: RecallMode::Hybrid,
        ..RecallQuery::default()
    };
    for i in 0..WARMUP {
        engine.recall(&query(1_000_000 + i)).expect("recall");
    }
    (0..RECALLS)
        .map(|i| {
            let q = query(i);
            let started = Instant::now();
            engine.recall(&q).expect("recall");
            started.elapsed()
        })
        .collect()
}

/// A memory written through `a`, then `b` asked by text every millisecond until it finds it:
/// per write, the time `a` took to commit it and the time from then until `b` found it.
fn propagation(a: &Engine, b: &Engine) -> (Vec<Duration>, Vec<Duration>) {
    (0..PROPAGATIONS)
        .map(|i| {
            let word = format!("propagationmarker{i}x");
            let item = RememberItem {
                content: format!("a note carrying {word}"),
                ..RememberItem::default()
            };
            let started = Instant::now();
            a.remember(&[item]).expect("remember");
            let written = started.elapsed();
            let committed = Instant::now();
            loop {
                let page = b
                    .recall(&RecallQuery {
                        text: word.clone(),
                        limit: 1,
                        mode: RecallMode::Text,
                        ..RecallQuery::default()
                    })
                    .expect("recall");
                if !page.hits.is_empty() {
                    return (written, committed.elapsed());
                }
                assert!(
                    committed.elapsed() < Duration::from_secs(30),
                    "never arrived"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .unzip()
}

fn main() {
    let memories: usize = std::env::args()
        .skip_while(|a| a != "--memories")
        .nth(1)
        .map(|n| n.parse().expect("--memories N"))
        .unwrap_or(100_000);
    let corpus = Corpus::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let Some(url) = pg::database("bench") else {
        note!("no PostgreSQL: nothing to measure");
        return;
    };
    durable(&url);
    let mut rows = Vec::new();
    for t in targets(dir.path(), &url) {
        let engine = Engine::open((t.cfg)("a")).expect("open");
        note!("{}: remember, one memory per call…", t.name);
        let s = summarize(&remember_single(&corpus, &engine, FRESH_BASE));
        rows.push(format!(
            "| {} | `remember` 1 memory | {} calls | {:.2} ms | {:.2} ms |",
            t.name, s.n, s.p50, s.p99
        ));
        note!("{}: remember, batches of {BATCH}…", t.name);
        let rate = remember_batches(&corpus, &engine, FRESH_BASE + 100_000, BATCHES);
        rows.push(format!(
            "| {} | `remember` batches of {BATCH} | {} memories | {:.0} memories/s | |",
            t.name,
            BATCHES * BATCH,
            rate
        ));
        note!("{}: recall…", t.name);
        let s = summarize(&recall(&corpus, &engine));
        rows.push(format!(
            "| {} | `recall` hybrid, {} memories | {} queries | {:.2} ms | {:.2} ms |",
            t.name,
            SINGLE_CALLS + WARMUP + BATCHES * BATCH,
            s.n,
            s.p50,
            s.p99
        ));
        if t.name == "PostgreSQL" {
            note!("{}: propagation between two instances…", t.name);
            // Both as servers run them: with their background jobs (which commit the indexes,
            // so a read only overlays what came since).
            let a = std::sync::Arc::new(engine);
            let b = std::sync::Arc::new(Engine::open((t.cfg)("b")).expect("open instance B"));
            b.sync_text().expect("sync");
            let jobs = (
                a.start_background().expect("A's background job"),
                b.start_background().expect("B's background job"),
            );
            let (writes, catch_ups) = propagation(&a, &b);
            let whole: Vec<Duration> = writes
                .iter()
                .zip(&catch_ups)
                .map(|(w, c)| *w + *c)
                .collect();
            for (what, samples) in [
                ("write on A → recall hit on B", &whole),
                ("… of which A's write", &writes),
                ("… of which B's catch-up after A's commit", &catch_ups),
            ] {
                let s = summarize(samples);
                rows.push(format!(
                    "| {} | {what} | {} writes | {:.1} ms | {:.1} ms |",
                    t.name, s.n, s.p50, s.p99
                ));
            }
            drop(jobs);
            let engine = a;
            drop(b);
            drop(engine);
            note!("{}: loading {memories} memories…", t.name);
            let fresh =
                std::sync::Arc::new(Engine::open((t.cfg)("loader")).expect("open the loader"));
            let have = fresh.stats().expect("stats").memories as usize;
            let started = Instant::now();
            let more = memories.saturating_sub(have).div_ceil(BATCH);
            let rate = remember_batches(&corpus, &fresh, FRESH_BASE + 1_000_000, more);
            note!(
                "loaded in {:.0} s ({rate:.0} memories/s); embedding…",
                started.elapsed().as_secs_f64()
            );
            rows.push(format!(
                "| {} | loading {} memories in batches of {BATCH} | | {rate:.0} memories/s | |",
                t.name,
                more * BATCH
            ));
            // Then its background job, as a server's: it embeds what was written and stores
            // the vectors, which a fresh instance takes instead of embedding them again.
            let embedding = Instant::now();
            let loader_jobs = fresh
                .start_background()
                .expect("the loader's background job");
            wait_for("the loader's vectors", Duration::from_secs(1), || {
                let s = fresh.stats().expect("stats");
                (
                    s.vectors >= s.memories,
                    format!("{} of {}", s.vectors, s.memories),
                )
            });
            note!(
                "vectors stored in {:.0} s",
                embedding.elapsed().as_secs_f64()
            );
            drop(loader_jobs);
            drop(fresh);
            note!("{}: a fresh instance builds its indexes…", t.name);
            let started = Instant::now();
            let new =
                std::sync::Arc::new(Engine::open((t.cfg)("fresh")).expect("open a fresh instance"));
            new.sync_text().expect("build the text index");
            let text = started.elapsed();
            let _jobs = new
                .start_background()
                .expect("the fresh instance's background job");
            // Every stored vector searchable (staged ones by exact scan), then all in the graph.
            wait_for("the fresh instance's vectors", POLL, || {
                let lag = new.vector_lag().expect("vector lag");
                (lag == 0, format!("{lag} changes behind"))
            });
            let searchable = started.elapsed();
            wait_for("the fresh instance's graph", POLL, || {
                let staged = new.vectors_staged();
                (staged == 0, format!("{staged} staged"))
            });
            let graph = started.elapsed();
            let s = new.stats().expect("stats");
            for (what, took) in [
                ("open and build the text index", text),
                ("… and every stored vector searchable", searchable),
                ("… and every vector in the HNSW graph", graph),
            ] {
                rows.push(format!(
                    "| {} | fresh instance: {what} | {} memories, {} vectors | {:.1} s | |",
                    t.name,
                    s.memories,
                    s.vectors,
                    took.as_secs_f64()
                ));
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\nOn {}:\n", fixture::machine());
    let _ = writeln!(out, "| store | what | n | p50 (or rate) | p99 |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(out, "{r}");
    }
}

/// Polls `done` every `every` until it says so, logging its progress every 10 s.
fn wait_for(what: &str, every: Duration, mut done: impl FnMut() -> (bool, String)) {
    let mut said = Instant::now();
    loop {
        let (yes, progress) = done();
        if yes {
            return;
        }
        if said.elapsed() >= Duration::from_secs(10) {
            note!("waiting for {what}: {progress}");
            said = Instant::now();
        }
        std::thread::sleep(every);
    }
}

/// Durable settings on the benchmark's server (the test harness turns them off for speed):
/// every commit waits for its WAL to reach the disk, as in production.
fn durable(url: &str) {
    let mut c = pg::connect(url);
    for setting in [
        "ALTER SYSTEM SET fsync = on",
        "ALTER SYSTEM SET synchronous_commit = on",
        "ALTER SYSTEM SET full_page_writes = on",
        "SELECT pg_reload_conf()",
    ] {
        c.batch_execute(setting).expect("durable settings");
    }
}
