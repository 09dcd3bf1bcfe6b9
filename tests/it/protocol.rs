//! The wire: stdout carries only JSON-RPC messages (logs go to stderr) in both eras, and memories
//! are readable as `memory://{namespace}/{id}` resources.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::support::{Era, TestDb, raw_session};

/// Parses every non-empty stdout line as a JSON-RPC 2.0 message; returns the responses by id.
fn responses(stdout: &str) -> HashMap<i64, Value> {
    let mut by_id = HashMap::new();
    for line in stdout.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
        assert_eq!(msg["jsonrpc"], "2.0", "not a JSON-RPC 2.0 message: {line}");
        assert!(
            msg.get("result").is_some()
                || msg.get("error").is_some()
                || msg.get("method").is_some(),
            "neither a response nor a request/notification: {line}"
        );
        if let Some(id) = msg["id"].as_i64() {
            assert!(
                by_id.insert(id, msg).is_none(),
                "two answers to request {id}"
            );
        }
    }
    by_id
}

/// Stores one memory about otters through a normal session; returns its id.
async fn seed(db: &TestDb) -> String {
    let s = db.serve(Era::Initialize).await;
    let ids = s
        .remember(json!([{"content": "seeded memory: otters hold hands while sleeping"}]))
        .await;
    s.stop().await;
    ids[0].clone()
}

fn tool_call(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

fn check_answers(by_id: &HashMap<i64, Value>, seeded: &str) {
    let tools = by_id[&2]["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list answer: {}", by_id[&2]));
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for tool in [
        "remember", "recall", "relate", "get", "update", "forget", "restore", "stats",
    ] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(
            t["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{t}"
        );
    }
    let stored = &by_id[&3]["result"];
    assert_eq!(stored["structuredContent"]["ok"], 1, "{stored}");
    assert_eq!(stored["isError"], false, "{stored}");
    // Requests on one connection run concurrently, so the recall may or may not see the memory
    // stored beside it; it must see the one stored before the session.
    let found: Vec<&str> = by_id[&4]["result"]["structuredContent"]["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("recall answer: {}", by_id[&4]))
        .iter()
        .filter_map(|h| h["id"].as_str())
        .collect();
    assert!(found.contains(&seeded), "{found:?}");
    // Bad arguments are a tool result the model can read, naming the field.
    let bad = &by_id[&5]["result"];
    assert_eq!(bad["isError"], true, "{}", by_id[&5]);
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("limit")),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_is_only_json_rpc_in_the_initialize_era() {
    let db = TestDb::new();
    let seeded = seed(&db).await;
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0.0.1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        tool_call(
            3,
            "remember",
            json!({"memories": [{"content": "raw wire memory about otters"}]}),
        ),
        tool_call(4, "recall", json!({"query": "otters?"})),
        tool_call(5, "recall", json!({"query": "otters", "limit": "ten"})),
        json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}),
    ];
    // Debug logging on: all of it must go to stderr, none to stdout.
    let stdout = raw_session(&db.path, &lines, "debug").await;
    let by_id = responses(&stdout);
    assert_eq!(by_id.len(), 6, "one answer per request: {stdout}");
    assert_eq!(by_id[&1]["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(by_id[&1]["result"]["serverInfo"]["name"], "mnemograph");
    check_answers(&by_id, &seeded);
    assert!(by_id[&6].get("result").is_some(), "{}", by_id[&6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_is_only_json_rpc_in_the_discover_era() {
    let db = TestDb::new();
    let seeded = seed(&db).await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0.0.1"}
    });
    let with_meta = |mut msg: Value| {
        msg["params"]["_meta"] = meta.clone();
        msg
    };
    let lines = [
        with_meta(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}})),
        with_meta(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})),
        with_meta(tool_call(
            3,
            "remember",
            json!({"memories": [{"content": "raw wire memory about otters"}]}),
        )),
        with_meta(tool_call(4, "recall", json!({"query": "otters?"}))),
        with_meta(tool_call(
            5,
            "recall",
            json!({"query": "otters", "limit": "ten"}),
        )),
        // Without the required _meta, a 2026 request is refused, in JSON.
        tool_call(6, "recall", json!({"query": "otters"})),
    ];
    let stdout = raw_session(&db.path, &lines, "debug").await;
    let by_id = responses(&stdout);
    assert_eq!(by_id.len(), 6, "one answer per request: {stdout}");
    let discover = &by_id[&1]["result"];
    assert!(
        discover["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&json!("2026-07-28"))),
        "{discover}"
    );
    assert!(discover["capabilities"]["tools"].is_object(), "{discover}");
    assert_eq!(
        discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mnemograph",
        "{discover}"
    );
    check_answers(&by_id, &seeded);
    assert!(by_id[&6].get("error").is_some(), "{}", by_id[&6]);
    // The tool list is the same for every caller and may be kept for an hour (SEP-2549).
    let tools = &by_id[&2]["result"];
    assert_eq!(tools["ttlMs"], 3_600_000, "{tools}");
    assert_eq!(tools["cacheScope"], "public", "{tools}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_are_resources() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let ids = s
            .remember(json!([
                {"content": "Erin maintains the release scripts", "namespace": "team", "name": "erin", "tags": ["people"]},
                {"content": "The release scripts live in tools/release", "namespace": "team", "name": "scripts"}
            ]))
            .await;
        s.ok(
            "relate",
            json!({"relations": [{"from": "erin", "to": "scripts", "kind": "maintains", "namespace": "team"}]}),
        )
        .await;

        let templates = s
            .resource_templates()
            .await
            .expect("resources/templates/list");
        let templates = serde_json::to_value(&templates).expect("serialise");
        let uris: Vec<&str> = templates["resourceTemplates"]
            .as_array()
            .expect("resourceTemplates")
            .iter()
            .filter_map(|t| t["uriTemplate"].as_str())
            .collect();
        assert_eq!(
            uris,
            [
                "memory://{namespace}",
                "memory://{namespace}/{id}",
                "mnemograph://jobs/{namespace}/{name}",
                "mnemograph://results/{taskId}/{field}"
            ],
            "{era:?}"
        );

        let uri = format!("memory://team/{}", ids[0]);
        let read = s.read_resource(&uri).await.expect("resources/read");
        let read = serde_json::to_value(&read).expect("serialise");
        let contents = read["contents"].as_array().expect("contents");
        assert_eq!(contents.len(), 1, "{read}");
        assert_eq!(contents[0]["uri"], uri.as_str());
        assert_eq!(contents[0]["mimeType"], "application/json");
        let memory: Value = serde_json::from_str(contents[0]["text"].as_str().expect("text"))
            .expect("the resource is JSON");
        assert_eq!(memory["id"], ids[0].as_str(), "{memory}");
        assert_eq!(memory["content"], "Erin maintains the release scripts");
        assert_eq!(memory["namespace"], "team");
        assert_eq!(memory["tags"], json!(["people"]));
        assert_eq!(memory["relations"][0]["kind"], "maintains", "{memory}");
        assert_eq!(memory["relations"][0]["to"], ids[1].as_str(), "{memory}");

        for bad in [
            "memory://team/m_doesnotexist0000000".to_owned(),
            format!("memory://other/{}", ids[0]),
            format!("memory://team/{}/extra", ids[0]),
            format!("memory:/team/{}", ids[0]),
            "file:///etc/passwd".to_owned(),
            "memory://team/scripts".to_owned(),
        ] {
            match s.read_resource(&bad).await {
                Ok(r) => panic!("{era:?}: {bad} was read: {r:?}"),
                Err(rmcp::service::ServiceError::McpError(e)) => {
                    assert!(
                        e.message.contains(&bad),
                        "{era:?}: the error does not name {bad}: {e:?}"
                    );
                    assert_eq!(
                        e.data.as_ref().map(|d| d["uri"].clone()),
                        Some(json!(bad)),
                        "{era:?}: the error's data carries the uri: {e:?}"
                    );
                }
                Err(e) => panic!("{era:?}: {bad}: not a JSON-RPC error: {e}"),
            }
        }
        // The server is still serving.
        s.ok("stats", json!({})).await;
        s.stop().await;
    }
}

/// A host browses the memory: `resources/list` gives the namespaces, then the memories newest
/// first, paged by a cursor, every entry readable; a namespace reads as its counts and newest
/// memories; `completion/complete` completes the template's namespace and, within it, ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_browses_namespaces_and_memories_and_completes_the_template() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let team: Vec<Value> = (0..60)
            .map(|i| json!({"content": format!("team note {i} about the release"), "namespace": "team"}))
            .collect();
        let team_ids = s.remember(Value::Array(team)).await;
        s.remember(json!([{"content": "a note elsewhere", "namespace": "other", "kind": "fact"}]))
            .await;

        let first = s.list_resources(None).await.expect("resources/list");
        let uris: Vec<String> = first.resources.iter().map(|r| r.uri.clone()).collect();
        assert_eq!(
            uris[..2],
            ["memory://other", "memory://team"],
            "{era:?} {uris:?}"
        );
        // Newest first: the note in `other`, then team notes from the last one back.
        assert!(uris[2].starts_with("memory://other/"), "{uris:?}");
        assert_eq!(uris[3], format!("memory://team/{}", team_ids[59]));
        assert_eq!(uris.len(), 2 + 50, "{era:?}");
        let title = first.resources[3].title.clone().unwrap_or_default();
        assert_eq!(title, "team note 59 about the release");
        let cursor = first.next_cursor.clone().expect("a second page");
        let second = s.list_resources(Some(cursor)).await.expect("page 2");
        assert_eq!(second.resources.len(), 11, "{era:?}");
        assert_eq!(
            second.resources.last().map(|r| r.uri.clone()),
            Some(format!("memory://team/{}", team_ids[0]))
        );
        assert_eq!(second.next_cursor, None);
        for r in first.resources.iter().chain(&second.resources).step_by(7) {
            s.read_resource(&r.uri)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", r.uri));
        }
        let bad = s.list_resources(Some("page-2".into())).await;
        match bad {
            Err(rmcp::service::ServiceError::McpError(e)) => {
                assert_eq!(e.code.0, -32602, "{e:?}");
                assert!(e.message.contains("page-2"), "{e:?}");
            }
            other => panic!("{era:?}: a made-up cursor: {other:?}"),
        }

        // A job is listed after the namespaces (on the first page), and reads as it resumes.
        s.ok(
            "job",
            json!({"name": "release-prep/2", "namespace": "team", "action": "checkpoint", "base": 0,
                "note": "tagged the candidate"}),
        )
        .await;
        let listed = s.list_resources(None).await.expect("resources/list");
        let job = &listed.resources[2];
        assert_eq!(
            job.uri, "mnemograph://jobs/team/release-prep%2F2",
            "{era:?}"
        );
        let read = s.read_resource(&job.uri).await.expect("a job reads");
        let read = serde_json::to_value(&read).expect("serialise");
        let body: Value = serde_json::from_str(read["contents"][0]["text"].as_str().expect("text"))
            .expect("JSON");
        assert_eq!(body["head"]["note"], "tagged the candidate", "{body}");
        assert!(
            s.read_resource("mnemograph://jobs/other/release-prep%2F2")
                .await
                .is_err()
        );
        assert!(s.read_resource("mnemograph://jobs/team/%zz").await.is_err());

        let read = s
            .read_resource("memory://team")
            .await
            .expect("a namespace reads");
        let read = serde_json::to_value(&read).expect("serialise");
        let ns: Value = serde_json::from_str(read["contents"][0]["text"].as_str().expect("text"))
            .expect("JSON");
        assert_eq!(ns["memories"], 60, "{ns}");
        assert_eq!(ns["by_kind"][0]["kind"], "note", "{ns}");
        assert_eq!(ns["newest"].as_array().map(Vec::len), Some(10), "{ns}");
        assert!(s.read_resource("memory://nobody").await.is_err());

        let got = s
            .complete("memory://{namespace}/{id}", "namespace", "te", &[])
            .await
            .expect("completion/complete");
        assert_eq!(got.completion.values, ["team"], "{era:?}");
        let id = &team_ids[17];
        let got = s
            .complete(
                "memory://{namespace}/{id}",
                "id",
                &id[..id.len() - 2],
                &[("namespace", "team")],
            )
            .await
            .expect("completion of an id");
        assert!(
            got.completion.values.contains(id),
            "{era:?} {:?}",
            got.completion
        );
        let got = s
            .complete(
                "memory://{namespace}/{id}",
                "id",
                &id[..id.len() - 2],
                &[("namespace", "other")],
            )
            .await
            .expect("completion in another namespace");
        assert!(got.completion.values.is_empty(), "{:?}", got.completion);
        let got = s
            .complete(
                "memory://{namespace}/{id}",
                "id",
                "",
                &[("namespace", "team")],
            )
            .await
            .expect("completion of an empty id");
        assert_eq!(got.completion.values.first(), Some(&team_ids[59]));
        assert_eq!(got.completion.values.len(), 60);
        assert!(
            s.complete("memory://{namespace}/{id}", "colour", "", &[])
                .await
                .is_err(),
            "an unknown argument is an error"
        );
        s.stop().await;
    }
}
