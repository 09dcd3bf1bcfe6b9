//! The operator's commands on the real binary: `mnemograph import` leaves the indexes ready for
//! the next process, and names its paths explicitly; `mnemograph tasks cancel` ends a task whose
//! process is gone at once and asks a live one's process to stop it; `mnemograph demo` speaks MCP
//! to a server of its own, and `demo --job` resumes a job on a second server after the first dies.

use std::path::Path;
use std::process::Command;

use mnemograph::model::{TaskRow, TaskState, now_millis};
use mnemograph::{Config, Engine};
use serde_json::json;

use crate::support::{BIN, TestDb};

/// Runs the binary: (success, stdout, stderr).
fn try_run(args: &[&str], db: &Path) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .arg("--db")
        .arg(db)
        .env_remove("MNEMOGRAPH_IMPORT_ROOTS")
        .output()
        .expect("run mnemograph");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run(args: &[&str], db: &Path) -> String {
    let (ok, stdout, stderr) = try_run(args, db);
    assert!(ok, "{args:?} failed: {stdout}\n{stderr}");
    stdout
}

/// Over the read catch-up limit (4,000 changes), so that only what the import leaves behind can
/// make the next process's first recall hybrid.
const CLI_IMPORT: usize = 5_000;

#[test]
fn a_cli_import_leaves_the_text_index_current_and_the_next_recall_hybrid() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let source = data.path().join("corpus.jsonl");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&source).unwrap());
    for i in 0..CLI_IMPORT {
        let line = json!({"type": "memory", "content": format!("cli memory {i} about lanterns")});
        writeln!(w, "{line}").unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let report = run(&["import", source.to_str().unwrap()], &db);
    assert!(report.contains("memories +5000"), "{report}");
    let stats = run(&["stats"], &db);
    assert!(stats.contains("memories        5000"), "{stats}");
    assert!(
        stats.lines().any(|l| l.trim() == "text index lag  0"),
        "{stats}"
    );
    // The compact vector file the import wrote answers the meaning half at once.
    let (ok, hits, warnings) = try_run(&["recall", "lantern light", "--limit", "5"], &db);
    assert!(ok, "{hits}\n{warnings}");
    assert!(!warnings.contains("warning:"), "{warnings}");
    assert!(hits.contains("meaning #"), "{hits}");
}

#[test]
fn the_cli_allows_exactly_the_paths_its_operator_names() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    std::fs::write(
        data.path().join("note.md"),
        "# Note\n\nNamed on the command line.\n",
    )
    .unwrap();
    let note = data.path().join("note.md");
    let report = run(&["import", note.to_str().unwrap()], &db);
    assert!(report.contains("memories +2"), "{report}");
    let out = data.path().join("out.jsonl");
    run(&["export", "--out", out.to_str().unwrap()], &db);
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .contains("Named on the command line")
    );
    let (ok, _, stderr) = try_run(&["export", "--out", out.to_str().unwrap()], &db);
    assert!(!ok && stderr.contains("exists"), "{stderr}");
    // A system file stays out of reach, even named by the operator.
    let (ok, _, stderr) = try_run(&["import", "/etc/hostname"], &db);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("system folder"), "{stderr}");
}

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
        input_requests: None,
        input_responses: None,
        grant: None,
    }
}

fn cancel(db: &TestDb, id: &str) -> String {
    run(&["tasks", "cancel", id], &db.path)
}

#[test]
fn cancelling_an_orphaned_task_ends_it_and_a_live_one_is_asked_to_stop() {
    let db = TestDb::new();
    let engine = Engine::open(Config::for_db(&db.path)).expect("open");
    let orphan = "0123456789abcdef0123456789abcdef";
    let live = "fedcba9876543210fedcba9876543210";
    engine
        .task_insert(&working_row(orphan, 60_000), None)
        .unwrap();
    engine.task_insert(&working_row(live, 0), None).unwrap();
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

/// What `mnemograph demo <args>` printed, asserting that it succeeded.
fn demo(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("demo")
        .args(args)
        .output()
        .expect("run mnemograph demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_demo_speaks_mcp_to_its_own_server_and_prints_each_step() {
    let stdout = demo(&[]);
    for step in [
        "connected to mnemograph",
        "tools: remember, recall",
        "remember 4 memories -> 4",
        "Alice is the tech lead of the Atlas project",
        // Each hit says why it ranks where it does.
        "words #1, meaning #",
        "with 2 relations",
        "duplicate: true",
        "stats: 4 memories, 2 relations",
    ] {
        assert!(stdout.contains(step), "missing {step:?} in:\n{stdout}");
    }
    // The question about what Alice drinks is answered by the tea memory first, not by the
    // memory named `alice`.
    let answer = stdout
        .split("recall \"what does Alice drink?\"")
        .nth(1)
        .and_then(|rest| rest.lines().nth(1))
        .unwrap_or_default();
    assert!(
        answer.ends_with("Alice prefers green tea over coffee in the morning"),
        "the first answer to the drink question is {answer:?} in:\n{stdout}"
    );
}

#[test]
fn the_job_demo_resumes_the_job_on_the_second_server() {
    let stdout = demo(&["--job"]);
    for step in [
        "A  checkpoint v3  half of the notes are in",
        "A  killed (SIGKILL)",
        "import completed  done · imported 30,000 / 30,000 items",
        "B  head v3: half of the notes are in",
        "B    v1 (parent null)  plan: import the field notes",
        "\"memories_added\":30000",
        "a client writing from v2: conflict: job \"field-notes\" is at version 3",
    ] {
        assert!(stdout.contains(step), "missing {step:?} in:\n{stdout}");
    }
}
