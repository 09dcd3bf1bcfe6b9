//! Consolidation in the background, on real processes and files: servers that consolidate on a
//! schedule (`--consolidate-every`) take turns on one database and their runs never overlap.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

use crate::support::{BIN, Era, Raw, TestDb};
use crate::tasks::connect;

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
        json!(["merge", "decay", "archive", "hygiene"])
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
    // A client whose owner is `scheduler` sees the scheduled tasks with the consolidation
    // progress message.
    {
        let c = connect(&db.path, true, true, "operator", &["--owner", "scheduler"]).await;
        let Ok(CallToolResponse::Complete(listed)) =
            c.call("tasks", json!({"limit": 100}), None).await
        else {
            panic!("tasks answers inline");
        };
        let listed = listed.structured_content.expect("structured");
        let tasks = listed["tasks"].as_array().expect("tasks");
        assert!(tasks.iter().all(|t| t["tool"] == "consolidate"), "{listed}");
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
