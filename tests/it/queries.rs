//! Queries the way agents really write them: questions, punctuation, quotes, operator words and
//! characters, non-Latin scripts, emoji. Each must come back ranked, never as an error or as a
//! silent empty result while matching memories exist.

use serde_json::json;

use crate::support::{Era, TestDb};

/// (key, content) of the corpus.
const CORPUS: &[(&str, &str)] = &[
    ("tea", "Alice drinks green tea every morning, never coffee"),
    ("coffee", "Bob likes his coffee black: no milk, no sugar"),
    (
        "deploy",
        "Deploys of Atlas go through the staging cluster first",
    ),
    (
        "release",
        "The Atlas project ships its first release in March",
    ),
    ("cpp", "The C++ build uses clang-17 and CMake presets"),
    ("url", "Docs live at https://example.com/atlas/docs?lang=en"),
    (
        "operators",
        "Use AND, OR and NOT to combine the filters in the old search UI",
    ),
    ("zh", "我喜欢喝绿茶，不喜欢喝咖啡"),
    ("ru", "Москва — столица России, там живёт Иван"),
    ("ja", "東京は日本の首都です。ラーメンが好き"),
    (
        "emoji",
        "Launch day 🚀 went smoothly 🎉 thanks to the on-call team",
    ),
    ("email", "Contact carol@example.org about invoice #4521"),
];

/// (query, key of the memory that must be among the hits).
const QUERIES: &[(&str, &str)] = &[
    ("What does Alice drink in the morning?", "tea"),
    ("\"green tea\"", "tea"),
    ("'green tea' OR \"black coffee\"", "coffee"),
    ("alice: tea (morning)", "tea"),
    ("tea AND morning", "tea"),
    ("coffee NOT milk", "coffee"),
    ("NOT milk OR sugar", "coffee"),
    ("coffee -milk +sugar", "coffee"),
    ("deploy*", "deploy"),
    ("*staging*", "deploy"),
    ("staging~", "deploy"),
    ("staging~2", "deploy"),
    ("atlas^2 release", "release"),
    ("release?", "release"),
    ("when is the release?!", "release"),
    ("[March] {release}", "release"),
    ("title:release", "release"),
    ("content:\"first release\"", "release"),
    ("C++ build?", "cpp"),
    ("clang-17", "cpp"),
    ("https://example.com/atlas/docs?lang=en", "url"),
    ("path\\to\\docs", "url"),
    ("AND OR NOT", "operators"),
    ("AND", "operators"),
    ("NOT", "operators"),
    ("carol@example.org", "email"),
    ("invoice #4521", "email"),
    ("a && b || !c docs", "url"),
    ("喜欢绿茶", "zh"),
    ("谁喜欢喝绿茶？", "zh"),
    ("столица России?", "ru"),
    ("Где живёт Иван", "ru"),
    ("日本の首都はどこですか", "ja"),
    ("ラーメン", "ja"),
    ("🚀 launch day?", "emoji"),
    ("did the launch go well? 🎉🎉", "emoji"),
    ("on-call", "emoji"),
    ("   tea   ", "tea"),
    ("TEA", "tea"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_queries_return_ranked_hits() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let memories: Vec<_> = CORPUS
            .iter()
            .map(|(_, c)| json!({"content": c, "namespace": "q"}))
            .collect();
        let ids = s.remember(json!(memories)).await;
        let id_of = |key: &str| {
            let i = CORPUS
                .iter()
                .position(|(k, _)| *k == key)
                .expect("a corpus key");
            ids[i].clone()
        };
        let mut failures = Vec::new();
        for (query, key) in QUERIES {
            for args in [
                json!({"query": query, "namespace": "q"}),
                json!({"query": query}),
                json!({"query": query, "namespace": "q", "full": true, "limit": 3}),
            ] {
                let out = match s.call("recall", args.clone()).await {
                    Ok(out) => out,
                    Err(e) => {
                        failures.push(format!("{args}: error {e:?}"));
                        continue;
                    }
                };
                let hits = out["hits"].as_array().expect("hits");
                if hits.is_empty() {
                    failures.push(format!("{args}: no hits"));
                    continue;
                }
                let want = id_of(key);
                if !hits.iter().any(|h| h["id"] == want.as_str()) {
                    failures.push(format!("{args}: {key} not among {out}"));
                }
                let scores: Vec<f64> = hits
                    .iter()
                    .map(|h| h["score"].as_f64().unwrap_or(f64::NAN))
                    .collect();
                if !scores.windows(2).all(|w| w[0] >= w[1]) || scores.iter().any(|s| *s <= 0.0) {
                    failures.push(format!("{args}: not ranked: {scores:?}"));
                }
            }
        }
        // The plain question finds the best match first.
        let top = s
            .recall_ids(json!({"query": "Who drinks green tea?", "namespace": "q"}))
            .await;
        assert_eq!(top.first(), Some(&id_of("tea")), "{era:?}");
        assert!(
            failures.is_empty(),
            "{era:?}: {} of {} queries failed:\n{}",
            failures.len(),
            QUERIES.len() * 3,
            failures.join("\n")
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snippets_show_the_matching_words() {
    let db = TestDb::new();
    let s = db.serve(Era::Initialize).await;
    let long = format!(
        "{} The rollback plan for the quarterly migration is documented in the wiki. {}",
        "Unrelated preamble text. ".repeat(40),
        "Unrelated closing text. ".repeat(40)
    );
    s.remember(json!([{"content": long}, {"content": "东京的天气很好"}]))
        .await;
    let out = s.ok("recall", json!({"query": "rollback plan?"})).await;
    let snippet = out["hits"][0]["snippet"].as_str().expect("snippet");
    assert!(snippet.contains("rollback"), "{snippet}");
    assert!(
        snippet.len() < long.len(),
        "the snippet is the whole content"
    );
    let out = s.ok("recall", json!({"query": "天气"})).await;
    let snippet = out["hits"][0]["snippet"].as_str().expect("snippet");
    assert!(snippet.contains("天气"), "{snippet}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_recall_finds_meaning_and_explains_itself() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let ids = s
            .remember(json!([
                {"content": "The automobile would not start this morning"},
                {"content": "Bought fresh basil and tomatoes at the market"},
                {"content": "The quarterly tax filing is due in April"}
            ]))
            .await;
        // No shared word: text finds nothing, the default (hybrid) finds the car by meaning.
        let text = s
            .recall_ids(json!({"query": "car engine trouble", "mode": "text"}))
            .await;
        assert!(text.is_empty(), "{era:?}: {text:?}");
        let out = s
            .ok(
                "recall",
                json!({"query": "car engine trouble", "explain": true}),
            )
            .await;
        assert_eq!(out["hits"][0]["id"], json!(ids[0]), "{era:?}: {out}");
        let x = &out["hits"][0]["explain"];
        assert_eq!(x["vector_rank"], json!(1), "{out}");
        assert!(x.get("text_rank").is_none(), "{out}");
        assert_eq!(x["score"], out["hits"][0]["score"], "{out}");
        assert!(out.get("warnings").is_none(), "{out}");
        // Vector mode ranks by similarity.
        let v = s
            .ok(
                "recall",
                json!({"query": "basil", "mode": "vector", "limit": 3}),
            )
            .await;
        assert_eq!(v["hits"][0]["id"], json!(ids[1]), "{v}");
        // The background job stores the vectors within a tick or so.
        let mut stats = s.ok("stats", json!({})).await;
        let waited = std::time::Instant::now();
        while stats["vectors"] != 3 && waited.elapsed() < std::time::Duration::from_secs(20) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            stats = s.ok("stats", json!({})).await;
        }
        assert_eq!(stats["embedding_model"], "minilm-static-256-v2", "{stats}");
        assert_eq!(stats["vectors"], 3, "{stats}");
        s.stop().await;
    }
}
