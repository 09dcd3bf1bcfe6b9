//! A token's limits hold for tasks as for tools: a token limited to some namespaces neither
//! reads, cancels nor lists the tasks its subject started with a wider token — such a task does
//! not exist for it — while the wider token sees the narrow one's tasks.

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
    n.stop().await;
    w.stop().await;
    http.stop().await;
}
