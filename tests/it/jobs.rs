//! A job's memory over MCP, on two servers sharing one database: a job resumed on another
//! server reads every checkpoint and what was learned since the latest; a write from a stale
//! version is a conflict that names the newer one; history, diff, revert and close; bad
//! arguments named. And the scenario of a job whose import task outlives its server, on SQLite
//! and PostgreSQL.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResponse, TaskStatus};
use serde_json::{Value, json};

use crate::support::{Era, TestDb, send_signal};
use crate::tasks::{Client, connect_logged};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resumes_on_another_server_and_a_stale_checkpoint_is_refused() {
    let db = TestDb::new();
    let a = db.serve(Era::Initialize).await;
    let b = db.serve(Era::Discover).await;
    let job = |extra: Value| {
        let mut args = json!({"name": "migrate-billing", "namespace": "work"});
        if let (Value::Object(o), Value::Object(x)) = (&mut args, extra) {
            o.extend(x);
        }
        args
    };

    let fresh = a.ok("job", job(json!({}))).await;
    assert_eq!(fresh["state"], "new", "{fresh}");
    let v1 = a
        .ok(
            "job",
            job(json!({"action": "checkpoint", "base": 0, "note": "mapped the tables",
                "learned": ["invoices live in billing.inv"], "open_questions": ["who owns refunds?"]})),
        )
        .await;
    assert_eq!(
        (v1["version"].clone(), v1["parent"].clone()),
        (json!(1), Value::Null),
        "{v1}"
    );
    let out = a
        .ok(
            "remember",
            json!({"job": "migrate-billing", "memories": [
                {"content": "Refunds are owned by the payments team", "namespace": "work"},
                {"content": "The invoice table has 4.2 million rows", "namespace": "work"},
            ]}),
        )
        .await;
    assert_eq!(out["ok"], 2, "{out}");

    // Server B resumes it: the checkpoint, and what was learned since.
    let resumed = b.ok("job", job(json!({}))).await;
    assert_eq!(resumed["state"], "open", "{resumed}");
    assert_eq!(resumed["head"]["version"], 1, "{resumed}");
    assert_eq!(resumed["head"]["note"], "mapped the tables");
    assert_eq!(
        resumed["head"]["open_questions"],
        json!(["who owns refunds?"])
    );
    assert_eq!(resumed["learned_since"]["total"], 2, "{resumed}");
    let learned = resumed["learned_since"]["memories"].to_string();
    assert!(
        learned.contains("payments team") && learned.contains("4.2 million"),
        "{learned}"
    );

    let v2 = b
        .ok(
            "job",
            job(json!({"action": "checkpoint", "base": 1, "note": "refunds answered",
                "learned": ["invoices live in billing.inv", "refunds: payments team"], "open_questions": []})),
        )
        .await;
    assert_eq!(
        (v2["version"].clone(), v2["parent"].clone()),
        (json!(2), json!(1)),
        "{v2}"
    );

    // A writes from the version it read: refused, naming the newer one; nothing overwritten.
    let stale = a
        .call(
            "job",
            job(json!({"action": "checkpoint", "base": 1, "note": "my view"})),
        )
        .await
        .expect_err("a stale checkpoint");
    let said = stale.message();
    assert!(
        said.contains("at version 2") && said.contains("base 2"),
        "{said}"
    );
    let head = a.ok("job", job(json!({}))).await;
    assert_eq!(head["head"]["note"], "refunds answered", "{head}");
    assert_eq!(head["learned_since"]["total"], 0, "{head}");

    let history = a.ok("job", job(json!({"action": "history"}))).await;
    let versions: Vec<(Value, Value)> = history["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["version"].clone(), v["note"].clone()))
        .collect();
    assert_eq!(
        versions,
        [
            (json!(2), json!("refunds answered")),
            (json!(1), json!("mapped the tables"))
        ]
    );
    let diff = a.ok("job", job(json!({"action": "diff"}))).await;
    assert_eq!(
        diff["changes"]["learned"]["added"],
        json!(["refunds: payments team"]),
        "{diff}"
    );
    assert_eq!(
        diff["changes"]["open_questions"]["removed"],
        json!(["who owns refunds?"])
    );

    let back = a
        .ok(
            "job",
            job(json!({"action": "revert", "base": 2, "version": 1})),
        )
        .await;
    assert_eq!(
        (back["version"].clone(), back["reverts_to"].clone()),
        (json!(3), json!(1)),
        "{back}"
    );
    let head = b.ok("job", job(json!({}))).await;
    assert_eq!(head["head"]["note"], "mapped the tables", "{head}");

    let closed = b.ok("job", job(json!({"action": "close"}))).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    let late = a
        .call(
            "job",
            job(json!({"action": "checkpoint", "base": 3, "note": "late"})),
        )
        .await
        .expect_err("a closed job");
    assert!(late.message().contains("closed"), "{}", late.message());

    for (args, said) in [
        (json!({"name": "x", "action": "rewind"}), "rewind"),
        (
            json!({"name": "x", "action": "checkpoint", "note": "n"}),
            "`base`",
        ),
        (
            json!({"name": "x", "action": "checkpoint", "base": 0}),
            "says nothing",
        ),
        (json!({"name": "", "action": "history"}), "`name`"),
        (
            json!({"name": "nobody", "action": "history"}),
            "job not found",
        ),
        (
            json!({"name": "x", "action": "diff", "base": 1, "version": 9}),
            "not found",
        ),
    ] {
        let err = a.call("job", args.clone()).await.expect_err("bad job call");
        assert!(err.message().contains(said), "{args}: {}", err.message());
    }
    a.stop().await;
    b.stop().await;
}

fn write_notes(path: &std::path::Path, n: usize) {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).expect("create the corpus"));
    for i in 0..n {
        writeln!(
            w,
            "{}",
            json!({"type": "memory", "id": format!("m_note{i}"), "content": format!("imported memory {i} about {}", ["tea", "rust", "kyoto"][i % 3])})
        )
        .expect("write the corpus");
        if i > 0 {
            writeln!(
                w,
                "{}",
                json!({"type": "relation", "from": format!("m_note{i}"), "to": format!("m_note{}", i - 1), "kind": "follows"})
            )
            .expect("write the corpus");
        }
    }
}

/// A tool call that must be answered inline without error: its structured content.
async fn ok(c: &Client, tool: &str, args: Value) -> Value {
    match c.call(tool, args.clone(), None).await {
        Ok(CallToolResponse::Complete(r)) if r.is_error != Some(true) => {
            r.structured_content.unwrap_or_default()
        }
        other => panic!("{tool} {args}: {other:?}"),
    }
}

/// The error text of a tool call that must fail.
async fn refused(c: &Client, tool: &str, args: Value) -> String {
    match c.call(tool, args.clone(), None).await {
        Ok(CallToolResponse::Complete(r)) if r.is_error == Some(true) => r
            .content
            .iter()
            .filter_map(|b| b.as_text().map(|t| t.text.clone()))
            .collect(),
        Err(e) => e.to_string(),
        other => panic!("{tool} {args} should fail: {other:?}"),
    }
}

/// The job's memory outlives the server that did its work: a client checkpoints job J three
/// times on server A while an import runs as a task under J; A is killed mid-import; server B
/// (on the same store) takes the import over, and the client, now on B, resumes J: every
/// checkpoint, its history, what the import learned and the import's result — still there after
/// the task's time to live; a second client checkpointing from a stale version gets a conflict.
/// `n`: memories of the import (each but the first with a relation), enough for it to run
/// for seconds on the store.
async fn a_job_outlives_the_server_that_ran_its_import(
    db: &OsStr,
    logs: &std::path::Path,
    n: usize,
) {
    let corpus = logs.join("notes.jsonl");
    write_notes(&corpus, n);
    let job = json!({"name": "import-notes", "namespace": "work"});
    let call = |extra: Value| {
        let mut args = job.clone();
        if let (Value::Object(o), Value::Object(x)) = (&mut args, extra) {
            o.extend(x);
        }
        args
    };
    let root = logs.display().to_string();
    let extra = ["--import-root", root.as_str()];
    let a = connect_logged(db, "agent", &extra, &logs.join("a.log")).await;
    let b = connect_logged(db, "agent", &extra, &logs.join("b.log")).await;

    let v1 = ok(
        &a,
        "job",
        call(json!({"action": "checkpoint", "base": 0, "note": "plan: import the notes"})),
    )
    .await;
    assert_eq!(v1["version"], 1, "{v1}");
    // The import runs as a task under the job, kept five seconds after it ends: long enough
    // that a client stalled between two polls still finds it running or done, short enough to
    // see it expire below.
    let started = a
        .call_meta(
            "import",
            json!({"source": {"path": corpus.display().to_string()}, "namespace": "work"}),
            json!({"mnemograph/job": job, "mnemograph/taskTtlMs": 5000}),
        )
        .await
        .expect("import");
    let CallToolResponse::Task(created) = started else {
        panic!("a {n}-memory import should become a task: {started:?}");
    };
    let id = created.task.task_id;
    for (base, note) in [(1, "import started"), (2, "half of the notes are in")] {
        let v = ok(
            &a,
            "job",
            call(json!({"action": "checkpoint", "base": base, "note": note,
                "open_questions": ["are the kyoto notes duplicates?"]})),
        )
        .await;
        assert_eq!(v["version"], base + 1, "{v}");
    }
    // While it runs, the job shows the task working.
    let running = ok(&a, "job", call(json!({}))).await;
    assert_eq!(running["results"]["tasks"][0]["taskId"], id, "{running}");
    assert_eq!(running["results"]["tasks"][0]["status"], "working");

    // A is killed once the import has written a few batches.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = a.get(&id).await.expect("tasks/get");
        assert_eq!(t.task.task.status, TaskStatus::Working, "finished too soon");
        let done = t
            .meta
            .as_ref()
            .and_then(|m| m.0.get("mnemograph/progress"))
            .and_then(|p| p["done"].as_u64())
            .unwrap_or(0);
        if done >= n as u64 / 10 {
            break;
        }
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(send_signal(a.pid, "KILL"), "kill server A");
    drop(a);

    // The client, now on B, follows the job until B has finished the import.
    let deadline = Instant::now() + Duration::from_secs(180);
    let resumed = loop {
        let r = ok(&b, "job", call(json!({}))).await;
        if r["results"]["tasks"][0]["status"] != "working" {
            break r;
        }
        assert!(Instant::now() < deadline, "the import did not end: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(resumed["head"]["version"], 3, "{resumed}");
    assert_eq!(resumed["head"]["note"], "half of the notes are in");
    let task = &resumed["results"]["tasks"][0];
    assert_eq!(
        (
            task["taskId"].clone(),
            task["tool"].clone(),
            task["status"].clone()
        ),
        (json!(id), json!("import"), json!("completed")),
        "{resumed}"
    );
    assert!(
        task["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("done")),
        "{task}"
    );
    // What the import learned since the latest checkpoint: the notes B imported.
    let learned = &resumed["learned_since"];
    assert!(learned["total"].as_i64().expect("a count") > 0, "{learned}");
    assert!(
        learned["memories"].to_string().contains("imported memory"),
        "{learned}"
    );
    let history = ok(&b, "job", call(json!({"action": "history"}))).await;
    let notes: Vec<Value> = history["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["note"].clone())
        .collect();
    assert_eq!(
        notes,
        [
            json!("half of the notes are in"),
            json!("import started"),
            json!("plan: import the notes")
        ]
    );

    // Once the task's time to live has passed, tasks/get no longer knows it; the job still has
    // its result, at the address the resume gives.
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.get(&id).await.is_ok() {
        assert!(Instant::now() < deadline, "the task outlived its TTL");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let uri = task["uri"].as_str().expect("the result's address");
    let read = b.read(uri).await.expect("the job's result is readable");
    let text = serde_json::to_value(&read.contents[0]).expect("contents")["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let report: Value = serde_json::from_str(&text).expect("the result is JSON");
    let added = report["memories_added"].as_u64().expect("memories_added");
    let existing = report["memories_existing"].as_u64().unwrap_or(0);
    assert_eq!(added + existing, n as u64, "{report}");
    assert!(
        report["resumed_after"].as_u64().unwrap_or(0) > 0,
        "{report}"
    );
    let stats = ok(&b, "stats", json!({})).await;
    assert_eq!(stats["memories"], n, "{stats}");

    // A second client writes the checkpoint from a version it read earlier: refused.
    let c = connect_logged(db, "second", &extra, &logs.join("c.log")).await;
    let said = refused(
        &c,
        "job",
        call(json!({"action": "checkpoint", "base": 2, "note": "my older view"})),
    )
    .await;
    assert!(said.contains("at version 3"), "{said}");
    let head = ok(&c, "job", call(json!({}))).await;
    assert_eq!(head["head"]["note"], "half of the notes are in", "{head}");
    b.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_outlives_its_server_on_sqlite() {
    let db = TestDb::new();
    let logs = tempfile::tempdir().unwrap();
    a_job_outlives_the_server_that_ran_its_import(db.path.as_os_str(), logs.path(), 40_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_outlives_its_server_on_postgres() {
    let Some(url) = crate::pg::database("a_job_outlives_its_server") else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    a_job_outlives_the_server_that_ran_its_import(OsStr::new(&url), logs.path(), 15_000).await;
}
