//! Graph and task figures: traversal throughput on 1,000,000 nodes / 5,000,000 relations (one
//! core), memory per relation, graph load at start from the database and from the graph file
//! (1,000,000 relations), start of the real binary to its first `traverse` answer (500,000 and
//! 1,000,000 relations, from either source), time from
//! `tools/call` to a task handle, and `tasks/get` latency against the real binary. Prints a
//! markdown table with the machine it ran on.
//! Run: `cargo build --release && cargo run --release --example graph_figures`.

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;

#[path = "common/graph_db.rs"]
mod graph_db;

use std::io::{BufRead, BufReader, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mnemograph::graph::traverse::{Order, Progress, Spec, traverse};
use mnemograph::graph::{Direction, MemoryGraph};
use mnemograph::model::EdgeRow;
use mnemograph::{Config, Engine};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, ProtocolVersion, TaskStatus,
};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

/// In-memory graph for the throughput figure.
const NODES: i64 = 1_000_000;
const RELATIONS_PER_NODE: i64 = 5;
const WALKS: usize = 7;
/// Database for load and task figures.
const DB_MEMORIES: usize = 200_000;
const DB_RELATIONS: usize = 1_000_000;
const LOADS: usize = 5;
/// Database for the start-up figure at the floor's size.
const START_MEMORIES: usize = 100_000;
const START_RELATIONS: usize = 500_000;
/// Fresh server starts timed to their first `traverse` answer.
const STARTS: usize = 7;
const HANDLES: usize = 15;
const GETS: usize = 2_000;

const FLOOR_VISITS_PER_S: f64 = 5_000_000.0;
const FLOOR_HANDLE_MS: f64 = 50.0;
const FLOOR_GET_P50_MS: f64 = 1.0;
const FLOOR_LOAD_MS: f64 = 1_000.0;
const FLOOR_FIRST_TRAVERSE_MS: f64 = 300.0;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

/// Walk every node: (nodes visited per second, nodes visited), median of `WALKS`.
fn throughput(g: &MemoryGraph, direction: Direction) -> (f64, u64) {
    let spec = Spec {
        depth: 8,
        direction,
        kinds: None,
        min_weight: 0.0,
        valid_at: None,
        max_nodes: usize::MAX,
        order: Order::Breadth,
        within: None,
    };
    let mut rates = Vec::new();
    let mut visited = 0;
    for w in 0..WALKS {
        let mut go = |_: &Progress| ControlFlow::Continue(());
        let t = Instant::now();
        let o = traverse(g, &[1 + w as i64], &spec, &mut go);
        rates.push(o.progress.visited as f64 / t.elapsed().as_secs_f64());
        visited = o.progress.visited;
    }
    (median(rates), visited)
}

/// The server binary next to this example.
fn server_binary() -> PathBuf {
    fixture::server_binary().expect("build the server first: cargo build --release")
}

/// Milliseconds from spawning `mnemograph serve` to its answer to a `traverse` sent right after
/// `initialize`: a 2025-11-25 client has no tasks, so the answer waits for the graph to load.
fn first_traverse_ms(db: &Path) -> f64 {
    let started = Instant::now();
    let mut child = std::process::Command::new(server_binary())
        .arg("serve")
        .arg("--db")
        .arg(db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start mnemograph serve");
    let mut stdin = child.stdin.take().expect("stdin");
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "graph-figures", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "traverse", "arguments": {"names": ["root"], "depth": 1, "limit": 5}}}),
    ] {
        writeln!(stdin, "{m}").expect("write a request");
    }
    stdin.flush().expect("flush the requests");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut took = None;
    for line in stdout.lines() {
        let line = line.expect("read an answer");
        let v: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
        if v["id"] == 2 {
            assert!(
                v["result"]["structuredContent"]["nodes"].is_array(),
                "{line}"
            );
            took = Some(started.elapsed().as_secs_f64() * 1e3);
            break;
        }
    }
    drop(stdin);
    let _ = child.wait();
    took.expect("the server answered the traverse")
}

/// The graph file beside the database at `db`.
fn graph_file(db: &Path) -> PathBuf {
    Config::for_db(db)
        .index_dir
        .join(mnemograph::index::graph_file::FILE_NAME)
}

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

async fn task_figures(db: &Path) -> (Vec<f64>, Vec<f64>) {
    let mut cmd = tokio::process::Command::new(server_binary());
    cmd.arg("serve").arg("--db").arg(db).kill_on_drop(true);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let client = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("figures", "1"),
    )
    .serve_with_lifecycle(
        transport,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("session");
    let deep = json!({"names": ["root"], "depth": 8, "max_nodes": 1_000_000, "focus": "topic 7", "limit": 10});
    // Warm up: graph loaded, caches hot.
    let _ = client
        .call_tool_once(
            CallToolRequestParams::new("traverse")
                .with_arguments(args(json!({"names": ["root"], "depth": 1}))),
        )
        .await;
    let mut handle_ms = Vec::new();
    let mut last = String::new();
    for _ in 0..HANDLES {
        let t = Instant::now();
        let r = client
            .call_tool_once(
                CallToolRequestParams::new("traverse").with_arguments(args(deep.clone())),
            )
            .await
            .expect("call");
        handle_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let CallToolResponse::Task(task) = r else {
            panic!("expected a task")
        };
        last = task.task.task_id.clone();
        let _ = client
            .cancel_task(CancelTaskParams::new(task.task.task_id))
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // One task run to its end, then polled.
    let r = client
        .call_tool_once(CallToolRequestParams::new("traverse").with_arguments(args(deep)))
        .await
        .expect("call");
    if let CallToolResponse::Task(t) = r {
        last = t.task.task_id;
    }
    loop {
        let t = client
            .get_task(GetTaskParams::new(last.clone()))
            .await
            .expect("get");
        if t.task.task.status != TaskStatus::Working {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut get_ms = Vec::new();
    for _ in 0..GETS {
        let t = Instant::now();
        client
            .get_task(GetTaskParams::new(last.clone()))
            .await
            .expect("get");
        get_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    (handle_ms, get_ms)
}

fn main() {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "building the in-memory graph ({NODES} nodes, {} relations) …",
        NODES * RELATIONS_PER_NODE
    );
    let mut s = 7u64;
    let rows = (1..=NODES).flat_map(|i| {
        (0..RELATIONS_PER_NODE)
            .map(|j| {
                let dst = if j == 0 {
                    i % NODES + 1
                } else {
                    (graph_db::xorshift(&mut s) % NODES as u64) as i64 + 1
                };
                EdgeRow {
                    relation: i * 8 + j,
                    src: i,
                    dst,
                    kind: if j == 0 {
                        "next".into()
                    } else {
                        "about".into()
                    },
                    weight: 0.9,
                    reinforced_at: 0,
                    valid_from: None,
                    valid_until: None,
                }
            })
            .collect::<Vec<_>>()
    });
    let mut g = MemoryGraph::from_rows(rows, (NODES * RELATIONS_PER_NODE) as usize);
    let (plain_rate, _) = throughput(&g, Direction::Both);
    g.freeze();
    let (out_rate, out_n) = throughput(&g, Direction::Out);
    let (both_rate, both_n) = throughput(&g, Direction::Both);
    let _ = writeln!(
        out,
        "both directions without the compact adjacency: {:.1} M nodes/s",
        plain_rate / 1e6
    );
    let bytes = g.bytes_per_relation();
    drop(g);

    let _ = writeln!(
        out,
        "preparing the database ({DB_MEMORIES} memories, {DB_RELATIONS} relations; cached under target/bench-data) …"
    );
    let db = graph_db::database(DB_MEMORIES, DB_RELATIONS);
    let _ = writeln!(
        out,
        "preparing the start-up database ({START_MEMORIES} memories, {START_RELATIONS} relations) …"
    );
    let start_db = graph_db::database(START_MEMORIES, START_RELATIONS);
    // Each start from the database (the graph file removed first), then from the graph file
    // (which the first of those starts left).
    let starts = |db: &Path, with_file: bool| -> Vec<f64> {
        (0..STARTS)
            .map(|_| {
                if !with_file {
                    let _ = std::fs::remove_file(graph_file(db));
                }
                first_traverse_ms(db)
            })
            .collect()
    };
    let first_small = [starts(&start_db, false), starts(&start_db, true)];
    let first_big = [starts(&db, false), starts(&db, true)];
    let mut loads = [Vec::new(), Vec::new()];
    for (from_file, loads) in [false, true].into_iter().zip(&mut loads) {
        for _ in 0..LOADS {
            if !from_file {
                let _ = std::fs::remove_file(graph_file(&db));
            }
            let e = Engine::open(Config::for_db(&db)).expect("open");
            let t = Instant::now();
            let stats = e.graph_stats().expect("graph");
            loads.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(stats.relations > 900_000);
            assert_eq!(stats.from_file, from_file);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (handle_ms, get_ms) = runtime.block_on(task_figures(&db));

    let ok = |pass: bool| if pass { "yes" } else { "NO" };
    let _ = writeln!(out, "\nmachine: {}\n", machine());
    let _ = writeln!(out, "| figure | value | floor | met |");
    let _ = writeln!(out, "|---|---|---|---|");
    let _ = writeln!(
        out,
        "| traversal, out-edges, 1 core (median of {WALKS}, {out_n} nodes each) | {:.1} M nodes/s | ≥ 5 M nodes/s | {} |",
        out_rate / 1e6,
        ok(out_rate >= FLOOR_VISITS_PER_S)
    );
    let _ = writeln!(
        out,
        "| traversal, both directions, 1 core ({both_n} nodes each) | {:.1} M nodes/s | ≥ 5 M nodes/s | {} |",
        both_rate / 1e6,
        ok(both_rate >= FLOOR_VISITS_PER_S)
    );
    let _ = writeln!(
        out,
        "| memory per relation in the graph | {bytes:.0} bytes | reported | |"
    );
    let source = |from_file: bool| {
        if from_file {
            "from the graph file"
        } else {
            "from the database"
        }
    };
    for (from_file, loads) in [false, true].into_iter().zip(loads) {
        let l = median(loads);
        let _ = writeln!(
            out,
            "| graph load at start, {DB_RELATIONS} relations, {} (median of {LOADS}) | {l:.0} ms | ≤ 1,000 ms | {} |",
            source(from_file),
            ok(l <= FLOOR_LOAD_MS)
        );
    }
    for (relations, runs) in [(START_RELATIONS, first_small), (DB_RELATIONS, first_big)] {
        for (from_file, times) in [false, true].into_iter().zip(runs) {
            let m = median(times.clone());
            let _ = writeln!(
                out,
                "| start → first `traverse` answer (inline), {relations} relations, {} (median of {STARTS}; max {:.0} ms) | {m:.0} ms | ≤ 300 ms at 500,000 | {} |",
                source(from_file),
                pct(times, 1.0),
                if relations == START_RELATIONS {
                    ok(m <= FLOOR_FIRST_TRAVERSE_MS)
                } else {
                    ""
                }
            );
        }
    }
    let h = median(handle_ms.clone());
    let _ = writeln!(
        out,
        "| `tools/call` → task handle (median of {HANDLES}; max {:.1} ms) | {h:.1} ms | ≤ 50 ms | {} |",
        pct(handle_ms, 1.0),
        ok(h <= FLOOR_HANDLE_MS)
    );
    let g50 = pct(get_ms.clone(), 0.5);
    let _ = writeln!(
        out,
        "| `tasks/get` over stdio, p50 / p99 ({GETS} calls) | {g50:.3} / {:.3} ms | p50 ≤ 1 ms | {} |",
        pct(get_ms, 0.99),
        ok(g50 <= FLOOR_GET_P50_MS)
    );
}
