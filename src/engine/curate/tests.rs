//! Consolidation on small hand-made graphs in a real database, text index and vector index.
//!
//! Size: the curation steps' tests share one seeded engine and its readers; a step's tests move to
//! their own file when they outgrow the rest.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::config::Config;
use crate::embed::hashing::HashingEmbedder;
use crate::engine::control::Progressing;
use crate::engine::{ExportRequest, Link, OutFormat, RelateItem, RememberItem};
use crate::model::{MemoryRef, RecallMode, RecallQuery};

fn engine() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::for_db(dir.path().join("memory.db"));
    let e = Engine::open_with(cfg, Some(Arc::new(HashingEmbedder::new(256)))).unwrap();
    (dir, e)
}

fn put(e: &Engine, items: Vec<RememberItem>) -> Vec<String> {
    e.remember(&items)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().id)
        .collect()
}

fn note(content: &str) -> RememberItem {
    RememberItem {
        content: content.into(),
        ..RememberItem::default()
    }
}

fn req(steps: &[&str], policy: serde_json::Value) -> ConsolidateRequest {
    ConsolidateRequest {
        steps: Some(steps.iter().map(|s| s.to_string()).collect()),
        policy: Some(policy),
        started_by: "test".into(),
        ..ConsolidateRequest::default()
    }
}

fn consolidate(e: &Engine, r: &ConsolidateRequest) -> RunReport {
    e.consolidate(r, &Progressing::default()).unwrap()
}

fn get(e: &Engine, id: &str) -> crate::engine::MemoryDetail {
    e.get(&[MemoryRef::Id(id.into())], false).unwrap().remove(0)
}

fn export(e: &Engine) -> String {
    let mut out = Vec::new();
    let r = ExportRequest {
        namespaces: None,
        format: OutFormat::Jsonl,
        subgraph: None,
        vectors: false,
        history: false,
    };
    e.export(&r, &mut out, &Progressing::default()).unwrap();
    // The header carries the time of the export; everything after it is the data.
    let text = String::from_utf8(out).unwrap();
    text.split_once('\n').unwrap().1.to_owned()
}

fn relate(e: &Engine, from: &str, to: &str, kind: &str, weight: f64) {
    let r = RelateItem {
        from: from.into(),
        to: to.into(),
        kind: kind.into(),
        weight: Some(weight),
        metadata: None,
        namespace: None,
    };
    e.relate(&[r]).unwrap().remove(0).unwrap();
}

fn recall(e: &Engine, text: &str, include_archived: bool) -> Vec<String> {
    e.recall(&RecallQuery {
        text: text.into(),
        limit: 10,
        mode: RecallMode::Text,
        include_archived,
        expand: 0,
        ..RecallQuery::default()
    })
    .unwrap()
    .hits
    .into_iter()
    .map(|h| h.memory.id)
    .collect()
}

#[test]
fn merge_folds_repeats_and_near_duplicates_into_one_survivor_with_every_relation() {
    let (_d, e) = engine();
    let ids = put(
        &e,
        vec![
            RememberItem {
                tags: vec!["work".into()],
                ..note("Alice is the tech lead of the Atlas project.")
            },
            RememberItem {
                tags: vec!["people".into()],
                importance: Some(0.8),
                ..note("Alice is the tech lead of the Atlas project.")
            },
            note("Alice is the tech lead of the Atlas project! She joined in 2021."),
            note("Bob drinks green tea every morning."),
            RememberItem {
                kind: Some("episode".into()),
                ..note("Alice is the tech lead of the Atlas project.")
            },
        ],
    );
    // The second is a repeat of the first by remember's own rule, so it is the same id.
    assert_eq!(ids[0], ids[1]);
    let (alice, near, bob, episode) = (&ids[0], &ids[2], &ids[3], &ids[4]);
    relate(&e, near, bob, "knows", 0.5);
    relate(&e, alice, bob, "knows", 0.5);
    relate(&e, bob, near, "mentions", 1.0);
    relate(&e, alice, near, "same_as", 1.0);

    let report = consolidate(&e, &req(&["merge"], json!({"merge_similarity": 0.8})));
    assert_eq!(report.state, "completed");
    assert_eq!(
        (report.counts.merged, report.counts.survivors),
        (1, 1),
        "{report:?}"
    );
    // The longest content survives; the other's sentence says nothing new.
    let ex = &report.examples[0];
    assert_eq!(
        (ex.ids.clone(), ex.into.clone()),
        (vec![alice.clone()], Some(near.clone()))
    );
    let survivor = get(&e, near).memory;
    assert_eq!(
        survivor.content,
        "Alice is the tech lead of the Atlas project! She joined in 2021."
    );
    assert_eq!(survivor.tags, vec!["work".to_string()]);
    assert_eq!(survivor.metadata["merged_from"], json!([alice]));
    // The merged memory answers with its survivor, and says so.
    let via = get(&e, alice);
    assert_eq!(via.memory.id, *near);
    assert_eq!(via.merged.as_deref(), Some(alice.as_str()));
    // Another kind is never merged.
    assert!(get(&e, episode).merged.is_none());
    // Relations moved: alice→bob folded into near→bob (weights combined), bob→near stays,
    // alice→near became a self-loop and was closed.
    let around = get(&e, near).relations;
    let mut edges: Vec<(String, String, String, f64)> = around
        .iter()
        .map(|r| (r.from.clone(), r.to.clone(), r.kind.clone(), r.weight))
        .collect();
    edges.sort_by(|a, b| a.2.cmp(&b.2));
    assert_eq!(
        edges,
        vec![
            (near.clone(), bob.clone(), "knows".into(), 0.75),
            (bob.clone(), near.clone(), "mentions".into(), 1.0),
        ]
    );
    assert_eq!(
        (
            report.counts.relations_folded,
            report.counts.relations_moved,
            report.counts.relations_closed
        ),
        (1, 0, 1)
    );
    // The merged memory left recall.
    let mut found = recall(&e, "tech lead", false);
    found.sort();
    let mut want = vec![near.clone(), episode.clone()];
    want.sort();
    assert_eq!(found, want);
}

#[test]
fn near_duplicates_that_differ_in_a_number_id_date_name_or_negation_are_kept_apart() {
    let (_d, e) = engine();
    let apart = [
        (
            "Unrelated note number 3 about topic 8 for the weekly review.",
            "Unrelated note number 4 about topic 8 for the weekly review.",
        ),
        (
            "Nightly job etl-42 failed with a timeout in the loader stage.",
            "Nightly job etl-43 failed with a timeout in the loader stage.",
        ),
        (
            "The invoice INV-2024-0042 for cloud hosting was paid in full.",
            "The invoice INV-2024-0043 for cloud hosting was paid in full.",
        ),
        (
            "The budget meeting of the platform team moved to 2024-03-05.",
            "The budget meeting of the platform team moved to 2024-03-06.",
        ),
        (
            "The mobile client release v1.2.3 ships the new sync engine.",
            "The mobile client release v1.2.4 ships the new sync engine.",
        ),
        (
            "The monthly hosting bill of the staging cluster is $120.",
            "The monthly hosting bill of the staging cluster is $150.",
        ),
        (
            "The database migration of the billing service is finished.",
            "The database migration of the billing service is not finished.",
        ),
        (
            "The design review of the search page is led by Alice Moreau.",
            "The design review of the search page is led by Bruno Keller.",
        ),
    ];
    let mut items = Vec::new();
    for (a, b) in apart {
        items.push(note(a));
        items.push(note(b));
    }
    // Re-statements that agree, or only add a detail, still merge.
    items.push(note(
        "Greta keeps bees on the roof of her house in Porto since 2019.",
    ));
    items.push(note(
        "Greta keeps bees on the roof of her house in Porto since 2019!",
    ));
    items.push(note(
        "The staging cluster of the search team runs in Frankfurt.",
    ));
    items.push(note(
        "The staging cluster of the search team runs in Frankfurt on 3 nodes.",
    ));
    let ids = put(&e, items);
    let policy = json!({"merge_similarity": 0.5});
    let dry = consolidate(
        &e,
        &ConsolidateRequest {
            dry_run: true,
            ..req(&["merge"], policy.clone())
        },
    );
    assert_eq!(dry.counts.merged, 2, "{dry:?}");
    let report = consolidate(&e, &req(&["merge"], policy));
    assert_eq!(
        (report.counts.merged, report.counts.kept_apart),
        (2, 8),
        "{report:?}"
    );
    for id in &ids[..16] {
        assert!(get(&e, id).merged.is_none(), "{id} was merged: {report:?}");
    }
    // The detail one of them added is in the survivor, whichever survived.
    let frankfurt = get(&e, &ids[19]).memory;
    assert!(
        frankfurt.content.contains("on 3 nodes"),
        "{}",
        frankfurt.content
    );
    // The full default run leaves them alone too (free text is no contradiction).
    let all = consolidate(
        &e,
        &ConsolidateRequest {
            started_by: "test".into(),
            policy: Some(json!({"merge_similarity": 0.5})),
            ..ConsolidateRequest::default()
        },
    );
    assert_eq!(
        (all.counts.merged, all.counts.contradictions),
        (0, 0),
        "{all:?}"
    );
    for id in &ids[..16] {
        let m = get(&e, id);
        assert!(m.merged.is_none() && m.memory.deleted_at.is_none(), "{id}");
    }
}

#[test]
fn exact_repeats_merge_without_vectors_and_named_memories_never_merge_into_another_name() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open_with(Config::for_db(dir.path().join("m.db")), None).unwrap();
    let ids = put(
        &e,
        vec![
            note("the sky is blue"),
            RememberItem {
                valid_from: Some(5),
                ..note("the sky is blue")
            },
            RememberItem {
                name: Some("sky".into()),
                ..note("the sky is blue")
            },
            RememberItem {
                name: Some("heaven".into()),
                ..note("the sky is blue")
            },
        ],
    );
    let report = consolidate(&e, &req(&["merge"], json!({})));
    assert!(report.warnings[0].contains("no embedder"), "{report:?}");
    assert_eq!(report.counts.merged, 1, "{report:?}");
    // The unnamed one went into a named one; the other name and the dated one stay.
    let first = get(&e, &ids[0]);
    assert!(first.memory.name.is_some() && first.merged.is_some());
    for id in &ids[1..] {
        assert!(get(&e, id).merged.is_none());
    }
}

#[test]
fn jobs_are_kept_apart_kept_while_open_and_summarised_then_archived_once_closed() {
    let (_d, e) = engine();
    let all = crate::engine::Access::All;
    // Near-duplicates: two in job alpha, one in job beta, two in no job.
    let ids = put(
        &e,
        [
            "we checked the invoice table in billing",
            "we checked the invoice table in billing today",
            "we checked the invoice table in billing again",
            "we checked the invoice table in billing twice",
            "we checked the invoice table in billing once more",
        ]
        .into_iter()
        .map(note)
        .collect(),
    );
    e.file_in_job("alpha", &ids[0..2], "test").unwrap();
    e.file_in_job("beta", &ids[2..3], "test").unwrap();
    let merged = consolidate(&e, &req(&["merge"], json!({"merge_similarity": 0.7})));
    assert_eq!(merged.counts.merged, 2, "{merged:?}");
    let live: Vec<&String> = ids
        .iter()
        .filter(|id| get(&e, id).merged.is_none())
        .collect();
    assert_eq!(live.len(), 3, "one per job and one of no job: {live:?}");
    assert!(
        get(&e, &ids[2]).merged.is_none(),
        "beta's note stays its own"
    );
    let alpha = get(&e, &ids[0]).memory.id;
    let loose = get(&e, &ids[3]).memory.id;

    // Old and unused everywhere: only what no job keeps is archived.
    let aggressive = json!({"archive_below": 0.6, "archive_unused_days": 0});
    let archived = consolidate(&e, &req(&["decay", "archive"], aggressive));
    assert_eq!(archived.counts.archived, 1, "{archived:?}");
    assert!(get(&e, &loose).memory.archived_at.is_some());
    assert!(get(&e, &alpha).memory.archived_at.is_none());

    // A closed job is summarised at once: its last checkpoint and its notes, linked.
    let body = json!({"note": "mapped the tables", "learned": ["invoices live in billing.inv"]});
    e.job_checkpoint(None, "alpha", 0, &body, "test", &all)
        .unwrap();
    e.job_close(None, "alpha", &all).unwrap();
    let summarised = consolidate(&e, &req(&["summarise"], json!({})));
    assert_eq!(summarised.counts.summaries, 1, "{summarised:?}");
    let summary = get(&e, &summarised.examples[0].ids[0]);
    let text = &summary.memory.content;
    assert!(
        text.starts_with("Summary of job alpha (closed ")
            && text.contains("Last checkpoint: mapped the tables.")
            && text.contains("Learned: invoices live in billing.inv.")
            && text.contains("we checked the invoice table in billing"),
        "{text}"
    );
    let links: Vec<(&str, &str)> = summary
        .relations
        .iter()
        .map(|r| (r.kind.as_str(), r.to.as_str()))
        .collect();
    assert_eq!(links, [("summarizes", alpha.as_str())], "{links:?}");
    let again = consolidate(&e, &req(&["summarise"], json!({})));
    assert_eq!(again.counts.summaries, 0, "a job is summarised once");

    // Its context is archived only once its retention has passed; the summary stays.
    let by_job = json!({"archive_below": 0.0});
    let kept = consolidate(&e, &req(&["archive"], by_job.clone()));
    assert_eq!(kept.counts.archived, 0, "{kept:?}");
    let mut due = by_job;
    due["job_retention_days"] = json!(0);
    let gone = consolidate(&e, &req(&["archive"], due.clone()));
    assert_eq!(gone.counts.archived, 1, "{gone:?}");
    assert!(get(&e, &alpha).memory.archived_at.is_some());
    assert!(get(&e, &summary.memory.id).memory.archived_at.is_none());
    assert!(
        get(&e, &ids[2]).memory.archived_at.is_none(),
        "beta is open"
    );
    let twice = consolidate(&e, &req(&["archive"], due));
    assert_eq!(twice.counts.archived, 0, "{twice:?}");
}

#[test]
fn archive_takes_unused_low_salience_memories_out_of_recall_until_restored() {
    let (_d, e) = engine();
    let ids = put(
        &e,
        vec![
            note("the old printer code is 4411"),
            RememberItem {
                importance: Some(0.95),
                ..note("the old alarm code is 9182")
            },
            RememberItem {
                tags: vec!["pinned".into()],
                ..note("the old gate code is 7000")
            },
            RememberItem {
                name: Some("door".into()),
                ..note("the old door code is 1234")
            },
        ],
    );
    let policy = json!({"archive_below": 0.6, "archive_unused_days": 0});
    let report = consolidate(&e, &req(&["decay", "archive"], policy));
    assert_eq!(report.counts.archived, 1, "{report:?}");
    assert_eq!(report.counts.low_salience, 3, "{report:?}");
    assert_eq!(report.examples[0].ids, vec![ids[0].clone()]);
    assert!(get(&e, &ids[0]).memory.archived_at.is_some());
    assert!(recall(&e, "printer", false).is_empty());
    assert_eq!(recall(&e, "printer", true), vec![ids[0].clone()]);
    // An export keeps the mark, and an import of it is archived as well.
    let (_d2, copy) = engine();
    let data = export(&e);
    assert!(data.contains("\"archived_at\""), "{data}");
    crate::engine::tests::import_text(&copy, &data);
    assert_eq!(
        get(&copy, &ids[0]).memory.archived_at,
        get(&e, &ids[0]).memory.archived_at
    );
    assert!(recall(&copy, "printer", false).is_empty());
    assert_eq!(export(&copy), data, "the copy exports the same lines");
    e.restore(&[MemoryRef::Id(ids[0].clone())], &[], "test")
        .unwrap();
    assert!(get(&e, &ids[0]).memory.archived_at.is_none());
    assert_eq!(recall(&e, "printer", false), vec![ids[0].clone()]);
}

#[test]
fn undo_restores_exactly_the_state_before_and_a_dry_run_writes_nothing() {
    let (_d, e) = engine();
    let ids = put(
        &e,
        vec![
            note("Carol moved to Lisbon in May 2023."),
            note("Carol moved to Lisbon in May 2023!"),
            note("Carol moved to Lisbon in May 2023."),
            note("Dan sells bicycles."),
            note("an unused detail nobody asks about"),
        ],
    );
    relate(&e, &ids[1], &ids[3], "knows", 0.4);
    relate(&e, &ids[3], &ids[3], "likes", 0.4);
    let before = export(&e);
    let head = e.store.read(crate::store::changes::max_seq).unwrap();
    let policy = json!({"merge_similarity": 0.8, "archive_below": 0.6, "archive_unused_days": 0});
    let dry = consolidate(
        &e,
        &ConsolidateRequest {
            dry_run: true,
            ..req(&["merge", "decay", "archive", "hygiene"], policy.clone())
        },
    );
    assert!(dry.run_id.is_none());
    assert!(
        dry.counts.merged >= 1 && dry.counts.archived >= 1,
        "{dry:?}"
    );
    assert_eq!(e.store.read(crate::store::changes::max_seq).unwrap(), head);
    assert!(e.consolidation_runs(10).unwrap().is_empty());
    assert_eq!(export(&e), before);

    let run = consolidate(&e, &req(&["merge", "decay", "archive", "hygiene"], policy));
    assert_eq!(run.counts.merged, dry.counts.merged, "{run:?} vs {dry:?}");
    assert_eq!(run.counts.relations_closed, 1, "the self-loop");
    assert_ne!(export(&e), before);
    let id = run.run_id.clone().unwrap();
    let undone = e.undo_consolidation(&id, false, "test").unwrap();
    assert_eq!(undone.runs, vec![id.clone()]);
    assert_eq!(export(&e), before);
    assert_eq!(recall(&e, "Lisbon", false).len(), 2);
    // Undoing twice, or an unknown run, is refused by name.
    let again = e.undo_consolidation(&id, false, "test").unwrap_err();
    assert!(again.to_string().contains("undone already"), "{again}");
    let unknown = e.undo_consolidation("run_nope", false, "test").unwrap_err();
    assert!(unknown.to_string().contains("run_nope"), "{unknown}");
}

#[test]
fn undo_of_a_run_later_runs_built_on_is_refused_or_cascades_newest_first() {
    let (_d, e) = engine();
    let ids = put(
        &e,
        vec![
            note("Erin plays the cello."),
            note("Erin plays the cello!"),
            note("Erin plays the cello?"),
        ],
    );
    let merge = |e: &Engine| consolidate(e, &req(&["merge"], json!({"merge_similarity": 0.8})));
    let before = export(&e);
    let first = merge(&e).run_id.unwrap();
    // A later change by someone else to a survivor: undo would overwrite it.
    // A later run that archives what the first one merged builds on it.
    e.remember(&[note("Erin plays the cello, loudly.")])
        .unwrap();
    let archive = json!({"archive_below": 0.6, "archive_unused_days": 0});
    let second = consolidate(&e, &req(&["archive"], archive)).run_id.unwrap();
    let refused = e.undo_consolidation(&first, false, "test").unwrap_err();
    assert!(refused.to_string().contains(&second), "{refused}");
    let report = e.undo_consolidation(&first, true, "test").unwrap();
    assert_eq!(report.runs, vec![second.clone(), first.clone()]);
    let after: Vec<String> = export(&e).lines().map(str::to_owned).collect();
    for line in before.lines() {
        assert!(after.iter().any(|l| l == line), "{line} is back as it was");
    }
    assert!(get(&e, &ids[0]).memory.archived_at.is_none());
    // A user's own change after a run blocks its undo.
    let third = merge(&e).run_id.unwrap();
    let kept = get(&e, &ids[0]).memory.id;
    e.update(
        &MemoryRef::Id(kept),
        &crate::model::MemoryPatch {
            importance: Some(0.7),
            ..Default::default()
        },
        "tool:update",
    )
    .unwrap();
    let blocked = e.undo_consolidation(&third, true, "test").unwrap_err();
    assert!(blocked.to_string().contains("tool:update"), "{blocked}");
}

#[test]
fn bad_requests_name_the_field_and_write_nothing() {
    let (_d, e) = engine();
    put(&e, vec![note("something")]);
    let head = e.store.read(crate::store::changes::max_seq).unwrap();
    let ctl = Progressing::default();
    for (r, field) in [
        (req(&["merge", "shrink"], json!({})), "steps[1]"),
        (
            req(&["merge"], json!({"half_life_days": 0})),
            "policy.half_life_days",
        ),
        (
            req(&["merge"], json!({"merge_similarity": 2})),
            "policy.merge_similarity",
        ),
        (
            ConsolidateRequest {
                namespaces: Some(vec!["nowhere".into()]),
                ..req(&["merge"], json!({}))
            },
            "namespaces[0]",
        ),
    ] {
        match e.consolidate(&r, &ctl).unwrap_err() {
            Error::InvalidArgument { field: f, .. } => assert_eq!(f, field),
            other => panic!("{other}"),
        }
    }
    assert_eq!(e.store.read(crate::store::changes::max_seq).unwrap(), head);
    assert!(e.consolidation_runs(10).unwrap().is_empty());
}

#[test]
fn a_second_run_while_one_holds_the_lease_is_skipped_and_names_it() {
    let (_d, e) = engine();
    put(&e, vec![note("x")]);
    e.store
        .write(|tx| {
            runs::take_lease(
                tx,
                LEASE,
                "run:run_other",
                Some("run_other"),
                now_millis(),
                LEASE_STALE_MS,
            )
            .map(drop)
        })
        .unwrap();
    let r = consolidate(&e, &req(&["merge"], json!({})));
    assert_eq!(
        (r.state.as_str(), r.held_by.as_deref()),
        ("skipped", Some("run_other"))
    );
    assert!(e.consolidation_runs(10).unwrap().is_empty());
}

/// Cancelled after its first committed batch, as a stopped task would be.
#[derive(Default)]
struct StopAfterFirstBatch {
    batches: std::sync::atomic::AtomicU32,
}

impl Control for StopAfterFirstBatch {
    fn report(&self, _p: &WorkProgress) {}
    fn is_cancelled(&self) -> bool {
        self.batches.load(std::sync::atomic::Ordering::Relaxed) >= 1
    }
    fn checkpointed(&self, _c: &serde_json::Value) {
        self.batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn a_cancelled_run_keeps_what_it_committed_consistent_and_undoable() {
    let (_d, e) = engine();
    let mut items = Vec::new();
    for i in 0..120 {
        items.push(note(&format!("fact number {i} about topic {i}")));
        items.push(note(&format!("fact number {i} about topic {i}")));
    }
    // Remember refuses twins: store the second of each pair with another kind, then make it a
    // note through update so the pair are exact repeats.
    let ids = put(&e, items.iter().step_by(2).cloned().collect());
    let twins = put(
        &e,
        items
            .iter()
            .step_by(2)
            .map(|i| RememberItem {
                valid_from: Some(1),
                ..i.clone()
            })
            .collect(),
    );
    for t in &twins {
        e.update(
            &MemoryRef::Id(t.clone()),
            &crate::model::MemoryPatch {
                valid_from: Some(None),
                ..Default::default()
            },
            "test",
        )
        .unwrap();
    }
    let before = export(&e);
    let ctl = StopAfterFirstBatch::default();
    let err = e
        .consolidate(&req(&["merge"], json!({})), &ctl)
        .unwrap_err();
    assert!(matches!(err, Error::Cancelled), "{err}");
    let run = e.consolidation_runs(1).unwrap().remove(0);
    assert_eq!(run.state, "cancelled");
    let merged: u64 = serde_json::from_value(run.counts["merged"].clone()).unwrap();
    assert_eq!(merged, super::merge::CLUSTERS_PER_BATCH as u64, "one batch");
    assert!(ids.len() == 120);
    e.undo_consolidation(&run.id, false, "test").unwrap();
    assert_eq!(export(&e), before);
    // A full run after it merges every pair.
    let full = consolidate(&e, &req(&["merge"], json!({})));
    assert_eq!(full.counts.merged, 120);
}

#[test]
fn link_targets_of_merged_memories_resolve_to_the_survivor() {
    let (_d, e) = engine();
    let ids = put(
        &e,
        vec![
            note("Frank repairs old radios."),
            note("Frank repairs old radios!"),
        ],
    );
    consolidate(&e, &req(&["merge"], json!({"merge_similarity": 0.8})));
    let survivor = get(&e, &ids[1]).memory.id;
    let linked = put(
        &e,
        vec![RememberItem {
            links: vec![Link {
                to: survivor.clone(),
                kind: "about".into(),
                weight: None,
            }],
            ..note("radios need valves")
        }],
    );
    assert_eq!(get(&e, &linked[0]).relations[0].to, survivor);
}

/// A run that stops after its first committed batch, then (as an adopted task would) goes on
/// from the checkpoint it saved.
#[derive(Default)]
struct Resuming {
    inner: StopAfterFirstBatch,
    stop: bool,
    from: Option<serde_json::Value>,
    saved: std::sync::Mutex<Option<serde_json::Value>>,
}

impl Control for Resuming {
    fn report(&self, _p: &WorkProgress) {}
    fn is_cancelled(&self) -> bool {
        self.stop && self.inner.is_cancelled()
    }
    fn resume_from(&self) -> Option<serde_json::Value> {
        self.from.clone()
    }
    fn checkpointed(&self, c: &serde_json::Value) {
        self.inner.checkpointed(c);
        *self.saved.lock().unwrap() = Some(c.clone());
    }
}

const CLUSTERS_PER_BATCH_U64: u64 = super::merge::CLUSTERS_PER_BATCH as u64;

/// The memories of an export without `updated_at` (the time a run changed them; relations moved
/// by a run get new random ids, so they are left out too).
/// An export without the uses of each memory (`access_count`, `accessed_at`): reads a test makes
/// between two exports are uses, recorded whatever a run and its undo do.
fn without_uses(export: &str) -> Vec<serde_json::Value> {
    export
        .lines()
        .map(|l| {
            let mut v = serde_json::from_str::<serde_json::Value>(l).unwrap();
            if let Some(o) = v.as_object_mut() {
                o.remove("access_count");
                o.remove("accessed_at");
            }
            v
        })
        .collect()
}

fn memory_lines(export: &str) -> Vec<serde_json::Value> {
    export
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "memory")
        .map(|mut v| {
            // Times of the run's own changes differ between two runs; whether they happened
            // does not.
            let o = v.as_object_mut().unwrap();
            o.remove("updated_at");
            if let Some(at) = o.get_mut("archived_at") {
                *at = serde_json::Value::from("set");
            }
            v
        })
        .collect()
}

#[test]
fn a_run_stopped_mid_way_resumes_under_its_id_and_ends_like_an_uninterrupted_one() {
    let (dir, e) = engine();
    let mut items = Vec::new();
    for i in 0..90 {
        items.push(note(&format!("fact number {i} about topic {i}.")));
        items.push(note(&format!("fact number {i} about topic {i}!")));
    }
    items.push(note("nobody asked about this old detail"));
    put(&e, items);
    drop(e);
    let twin = dir.path().join("twin.db");
    crate::engine::tests::copy_db(&dir.path().join("memory.db"), &twin);
    let policy = json!({"merge_similarity": 0.8, "archive_below": 0.6, "archive_unused_days": 0});

    let whole = Engine::open_with(
        Config::for_db(dir.path().join("memory.db")),
        Some(Arc::new(HashingEmbedder::new(256))),
    )
    .unwrap();
    let all = consolidate(&whole, &req(&["merge", "archive"], policy.clone()));
    assert!(
        all.counts.merged > CLUSTERS_PER_BATCH_U64,
        "more than one batch: {all:?}"
    );

    let e = Engine::open_with(
        Config::for_db(twin),
        Some(Arc::new(HashingEmbedder::new(256))),
    )
    .unwrap();
    let first = Resuming {
        stop: true,
        ..Resuming::default()
    };
    assert!(matches!(
        e.consolidate(&req(&["merge", "archive"], policy.clone()), &first),
        Err(Error::Cancelled)
    ));
    let checkpoint = first.saved.lock().unwrap().clone().unwrap();
    let id = checkpoint["run"].as_str().unwrap().to_owned();
    // As if its process had died: the row still says running and the lease is its own.
    e.store
        .write(|tx| {
            assert!(runs::reopen(tx, &id)?);
            runs::take_lease(
                tx,
                LEASE,
                &format!("run:{id}"),
                Some(&id),
                now_millis(),
                LEASE_STALE_MS,
            )
            .map(drop)
        })
        .unwrap();
    let resumed = e
        .consolidate(
            &req(&["merge", "archive"], policy),
            &Resuming {
                from: Some(checkpoint),
                ..Resuming::default()
            },
        )
        .unwrap();
    assert_eq!(resumed.run_id.as_deref(), Some(id.as_str()));
    assert_eq!(resumed.counts.merged, all.counts.merged, "{resumed:?}");
    assert_eq!(resumed.counts.archived, all.counts.archived);
    let runs = e.consolidation_runs(10).unwrap();
    assert_eq!(runs.len(), 1, "one run, resumed under its id");
    assert_eq!(runs[0].state, "completed");
    assert_eq!(memory_lines(&export(&e)), memory_lines(&export(&whole)));
    // And it undoes as one run.
    e.undo_consolidation(&id, false, "test").unwrap();
}

/// The control of a task that is stopped before the run commits anything.
struct TaskStoppedAtOnce {
    task: String,
}

impl Control for TaskStoppedAtOnce {
    fn report(&self, _p: &WorkProgress) {}
    fn is_cancelled(&self) -> bool {
        true
    }
    fn task_id(&self) -> Option<String> {
        Some(self.task.clone())
    }
}

#[test]
fn a_task_stopped_before_its_first_batch_resumes_under_the_same_run() {
    let (_d, e) = engine();
    put(
        &e,
        vec![note("Gina plays the oboe."), note("Gina plays the oboe!")],
    );
    let now = now_millis();
    let task = crate::model::TaskRow {
        id: "task-1".into(),
        owner: "test".into(),
        tool: "consolidate".into(),
        arguments: json!({}),
        status: crate::model::TaskState::Working,
        status_message: None,
        progress: json!({}),
        result: None,
        error: None,
        created_at: now,
        updated_at: now,
        ttl_ms: None,
        poll_interval_ms: None,
        checkpoint: None,
        boot_id: "boot".into(),
        heartbeat_at: now,
        cancel_requested: false,
        input_requests: None,
        input_responses: None,
        grant: None,
    };
    e.store
        .write(|tx| crate::store::tasks::insert(tx, &task))
        .unwrap();
    let policy = json!({"merge_similarity": 0.8});
    let stopped = e.consolidate(
        &req(&["merge"], policy.clone()),
        &TaskStoppedAtOnce {
            task: task.id.clone(),
        },
    );
    assert!(matches!(stopped, Err(Error::Cancelled)), "{stopped:?}");
    let checkpoint = e
        .store
        .read(|c| crate::store::tasks::get(c, &task.id))
        .unwrap()
        .unwrap()
        .checkpoint
        .expect("the run is named before any batch");
    let id = checkpoint["run"].as_str().unwrap().to_owned();
    let resumed = e
        .consolidate(
            &req(&["merge"], policy),
            &Resuming {
                from: Some(checkpoint),
                ..Resuming::default()
            },
        )
        .unwrap();
    assert_eq!(resumed.run_id.as_deref(), Some(id.as_str()));
    assert_eq!(resumed.counts.merged, 1);
    assert_eq!(e.consolidation_runs(10).unwrap().len(), 1);
}

#[test]
fn a_walk_goes_through_archived_memories_without_listing_them() {
    use crate::engine::traverse::{Shape, TraverseRequest};
    use crate::graph::Direction;
    let (_d, e) = engine();
    let ids = put(
        &e,
        vec![
            RememberItem {
                importance: Some(0.95),
                ..note("the seed project")
            },
            note("an old meeting nobody recalls"),
            RememberItem {
                importance: Some(0.95),
                ..note("the decision that meeting took")
            },
        ],
    );
    relate(&e, &ids[0], &ids[1], "has", 1.0);
    relate(&e, &ids[1], &ids[2], "led_to", 1.0);
    let policy = json!({"archive_below": 0.6, "archive_unused_days": 0});
    assert_eq!(
        consolidate(&e, &req(&["archive"], policy)).counts.archived,
        1
    );
    let walk = |include_archived| {
        let walk = e
            .traverse(
                &TraverseRequest {
                    seeds: vec![MemoryRef::Id(ids[0].clone())],
                    query: None,
                    namespaces: crate::model::NamespaceScope::All,
                    depth: 2,
                    direction: Direction::Out,
                    kinds: Vec::new(),
                    min_weight: 0.0,
                    valid_at: None,
                    max_nodes: 100,
                    shape: Shape::Nodes,
                    focus: None,
                    limit: 10,
                    include_archived,
                    access: crate::engine::Access::All,
                },
                &Progressing::default(),
            )
            .unwrap();
        walk.nodes
            .iter()
            .map(|n| n.memory.id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(walk(false), vec![ids[0].clone(), ids[2].clone()]);
    assert_eq!(walk(true), ids, "asked for, the archived memory is listed");
}

fn episode(content: &str, session: &str) -> RememberItem {
    RememberItem {
        kind: Some("episode".into()),
        links: vec![Link {
            to: session.into(),
            kind: "part_of".into(),
            weight: None,
        }],
        ..note(content)
    }
}

#[test]
fn summarise_condenses_an_old_session_into_one_linked_summary_that_keeps_names_and_dates() {
    let (_d, e) = engine();
    put(
        &e,
        vec![
            RememberItem {
                kind: Some("session".into()),
                name: Some("session 1".into()),
                ..note("Chat between Caroline and Melanie on 8 May 2023.")
            },
            RememberItem {
                kind: Some("session".into()),
                name: Some("session 2".into()),
                ..note("A short chat.")
            },
        ],
    );
    let turns = put(
        &e,
        vec![
            episode("Caroline: Hey Mel! Good to see you.", "session 1"),
            episode(
                "Caroline: I went to the LGBTQ support group on 7 May 2023. It was powerful.",
                "session 1",
            ),
            episode("Melanie: Wow, the support group sounds great.", "session 1"),
            episode(
                "Melanie: I took 3 pottery classes with my kids.",
                "session 1",
            ),
            episode("Caroline: Thanks!", "session 1"),
            episode(
                "Caroline: The support group made me feel accepted.",
                "session 1",
            ),
            // Too few turns to summarise.
            episode("Melanie: See you soon.", "session 2"),
            episode("Caroline: Bye!", "session 2"),
        ],
    );
    let before = export(&e);
    let policy = json!({"summarise_after_days": 0});
    // Episodes younger than the policy's age are left alone.
    let young = consolidate(&e, &req(&["summarise"], json!({})));
    assert_eq!(young.counts.summaries, 0);

    let dry = consolidate(
        &e,
        &ConsolidateRequest {
            dry_run: true,
            ..req(&["summarize"], policy.clone())
        },
    );
    assert_eq!(dry.counts.summaries, 1);
    assert!(dry.examples[0].text.contains("7 May 2023"), "{dry:?}");
    assert_eq!(export(&e), before, "a dry run writes nothing");

    let r = consolidate(&e, &req(&["summarise"], policy.clone()));
    assert_eq!(r.counts.summaries, 1, "{r:?}");
    let id = &r.examples[0].ids[0];
    let summary = get(&e, id);
    assert_eq!(summary.memory.kind, "summary");
    let text = &summary.memory.content;
    for kept in [
        "Caroline",
        "Melanie",
        "7 May 2023",
        "3 pottery classes",
        "2023",
    ] {
        assert!(text.contains(kept), "{kept:?} missing from {text}");
    }
    assert!(text.chars().count() <= 600, "{text}");
    let mut linked: Vec<&str> = summary
        .relations
        .iter()
        .filter(|r| r.kind == "summarizes" && r.from == *id)
        .map(|r| r.to.as_str())
        .collect();
    linked.sort();
    let session = get(&e, "session 1").memory.id;
    let mut expected: Vec<&str> = turns[..6].iter().map(String::as_str).collect();
    expected.push(&session);
    expected.sort();
    assert_eq!(
        linked, expected,
        "the summary links every source and the session"
    );
    // Sources stay; the summary is found by recall like any memory.
    assert!(get(&e, &turns[1]).memory.deleted_at.is_none());
    assert!(recall(&e, "pottery classes", false).contains(id));

    // A session summarised once is not summarised again; undo forgets the summary.
    assert_eq!(
        consolidate(&e, &req(&["summarise"], policy))
            .counts
            .summaries,
        0
    );
    e.undo_consolidation(r.run_id.as_deref().unwrap(), false, "test")
        .unwrap();
    // The checks between read memories the run did not change: those uses stay.
    assert_eq!(without_uses(&export(&e)), without_uses(&before));
}

#[test]
fn contradictions_link_or_end_the_older_statement_and_are_found_once() {
    let (_d, e) = engine();
    put(
        &e,
        vec![
            RememberItem {
                kind: Some("entity".into()),
                name: Some("Alice".into()),
                ..note("Alice, an engineer.")
            },
            RememberItem {
                kind: Some("entity".into()),
                name: Some("Acme".into()),
                ..note("Acme, a maker of anvils.")
            },
            RememberItem {
                kind: Some("entity".into()),
                name: Some("Globex".into()),
                ..note("Globex, a maker of everything.")
            },
        ],
    );
    let slot = |attr: &str, value: &str| RememberItem {
        kind: Some("fact".into()),
        metadata: Some(json!({"subject": "Alice", "attribute": attr, "value": value})),
        ..note(&format!("Alice {attr} {value}."))
    };
    let paris = put(
        &e,
        vec![
            slot("lives_in", "Paris"),
            slot("likes", "tea"),
            // The same value twice is no contradiction between the two.
            RememberItem {
                content: "Alice lives in Paris, still.".into(),
                ..slot("lives_in", "Paris")
            },
        ],
    );
    relate(&e, "Alice", "Acme", "works_at", 1.0);
    relate(&e, "Alice", "Acme", "knows", 1.0);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let berlin = put(
        &e,
        vec![slot("Lives_In", "Berlin"), slot("likes", "coffee")],
    );
    relate(&e, "Alice", "Globex", "works_at", 1.0);
    relate(&e, "Alice", "Globex", "knows", 1.0);
    let before = export(&e);

    let r = consolidate(&e, &req(&["contradictions"], json!({})));
    // Both Paris facts against Berlin (newest), and Acme against Globex for works_at; `likes`
    // and `knows` hold many values.
    assert_eq!(r.counts.contradictions, 3, "{r:?}");
    assert_eq!(r.counts.resolved, 0);
    let berlin_links = get(&e, &berlin[0]).relations;
    let contradicted: Vec<&str> = berlin_links
        .iter()
        .filter(|l| l.kind == "contradicts" && l.from == berlin[0])
        .map(|l| l.to.as_str())
        .collect();
    assert!(
        contradicted.contains(&paris[0].as_str()),
        "{berlin_links:?}"
    );
    let acme = get(&e, "Acme").relations;
    let works = acme.iter().find(|l| l.kind == "works_at").unwrap();
    assert!(works.metadata["contradicted_by"].is_string(), "{works:?}");
    assert!(works.valid_until.is_none());
    assert!(get(&e, &paris[0]).memory.valid_until.is_none());
    // Found once.
    let again = consolidate(&e, &req(&["contradictions"], json!({})));
    assert_eq!(again.counts.contradictions, 0, "{again:?}");

    let resolved = consolidate(&e, &req(&["contradictions"], json!({"resolve": "newest"})));
    assert_eq!(resolved.counts.contradictions, 0);
    assert_eq!(resolved.counts.resolved, 3, "{resolved:?}");
    let newer = get(&e, &berlin[0]).memory;
    assert_eq!(
        get(&e, &paris[0]).memory.valid_until,
        Some(newer.created_at)
    );
    let acme = get(&e, "Acme").relations;
    assert!(
        acme.iter()
            .find(|l| l.kind == "works_at")
            .unwrap()
            .valid_until
            .is_some()
    );
    // Nothing deleted; both undone, newest first, give back the state before.
    e.undo_consolidation(r.run_id.as_deref().unwrap(), true, "test")
        .unwrap();
    assert_eq!(without_uses(&export(&e)), without_uses(&before));
}

fn session_of_turns(e: &Engine) {
    put(
        e,
        vec![RememberItem {
            kind: Some("session".into()),
            name: Some("session 1".into()),
            ..note("Chat between Caroline and Melanie on 8 May 2023.")
        }],
    );
    let turns: Vec<RememberItem> = (0..5)
        .map(|i| {
            episode(
                &format!("Caroline: turn {i} about the support group."),
                "session 1",
            )
        })
        .collect();
    put(e, turns);
}

#[test]
fn a_chat_endpoint_writes_the_summary_and_a_dead_one_falls_back_to_extractive() {
    let policy = json!({"summarise_after_days": 0});
    for (url, abstractive) in [
        (
            crate::embed::chat::tests::fake_chat("Caroline told Melanie about her support group."),
            true,
        ),
        ("http://127.0.0.1:9/v1".to_owned(), false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::for_db(dir.path().join("memory.db"));
        cfg.summarizer = Some(crate::config::SummarizerSpec {
            base_url: url,
            model: "m".into(),
            api_key: None,
            timeout_ms: 5_000,
        });
        let e = Engine::open_with(cfg, Some(Arc::new(HashingEmbedder::new(256)))).unwrap();
        session_of_turns(&e);
        let r = consolidate(&e, &req(&["summarise"], policy.clone()));
        assert_eq!(r.counts.summaries, 1, "{r:?}");
        let text = get(&e, &r.examples[0].ids[0]).memory.content;
        assert!(
            text.starts_with("Summary of Chat between Caroline and Melanie"),
            "{text}"
        );
        if abstractive {
            assert!(text.ends_with("about her support group."), "{text}");
            assert!(r.warnings.is_empty(), "{r:?}");
        } else {
            assert!(text.contains("Caroline: turn"), "{text}");
            assert!(r.warnings[0].contains("extractive"), "{r:?}");
        }
    }
}

/// Puts run `id` back to `running` with the lease held by `holder`, its heartbeat at `beat`: as
/// its process left it when it died (or while it lives).
fn left_running(e: &Engine, id: &str, holder: &str, beat: Millis) {
    e.store
        .write(|tx| {
            assert!(runs::reopen(tx, id)?);
            runs::take_lease(tx, LEASE, holder, Some(id), beat, 0).map(drop)
        })
        .unwrap();
}

fn state_of(e: &Engine, id: &str) -> String {
    e.store.read(|c| runs::get(c, id)).unwrap().unwrap().state
}

#[test]
fn a_run_whose_process_is_gone_is_interrupted_at_once_and_can_be_undone() {
    let Some(me) = owner::Process::current() else {
        owner::skipped();
        return;
    };
    let (dir, e) = engine();
    put(
        &e,
        vec![
            note("Hana repairs clocks in Kyoto."),
            note("Hana repairs clocks in Kyoto!"),
        ],
    );
    let before = export(&e);
    let policy = json!({"merge_similarity": 0.8});
    let id = consolidate(&e, &req(&["merge"], policy.clone()))
        .run_id
        .unwrap();
    assert_ne!(export(&e), before);
    let label = me.label();
    let mine = format!("pid={}", std::process::id());

    // Its process lives (this one), on this machine: running, not undone, and a second run is
    // skipped naming it.
    left_running(&e, &id, &owner::holder(&format!("run:{id}")), now_millis());
    assert!(e.interrupt_dead_runs().unwrap().is_empty());
    let refused = e.undo_consolidation(&id, false, "test").unwrap_err();
    assert!(refused.to_string().contains("still running"), "{refused}");
    let second = consolidate(&e, &req(&["merge"], policy.clone()));
    assert_eq!(second.held_by.as_deref(), Some(id.as_str()));

    // On another machine with a fresh heartbeat, it cannot be told dead; silent for longer than
    // the lease allows, it is, and opening the database says so.
    let elsewhere = format!(
        "run:{id} {}",
        label.replace(&me_boot(&label), "boot=elsewhere")
    );
    left_running(&e, &id, &elsewhere, now_millis());
    assert!(e.interrupt_dead_runs().unwrap().is_empty());
    assert_eq!(state_of(&e, &id), "running");
    left_running(&e, &id, &elsewhere, now_millis() - LEASE_STALE_MS - 1);
    let other = Engine::open_with(
        Config::for_db(dir.path().join("memory.db")),
        Some(Arc::new(HashingEmbedder::new(256))),
    )
    .unwrap();
    assert_eq!(state_of(&other, &id), "interrupted");
    drop(other);

    // Its process ended on this machine, heartbeat fresh: interrupted at once, the lease freed,
    // and the undo works.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = format!("pid={}", child.id());
    child.wait().unwrap();
    let gone = format!("run:{id} {}", label.replace(&mine, &dead));
    left_running(&e, &id, &gone, now_millis());
    let undone = e.undo_consolidation(&id, false, "test").unwrap();
    assert_eq!(undone.runs, vec![id.clone()]);
    assert_eq!(export(&e), before);
    assert_eq!(e.store.read(|c| runs::lease(c, LEASE)).unwrap(), None);
    // A run that was undone is not resumed.
    let resumed = e.consolidate(
        &req(&["merge"], policy),
        &Resuming {
            from: Some(json!({"run": id, "done_steps": []})),
            ..Resuming::default()
        },
    );
    assert!(
        resumed
            .as_ref()
            .is_err_and(|e| e.to_string().contains("not resumed")),
        "{resumed:?}"
    );
    assert_eq!(state_of(&e, &id), "undone");
}

/// The `boot=…` part of a holder's label.
fn me_boot(label: &str) -> String {
    label
        .split(',')
        .find(|p| p.starts_with("boot="))
        .unwrap()
        .to_owned()
}
