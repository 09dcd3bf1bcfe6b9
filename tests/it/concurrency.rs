//! Two server processes on one database: concurrent writes never fail, and each process sees the
//! other's memories in recall within a second.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Era, Server, TestDb};

const PER_PROCESS: usize = 1_000;
const PER_CALL: usize = 10;
/// Tokens asked for in one recall (the query is "any of these words").
const TOKENS_PER_QUERY: usize = 50;

fn token(n: usize) -> String {
    format!("zq{n}x")
}

/// Remembers memories `first..first + PER_PROCESS` in calls of `PER_CALL`; returns when the last
/// call was answered.
async fn writer(s: &Server, first: usize) -> Instant {
    for call in 0..PER_PROCESS / PER_CALL {
        let memories: Vec<Value> = (0..PER_CALL)
            .map(|i| {
                let n = first + call * PER_CALL + i;
                json!({"content": format!("shared memory {} written by one of two servers", token(n)), "namespace": "shared"})
            })
            .collect();
        let out = s.ok("remember", json!({ "memories": memories })).await;
        assert_eq!(out["ok"], PER_CALL, "{out}");
        assert_eq!(out["failed"], 0, "{out}");
        // Let the other process in between calls, so writes interleave.
        tokio::task::yield_now().await;
    }
    Instant::now()
}

/// Polls recall on `s` until every memory is found or `deadline` passes; returns what is missing.
async fn missing_after(s: &Server, all: usize, deadline: Instant) -> Vec<usize> {
    let mut pending: Vec<usize> = (0..all).collect();
    loop {
        let mut still = Vec::new();
        for group in pending.chunks(TOKENS_PER_QUERY) {
            let query = group
                .iter()
                .map(|&n| token(n))
                .collect::<Vec<_>>()
                .join(" ");
            let out = s
                .ok(
                    "recall",
                    json!({"query": query, "namespace": "shared", "limit": 100, "full": true, "mode": "text"}),
                )
                .await;
            let found: HashSet<String> = out["hits"]
                .as_array()
                .expect("hits")
                .iter()
                .filter_map(|h| h["content"].as_str())
                .filter_map(|c| c.split_whitespace().nth(2).map(str::to_owned))
                .collect();
            still.extend(
                group
                    .iter()
                    .copied()
                    .filter(|&n| !found.contains(&token(n))),
            );
        }
        pending = still;
        if pending.is_empty() || Instant::now() > deadline {
            return pending;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_write_one_database_and_see_each_other() {
    let db = TestDb::new();
    // Both start at once on a database that does not exist yet.
    let (a, b) = tokio::join!(db.serve(Era::Initialize), db.serve(Era::Discover));
    let (done_a, done_b) = tokio::join!(writer(&a, 0), writer(&b, PER_PROCESS));
    let last_write = done_a.max(done_b);
    let deadline = last_write + Duration::from_secs(1);

    let (miss_a, miss_b) = tokio::join!(
        missing_after(&a, 2 * PER_PROCESS, deadline),
        missing_after(&b, 2 * PER_PROCESS, deadline)
    );
    let waited = last_write.elapsed();
    assert!(
        miss_a.is_empty() && miss_b.is_empty(),
        "after {waited:?}, process A misses {} memories (e.g. {:?}) and process B misses {} (e.g. {:?})\nA: {}\nB: {}",
        miss_a.len(),
        &miss_a[..miss_a.len().min(5)],
        miss_b.len(),
        &miss_b[..miss_b.len().min(5)],
        a.log_tail(),
        b.log_tail()
    );

    for s in [&a, &b] {
        let stats = s.ok("stats", json!({})).await;
        assert_eq!(stats["memories"], 2 * PER_PROCESS, "{stats}");
    }
    a.stop().await;
    b.stop().await;
}
