//! The stdio wire in raw lines: every request gets one answer (also one whose handler fails
//! unexpectedly), broken frames get the JSON-RPC error their kind calls for, a request id still in
//! use is refused, an oversized line is answered, and what the 2026-07-28 era removed or the
//! server does not offer is `-32601`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Era, Raw, TestDb, error_code, modern_meta};

/// A normal call still works: stores a memory and finds it again.
async fn still_serving(raw: &mut Raw, word: &str) {
    let stored = raw
        .call(
            "tools/call",
            json!({"name": "remember", "arguments": {"memories": [{"content": format!("the {word} is still served")}]}}),
        )
        .await;
    assert_eq!(
        stored["result"]["structuredContent"]["ok"],
        1,
        "{stored}\n{}",
        raw.log_tail()
    );
    let found = raw
        .call(
            "tools/call",
            json!({"name": "recall", "arguments": {"query": word, "mode": "text"}}),
        )
        .await;
    let hits = found["result"]["structuredContent"]["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("{found}"));
    assert_eq!(hits.len(), 1, "{found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ids_of_any_text_are_answered_and_the_server_goes_on() {
    for era in Era::ALL {
        let db = TestDb::new();
        let mut raw = Raw::open(&db.path, era).await;
        for id in [
            "aéééé",
            "ééééééééé",
            "日本語のタスク番号です",
            "🦦🦦🦦🦦🦦",
            "a",
            "",
        ] {
            for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
                let mut params = json!({"taskId": id});
                if method == "tasks/update" {
                    params["inputResponses"] = json!({});
                }
                let req_id = raw.next_id();
                let msg = raw.request(json!(req_id), method, params);
                raw.send(&msg).await;
                let answer = raw
                    .reply_within(&json!(req_id), Duration::from_secs(20))
                    .await
                    .unwrap_or_else(|| {
                        panic!("{era:?}: {method} {id:?} got no answer\n{}", raw.log_tail())
                    });
                assert_eq!(error_code(&answer), Some(-32602), "{era:?}: {answer}");
                let message = answer["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains("unknown task"), "{era:?}: {answer}");
            }
        }
        still_serving(&mut raw, "otter").await;
        raw.close().await;
    }
}

/// Sends `line` as it is and returns the one answer that follows (the server must answer it
/// before the probe request sent right after it).
async fn answer_to_line(raw: &mut Raw, line: &[u8]) -> Value {
    let mut bytes = line.to_vec();
    bytes.push(b'\n');
    raw.write(&bytes).await;
    let probe = raw.next_id();
    let msg = raw.request(json!(probe), "tools/list", json!({}));
    raw.send(&msg).await;
    // Answers may come in either order; any extra one is caught when the session closes.
    let mut got = Vec::new();
    let mut probed = false;
    while !probed || got.is_empty() {
        let m = raw
            .next_within(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| {
                panic!(
                    "no answer after {:?}: {got:?}\n{}",
                    String::from_utf8_lossy(line),
                    raw.log_tail()
                )
            });
        if m["id"] == json!(probe) {
            probed = true;
        } else {
            got.push(m);
        }
    }
    got.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_frames_get_the_error_their_kind_calls_for() {
    for era in Era::ALL {
        let db = TestDb::new();
        let mut raw = Raw::open(&db.path, era).await;
        let meta = modern_meta("raw-client");
        // (line, code, id the answer must carry)
        let cases: Vec<(Vec<u8>, i64, Value)> = vec![
            (b"{not json".to_vec(), -32700, Value::Null),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/list""#.to_vec(),
                -32700,
                Value::Null,
            ),
            (b"\xff\xfe garbage".to_vec(), -32700, Value::Null),
            (b"[1, 2]".to_vec(), -32600, Value::Null),
            (b"\"hello\"".to_vec(), -32600, Value::Null),
            (b"42".to_vec(), -32600, Value::Null),
            (br#"{"jsonrpc":"2.0","id":5}"#.to_vec(), -32600, json!(5)),
            (
                br#"{"jsonrpc":"1.0","id":6,"method":"tools/list"}"#.to_vec(),
                -32600,
                json!(6),
            ),
            (
                br#"{"id":"seven","method":"tools/list"}"#.to_vec(),
                -32600,
                json!("seven"),
            ),
            (
                br#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#.to_vec(),
                -32600,
                Value::Null,
            ),
            (
                br#"{"jsonrpc":"2.0","id":8,"method":7}"#.to_vec(),
                -32600,
                json!(8),
            ),
            (
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"arguments": {}, "_meta": meta}}))
                .unwrap(),
                -32602,
                json!(9),
            ),
            (
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
                    "params": {"name": "recall", "arguments": "tea", "_meta": meta}}))
                .unwrap(),
                -32602,
                json!(10),
            ),
            (
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 11, "method": "tasks/get",
                    "params": {"taskId": 5, "_meta": meta}}))
                .unwrap(),
                -32602,
                json!(11),
            ),
            (
                br#"{"jsonrpc":"2.0","id":12,"method":"tools/list","params":5}"#.to_vec(),
                -32602,
                json!(12),
            ),
            (
                serde_json::to_vec(
                    &json!({"jsonrpc": "2.0", "id": 13, "method": "no/such/method",
                    "params": {"_meta": meta}}),
                )
                .unwrap(),
                -32601,
                json!(13),
            ),
        ];
        for (line, code, id) in cases {
            let answer = answer_to_line(&mut raw, &line).await;
            let shown = String::from_utf8_lossy(&line);
            assert_eq!(
                error_code(&answer),
                Some(code),
                "{era:?}: {shown} → {answer}"
            );
            assert!(
                answer.as_object().is_some_and(|o| o.contains_key("id")),
                "{era:?}: {shown} → an error answer always has an id member: {answer}"
            );
            assert_eq!(answer["id"], id, "{era:?}: {shown} → {answer}");
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.len() > 12,
                "{era:?}: {shown} → says what is wrong: {answer}"
            );
        }
        // Blank lines and stray notifications are no requests: nothing is answered.
        raw.write(b"\n   \r\n").await;
        raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/whatever"}))
            .await;
        still_serving(&mut raw, "badger").await;
        let rest = raw.close().await;
        assert!(rest.is_empty(), "{era:?}: unexpected messages {rest:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_message_before_the_session_does_not_end_the_server() {
    for era in Era::ALL {
        let db = TestDb::new();
        let mut raw = Raw::spawn(&db.path, &[]);
        raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        raw.send(&json!({"jsonrpc": "2.0", "id": 77, "result": {}}))
            .await;
        raw.start_session(era).await;
        still_serving(&mut raw, "marten").await;
        raw.close().await;
    }
}

/// JSONL text of `n` memories for an inline import (slow enough to still run while the next
/// line is read).
fn import_text(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"type\":\"memory\",\"content\":\"imported memory number {i} about herons and reeds\"}}\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_still_in_use_is_refused_and_the_first_request_is_served() {
    for era in Era::ALL {
        let db = TestDb::new();
        let mut raw = Raw::spawn(&db.path, &[]);
        raw.start_session_as(era, false).await;
        // Declares no tasks, so the import is answered inline.
        let mut params =
            json!({"name": "import", "arguments": {"source": {"text": import_text(3_000)}}});
        if era == Era::Discover {
            let mut meta = modern_meta("raw-client");
            meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
            params["_meta"] = meta;
        }
        let import = raw.request(json!("dup"), "tools/call", params);
        let stats = raw.request(
            json!("dup"),
            "tools/call",
            json!({"name": "stats", "arguments": {}}),
        );
        // Both lines in one write: the second is read while the import runs.
        let mut both = serde_json::to_vec(&import).unwrap();
        both.push(b'\n');
        both.extend(serde_json::to_vec(&stats).unwrap());
        both.push(b'\n');
        raw.write(&both).await;
        let first = raw.reply(&json!("dup")).await;
        assert_eq!(error_code(&first), Some(-32600), "{era:?}: {first}");
        let message = first["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("in use"), "{era:?}: {first}");
        let second = raw.reply(&json!("dup")).await;
        assert_eq!(
            second["result"]["structuredContent"]["memories_added"], 3_000,
            "{era:?}: the import is answered: {second}"
        );
        // Once answered, the id is free again.
        let again = raw.request(
            json!("dup"),
            "tools/call",
            json!({"name": "stats", "arguments": {}}),
        );
        raw.send(&again).await;
        let third = raw.reply(&json!("dup")).await;
        assert_eq!(
            third["result"]["structuredContent"]["memories"], 3_000,
            "{era:?}: {third}"
        );
        raw.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_the_size_limit_is_answered() {
    const LIMIT: usize = 128 * 1024 * 1024;
    let db = TestDb::new();
    let mut raw = Raw::open(&db.path, Era::Discover).await;
    let meta = serde_json::to_string(&modern_meta("raw-client")).unwrap();
    // The id comes first: the answer carries it.
    let head = format!(
        r#"{{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{{"_meta":{meta},"name":"remember","arguments":{{"memories":[{{"content":""#
    );
    let mut line = head.into_bytes();
    line.resize(LIMIT + 1024, b'x');
    line.extend_from_slice(b"\"}]}}}\n");
    raw.write(&line).await;
    drop(line);
    let answer = raw.reply(&json!("big")).await;
    assert!(error_code(&answer).is_some(), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("too large") && message.contains("134217728"),
        "{answer}"
    );
    still_serving(&mut raw, "weasel").await;
    raw.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_is_not_part_of_the_2026_era() {
    let db = TestDb::new();
    // First request of a 2026-07-28 exchange.
    let mut raw = Raw::spawn(&db.path, &[]);
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": modern_meta("raw-client")}}))
        .await;
    let answer = raw.reply(&json!(1)).await;
    assert_eq!(error_code(&answer), Some(-32601), "{answer}");
    raw.start_session(Era::Discover).await;
    let answer = raw.call("ping", json!({})).await;
    assert_eq!(error_code(&answer), Some(-32601), "{answer}");
    still_serving(&mut raw, "stoat").await;
    raw.close().await;

    // A ping before `initialize` (2025-11-25 allows it) and inside the session is answered `{}`.
    let mut raw = Raw::spawn(&db.path, &[]);
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    let answer = raw.reply(&json!(1)).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    raw.start_session(Era::Initialize).await;
    let answer = raw.call("ping", json!({})).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    raw.close().await;
}

/// Prompts are not offered (−32601); completion is, for the memory templates only: a prompt
/// reference is invalid params (−32602) that says what it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_not_offered_and_completion_says_what_it_completes() {
    for era in Era::ALL {
        let db = TestDb::new();
        let mut raw = Raw::open(&db.path, era).await;
        for (method, params) in [
            ("prompts/list", json!({})),
            ("prompts/get", json!({"name": "x"})),
        ] {
            let answer = raw.call(method, params).await;
            assert_eq!(
                error_code(&answer),
                Some(-32601),
                "{era:?}: {method} → {answer}"
            );
        }
        let answer = raw
            .call(
                "completion/complete",
                json!({"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}),
            )
            .await;
        assert_eq!(error_code(&answer), Some(-32602), "{era:?}: {answer}");
        assert!(
            answer.to_string().contains("memory://{namespace}/{id}"),
            "{era:?}: {answer}"
        );
        raw.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_the_size_limit_is_answered_with_the_id_after_its_bulk() {
    const LIMIT: usize = 128 * 1024 * 1024;
    let db = TestDb::new();
    let mut raw = Raw::open(&db.path, Era::Initialize).await;
    // The id comes last, after the bulk (as serialisers that sort keys, or put `id` at the end,
    // write it): the answer still carries it, so the client waiting on it is not left hanging.
    let mut line = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"remember","arguments":{"memories":[{"content":""#.to_vec();
    line.resize(LIMIT + 1024, b'x');
    line.extend_from_slice(br#""}]}},"id":7}"#);
    line.push(b'\n');
    raw.write(&line).await;
    drop(line);
    let answer = raw
        .reply_within(&json!(7), Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("no answer with id 7\n{}", raw.log_tail()));
    assert_eq!(error_code(&answer), Some(-32600), "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("too large")),
        "{answer}"
    );
    still_serving(&mut raw, "otter").await;
    let rest = raw.close().await;
    assert!(
        !rest
            .iter()
            .any(|m| m.get("error").is_some() && m["id"].is_null()),
        "no error without an id: {rest:?}"
    );
}
