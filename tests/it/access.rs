//! A token's limits hold for tasks as for tools: a token limited to some namespaces neither
//! reads, cancels nor lists the tasks its subject started with a wider token — such a task does
//! not exist for it — while the wider token sees the narrow one's tasks; and what a host browses
//! (resources, completions) stays within the token's namespaces.

use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

use crate::http::{add_token, add_token_with};
use crate::support::{HttpChild, TestDb};
use crate::tasks::{http_client_with, rpc_code};

/// The task id of an answer that must be a task.
fn task_id(answer: CallToolResponse, what: &str) -> String {
    match answer {
        CallToolResponse::Task(created) => created.task.task_id,
        CallToolResponse::Complete(r) => {
            panic!("{what} must become a task, was inline: {:?}", r.meta)
        }
        _ => panic!("{what} must become a task"),
    }
}

/// The ids the `tasks` tool lists.
fn listed(answer: CallToolResponse) -> Vec<String> {
    let CallToolResponse::Complete(result) = answer else {
        panic!("the tasks tool answers inline: {answer:?}");
    };
    let out = result.structured_content.expect("structured tasks list");
    out["tasks"]
        .as_array()
        .expect("a list of tasks")
        .iter()
        .filter_map(|t| t["taskId"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narrow_token_does_not_see_the_tasks_its_subject_started_with_a_wider_one() {
    let db = TestDb::new();
    let file = db.path.with_file_name("tokens");
    let wide = add_token(&file, "owner", "admin");
    let narrow = add_token_with(&file, "owner", "read", &["--namespaces", "a"]);
    let log = db.path.with_file_name("access.log");
    // Every long call is a task.
    let serve = [
        "--tokens",
        file.to_str().unwrap(),
        "--inline-budget-ms",
        "0",
    ];
    let http = HttpChild::spawn(&db.path, &serve, &log).await;
    let pid = http.child.id().expect("the server runs");
    let w = http_client_with(&http.url, pid, true, "wide", Some(&wide)).await;
    let mut memories: Vec<Value> = (0..50)
        .map(|i| json!({"content": format!("note {i} of namespace a"), "namespace": "a"}))
        .collect();
    memories.push(json!({"content": "the secret plan of namespace b", "namespace": "b"}));
    w.call("remember", json!({"memories": memories}), None)
        .await
        .expect("remember");
    let everything = task_id(
        w.call("export", json!({}), None).await.expect("export"),
        "an export",
    );

    let n = http_client_with(&http.url, pid, true, "narrow", Some(&narrow)).await;
    let unknown = "0123456789abcdef0123456789abcdef";
    let foreign = n
        .get(&everything)
        .await
        .expect_err("the wide task is hidden");
    let nowhere = n.get(unknown).await.expect_err("an unknown task");
    assert_eq!(rpc_code(&foreign), Some(-32602), "{foreign}");
    assert_eq!(rpc_code(&nowhere), Some(-32602), "{nowhere}");
    let short = |id: &str| id[..8].to_owned();
    assert_eq!(
        foreign.to_string().replace(&short(&everything), "ID"),
        nowhere.to_string().replace(&short(unknown), "ID"),
        "the same answer as for a task that does not exist"
    );
    let cancelled = n.cancel(&everything).await.expect_err("no cancel");
    assert_eq!(rpc_code(&cancelled), Some(-32602), "{cancelled}");
    let seen = listed(n.call("tasks", json!({}), None).await.expect("tasks"));
    assert!(!seen.contains(&everything), "{seen:?}");

    // The narrow token's own task: it sees it, and so does the wider token of its subject.
    let own = task_id(
        n.call("export", json!({"namespaces": ["a"]}), None)
            .await
            .expect("export of a"),
        "an export of namespace a",
    );
    n.get(&own).await.expect("its own task");
    let seen = listed(n.call("tasks", json!({}), None).await.expect("tasks"));
    assert_eq!(seen, vec![own.clone()]);
    w.get(&own)
        .await
        .expect("the wider token sees the narrow one's task");
    w.get(&everything).await.expect("and its own");
    let seen = listed(w.call("tasks", json!({}), None).await.expect("tasks"));
    assert!(
        seen.contains(&own) && seen.contains(&everything),
        "{seen:?}"
    );

    // What a host browses holds to the same limits: namespace `a` only.
    let mine = n.all_resources().await;
    assert_eq!(mine.len(), 1 + 50, "{mine:?}");
    assert!(mine.iter().all(|u| u.starts_with("memory://a")), "{mine:?}");
    assert!(
        !n.can_read("memory://b").await,
        "a foreign namespace is not read"
    );
    assert_eq!(n.complete_namespace("").await, ["a"]);
    assert_eq!(w.complete_namespace("").await, ["a", "b"]);
    n.stop().await;
    w.stop().await;
    http.stop().await;
}

/// The status of a `tools/list` sent with `token`.
async fn status_with(at: &str, token: &str) -> u16 {
    let auth = format!("Bearer {token}");
    let mut headers = crate::http::MCP_HEADERS.to_vec();
    headers.push(("Authorization", &auth));
    crate::support::http_request(at, "POST", "/mcp", &headers, &crate::http::tools_list())
        .await
        .0
}

/// Waits up to `limit` for `token`'s requests to get `want`; the time it took.
async fn until_status(
    at: &str,
    token: &str,
    want: u16,
    limit: std::time::Duration,
) -> std::time::Duration {
    let started = std::time::Instant::now();
    loop {
        let got = status_with(at, token).await;
        if got == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "still {got} after {limit:?}, expected {want} for {}…",
            &token[..8]
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[cfg(unix)]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("the file is there")
        .permissions()
        .mode()
        & 0o777
}

#[cfg(unix)]
fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The tokens file: never left open by `token add`, refused by `serve` when others can write
/// it, and read again on change, so a removed line (by `token revoke` or by hand) stops
/// admitting its token within seconds, without a restart.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tokens_file_is_private_and_a_removed_line_revokes_its_token_without_a_restart() {
    use crate::support::BIN;
    let db = TestDb::new();
    let file = db.path.with_file_name("tokens");
    let alice = add_token(&file, "alice", "read");
    set_mode(&file, 0o644);
    let bob = add_token(&file, "bob", "read,write");
    assert_eq!(mode(&file), 0o600, "token add leaves the file private");
    let carol = add_token(&file, "carol", "read");
    let dave = add_token(&file, "dave", "read");

    // A file others can write is refused, with what to do.
    set_mode(&file, 0o664);
    let refused = std::process::Command::new(BIN)
        .args(["serve", "--db"])
        .arg(&db.path)
        .args(["--http", "127.0.0.1:0", "--tokens"])
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("chmod 600") && said.contains("664"), "{said}");
    set_mode(&file, 0o600);

    let listed = std::process::Command::new(BIN)
        .args(["token", "list", "--tokens"])
        .arg(&file)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains("alice") && listed.contains("sha256:"),
        "{listed}"
    );
    for t in [&alice, &bob, &carol, &dave] {
        assert!(!listed.contains(t.as_str()), "no token is listed");
    }

    let http = HttpChild::beside(
        &db.path,
        "revoke.log",
        &["--tokens", file.to_str().unwrap()],
    )
    .await;
    let log = http.log.clone();
    let at = http.authority().to_owned();
    for t in [&alice, &bob, &carol, &dave] {
        assert_eq!(status_with(&at, t).await, 200);
    }
    let limit = std::time::Duration::from_secs(5);

    // By subject.
    let out = std::process::Command::new(BIN)
        .args(["token", "revoke", "alice", "--tokens"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    until_status(&at, &alice, 401, limit).await;
    assert_eq!(mode(&file), 0o600, "revoke keeps the file private");
    // By hash prefix, as `token list` shows it.
    let bob_hash = listed
        .lines()
        .find(|l| l.starts_with("bob"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .to_owned();
    let out = std::process::Command::new(BIN)
        .args(["token", "revoke", &bob_hash, "--tokens"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    until_status(&at, &bob, 401, limit).await;
    // By hand: the line taken out of the file in place.
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("carol "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, kept).unwrap();
    until_status(&at, &carol, 401, limit).await;
    assert_eq!(
        status_with(&at, &dave).await,
        200,
        "the others stay admitted"
    );
    // Revoking what is not there says so.
    let out = std::process::Command::new(BIN)
        .args(["token", "revoke", "nobody", "--tokens"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    // A file others can write while served admits nobody until fixed.
    set_mode(&file, 0o666);
    until_status(&at, &dave, 401, limit).await;
    set_mode(&file, 0o600);
    until_status(&at, &dave, 200, limit).await;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("chmod 600"), "the log says why: {logged}");
    http.stop().await;
}

/// An import file whose memory's id is taken by a memory of another namespace: the file's
/// memory gets a new id and the file's relation follows it, never to the other namespace's
/// memory; a relation to an id that only another namespace holds is a counted bad record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_never_links_to_another_namespace_through_a_taken_id() {
    let db = TestDb::new();
    let s = db.serve(crate::support::Era::Discover).await;
    let line = |v: Value| format!("{v}\n");
    let theirs = line(
        json!({"type": "memory", "id": "m_taken", "namespace": "theirs", "content": "their memory"}),
    ) + &line(
        json!({"type": "memory", "id": "m_theirs_only", "namespace": "theirs", "content": "their other memory"}),
    );
    s.ok("import", json!({"source": {"text": theirs}})).await;
    let file = line(
        json!({"type": "memory", "id": "m_taken", "namespace": "mine", "content": "my memory"}),
    ) + &line(
        json!({"type": "memory", "id": "m_mine", "namespace": "mine", "content": "my second memory"}),
    ) + &line(
        json!({"type": "relation", "from": "m_mine", "to": "m_taken", "kind": "about"}),
    ) + &line(
        json!({"type": "relation", "from": "m_mine", "to": "m_theirs_only", "kind": "about"}),
    );
    let report = s.ok("import", json!({"source": {"text": file}})).await;
    assert_eq!(report["memories_added"], 2, "{report}");
    assert_eq!(report["relations_added"], 1, "{report}");
    assert_eq!(report["errors"], 1, "{report}");
    let first = report["first_errors"][0].as_str().unwrap_or_default();
    assert!(
        first.contains("line 4") && first.contains("m_theirs_only"),
        "{report}"
    );
    let got = s.ok("get", json!({"ids": ["m_taken", "m_mine"]})).await;
    let taken = &got["memories"][0];
    assert_eq!(taken["namespace"], "theirs", "{got}");
    assert_eq!(taken["relations"], json!([]), "{got}");
    let to = got["memories"][1]["relations"][0]["to"]
        .as_str()
        .expect("the file's relation")
        .to_owned();
    let own = s.ok("get", json!({"ids": [to]})).await;
    assert_eq!(own["memories"][0]["content"], "my memory", "{own}");
    assert_eq!(own["memories"][0]["namespace"], "mine", "{own}");
    s.stop().await;
}
