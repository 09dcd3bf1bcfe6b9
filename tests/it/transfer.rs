//! Bulk import and export over stdio against the real binary: an import that becomes a task
//! with item progress and goes on under the same task id after its server is killed; exports in
//! every format; bad sources and bad records answered clearly.

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResponse, TaskStatus};
use serde_json::{Value, json};

use crate::support::{Era, TestDb, Wire};
use crate::tasks::{connect, poll_until_terminal};

/// Memories of the import that is killed half-way (each but the first with a relation).
const N: usize = 60_000;

fn write_corpus(path: &Path, n: usize) {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).expect("create the corpus"));
    for i in 0..n {
        writeln!(
            w,
            "{}",
            json!({"type": "memory", "id": format!("m_it{i}"), "content": format!("imported memory {i} about {}", ["tea", "rust", "kyoto"][i % 3]), "created_at": "2024-03-01T12:00:00Z"})
        )
        .expect("write the corpus");
        if i > 0 {
            writeln!(
                w,
                "{}",
                json!({"type": "relation", "from": format!("m_it{i}"), "to": format!("m_it{}", i - 1), "kind": "follows"})
            )
            .expect("write the corpus");
        }
    }
}

fn progress_done(t: &rmcp::model::GetTaskResult) -> u64 {
    t.meta
        .as_ref()
        .and_then(|m| m.0.get("mnemograph/progress"))
        .and_then(|p| p["done"].as_u64())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_import_task_resumes_under_its_id_and_completes() {
    let db = TestDb::new();
    let source = db.path.with_file_name("corpus.jsonl");
    write_corpus(&source, N);
    let c = connect(&db.path, true, true, "importer", &[]).await;
    let args = json!({"source": {"path": source.display().to_string()}});
    let CallToolResponse::Task(created) = c.call("import", args, None).await.unwrap() else {
        panic!("a 60,000-memory import should become a task");
    };
    let id = created.task.task_id;
    // Wait for a few committed batches, then kill the server.
    let deadline = Instant::now() + Duration::from_secs(60);
    let message = loop {
        let t = c.get(&id).await.expect("tasks/get");
        assert_eq!(t.task.task.status, TaskStatus::Working, "finished too soon");
        if progress_done(&t) >= 6_000 {
            break t.task.task.status_message.unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(message.starts_with("imported "), "{message}");
    assert!(
        message.contains(&format!(" / {} items · ", "119,999")),
        "{message}"
    );
    drop(c);

    let c = connect(&db.path, true, true, "importer", &[]).await;
    let (done, _) = poll_until_terminal(&c, &id, Duration::from_secs(120)).await;
    assert_eq!(
        done.task.task.status,
        TaskStatus::Completed,
        "{:?}",
        done.task.task.status_message
    );
    let result = serde_json::to_value(&done).unwrap();
    let report = &result["result"]["structuredContent"];
    assert!(report["resumed_after"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    let added = report["memories_added"].as_u64().unwrap();
    let existing = report["memories_existing"].as_u64().unwrap();
    assert_eq!(added + existing, N as u64, "{report}");
    let stats = c.call("stats", json!({}), None).await.unwrap();
    let CallToolResponse::Complete(stats) = stats else {
        panic!("stats is inline")
    };
    let stats = stats.structured_content.unwrap();
    assert_eq!(stats["memories"], N, "{stats}");
    assert_eq!(stats["relations"], N - 1, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_imports_answer_inline_and_exports_round_trip() {
    for (wire, era) in [Wire::Stdio, Wire::Http]
        .into_iter()
        .flat_map(|w| Era::ALL.map(|e| (w, e)))
    {
        let db = TestDb::new();
        let s = db.serve_over(wire, era).await;
        let mcp = concat!(
            "{\"type\":\"entity\",\"name\":\"Ada\",\"entityType\":\"person\",\"observations\":[\"Wrote the first program\"]}\n",
            "{\"type\":\"entity\",\"name\":\"Engine\",\"entityType\":\"machine\",\"observations\":[\"Designed by Babbage\"]}\n",
            "{\"type\":\"relation\",\"from\":\"Ada\",\"to\":\"Engine\",\"relationType\":\"programmed\"}\n",
            "{\"type\":\"relation\",\"from\":\"Ada\",\"to\":\"Nobody\",\"relationType\":\"knows\"}\n",
            "not json\n",
        );
        let dry = s
            .ok("import", json!({"source": {"text": mcp}, "dry_run": true}))
            .await;
        assert_eq!(dry["memories_added"], 2, "{dry}");
        assert_eq!(s.ok("stats", json!({})).await["memories"], 0);
        let out = s.ok("import", json!({"source": {"text": mcp}})).await;
        assert_eq!(out["formats"], json!(["mcp-memory"]), "{out}");
        assert_eq!(
            (
                out["memories_added"].clone(),
                out["relations_added"].clone()
            ),
            (json!(2), json!(1)),
            "{out}"
        );
        assert_eq!(out["errors"], 2, "{out}");
        let errors: Vec<String> = serde_json::from_value(out["first_errors"].clone()).unwrap();
        assert!(
            errors[0].starts_with("line 4: ") && errors[0].contains("Nobody"),
            "{errors:?}"
        );
        assert!(errors[1].starts_with("line 5: "), "{errors:?}");
        let again = s.ok("import", json!({"source": {"text": mcp}})).await;
        assert_eq!(
            (
                again["memories_added"].clone(),
                again["relations_added"].clone()
            ),
            (json!(0), json!(0)),
            "{again}"
        );

        let jsonl = s.ok("export", json!({})).await;
        assert_eq!(
            (jsonl["memories"].clone(), jsonl["relations"].clone()),
            (json!(2), json!(1)),
            "{jsonl}"
        );
        let data = jsonl["data"].as_str().unwrap().to_owned();
        let graphml = s
            .ok("export", json!({"format": "graphml", "path": db.path.with_file_name("g.graphml").display().to_string()}))
            .await;
        assert_eq!(graphml["memories"], 2, "{graphml}");
        let text = std::fs::read_to_string(db.path.with_file_name("g.graphml")).unwrap();
        assert!(text.contains("<edge ") && text.contains("programmed"));
        let dot = s
            .ok(
                "export",
                json!({"format": "dot", "subgraph": {"names": ["Ada"], "depth": 1}}),
            )
            .await;
        assert!(dot["data"].as_str().unwrap().contains("-> "), "{dot}");
        s.stop().await;

        // Into an empty database: the same memories and relations.
        let other = TestDb::new();
        let s = other.serve_over(wire, era).await;
        let back = s.ok("import", json!({"source": {"text": data}})).await;
        assert_eq!(
            (
                back["memories_added"].clone(),
                back["relations_added"].clone()
            ),
            (json!(2), json!(1)),
            "{back}"
        );
        let copy = s.ok("export", json!({})).await;
        let body = |v: &Value| {
            v["data"]
                .as_str()
                .unwrap()
                .lines()
                .skip(1)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(body(&copy), body(&jsonl));
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sources_get_clear_errors_and_change_nothing() {
    let db = TestDb::new();
    let s = db.serve(Era::Discover).await;
    let cases = [
        (json!({"source": {}}), "exactly one of"),
        (
            json!({"source": {"path": "a", "text": "b"}}),
            "exactly one of",
        ),
        (
            json!({"source": {"path": "/etc/hostname"}}),
            "outside the allowed folders",
        ),
        (json!({"source": {"path": "../x.jsonl"}}), "`..`"),
        (
            json!({"source": {"path": "no-such-file.jsonl"}}),
            "cannot be opened",
        ),
        (json!({"source": {"text": ""}}), "empty"),
        (
            json!({"source": {"text": "\u{0}\u{1}"}}),
            "cannot tell the format",
        ),
        (
            json!({"source": {"text": "x"}, "format": "csv"}),
            "not a format",
        ),
        (json!({"source": {"text": "x"}, "colour": 1}), "colour"),
    ];
    for (args, expected) in cases {
        let err = s.call("import", args.clone()).await.expect_err("must fail");
        assert!(
            err.message().contains(expected),
            "{args}: {}",
            err.message()
        );
    }
    let exports = [
        (json!({"format": "pdf"}), "not an export format"),
        (json!({"path": "/etc/out.jsonl"}), "outside"),
        (json!({"subgraph": {"depth": 1}}), "no seeds"),
    ];
    for (args, expected) in exports {
        let err = s.call("export", args.clone()).await.expect_err("must fail");
        assert!(
            err.message().contains(expected),
            "{args}: {}",
            err.message()
        );
    }
    let big = "x".repeat(70_000);
    let out = s
        .ok("import", json!({"source": {"text": format!("{{\"type\":\"memory\",\"content\":\"{big}\"}}\n{{\"type\":\"memory\",\"content\":\"fits\"}}\n")}}))
        .await;
    assert_eq!(
        (out["memories_added"].clone(), out["errors"].clone()),
        (json!(1), json!(1)),
        "{out}"
    );
    assert!(
        out["first_errors"][0]
            .as_str()
            .unwrap()
            .contains("line 1: "),
        "{out}"
    );
    assert_eq!(s.ok("stats", json!({})).await["memories"], 1);
    s.stop().await;
}
