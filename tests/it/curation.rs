//! Consolidation over stdio against the real binary, in both protocol eras: a dry run that
//! writes nothing, a run that merges and archives, `get` of a merged id, the list of runs, undo
//! (and undo twice refused), bad arguments named; and, for a client with the tasks extension, a
//! run that becomes a task whose status reads as consolidation progress.

use std::time::Duration;

use rmcp::model::{CallToolResponse, TaskStatus};
use serde_json::{Value, json};

use crate::support::{CallError, Era, TestDb};
use crate::tasks::{connect, poll_until_terminal};

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
