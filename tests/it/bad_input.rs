//! Bad input gets a clear error that names the field (and the fix), and the server goes on serving.
//! Invalid arguments, unknown ids and names are tool results with `isError` (the model reads them
//! and corrects itself); only an unknown tool is a JSON-RPC `invalid_params` error; items of a batch
//! fail on their own.

use serde_json::{Value, json};

use crate::support::{CallError, Era, INVALID_PARAMS, Server, TestDb};

/// What a bad call must answer.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// A JSON-RPC `invalid_params` error whose message contains all of these.
    Protocol(&'static [&'static str]),
    /// A tool result with `isError: true` whose text contains all of these.
    ToolError(&'static [&'static str]),
}

struct Case {
    what: &'static str,
    tool: &'static str,
    args: Value,
    want: Want,
}

fn case(what: &'static str, tool: &'static str, args: Value, want: Want) -> Case {
    Case {
        what,
        tool,
        args,
        want,
    }
}

/// `n` distinct names.
fn many(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("someone-{i}")).collect()
}

fn cases(known_id: &str) -> Vec<Case> {
    use Want::{Protocol, ToolError};
    let huge = "x".repeat(64 * 1024 + 1);
    let tags: Vec<String> = (0..40).map(|i| format!("tag{i}")).collect();
    vec![
        case(
            "missing query",
            "recall",
            json!({"limit": 5}),
            ToolError(&["query"]),
        ),
        case(
            "limit as a string",
            "recall",
            json!({"query": "tea", "limit": "5"}),
            ToolError(&["limit"]),
        ),
        case(
            "unknown recall mode",
            "recall",
            json!({"query": "tea", "mode": "fuzzy"}),
            ToolError(&["mode"]),
        ),
        case(
            "three fusion weights",
            "recall",
            json!({"query": "tea", "weights": [1, 1, 1]}),
            ToolError(&["weights", "two"]),
        ),
        case(
            "negative fusion weight",
            "recall",
            json!({"query": "tea", "weights": [1, -1]}),
            ToolError(&["weights"]),
        ),
        case(
            "whitespace query",
            "recall",
            json!({"query": "   \t"}),
            ToolError(&["query", "empty"]),
        ),
        case(
            "unknown field",
            "recall",
            json!({"query": "tea", "qurey": "tea"}),
            ToolError(&["qurey"]),
        ),
        case(
            "misspelt field of an item",
            "remember",
            json!({"memories": [{"contnet": "x"}]}),
            ToolError(&["contnet"]),
        ),
        case(
            "missing memories",
            "remember",
            json!({}),
            ToolError(&["memories"]),
        ),
        case(
            "memories not a list",
            "remember",
            json!({"memories": "tea"}),
            ToolError(&["memories"]),
        ),
        case(
            "empty memories",
            "remember",
            json!({"memories": []}),
            ToolError(&["memories"]),
        ),
        case(
            "empty query",
            "recall",
            json!({"query": ""}),
            ToolError(&["query"]),
        ),
        case(
            "whitespace query",
            "recall",
            json!({"query": " \t\n "}),
            ToolError(&["query"]),
        ),
        case(
            "punctuation-only query",
            "recall",
            json!({"query": "?!*"}),
            ToolError(&["query"]),
        ),
        case(
            "limit 0",
            "recall",
            json!({"query": "tea", "limit": 0}),
            ToolError(&["limit", "1"]),
        ),
        case(
            "limit 101",
            "recall",
            json!({"query": "tea", "limit": 101}),
            ToolError(&["limit", "100"]),
        ),
        case(
            "negative limit",
            "recall",
            json!({"query": "tea", "limit": -1}),
            ToolError(&["limit"]),
        ),
        case(
            "corrupt cursor",
            "recall",
            json!({"query": "tea", "cursor": "c1.zz.garbage"}),
            ToolError(&["cursor"]),
        ),
        case(
            "cursor of another query",
            "recall",
            json!({"query": "coffee", "cursor": "c1.10.0000000000000000"}),
            ToolError(&["cursor"]),
        ),
        case(
            "bad since",
            "recall",
            json!({"query": "tea", "since": "yesterday"}),
            ToolError(&["since", "RFC 3339"]),
        ),
        case(
            "bad until",
            "recall",
            json!({"query": "tea", "until": "2024-13-45"}),
            ToolError(&["until"]),
        ),
        case(
            "bad valid_from",
            "remember",
            json!({"memories": [{"content": "tea", "valid_from": "soon"}]}),
            ToolError(&["memories[0].valid_from"]),
        ),
        case(
            "bad valid_until in update",
            "update",
            json!({"id": known_id, "valid_until": "31/12/2024"}),
            ToolError(&["valid_until"]),
        ),
        case(
            "namespace and namespaces",
            "recall",
            json!({"query": "tea", "namespace": "a", "namespaces": ["b"]}),
            ToolError(&["namespace"]),
        ),
        case(
            "bad namespace in recall",
            "recall",
            json!({"query": "tea", "namespace": "bad ns!"}),
            ToolError(&["namespace"]),
        ),
        case(
            "bad namespaces in recall",
            "recall",
            json!({"query": "tea", "namespaces": ["ok", "bad ns!"]}),
            ToolError(&["namespaces"]),
        ),
        case(
            "content over 64 KiB",
            "remember",
            json!({"memories": [{"content": huge}]}),
            ToolError(&["memories[0].content", "65536"]),
        ),
        case(
            "content over 64 KiB in update",
            "update",
            json!({"id": known_id, "content": huge}),
            ToolError(&["content", "65536"]),
        ),
        case(
            "40 tags",
            "remember",
            json!({"memories": [{"content": "many tags", "tags": tags}]}),
            ToolError(&["memories[0].tags", "32"]),
        ),
        case(
            "40 tags in update",
            "update",
            json!({"id": known_id, "tags": tags}),
            ToolError(&["tags", "32"]),
        ),
        case(
            "bad namespace",
            "remember",
            json!({"memories": [{"content": "x", "namespace": "bad ns!"}]}),
            ToolError(&["memories[0].namespace"]),
        ),
        case(
            "empty content",
            "remember",
            json!({"memories": [{"content": "   "}]}),
            ToolError(&["memories[0].content"]),
        ),
        case(
            "importance 2",
            "remember",
            json!({"memories": [{"content": "x", "importance": 2}]}),
            ToolError(&["memories[0].importance"]),
        ),
        case(
            "metadata not an object",
            "remember",
            json!({"memories": [{"content": "x", "metadata": [1]}]}),
            ToolError(&["memories[0].metadata"]),
        ),
        case(
            "unknown get id",
            "get",
            json!({"ids": ["m_doesnotexist0000000"]}),
            ToolError(&["m_doesnotexist0000000"]),
        ),
        case(
            "unknown get name",
            "get",
            json!({"names": ["nobody-here"], "namespace": "people"}),
            ToolError(&["nobody-here", "people"]),
        ),
        case("get of nothing", "get", json!({}), ToolError(&["ids"])),
        case(
            "get of 101 names",
            "get",
            json!({"names": many(101)}),
            ToolError(&["`names`", "101", "100"]),
        ),
        case(
            "get of 101 ids",
            "get",
            json!({"ids": many(101)}),
            ToolError(&["`ids`", "101", "100"]),
        ),
        case(
            "get of 60 ids and 60 names",
            "get",
            json!({"ids": many(60), "names": many(60)}),
            ToolError(&["names", "120", "100"]),
        ),
        case(
            "unknown update id",
            "update",
            json!({"id": "m_doesnotexist0000000", "content": "x"}),
            ToolError(&["m_doesnotexist0000000"]),
        ),
        case(
            "unknown update name",
            "update",
            json!({"name": "ghost", "content": "x"}),
            ToolError(&["ghost"]),
        ),
        case(
            "update without target",
            "update",
            json!({"content": "x"}),
            ToolError(&["id"]),
        ),
        case(
            "update that changes nothing",
            "update",
            json!({"id": known_id}),
            ToolError(&["update"]),
        ),
        case(
            "relate to an unknown name",
            "relate",
            json!({"relations": [{"from": known_id, "to": "nobody-here", "kind": "knows"}]}),
            ToolError(&["relations[0].to", "nobody-here"]),
        ),
        case(
            "relate from an unknown id",
            "relate",
            json!({"relations": [{"from": "m_doesnotexist0000000", "to": known_id, "kind": "knows"}]}),
            ToolError(&["relations[0].from", "m_doesnotexist0000000"]),
        ),
        case(
            "relate with a bad kind",
            "relate",
            json!({"relations": [{"from": known_id, "to": known_id, "kind": "is a"}]}),
            ToolError(&["relations[0].kind"]),
        ),
        case(
            "link to an unknown name",
            "remember",
            json!({"memories": [{"content": "linked", "links": [{"to": "nobody-here", "kind": "about"}]}]}),
            ToolError(&["memories[0].links[0].to", "nobody-here"]),
        ),
        case(
            "forget an unknown id",
            "forget",
            json!({"ids": ["m_doesnotexist0000000"]}),
            ToolError(&["m_doesnotexist0000000"]),
        ),
        case(
            "forget half a relation",
            "forget",
            json!({"relations": [{"from": known_id}]}),
            ToolError(&["relations[0]"]),
        ),
        case("restore nothing", "restore", json!({}), ToolError(&["ids"])),
        case(
            "stats with arguments",
            "stats",
            json!({"verbose": true}),
            ToolError(&["verbose"]),
        ),
        case(
            "traverse with max_nodes as a word",
            "traverse",
            json!({"ids": [known_id], "max_nodes": "lots"}),
            ToolError(&["max_nodes"]),
        ),
        case(
            "traverse with a negative max_nodes",
            "traverse",
            json!({"ids": [known_id], "max_nodes": -3}),
            ToolError(&["max_nodes"]),
        ),
        case(
            "find_paths with an unknown field",
            "find_paths",
            json!({"from": known_id, "too": known_id}),
            ToolError(&["too"]),
        ),
        case(
            "import without a source",
            "import",
            json!({"format": "jsonl"}),
            ToolError(&["source"]),
        ),
        case(
            "export in an unknown format",
            "export",
            json!({"format": "xlsx"}),
            ToolError(&["format", "xlsx"]),
        ),
        case(
            "tasks with limit 500",
            "tasks",
            json!({"limit": 500}),
            ToolError(&["invalid `limit`: is 500. give 1 to 100"]),
        ),
        case(
            "tasks with a limit as a string",
            "tasks",
            json!({"limit": "all"}),
            ToolError(&["limit"]),
        ),
        case(
            "tasks with an unknown field",
            "tasks",
            json!({"status": "working"}),
            ToolError(&["status"]),
        ),
        case(
            "unknown tool",
            "remmeber",
            json!({}),
            Protocol(&["remmeber"]),
        ),
    ]
}

async fn check(s: &Server, c: &Case) -> Option<String> {
    let res = s.call(c.tool, c.args.clone()).await;
    let problem = match (&res, c.want) {
        (Err(CallError::Rpc { code, message }), Want::Protocol(words)) => {
            if *code != INVALID_PARAMS {
                Some(format!("code {code}, not {INVALID_PARAMS}: {message}"))
            } else {
                words
                    .iter()
                    .find(|w| !message.contains(*w))
                    .map(|w| format!("message does not name {w:?}: {message}"))
            }
        }
        (Err(CallError::Tool(text)), Want::ToolError(words)) => words
            .iter()
            .find(|w| !text.contains(*w))
            .map(|w| format!("error text does not name {w:?}: {text}")),
        (res, want) => Some(format!("wanted {want:?}, got {res:?}")),
    };
    problem.map(|p| {
        let mut p = p;
        p.truncate(600);
        format!("{} ({} {}): {p}", c.what, c.tool, short(&c.args))
    })
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 120 {
        s.truncate(120);
        s.push('…');
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_names_the_field_and_the_server_goes_on() {
    let mut failures = Vec::new();
    let mut total = 0;
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let ids = s
            .remember(json!([{"content": "Dana keeps the tea in the blue tin", "name": "dana"}]))
            .await;
        let known = ids[0].clone();
        for c in cases(&known) {
            total += 1;
            if let Some(p) = check(&s, &c).await {
                failures.push(format!("{era:?}: {p}"));
            }
            // The next valid call is served normally.
            let hits = s.recall_ids(json!({"query": "tea tin"})).await;
            assert_eq!(hits, [known.as_str()], "{era:?}: after {}", c.what);
        }
        // Nothing from the failed calls was stored or changed.
        let stats = s.ok("stats", json!({})).await;
        assert_eq!(stats["memories"], 1, "{era:?}: {stats}");
        assert_eq!(stats["relations"], 0, "{era:?}: {stats}");
        let got = s.ok("get", json!({"ids": [known]})).await;
        assert_eq!(got["memories"][0]["version"], 1, "{era:?}: {got}");
        s.stop().await;
    }
    assert!(
        failures.is_empty(),
        "{} of {total} bad inputs were not answered as they should be:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_item_fails_alone_in_its_batch() {
    let db = TestDb::new();
    let s = db.serve(Era::Discover).await;
    let out = s
        .ok(
            "remember",
            json!({"memories": [
                {"content": "first good memory about kayaks"},
                {"content": "bad one", "namespace": "bad ns!"},
                {"content": "third good memory about canoes", "name": "canoe"},
                {"content": "name clash", "name": "canoe"}
            ]}),
        )
        .await;
    assert_eq!(out["ok"], 2, "{out}");
    assert_eq!(out["failed"], 2, "{out}");
    let results = out["results"].as_array().expect("results");
    assert!(
        results[0]["id"].is_string() && results[2]["id"].is_string(),
        "{out}"
    );
    let e1 = results[1]["error"].as_str().expect("error of item 1");
    assert!(e1.contains("memories[1].namespace"), "{e1}");
    let e3 = results[3]["error"].as_str().expect("error of item 3");
    assert!(e3.contains("canoe") && e3.contains("update"), "{e3}");
    let hits = s
        .recall_ids(json!({"query": "kayaks canoes clash bad"}))
        .await;
    assert_eq!(hits.len(), 2, "{hits:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_within_the_documented_limits_is_answered() {
    // 300 memories of 60 KiB: within "≤ 10,000 memories per call" and "≤ 64 KiB each", about
    // 18 MB on the wire.
    let db = TestDb::new();
    let s = db.serve(Era::Initialize).await;
    let filler = "lorem ".repeat(10_000);
    let memories: Vec<Value> = (0..300)
        .map(|i| json!({"content": format!("bulk{i}x {filler}"), "namespace": "bulk"}))
        .collect();
    let answer = s
        .call_within(
            "remember",
            json!({ "memories": memories }),
            std::time::Duration::from_secs(5),
        )
        .await;
    // Stored, or refused with an error that says what the limit is: either way, answered.
    let answered = match &answer {
        Some(Ok(out)) => out["ok"] == 300,
        Some(Err(e)) => e.message().contains("memories"),
        None => false,
    };
    // The server goes on serving either way.
    s.ok("stats", json!({})).await;
    assert!(
        answered,
        "an 18 MB remember (300 × 60 KiB) got {answer:?} (None = no answer in 5 s)\n{}",
        s.log_tail()
    );
    s.stop().await;
}
