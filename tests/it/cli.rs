//! The `mnemograph tasks` command against rows written by servers: cancelling a task whose
//! process is gone ends it at once; cancelling a live one asks its process to stop it.

use mnemograph::model::{TaskRow, TaskState, now_millis};
use mnemograph::{Config, Engine};
use serde_json::json;

use crate::support::{BIN, TestDb};

fn working_row(id: &str, heartbeat_age_ms: i64) -> TaskRow {
    let now = now_millis();
    TaskRow {
        id: id.to_owned(),
        owner: "client:cli-test".into(),
        tool: "traverse".into(),
        arguments: json!({"names": ["n1"]}),
        status: TaskState::Working,
        status_message: Some("visited 10 nodes · depth 1/5 · frontier 3".into()),
        progress: json!({"visited": 10}),
        result: None,
        error: None,
        created_at: now - heartbeat_age_ms,
        updated_at: now - heartbeat_age_ms,
        ttl_ms: Some(3_600_000),
        poll_interval_ms: Some(250),
        checkpoint: None,
        boot_id: "a-process-long-gone".into(),
        heartbeat_at: now - heartbeat_age_ms,
        cancel_requested: false,
    }
}

fn cancel(db: &TestDb, id: &str) -> String {
    let out = std::process::Command::new(BIN)
        .args(["tasks", "cancel", id, "--db"])
        .arg(&db.path)
        .output()
        .expect("run mnemograph tasks cancel");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn cancelling_an_orphaned_task_ends_it_and_a_live_one_is_asked_to_stop() {
    let db = TestDb::new();
    let engine = Engine::open(Config::for_db(&db.path)).expect("open");
    let orphan = "0123456789abcdef0123456789abcdef";
    let live = "fedcba9876543210fedcba9876543210";
    engine.task_insert(&working_row(orphan, 60_000)).unwrap();
    engine.task_insert(&working_row(live, 0)).unwrap();
    drop(engine);

    let said = cancel(&db, orphan);
    assert!(said.contains("cancelled"), "{said}");
    assert!(!said.contains("the process running it"), "{said}");
    let said = cancel(&db, live);
    assert!(said.contains("cancellation requested"), "{said}");

    let engine = Engine::open(Config::for_db(&db.path)).expect("open");
    let row = engine.task_get(orphan).unwrap().unwrap();
    assert_eq!(row.status, TaskState::Cancelled, "{row:?}");
    assert!(
        row.status_message
            .as_deref()
            .is_some_and(|m| m.contains("cancelled")),
        "{row:?}"
    );
    let row = engine.task_get(live).unwrap().unwrap();
    assert_eq!(row.status, TaskState::Working, "{row:?}");
    assert!(row.cancel_requested, "{row:?}");
}
