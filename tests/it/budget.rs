//! The result budget: every tool, called with its largest arguments, answers within 4,000 tokens
//! of compact JSON (text and structured content together), inline and as a task; what it cut is
//! behind links whose pages, each within the budget, add up to the whole; a link is read only
//! by the client whose result it is; a call may ask for less.

use std::time::Duration;

use rmcp::model::{CallToolResponse, CallToolResult, ResourceContents, TaskPayload, TaskStatus};
use serde_json::{Value, json};

use crate::support::TestDb;
use crate::tasks::{Client, connect, poll_until_terminal};

/// The server's default budget, in tokens.
const BUDGET: usize = 4_000;

/// Memories of the big namespace.
const MEMORIES: usize = 1_200;

/// Tokens a result takes: its content blocks and structured content as compact JSON, four
/// bytes a token.
fn tokens(r: &CallToolResult) -> usize {
    let content = serde_json::to_vec(&r.content).expect("JSON").len();
    let structured = r
        .structured_content
        .as_ref()
        .map_or(0, |v| serde_json::to_vec(v).expect("JSON").len());
    (content + structured).div_ceil(4)
}

/// A result answered inline (a task handle or an error fails the test).
async fn inline(c: &Client, tool: &str, args: Value) -> CallToolResult {
    let shown: String = args.to_string().chars().take(300).collect();
    match c.call(tool, args, None).await {
        Ok(CallToolResponse::Complete(r)) => {
            let text: String = format!("{:?}", r.content).chars().take(600).collect();
            assert_ne!(r.is_error, Some(true), "{tool} {shown}: {text}");
            r
        }
        other => {
            let other: String = format!("{other:?}").chars().take(600).collect();
            panic!("{tool} {shown}: not answered inline: {other}")
        }
    }
}

/// The structured content of a result.
fn out(r: &CallToolResult) -> &Value {
    r.structured_content.as_ref().expect("structured content")
}

/// The text of a resource read.
async fn read(c: &Client, uri: &str) -> Result<Value, String> {
    let r = c.read(uri).await.map_err(|e| e.to_string())?;
    let [ResourceContents::TextResourceContents { text, .. }] = &r.contents[..] else {
        panic!("one text content: {r:?}");
    };
    assert!(
        text.len().div_ceil(4) <= BUDGET,
        "a page of {uri} takes {} tokens",
        text.len().div_ceil(4)
    );
    Ok(serde_json::from_str(text).expect("JSON"))
}

/// Reads every page behind `rest` (a list's); returns the items in order.
async fn items_behind(c: &Client, rest: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut next = Some(rest.to_owned());
    while let Some(uri) = next {
        let page = read(c, &uri).await.expect("a page");
        items.extend(page["items"].as_array().expect("items").iter().cloned());
        next = page["next"].as_str().map(str::to_owned);
    }
    items
}

/// Reads every page behind `rest` (a text's); returns the text from where it starts.
async fn text_behind(c: &Client, rest: &str) -> String {
    let mut text = String::new();
    let mut next = Some(rest.to_owned());
    while let Some(uri) = next {
        let page = read(c, &uri).await.expect("a page");
        text.push_str(page["text"].as_str().expect("text"));
        next = page["next"].as_str().map(str::to_owned);
    }
    text
}

/// The cut note's entry for `field`.
fn cut_of<'a>(v: &'a Value, field: &str) -> &'a Value {
    v["cut"]
        .as_array()
        .and_then(|cuts| cuts.iter().find(|c| c["field"] == field))
        .unwrap_or_else(|| panic!("no cut of {field} in {}", v["cut"]))
}

/// Fills the database: [`MEMORIES`] harbour notes named n0…, each linked to the next and to
/// `n0`, and three memories of the largest content.
async fn fill(c: &Client, sizes: &mut Vec<(String, usize)>) {
    let mut first = true;
    for chunk in (0..MEMORIES).collect::<Vec<_>>().chunks(1_000) {
        let memories: Vec<Value> = chunk
            .iter()
            .map(|i| {
                json!({"namespace": "big", "name": format!("n{i}"),
                       "content": format!("Harbour note {i}: crane {} lifts containers at dawn at berth {}", i % 7, i % 13),
                       "tags": ["harbour", format!("berth-{}", i % 13)]})
            })
            .collect();
        let r = inline(c, "remember", json!({ "memories": memories })).await;
        if first {
            sizes.push(("remember (1,000 memories)".into(), tokens(&r)));
            first = false;
        }
        assert!(tokens(&r) <= BUDGET, "remember: {}", tokens(&r));
    }
    let long = "The long report goes on about cranes and berths. ".repeat(1_300);
    let long: String = long.chars().take(64 * 1024 - 16).collect();
    let memories: Vec<Value> = (0..3)
        .map(|i| json!({"namespace": "big", "name": format!("long{i}"), "content": format!("{i} {long}")}))
        .collect();
    inline(c, "remember", json!({ "memories": memories })).await;
    let mut relations: Vec<Value> = (0..MEMORIES - 1)
        .map(|i| json!({"from": format!("n{i}"), "to": format!("n{}", i + 1), "kind": "next", "namespace": "big"}))
        .collect();
    let hub: Vec<Value> = (2..MEMORIES)
        .map(|i| json!({"from": "n0", "to": format!("n{i}"), "kind": "has", "namespace": "big"}))
        .collect();
    relations.extend(hub);
    let mut first = true;
    for chunk in relations.chunks(1_000) {
        let r = inline(c, "relate", json!({ "relations": chunk })).await;
        if first {
            sizes.push(("relate (1,000 relations)".into(), tokens(&r)));
            first = false;
        }
        assert!(tokens(&r) <= BUDGET, "relate: {}", tokens(&r));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_answers_within_the_budget_and_links_the_rest() {
    let db = TestDb::new();
    // Long calls answered inline (a minute of inline budget), to measure inline answers.
    let c = connect(
        &db.path,
        true,
        true,
        "budget",
        &["--inline-budget-ms", "60000"],
    )
    .await;
    let mut sizes: Vec<(String, usize)> = Vec::new();
    fill(&c, &mut sizes).await;

    let mut check = |what: &str, r: &CallToolResult| {
        let t = tokens(r);
        assert!(t <= BUDGET, "{what}: {t} tokens");
        sizes.push((what.to_owned(), t));
    };

    // get: a hundred memories, three of them 64 KiB long, with history.
    let mut names: Vec<String> = (0..97).map(|i| format!("n{i}")).collect();
    names.extend((0..3).map(|i| format!("long{i}")));
    let r = inline(
        &c,
        "get",
        json!({"names": names, "namespace": "big", "history": true}),
    )
    .await;
    check("get (100 memories, three of 64 KiB)", &r);
    let cut = cut_of(out(&r), "memories");
    assert_eq!(cut["total"], 100);
    let rest = items_behind(&c, cut["rest"].as_str().unwrap()).await;
    assert_eq!(
        rest.len() + out(&r)["memories"].as_array().unwrap().len(),
        100
    );

    // update: the largest content.
    let r = inline(
        &c,
        "update",
        json!({"name": "long0", "namespace": "big", "content": "y".repeat(64 * 1024 - 16)}),
    )
    .await;
    check("update (64 KiB content)", &r);

    // recall: the largest page of full contents with expansion; pages by its own cursor.
    let args = json!({"query": "crane containers dawn berth", "namespace": "big", "limit": 100, "full": true, "expand": 2});
    let r = inline(&c, "recall", args.clone()).await;
    check("recall (limit 100, full, expand 2)", &r);
    let first = out(&r)["hits"].as_array().unwrap().len();
    assert!((1..100).contains(&first), "{first} hits shown");
    let cursor = out(&r)["next_cursor"]
        .as_str()
        .expect("a cursor to the next page")
        .to_owned();
    let mut next = args.clone();
    next["cursor"] = json!(cursor);
    let r2 = inline(&c, "recall", next).await;
    let second: Vec<&Value> = out(&r2)["hits"].as_array().unwrap().iter().collect();
    let shown: Vec<&Value> = out(&r)["hits"].as_array().unwrap().iter().collect();
    assert!(
        second
            .iter()
            .all(|h| !shown.iter().any(|s| s["id"] == h["id"])),
        "the next page starts after the last hit shown"
    );

    // traverse: the most nodes, as paths.
    let walk = json!({"names": ["n0"], "namespace": "big", "depth": 3, "limit": 1000, "return": "paths", "max_nodes": 100000});
    let r = inline(&c, "traverse", walk.clone()).await;
    check("traverse (limit 1,000, paths)", &r);
    let r = inline(
        &c,
        "traverse",
        json!({"names": ["n0"], "namespace": "big", "depth": 3, "limit": 1000, "return": "subgraph"}),
    )
    .await;
    check("traverse (subgraph)", &r);
    let r = inline(
        &c,
        "find_paths",
        json!({"from": "n1", "to": "n900", "namespace": "big", "k": 10, "max_hops": 8}),
    )
    .await;
    check("find_paths (k 10, 8 hops)", &r);

    // export to the client: the whole namespace, as links; the pages add up to the export.
    let r = inline(
        &c,
        "export",
        json!({"namespaces": ["big"], "history": true}),
    )
    .await;
    check("export (to the client, 1,203 memories)", &r);
    let v = out(&r);
    let cut = v["cut"]
        .as_array()
        .and_then(|cuts| cuts.iter().find(|c| c["unit"] == "bytes"))
        .expect("the exported text is cut");
    let shown = v
        .pointer(&format!("/{}", cut["field"].as_str().unwrap()))
        .and_then(Value::as_str)
        .unwrap()
        .trim_end_matches('…')
        .to_owned();
    let whole = shown + &text_behind(&c, cut["rest"].as_str().unwrap()).await;
    assert_eq!(whole.len(), cut["total"].as_u64().unwrap() as usize);
    let records = whole.lines().filter(|l| l.contains("\"memory\"")).count();
    assert_eq!(records, MEMORIES + 3);

    // import: a file with as many bad records as good.
    let mut text = String::new();
    for i in 0..2_000 {
        if i % 2 == 0 {
            text.push_str(&format!(
                "{{\"type\":\"memory\",\"content\":\"imported {i}\"}}\n"
            ));
        } else {
            text.push_str("{not json at all\n");
        }
    }
    let r = inline(
        &c,
        "import",
        json!({"source": {"text": text}, "format": "mnemograph", "namespace": "imported"}),
    )
    .await;
    check("import (2,000 records, half bad)", &r);

    let r = inline(&c, "consolidate", json!({"dry_run": true})).await;
    check("consolidate (dry run, every namespace)", &r);
    let r = inline(&c, "tasks", json!({"limit": 100})).await;
    check("tasks (limit 100)", &r);
    let r = inline(&c, "stats", json!({})).await;
    check("stats", &r);

    // job: the largest checkpoint (200 learned items and 200 open questions), 100 memories of
    // 2 KiB learned since, then resumed and its history listed.
    let item = |i: usize, what: &str| format!("{what} {i}: {}", "x".repeat(120));
    let learned: Vec<String> = (0..200).map(|i| item(i, "learned")).collect();
    let questions: Vec<String> = (0..200).map(|i| item(i, "question")).collect();
    let r = inline(
        &c,
        "job",
        json!({"name": "big-job", "action": "checkpoint", "base": 0, "note": "n".repeat(2_000),
            "learned": learned, "open_questions": questions}),
    )
    .await;
    check("job (checkpoint)", &r);
    let memories: Vec<Value> = (0..100)
        .map(|i| json!({"content": format!("finding {i}: {}", "y".repeat(2_000))}))
        .collect();
    inline(
        &c,
        "remember",
        json!({"job": "big-job", "memories": memories}),
    )
    .await;
    let r = inline(&c, "job", json!({"name": "big-job"})).await;
    check("job (resume: 400 items, 100 memories learned since)", &r);
    let r = inline(&c, "job", json!({"name": "big-job", "action": "history"})).await;
    check("job (history)", &r);

    // forget and restore: a thousand memories at once.
    let ids: Vec<String> = (100..1_100).map(|i| format!("n{i}")).collect();
    let r = inline(&c, "forget", json!({"names": ids, "namespace": "big"})).await;
    check("forget (1,000 memories)", &r);
    let r = inline(&c, "restore", json!({"names": ids, "namespace": "big"})).await;
    check("restore (1,000 memories)", &r);

    // A call may ask for less.
    let r = match c
        .call_meta(
            "recall",
            json!({"query": "crane containers", "namespace": "big", "limit": 100, "full": true}),
            json!({"mnemograph/resultBudgetTokens": 1_000}),
        )
        .await
    {
        Ok(CallToolResponse::Complete(r)) => r,
        other => panic!("recall: {other:?}"),
    };
    assert!(tokens(&r) <= 1_000, "asked for 1,000: {}", tokens(&r));

    // Another client cannot read this one's links.
    let r = inline(&c, "traverse", walk).await;
    let rest = cut_of(out(&r), "paths")["rest"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = connect(&db.path, true, true, "someone-else", &[]).await;
    let refused = read(&other, &rest).await.expect_err("not its result");
    assert!(refused.contains("no result at"), "{refused}");
    other.stop().await;
    c.stop().await;

    let mut table = String::from("| tool (largest arguments) | tokens |\n|---|---:|\n");
    for (what, t) in &sizes {
        table.push_str(&format!("| {what} | {t} |\n"));
    }
    // The table the README quotes (shown with --nocapture).
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_result_is_cut_and_its_pages_add_up_to_the_whole() {
    let db = TestDb::new();
    let c = connect(
        &db.path,
        true,
        true,
        "budget-tasks",
        &["--inline-budget-ms", "0"],
    )
    .await;
    let mut sizes = Vec::new();
    fill(&c, &mut sizes).await;
    let walk = json!({"names": ["n0"], "namespace": "big", "depth": 2, "limit": 1000});
    let CallToolResponse::Task(created) = c.call("traverse", walk, None).await.unwrap() else {
        panic!("budget 0: a task");
    };
    let (done, _) = poll_until_terminal(&c, &created.task.task_id, Duration::from_secs(60)).await;
    assert_eq!(done.task.task.status, TaskStatus::Completed);
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("completed: {done:?}");
    };
    let r: CallToolResult = serde_json::from_value(Value::Object(result.clone())).unwrap();
    assert!(tokens(&r) <= BUDGET, "task result: {} tokens", tokens(&r));
    let v = out(&r);
    let cut = cut_of(v, "nodes");
    assert_eq!(cut["total"], 1000);
    let shown = v["nodes"].as_array().unwrap();
    assert!(cut["rest"].as_str().unwrap().starts_with(&format!(
        "mnemograph://results/{}/nodes",
        created.task.task_id
    )));
    let rest = items_behind(&c, cut["rest"].as_str().unwrap()).await;
    assert_eq!(shown.len() + rest.len(), 1000);
    let mut ids: Vec<&Value> = shown.iter().chain(&rest).map(|n| &n["id"]).collect();
    ids.sort_by_key(|v| v.to_string());
    ids.dedup();
    assert_eq!(ids.len(), 1000, "every node once");
    // A link into a result that is not there says so.
    let gone = read(&c, "mnemograph://results/0123456789abcdef/nodes?from=3")
        .await
        .expect_err("no such task");
    assert!(gone.contains("kept as long as its task"), "{gone}");
    c.stop().await;
}
