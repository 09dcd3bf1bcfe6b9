//! Several processes on one database: a reading process's recall latency while four other
//! processes write (and relate what they write), each through its own engine with the background
//! job a server runs, and while the reading process itself walks the relation graph back to back
//! (deep focused walks, one always running). Prints a markdown table of p50/p90/p99/max against
//! the floor, with the machine it ran on, and checks that the reader finds the writers' last
//! memories the moment they are committed.
//! Run: `cargo run --release --example shared_readers`.

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mnemograph::engine::control::Progressing;
use mnemograph::engine::traverse::{Shape, TraverseRequest};
use mnemograph::engine::{Link, RememberItem};
use mnemograph::graph::Direction;
use mnemograph::model::{MemoryRef, NamespaceScope, RecallMode, RecallQuery};
use mnemograph::{Config, Engine};

use fixture::{Corpus, FRESH_BASE};

/// Memories in the database before the writers start.
const BASE_MEMORIES: usize = 20_000;
/// Writing processes (`shared_readers READS WRITERS` sets another number; a third argument
/// `nowalk` leaves out the walks).
const WRITERS: usize = 4;
/// Pause between two `remember` calls of one writer (each writes about 100 memories a second).
const WRITE_PAUSE: Duration = Duration::from_millis(10);
/// Timed recalls of the reading process, one every [`READ_PAUSE`].
const READS: usize = 1_500; // `shared_readers N` times N instead
const READ_PAUSE: Duration = Duration::from_millis(5);
/// Relations from each base memory to others.
const LINKS: usize = 5;
/// The floor: recall p99 in a reading process while the others write.
const FLOOR_P99_MS: f64 = 50.0;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--writer" {
        writer(Path::new(&args[2]), args[3].parse().expect("writer number"));
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter("warn")
        .init();
    let reads: usize = args
        .get(1)
        .map_or(READS, |a| a.parse().expect("number of reads"));
    let writers: usize = args
        .get(2)
        .map_or(WRITERS, |a| a.parse().expect("number of writing processes"));
    let walk = args.get(3).is_none_or(|a| a != "nowalk");
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("memory.db");
    let corpus = Corpus::new();
    let mut ids = Vec::with_capacity(BASE_MEMORIES);
    {
        let engine = Engine::open(Config::for_db(&db)).expect("open");
        for start in (0..BASE_MEMORIES).step_by(1_000) {
            let batch = corpus.memories(start as u64, 1_000);
            for r in engine.remember(&batch).expect("remember") {
                ids.push(r.expect("stored").id);
            }
        }
        let mut s = 11u64;
        let mut relations = Vec::with_capacity(BASE_MEMORIES * LINKS);
        for (i, from) in ids.iter().enumerate() {
            for j in 0..LINKS {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let to = if j == 0 {
                    (i + 1) % ids.len()
                } else {
                    s as usize % ids.len()
                };
                relations.push(mnemograph::engine::RelateItem {
                    from: from.clone(),
                    to: ids[to].clone(),
                    kind: "about".into(),
                    weight: Some(0.9),
                    metadata: None,
                    namespace: None,
                });
            }
        }
        for chunk in relations.chunks(10_000) {
            engine.relate(chunk).expect("relate");
        }
        engine.sync_text().expect("index");
        engine.reindex_vectors().expect("vectors");
    }
    std::fs::write(dir.path().join("ids"), ids.join("\n")).expect("write the base ids");
    let engine = Arc::new(Engine::open(Config::for_db(&db)).expect("open"));
    let _jobs = engine.start_background().expect("background");
    // Warm up: the vector index loaded, the model parsed.
    engine.recall(&query(&corpus, 0)).expect("recall");

    let exe = std::env::current_exe().expect("own path");
    let stop = dir.path().join("stop");
    let mut children: Vec<Child> = (0..writers)
        .map(|p| {
            Command::new(&exe)
                .args(["--writer", &db.display().to_string(), &p.to_string()])
                .spawn()
                .expect("start a writer")
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));

    // One deep focused walk always running beside the reads: every reached memory is scored,
    // reading its row from SQLite, while the writers change the graph.
    let walking = Arc::new(AtomicBool::new(walk));
    let walker = {
        let engine = Arc::clone(&engine);
        let walking = Arc::clone(&walking);
        let seed = ids[0].clone();
        std::thread::spawn(move || {
            let req = TraverseRequest {
                seeds: vec![MemoryRef::Id(seed)],
                query: None,
                namespaces: NamespaceScope::All,
                depth: 8,
                direction: Direction::Both,
                kinds: Vec::new(),
                min_weight: 0.0,
                valid_at: None,
                max_nodes: 1_000_000,
                shape: Shape::Nodes,
                focus: Some("meeting notes from the planning session".into()),
                limit: 10,
                include_archived: false,
                access: mnemograph::engine::Access::All,
            };
            let mut walks: Vec<(Duration, usize)> = Vec::new();
            while walking.load(Ordering::Relaxed) {
                let started = Instant::now();
                let out = engine
                    .traverse(&req, &Progressing::default())
                    .expect("walk");
                walks.push((started.elapsed(), out.reached));
            }
            walks
        })
    };

    let mut samples = Vec::with_capacity(reads);
    let mut warned = 0;
    for i in 0..reads {
        let q = query(&corpus, i as u64 + 1);
        let started = Instant::now();
        let page = engine.recall(&q).expect("recall");
        samples.push(started.elapsed());
        warned += usize::from(!page.warnings.is_empty());
        if i % 250 == 249 {
            tracing::warn!(reads = i + 1, last_ms = samples[i].as_secs_f64() * 1e3, warnings = ?page.warnings, "progress");
        }
        std::thread::sleep(READ_PAUSE);
    }
    // What the background job had not caught up with while the writers went on: searches scan
    // these exactly (staged vectors) or from the change log (lag).
    let staged = engine.vectors_staged();
    let behind = engine.stats().expect("stats");
    let backlog = (staged, behind.vector_index_lag, behind.text_index_lag);
    walking.store(false, Ordering::Relaxed);
    let walks = walker.join().expect("walker");
    std::fs::write(&stop, b"").expect("stop the writers");
    for w in &mut children {
        let status = w.wait().expect("writer ends");
        assert!(status.success(), "a writer failed");
    }
    // Each writer's last memory was committed before it exited: the reader must see all of them
    // at once, whoever indexed them.
    let started = Instant::now();
    let last = engine
        .recall(&RecallQuery {
            text: "sentinel".into(),
            limit: 10,
            mode: RecallMode::Text,
            ..RecallQuery::default()
        })
        .expect("recall");
    let last_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(
        last.hits.len(),
        writers,
        "every writer's last memory is found at once"
    );
    let written = engine.stats().expect("stats").memories as usize - BASE_MEMORIES;

    samples.sort();
    let ms = |q: f64| {
        samples[((samples.len() as f64 * q).ceil() as usize).min(samples.len()) - 1].as_secs_f64()
            * 1e3
    };
    let p99 = ms(0.99);
    let report = report(writers, &samples, written, warned, last_ms, &walks, backlog);
    let _ = std::io::stdout().lock().write_all(report.as_bytes());
    if p99 <= FLOOR_P99_MS {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The markdown report of the run.
fn report(
    writers: usize,
    samples: &[Duration],
    written: usize,
    warned: usize,
    last_ms: f64,
    walks: &[(Duration, usize)],
    (staged, vector_lag, text_lag): (usize, i64, i64),
) -> String {
    let ms = |q: f64| {
        samples[((samples.len() as f64 * q).ceil() as usize).min(samples.len()) - 1].as_secs_f64()
            * 1e3
    };
    let p99 = ms(0.99);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Recall in a reading process while {writers} processes write\n"
    );
    let _ = writeln!(out, "Machine: {}", fixture::machine());
    let _ = writeln!(
        out,
        "{BASE_MEMORIES} memories and {} relations to start; {written} written meanwhile by {writers} processes (one `remember` each every {} ms, each new memory related to a base one); hybrid recall, limit 10, every {} ms; meanwhile {} focused walks (depth 8, both directions, every reached memory scored) ran back to back in the reading process, {:.1} s in all, the longest {:.1} s, reaching up to {} memories.\n",
        BASE_MEMORIES * LINKS,
        WRITE_PAUSE.as_millis(),
        READ_PAUSE.as_millis(),
        walks.len(),
        walks.iter().map(|w| w.0.as_secs_f64()).sum::<f64>(),
        walks.iter().map(|w| w.0.as_secs_f64()).fold(0.0, f64::max),
        walks.iter().map(|w| w.1).max().unwrap_or(0)
    );
    let _ = writeln!(out, "| measurement | n | p50 | p90 | p99 | max | floor |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---|");
    let _ = writeln!(
        out,
        "| recall in the reading process | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | p99 ≤ {FLOOR_P99_MS} ms: {} |",
        samples.len(),
        ms(0.5),
        ms(0.9),
        p99,
        ms(1.0),
        if p99 <= FLOOR_P99_MS {
            "met"
        } else {
            "NOT met"
        }
    );
    let _ = writeln!(
        out,
        "\nAnswers with a warning: {warned}. The writers' last memories were found by the first recall after they exited ({last_ms:.1} ms)."
    );
    let _ = writeln!(
        out,
        "When the reads ended, the reading process's background work was behind by {staged} vectors not yet in the HNSW graph (each search scans them), {vector_lag} change-log entries for the vector index and {text_lag} for the text index (searched from the change log meanwhile)."
    );
    out
}

fn query(corpus: &Corpus, i: u64) -> RecallQuery {
    RecallQuery {
        text: corpus.query(i),
        limit: 10,
        mode: RecallMode::Hybrid,
        ..RecallQuery::default()
    }
}

/// One writing process: a server's engine with its background job, remembering until told to stop,
/// then one last memory.
fn writer(db: &Path, p: usize) {
    let engine = Arc::new(Engine::open(Config::for_db(db)).expect("open"));
    let _jobs = engine.start_background().expect("background");
    let corpus = Corpus::new();
    let stop: PathBuf = db.with_file_name("stop");
    let base = std::fs::read_to_string(db.with_file_name("ids")).expect("the base ids");
    let base: Vec<&str> = base.lines().collect();
    let mut i = 0u64;
    while !stop.exists() {
        let mut item = corpus.memory(FRESH_BASE + (p as u64) * 1_000_000 + i);
        // Related to a base memory, so the graph changes under the reader's walks.
        item.links = vec![Link {
            to: base[(i as usize * 7919 + p) % base.len()].to_owned(),
            kind: "follows".into(),
            weight: None,
        }];
        engine.remember(&[item]).expect("remember")[0]
            .as_ref()
            .expect("stored");
        i += 1;
        std::thread::sleep(WRITE_PAUSE);
    }
    let last = RememberItem {
        content: format!("sentinel written last by writer {p}"),
        ..RememberItem::default()
    };
    engine.remember(&[last]).expect("remember")[0]
        .as_ref()
        .expect("stored");
}
