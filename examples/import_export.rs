//! Bulk import and export at 100,000 memories (or `--memories N`): writes the seeded corpus as mnemograph JSONL
//! (every memory linked to the one before, no vectors: the import embeds them with the built-in
//! model), imports it into an empty database whose background jobs run as in the server while
//! another thread recalls (hybrid) without pause, then exports it. Prints wall times, peak RSS
//! and recall latency during the import against the stated floors, with the machine.
//! Run: `cargo run --release --example import_export [-- --memories 1000000]`.

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use mnemograph::engine::control::Progressing;
use mnemograph::engine::export::{ExportRequest, ExportTarget, OutFormat};
use mnemograph::engine::import::{ImportRequest, Source};
use mnemograph::model::{RecallMode, RecallQuery, format_time};
use mnemograph::{Config, Engine};

use fixture::Corpus;

/// Memories imported by default (each with a relation to the one before).
const MEMORIES: u64 = 100_000;
/// Floors at 100,000 memories; the import's and the export's grow in proportion beyond, except
/// that a million memories must import within 3 minutes.
const FLOOR_IMPORT_S: f64 = 30.0;
const FLOOR_IMPORT_1M_S: f64 = 180.0;
const FLOOR_RSS_MIB: f64 = 1024.0;
const FLOOR_RECALL_P99_MS: f64 = 50.0;
const FLOOR_EXPORT_S: f64 = 5.0;
/// Longest wait for the graph to take the imported vectors in.
const GRAPH_WAIT: Duration = Duration::from_secs(1_800);
/// Pause between two recalls of the reader thread.
const RECALL_PAUSE: Duration = Duration::from_millis(5);

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// `--memories N`, or the default.
fn memories_arg() -> Result<u64, String> {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next()) {
        (None, _) => Ok(MEMORIES),
        (Some("--memories"), Some(n)) => n
            .replace('_', "")
            .parse::<u64>()
            .ok()
            .filter(|&n| n >= 2)
            .ok_or(format!("--memories: {n:?} is not a count of at least 2")),
        _ => Err("usage: import_export [--memories N]".to_owned()),
    }
}

fn main() -> ExitCode {
    let memories = match memories_arg() {
        Ok(n) => n,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{e}");
            return ExitCode::from(2);
        }
    };
    let scale = memories as f64 / MEMORIES as f64;
    let (floor_import_s, floor_export_s) = if memories <= MEMORIES {
        (FLOOR_IMPORT_S, FLOOR_EXPORT_S)
    } else {
        (
            FLOOR_IMPORT_1M_S * memories as f64 / 1e6,
            FLOOR_EXPORT_S * scale,
        )
    };
    // Resident memory has a floor at 100,000 memories only.
    let floor_rss_mib = if memories == MEMORIES {
        FLOOR_RSS_MIB
    } else {
        f64::INFINITY
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = Corpus::new();
    let source = dir.path().join("corpus.jsonl");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&source).expect("create"));
        let base = 1_700_000_000_000i64;
        for i in 0..memories {
            let m = corpus.memory(i);
            let line = serde_json::json!({
                "type": "memory",
                "id": format!("m_bench{i}"),
                "namespace": m.namespace,
                "kind": m.kind,
                "name": m.name,
                "content": m.content,
                "tags": m.tags,
                "created_at": format_time(base + i as i64 * 1_000),
            });
            serde_json::to_writer(&mut w, &line).expect("write");
            w.write_all(b"\n").expect("write");
            if i > 0 {
                let rel = serde_json::json!({"type": "relation", "from": format!("m_bench{i}"), "to": format!("m_bench{}", i - 1), "kind": "follows"});
                serde_json::to_writer(&mut w, &rel).expect("write");
                w.write_all(b"\n").expect("write");
            }
        }
    }
    let bytes = std::fs::metadata(&source).map_or(0, |m| m.len());

    let mut cfg = Config::for_db(dir.path().join("memory.db"));
    cfg.import_roots = vec![dir.path().to_path_buf()];
    let engine = Arc::new(Engine::open(cfg).expect("open"));
    let _jobs = engine.start_background().expect("background");
    // Something to find from the start, as in a database in use.
    engine
        .remember(&corpus.memories(memories, 1_000))
        .expect("seed");

    // 0: importing, 1: imported (the graph takes the new vectors in), 2: stop.
    let phase = Arc::new(AtomicU8::new(0));
    let reader = {
        let (engine, phase) = (Arc::clone(&engine), Arc::clone(&phase));
        let corpus = Corpus::new();
        std::thread::spawn(move || {
            let mut lat: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            let mut i = 0u64;
            loop {
                let now = phase.load(Ordering::Acquire);
                if now >= 2 {
                    break;
                }
                let q = RecallQuery {
                    text: corpus.query(i),
                    limit: 10,
                    mode: RecallMode::Hybrid,
                    ..RecallQuery::default()
                };
                let t = Instant::now();
                let _ = engine.recall(&q);
                lat[now as usize].push(t.elapsed().as_secs_f64() * 1e3);
                i += 1;
                std::thread::sleep(RECALL_PAUSE);
            }
            lat
        })
    };
    let req = ImportRequest {
        source: Source::Path("corpus.jsonl".into()),
        format: None,
        namespace: None,
        dry_run: false,
        actor: "bench".into(),
        max_records: None,
        access: mnemograph::engine::Access::All,
        job: None,
    };
    let t = Instant::now();
    let report = engine
        .import(&req, &Progressing::default())
        .expect("import");
    let import_s = t.elapsed().as_secs_f64();
    phase.store(1, Ordering::Release);
    let rss = peak_rss_mib();
    // Found by meaning right away: the last imported memory, by a vector search for its text.
    let last = corpus.memory(memories - 1).content;
    let probe = engine
        .recall(&RecallQuery {
            text: last.clone(),
            limit: 1,
            mode: RecallMode::Vector,
            ..RecallQuery::default()
        })
        .expect("probe");
    let found_at_once = probe.hits.first().is_some_and(|h| h.memory.content == last);

    let t = Instant::now();
    let export = engine
        .export_to(
            &ExportRequest {
                namespaces: None,
                format: OutFormat::Jsonl,
                subgraph: None,
                vectors: false,
                history: false,
            },
            &ExportTarget::Path("export.jsonl".into()),
            &Progressing::default(),
        )
        .expect("export");
    let export_s = t.elapsed().as_secs_f64();
    // The background job now puts the staged vectors into the HNSW graph.
    let t = Instant::now();
    while engine.vectors_staged() > 0 && t.elapsed() < GRAPH_WAIT {
        std::thread::sleep(Duration::from_millis(200));
    }
    let graph_s = t.elapsed().as_secs_f64();
    phase.store(2, Ordering::Release);
    let [mut lat, mut after] = reader.join().expect("reader");
    lat.sort_by(f64::total_cmp);
    after.sort_by(f64::total_cmp);
    let rss_after = peak_rss_mib();

    let mut out = std::io::stdout().lock();
    let ok = |pass: bool| if pass { "yes" } else { "NO" };
    let _ = writeln!(out, "machine: {}", fixture::machine());
    let _ = writeln!(
        out,
        "source: {} memories + {} relations, {:.1} MB of JSONL; added {} memories, {} relations, {} vectors, {} errors\n",
        memories,
        memories - 1,
        bytes as f64 / 1e6,
        report.memories_added,
        report.relations_added,
        report.vectors_added,
        report.errors
    );
    let _ = writeln!(out, "| measure | value | floor | met |");
    let _ = writeln!(out, "|---|---:|---:|:---:|");
    let _ = writeln!(
        out,
        "| import {memories} memories with relations and embeddings | {import_s:.1} s ({:.0} records/s) | ≤ {floor_import_s:.0} s | {} |",
        report.records as f64 / import_s,
        ok(import_s <= floor_import_s)
    );
    let _ = writeln!(
        out,
        "| peak RSS (import, background jobs, reader) | {rss:.0} MiB | {} | {} |",
        if floor_rss_mib.is_finite() {
            format!("≤ {floor_rss_mib} MiB")
        } else {
            "—".to_owned()
        },
        ok(rss <= floor_rss_mib)
    );
    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    let _ = writeln!(
        out,
        "| hybrid recall during the import ({} calls) | p50 {p50:.1} ms, p99 {p99:.1} ms, max {:.1} ms | p99 ≤ {FLOOR_RECALL_P99_MS} ms | {} |",
        lat.len(),
        lat.last().copied().unwrap_or(f64::NAN),
        ok(p99 <= FLOOR_RECALL_P99_MS)
    );
    let _ = writeln!(
        out,
        "| export {memories} memories to JSONL | {export_s:.2} s ({:.1} MB) | ≤ {floor_export_s:.1} s | {} |",
        export.bytes as f64 / 1e6,
        ok(export_s <= floor_export_s)
    );
    let _ = writeln!(
        out,
        "| hybrid recall while the graph takes the new vectors in ({} calls, {graph_s:.0} s) | p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms | | |",
        after.len(),
        percentile(&after, 0.5),
        percentile(&after, 0.99),
        after.last().copied().unwrap_or(f64::NAN)
    );
    let _ = writeln!(
        out,
        "\nthe last imported memory found by a vector search as the import returned: {}; peak RSS with the graph built: {rss_after:.0} MiB",
        if found_at_once { "yes" } else { "no" }
    );
    if import_s <= floor_import_s
        && rss <= floor_rss_mib
        && p99 <= FLOOR_RECALL_P99_MS
        && export_s <= floor_export_s
    {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
