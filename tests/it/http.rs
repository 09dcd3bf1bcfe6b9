//! `serve --http`: the core flows over Streamable HTTP in both eras, and what the HTTP layer
//! refuses (foreign origins and hosts on every endpoint, oversized bodies, reachable addresses
//! without authorisation, requests without a known bearer token, writes with a read-only token,
//! another token's session, bodies that are not JSON-RPC), and what slow or idle clients cannot
//! hold (connections past their deadlines, more connections than the cap, every request slot).
//!
//! Size: one test per HTTP behaviour over the real binary, sharing the server helpers at the top.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{BIN, CallError, Era, HttpChild, Server, TestDb, Wire, hit_ids, http_request};

/// The JSON-RPC `tools/list` of a 2026-07-28 client, as bytes.
pub(crate) fn tools_list() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": crate::support::modern_meta("raw-http")}
    }))
    .expect("serialise")
}

/// The headers a 2026-07-28 client sends with [`tools_list`].
pub(crate) const MCP_HEADERS: [(&str, &str); 4] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
    ("MCP-Protocol-Version", "2026-07-28"),
    ("Mcp-Method", "tools/list"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remember_recall_and_resources_work_over_http_in_both_eras() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve_over(Wire::Http, era).await;
        let ids = s
            .remember(json!([
                {"content": "The harbour pilot boards ships at dawn", "namespace": "sea"},
                {"content": "Quarterly revenue grew by eight percent", "namespace": "work"}
            ]))
            .await;
        let hits = s
            .recall_ids(json!({"query": "harbour pilot", "namespace": "sea"}))
            .await;
        assert_eq!(hits.first(), Some(&ids[0]), "{era:?}");
        let got = s.ok("get", json!({"ids": [ids[1].clone()]})).await;
        assert!(got.to_string().contains("revenue"), "{era:?}: {got}");
        let read = s
            .read_resource(&format!("memory://sea/{}", ids[0]))
            .await
            .expect("read the memory as a resource");
        assert!(format!("{read:?}").contains("harbour pilot"), "{era:?}");
        // Calls are counted by tool and outcome; a made-up tool name does not become a label.
        assert!(s.call("no_such_tool", json!({})).await.is_err());
        assert!(s.call("get", json!({"ids": ["m_missing"]})).await.is_err());
        let at = s.http.as_ref().expect("over HTTP").authority().to_owned();
        let (status, metrics) = http_request(&at, "GET", "/metrics", &[], b"").await;
        assert_eq!(status, 200, "{metrics}");
        for line in [
            r#"mnemograph_tool_calls_total{outcome="ok",tool="remember"} 1"#,
            r#"mnemograph_tool_calls_total{outcome="protocol_error",tool="other"} 1"#,
            r#"mnemograph_tool_calls_total{outcome="tool_error",tool="get"} 1"#,
            r#"mnemograph_tool_call_seconds_count{tool="recall"} 1"#,
            r#"mnemograph_index_lag_changes{index="text"} 0"#,
        ] {
            assert!(metrics.contains(line), "{era:?}: {line} in\n{metrics}");
        }
        assert!(
            !metrics.contains("harbour"),
            "no memory contents in metrics"
        );
        assert!(metrics.contains("mnemograph_database_bytes "), "{metrics}");
        // A second client of the same server sees the writes (stateless requests need no session).
        let other = Server::start_over(&db.path, Wire::Http, era).await;
        let hits = hit_ids(&other.ok("recall", json!({"query": "revenue"})).await);
        assert_eq!(hits, [ids[1].clone()], "{era:?}");
        other.stop().await;
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origins_and_oversized_bodies_are_refused() {
    let db = TestDb::new();
    let http = HttpChild::beside(&db.path, "http.log", &["--http-max-body", "4096"]).await;
    let at = http.authority().to_owned();

    let (status, answer) = http_request(&at, "GET", "/healthz", &[], b"").await;
    assert_eq!(status, 200);
    assert!(answer.ends_with("\r\n\r\nok\n"), "{answer:?}");
    let (status, answer) = http_request(&at, "GET", "/readyz", &[], b"").await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains(r#""ready":true"#) && answer.contains(r#""text_index_lag":0"#),
        "{answer}"
    );

    let mut headers = MCP_HEADERS.to_vec();
    let (status, body) = http_request(&at, "POST", "/mcp", &headers, &tools_list()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("recall"), "{body}");

    // A page of this machine may call; a page of another site (DNS rebinding) may not.
    headers.push(("Origin", "http://localhost:6274"));
    let (status, _) = http_request(&at, "POST", "/mcp", &headers, &tools_list()).await;
    assert_eq!(status, 200);
    headers.pop();
    headers.push(("Origin", "https://attacker.example"));
    let (status, body) = http_request(&at, "POST", "/mcp", &headers, &tools_list()).await;
    assert_eq!(status, 403, "{body}");
    headers.pop();

    // A Host that is not a loopback name (a rebound DNS name) is refused too.
    let mut rebound = headers.clone();
    rebound.push(("Host", "attacker.example"));
    let (status, _) = http_request(&at, "POST", "/mcp", &rebound, &tools_list()).await;
    assert_eq!(status, 403);

    let big = vec![b' '; 8192];
    let (status, _) = http_request(&at, "POST", "/mcp", &headers, &big).await;
    assert_eq!(status, 413);

    // Everything valid around those still works.
    let (status, _) = http_request(&at, "POST", "/mcp", &headers, &tools_list()).await;
    assert_eq!(status, 200);
    http.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reachable_address_needs_authorisation_or_an_explicit_opt_out() {
    let db = TestDb::new();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--db"])
        .arg(&db.path)
        .args(["--http", "0.0.0.0:0"])
        .output()
        .expect("run mnemograph serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without authorisation") && err.contains("--allow-unauthenticated"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    let log = db.path.with_file_name("open.log");
    let mut child = tokio::process::Command::new(BIN)
        .args(["serve", "--db"])
        .arg(&db.path)
        .args(["--http", "0.0.0.0:0", "--allow-unauthenticated"])
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("serving MCP over HTTP") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(text.contains("WITHOUT AUTHORISATION"), "{text}");
    let _ = child.kill().await;
}

/// `mnemograph token add`: the token (the output's last word) and the file it was added to.
pub(crate) fn add_token(file: &std::path::Path, subject: &str, scopes: &str) -> String {
    add_token_with(file, subject, scopes, &[])
}

/// [`add_token`] with more arguments of `token add` (e.g. `--namespaces`).
pub(crate) fn add_token_with(
    file: &std::path::Path,
    subject: &str,
    scopes: &str,
    more: &[&str],
) -> String {
    let out = std::process::Command::new(BIN)
        .args(["token", "add", subject, "--tokens"])
        .arg(file)
        .args(["--scopes", scopes])
        .args(more)
        .output()
        .expect("run mnemograph token add");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split_whitespace()
        .last()
        .expect("the token is the last word")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_admit_their_subjects_with_their_scopes() {
    let db = TestDb::new();
    let file = db.path.with_file_name("tokens");
    let writer = add_token(&file, "alice", "read,write");
    let reader = add_token(&file, "reader", "read");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert_eq!(saved.lines().count(), 2, "{saved}");
    assert!(
        !saved.contains(&writer) && !saved.contains(&reader),
        "hashes only"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the tokens file is private: {mode:o}");
    }
    let bad = std::process::Command::new(BIN)
        .args(["token", "add", "bob", "--tokens"])
        .arg(&file)
        .args(["--scopes", "root"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown scope"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), saved);

    let http = HttpChild::beside(&db.path, "auth.log", &["--tokens", file.to_str().unwrap()]).await;
    let log = http.log.clone();
    let at = http.authority().to_owned();
    let (status, answer) = http_request(&at, "POST", "/mcp", &MCP_HEADERS, &tools_list()).await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{answer}"
    );
    let mut headers = MCP_HEADERS.to_vec();
    headers.push(("Authorization", "Bearer mgt_not-a-token"));
    let (status, answer) = http_request(&at, "POST", "/mcp", &headers, &tools_list()).await;
    assert_eq!(status, 401, "{answer}");
    assert!(answer.contains("invalid_token"), "{answer}");
    let (status, _) = http_request(&at, "GET", "/healthz", &[], b"").await;
    assert_eq!(status, 200, "liveness needs no token");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains("not-a-token"), "tokens are never logged");
    assert!(
        logged.contains("http request") && logged.contains("status=401"),
        "{logged}"
    );

    for era in Era::ALL {
        let w = Server::attach(&http.url, era, Some(&writer), &log).await;
        let ids = w
            .remember(json!([{"content": format!("The lighthouse is painted red ({era:?})")}]))
            .await;
        let r = Server::attach(&http.url, era, Some(&reader), &log).await;
        let hits = r.recall_ids(json!({"query": "lighthouse red"})).await;
        assert!(hits.contains(&ids[0]), "{era:?}: {hits:?}");
        match r
            .call(
                "remember",
                json!({"memories": [{"content": "not allowed"}]}),
            )
            .await
        {
            Err(CallError::Tool(m)) => {
                assert!(m.contains("write scope") && m.contains("reader"), "{m}")
            }
            other => panic!("{era:?}: a read-only token wrote: {other:?}"),
        }
        r.stop().await;
        w.stop().await;
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("subject=\"reader\""), "{logged}");
    assert!(
        !logged.contains(&writer) && !logged.contains(&reader),
        "no token in the log"
    );
    assert!(
        !logged.contains("lighthouse"),
        "no memory contents in the log"
    );
    http.stop().await;
    let hits = {
        let s = db.serve(Era::Discover).await;
        let hits = s.recall_ids(json!({"query": "not allowed"})).await;
        s.stop().await;
        hits
    };
    assert!(
        hits.is_empty(),
        "nothing was written by the read-only token"
    );
}

/// A call naming `id`, a memory outside the caller's namespaces, must be answered as the same
/// call naming a memory that exists nowhere (`nowhere`): no answer tells that it exists.
fn hidden(
    res: Result<serde_json::Value, CallError>,
    id: &str,
    nowhere: Result<serde_json::Value, CallError>,
) {
    match (res, nowhere) {
        (Err(CallError::Tool(m)), Err(CallError::Tool(n))) => {
            assert!(n.contains("not found"), "{n}");
            assert_eq!(m.replace(id, "m_nowhere"), n);
        }
        other => panic!("expected two tool errors, got {other:?}"),
    }
}

/// The tool error of a call that must be refused for reaching outside the caller's namespaces.
fn refused(res: Result<serde_json::Value, CallError>, what: &str) -> String {
    match res {
        Err(CallError::Tool(m)) => {
            assert!(m.contains("not allowed"), "{what}: {m}");
            m
        }
        other => panic!("{what} was not refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_some_namespaces_reads_and_writes_those_only() {
    let db = TestDb::new();
    let file = db.path.with_file_name("tokens");
    let admin = add_token(&file, "admin", "admin");
    let carol = add_token_with(&file, "carol", "read,write", &["--namespaces", "office"]);
    let dana = add_token_with(&file, "dana", "admin", &["--namespaces", "office"]);
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        saved.contains("carol ") && saved.contains("namespaces=office"),
        "{saved}"
    );
    let http = HttpChild::beside(&db.path, "ns.log", &["--tokens", file.to_str().unwrap()]).await;
    let log = http.log.clone();
    let era = Era::Discover;
    let a = Server::attach(&http.url, era, Some(&admin), &log).await;
    let ids = a
        .remember(json!([
            {"content": "The quarterly budget review is on friday", "namespace": "office"},
            {"content": "The dentist appointment for the budget is on monday", "namespace": "home"},
            {"content": "Budget spreadsheet lives in the shared drive", "namespace": "office"}
        ]))
        .await;
    let (w, h, w2) = (&ids[0], &ids[1], &ids[2]);
    a.ok(
        "relate",
        json!({"relations": [
            {"from": w, "to": h, "kind": "about"},
            {"from": h, "to": w2, "kind": "about"}
        ]}),
    )
    .await;

    let c = Server::attach(&http.url, era, Some(&carol), &log).await;
    // Reads see the token's namespaces only; naming another is an error.
    let hits = c.recall_ids(json!({"query": "budget", "expand": 0})).await;
    assert!(
        hits.contains(w) && hits.contains(w2) && !hits.contains(h),
        "{hits:?}"
    );
    let hits = c.recall_ids(json!({"query": "budget"})).await;
    assert!(!hits.contains(h), "expansion stays inside: {hits:?}");
    refused(
        c.call("recall", json!({"query": "budget", "namespace": "home"}))
            .await,
        "recall in home",
    );
    hidden(
        c.call("get", json!({"ids": [h]})).await,
        h,
        c.call("get", json!({"ids": ["m_nowhere"]})).await,
    );

    let got = c.ok("get", json!({"ids": [w]})).await;
    assert_eq!(
        got["memories"][0]["relations"].as_array().map(Vec::len),
        Some(0),
        "the relation to home is left out: {got}"
    );
    let walk = c.ok("traverse", json!({"ids": [w], "depth": 3})).await;
    let reached: Vec<&str> = walk["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    assert_eq!(reached, vec![w.as_str()], "w2 lies behind h: {walk}");
    hidden(
        c.call("traverse", json!({"ids": [h]})).await,
        h,
        c.call("traverse", json!({"ids": ["m_nowhere"]})).await,
    );
    let exported = c.ok("export", json!({})).await;
    let data = exported["data"].as_str().unwrap();
    assert!(
        data.contains("quarterly") && !data.contains("dentist"),
        "{data}"
    );
    refused(
        c.call("export", json!({"namespaces": ["home"]})).await,
        "export of home",
    );
    let stats = c.ok("stats", json!({})).await;
    assert_eq!(stats["memories"], 2, "{stats}");
    match (
        c.read_resource(&format!("memory://home/{h}")).await,
        c.read_resource("memory://home/m_nowhere").await,
    ) {
        (Err(e), Err(n)) => assert_eq!(
            e.to_string().replace(h.as_str(), "m_nowhere"),
            n.to_string()
        ),
        other => panic!("a home memory was read as a resource: {other:?}"),
    }
    assert!(
        c.read_resource(&format!("memory://office/{w}"))
            .await
            .is_ok()
    );

    // Writes: into another namespace, or touching a memory there, fail and change nothing.
    refused(
        c.call(
            "remember",
            json!({"memories": [{"content": "x", "namespace": "home"}]}),
        )
        .await,
        "remember into home",
    );
    hidden(
        c.call("update", json!({"id": h, "importance": 0.9})).await,
        h,
        c.call("update", json!({"id": "m_nowhere", "importance": 0.9}))
            .await,
    );
    hidden(
        c.call("forget", json!({"ids": [h]})).await,
        h,
        c.call("forget", json!({"ids": ["m_nowhere"]})).await,
    );
    hidden(
        c.call(
            "relate",
            json!({"relations": [{"from": w, "to": h, "kind": "x"}]}),
        )
        .await,
        h,
        c.call(
            "relate",
            json!({"relations": [{"from": w, "to": "m_nowhere", "kind": "x"}]}),
        )
        .await,
    );
    let d = Server::attach(&http.url, era, Some(&dana), &log).await;
    refused(
        d.call("consolidate", json!({"dry_run": true})).await,
        "consolidating every namespace",
    );
    refused(
        d.call("consolidate", json!({"runs": true})).await,
        "the list of runs",
    );
    let run = d
        .ok(
            "consolidate",
            json!({"dry_run": true, "namespaces": ["office"]}),
        )
        .await;
    assert_eq!(run["dry_run"], true, "{run}");
    d.stop().await;
    // What it may do, history records under its subject.
    c.ok("update", json!({"id": w, "importance": 0.9})).await;
    let got = a.ok("get", json!({"ids": [w, h], "history": true})).await;
    assert_eq!(
        got["memories"][0]["history"][0]["actor"], "tool:update by carol",
        "{got}"
    );
    assert!(got["memories"][1].get("forgotten_at").is_none(), "{got}");
    assert!(
        got["memories"][1]["history"].as_array().unwrap().is_empty(),
        "{got}"
    );
    c.stop().await;
    a.stop().await;
    http.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_serves_stdio_and_http_and_ends_with_its_stdio_session() {
    let db = TestDb::new();
    let local = Server::start_with(
        &db.path,
        Wire::Stdio,
        Era::Initialize,
        &["--http", "127.0.0.1:0", "--stdio"],
    )
    .await;
    let url = crate::support::http_url(local.log_path()).await;
    let ids = local
        .remember(json!([{"content": "The build server restarts every sunday night"}]))
        .await;
    let remote = Server::attach(&url, Era::Discover, None, local.log_path()).await;
    let hits = remote
        .recall_ids(json!({"query": "build server sunday"}))
        .await;
    assert!(hits.contains(&ids[0]), "{hits:?}");
    let theirs = remote
        .remember(json!([{"content": "The release train leaves on tuesdays"}]))
        .await;
    let hits = local.recall_ids(json!({"query": "release train"})).await;
    assert!(hits.contains(&theirs[0]), "{hits:?}");
    remote.stop().await;
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let log = local.log_path().to_owned();
    local.stop().await;
    // The host closed stdin: the process stops serving HTTP too.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(&authority).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "HTTP still served after the stdio session ended\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_is_answered_200() {
    let db = TestDb::new();
    let http = HttpChild::beside(&db.path, "delete.log", &[]).await;
    let at = http.authority().to_owned();
    let init = initialize_2025();
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let (status, answer) = http_request(&at, "POST", "/mcp", &headers, &init).await;
    assert_eq!(status, 200, "{answer}");
    let session = answer
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .expect("a session id");
    let end = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let (status, answer) = http_request(&at, "DELETE", "/mcp", &end, b"").await;
    assert_eq!(status, 200, "{answer}");
    let list =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).unwrap();
    let mut after = headers.to_vec();
    after.extend(end);
    let (status, answer) = http_request(&at, "POST", "/mcp", &after, &list).await;
    assert_eq!(status, 404, "the session is gone: {answer}");
    http.stop().await;
}

/// The session id of an `initialize` answer.
fn session_id_of(answer: &str) -> String {
    answer
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("a session id in {answer}"))
}

/// The body of an answer of [`http_request`].
fn body_of(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_belongs_to_the_token_that_opened_it() {
    let db = TestDb::new();
    let file = db.path.with_file_name("tokens");
    let alice = format!("Bearer {}", add_token(&file, "alice", "read"));
    let bob = format!("Bearer {}", add_token(&file, "bob", "read"));
    let http = HttpChild::beside(
        &db.path,
        "sessions.log",
        &["--tokens", file.to_str().unwrap()],
    )
    .await;
    let at = http.authority().to_owned();
    let init = initialize_2025();
    let post = |token: &str, session: &str| {
        vec![
            ("Content-Type", "application/json".to_owned()),
            ("Accept", "application/json, text/event-stream".to_owned()),
            ("MCP-Protocol-Version", "2025-11-25".to_owned()),
            ("Authorization", token.to_owned()),
            ("Mcp-Session-Id", session.to_owned()),
        ]
    };
    let send = |method: &'static str, headers: Vec<(&'static str, String)>, body: Vec<u8>| {
        let at = at.clone();
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            http_request(&at, method, "/mcp", &headers, &body).await
        }
    };
    let mut opening = post(&alice, "");
    opening.pop();
    let (status, answer) = send("POST", opening, init).await;
    assert_eq!(status, 200, "{answer}");
    let session = session_id_of(&answer);
    let initialized =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .unwrap();
    let (status, answer) = send("POST", post(&alice, &session), initialized.clone()).await;
    assert_eq!(status, 202, "{answer}");

    // Another token: every method on the session is answered as for a session that does not
    // exist, and the session lives on.
    let list =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).unwrap();
    for (method, body) in [
        ("GET", Vec::new()),
        ("POST", list.clone()),
        ("POST", initialized.clone()),
        ("DELETE", Vec::new()),
    ] {
        let mut headers = post(&bob, &session);
        if method == "GET" {
            headers[1].1 = "text/event-stream".to_owned();
        }
        let (theirs, foreign) = send(method, headers.clone(), body.clone()).await;
        headers[4].1 = "no-such-session".to_owned();
        let (unknown, missing) = send(method, headers, body).await;
        assert_eq!(
            theirs, 404,
            "{method} on another token's session: {foreign}"
        );
        assert_eq!(unknown, 404, "{method} on no session: {missing}");
        assert_eq!(body_of(&foreign), body_of(&missing), "{method}");
    }
    let (status, answer) = send("POST", post(&alice, &session), initialized.clone()).await;
    assert_eq!(
        status, 202,
        "the session outlived the other token's DELETE: {answer}"
    );
    let (status, answer) = send("POST", post(&alice, &session), list).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("recall"), "{answer}");

    let (status, answer) = send("DELETE", post(&alice, &session), Vec::new()).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _) = send("POST", post(&alice, &session), initialized).await;
    assert_eq!(status, 404, "the session is gone");
    http.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_checks_the_host() {
    let db = TestDb::new();
    let http = HttpChild::beside(
        &db.path,
        "hosts.log",
        &["--allow-host", "memory.example.com"],
    )
    .await;
    let at = http.authority().to_owned();
    let port = at.rsplit(':').next().unwrap().to_owned();
    for path in ["/healthz", "/readyz", "/metrics", "/mcp", "/nowhere"] {
        for host in [
            "attacker.example",
            "attacker.example:80",
            "localhost.attacker.example",
        ] {
            let (status, answer) = http_request(&at, "GET", path, &[("Host", host)], b"").await;
            assert_eq!(status, 403, "{path} for {host}: {answer}");
        }
        for host in [
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
            "memory.example.com".to_owned(),
        ] {
            let (status, answer) =
                http_request(&at, "GET", path, &[("Host", host.as_str())], b"").await;
            assert_ne!(status, 403, "{path} for {host}: {answer}");
        }
    }
    let (status, answer) = http_request(&at, "GET", "/healthz", &[], b"").await;
    assert_eq!(status, 200, "{answer}");
    http.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_are_not_json_rpc_get_json_rpc_errors() {
    let db = TestDb::new();
    let http = HttpChild::beside(&db.path, "bodies.log", &[]).await;
    let at = http.authority().to_owned();
    for (body, code, id) in [
        (&b"this is not JSON"[..], -32700, Value::Null),
        (
            br#"{"jsonrpc": "2.0", "id": 4, "method": "tools/list""#,
            -32700,
            Value::Null,
        ),
        (br#"{"hello": "world"}"#, -32600, Value::Null),
        (br#"{"jsonrpc": "2.0", "id": 3}"#, -32600, json!(3)),
        (
            br#"[{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}]"#,
            -32600,
            Value::Null,
        ),
    ] {
        let (status, answer) = http_request(&at, "POST", "/mcp", &MCP_HEADERS, body).await;
        let text = String::from_utf8_lossy(body);
        assert_eq!(status, 400, "{text}: {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{answer}"
        );
        let error: Value = serde_json::from_str(body_of(&answer))
            .unwrap_or_else(|e| panic!("{text}: not JSON ({e}): {answer}"));
        assert_eq!(error["jsonrpc"], "2.0", "{error}");
        assert_eq!(error["id"], id, "{text}: {error}");
        assert_eq!(error["error"]["code"], code, "{text}: {error}");
        assert!(error["error"]["message"].is_string(), "{error}");
    }
    // A body that is not declared JSON is still 415, as rmcp answers it.
    let mut headers = MCP_HEADERS.to_vec();
    headers[0] = ("Content-Type", "text/plain");
    let (status, answer) = http_request(&at, "POST", "/mcp", &headers, &tools_list()).await;
    assert_eq!(status, 415, "{answer}");
    let (status, answer) = http_request(&at, "POST", "/mcp", &MCP_HEADERS, &tools_list()).await;
    assert_eq!(status, 200, "{answer}");
    http.stop().await;
}

/// Reads `stream` until the server closes it or `limit` passes: what came, and whether it closed.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0) | Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// The head of a POST to `/mcp` of a 2026-07-28 client declaring `length` bytes of body.
fn post_head(authority: &str, length: usize, token: Option<&str>) -> String {
    let mut head =
        format!("POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {length}\r\n");
    for (k, v) in MCP_HEADERS {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    head.push_str("\r\n");
    head
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_get_408_and_overlong_ones_413_unread() {
    let db = TestDb::new();
    let http = HttpChild::beside(
        &db.path,
        "bodies.log",
        &["--http-body-timeout-ms", "1000", "--http-max-body", "4096"],
    )
    .await;
    let at = http.authority().to_owned();

    // A body that does not arrive in time: 408, long before the request timeout (60 s).
    let mut slow = TcpStream::connect(&at).await.unwrap();
    slow.write_all(post_head(&at, 100, None).as_bytes())
        .await
        .unwrap();
    slow.write_all(b"{\"jsonrpc\":").await.unwrap();
    let (answer, _) = read_until_closed(&mut slow, Duration::from_secs(8)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");

    // A body declared longer than the limit: 413 before any of it is sent.
    let mut long = TcpStream::connect(&at).await.unwrap();
    long.write_all(post_head(&at, 1_000_000, None).as_bytes())
        .await
        .unwrap();
    let (answer, _) = read_until_closed(&mut long, Duration::from_secs(8)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");

    let (status, answer) = http_request(&at, "POST", "/mcp", &MCP_HEADERS, &tools_list()).await;
    assert_eq!(status, 200, "{answer}");
    http.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_idle_connections_are_cut() {
    let db = TestDb::new();
    let http = HttpChild::beside(
        &db.path,
        "deadlines.log",
        &[
            "--http-header-timeout-ms",
            "1000",
            "--http-idle-timeout-ms",
            "3000",
        ],
    )
    .await;
    let at = http.authority().to_owned();

    // A head that keeps coming a byte at a time but never ends: closed at its deadline (before
    // the idle timeout, which a connection that sends bytes does not reach).
    let stream = TcpStream::connect(&at).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let started = Instant::now();
    let trickle = tokio::spawn(async move {
        let _ = write.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ").await;
        while write.write_all(b"a").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut got = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(8), read.read_to_end(&mut got)).await;
    let took = started.elapsed();
    assert!(closed.is_ok(), "a slow head held its connection for 8 s");
    assert!(took < Duration::from_millis(2500), "closed after {took:?}");
    trickle.abort();

    // An idle connection, new or after an exchange, is closed after the idle timeout.
    let mut idle = TcpStream::connect(&at).await.unwrap();
    let started = Instant::now();
    let (_, closed) = read_until_closed(&mut idle, Duration::from_secs(10)).await;
    assert!(closed, "an idle connection stayed open");
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    let mut kept = TcpStream::connect(&at).await.unwrap();
    kept.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {at}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"ok\n") {
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), kept.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buf[..n]);
    }
    let answered = Instant::now();
    let (_, closed) = read_until_closed(&mut kept, Duration::from_secs(10)).await;
    assert!(closed, "an idle keep-alive connection stayed open");
    assert!(
        answered.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        answered.elapsed()
    );

    let (status, answer) = http_request(&at, "POST", "/mcp", &MCP_HEADERS, &tools_list()).await;
    assert_eq!(status, 200, "{answer}");
    http.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_answered_503() {
    let db = TestDb::new();
    let http = HttpChild::beside(&db.path, "cap.log", &["--http-max-connections", "4"]).await;
    let at = http.authority().to_owned();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(&at).await.unwrap());
    }
    let (status, answer) = http_request(&at, "GET", "/healthz", &[], b"").await;
    assert_eq!(status, 503, "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, answer) = http_request(&at, "GET", "/healthz", &[], b"").await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    http.stop().await;
}

/// Slow clients all at once: 300 connections sending a request head a byte at a time without a
/// token, and 256 requests of one read token sending their bodies a byte at a time (each asks
/// again a second after it is refused or cut). A second token's recalls still succeed, and
/// `/healthz` answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_do_not_hold_the_server() {
    let db = TestDb::new();
    let file = db.path.with_file_name("tokens");
    let writer = add_token(&file, "writer", "read,write");
    let slow = add_token(&file, "slow", "read");
    let steady = add_token(&file, "steady", "read");
    let http = HttpChild::beside(&db.path, "slow.log", &["--tokens", file.to_str().unwrap()]).await;
    let log = http.log.clone();
    let at = http.authority().to_owned();
    let w = Server::attach(&http.url, Era::Discover, Some(&writer), &log).await;
    let memories: Vec<Value> = (0..50)
        .map(|i| json!({"content": format!("The harbour crane {i} lifts containers at dawn")}))
        .collect();
    w.remember(Value::Array(memories)).await;
    w.stop().await;

    let stop = Arc::new(tokio::sync::Notify::new());
    let refused = Arc::new(AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for i in 0..300 {
        let at = at.clone();
        attackers.push(tokio::spawn(async move {
            loop {
                let Ok(mut s) = TcpStream::connect(&at).await else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                let head = format!("GET /healthz HTTP/1.1\r\nHost: {at}\r\nX-Slow-{i}: ");
                for b in head.bytes().chain(std::iter::repeat(b'a')) {
                    if s.write_all(&[b]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }));
    }
    for _ in 0..256 {
        let (at, slow, refused) = (at.clone(), slow.clone(), Arc::clone(&refused));
        attackers.push(tokio::spawn(async move {
            loop {
                let Ok(s) = TcpStream::connect(&at).await else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                let (mut read, mut write) = s.into_split();
                if write
                    .write_all(post_head(&at, 100_000, Some(&slow)).as_bytes())
                    .await
                    .is_err()
                {
                    continue;
                }
                let trickle = async move {
                    while write.write_all(b" ").await.is_ok() {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                };
                let answer = async move {
                    let mut buf = [0u8; 256];
                    matches!(read.read(&mut buf).await, Ok(n) if n > 0 && buf.starts_with(b"HTTP/1.1 429"))
                };
                tokio::select! {
                    () = trickle => {}
                    too_many = answer => {
                        if too_many {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                // As `Retry-After` asks.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }
    // Liveness answers throughout.
    let probe = {
        let (at, stop) = (at.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut worst = Duration::ZERO;
            let mut probes = 0;
            loop {
                let started = Instant::now();
                let answered = tokio::time::timeout(
                    Duration::from_secs(5),
                    http_request(&at, "GET", "/healthz", &[], b""),
                )
                .await;
                let (status, answer) = answered.expect("/healthz answered within 5 s");
                assert_eq!(status, 200, "{answer}");
                worst = worst.max(started.elapsed());
                probes += 1;
                tokio::select! {
                    () = stop.notified() => return (probes, worst),
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        })
    };
    // The slow bodies have taken their token's share of the slots.
    let deadline = Instant::now() + Duration::from_secs(20);
    while refused.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = Server::attach(&http.url, Era::Discover, Some(&steady), &log).await;
    let started = Instant::now();
    let mut recalls = 0;
    let mut worst = Duration::ZERO;
    // Past the header and body deadlines (10 s, 20 s), so cut clients come back meanwhile.
    while started.elapsed() < Duration::from_secs(25) || recalls < 20 {
        let t = Instant::now();
        match s
            .call_within(
                "recall",
                json!({"query": "harbour crane"}),
                Duration::from_secs(20),
            )
            .await
        {
            Some(Ok(out)) => assert!(!hit_ids(&out).is_empty(), "{out}"),
            other => panic!(
                "recall {recalls} under slow clients: {other:?}\n{}",
                s.log_tail()
            ),
        }
        worst = worst.max(t.elapsed());
        recalls += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.notify_one();
    let (probes, worst_probe) = probe.await.expect("the /healthz probe");
    for a in attackers {
        a.abort();
    }
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "one token's slow bodies were never held to its share"
    );
    assert!(worst < Duration::from_secs(10), "slowest recall {worst:?}");
    assert!(
        probes > 10 && worst_probe < Duration::from_secs(5),
        "{probes} probes, slowest {worst_probe:?}"
    );
    s.stop().await;
    http.stop().await;
}

/// The body of a 2025-11-25 `initialize` request of a raw client.
fn initialize_2025() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}
    }))
    .expect("JSON")
}
