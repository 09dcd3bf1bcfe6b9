//! Consolidation over stdio against the real binary, in both protocol eras: a dry run that
//! writes nothing, a run that merges and archives, `get` of a merged id, the list of runs, undo
//! (and undo twice refused), bad arguments named; and, for a client with the tasks extension, a
//! run that becomes a task whose status reads as consolidation progress. Then the command line
//! on SQLite and PostgreSQL: a run killed mid-way is undone at once by the next command, and a
//! second run while one holds the database exits non-zero saying which run holds it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mnemograph::engine::RememberItem;
use mnemograph::store::{Store, runs};
use mnemograph::{Config, Engine};
use rmcp::model::{CallToolResponse, TaskStatus};
use serde_json::{Value, json};

use crate::support::{BIN, CallError, Era, TestDb};
use crate::tasks::{Client, connect, connect_answering, poll_until_terminal};

fn memories() -> Value {
    json!([
        {"content": "Greta keeps bees on the roof of her house in Porto."},
        {"content": "Greta keeps bees on the roof of her house in Porto!"},
        {"content": "Greta keeps bees on the roof of her house in Porto?", "tags": ["hobby"]},
        {"content": "Hugo builds harpsichords in a workshop near Ghent."},
        {"content": "an old parking code nobody asked about", "importance": 0.2},
    ])
}

/// An inline export's lines after the header (which carries the time of the export).
fn body(export: &Value) -> String {
    let data = export["data"].as_str().expect("an inline export");
    data.split_once('\n')
        .map(|(_, rest)| rest.to_owned())
        .unwrap_or_default()
}

const POLICY: &str =
    r#"{"merge_similarity": 0.85, "archive_below": 0.3, "archive_unused_days": 0}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidate_previews_merges_archives_and_undoes_in_both_eras() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let ids = s.remember(memories()).await;
        let policy: Value = serde_json::from_str(POLICY).unwrap();
        let before = body(&s.ok("export", json!({})).await);

        let dry = s
            .ok("consolidate", json!({"dry_run": true, "policy": policy}))
            .await;
        assert_eq!(dry["dry_run"], true, "{era:?} {dry}");
        assert_eq!(dry["counts"]["merged"], 2, "{era:?} {dry}");
        assert_eq!(dry["counts"]["archived"], 1, "{era:?} {dry}");
        assert!(
            dry["examples"][0]["text"]
                .as_str()
                .unwrap()
                .contains("Greta")
        );
        assert_eq!(
            body(&s.ok("export", json!({})).await),
            before,
            "{era:?}: dry run wrote"
        );

        let run = s.ok("consolidate", json!({"policy": policy})).await;
        assert_eq!(run["state"], "completed", "{era:?} {run}");
        assert_eq!(run["counts"]["merged"], 2, "{era:?} {run}");
        let run_id = run["run_id"].as_str().unwrap().to_owned();
        // A merged id answers with its survivor and says so.
        let merged: Vec<&String> = ids[..3]
            .iter()
            .filter(|id| *id != run["examples"][0]["into"].as_str().unwrap())
            .collect();
        let got = s.ok("get", json!({"ids": [merged[0]]})).await;
        let detail = &got["memories"][0];
        assert!(
            detail["merged"]
                .as_str()
                .unwrap()
                .contains(merged[0].as_str()),
            "{era:?} {got}"
        );
        assert_eq!(detail["tags"], json!(["hobby"]), "{era:?} {got}");
        // The archived memory left recall, and comes back on request.
        let hits = s
            .recall_ids(json!({"query": "parking code", "mode": "text"}))
            .await;
        assert!(hits.is_empty(), "{era:?} {hits:?}");
        let hits = s
            .recall_ids(json!({"query": "parking code", "mode": "text", "include_archived": true}))
            .await;
        assert_eq!(hits, vec![ids[4].clone()], "{era:?}");

        let listed = s.ok("consolidate", json!({"runs": true})).await;
        assert_eq!(
            listed["runs"][0]["run_id"],
            run_id.as_str(),
            "{era:?} {listed}"
        );
        let undone = s.ok("consolidate", json!({"undo": run_id})).await;
        assert_eq!(undone["runs"], json!([run_id]), "{era:?} {undone}");
        assert_eq!(
            body(&s.ok("export", json!({})).await),
            before,
            "{era:?}: undo"
        );
        match s.call("consolidate", json!({"undo": run_id})).await {
            Err(CallError::Tool(t)) => assert!(t.contains("undone already"), "{era:?} {t}"),
            other => panic!("{era:?}: {other:?}"),
        }
        match s
            .call("consolidate", json!({"steps": ["merge", "vacuum"]}))
            .await
        {
            Err(CallError::Tool(t)) => assert!(t.contains("steps[1]"), "{era:?} {t}"),
            other => panic!("{era:?}: {other:?}"),
        }
        match s
            .call("consolidate", json!({"policy": {"half_life_days": 0}}))
            .await
        {
            Err(CallError::Tool(t)) => assert!(t.contains("policy.half_life_days"), "{era:?} {t}"),
            other => panic!("{era:?}: {other:?}"),
        }
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_for_a_task_capable_client_is_a_task_with_consolidation_progress() {
    let db = TestDb::new();
    {
        let s = db.serve(Era::Discover).await;
        s.remember(memories()).await;
        s.stop().await;
    }
    // Every eligible call becomes a task at an inline budget of 0.
    let c = connect(
        &db.path,
        true,
        true,
        "curator",
        &["--inline-budget-ms", "0"],
    )
    .await;
    let policy: Value = serde_json::from_str(POLICY).unwrap();
    let CallToolResponse::Task(created) = c
        .call("consolidate", json!({"policy": policy}), None)
        .await
        .unwrap()
    else {
        panic!("at an inline budget of 0 a run is a task");
    };
    let (done, _) = poll_until_terminal(&c, &created.task.task_id, Duration::from_secs(60)).await;
    assert_eq!(done.task.task.status, TaskStatus::Completed);
    let message = done.task.task.status_message.clone().unwrap_or_default();
    assert!(
        message.contains("examined 5 / 5 memories · 2 merged · 1 archived"),
        "{message}"
    );
    let result = serde_json::to_value(&done).unwrap();
    let report = &result["result"]["structuredContent"];
    assert_eq!(report["counts"]["merged"], 2, "{report}");
    assert!(
        report["run_id"].as_str().unwrap().starts_with("run_"),
        "{report}"
    );
}

/// The structured result of a call that must succeed, inline or as a task.
async fn ok(c: &Client, tool: &str, args: Value) -> Value {
    match c.call(tool, args, None).await.expect(tool) {
        CallToolResponse::Complete(r) => {
            assert_ne!(r.is_error, Some(true), "{tool}: {r:?}");
            r.structured_content.expect("structured content")
        }
        CallToolResponse::Task(t) => report_of(c, &t.task.task_id).await,
        other => panic!("{tool}: {other:?}"),
    }
}

/// Polls task `id` until it waits for input; returns its `tasks/get` on the wire.
async fn until_input(c: &Client, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let got = c.get(id).await.expect("tasks/get");
        let wire = serde_json::to_value(&got).expect("the task as JSON");
        match got.task.task.status {
            TaskStatus::InputRequired => return wire,
            TaskStatus::Working => {}
            other => panic!("the task ended ({other:?}) without asking: {wire}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never asked: {wire}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The run's report once task `id` has ended.
async fn report_of(c: &Client, id: &str) -> Value {
    let started = Instant::now();
    let done = loop {
        let (t, _) = poll_until_terminal(c, id, Duration::from_secs(120)).await;
        // A question left unanswered: the task goes on by itself at its deadline.
        if t.task.task.status != TaskStatus::InputRequired {
            break t;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "still waiting for input"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done.task.task.status, TaskStatus::Completed);
    let wire = serde_json::to_value(&done).expect("the task as JSON");
    wire["result"]["structuredContent"].clone()
}

/// Starts a consolidation task with `policy` and returns its id.
async fn start_run(c: &Client, args: Value) -> String {
    let CallToolResponse::Task(created) = c
        .call("consolidate", args, None)
        .await
        .expect("a consolidation starts")
    else {
        panic!("at an inline budget of 0 a run is a task");
    };
    created.task.task_id
}

/// A run that would merge and archive more than the policy's `confirm_above` asks a client
/// that declared forms to confirm, through the task (`input_required`): silence past the
/// deadline and a "no" change nothing, a "yes" runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_run_asks_its_client_first_and_only_a_yes_changes_anything() {
    let db = TestDb::new();
    {
        let s = db.serve(Era::Discover).await;
        s.remember(memories()).await;
        s.stop().await;
    }
    let c = connect_answering(&db.path, "curator", &["--inline-budget-ms", "0"]).await;
    let mut policy: Value = serde_json::from_str(POLICY).unwrap();
    policy["confirm_above"] = json!(2);
    let before = body(&ok(&c, "export", json!({})).await);

    // Silence: the question names what would change and its deadline; past it, nothing changed.
    policy["answer_wait_s"] = json!(1);
    let id = start_run(&c, json!({"policy": policy})).await;
    let asked = until_input(&c, &id).await;
    let text = asked.to_string();
    for said in [
        "elicitation/create",
        "confirm-consolidation",
        "would merge 2 memories into 1 and archive 1",
        "more than the 2 changes",
        "within 1 s, nothing changes",
    ] {
        assert!(text.contains(said), "{said:?} in {text}");
    }
    let report = report_of(&c, &id).await;
    assert_eq!(report["state"], "declined", "{report}");
    assert_eq!(report["counts"]["merged"], 0, "{report}");
    assert!(
        report["warnings"][0]
            .as_str()
            .is_some_and(|w| w.starts_with("no answer within 1 s: nothing changed")),
        "{report}"
    );
    assert_eq!(body(&ok(&c, "export", json!({})).await), before);

    // No.
    policy["answer_wait_s"] = json!(60);
    let id = start_run(&c, json!({"policy": policy})).await;
    until_input(&c, &id).await;
    c.answer(&id, json!({"confirm-consolidation": {"action": "decline"}}))
        .await
        .expect("tasks/update");
    let report = report_of(&c, &id).await;
    assert_eq!(report["state"], "declined", "{report}");
    assert!(
        report["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("the client answered \"decline\"")),
        "{report}"
    );
    let status = c.get(&id).await.unwrap().task.task.status_message;
    assert!(
        status
            .as_deref()
            .is_some_and(|m| m.ends_with("declined: nothing changed")),
        "{status:?}"
    );
    assert_eq!(body(&ok(&c, "export", json!({})).await), before);

    // Yes.
    let id = start_run(&c, json!({"policy": policy})).await;
    until_input(&c, &id).await;
    c.answer(
        &id,
        json!({"confirm-consolidation": {"action": "accept", "content": {"confirm": true}}}),
    )
    .await
    .expect("tasks/update");
    let report = report_of(&c, &id).await;
    assert_eq!(report["state"], "completed", "{report}");
    assert_eq!(report["counts"]["merged"], 2, "{report}");
    assert_eq!(report["counts"]["archived"], 1, "{report}");

    // Under the threshold, nothing is asked.
    policy["confirm_above"] = json!(100);
    let id = start_run(&c, json!({"policy": policy})).await;
    assert_eq!(report_of(&c, &id).await["state"], "completed");
}

/// The summarise step asks the client's own model for the summaries when the client declared
/// sampling, and writes what it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summaries_are_written_by_the_clients_model_when_it_samples() {
    let db = TestDb::new();
    {
        let s = db.serve(Era::Discover).await;
        let trip = s
            .remember(json!([{"content": "Planning call about the Porto trip", "kind": "session"}]))
            .await;
        let turns = s
            .remember(json!([
                {"content": "Greta: shall we go to Porto in May?", "kind": "episode"},
                {"content": "Hugo: yes, the 3rd works, I will book the train.", "kind": "episode"},
                {"content": "Greta: great, I will find a flat near the river.", "kind": "episode"},
            ]))
            .await;
        for t in &turns {
            s.ok(
                "relate",
                json!({"relations": [{"from": t, "to": trip[0], "kind": "part_of"}]}),
            )
            .await;
        }
        s.stop().await;
    }
    let c = connect_answering(&db.path, "curator", &["--inline-budget-ms", "0"]).await;
    let policy = json!({"summarise_after_days": 0, "summarise_min_sources": 2});
    let id = start_run(&c, json!({"steps": ["summarise"], "policy": policy})).await;
    let asked = until_input(&c, &id).await;
    let text = asked.to_string();
    assert!(text.contains("sampling/createMessage"), "{text}");
    assert!(text.contains("I will book the train"), "{text}");
    let key = asked
        .pointer("/inputRequests")
        .or_else(|| asked.pointer("/task/inputRequests"))
        .and_then(Value::as_object)
        .and_then(|o| o.keys().next().cloned())
        .unwrap_or_else(|| panic!("one request: {text}"));
    c.answer(
        &id,
        json!({ key: {"role": "assistant", "model": "client-model",
            "content": {"type": "text", "text": "Greta and Hugo go to Porto on 3 May; Hugo books the train."}}}),
    )
    .await
    .expect("tasks/update");
    let report = report_of(&c, &id).await;
    assert_eq!(report["counts"]["summaries"], 1, "{report}");
    let found = ok(
        &c,
        "recall",
        json!({"query": "Hugo books the train", "kinds": ["summary"]}),
    )
    .await;
    assert!(
        found
            .to_string()
            .contains("Greta and Hugo go to Porto on 3 May"),
        "{found}"
    );
}

/// A database of each backend holding `pairs` near-duplicate pairs of made-up sentences (the
/// second of a pair ends in "!"), enough for a run that merges for several seconds: the backend,
/// the arguments that name it to the binary, the config to read it with, and what keeps it.
fn busy_databases(
    test: &str,
    pairs: usize,
) -> Vec<(&'static str, Vec<String>, Config, tempfile::TempDir)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("memory.db");
    let mut out = vec![(
        "sqlite",
        vec!["--db".to_owned(), path.display().to_string()],
        Config::for_db(&path),
        dir,
    )];
    if let Some(url) = crate::pg::database(test) {
        let dir = tempfile::tempdir().expect("temp dir");
        let index = dir.path().join("cli-index");
        out.push((
            "postgres",
            vec![
                "--db".to_owned(),
                url.clone(),
                "--index-dir".to_owned(),
                index.display().to_string(),
            ],
            Config::for_postgres(url, dir.path()),
            dir,
        ));
    }
    for (_, _, cfg, _) in &out {
        let engine = Engine::open(cfg.clone()).expect("open the database");
        let syllables = [
            "ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "be", "du", "fa", "go", "hu", "je",
            "vo", "ze", "ra", "ki", "mu", "sa",
        ];
        let word = |n: u64| -> String {
            (0..3)
                .map(|i| syllables[((n >> (5 * i)) % 20) as usize])
                .collect()
        };
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut items = Vec::new();
        for _ in 0..pairs {
            let words: Vec<String> = (0..10).map(|_| word(next() % 8_000)).collect();
            let text = words.join(" ");
            for content in [format!("{text}."), format!("{text}!")] {
                items.push(RememberItem {
                    content,
                    ..RememberItem::default()
                });
            }
        }
        for chunk in items.chunks(500) {
            for r in engine.remember(chunk).expect("remember") {
                r.expect("a memory");
            }
        }
    }
    out
}

/// The binary with `args` on the database `db` names: (exit code, stdout, stderr).
fn mnemograph(args: &[&str], db: &[String]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .args(db)
        .output()
        .expect("run mnemograph");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An export's lines after the header, from the binary.
fn exported(db: &[String]) -> String {
    let (code, out, err) = mnemograph(&["export"], db);
    assert_eq!(code, Some(0), "{err}");
    out.split_once('\n')
        .map(|(_, rest)| rest.to_owned())
        .expect("an export has a header")
}

/// Starts `mnemograph consolidate` on `db` and waits until its run has committed a batch; the
/// child and the run's id.
fn consolidating(db: &[String], cfg: &Config) -> (std::process::Child, String) {
    let mut child = Command::new(BIN)
        .arg("consolidate")
        .args(db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mnemograph");
    let store = Store::open(cfg).expect("open the store");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running = store
            .read(|c| runs::in_state(c, "running"))
            .expect("read the runs");
        if let Some(r) = running.first()
            && r.counts["merged"].as_u64().is_some_and(|n| n > 0)
        {
            return (child, r.id.clone());
        }
        if let Some(status) = child.try_wait().expect("the child's state") {
            panic!("the run ended ({status}) before it was seen mid-way: make the database bigger");
        }
        assert!(
            Instant::now() < deadline,
            "no batch committed within 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_cli_run_is_interrupted_and_undone_at_once() {
    for (backend, db, cfg, _dir) in busy_databases("killed_cli_run", 4_000) {
        let before = exported(&db);
        let (mut child, id) = consolidating(&db, &cfg);
        child.kill().unwrap();
        child.wait().unwrap();
        let store = Store::open(&cfg).unwrap();
        let left = store.read(|c| runs::get(c, &id)).unwrap().unwrap();
        assert_eq!(left.state, "running", "{backend}: the killed run's row");
        let merged = left.counts["merged"].as_u64().unwrap();
        assert!(merged > 0 && merged < 4_000, "{backend}: {merged} merged");

        let (code, out, err) = mnemograph(&["consolidate", "--undo", &id], &db);
        assert_eq!(code, Some(0), "{backend}: {out}\n{err}");
        assert!(out.contains(&format!("undid {id}")), "{backend}: {out}");
        assert_eq!(
            exported(&db),
            before,
            "{backend}: the undo put back the state before"
        );
        let (_, listed, _) = mnemograph(&["consolidate", "--runs", "--json"], &db);
        let listed: Value = serde_json::from_str(&listed).unwrap();
        assert_eq!(listed["runs"][0]["state"], "undone", "{backend}: {listed}");
        // The lease of the dead run is free: the next run goes ahead at once.
        let (code, out, err) = mnemograph(&["consolidate", "--step", "hygiene"], &db);
        assert_eq!(code, Some(0), "{backend}: {out}\n{err}");
        assert!(out.contains("completed"), "{backend}: {out}");
    }
}

#[test]
fn a_second_cli_run_while_one_holds_the_database_exits_non_zero_and_says_why() {
    for (backend, db, cfg, _dir) in busy_databases("second_cli_run", 4_000) {
        let (mut child, id) = consolidating(&db, &cfg);
        let (code, out, err) = mnemograph(&["consolidate"], &db);
        let (json_code, json, _) = mnemograph(&["consolidate", "--json"], &db);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(code, Some(4), "{backend}: {out}\n{err}");
        assert!(
            out.contains(&format!(
                "skipped: run {id} holds the database; nothing done"
            )),
            "{backend}: {out}"
        );
        assert!(
            err.contains("nothing done") && err.contains(&id),
            "{backend}: {err}"
        );
        assert_eq!(json_code, Some(4), "{backend}: {json}");
        let report: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            (report["state"].as_str(), report["held_by"].as_str()),
            (Some("skipped"), Some(id.as_str())),
            "{backend}: {report}"
        );
    }
}
