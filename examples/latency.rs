//! Latency report: times `remember` (one memory, and batches of 1,000), `recall` over 100,000
//! memories and the real `mnemograph serve` binary's start-to-first-answer, and prints a markdown
//! table of p50/p90/p99/max against the stated floors, with the machine it ran on.
//! Run: `cargo build --release && cargo run --release --example latency`. With
//! `-- --memories N` the recall and start-up rows run over a corpus of N memories instead (built
//! once and cached; a million takes about ten minutes), without the `remember` rows.

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;
#[allow(dead_code, unused_macros)]
#[macro_use]
#[path = "common/report.rs"]
mod report;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mnemograph::config::Durability;
use mnemograph::model::{RecallMode, RecallQuery};
use mnemograph::{Config, Engine};
use serde_json::{Value, json};

use fixture::{BIG_CORPUS, Corpus, FRESH_BASE};
use report::{Summary, summarize};

/// Calls of `remember` with one memory, timed one by one.
const SINGLE_CALLS: usize = 2_000;
/// Untimed calls before each series.
const WARMUP: usize = 100;
/// Batches of [`BATCH`] memories into an empty database, timed one by one.
const BATCHES: usize = 50;
/// Batches of [`BATCH`] memories into the 100,000-memory database.
const BATCHES_BIG: usize = 20;
const BATCH: usize = 1_000;
/// Timed recall queries (distinct).
const RECALL_QUERIES: usize = 5_000;
const RECALL_LIMIT: usize = 10;
/// Timed remember-then-recall pairs (the recall pays for indexing the write).
const WRITE_THEN_READ: usize = 300;
/// Hybrid recall at 100,000 memories.
const FLOOR_HYBRID_P50_MS: f64 = 8.0;
/// Timed start-ups of the server (after one untimed).
const STARTS: usize = 15;
/// Longest wait for one answer of the server.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The floors we quote.
const FLOOR_REMEMBER_MS: f64 = 2.0;
const FLOOR_BATCH_PER_S: f64 = 20_000.0;
const FLOOR_RECALL_P50_MS: f64 = 5.0;
const FLOOR_RECALL_P99_MS: f64 = 20.0;
const FLOOR_START_MS: f64 = 300.0;
/// Start to first hybrid answer at a million memories.
const FLOOR_START_1M_MS: f64 = 1_000.0;

/// `--memories N`, or the default corpus size.
fn memories_arg() -> Result<usize, String> {
    let mut args = std::env::args().skip(1);
    let mut n = BIG_CORPUS;
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--memories", Some(v)) => {
                n = v
                    .replace('_', "")
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n >= 1_000)
                    .ok_or(format!("--memories {v:?}: give a count of at least 1000"))?;
            }
            _ => return Err(format!("unknown argument {flag:?} (try --memories N)")),
        }
    }
    Ok(n)
}

/// One row of the table.
struct Row {
    what: String,
    n: usize,
    cells: [String; 4],
    floor: String,
    pass: Option<bool>,
}

fn ms_row(what: &str, s: &Summary, floor: &str, pass: Option<bool>) -> Row {
    let f = |v: f64| format!("{v:.3} ms");
    Row {
        what: what.to_owned(),
        n: s.n,
        cells: [f(s.p50), f(s.p90), f(s.p99), f(s.max)],
        floor: floor.to_owned(),
        pass,
    }
}

/// `remember` of one memory per call into the database at `db`, each commit on disk as
/// `durability` says.
fn remember_single(corpus: &Corpus, db: &Path, durability: Durability) -> Vec<Duration> {
    let mut cfg = Config::for_db(db);
    cfg.durability = durability;
    let engine = Engine::open(cfg).expect("open engine");
    let mut next = FRESH_BASE;
    let mut samples = Vec::with_capacity(SINGLE_CALLS);
    for round in 0..WARMUP + SINGLE_CALLS {
        next += 1;
        let items = [corpus.memory(next)];
        let started = Instant::now();
        let out = engine.remember(&items).expect("remember");
        let took = started.elapsed();
        assert!(matches!(&out[0], Ok(r) if !r.duplicate));
        if round >= WARMUP {
            samples.push(took);
        }
    }
    samples
}

/// `remember` of `n` batches of [`BATCH`] memories per call into the database at `db`; per-call
/// durations and the overall rate.
fn remember_batches(corpus: &Corpus, db: &Path, n: usize) -> (Vec<Duration>, f64) {
    let engine = Engine::open(Config::for_db(db)).expect("open engine");
    let mut samples = Vec::with_capacity(n);
    let mut total = Duration::ZERO;
    for b in 0..n {
        let items = corpus.memories(FRESH_BASE + (b * BATCH) as u64, BATCH);
        let started = Instant::now();
        let out = engine.remember(&items).expect("remember");
        let took = started.elapsed();
        assert!(out.iter().all(|r| matches!(r, Ok(r) if !r.duplicate)));
        samples.push(took);
        total += took;
    }
    let rate = (n * BATCH) as f64 / total.as_secs_f64();
    (samples, rate)
}

/// `recall` of distinct questions over the database at `db` in `mode`, indexes synced first.
fn recall(corpus: &Corpus, db: &Path, mode: RecallMode) -> Vec<Duration> {
    let engine = Engine::open(Config::for_db(db)).expect("open engine");
    engine.sync_text().expect("sync the text index");
    assert_eq!(engine.text_lag().expect("lag"), 0, "index fully synced");
    assert_eq!(
        engine.vector_lag().expect("lag"),
        0,
        "vector index fully synced"
    );
    let query = |i: usize| RecallQuery {
        text: corpus.query(i as u64),
        limit: RECALL_LIMIT,
        mode,
        ..RecallQuery::default()
    };
    for i in 0..WARMUP {
        engine.recall(&query(1_000_000 + i)).expect("recall");
    }
    let queries: Vec<RecallQuery> = (0..RECALL_QUERIES).map(query).collect();
    let mut samples = Vec::with_capacity(RECALL_QUERIES);
    for q in &queries {
        let started = Instant::now();
        let page = engine.recall(q).expect("recall");
        samples.push(started.elapsed());
        assert_eq!(page.hits.len(), RECALL_LIMIT, "query {:?}", q.text);
    }
    samples
}

/// `recall` right after a one-memory `remember` on the same engine: the read brings the text index
/// up to date (one tantivy commit) before searching. Not a floor; shows read-your-writes cost.
fn recall_after_write(corpus: &Corpus, db: &Path) -> Vec<Duration> {
    let engine = Engine::open(Config::for_db(db)).expect("open engine");
    engine.sync_text().expect("sync the text index");
    let mut samples = Vec::with_capacity(WRITE_THEN_READ);
    for i in 0..WARMUP + WRITE_THEN_READ {
        let item = corpus.memory(FRESH_BASE + 10_000_000 + i as u64);
        let out = engine.remember(&[item]).expect("remember");
        assert!(matches!(&out[0], Ok(r) if !r.duplicate));
        let q = RecallQuery {
            text: corpus.query(3_000_000 + i as u64),
            limit: RECALL_LIMIT,
            ..RecallQuery::default()
        };
        let started = Instant::now();
        let page = engine.recall(&q).expect("recall");
        let took = started.elapsed();
        assert_eq!(page.hits.len(), RECALL_LIMIT, "query {:?}", q.text);
        if i >= WARMUP {
            samples.push(took);
        }
    }
    samples
}

/// Times of one server start: to the `initialize` answer, to the `recall` answer, and the
/// server's own `open_ms` (engine open) from its log.
struct Start {
    initialize: Duration,
    recall: Duration,
    open_ms: Option<f64>,
    /// To the first answer that searched by meaning too (no text-only warning).
    hybrid: Duration,
}

fn start_once(bin: &Path, db: &Path, query: &str) -> Start {
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "latency-example", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "recall", "arguments": {"query": query, "limit": RECALL_LIMIT}}}),
    ];
    let mut input = String::new();
    for m in &messages {
        input.push_str(&m.to_string());
        input.push('\n');
    }
    let started = Instant::now();
    let mut child = Command::new(bin)
        .arg("serve")
        .arg("--db")
        .arg(db)
        .env("MNEMOGRAPH_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mnemograph serve");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(input.as_bytes())
        .expect("write the requests");
    stdin.flush().expect("flush the requests");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let log_reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let mut initialize = None;
    let mut recall = None;
    let mut hybrid = None;
    let mut next_id = 3;
    while hybrid.is_none() {
        let (at, line) = rx
            .recv_timeout(ANSWER_TIMEOUT)
            .expect("the server answers in time");
        let v: Value = serde_json::from_str(&line).expect("a JSON-RPC message per line");
        match v.get("id").and_then(Value::as_i64) {
            Some(1) => {
                assert!(v.get("result").is_some(), "initialize failed: {line}");
                initialize = Some(at - started);
            }
            Some(id) if id >= 2 => {
                let result = v
                    .get("result")
                    .unwrap_or_else(|| panic!("recall failed: {line}"));
                assert_ne!(result.get("isError"), Some(&Value::Bool(true)), "{line}");
                let hits = result
                    .pointer("/structuredContent/hits")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                assert_eq!(hits, RECALL_LIMIT, "recall hits: {line}");
                recall.get_or_insert(at - started);
                // An answer without vectors (no compact file, dump not loaded yet) has a warning.
                if result.pointer("/structuredContent/warnings").is_none() {
                    hybrid = Some(at - started);
                } else {
                    std::thread::sleep(Duration::from_millis(10));
                    let again = json!({"jsonrpc": "2.0", "id": next_id, "method": "tools/call",
                        "params": {"name": "recall", "arguments": {"query": query, "limit": RECALL_LIMIT}}});
                    next_id += 1;
                    stdin
                        .write_all(format!("{again}\n").as_bytes())
                        .and_then(|()| stdin.flush())
                        .expect("write a request");
                }
            }
            _ => {}
        }
    }
    drop(stdin); // end of input: the server shuts down
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait().expect("wait for the server") {
            Some(_) => break,
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let _ = reader.join();
    let logs = log_reader.join().unwrap_or_default();
    let open_ms = logs.iter().find_map(|l| {
        let rest = &l[l.find("open_ms=")? + "open_ms=".len()..];
        rest.split_whitespace().next()?.parse::<f64>().ok()
    });
    Start {
        initialize: initialize.expect("initialize answered before recall"),
        recall: recall.expect("recall answered"),
        hybrid: hybrid.expect("hybrid recall answered"),
        open_ms,
    }
}

fn main() -> ExitCode {
    let Some(bin) = fixture::server_binary() else {
        note!(
            "target/release/mnemograph not found next to this example: run `cargo build --release` first \
             (then `cargo run --release --example latency`)"
        );
        return ExitCode::from(2);
    };
    let n = match memories_arg() {
        Ok(n) => n,
        Err(e) => {
            note!("latency: {e}");
            return ExitCode::from(2);
        }
    };
    let size = if n % 1_000_000 == 0 {
        format!("{}M", n / 1_000_000)
    } else {
        format!("{}k", n / 1_000)
    };
    let corpus = Corpus::new();
    let cached = fixture::cached_corpus(n);
    let mut rows: Vec<Row> = Vec::new();
    if n == BIG_CORPUS {
        remember_rows(&corpus, &mut rows);
    }
    recall_rows(&corpus, n, &size, &mut rows);
    start_rows(&bin, &corpus, n, &size, &mut rows);

    let mut out = std::io::stdout().lock();
    let db_bytes = fixture::dir_bytes(&cached);
    let _ = writeln!(out, "## mnemograph latency\n");
    let _ = writeln!(out, "- machine: {}", fixture::machine());
    let _ = writeln!(
        out,
        "- corpus: v{} seed {:#x}, {n} memories, {:.1} MiB on disk (database + index), cached in {}",
        fixture::CORPUS_VERSION,
        fixture::SEED,
        db_bytes as f64 / (1024.0 * 1024.0),
        cached.display()
    );
    let _ = writeln!(out, "- server: {}\n", bin.display());
    let _ = writeln!(
        out,
        "| measurement | n | p50 | p90 | p99 | max | floor | meets |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---|---|");
    for r in &rows {
        let verdict = match r.pass {
            Some(true) => "yes",
            Some(false) => "**NO**",
            None => "",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.what, r.n, r.cells[0], r.cells[1], r.cells[2], r.cells[3], r.floor, verdict
        );
    }
    let _ = writeln!(
        out,
        "\nThroughput cells are 1,000 divided by the p50/p90/p99/max batch duration (so p99 is the \
         slow tail). Start-up times run from spawning the process to reading the answer line."
    );
    if rows.iter().any(|r| r.pass == Some(false)) {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `remember` one at a time and in batches, into an empty and a 100,000-memory database.
fn remember_rows(corpus: &Corpus, rows: &mut Vec<Row>) {
    note!("remember, one memory per call ({SINGLE_CALLS} calls)…");
    let (_empty_dir, empty_db) = fixture::scratch_copy(0);
    let s = summarize(&remember_single(corpus, &empty_db, Durability::Normal));
    rows.push(ms_row(
        "`remember` 1 memory, empty db",
        &s,
        "p50 ≤ 2 ms",
        Some(s.p50 <= FLOOR_REMEMBER_MS),
    ));
    let (_full_dir, full_db) = fixture::scratch_copy(0);
    let s = summarize(&remember_single(corpus, &full_db, Durability::Full));
    rows.push(ms_row(
        "`remember` 1 memory, empty db, `--durability full`",
        &s,
        "",
        None,
    ));
    let (dir, db) = fixture::scratch_copy(BIG_CORPUS);
    let s = summarize(&remember_single(corpus, &db, Durability::Normal));
    rows.push(ms_row(
        "`remember` 1 memory, 100k db",
        &s,
        "p50 ≤ 2 ms",
        Some(s.p50 <= FLOOR_REMEMBER_MS),
    ));
    drop(dir);

    note!(
        "remember, {BATCHES} batches of {BATCH} memories into an empty db, {BATCHES_BIG} into 100k…"
    );
    let rate = |ms: f64| format!("{:.0}/s", BATCH as f64 / (ms / 1e3));
    let (dir, db) = fixture::scratch_copy(0);
    let (batches, overall) = remember_batches(corpus, &db, BATCHES);
    drop(dir);
    let s = summarize(&batches);
    rows.push(ms_row("`remember` batch of 1,000, empty db", &s, "", None));
    rows.push(Row {
        what: format!("  as memories/s (overall {overall:.0}/s)"),
        n: s.n,
        cells: [rate(s.p50), rate(s.p90), rate(s.p99), rate(s.max)],
        floor: "p50 ≥ 20,000/s".into(),
        pass: Some(BATCH as f64 / (s.p50 / 1e3) >= FLOOR_BATCH_PER_S),
    });
    let (dir, db) = fixture::scratch_copy(BIG_CORPUS);
    let (batches, overall) = remember_batches(corpus, &db, BATCHES_BIG);
    drop(dir);
    let s = summarize(&batches);
    rows.push(ms_row("`remember` batch of 1,000, 100k db", &s, "", None));
    rows.push(Row {
        what: format!("  as memories/s (overall {overall:.0}/s)"),
        n: s.n,
        cells: [rate(s.p50), rate(s.p90), rate(s.p99), rate(s.max)],
        floor: String::new(),
        pass: None,
    });
}

/// `recall` in each mode over the corpus of `n` memories, and right after a write.
fn recall_rows(corpus: &Corpus, n: usize, size: &str, rows: &mut Vec<Row>) {
    note!("recall, {RECALL_QUERIES} queries over {n} memories…");
    let (dir, db) = fixture::scratch_copy(n);
    let s = summarize(&recall(corpus, &db, RecallMode::Text));
    rows.push(ms_row(
        &format!("`recall` text (BM25 × coverage), limit 10, {size} memories"),
        &s,
        "p50 ≤ 5 ms, p99 ≤ 20 ms",
        Some(s.p50 <= FLOOR_RECALL_P50_MS && s.p99 <= FLOOR_RECALL_P99_MS),
    ));
    let s = summarize(&recall(corpus, &db, RecallMode::Vector));
    rows.push(ms_row(
        &format!("`recall` vector, limit 10, {size} memories"),
        &s,
        "",
        None,
    ));
    let s = summarize(&recall(corpus, &db, RecallMode::Hybrid));
    rows.push(ms_row(
        &format!("`recall` hybrid (default), limit 10, {size} memories"),
        &s,
        if n == BIG_CORPUS {
            "p50 ≤ 8 ms"
        } else {
            "p50 ≤ 5 ms, p99 ≤ 20 ms"
        },
        Some(if n == BIG_CORPUS {
            s.p50 <= FLOOR_HYBRID_P50_MS
        } else {
            s.p50 <= FLOOR_RECALL_P50_MS && s.p99 <= FLOOR_RECALL_P99_MS
        }),
    ));
    drop(dir);

    note!("recall right after remember, {WRITE_THEN_READ} pairs…");
    let (dir, db) = fixture::scratch_copy(n);
    let s = summarize(&recall_after_write(corpus, &db));
    rows.push(ms_row(
        &format!("`recall` right after a `remember` (indexes it first), {size}"),
        &s,
        "",
        None,
    ));
    drop(dir);
}

/// The server's start-up over the corpus of `n` memories, to its first answers.
fn start_rows(bin: &Path, corpus: &Corpus, n: usize, size: &str, rows: &mut Vec<Row>) {
    let floor_ms = if n >= 1_000_000 {
        FLOOR_START_1M_MS
    } else {
        FLOOR_START_MS
    };
    let floor_label = format!("p50 ≤ {floor_ms:.0} ms");
    note!("server start-up, {STARTS} runs of {}…", bin.display());
    let (_server_dir, db) = fixture::scratch_copy(n);
    let _ = start_once(bin, &db, &corpus.query(999_999)); // untimed: warms the page cache
    let starts: Vec<Start> = (0..STARTS)
        .map(|i| start_once(bin, &db, &corpus.query(2_000_000 + i as u64)))
        .collect();
    let s_init = summarize(&starts.iter().map(|s| s.initialize).collect::<Vec<_>>());
    let s_recall = summarize(&starts.iter().map(|s| s.recall).collect::<Vec<_>>());
    let opens: Vec<Duration> = starts
        .iter()
        .filter_map(|s| s.open_ms)
        .map(|ms| Duration::from_secs_f64(ms / 1e3))
        .collect();
    rows.push(ms_row(
        &format!("start → `initialize` answer, {size} db"),
        &s_init,
        "",
        None,
    ));
    rows.push(ms_row(
        &format!("start → first `recall` answer, {size} db"),
        &s_recall,
        &floor_label,
        Some(s_recall.p50 <= floor_ms),
    ));
    let s_hybrid = summarize(&starts.iter().map(|s| s.hybrid).collect::<Vec<_>>());
    rows.push(ms_row(
        &format!("start → first hybrid answer (no text-only warning), {size} db"),
        &s_hybrid,
        &floor_label,
        Some(s_hybrid.p50 <= floor_ms),
    ));
    if !opens.is_empty() {
        rows.push(ms_row(
            "  of which engine open (server log `open_ms`)",
            &summarize(&opens),
            "",
            None,
        ));
    }
}
