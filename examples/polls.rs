//! How often a client that follows the server's advice (`pollIntervalMs`) polls a task: a
//! smaller import, a larger one and a focused walk over the larger, each run as a task by the
//! real server over stdio and polled by the rmcp client exactly as advised. Prints, per task,
//! how long it ran, the server's estimate, the polls made while it worked and the intervals
//! advised — and the polls a fixed 250 ms interval would have made.
//!
//! `cargo build --release && cargo run --release --example polls [-- --scale 0.1]`: `--scale`
//! multiplies the sizes (1 by default: 125,000 and 625,000 memories, each related to three
//! others; about 30 s and 150 s of import on 2 cores, and a walk of about a second).

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;
#[allow(dead_code, unused_macros)]
#[macro_use]
#[path = "common/report.rs"]
mod report;

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, ProtocolVersion, TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};

/// A 2026-07-28 client that declares the tasks extension.
#[derive(Clone)]
struct Poller;

impl ClientHandler for Poller {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("polls-example", "1.0"),
        )
    }
}

const WORDS: [&str; 16] = [
    "billing", "invoice", "tea", "garden", "rust", "kernel", "piano", "river", "ledger", "orbit",
    "copper", "violet", "harbor", "meadow", "signal", "canyon",
];

/// Writes `n` memories to `path` (namespace `ns`), each related to `degree` others.
fn corpus(path: &Path, ns: &str, n: usize, degree: usize) -> std::io::Result<()> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    for i in 0..n {
        let content = format!(
            "{ns} note {i} about {} and {} with {}",
            WORDS[i % 16],
            WORDS[(i / 16) % 16],
            WORDS[(i / 256) % 16]
        );
        let m = json!({"type": "memory", "id": format!("{ns}-{i}"), "name": format!("{ns}-{i}"),
            "namespace": ns, "content": content, "kind": "note"});
        writeln!(w, "{m}")?;
    }
    for i in 0..n {
        for d in 0..degree {
            let to = (i * (7 + 6 * d) + 1 + d) % n;
            if to == i {
                continue;
            }
            let r = json!({"type": "relation", "from": format!("{ns}-{i}"), "to": format!("{ns}-{to}"),
                "kind": "links"});
            writeln!(w, "{r}")?;
        }
    }
    w.flush()
}

/// What following one task's advice took.
struct Followed {
    what: String,
    took: Duration,
    estimate_ms: f64,
    intervals: Vec<u64>,
}

async fn follow(
    client: &RunningService<RoleClient, Poller>,
    what: &str,
    tool: &str,
    args: Value,
) -> Followed {
    let Value::Object(args) = args else {
        unreachable!("arguments are an object")
    };
    let started = Instant::now();
    let answer = client
        .call_tool_once(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .expect("tools/call");
    let created = match answer {
        CallToolResponse::Task(created) => created,
        CallToolResponse::Complete(r) => {
            assert_ne!(r.is_error, Some(true), "{what}: {r:?}");
            return Followed {
                what: format!("{what} (answered inline)"),
                took: started.elapsed(),
                estimate_ms: 0.0,
                intervals: Vec::new(),
            };
        }
        other => panic!("{what}: {other:?}"),
    };
    let estimate_ms = created
        .meta
        .as_ref()
        .and_then(|m| m.0.get("mnemograph/decision"))
        .and_then(|d| d["estimateMs"].as_f64())
        .unwrap_or(0.0);
    let id = created.task.task_id.clone();
    let mut intervals = vec![created.task.poll_interval_ms.unwrap_or(0)];
    tokio::time::sleep(Duration::from_millis(intervals[0])).await;
    loop {
        let t = client
            .get_task(GetTaskParams::new(id.clone()))
            .await
            .expect("tasks/get");
        if t.task.task.status != TaskStatus::Working {
            assert_eq!(t.task.task.status, TaskStatus::Completed, "{what}");
            break;
        }
        let next = t
            .task
            .task
            .poll_interval_ms
            .expect("a working task advises");
        intervals.push(next);
        tokio::time::sleep(Duration::from_millis(next)).await;
    }
    Followed {
        what: what.to_owned(),
        took: started.elapsed(),
        estimate_ms,
        intervals,
    }
}

fn main() -> ExitCode {
    let Some(bin) = fixture::server_binary() else {
        note!("target/release/mnemograph not found: run `cargo build --release` first");
        return ExitCode::from(2);
    };
    let mut scale = 1.0f64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--scale", Some(s)) if s > 0.0 => scale = s,
            _ => {
                note!("usage: polls [--scale FACTOR]");
                return ExitCode::from(2);
            }
        }
    }
    let dir = tempfile::tempdir().expect("a scratch folder");
    let db = dir.path().join("memory.db");
    let small = (125_000.0 * scale) as usize;
    let large = (625_000.0 * scale) as usize;
    note!("writing the corpora ({small} and {large} memories)…");
    corpus(&dir.path().join("small.jsonl"), "small", small, 3).expect("write a corpus");
    corpus(&dir.path().join("large.jsonl"), "large", large, 3).expect("write a corpus");

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let rows = runtime.block_on(async {
        let mut cmd = tokio::process::Command::new(&bin);
        cmd.arg("serve")
            .arg("--db")
            .arg(&db)
            .env("MNEMOGRAPH_LOG", "warn")
            .kill_on_drop(true);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start the server");
        let client = Poller
            .serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("a session");
        let mut rows = Vec::new();
        let path = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
        note!("importing the smaller corpus…");
        rows.push(
            follow(
                &client,
                &format!("import {small} memories + {} relations", 3 * small),
                "import",
                json!({"source": {"path": path("small.jsonl")}}),
            )
            .await,
        );
        note!("importing the larger corpus…");
        rows.push(
            follow(
                &client,
                &format!("import {large} memories + {} relations", 3 * large),
                "import",
                json!({"source": {"path": path("large.jsonl")}}),
            )
            .await,
        );
        note!("walking the larger…");
        rows.push(
            follow(
                &client,
                "traverse depth 8, both ways, focus",
                "traverse",
                json!({"names": ["large-0"], "namespace": "large", "depth": 8, "direction": "both",
                    "max_nodes": 1_000_000, "focus": "billing invoice tea", "limit": 20}),
            )
            .await,
        );
        let _ = client.cancel().await;
        rows
    });
    out!(
        "| task | ran | estimate | polls (`tasks/get` calls) | intervals advised (ms) | polls at a fixed 250 ms |"
    );
    out!("|---|---:|---:|---:|---|---:|");
    for r in &rows {
        let shown: Vec<String> = if r.intervals.len() <= 6 {
            r.intervals.iter().map(u64::to_string).collect()
        } else {
            let (lo, hi) = (r.intervals.iter().min(), r.intervals.iter().max());
            vec![format!("{}–{}", lo.unwrap_or(&0), hi.unwrap_or(&0))]
        };
        out!(
            "| {} | {:.1} s | {:.1} s | {} | {} | {} |",
            r.what,
            r.took.as_secs_f64(),
            r.estimate_ms / 1e3,
            r.intervals.len(),
            shown.join(", "),
            (r.took.as_millis() / 250).max(1)
        );
    }
    ExitCode::SUCCESS
}
