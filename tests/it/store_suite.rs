//! The store's own suite, run on both backends: every statement of `store` against a SQLite file
//! and against a PostgreSQL database (a throwaway cluster, see `pg`), with the same expectations.
//! Then the change log under concurrent writers: positions a follower reads are gap-free and in
//! commit order, even when transactions that took positions wait before they commit.
//!
//! Size: one suite of every store statement on both backends, so that a statement added to one
//! dialect is checked on the other in the same place.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use mnemograph::config::Config;
use mnemograph::error::Result;
use mnemograph::model::{MemoryKey, NewMemory, RunRow, TaskRow, TaskState};
use mnemograph::store::changes::{self, ChangeOp};
use mnemograph::store::history::{self, Entity};
use mnemograph::store::memories::{self, Stamps};
use mnemograph::store::relations::{self, NewRelation, RelationStamps};
use mnemograph::store::tasks::{Beat, Ending};
use mnemograph::store::{Store, import_keys, in_savepoint, jobs, runs, tasks, vectors};
use serde_json::json;

/// A database of each backend for test `name`, with what keeps it alive (the temp folder). The
/// PostgreSQL one is missing, after a SKIPPED line, when PostgreSQL is not installed.
fn databases(name: &str) -> Vec<(&'static str, Config, tempfile::TempDir)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut out = vec![("sqlite", Config::for_db(dir.path().join("m.db")), dir)];
    if let Some(url) = crate::pg::database(name) {
        let dir = tempfile::tempdir().expect("temp dir");
        out.push(("postgres", Config::for_postgres(url, dir.path()), dir));
    }
    out
}

/// A store of each backend for test `name` (see [`databases`]).
fn stores(name: &str) -> Vec<(&'static str, Store, tempfile::TempDir)> {
    databases(name)
        .into_iter()
        .map(|(backend, cfg, dir)| (backend, Store::open(&cfg).expect("open the store"), dir))
        .collect()
}

fn note(ns: &str, name: Option<&str>, content: &str) -> NewMemory {
    NewMemory {
        namespace: ns.into(),
        name: name.map(str::to_owned),
        tags: vec!["a".into()],
        ..NewMemory::note(content)
    }
}

#[test]
fn memories_are_stored_found_counted_and_touched_alike() {
    for (backend, store, _dir) in stores("memories") {
        let (a, b) = store
            .write(|db| {
                let a = memories::insert(db, "m_a", &note("work", Some("alpha"), "first"), 10)?;
                let b = memories::insert(db, "m_b", &note("home", None, "second"), 20)?;
                memories::insert(db, "m_c", &note("work", None, "second"), 30)?;
                Ok((a, b))
            })
            .unwrap();
        assert!(b.key.0 > a.key.0, "{backend}");
        store
            .read(|db| {
                let got = memories::by_id(db, "m_a")?.expect("m_a");
                assert_eq!(got, a, "{backend}: a memory reads back as stored");
                assert_eq!(
                    memories::by_key(db, b.key)?.map(|m| m.id),
                    Some("m_b".into())
                );
                assert_eq!(
                    memories::by_name(db, "work", "alpha", false)?.map(|m| m.key),
                    Some(a.key)
                );
                let hash = memories::content_hash("second");
                let twin = memories::unnamed_twin(db, "home", &hash, "note", None, None)?;
                assert_eq!(twin.map(|m| m.id), Some("m_b".into()), "{backend}");
                assert!(
                    memories::unnamed_twin(db, "home", &hash, "note", Some(1), None)?.is_none()
                );
                assert_eq!(memories::count_live(db, None)?, 3);
                assert_eq!(memories::count_in(db, &["work".into()])?, 2);
                assert_eq!(memories::keys_in(db, &["home".into()])?, vec![b.key]);
                let page = memories::live_page(db, MemoryKey(0), 2)?;
                assert_eq!(page.len(), 2);
                let only_home =
                    memories::live_page_in(db, Some(&["home".into()]), MemoryKey(0), 10)?;
                assert_eq!(only_home.iter().map(|m| &m.id).collect::<Vec<_>>(), ["m_b"]);
                assert_eq!(memories::namespaces(db)?, ["home", "work"]);
                let stats = memories::stats(db, None)?;
                assert_eq!((stats.memories, stats.forgotten_memories), (3, 0));
                assert_eq!(stats.by_namespace[0], ("work".into(), 2), "{backend}");
                let none = memories::stats(db, Some(&[]))?;
                assert_eq!(none.memories, 0, "{backend}: an empty namespace list");
                let work = memories::stats(db, Some(&["work".into()]))?;
                assert_eq!(work.memories, 2);
                Ok(())
            })
            .unwrap();
        // Forget, save, touch.
        store
            .write(|db| {
                let mut m = memories::by_key(db, a.key)?.expect("a");
                m.deleted_at = Some(40);
                m.version += 1;
                memories::save(db, &m)?;
                memories::touch(db, &[b.key], 50, |s, _| Some(s + 0.25))?;
                memories::touch(db, &[b.key], 60, |_, _| None)?;
                // A key listed twice counts twice and is reinforced once; an unknown key and an
                // empty list change nothing.
                let asked = std::cell::Cell::new(0);
                memories::touch(db, &[b.key, MemoryKey(987_654), b.key], 70, |_, _| {
                    asked.set(asked.get() + 1);
                    None
                })?;
                assert_eq!(asked.get(), 1, "{backend}: one reinforcement per memory");
                memories::touch(db, &[], 80, |_, _| Some(0.0))?;
                Ok(())
            })
            .unwrap();
        store
            .read(|db| {
                assert!(memories::by_name(db, "work", "alpha", false)?.is_none());
                let forgotten = memories::by_name(db, "work", "alpha", true)?.expect("forgotten");
                assert_eq!(forgotten.deleted_at, Some(40), "{backend}");
                let touched = memories::by_key(db, b.key)?.expect("b");
                assert_eq!(touched.access_count, 4, "{backend}");
                assert_eq!(touched.accessed_at, Some(70));
                assert!((touched.salience - 0.75).abs() < 1e-9, "{backend}");
                assert_eq!(touched.salience_at, 50);
                assert_eq!(
                    memories::scan_page(db, "work", MemoryKey(0), 10, false)?.len(),
                    1
                );
                Ok(())
            })
            .unwrap();
    }
}

/// What a host browses: namespaces (a skip scan), the newest memories below a key within some
/// namespaces, and ids by prefix within a namespace.
#[test]
fn listings_and_completions_read_alike() {
    for (backend, store, _dir) in stores("listings") {
        store
            .write(|db| {
                memories::insert(db, "m_ab1", &note("work", Some("alpha"), "first note"), 10)?;
                memories::insert(db, "m_ab2", &note("home", None, "second note"), 20)?;
                memories::insert(db, "m_ac3", &note("work", None, "third note"), 30)?;
                memories::insert(db, "m_ab4", &note("zoo", None, "fourth note"), 40)?;
                Ok(())
            })
            .unwrap();
        let (nss, all, work, below, ids, newest_ids) = store
            .read(|db| {
                Ok((
                    memories::namespaces(db)?,
                    memories::newest(db, None, None, 10)?,
                    memories::newest(db, Some(&["work".into(), "zoo".into()]), None, 10)?,
                    memories::newest(db, None, Some(MemoryKey(3)), 1)?,
                    memories::ids_with_prefix(db, "work", "m_a", 10)?,
                    memories::ids_with_prefix(db, "work", "", 10)?,
                ))
            })
            .unwrap();
        assert_eq!(nss, ["home", "work", "zoo"], "{backend}");
        let ids_of = |l: &[memories::Listing]| l.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        assert_eq!(
            ids_of(&all),
            ["m_ab4", "m_ac3", "m_ab2", "m_ab1"],
            "{backend}"
        );
        assert_eq!(ids_of(&work), ["m_ab4", "m_ac3", "m_ab1"], "{backend}");
        assert_eq!(ids_of(&below), ["m_ab2"], "{backend}");
        assert_eq!(all[3].head, "first note", "{backend}");
        assert_eq!(all[3].name.as_deref(), Some("alpha"), "{backend}");
        assert_eq!(ids, ["m_ab1", "m_ac3"], "{backend}");
        assert_eq!(newest_ids, ["m_ac3", "m_ab1"], "{backend}");
        let narrow = store
            .read(|db| memories::ids_with_prefix(db, "work", "m_ab", 10))
            .unwrap();
        assert_eq!(narrow, ["m_ab1"], "{backend}");
        let none = store
            .read(|db| memories::newest(db, Some(&[]), None, 10))
            .unwrap();
        assert!(none.is_empty(), "{backend}");
    }
}

/// Jobs: opened once, checkpoints written only from the head they were read at (the second
/// writer from the same version loses), versions with their parents, memories and task
/// results filed under a job and read back newest first, closing stops checkpoints.
#[test]
fn jobs_keep_versions_memories_and_results_alike() {
    for (backend, store, _dir) in stores("jobs") {
        let keys: Vec<MemoryKey> = store
            .write(|db| {
                (0..4)
                    .map(|i| {
                        memories::insert(
                            db,
                            &format!("m_j{i}"),
                            &note("work", None, &format!("fact {i}")),
                            10,
                        )
                        .map(|m| m.key)
                    })
                    .collect()
            })
            .unwrap();
        let job = store
            .write(|db| jobs::open(db, "work", "J", "tool:job by alice", 100))
            .unwrap();
        assert_eq!((job.state.as_str(), job.head), ("open", 0), "{backend}");
        let again = store
            .write(|db| jobs::open(db, "work", "J", "someone else", 200))
            .unwrap();
        assert_eq!(again, job, "{backend}: opening again changes nothing");

        let write = |base: i64, body: serde_json::Value, at: i64| {
            store
                .write(|db| jobs::checkpoint(db, "work", "J", base, &body, None, "alice", None, at))
                .unwrap()
        };
        assert_eq!(write(0, json!({"note": "one"}), 110), Some(1), "{backend}");
        assert_eq!(write(1, json!({"note": "two"}), 120), Some(2), "{backend}");
        assert_eq!(
            write(1, json!({"note": "stale"}), 130),
            None,
            "{backend}: a stale base loses"
        );
        let reverted = store
            .write(|db| {
                jobs::checkpoint(
                    db,
                    "work",
                    "J",
                    2,
                    &json!({"note": "one"}),
                    Some(1),
                    "bob",
                    Some("task1"),
                    140,
                )
            })
            .unwrap();
        assert_eq!(reverted, Some(3), "{backend}");
        let (head, all, v1, older) = store
            .read(|db| {
                Ok((
                    jobs::get(db, "work", "J")?,
                    jobs::versions(db, "work", "J", None, 10)?,
                    jobs::version(db, "work", "J", 1)?,
                    jobs::versions(db, "work", "J", Some(3), 1)?,
                ))
            })
            .unwrap();
        assert_eq!(
            head.map(|j| (j.head, j.updated_at)),
            Some((3, 140)),
            "{backend}"
        );
        let listed: Vec<(i64, Option<i64>, Option<i64>)> = all
            .iter()
            .map(|v| (v.version, v.parent, v.reverts_to))
            .collect();
        assert_eq!(
            listed,
            [(3, Some(2), Some(1)), (2, Some(1), None), (1, None, None)],
            "{backend}"
        );
        assert_eq!(all[0].task_id.as_deref(), Some("task1"), "{backend}");
        assert_eq!(
            v1.map(|v| v.body),
            Some(json!({"note": "one"})),
            "{backend}"
        );
        assert_eq!(
            older.iter().map(|v| v.version).collect::<Vec<_>>(),
            [2],
            "{backend}"
        );

        let filed = store
            .write(|db| {
                let a = jobs::file_memories(db, "work", "J", &keys[..2], 150)?;
                let b = jobs::file_memories(db, "work", "J", &keys[1..3], 160)?;
                let c = jobs::file_memories(db, "work", "K", &keys[2..3], 170)?;
                Ok((a, b, c))
            })
            .unwrap();
        assert_eq!(
            filed,
            (2, 1, 0),
            "{backend}: a memory stays under its first job"
        );
        let (since, of) = store
            .read(|db| {
                Ok((
                    jobs::memories_since(db, "work", "J", 3, 10)?,
                    jobs::jobs_of(db, &keys)?,
                ))
            })
            .unwrap();
        assert_eq!(since, (vec![keys[2], keys[1], keys[0]], 3), "{backend}");
        let later = store
            .read(|db| jobs::memories_since(db, "work", "J", 4, 10))
            .unwrap();
        assert_eq!(
            later,
            (vec![], 0),
            "{backend}: nothing filed since version 4"
        );
        let j = mnemograph::model::JobRef {
            namespace: "work".into(),
            name: "J".into(),
        };
        assert_eq!(
            of,
            [(keys[0], j.clone()), (keys[1], j.clone()), (keys[2], j)],
            "{backend}"
        );

        let result = |status: &str, at: i64| mnemograph::model::JobResult {
            task_id: "task1".into(),
            tool: "import".into(),
            status: status.into(),
            summary: format!("import {status}"),
            result: Some(json!({"added": 3})),
            finished_at: at,
            reach: Some(json!(["work"])),
        };
        store
            .write(|db| {
                jobs::file_result(db, "work", "J", &result("working", 180))?;
                jobs::file_result(db, "work", "J", &result("completed", 190))
            })
            .unwrap();
        let (results, n) = store.read(|db| jobs::results(db, "work", "J", 10)).unwrap();
        assert_eq!(n, 1, "{backend}");
        assert_eq!(results, [result("completed", 190)], "{backend}");

        // A task filed when it starts is brought up to date at its checkpoints and ends once;
        // a task filed under no job changes nothing.
        let mut running = result("working", 191);
        running.task_id = "task2".into();
        running.result = None;
        store
            .write(|db| jobs::file_result(db, "work", "J", &running))
            .unwrap();
        assert!(
            store
                .write(|db| jobs::result_progressed(db, "task2", "checkpoint · 10 of 20", 192))
                .unwrap()
        );
        assert!(
            !store
                .write(|db| jobs::result_progressed(db, "elsewhere", "x", 192))
                .unwrap()
        );
        let out = json!({"added": 20});
        assert!(
            store
                .write(|db| jobs::result_ended(db, "task2", "completed", "done", Some(&out), 193))
                .unwrap()
        );
        assert!(
            !store
                .write(|db| jobs::result_ended(db, "task2", "failed", "again", None, 194))
                .unwrap(),
            "{backend}: ended twice"
        );
        let (job, ended) = store
            .read(|db| jobs::result_of(db, "task2"))
            .unwrap()
            .expect("filed");
        assert_eq!((job.namespace.as_str(), job.name.as_str()), ("work", "J"));
        assert_eq!(
            (
                ended.status.as_str(),
                ended.summary.as_str(),
                ended.result,
                ended.finished_at
            ),
            ("completed", "done", Some(out), 193),
            "{backend}"
        );
        assert_eq!(ended.reach, Some(json!(["work"])));
        assert!(
            store
                .read(|db| jobs::result_of(db, "task1"))
                .unwrap()
                .is_some()
        );
        assert!(
            store
                .read(|db| jobs::result_of(db, "nope"))
                .unwrap()
                .is_none()
        );

        assert!(store.write(|db| jobs::close(db, "work", "J", 200)).unwrap());
        assert!(!store.write(|db| jobs::close(db, "work", "J", 210)).unwrap());
        assert_eq!(
            write(3, json!({"note": "late"}), 220),
            None,
            "{backend}: closed"
        );
        let listed = store
            .read(|db| jobs::list(db, Some(&["work".into()]), 10))
            .unwrap();
        assert_eq!(listed.len(), 1, "{backend}");
        assert_eq!(
            (listed[0].state.as_str(), listed[0].closed_at),
            ("closed", Some(200))
        );
        assert!(
            store
                .read(|db| jobs::list(db, Some(&["home".into()]), 10))
                .unwrap()
                .is_empty()
        );
    }
}

#[test]
fn repeats_and_slots_are_grouped_alike() {
    for (backend, store, _dir) in stores("repeats") {
        store
            .write(|db| {
                let at = Stamps::now(1);
                for (id, content) in [("r1", "same"), ("r2", "same"), ("r3", "other")] {
                    memories::insert_with(db, id, &note("ns", None, content), at)?;
                }
                for (id, subject, value) in [("s1", "ann", "paris"), ("s2", "ann", "rome")] {
                    let mut m = note("ns", None, value);
                    m.metadata = json!({"subject": subject, "attribute": "Lives_In"});
                    memories::insert(db, id, &m, 5)?;
                }
                let mut lone = note("ns", None, "berlin");
                lone.metadata = json!({"subject": "bob", "attribute": "lives_in"});
                memories::insert(db, "s3", &lone, 5)?;
                Ok(())
            })
            .unwrap();
        store
            .read(|db| {
                let groups = memories::exact_repeats(db, "ns")?;
                assert_eq!(groups.len(), 1, "{backend}");
                assert_eq!(groups[0].len(), 2);
                assert!(groups[0][0] < groups[0][1], "{backend}: in key order");
                let slots = memories::shared_slots(db, "ns", &["LIVES_IN".into()], 10)?;
                let ids: Vec<_> = slots.iter().map(|m| m.id.as_str()).collect();
                assert_eq!(ids, ["s1", "s2"], "{backend}");
                Ok(())
            })
            .unwrap();
    }
}

#[test]
fn relations_are_upserted_walked_and_grouped_alike() {
    for (backend, store, _dir) in stores("relations") {
        let keys = store
            .write(|db| {
                let mut keys = Vec::new();
                for i in 0..4 {
                    keys.push(
                        memories::insert(
                            db,
                            &format!("m{i}"),
                            &note("g", None, &format!("c{i}")),
                            1,
                        )?
                        .key,
                    );
                }
                let meta = json!({"why": "test"});
                let rel = |src, dst, kind| NewRelation {
                    src,
                    dst,
                    kind,
                    weight: 0.5,
                    metadata: Some(&meta),
                };
                let first = relations::upsert(db, "r_1", &rel(keys[0], keys[1], "part_of"), 5)?;
                let again = relations::upsert(
                    db,
                    "r_other",
                    &NewRelation {
                        metadata: None,
                        weight: 0.9,
                        ..rel(keys[0], keys[1], "part_of")
                    },
                    6,
                )?;
                assert_eq!(again.key, first.key, "{backend}: the same relation");
                assert_eq!(again.id, "r_1");
                assert_eq!(
                    again.metadata,
                    json!({"why": "test"}),
                    "{backend}: metadata kept"
                );
                relations::upsert(db, "r_2", &rel(keys[2], keys[1], "part_of"), 7)?;
                let at = RelationStamps {
                    created_at: 1,
                    reinforced_at: 1,
                    valid_from: None,
                    valid_until: None,
                };
                assert!(
                    relations::insert_if_absent(db, "r_3", &rel(keys[0], keys[2], "likes"), at)?
                        .is_some()
                );
                assert!(
                    relations::insert_if_absent(db, "r_4", &rel(keys[0], keys[2], "likes"), at)?
                        .is_none()
                );
                relations::upsert(db, "r_5", &rel(keys[0], keys[3], "likes"), 8)?;
                relations::upsert(db, "r_6", &rel(keys[3], keys[0], "summarizes"), 8)?;
                Ok(keys)
            })
            .unwrap();
        store
            .read(|db| {
                let (_, r) = relations::find(db, keys[0], keys[1], "part_of")?.expect("found");
                assert!((r.weight - 0.9).abs() < 1e-9, "{backend}");
                assert_eq!(
                    relations::by_id(db, "r_1")?.map(|(_, r)| r.to),
                    Some("m1".into())
                );
                assert_eq!(relations::count(db)?, 5);
                assert!(relations::approximate_count(db)? >= 5);
                assert_eq!(relations::around(db, keys[0], 10)?.len(), 4);
                let mut edges = 0;
                relations::for_each_live_edge(db, |e| {
                    assert!(!e.kind.is_empty());
                    edges += 1;
                })?;
                assert_eq!(edges, 5, "{backend}");
                let (k, _) = relations::find(db, keys[0], keys[1], "part_of")?.expect("found");
                let (edge, live) = relations::edge(db, k)?.expect("edge");
                assert!(live, "{backend}");
                assert_eq!(edge.src, keys[0].0);
                assert_eq!(relations::live_edges_around(db, keys[1])?.len(), 2);
                assert_eq!(relations::live_page(db, 0, 10)?.len(), 5);
                let groups = relations::part_of_groups(db, "g", "note", 2)?;
                assert_eq!(groups, vec![(keys[1], vec![keys[0], keys[2]])], "{backend}");
                assert!(
                    !relations::is_summarised(db, keys[0])?,
                    "the source is no summary"
                );
                let multi = relations::multi_valued(db, "g", &["likes".into()], 100)?;
                assert_eq!(multi.len(), 2, "{backend}: m0 likes two memories");
                assert_eq!(relations::rows_around(db, keys[0])?.len(), 4);
                assert_eq!(relations::rows_page_in(db, "g", 0, 10)?.len(), 5);
                Ok(())
            })
            .unwrap();
        store
            .write(|db| {
                let (k, _) = relations::find(db, keys[0], keys[1], "part_of")?.expect("found");
                relations::set_deleted(db, k, Some(9))?;
                let mut row = relations::row(db, k)?.expect("row");
                assert_eq!(row.deleted_at, Some(9), "{backend}");
                row.weight = 0.1;
                relations::write_row(db, &row)?;
                row.id = "r_copy".into();
                row.kind = "copy_of".into();
                let copy = relations::insert_row(db, &row)?;
                assert!(copy > k, "{backend}");
                assert_eq!(
                    relations::row_between(db, keys[0].0, keys[1].0, "copy_of")?.map(|r| r.key),
                    Some(copy)
                );
                assert_eq!(
                    relations::reinforce(db, &[copy], 100_000_000)?,
                    0,
                    "forgotten"
                );
                let (live, _) = relations::find(db, keys[2], keys[1], "part_of")?.expect("r_2");
                assert_eq!(
                    relations::reinforce(db, &[live], 100_000_000)?,
                    1,
                    "{backend}"
                );
                Ok(())
            })
            .unwrap();
        let forgotten = store.read(relations::forgotten_memory_keys).unwrap();
        assert!(forgotten.is_empty(), "{backend}");
        // r_1 is forgotten; then m3, whose relations stay but are not counted.
        let counts = |store: &Store| {
            let n = store
                .read(|db| memories::relation_counts(db, &keys))
                .unwrap();
            keys.iter().map(|k| n[k]).collect::<Vec<i64>>()
        };
        assert_eq!(counts(&store), [3, 1, 2, 2], "{backend}");
        store
            .write(|db| {
                let mut m = memories::by_key(db, keys[3])?.expect("m3");
                m.deleted_at = Some(10);
                m.version += 1;
                memories::save(db, &m)
            })
            .unwrap();
        assert_eq!(counts(&store), [1, 1, 2, 2], "{backend}");
    }
}

#[test]
fn the_change_log_reads_back_in_order_with_its_stamps() {
    for (backend, store, _dir) in stores("changes") {
        let key = store
            .write(|db| {
                let m = memories::insert(db, "m1", &note("n", None, "x"), 1)?;
                changes::log_memory(db, m.key, ChangeOp::Insert)?;
                changes::log_relation(db, 7)?;
                changes::log_memory(db, m.key, ChangeOp::Upsert)?;
                Ok(m.key)
            })
            .unwrap();
        // A write that fails gives its positions back.
        let failed: Result<()> = store.write(|db| {
            changes::log_memory(db, key, ChangeOp::Delete)?;
            Err(mnemograph::error::Error::Internal("forced".into()))
        });
        assert!(failed.is_err());
        store
            .write(|db| changes::log_memory(db, key, ChangeOp::Delete))
            .unwrap();
        store
            .read(|db| {
                assert_eq!(
                    changes::max_seq(db)?,
                    4,
                    "{backend}: no gap after a rollback"
                );
                let all = changes::since(db, 0, 4)?;
                let seqs: Vec<i64> = all.iter().map(|c| c.seq).collect();
                assert_eq!(seqs, [1, 2, 3, 4], "{backend}");
                assert_eq!(all[1].op, ChangeOp::Relation);
                assert_eq!(all[1].relation, Some(7));
                assert_eq!(all[3].op, ChangeOp::Delete);
                assert_eq!(changes::memories_changed(db, 0, 4)?, vec![key]);
                assert_eq!(changes::memories_changed_at(db, 0, 4)?, vec![(key, 4)]);
                let head = changes::head(db)?;
                assert_eq!(head.seq, 4);
                assert_eq!(head.database, changes::database_id(db)?);
                assert!(changes::follows(db, &head)?, "{backend}");
                let at2 = changes::position_at(db, 2)?.expect("position 2");
                assert_ne!(at2.stamp, head.stamp);
                assert!(changes::position_at(db, 9)?.is_none());
                let with_rows = changes::memories_changed_with_rows(db, 0, 4)?;
                assert_eq!(with_rows.len(), 1);
                Ok(())
            })
            .unwrap();
    }
}

#[test]
fn a_failed_item_in_a_savepoint_leaves_the_rest_of_the_write() {
    for (backend, store, _dir) in stores("savepoint") {
        store
            .write(|db| {
                memories::insert(db, "m1", &note("n", Some("taken"), "x"), 1)?;
                // A statement the database refuses (a second live memory with the name).
                let dup = in_savepoint(db, || {
                    memories::insert(db, "m2", &note("n", Some("taken"), "y"), 1).map(drop)
                });
                assert!(dup.is_err(), "{backend}");
                memories::insert(db, "m3", &note("n", None, "z"), 1)?;
                Ok(())
            })
            .unwrap();
        let n = store.read(|db| memories::count_live(db, None)).unwrap();
        assert_eq!(n, 2, "{backend}");
    }
}

fn task(id: &str, owner: &str, boot: &str, now: i64) -> TaskRow {
    TaskRow {
        id: id.into(),
        owner: owner.into(),
        tool: "traverse".into(),
        arguments: json!({"from": "x"}),
        status: TaskState::Working,
        status_message: Some("started".into()),
        progress: json!({}),
        result: None,
        error: None,
        created_at: now,
        updated_at: now,
        ttl_ms: Some(1_000),
        poll_interval_ms: Some(500),
        checkpoint: None,
        boot_id: boot.into(),
        heartbeat_at: now,
        cancel_requested: false,
        input_requests: None,
        input_responses: None,
        grant: None,
    }
}

#[test]
fn task_rows_live_heartbeat_and_finish_alike() {
    for (backend, store, _dir) in stores("tasks") {
        store
            .write(|db| {
                tasks::insert(db, &task("t1", "ann", "boot_a", 100))?;
                tasks::insert(db, &task("t2", "bob", "boot_a", 200))?;
                Ok(())
            })
            .unwrap();
        store
            .write(|db| {
                let (progress, at) = (json!({"visited": 5}), json!({"at": 5}));
                let half = Beat {
                    status_message: "half",
                    progress: &progress,
                    checkpoint: Some(&at),
                    poll_interval_ms: Some(1_234),
                };
                let beat = tasks::heartbeat(db, "t1", "boot_a", &half, 150)?;
                let empty = json!({});
                let x = Beat {
                    status_message: "x",
                    progress: &empty,
                    checkpoint: None,
                    poll_interval_ms: None,
                };
                assert_eq!(beat, Some(false), "{backend}");
                assert_eq!(tasks::heartbeat(db, "t1", "boot_b", &x, 150)?, None);
                assert!(tasks::request_cancel(db, "t1", 160)?);
                assert_eq!(tasks::heartbeat(db, "t1", "boot_a", &x, 170)?, Some(true));
                assert!(tasks::set_checkpoint(db, "t1", &json!({"at": 9}))?);
                let end = |status, status_message| Ending {
                    status,
                    status_message,
                    progress: &empty,
                    result: None,
                    error: None,
                };
                let stopped = end(TaskState::Cancelled, "stopped");
                assert!(tasks::finish(db, "t1", "boot_a", &stopped, 180)?);
                let late = end(TaskState::Completed, "x");
                assert!(!tasks::finish(db, "t1", "boot_a", &late, 190)?);
                Ok(())
            })
            .unwrap();
        store
            .read(|db| {
                let t1 = tasks::get(db, "t1")?.expect("t1");
                assert_eq!(t1.status, TaskState::Cancelled, "{backend}");
                assert!(t1.cancel_requested);
                assert_eq!(t1.checkpoint, Some(json!({"at": 9})));
                assert_eq!(t1.poll_interval_ms, Some(1_234), "{backend}");
                assert_eq!(tasks::list(db, Some("bob"), 10)?.len(), 1);
                assert_eq!(tasks::list(db, None, 10)?.len(), 2, "{backend}");
                let counts = tasks::count_by_status(db)?;
                assert_eq!(counts, vec![("cancelled".into(), 1), ("working".into(), 1)]);
                assert_eq!(
                    tasks::orphans(db, 250)?
                        .iter()
                        .map(|t| &t.id)
                        .collect::<Vec<_>>(),
                    ["t2"]
                );
                Ok(())
            })
            .unwrap();
        store
            .write(|db| {
                assert!(
                    tasks::adopt(db, "t2", "boot_a", "boot_b", 250, 260)?,
                    "{backend}"
                );
                assert!(
                    !tasks::adopt(db, "t2", "boot_a", "boot_c", 250, 260)?,
                    "adopted once"
                );
                let asked = json!({"confirm": {"message": "sure?"}});
                assert!(tasks::await_input(
                    db, "t2", "boot_b", &asked, "waiting", 270
                )?);
                let answers = json!({"confirm": {"action": "accept"}});
                let answered = tasks::answer_input(
                    db,
                    "t2",
                    answers.as_object().expect("map"),
                    "resumed",
                    280,
                )?;
                assert_eq!(answered, tasks::Answered::Pending(0), "{backend}");
                assert!(tasks::force_cancel(db, "t2", "ended by operator", 290)?);
                assert_eq!(tasks::sweep(db, 10_000)?, 2, "{backend}: both expired");
                Ok(())
            })
            .unwrap();
    }
}

#[test]
fn runs_and_leases_take_turns_alike() {
    for (backend, store, _dir) in stores("runs") {
        let run = RunRow {
            id: "run_1".into(),
            started_by: "cli".into(),
            namespaces: vec!["a".into()],
            steps: vec!["dedupe".into()],
            policy: json!({"x": 1}),
            state: "running".into(),
            counts: json!({}),
            checkpoint: None,
            task_id: None,
            started_at: 10,
            ended_at: None,
            undone_at: None,
            undone_by: None,
        };
        store
            .write(|db| {
                runs::insert(db, &run)?;
                runs::save_progress(db, "run_1", &json!({"merged": 2}), Some(&json!({"at": 3})))?;
                assert!(
                    runs::take_lease(db, "consolidate", "p1", Some("run_1"), 100, 1_000)?.is_ok()
                );
                let held = runs::take_lease(db, "consolidate", "p2", None, 200, 1_000)?;
                assert_eq!(held.err().map(|l| l.holder), Some("p1".into()), "{backend}");
                assert!(runs::renew_lease(db, "consolidate", "p1", 300)?);
                assert_eq!(
                    runs::lease(db, "consolidate")?,
                    Some(runs::Lease {
                        holder: "p1".into(),
                        run_id: Some("run_1".into()),
                        heartbeat_at: 300
                    }),
                    "{backend}"
                );
                assert_eq!(runs::lease(db, "other")?, None);
                assert!(!runs::renew_lease(db, "consolidate", "p2", 300)?);
                assert!(
                    runs::take_lease(db, "consolidate", "p2", None, 2_000, 1_000)?.is_ok(),
                    "stale"
                );
                runs::release_lease(db, "consolidate", "p2")?;
                assert_eq!(runs::lease(db, "consolidate")?, None, "{backend}");
                // A run ends once: a second end (another process marked it) changes nothing.
                assert!(runs::finish(
                    db,
                    "run_1",
                    "interrupted",
                    &json!({"merged": 2}),
                    350
                )?);
                assert!(!runs::finish(db, "run_1", "failed", &json!({}), 360)?);
                // Resumed, it runs again, and ends as it ends.
                assert!(runs::reopen(db, "run_1")?);
                assert_eq!(runs::get(db, "run_1")?.and_then(|r| r.ended_at), None);
                assert!(runs::finish(
                    db,
                    "run_1",
                    "completed",
                    &json!({"merged": 3}),
                    400
                )?);
                assert!(!runs::reopen(db, "run_nope")?);
                Ok(())
            })
            .unwrap();
        store
            .read(|db| {
                let got = runs::get(db, "run_1")?.expect("run");
                assert_eq!(got.state, "completed", "{backend}");
                assert_eq!(got.counts, json!({"merged": 3}));
                assert_eq!(got.checkpoint, Some(json!({"at": 3})));
                assert_eq!(runs::list(db, 5)?.len(), 1);
                assert_eq!(
                    runs::newest_by(db, "cli")?.map(|r| r.id),
                    Some("run_1".into())
                );
                assert!(runs::in_state(db, "running")?.is_empty());
                Ok(())
            })
            .unwrap();
        store
            .write(|db| runs::set_undone(db, "run_1", 500, "cli"))
            .unwrap();
        let state = store
            .read(|db| runs::get(db, "run_1"))
            .unwrap()
            .map(|r| r.state);
        assert_eq!(state, Some("undone".into()), "{backend}");
        // An undone run is neither resumed nor ended again.
        store
            .write(|db| {
                assert!(!runs::reopen(db, "run_1")?, "{backend}");
                assert!(!runs::finish(db, "run_1", "failed", &json!({}), 600)?);
                Ok(())
            })
            .unwrap();
        let state = store
            .read(|db| runs::get(db, "run_1"))
            .unwrap()
            .map(|r| r.state);
        assert_eq!(state, Some("undone".into()), "{backend}");
    }
}

#[test]
fn vectors_import_keys_and_history_read_back_alike() {
    for (backend, store, _dir) in stores("vectors") {
        let (a, b) = store
            .write(|db| {
                let a = memories::insert(db, "m_a", &note("v", None, "hello"), 1)?;
                let b = memories::insert(db, "m_b", &note("v", None, "world"), 1)?;
                assert!(vectors::put(db, a.key, "model", a.version, &[1.0, -0.5])?);
                assert!(!vectors::put(
                    db,
                    a.key,
                    "model",
                    a.version + 1,
                    &[0.0, 0.0]
                )?);
                assert!(
                    vectors::put(db, a.key, "model", a.version, &[0.25, 0.5])?,
                    "replaced"
                );
                let many: [(MemoryKey, i64, &[f32]); 2] = [
                    (a.key, a.version, &[0.25, 0.5]),
                    (b.key, b.version + 1, &[9.0, 9.0]),
                ];
                assert_eq!(
                    vectors::put_many(db, "model", &many)?,
                    1,
                    "{backend}: b is stale"
                );
                import_keys::put(db, "v", "src:1", a.key)?;
                import_keys::put(db, "v", "src:1", b.key)?;
                history::record(
                    db,
                    Entity::Memory,
                    a.key.0,
                    "update",
                    "tool",
                    5,
                    &json!({"content": "old"}),
                )?;
                history::record_in_run(
                    db,
                    Entity::Relation,
                    3,
                    "merge",
                    "run",
                    6,
                    &json!({}),
                    "run_1",
                )?;
                Ok((a, b))
            })
            .unwrap();
        store
            .read(|db| {
                let current = vectors::current(db, "model", &[a.key, b.key])?;
                assert_eq!(current[&a.key].vec, vec![0.25, 0.5], "{backend}");
                assert!(!current.contains_key(&b.key));
                let page = vectors::current_page(db, "model", MemoryKey(0), 10)?;
                assert_eq!(page.len(), 1, "{backend}");
                assert_eq!(
                    (page[0].0.key, &page[0].1),
                    (a.key, &a.namespace),
                    "{backend}"
                );
                let todo = vectors::unembedded_page(db, "model", MemoryKey(0), 10)?;
                assert_eq!(todo.iter().map(|u| u.key).collect::<Vec<_>>(), vec![b.key]);
                assert_eq!(vectors::unembedded_keys(db, "model")?, vec![b.key]);
                assert_eq!(vectors::unembedded_keys(db, "other")?, vec![a.key, b.key]);
                assert_eq!(vectors::coverage(db, "model")?, (2, 1), "{backend}");
                assert_eq!(vectors::coverage_in(db, "model", &["v".into()])?, (2, 1));
                assert_eq!(
                    import_keys::get(db, "v", "src:1")?,
                    Some(a.key),
                    "{backend}"
                );
                assert_eq!(import_keys::get(db, "v", "src:2")?, None);
                let h = history::of(db, Entity::Memory, a.key.0, 10)?;
                assert_eq!(h.len(), 1);
                assert_eq!(h[0].previous, json!({"content": "old"}), "{backend}");
                let run = history::of_run(db, "run_1")?;
                assert_eq!(run.len(), 1);
                assert_eq!(run[0].entity, Entity::Relation);
                assert_eq!(
                    history::changed_after(db, Entity::Memory, a.key.0, 0)?.len(),
                    1
                );
                Ok(())
            })
            .unwrap();
        // A new version keeps its vector while its name and content stay (the text embedded is
        // the same); new content leaves it behind.
        store
            .write(|db| {
                let mut a = memories::by_key(db, a.key)?.expect("a");
                a.tags = vec!["t".into()];
                a.version += 1;
                memories::save(db, &a)?;
                let current = vectors::current(db, "model", &[a.key])?;
                assert_eq!(current[&a.key].version, a.version, "{backend}: carried");
                a.content = "hello again".into();
                a.version += 1;
                memories::save(db, &a)?;
                assert!(
                    vectors::current(db, "model", &[a.key])?.is_empty(),
                    "{backend}"
                );
                Ok(())
            })
            .unwrap();
    }
}

/// Writers, each with a store of its own as separate processes have, that hold their
/// transaction open after taking a position (so that, with positions from a sequence, a later
/// position would commit first), while a follower reads the log as an index does: every read
/// must show positions gap-free from where it stopped, and in the end it has seen every entry
/// exactly once.
#[test]
fn a_follower_never_misses_an_entry_of_writers_that_commit_out_of_order() {
    for (backend, cfg, _dir) in databases("out_of_order") {
        let store = Arc::new(Store::open(&cfg).expect("open"));
        const WRITERS: usize = 4;
        const EACH: usize = 40;
        let key = store
            .write(|db| Ok(memories::insert(db, "m", &note("n", None, "x"), 1)?.key))
            .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let start = Arc::new(Barrier::new(WRITERS + 1));
        let follower = {
            let (store, done, start) = (store.clone(), done.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut applied = 0i64;
                let mut seen = 0usize;
                loop {
                    let finished = done.load(Ordering::SeqCst);
                    let (target, entries) = store
                        .read(|db| {
                            let target = changes::max_seq(db)?;
                            Ok((target, changes::since(db, applied, target)?))
                        })
                        .unwrap();
                    let seqs: Vec<i64> = entries.iter().map(|c| c.seq).collect();
                    let expected: Vec<i64> = (applied + 1..=target).collect();
                    assert_eq!(seqs, expected, "a gap in the log after {applied}");
                    seen += entries.len();
                    applied = target;
                    if finished {
                        return seen;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let start = start.clone();
                let store = Store::open(&cfg).expect("open a writer's store");
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..EACH {
                        store
                            .write(|db| {
                                changes::log_memory(db, key, ChangeOp::Upsert)?;
                                // Hold the position a while before committing.
                                std::thread::sleep(Duration::from_micros(
                                    ((w * 7 + i * 13) % 5) as u64 * 300,
                                ));
                                changes::log_memory(db, key, ChangeOp::Upsert)?;
                                Ok(())
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        done.store(true, Ordering::SeqCst);
        let seen = follower.join().expect("follower");
        assert_eq!(seen, WRITERS * EACH * 2, "{backend}: every entry once");
    }
}
