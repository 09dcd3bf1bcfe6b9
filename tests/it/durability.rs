//! What survives a restart: every memory and relation, and recall results when the text index is
//! deleted and rebuilt from the database.

use serde_json::{Value, json};

use crate::support::{Era, Server, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_every_memory_and_relation() {
    let db = TestDb::new();
    let first = db.serve(Era::Initialize).await;
    let memories: Vec<Value> = (0..200)
        .map(|n| {
            json!({"content": format!("durable fact number {n} with token rq{n}z"), "namespace": "keep",
                   "name": format!("fact-{n}"), "tags": [format!("t{}", n % 7)]})
        })
        .collect();
    let ids = first.remember(Value::Array(memories)).await;
    let relations: Vec<Value> = (1..200)
        .map(|n| json!({"from": format!("fact-{n}"), "to": format!("fact-{}", n - 1), "kind": "follows", "namespace": "keep"}))
        .collect();
    let rel = first.ok("relate", json!({"relations": relations})).await;
    assert_eq!(rel["ok"], 199, "{rel}");
    first
        .ok(
            "update",
            json!({"id": ids[5], "content": "durable fact five was rewritten rq5z"}),
        )
        .await;
    first.ok("forget", json!({"ids": [ids[7]]})).await;
    // Stop right after the writes: nothing may depend on the background indexer having run.
    first.stop().await;

    let second = db.serve(Era::Discover).await;
    let stats = second.ok("stats", json!({})).await;
    assert_eq!(stats["memories"], 199, "{stats}");
    assert_eq!(stats["forgotten_memories"], 1, "{stats}");
    assert_eq!(stats["relations"], 199, "{stats}");

    // Ten at a time: a `get` of a hundred related memories is more than one result may carry.
    for chunk in ids.chunks(10) {
        let got = second.ok("get", json!({"ids": chunk})).await;
        let got = got["memories"].as_array().expect("memories");
        assert_eq!(got.len(), chunk.len());
        for m in got {
            let id = m["id"].as_str().expect("id");
            let n = ids.iter().position(|i| i == id).expect("a known id");
            let want = if n == 5 {
                "durable fact five was rewritten rq5z".to_owned()
            } else {
                format!("durable fact number {n} with token rq{n}z")
            };
            assert_eq!(m["content"], want.as_str(), "{m}");
            assert_eq!(m["name"], format!("fact-{n}").as_str());
            assert_eq!(m["tags"], json!([format!("t{}", n % 7)]));
            assert_eq!(m["forgotten_at"].is_string(), n == 7, "{m}");
            // Every fact follows its predecessor and is followed by its successor, except where
            // the forgotten fact 7 hides them.
            let rels = m["relations"].as_array().expect("relations");
            let mut want_rels = 0;
            if n > 0 && n != 8 && n != 7 {
                want_rels += 1;
            }
            if n < 199 && n != 6 && n != 7 {
                want_rels += 1;
            }
            assert_eq!(rels.len(), want_rels, "fact {n}: {m}");
            for r in rels {
                assert_eq!(r["kind"], "follows");
            }
        }
    }
    let history = second
        .ok("get", json!({"ids": [ids[5]], "history": true}))
        .await;
    assert_eq!(
        history["memories"][0]["history"][0]["op"], "update",
        "{history}"
    );

    // Recall finds each of them by its token after the restart, and not the forgotten one.
    for (n, id) in ids.iter().enumerate() {
        let found = second
            .recall_ids(json!({"query": format!("rq{n}z"), "namespace": "keep", "limit": 5, "mode": "text", "expand": 0}))
            .await;
        if n == 7 {
            assert!(found.is_empty(), "forgotten fact recalled: {found:?}");
        } else {
            assert_eq!(found, [id.as_str()], "fact {n}");
        }
    }
    second.stop().await;
}

/// A small deterministic generator, so the corpus is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

const WORDS: &[&str] = &[
    "river", "mountain", "deploy", "server", "coffee", "garden", "invoice", "meeting", "python",
    "rust", "database", "holiday", "train", "budget", "kernel", "recipe", "guitar", "network",
    "doctor", "laptop", "ticket", "weather", "market", "planet", "castle", "engine", "forest",
    "winter", "summer", "bridge",
];

fn sentence(rng: &mut Lcg) -> String {
    let len = 3 + rng.next(12);
    (0..len)
        .map(|_| WORDS[rng.next(WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

const QUERIES: &[&str] = &[
    "river mountain",
    "deploy the server",
    "coffee?",
    "budget meeting invoice",
    "rust python kernel database",
    "winter holiday train",
    "weather",
    "castle forest bridge planet",
];

type Ranking = Vec<(String, f64)>;

/// Every query of `QUERIES` in both namespaces: (id, score) of the hits, in rank order.
async fn snapshot(s: &Server) -> Vec<((&'static str, &'static str), Ranking)> {
    let mut out = Vec::new();
    for q in QUERIES {
        for ns in ["alpha", "beta"] {
            let res = s
                .ok(
                    "recall",
                    json!({"query": q, "namespace": ns, "limit": 50, "mode": "text"}),
                )
                .await;
            let hits: Ranking = res["hits"]
                .as_array()
                .expect("hits")
                .iter()
                .map(|h| {
                    (
                        h["id"].as_str().expect("id").to_owned(),
                        h["score"].as_f64().expect("score"),
                    )
                })
                .collect();
            assert!(!hits.is_empty(), "{q:?} in {ns} found nothing");
            out.push(((*q, ns), hits));
        }
    }
    out
}

/// Why two rankings of one query differ, for the failure message.
fn difference(before: &Ranking, after: &Ranking) -> Option<String> {
    let ids = |r: &Ranking| r.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
    if ids(before) == ids(after) {
        return None;
    }
    let first = before
        .iter()
        .zip(after)
        .position(|(a, b)| a.0 != b.0)
        .unwrap_or(before.len().min(after.len()));
    let scores = |r: &Ranking| {
        r.iter()
            .skip(first.saturating_sub(1))
            .take(4)
            .map(|(id, s)| format!("{id}={s:.6}"))
            .collect::<Vec<_>>()
    };
    let same_scores = before.len() == after.len()
        && before
            .iter()
            .zip(after)
            .all(|(a, b)| (a.1 - b.1).abs() < 1e-6);
    Some(format!(
        "first difference at rank {first} ({}): before {:?}, after {:?}",
        if same_scores {
            "same scores, so only ties are ordered differently"
        } else {
            "the scores differ too"
        },
        scores(before),
        scores(after)
    ))
}

/// Fills a database in several batches (with searches between them, so the index is built
/// incrementally), optionally updating and forgetting some memories; then records the recall
/// results, deletes `<db>.index/text`, restarts, and checks every result is the same, in order.
async fn rebuild_gives_identical_recall(with_changes: bool) {
    let db = TestDb::new();
    let mut rng = Lcg(42);
    let s = db.serve(Era::Initialize).await;
    for batch in 0..6 {
        let memories: Vec<Value> = (0..100)
            .map(|i| {
                let ns = if i % 3 == 0 { "beta" } else { "alpha" };
                json!({"content": format!("{} #{batch}-{i}", sentence(&mut rng)), "namespace": ns})
            })
            .collect();
        let ids = s.remember(Value::Array(memories)).await;
        s.recall_ids(json!({"query": "river"})).await;
        if with_changes {
            for id in ids.iter().step_by(17) {
                let content = format!("{} (revised)", sentence(&mut rng));
                s.ok("update", json!({"id": id, "content": content})).await;
            }
            let forgotten: Vec<&String> = ids.iter().skip(5).step_by(23).collect();
            s.ok("forget", json!({"ids": forgotten})).await;
        }
    }
    let before = snapshot(&s).await;
    let stats = s.ok("stats", json!({})).await;
    let live = if with_changes { 570 } else { 600 };
    assert_eq!(stats["memories"], live, "{stats}");
    s.stop().await;

    let text = db.text_index_dir();
    assert!(text.is_dir(), "no text index at {}", text.display());
    std::fs::remove_dir_all(&text).expect("delete the text index");

    let s = db.serve(Era::Discover).await;
    let after = snapshot(&s).await;
    let differences: Vec<String> = before
        .iter()
        .zip(&after)
        .filter_map(|((key, b), (_, a))| difference(b, a).map(|d| format!("{key:?}: {d}")))
        .collect();
    assert!(
        differences.is_empty(),
        "{} of {} recalls differ after the text index was rebuilt:\n{}",
        differences.len(),
        before.len(),
        differences.join("\n")
    );
    assert!(text.is_dir(), "the text index was not recreated");
    let stats = s.ok("stats", json!({})).await;
    assert_eq!(stats["text_index_lag"], 0, "{stats}");
    assert_eq!(stats["memories"], live, "{stats}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilt_text_index_gives_identical_recall() {
    rebuild_gives_identical_recall(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilt_text_index_gives_identical_recall_after_updates_and_forgets() {
    rebuild_gives_identical_recall(true).await;
}
