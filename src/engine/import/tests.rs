//! Import and export on real files: round trip, idempotence, resumption, bad input, dry runs.

use std::sync::Mutex;

use serde_json::Value;

use crate::config::Config;
use crate::engine::control::{Control, Progressing, WorkProgress};
use crate::engine::export::{ExportRequest, ExportTarget, OutFormat};
use crate::engine::import::{ImportRequest, Source};
use crate::engine::{Engine, Link, RememberItem};
use crate::error::Error;
use crate::model::{
    MemoryPatch, MemoryRef, NamespaceScope, RecallMode, RecallQuery, TaskRow, TaskState,
};

fn engine_in(dir: &std::path::Path, name: &str) -> Engine {
    let mut cfg = Config::for_db(dir.join(name));
    cfg.import_roots = vec![dir.to_path_buf()];
    Engine::open(cfg).expect("open")
}

fn request(source: Source) -> ImportRequest {
    ImportRequest {
        source,
        format: None,
        namespace: None,
        dry_run: false,
        actor: "test".into(),
        max_records: None,
        access: crate::engine::Access::All,
        job: None,
    }
}

fn export_jsonl(e: &Engine, vectors: bool) -> String {
    let req = ExportRequest {
        namespaces: None,
        format: OutFormat::Jsonl,
        subgraph: None,
        vectors,
        history: vectors,
    };
    let out = e
        .export_to(
            &req,
            &ExportTarget::Inline(64 << 20),
            &Progressing::default(),
        )
        .unwrap();
    out.text.unwrap()
}

/// Lines after the header (which carries the export time).
fn body(export: &str) -> Vec<String> {
    export.lines().skip(1).map(str::to_owned).collect()
}

fn seed(e: &Engine) {
    let a = RememberItem {
        content: "Ada Lovelace wrote the first program".into(),
        name: Some("Ada".into()),
        kind: Some("person".into()),
        tags: vec!["history".into(), "computing".into()],
        importance: Some(0.9),
        metadata: Some(serde_json::json!({"source": "book"})),
        valid_from: Some(1_000),
        ..RememberItem::default()
    };
    let b = RememberItem {
        content: "The Analytical Engine was designed by Babbage".into(),
        name: Some("Engine".into()),
        links: vec![Link {
            to: "Ada".into(),
            kind: "inspired".into(),
            weight: Some(0.7),
        }],
        ..RememberItem::default()
    };
    let c = RememberItem {
        content: "Notes kept elsewhere".into(),
        namespace: Some("work".into()),
        ..RememberItem::default()
    };
    e.remember(&[a]).unwrap();
    for r in e.remember(&[b, c]).unwrap() {
        r.unwrap();
    }
    e.update(
        &MemoryRef::Name {
            namespace: "default".into(),
            name: "Ada".into(),
        },
        &MemoryPatch {
            importance: Some(0.8),
            ..MemoryPatch::default()
        },
        "test",
    )
    .unwrap();
    let gone = e.remember(&[RememberItem {
        content: "forgotten fact".into(),
        ..RememberItem::default()
    }]);
    let gone = gone.unwrap().remove(0).unwrap().id;
    e.forget(&[MemoryRef::Id(gone)], &[], "test").unwrap();
}

#[test]
fn export_then_import_gives_the_same_memories_relations_times_and_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let a = engine_in(dir.path(), "a.db");
    seed(&a);
    a.sync_vectors(None).unwrap();
    let exported = export_jsonl(&a, true);
    assert_eq!(
        body(&exported).len(),
        4,
        "3 live memories and 1 relation:\n{exported}"
    );
    assert!(exported.contains("\"vector\""));
    assert!(
        exported.contains("\"history\""),
        "the update of Ada is kept"
    );
    std::fs::write(dir.path().join("a.jsonl"), &exported).unwrap();

    let b = engine_in(dir.path(), "b.db");
    let report = b
        .import(
            &request(Source::Path("a.jsonl".into())),
            &Progressing::default(),
        )
        .unwrap();
    assert_eq!(report.formats, vec!["mnemograph"]);
    assert_eq!((report.memories_added, report.relations_added), (3, 1));
    assert_eq!(report.vectors_added, 3, "vectors carried by the file");
    assert_eq!(report.errors, 0, "{:?}", report.first_errors);
    assert_eq!(body(&export_jsonl(&b, true)), body(&exported));
}

#[test]
fn importing_twice_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = engine_in(dir.path(), "a.db");
    seed(&a);
    let exported = export_jsonl(&a, false);
    let b = engine_in(dir.path(), "b.db");
    let mut req = request(Source::Inline(exported.clone()));
    req.namespace = Some("copy".into());
    let first = b.import(&req, &Progressing::default()).unwrap();
    assert_eq!((first.memories_added, first.relations_added), (3, 1));
    let before = export_jsonl(&b, false);
    let second = b.import(&req, &Progressing::default()).unwrap();
    assert_eq!(second.memories_added, 0);
    assert_eq!(second.memories_existing, 3);
    assert_eq!((second.relations_added, second.relations_existing), (0, 1));
    assert_eq!(body(&export_jsonl(&b, false)), body(&before));
    // Into a namespace of the same database: ids are taken, so new ones are made, once.
    let again = a.import(&req, &Progressing::default()).unwrap();
    assert_eq!((again.memories_added, again.relations_added), (3, 1));
    let once_more = a.import(&req, &Progressing::default()).unwrap();
    assert_eq!(
        (once_more.memories_added, once_more.relations_added),
        (0, 0)
    );
}

/// A control that stops the work after its first checkpoint, as a killed process would.
struct Killer {
    task: String,
    resume: Option<Value>,
    checkpoints: Mutex<u32>,
    stop_after: u32,
}

impl Control for Killer {
    fn report(&self, _p: &WorkProgress) {}
    fn is_cancelled(&self) -> bool {
        *self.checkpoints.lock().unwrap() >= self.stop_after
    }
    fn task_id(&self) -> Option<String> {
        Some(self.task.clone())
    }
    fn resume_from(&self) -> Option<Value> {
        self.resume.clone()
    }
    fn checkpointed(&self, _c: &Value) {
        *self.checkpoints.lock().unwrap() += 1;
    }
}

fn jsonl_corpus(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!(
            "{{\"type\":\"memory\",\"id\":\"m_src{i}\",\"content\":\"memory number {i} about topic {}\",\"created_at\":\"2024-01-01T00:00:{:02}Z\"}}\n",
            i % 17,
            i % 60
        ));
        if i > 0 {
            s.push_str(&format!(
                "{{\"type\":\"relation\",\"from\":\"m_src{i}\",\"to\":\"m_src{}\",\"kind\":\"follows\",\"created_at\":\"2024-02-01T00:00:00Z\"}}\n",
                i - 1
            ));
        }
    }
    s
}

#[test]
fn a_stopped_import_resumes_from_its_checkpoint_and_ends_like_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.jsonl"), jsonl_corpus(3_000)).unwrap();
    let req = request(Source::Path("big.jsonl".into()));

    let whole = engine_in(dir.path(), "whole.db");
    let full = whole.import(&req, &Progressing::default()).unwrap();
    assert_eq!((full.memories_added, full.relations_added), (3_000, 2_999));

    let e = engine_in(dir.path(), "resumed.db");
    let row = TaskRow {
        id: "t1".into(),
        owner: "o".into(),
        tool: "import".into(),
        arguments: Value::Null,
        status: TaskState::Working,
        status_message: None,
        progress: Value::Null,
        result: None,
        error: None,
        created_at: 0,
        updated_at: 0,
        ttl_ms: None,
        poll_interval_ms: None,
        checkpoint: None,
        boot_id: "b".into(),
        heartbeat_at: 0,
        cancel_requested: false,
        input_requests: None,
        input_responses: None,
        grant: None,
    };
    e.task_insert(&row, None).unwrap();
    let first = Killer {
        task: "t1".into(),
        resume: None,
        checkpoints: Mutex::new(0),
        stop_after: 1,
    };
    assert!(matches!(e.import(&req, &first), Err(Error::Cancelled)));
    let checkpoint = e.task_get("t1").unwrap().unwrap().checkpoint.unwrap();
    assert_eq!(checkpoint["items"], 2_000, "{checkpoint}");
    let second = Killer {
        task: "t1".into(),
        resume: Some(checkpoint),
        checkpoints: Mutex::new(0),
        stop_after: u32::MAX,
    };
    // A source that changed meanwhile is read again from the start.
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, jsonl_corpus(10)).unwrap();
    let changed = Killer {
        task: "t1".into(),
        resume: second.resume.clone(),
        checkpoints: Mutex::new(0),
        stop_after: u32::MAX,
    };
    let fresh = e
        .import(&request(Source::Path("other.jsonl".into())), &changed)
        .unwrap();
    assert_eq!(fresh.resumed_after, 0);
    assert_eq!(fresh.memories_existing, 10, "{fresh:?}");
    assert!(fresh.warnings[0].contains("changed"), "{fresh:?}");
    let report = e.import(&req, &second).unwrap();
    assert_eq!(report.resumed_after, 2_000);
    assert_eq!(report.memories_added, full.memories_added);
    assert_eq!(report.relations_added, full.relations_added);
    assert_eq!(report.records, full.records);
    // Relation ids are made fresh by each database, and relations that do not say when they
    // were last used count from when they entered it; everything else must match.
    let strip = |export: String| -> Vec<String> {
        body(&export)
            .into_iter()
            .map(|l| {
                let mut v: Value = serde_json::from_str(&l).unwrap();
                if v["type"] == "relation" {
                    v.as_object_mut().unwrap().remove("id");
                    v.as_object_mut().unwrap().remove("reinforced_at");
                }
                v.to_string()
            })
            .collect()
    };
    let (resumed, uninterrupted) = (
        strip(export_jsonl(&e, true)),
        strip(export_jsonl(&whole, true)),
    );
    assert_eq!(resumed.len(), uninterrupted.len());
    assert!(resumed == uninterrupted, "the resumed database differs");
}

#[test]
fn bad_records_are_reported_with_lines_and_the_rest_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    let mut text = String::new();
    for i in 0..30 {
        if i % 3 == 1 {
            text.push_str("{\"type\":\"memory\",\"content\":\"\"}\n");
        } else if i % 3 == 2 {
            text.push_str("{broken\n");
        } else {
            text.push_str(&format!(
                "{{\"type\":\"memory\",\"content\":\"good {i}\"}}\n"
            ));
        }
    }
    text.push_str(&format!(
        "{{\"type\":\"memory\",\"content\":\"{}\"}}\n",
        "x".repeat(70_000)
    ));
    text.push_str(
        "{\"type\":\"relation\",\"from\":\"m_nowhere\",\"to\":\"m_gone\",\"kind\":\"k\"}\n",
    );
    let report = e
        .import(&request(Source::Inline(text)), &Progressing::default())
        .unwrap();
    assert_eq!(report.memories_added, 10);
    assert_eq!(report.errors, 22);
    assert_eq!(report.records, 32);
    assert_eq!(report.first_errors.len(), 20);
    assert!(
        report.first_errors[0].starts_with("line 2: "),
        "{:?}",
        report.first_errors
    );
    assert!(
        report.first_errors[1].starts_with("line 3: "),
        "{:?}",
        report.first_errors
    );
    assert!(
        report.first_errors[0].contains("content"),
        "{:?}",
        report.first_errors
    );
    assert_eq!(e.stats().unwrap().memories, 10);
}

#[test]
fn unusable_sources_are_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    let msg = |src: Source| {
        let req = ImportRequest {
            format: None,
            ..request(src)
        };
        e.import(&req, &Progressing::default())
            .unwrap_err()
            .to_string()
    };
    assert!(msg(Source::Inline(String::new())).contains("empty"));
    assert!(msg(Source::Inline("\u{0}\u{1}{[".into())).contains("format"));
    assert!(msg(Source::Path("../etc/passwd".into())).contains("`..`"));
    assert!(msg(Source::Path("/etc/hostname".into())).contains("outside"));
    assert!(msg(Source::Path("missing.jsonl".into())).contains("cannot be opened"));
    let mut req = request(Source::Inline(
        "{\"type\":\"memory\",\"content\":\"a\"}".into(),
    ));
    req.namespace = Some(" bad namespace ".into());
    assert!(e.import(&req, &Progressing::default()).is_err());
    assert_eq!(e.stats().unwrap().memories, 0);
}

#[test]
fn a_dry_run_counts_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    let mut req = request(Source::Inline(jsonl_corpus(50)));
    req.dry_run = true;
    let report = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!((report.memories_added, report.relations_added), (50, 49));
    assert!(report.dry_run);
    assert_eq!(e.stats().unwrap().memories, 0);
    req.dry_run = false;
    let real = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!((real.memories_added, real.relations_added), (50, 49));
    req.dry_run = true;
    let again = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!((again.memories_added, again.memories_existing), (0, 50));
}

#[test]
fn max_records_truncates_and_a_repeat_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    let mut req = request(Source::Inline(jsonl_corpus(2_500)));
    req.max_records = Some(1_000);
    let first = e.import(&req, &Progressing::default()).unwrap();
    assert!(first.truncated);
    assert_eq!(
        first.records, 2_000,
        "stops after the batch that reached the limit"
    );
    let second = e.import(&req, &Progressing::default()).unwrap();
    assert!(second.truncated);
    assert_eq!(second.memories_existing, first.memories_added);
    let third = e.import(&req, &Progressing::default()).unwrap();
    assert!(!third.truncated);
    assert_eq!(e.stats().unwrap().memories, 2_500);
    assert_eq!(e.stats().unwrap().relations, 2_499);
}

#[test]
fn graphml_and_dot_exports_are_well_formed_and_exports_never_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    seed(&e);
    for (format, path) in [(OutFormat::Graphml, "g.graphml"), (OutFormat::Dot, "g.dot")] {
        let req = ExportRequest {
            namespaces: Some(vec!["default".into()]),
            format,
            subgraph: None,
            vectors: false,
            history: false,
        };
        let out = e
            .export_to(
                &req,
                &ExportTarget::Path(path.into()),
                &Progressing::default(),
            )
            .unwrap();
        assert_eq!((out.counts.memories, out.counts.relations), (2, 1));
        let text = std::fs::read_to_string(dir.path().join(path)).unwrap();
        assert_eq!(out.bytes, text.len() as u64);
        let again = e.export_to(
            &req,
            &ExportTarget::Path(path.into()),
            &Progressing::default(),
        );
        assert!(again.unwrap_err().to_string().contains("exists"));
        if format == OutFormat::Graphml {
            assert_eq!(text.matches("<node ").count(), 2);
            assert_eq!(text.matches("<edge ").count(), 1);
            assert!(text.trim_end().ends_with("</graphml>"));
        } else {
            assert!(text.starts_with("digraph"));
            assert_eq!(text.matches(" -> ").count(), 1);
            if let Ok(out) = std::process::Command::new("dot")
                .arg("-Tsvg")
                .arg(dir.path().join(path))
                .output()
            {
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let small = e.export_to(
        &ExportRequest {
            namespaces: None,
            format: OutFormat::Jsonl,
            subgraph: None,
            vectors: false,
            history: false,
        },
        &ExportTarget::Inline(100),
        &Progressing::default(),
    );
    assert!(small.unwrap_err().to_string().contains("give `path`"));
}

#[test]
fn mcp_memory_entities_merge_observations_and_folders_of_notes_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    let mcp = concat!(
        "{\"type\":\"entity\",\"name\":\"John_Smith\",\"entityType\":\"person\",\"observations\":[\"Speaks Spanish\"]}\n",
        "{\"type\":\"entity\",\"name\":\"Anthropic\",\"entityType\":\"organization\",\"observations\":[\"AI company\"]}\n",
        "{\"type\":\"relation\",\"from\":\"John_Smith\",\"to\":\"Anthropic\",\"relationType\":\"works_at\"}\n",
    );
    let first = e
        .import(
            &request(Source::Inline(mcp.into())),
            &Progressing::default(),
        )
        .unwrap();
    assert_eq!(first.formats, vec!["mcp-memory"]);
    assert_eq!((first.memories_added, first.relations_added), (2, 1));
    let more = mcp.replace(
        "[\"Speaks Spanish\"]",
        "[\"Speaks Spanish\",\"Lives in Madrid\"]",
    );
    let second = e
        .import(&request(Source::Inline(more)), &Progressing::default())
        .unwrap();
    assert_eq!(
        (
            second.memories_added,
            second.memories_merged,
            second.memories_existing
        ),
        (0, 1, 1)
    );
    assert_eq!(second.relations_existing, 1);
    let john = e
        .get(
            &[MemoryRef::Name {
                namespace: "default".into(),
                name: "John_Smith".into(),
            }],
            true,
        )
        .unwrap();
    assert_eq!(john[0].memory.content, "Speaks Spanish\nLives in Madrid");
    assert_eq!(john[0].memory.kind, "person");

    std::fs::create_dir_all(dir.path().join("notes/sub")).unwrap();
    std::fs::write(
        dir.path().join("notes/a.md"),
        "# Deploys\n\nWe deploy on Tuesdays.\n\n## Rollback\n\nUse the previous tag.\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes/sub/b.txt"), "Plain text note.\n").unwrap();
    let mut req = request(Source::Path("notes".into()));
    req.namespace = Some("notes".into());
    let notes = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!(notes.files, 2);
    assert_eq!(notes.formats, vec!["markdown"]);
    assert_eq!(notes.errors, 0, "{:?}", notes.first_errors);
    assert!(notes.memories_added >= 4, "{notes:?}");
    assert_eq!(
        notes.relations_added,
        notes.memories_added - 2,
        "chunks part_of documents"
    );
    let again = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!((again.memories_added, again.relations_added), (0, 0));
}

#[test]
fn the_locomo_sample_becomes_linked_episodes_once() {
    let text = std::fs::read_to_string(crate::formats::locomo::test_data::sample()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sample.json"), text).unwrap();
    let e = engine_in(dir.path(), "m.db");
    let mut req = request(Source::Path("sample.json".into()));
    req.namespace = Some("chats".into());
    let report = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!(report.formats, vec!["locomo"]);
    assert_eq!(report.errors, 0, "{:?}", report.first_errors);
    // 15 turns in 3 sessions; turn ids repeat across the two conversations, the source ids
    // (sample and turn) keep them apart.
    assert_eq!(
        (report.memories_added, report.memories_existing),
        (15 + 3, 0),
        "{report:?}"
    );
    assert_eq!(report.relations_added, 15 + 15 - 3);
    let again = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!((again.memories_added, again.relations_added), (0, 0));
    let kitten = e
        .recall(&RecallQuery {
            text: "kitten name".into(),
            namespaces: NamespaceScope::Only(vec!["chats".into()]),
            kinds: vec!["episode".into()],
            mode: RecallMode::Text,
            limit: 1,
            ..RecallQuery::default()
        })
        .unwrap();
    let hit = &kitten.hits[0].memory;
    assert_eq!(
        hit.content,
        "Ben: I adopted a kitten last Friday. Her name is Pepper."
    );
    assert_eq!(
        hit.metadata,
        serde_json::json!({"sample_id": "sample-1", "session": 2, "dia_id": "D2:3", "speaker": "Ben"})
    );
}

#[test]
fn locomo_transcripts_become_linked_episodes_once() {
    let Some(path) = crate::formats::locomo::test_data::locomo10(
        "engine::import::locomo_transcripts_become_linked_episodes_once",
    ) else {
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("locomo.json"), text).unwrap();
    let e = engine_in(dir.path(), "m.db");
    let req = request(Source::Path("locomo.json".into()));
    let report = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!(report.formats, vec!["locomo"]);
    // Every turn is a memory of its own, also the two that repeat an earlier turn's words
    // ("John: Take care, bye!" in conv-47, "Jolene: See you!" in conv-48).
    assert_eq!(report.memories_added, 5_882 + 272, "{report:?}");
    assert_eq!(report.memories_existing, 0, "{report:?}");
    assert_eq!(report.errors, 0, "{:?}", report.first_errors);
    // Each turn is part of its session, and every turn but a session's first follows another.
    assert_eq!(report.relations_added, 5_882 + 5_882 - 272);
    let again = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!((again.memories_added, again.relations_added), (0, 0));
}

/// Deletes a file the first time progress is reported, as another program might mid-import.
struct Vanish(std::path::PathBuf);

impl Control for Vanish {
    fn report(&self, _p: &WorkProgress) {
        let _ = std::fs::remove_file(&self.0);
    }
    fn is_cancelled(&self) -> bool {
        false
    }
}

#[test]
fn a_file_that_vanishes_mid_import_is_reported_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    std::fs::write(dir.path().join("in/a.jsonl"), jsonl_corpus(1_500)).unwrap();
    std::fs::write(
        dir.path().join("in/b.md"),
        "# Later\n\nThis file goes away.\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("in/c.md"), "# Kept\n\nThis one stays.\n").unwrap();
    let e = engine_in(dir.path(), "m.db");
    let report = e
        .import(
            &request(Source::Path("in".into())),
            &Vanish(dir.path().join("in/b.md")),
        )
        .unwrap();
    assert_eq!(report.files, 3);
    assert_eq!(report.errors, 1, "{:?}", report.first_errors);
    assert!(
        report.first_errors[0].starts_with("b.md: ")
            && report.first_errors[0].contains("could not be opened"),
        "{:?}",
        report.first_errors
    );
    assert_eq!(
        report.memories_added,
        1_500 + 2,
        "a.jsonl whole, c.md's document and chunk"
    );
}

#[test]
fn imports_identify_records_as_remember_does() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    e.remember(&[RememberItem {
        content: "ok".into(),
        ..RememberItem::default()
    }])
    .unwrap()
    .remove(0)
    .unwrap();
    let text = concat!(
        "{\"type\":\"memory\",\"content\":\"ok\"}\n",
        "{\"type\":\"memory\",\"content\":\"ok\",\"kind\":\"episode\"}\n",
        "{\"type\":\"memory\",\"content\":\"ok\",\"valid_from\":\"2024-01-01T00:00:00Z\"}\n",
        "{\"type\":\"memory\",\"content\":\"ok\",\"name\":\"turn-1\"}\n",
        "{\"type\":\"memory\",\"content\":\"ok\",\"name\":\"turn-2\"}\n",
        "{\"type\":\"memory\",\"content\":\"ok\",\"kind\":\"episode\"}\n",
    );
    let mut req = request(Source::Inline(text.into()));
    req.dry_run = true;
    let dry = e.import(&req, &Progressing::default()).unwrap();
    req.dry_run = false;
    let real = e.import(&req, &Progressing::default()).unwrap();
    for r in [&dry, &real] {
        assert_eq!(r.errors, 0, "{:?}", r.first_errors);
        assert_eq!((r.memories_added, r.memories_existing), (4, 2), "{r:?}");
    }
    assert_eq!(e.stats().unwrap().memories, 5);
    let again = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!((again.memories_added, again.memories_existing), (0, 6));

    // Records with their own source ids are distinct even when their content is the same.
    let mg = r#"{"format_version": "2.0", "memories": [
        {"id": "a", "type": "chat", "content": "lol"},
        {"id": "b", "type": "chat", "content": "lol"}], "relationships": []}"#;
    let mut req = request(Source::Inline(mg.into()));
    req.namespace = Some("mg".into());
    let first = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!(first.formats, vec!["memorygraph"]);
    assert_eq!((first.memories_added, first.memories_existing), (2, 0));
    let second = e.import(&req, &Progressing::default()).unwrap();
    assert_eq!((second.memories_added, second.memories_existing), (0, 2));
}

/// Remembers the last progress reported.
#[derive(Default)]
struct Last(Mutex<WorkProgress>);

impl Control for Last {
    fn report(&self, p: &WorkProgress) {
        *self.0.lock().unwrap() = *p;
    }
    fn is_cancelled(&self) -> bool {
        false
    }
}

#[test]
fn files_with_a_byte_order_mark_and_crlf_line_ends_import_whole() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    let a = engine_in(dir.path(), "a.db");
    seed(&a);
    let exported = export_jsonl(&a, false).replace('\n', "\r\n");
    std::fs::write(dir.path().join("bom.jsonl"), format!("\u{feff}{exported}")).unwrap();
    let mcp = "\u{feff}{\"type\":\"entity\",\"name\":\"Ada\",\"entityType\":\"person\",\"observations\":[\"wrote\"]}\r\n";
    std::fs::write(dir.path().join("mcp.jsonl"), mcp).unwrap();
    std::fs::write(
        dir.path().join("note.md"),
        "\u{feff}# Title\r\n\r\nBody text.\r\n",
    )
    .unwrap();
    for (file, added, items) in [("bom.jsonl", 3, 4), ("mcp.jsonl", 1, 1), ("note.md", 2, 0)] {
        let last = Last::default();
        let mut req = request(Source::Path(file.into()));
        req.namespace = Some(file.replace('.', "-"));
        let r = e.import(&req, &last).unwrap();
        assert_eq!(r.errors, 0, "{file}: {:?}", r.first_errors);
        assert_eq!(r.memories_added, added, "{file}: {r:?}");
        assert_eq!(last.0.lock().unwrap().total, items, "{file}");
    }
    let title = e
        .get(
            &[MemoryRef::Name {
                namespace: "note-md".into(),
                name: "note.md".into(),
            }],
            false,
        )
        .unwrap();
    assert_eq!(title[0].memory.content, "Document note.md: Title");
}

fn jsonl_request() -> ExportRequest {
    ExportRequest {
        namespaces: None,
        format: OutFormat::Jsonl,
        subgraph: None,
        vectors: false,
        history: false,
    }
}

fn partial_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial-"))
        .collect();
    names.sort();
    names
}

#[test]
fn an_export_never_replaces_a_file_that_appears_just_before_it_is_put_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    seed(&e);
    crate::engine::export::BEFORE_PUBLISH.with(|h| {
        *h.borrow_mut() = Some(Box::new(|target: &std::path::Path| {
            std::fs::write(target, "someone else's").unwrap();
        }));
    });
    let res = e.export_to(
        &jsonl_request(),
        &ExportTarget::Path("late.jsonl".into()),
        &Progressing::default(),
    );
    crate::engine::export::BEFORE_PUBLISH.with(|h| *h.borrow_mut() = None);
    let err = res.expect_err("the file appeared: the export must fail");
    assert!(err.to_string().contains("exists"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("late.jsonl")).unwrap(),
        "someone else's"
    );
    assert_eq!(partial_files(dir.path()), Vec::<String>::new());
    // Without a competitor the same export goes through.
    let out = e
        .export_to(
            &jsonl_request(),
            &ExportTarget::Path("mine.jsonl".into()),
            &Progressing::default(),
        )
        .unwrap();
    assert_eq!(out.counts.memories, 3);
    assert_eq!(partial_files(dir.path()), Vec::<String>::new());
}

#[test]
fn partial_files_of_dead_exports_are_removed_and_others_kept() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    seed(&e);
    let dead = {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        child.id()
    };
    let me = std::process::id();
    let now = std::time::SystemTime::now();
    let hour_ago = now - std::time::Duration::from_secs(3_600);
    let days_ago = now - std::time::Duration::from_secs(3 * 86_400);
    let files = [
        // A dead export's leftover: removed.
        (format!("a.jsonl.partial-{dead}"), hour_ago, false),
        // Fresh: maybe another host's export still writing it.
        (format!("b.jsonl.partial-{dead}"), now, true),
        // A live process's, untouched for an hour: kept.
        (format!("c.jsonl.partial-{me}"), hour_ago, true),
        // Untouched for days: removed whoever wrote it.
        (format!("d.jsonl.partial-{me}"), days_ago, false),
        // Not our naming.
        (format!("e.jsonl.partial-x{dead}"), days_ago, true),
        (format!("f.partial-{dead}.txt"), days_ago, true),
        (format!(".partial-{dead}"), days_ago, true),
    ];
    for (name, modified, _) in &files {
        let path = dir.path().join(name);
        std::fs::write(&path, "partial").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(*modified)
            .unwrap();
    }
    e.export_to(
        &jsonl_request(),
        &ExportTarget::Path("out.jsonl".into()),
        &Progressing::default(),
    )
    .unwrap();
    for (name, _, kept) in &files {
        assert_eq!(dir.path().join(name).exists(), *kept, "{name}");
    }
}

/// A record whose id is taken by a memory of another namespace gets a new id, and the file's
/// relations follow it: they attached to the memory that held the id (a relation between two
/// namespaces the file never named). An id that names no memory of the namespaces the import
/// writes to is a counted bad record, never a silent link elsewhere.
#[test]
fn relations_of_an_import_follow_its_own_memories_and_stay_in_its_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_in(dir.path(), "m.db");
    let taken = "{\"type\":\"memory\",\"id\":\"m_shared\",\"namespace\":\"other\",\"content\":\"the other namespace's memory\"}\n\
                 {\"type\":\"memory\",\"id\":\"m_only_other\",\"namespace\":\"other\",\"content\":\"another of the other namespace\"}\n";
    let report = e
        .import(
            &request(Source::Inline(taken.into())),
            &Progressing::default(),
        )
        .unwrap();
    assert_eq!(report.memories_added, 2, "{report:?}");
    let file = "{\"type\":\"memory\",\"id\":\"m_shared\",\"namespace\":\"mine\",\"content\":\"the file's own memory\"}\n\
                {\"type\":\"memory\",\"id\":\"m_two\",\"namespace\":\"mine\",\"content\":\"the file's second memory\"}\n\
                {\"type\":\"relation\",\"from\":\"m_two\",\"to\":\"m_shared\",\"kind\":\"about\"}\n\
                {\"type\":\"relation\",\"from\":\"m_two\",\"to\":\"m_only_other\",\"kind\":\"about\"}\n";
    let report = e
        .import(
            &request(Source::Inline(file.into())),
            &Progressing::default(),
        )
        .unwrap();
    assert_eq!(
        (report.memories_added, report.relations_added, report.errors),
        (2, 1, 1),
        "{report:?}"
    );
    assert!(
        report.first_errors[0].contains("line 4")
            && report.first_errors[0].contains("m_only_other")
            && report.first_errors[0].contains("\"mine\""),
        "{:?}",
        report.first_errors
    );
    let theirs = &e.get(&[MemoryRef::Id("m_shared".into())], false).unwrap()[0];
    assert_eq!(theirs.memory.namespace, "other");
    assert!(theirs.relations.is_empty(), "{:?}", theirs.relations);
    let two = &e.get(&[MemoryRef::Id("m_two".into())], false).unwrap()[0];
    assert_eq!(two.relations.len(), 1, "{:?}", two.relations);
    let own = &e
        .get(&[MemoryRef::Id(two.relations[0].to.clone())], false)
        .unwrap()[0];
    assert_eq!(
        (own.memory.namespace.as_str(), own.memory.content.as_str()),
        ("mine", "the file's own memory")
    );
    assert_ne!(own.memory.id, "m_shared");
    // A dry run of the same file on a database as it was before says the same.
    let fresh = engine_in(dir.path(), "dry.db");
    fresh
        .import(
            &request(Source::Inline(taken.into())),
            &Progressing::default(),
        )
        .unwrap();
    let mut dry = request(Source::Inline(file.into()));
    dry.dry_run = true;
    let report = fresh.import(&dry, &Progressing::default()).unwrap();
    assert_eq!(
        (report.memories_added, report.relations_added, report.errors),
        (2, 1, 1),
        "{report:?}"
    );
}
