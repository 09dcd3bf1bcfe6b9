//! Consolidation in the background, on real processes and files: servers that consolidate on a
//! schedule (`--consolidate-every`) take turns on one database and their runs never overlap; a
//! run started as a task keeps recall answering, makes `mnemograph consolidate` exit 0 naming
//! it, survives a `kill -9` of its server (the next server adopts the task and resumes the run
//! from its checkpoint, ending where an uninterrupted run on a copy ends), and, cancelled, leaves
//! a consistent database that its undo puts back exactly.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResponse, GetTaskResult, TaskStatus};
use serde_json::{Value, json};

use crate::support::{BIN, Era, Raw, TestDb};
use crate::tasks::{Client, connect, connect_logged, poll_until_terminal};

/// Words of the seeded memories: nine picked at random from a hundred share few words, so only
/// the planted near-duplicates are alike enough to merge.
const WORDS: &[&str] = &[
    "apple", "river", "stone", "cloud", "tiger", "violin", "ember", "harbor", "quartz", "meadow",
    "lantern", "copper", "orchid", "glacier", "falcon", "pepper", "saddle", "thistle", "walnut",
    "canyon", "beacon", "marble", "velvet", "hazel", "cobalt", "juniper", "ridge", "prairie",
    "salmon", "tundra", "willow", "anchor", "basil", "cinder", "dune", "fable", "garnet", "heron",
    "ivory", "jasper", "kettle", "lilac", "maple", "nectar", "olive", "pebble", "quill", "raven",
    "sierra", "tulip", "umber", "vessel", "wren", "yarrow", "zephyr", "acorn", "bramble", "cedar",
    "delta", "fern", "grove", "hollow", "iris", "kelp", "lotus", "moss", "nutmeg", "opal", "pine",
    "quince", "reed", "sage", "thyme", "vine", "wheat", "yew", "alder", "birch", "clover", "daisy",
    "elm", "flint", "gorse", "heath", "inlet", "jade", "kiln", "larch", "myrtle", "nook", "oak",
    "poppy", "quarry", "rush", "sorrel", "tansy", "bison", "comet", "dingo", "egret",
];

/// Memories and near-duplicates of the runs that are killed, cancelled and recalled through:
/// 6,000 memories, 2,000 merges in 40 batches.
const MEMORIES: usize = 4_000;
const DUPLICATES: usize = 2_000;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Writes `n` memories (`m_seed…`, a second apart) and, for the first `dups`, a later wording
/// ending in "!" instead of "." (`m_dup…`), with a chain of `follows` relations and a `mentions`
/// relation on every third duplicate, which a merge moves to its survivor.
fn write_corpus(path: &Path, n: usize, dups: usize) {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).expect("create the corpus"));
    let mut rng = 7u64;
    let mut line = |v: Value| writeln!(w, "{v}").expect("write the corpus");
    for i in 0..n {
        let mut picked: Vec<&str> = Vec::new();
        while picked.len() < 9 {
            let word = WORDS[(splitmix(&mut rng) % WORDS.len() as u64) as usize];
            if !picked.contains(&word) {
                picked.push(word);
            }
        }
        let text = format!("Note {i}: {}.", picked.join(" "));
        let at = |day: u32| {
            format!(
                "2024-03-{day:02}T{:02}:{:02}:{:02}Z",
                i / 3_600,
                i / 60 % 60,
                i % 60
            )
        };
        line(
            json!({"type": "memory", "id": format!("m_seed{i:06}"), "content": text, "created_at": at(1)}),
        );
        if i < dups {
            let again = format!("{}!", text.trim_end_matches('.'));
            line(
                json!({"type": "memory", "id": format!("m_dup{i:06}"), "content": again, "created_at": at(2)}),
            );
        }
    }
    for i in 1..n {
        line(
            json!({"type": "relation", "from": format!("m_seed{i:06}"), "to": format!("m_seed{:06}", i - 1), "kind": "follows"}),
        );
    }
    for i in (0..dups).step_by(3) {
        line(
            json!({"type": "relation", "from": format!("m_dup{i:06}"), "to": format!("m_seed{:06}", (i + 7) % n), "kind": "mentions"}),
        );
    }
}

/// Runs the binary on `db`: (success, stdout, stderr).
fn mnemograph(db: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("MNEMOGRAPH_IMPORT_ROOTS")
        .output()
        .expect("run mnemograph");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the binary on `db`, which must succeed; its stdout.
fn cli(db: &Path, args: &[&str]) -> String {
    let (ok, stdout, stderr) = mnemograph(db, args);
    assert!(ok, "mnemograph {args:?} failed: {stdout}\n{stderr}");
    stdout
}

/// A database of `n` memories and `dups` near-duplicates, imported by `mnemograph import`.
fn seeded(n: usize, dups: usize) -> TestDb {
    let db = TestDb::new();
    let corpus = db.path.with_file_name("corpus.jsonl");
    write_corpus(&corpus, n, dups);
    cli(&db.path, &["import", &corpus.display().to_string()]);
    db
}

/// The recent runs, newest first, as `mnemograph consolidate --runs --json` lists them.
fn runs(db: &Path) -> Vec<Value> {
    let out = cli(db, &["consolidate", "--runs", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["runs"].as_array().expect("runs").clone()
}

/// The lines of `mnemograph export` after its header (which carries the time of the export).
fn export(db: &Path) -> Vec<String> {
    let out = cli(db, &["export"]);
    let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
    assert!(lines[0].contains("\"header\""), "{}", lines[0]);
    lines.remove(0);
    lines
}

/// An export's memories and relations without what differs between two runs making the same
/// changes at other times: a memory's `updated_at`; a relation's id and times (a merge
/// re-creates a moved relation under a new id).
fn comparable(lines: &[String]) -> (Vec<Value>, BTreeSet<String>) {
    let mut memories = Vec::new();
    let mut relations = BTreeSet::new();
    for l in lines {
        let mut v: Value = serde_json::from_str(l).expect("an export line is JSON");
        let o = v.as_object_mut().expect("an object");
        match o["type"].as_str() {
            Some("memory") => {
                o.remove("updated_at");
                memories.push(v);
            }
            Some("relation") => {
                for k in ["id", "created_at", "updated_at", "reinforced_at"] {
                    o.remove(k);
                }
                relations.insert(v.to_string());
            }
            other => panic!("unexpected line {other:?}: {l}"),
        }
    }
    (memories, relations)
}

/// The counters of a task's progress (`_meta` of `tasks/get`).
fn progress(t: &GetTaskResult) -> Value {
    t.meta
        .as_ref()
        .and_then(|m| m.0.get("mnemograph/progress"))
        .cloned()
        .unwrap_or(Value::Null)
}

fn count(p: &Value, key: &str) -> u64 {
    p[key].as_u64().unwrap_or(0)
}

/// Starts a consolidation of everything as a task; its id.
async fn start_run(c: &Client, args: Value) -> String {
    match c.call("consolidate", args, None).await {
        Ok(CallToolResponse::Task(created)) => created.task.task_id,
        other => panic!("a run for a client with tasks is a task: {other:?}"),
    }
}

/// Polls task `id` until its progress satisfies `reached`; panics when the task ends first.
async fn wait_for(c: &Client, id: &str, what: &str, reached: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = c.get(id).await.expect("tasks/get");
        let p = progress(&t);
        assert_eq!(
            t.task.task.status,
            TaskStatus::Working,
            "the run ended before {what}: {:?} {p}",
            t.task.task.status_message
        );
        if reached(&p) {
            return p;
        }
        assert!(Instant::now() < deadline, "no {what} in 120 s: {p}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The single run in state `running` (waiting a little for a task's work to record it).
fn running_run(db: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let running: Vec<Value> = runs(db)
            .into_iter()
            .filter(|r| r["state"] == "running")
            .collect();
        assert!(running.len() <= 1, "{running:?}");
        if let Some(r) = running.into_iter().next() {
            return r;
        }
        assert!(Instant::now() < deadline, "no run is running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The newest run once it is in `state` (listing it opens the database, which marks a run
/// whose process is gone interrupted).
fn run_in_state(db: &Path, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let newest = runs(db).into_iter().next();
        if let Some(r) = newest.filter(|r| r["state"] == state) {
            return r;
        }
        assert!(Instant::now() < deadline, "no run is {state}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Copies a database whose processes have all ended (with its log, if one is left).
fn copy_db(from: &Path, to: &Path) {
    std::fs::copy(from, to).expect("copy the database");
    for ext in ["-wal", "-shm"] {
        let (mut f, mut t) = (from.as_os_str().to_owned(), to.as_os_str().to_owned());
        f.push(ext);
        t.push(ext);
        if Path::new(&f).exists() {
            std::fs::copy(&f, &t).expect("copy the database log");
        }
    }
}

fn log_of(db: &TestDb, name: &str) -> std::path::PathBuf {
    db.path.with_file_name(format!("{name}.log"))
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn the_period_is_checked_with_an_example_in_the_flag_and_its_environment_variable() {
    let db = TestDb::new();
    for (args, env) in [
        (vec!["serve", "--consolidate-every", "0"], None),
        (vec!["serve", "--consolidate-every", "6"], None),
        (vec!["serve", "--consolidate-every", "often"], None),
        (vec!["serve"], Some("0s")),
        (vec!["serve"], Some("1.5h")),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.arg("--db").arg(&db.path).args(&args);
        if let Some(v) = env {
            cmd.env("MNEMOGRAPH_CONSOLIDATE_EVERY", v);
        }
        let out = cmd.output().expect("run mnemograph");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains("--consolidate-every <DURATION>") && stderr.contains("e.g. 6h"),
            "{args:?} {env:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} {env:?}");
        assert!(!db.path.exists(), "a refused flag opened the database");
    }
}

/// Two servers on one database, each consolidating every second: the lease lets one run at a
/// time, the other's task completes as `skipped` naming the run (logged at info), scheduled
/// runs complete as started by `scheduler`, and no two runs' times overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_consolidating_every_second_take_turns_and_never_overlap() {
    let db = seeded(1_500, 300);
    let began = Instant::now();
    let mut a = Raw::spawn(&db.path, &["--consolidate-every", "1s"]);
    let mut b = Raw::spawn(&db.path, &["--consolidate-every", "1s"]);
    // Each with a session (as under a host); the schedule does not wait for one.
    a.start_session(Era::Initialize).await;
    b.start_session(Era::Initialize).await;
    let (completed, skipped) = loop {
        let completed: Vec<Value> = runs(&db.path)
            .into_iter()
            .filter(|r| r["started_by"] == "scheduler" && r["state"] == "completed")
            .collect();
        let tasks = cli(&db.path, &["tasks", "list", "--limit", "100"]);
        let skipped: Vec<String> = tasks
            .lines()
            .filter(|l| l.contains(" scheduler ") && l.contains("done · skipped: run run_"))
            .map(str::to_owned)
            .collect();
        if completed.len() >= 2 && !skipped.is_empty() {
            break (completed, skipped);
        }
        assert!(
            began.elapsed() < Duration::from_secs(40),
            "after 40 s: {} scheduled runs completed, {} skipped\n{tasks}\n{}\n{}",
            completed.len(),
            skipped.len(),
            a.log_tail(),
            b.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // The first run merged the planted duplicates.
    let first = completed.last().expect("a completed run");
    assert_eq!(first["counts"]["merged"], 300, "{first}");
    assert_eq!(
        first["steps"],
        json!([
            "merge",
            "summarise",
            "contradictions",
            "decay",
            "archive",
            "hygiene"
        ])
    );
    // A skipped task names a run that exists.
    let ids: HashSet<String> = runs(&db.path)
        .iter()
        .map(|r| r["run_id"].as_str().expect("id").to_owned())
        .collect();
    let named = skipped[0]
        .split("skipped: run ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("a run id");
    assert!(ids.contains(named), "{named} among {ids:?}");
    // Any client's `tasks` tool lists the scheduled runs beside its own, marked with their
    // owner and with the consolidation progress message; a client owned by `scheduler` sees them
    // as its own.
    for (owner, marked) in [("agent", true), ("scheduler", false)] {
        let c = connect(&db.path, true, true, "operator", &["--owner", owner]).await;
        let Ok(CallToolResponse::Complete(listed)) =
            c.call("tasks", json!({"limit": 100}), None).await
        else {
            panic!("tasks answers inline");
        };
        let listed = listed.structured_content.expect("structured");
        let tasks = listed["tasks"].as_array().expect("tasks");
        assert!(!tasks.is_empty(), "{listed}");
        assert!(tasks.iter().all(|t| t["tool"] == "consolidate"), "{listed}");
        assert!(
            tasks.iter().all(|t| (t["owner"] == "scheduler") == marked),
            "{owner}: {listed}"
        );
        assert!(
            tasks.iter().any(|t| t["status"] == "completed"
                && t["statusMessage"].as_str().is_some_and(
                    |m| m.starts_with("done · examined 1,800 / 1,800 memories · 300 merged")
                )),
            "{listed}"
        );
        c.stop().await;
    }
    // Both stop cleanly, having written nothing but JSON-RPC to stdout (nothing since the
    // session began).
    // Together, so that neither adopts a task the other leaves at shutdown.
    let (log_a, log_b) = (a.log_text(), b.log_text());
    let (rest_a, rest_b) = tokio::join!(a.close(), b.close());
    assert!(
        rest_a.is_empty() && rest_b.is_empty(),
        "{rest_a:?} {rest_b:?}"
    );
    let logs = format!("{log_a}\n{log_b}");
    assert!(
        logs.lines().any(|l| l.contains(" INFO ")
            && l.contains("scheduled task ended")
            && l.contains("skipped: run run_")),
        "the skip is logged at info:\n{logs}"
    );
    assert!(
        !logs
            .lines()
            .any(|l| l.contains("ERROR") || (l.contains("WARN") && l.contains("schedul"))),
        "{logs}"
    );
    // No two runs overlap (times in one format compare as text).
    let mut all = runs(&db.path);
    assert!(all.len() < 20, "every run is listed: {}", all.len());
    all.sort_by(|x, y| x["started_at"].as_str().cmp(&y["started_at"].as_str()));
    for r in &all {
        assert!(r["ended_at"].is_string(), "every run ended: {r}");
    }
    for pair in all.windows(2) {
        assert!(
            pair[0]["ended_at"].as_str() <= pair[1]["started_at"].as_str(),
            "runs overlap: {} and {}",
            pair[0],
            pair[1]
        );
    }
}

/// A run as a task holds the database: `mnemograph consolidate` exits 0 naming it. Cancelled
/// after some batches, the run leaves every merged memory folded into a live survivor and every
/// relation between live memories; its undo puts back exactly the export from before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_is_consistent_and_undoes_exactly_and_a_cli_run_meanwhile_names_it() {
    let db = seeded(MEMORIES, DUPLICATES);
    let before = export(&db.path);
    let c = connect_logged(
        &db.path,
        "curator",
        &["--inline-budget-ms", "0"],
        &log_of(&db, "server"),
    )
    .await;
    // A client cannot pass for the scheduler: the server's own keys are no arguments.
    match c
        .call("consolidate", json!({"_scheduled": true}), None)
        .await
    {
        Ok(CallToolResponse::Complete(r)) => {
            assert_eq!(r.is_error, Some(true), "{r:?}");
            assert!(
                format!("{r:?}").contains("unknown field `_scheduled`"),
                "{r:?}"
            );
        }
        other => panic!("refused as an argument error: {other:?}"),
    }
    let id = start_run(&c, json!({})).await;
    let run = running_run(&db.path);
    let run_id = run["run_id"].as_str().expect("run id").to_owned();
    assert_eq!(run["started_by"], "tool:client:curator", "{run}");
    // The command and cron's way in: skipped, naming the run, and a failure cron sees.
    let (ok, out, err) = mnemograph(&db.path, &["consolidate"]);
    assert!(!ok, "{out}");
    assert_eq!(
        out.trim(),
        format!("skipped: run {run_id} holds the database; nothing done")
    );
    assert!(err.contains("nothing done"), "{err}");
    let (ok, out, _) = mnemograph(&db.path, &["consolidate", "--json"]);
    assert!(!ok, "{out}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        (&report["state"], &report["held_by"]),
        (&json!("skipped"), &json!(run_id)),
        "{report}"
    );
    // Cancelled from another process once two batches are in.
    wait_for(&c, &id, "two batches", |p| count(p, "merged") >= 100).await;
    let said = cli(&db.path, &["tasks", "cancel", &id]);
    assert!(said.contains("cancellation requested"), "{said}");
    let (done, _) = poll_until_terminal(&c, &id, Duration::from_secs(60)).await;
    assert_eq!(
        done.task.task.status,
        TaskStatus::Cancelled,
        "{:?}",
        done.task.task.status_message
    );
    let run = runs(&db.path)
        .into_iter()
        .find(|r| r["run_id"] == run_id.as_str())
        .expect("the run");
    assert_eq!(run["state"], "cancelled", "{run}");
    let merged = run["counts"]["merged"].as_u64().expect("merged");
    assert!(
        (100..DUPLICATES as u64).contains(&merged),
        "stopped mid-way: {run}"
    );
    c.stop().await;

    // Consistent: every memory merged away is gone and named by its live survivor, the rest
    // are all there, every relation joins live memories, and the database checks out.
    let after = export(&db.path);
    let mut live = HashSet::new();
    let mut merged_from = Vec::new();
    for l in &after {
        let v: Value = serde_json::from_str(l).expect("JSON");
        if v["type"] == "memory" {
            live.insert(v["id"].as_str().expect("id").to_owned());
            for m in v["metadata"]["merged_from"]
                .as_array()
                .into_iter()
                .flatten()
            {
                merged_from.push(m.as_str().expect("id").to_owned());
            }
        }
    }
    assert_eq!(merged_from.len() as u64, merged);
    assert_eq!(live.len() as u64, (MEMORIES + DUPLICATES) as u64 - merged);
    for m in &merged_from {
        assert!(m.starts_with("m_dup") && !live.contains(m), "{m}");
    }
    for l in &after {
        let v: Value = serde_json::from_str(l).expect("JSON");
        if v["type"] == "relation" {
            for end in ["from", "to"] {
                assert!(live.contains(v[end].as_str().expect("end")), "{l}");
            }
        }
    }
    let (healthy, report, stderr) = mnemograph(&db.path, &["doctor"]);
    assert!(healthy, "{report}\n{stderr}");

    let undone = cli(&db.path, &["consolidate", "--undo", &run_id]);
    assert!(undone.starts_with(&format!("undid {run_id}:")), "{undone}");
    assert_eq!(
        export(&db.path),
        before,
        "the undo puts back what was there"
    );
}

/// `kill -9` of a server in the middle of a run: the next server adopts the task (same id) and
/// resumes the run from its checkpoint (same run id), which ends as an uninterrupted run on a
/// copy of the database ends; and it undoes as one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_server_is_killed_resumes_in_the_next_and_ends_like_an_uninterrupted_one() {
    let db = seeded(MEMORIES, DUPLICATES);
    let before = export(&db.path);
    let twin = TestDb::new();
    copy_db(&db.path, &twin.path);

    let c = connect_logged(
        &db.path,
        "curator",
        &["--inline-budget-ms", "0"],
        &log_of(&db, "first"),
    )
    .await;
    let id = start_run(&c, json!({})).await;
    let at_kill = wait_for(&c, &id, "two batches", |p| count(p, "merged") >= 100).await;
    assert!(crate::support::send_signal(c.pid, "KILL"));
    drop(c);
    // The next process on the database finds the server gone: the run is interrupted (and could
    // be undone at once) until a server adopts the task and resumes it.
    let run = run_in_state(&db.path, "interrupted");
    let run_id = run["run_id"].as_str().expect("run id").to_owned();
    assert!(count(&at_kill, "merged") < DUPLICATES as u64, "{at_kill}");

    let log = log_of(&db, "second");
    let c = connect_logged(&db.path, "curator", &[], &log).await;
    let (done, _) = poll_until_terminal(&c, &id, Duration::from_secs(180)).await;
    assert_eq!(
        done.task.task.status,
        TaskStatus::Completed,
        "{:?}\n{}",
        done.task.task.status_message,
        read_log(&log)
    );
    let result = serde_json::to_value(&done).expect("JSON");
    let report = &result["result"]["structuredContent"];
    assert_eq!(report["run_id"], run_id.as_str(), "{report}");
    assert_eq!(report["state"], "completed", "{report}");
    assert_eq!(report["counts"]["merged"], DUPLICATES, "{report}");
    assert!(
        read_log(&log).contains("resuming a task whose process stopped, from its last checkpoint"),
        "{}",
        read_log(&log)
    );
    c.stop().await;
    let all = runs(&db.path);
    assert_eq!(all.len(), 1, "one run, resumed under its id: {all:?}");
    assert_eq!(all[0]["state"], "completed");

    // The same run, uninterrupted, on the copy.
    let out = cli(&twin.path, &["consolidate", "--json"]);
    let whole: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(whole["counts"]["merged"], DUPLICATES, "{whole}");
    let (resumed, uninterrupted) = (
        comparable(&export(&db.path)),
        comparable(&export(&twin.path)),
    );
    assert_eq!(resumed.0.len(), MEMORIES);
    assert!(resumed.0 == uninterrupted.0, "the memories differ");
    assert_eq!(resumed.1, uninterrupted.1, "the relations differ");

    let undone = cli(&db.path, &["consolidate", "--undo", &run_id]);
    assert!(undone.starts_with(&format!("undid {run_id}:")), "{undone}");
    assert_eq!(export(&db.path), before, "undone as one run");
}

/// Recall keeps answering, each call well under a second, while a run goes on as a task in the
/// same server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_keeps_answering_while_a_run_goes_on() {
    let db = seeded(MEMORIES, DUPLICATES);
    let c = connect_logged(
        &db.path,
        "curator",
        &["--inline-budget-ms", "0"],
        &log_of(&db, "server"),
    )
    .await;
    let id = start_run(&c, json!({})).await;
    let mut during = Vec::new();
    let mut rng = 11u64;
    loop {
        let query = (0..3)
            .map(|_| WORDS[(splitmix(&mut rng) % WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ");
        let asked = Instant::now();
        let answer = c
            .call("recall", json!({"query": query, "limit": 10}), None)
            .await
            .expect("recall");
        let took = asked.elapsed();
        let CallToolResponse::Complete(answer) = answer else {
            panic!("recall answers inline");
        };
        let hits = answer.structured_content.expect("structured")["hits"]
            .as_array()
            .map_or(0, Vec::len);
        assert!(hits > 0, "{query}: no hits");
        let t = c.get(&id).await.expect("tasks/get");
        if t.task.task.status != TaskStatus::Working {
            assert_eq!(
                t.task.task.status,
                TaskStatus::Completed,
                "{:?}",
                t.task.task.status_message
            );
            break;
        }
        during.push(took);
        // An agent's pace, not a load test.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        during.len() >= 10,
        "the run ended after {} recalls: too short to tell",
        during.len()
    );
    during.sort();
    let (p50, max) = (during[during.len() / 2], during[during.len() - 1]);
    assert!(
        max < Duration::from_secs(1),
        "a recall took {max:?} (median {p50:?} of {})",
        during.len()
    );
    c.stop().await;
}
