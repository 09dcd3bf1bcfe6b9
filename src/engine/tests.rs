//! Engine behaviour on real files: a SQLite database and a tantivy index in a temporary folder.
//!
//! Size: the engine's cross-cutting tests (writes, reads, history, access, the graph file) share
//! their fixtures; a module's own tests sit in that module.

use super::*;
use crate::error::Error;
use crate::model::{MemoryPatch, MemoryRef, NamespaceScope, RecallMode, RecallQuery};

/// Copies the database file (the engine on it is closed, so the log is checkpointed).
pub(crate) fn copy_db(from: &std::path::Path, to: &std::path::Path) {
    std::fs::copy(from, to).unwrap();
    for ext in ["-wal", "-shm"] {
        let mut f = from.as_os_str().to_owned();
        f.push(ext);
        let mut t = to.as_os_str().to_owned();
        t.push(ext);
        let _ = std::fs::remove_file(&t);
        if std::path::Path::new(&f).exists() {
            std::fs::copy(&f, &t).unwrap();
        }
    }
}

/// Imports `data` (any format told from the data) as a test would; the report.
pub(crate) fn import_text(e: &Engine, data: &str) -> crate::engine::import::ImportReport {
    e.import(
        &crate::engine::import::ImportRequest {
            source: crate::engine::import::Source::Inline(data.to_owned()),
            format: None,
            namespace: None,
            dry_run: false,
            actor: "test".into(),
            max_records: None,
            access: crate::engine::Access::All,
            job: None,
        },
        &crate::engine::control::Progressing::default(),
    )
    .expect("import")
}

/// Remembers one memory of `content` (defaults otherwise); its id.
pub(crate) fn remember_text(e: &Engine, content: &str) -> String {
    remember_one(e, item(content))
}

/// What looking must leave alone, after the recorded uses are written: each memory's uses
/// (access count, last access, salience) and history, and the change-log head.
pub(crate) fn uses_history_and_head(e: &Engine) -> (Vec<String>, i64) {
    use crate::store::history::{self, Entity};
    e.flush_touched();
    e.store
        .read(|c| {
            let mut out = Vec::new();
            use crate::store::memories;
            for ns in memories::namespaces(c)? {
                for m in memories::scan_page(c, &ns, MemoryKey(0), 10_000, true)? {
                    let past = history::of(c, Entity::Memory, m.key.0, 1_000)?.len();
                    out.push(format!(
                        "{} uses {} last {:?} salience {} at {} history {past}",
                        m.id, m.access_count, m.accessed_at, m.salience, m.salience_at
                    ));
                }
            }
            Ok((out, crate::store::changes::max_seq(c)?))
        })
        .expect("read the state")
}

fn temp_engine() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = Engine::open(Config::for_db(dir.path().join("memory.db"))).expect("open");
    (dir, engine)
}

fn item(content: &str) -> RememberItem {
    RememberItem {
        content: content.into(),
        ..RememberItem::default()
    }
}

/// Ids of the text (BM25) hits for `text`: the exact-match semantics these tests check.
fn recall_ids(engine: &Engine, text: &str) -> Vec<String> {
    recall_ids_in(engine, text, RecallMode::Text)
}

/// Ids of the first 10 matches for `text` ranked by `mode` (no expansion).
pub(crate) fn recall_ids_in(engine: &Engine, text: &str, mode: RecallMode) -> Vec<String> {
    engine
        .recall(&RecallQuery {
            text: text.into(),
            limit: 10,
            mode,
            expand: 0,
            ..RecallQuery::default()
        })
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.memory.id)
        .collect()
}

fn remember_one(engine: &Engine, it: RememberItem) -> String {
    let mut rs = engine.remember(&[it]).unwrap();
    rs.remove(0).unwrap().id
}

#[test]
fn remember_then_recall_sees_the_write() {
    let (_d, e) = temp_engine();
    let id = remember_one(&e, item("The staging cluster runs in Frankfurt"));
    assert_eq!(recall_ids(&e, "where is staging?"), [id]);
}

#[test]
fn remember_is_idempotent_per_namespace() {
    let (_d, e) = temp_engine();
    let a = e.remember(&[item("same text"), item("same text")]).unwrap();
    let (a0, a1) = (a[0].as_ref().unwrap(), a[1].as_ref().unwrap());
    assert!(!a0.duplicate && a1.duplicate);
    assert_eq!(a0.id, a1.id);
    let mut other = item("same text");
    other.namespace = Some("other".into());
    let b = remember_one(&e, other);
    assert_ne!(b, a0.id);
}

fn turn(name: &str, content: &str) -> RememberItem {
    RememberItem {
        content: content.into(),
        name: Some(name.into()),
        kind: Some("episode".into()),
        ..RememberItem::default()
    }
}

#[test]
fn named_memories_are_identified_by_their_name_not_their_content() {
    let (_d, e) = temp_engine();
    let turns: Vec<Remembered> = e
        .remember(&[turn("t1", "Haha"), turn("t2", "Haha"), turn("t3", "lol")])
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert!(turns.iter().all(|r| !r.duplicate), "{turns:?}");
    assert_ne!(turns[0].id, turns[1].id);
    let rel = e
        .relate(&[RelateItem {
            from: "t2".into(),
            to: "t1".into(),
            kind: "follows".into(),
            weight: None,
            metadata: None,
            namespace: None,
        }])
        .unwrap();
    assert_eq!(rel[0].as_ref().unwrap().0.from, turns[1].id);
    // The same name with the same memory again is a repeat.
    let again = e
        .remember(&[turn("t2", "Haha")])
        .unwrap()
        .remove(0)
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.id, turns[1].id);
    // The same name saying something else is a conflict that points to `update`.
    let other_kind = RememberItem {
        kind: Some("note".into()),
        ..turn("t2", "Haha")
    };
    let later = RememberItem {
        valid_from: Some(5_000),
        ..turn("t2", "Haha")
    };
    for changed in [turn("t2", "Hehe"), other_kind, later] {
        let err = e.remember(&[changed]).unwrap().remove(0).unwrap_err();
        assert!(err.to_string().contains("update"), "{err}");
    }
    // An unnamed memory with a named one's content is a memory of its own.
    let plain = RememberItem {
        name: None,
        ..turn("", "Haha")
    };
    let plain = e.remember(&[plain]).unwrap().remove(0).unwrap();
    assert!(!plain.duplicate);
    assert_eq!(e.stats().unwrap().memories, 4);
}

#[test]
fn unnamed_memories_are_identified_by_content_kind_and_validity() {
    let (_d, e) = temp_engine();
    let first = e.remember(&[item("ok")]).unwrap().remove(0).unwrap();
    let same = e.remember(&[item("ok")]).unwrap().remove(0).unwrap();
    assert!(same.duplicate);
    assert_eq!(same.id, first.id);
    let variants = [
        RememberItem {
            kind: Some("episode".into()),
            ..item("ok")
        },
        RememberItem {
            valid_from: Some(1_000),
            ..item("ok")
        },
        RememberItem {
            valid_until: Some(2_000),
            ..item("ok")
        },
    ];
    for v in variants {
        let made = e
            .remember(std::slice::from_ref(&v))
            .unwrap()
            .remove(0)
            .unwrap();
        assert!(!made.duplicate, "{v:?}");
        let repeat = e
            .remember(std::slice::from_ref(&v))
            .unwrap()
            .remove(0)
            .unwrap();
        assert!(repeat.duplicate, "{v:?}");
        assert_eq!(repeat.id, made.id);
    }
    // Tags and importance are not part of the identity.
    let tagged = RememberItem {
        tags: vec!["x".into()],
        importance: Some(0.9),
        ..item("ok")
    };
    assert!(e.remember(&[tagged]).unwrap().remove(0).unwrap().duplicate);
    assert_eq!(e.stats().unwrap().memories, 4);
}

#[test]
fn a_bad_item_fails_alone() {
    let (_d, e) = temp_engine();
    let mut bad_link = item("links nowhere");
    bad_link.links = vec![Link {
        to: "nobody".into(),
        kind: "about".into(),
        weight: None,
    }];
    let rs = e
        .remember(&[item("fine one"), item(""), bad_link, item("fine two")])
        .unwrap();
    assert!(rs[0].is_ok() && rs[3].is_ok());
    assert!(
        rs[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("memories[1].content")
    );
    assert!(
        rs[2]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("memories[2].links[0].to")
    );
    assert!(recall_ids(&e, "links nowhere").is_empty());
    assert_eq!(e.stats().unwrap().memories, 2);
}

#[test]
fn names_are_unique_per_namespace_and_resolve_links() {
    let (_d, e) = temp_engine();
    let mut alice = item("Alice leads Atlas");
    alice.name = Some("alice".into());
    let alice_id = remember_one(&e, alice.clone());
    alice.content = "Alice again".into();
    let err = e.remember(&[alice]).unwrap().remove(0).unwrap_err();
    assert!(err.to_string().contains("update"), "{err}");
    let mut note = item("Alice likes tea");
    note.links = vec![Link {
        to: "alice".into(),
        kind: "about".into(),
        weight: Some(0.5),
    }];
    let note_id = remember_one(&e, note);
    let got = e
        .get(
            &[MemoryRef::Name {
                namespace: "default".into(),
                name: "alice".into(),
            }],
            false,
        )
        .unwrap();
    assert_eq!(got[0].memory.id, alice_id);
    assert_eq!(got[0].relations.len(), 1);
    assert_eq!(got[0].relations[0].from, note_id);
    assert_eq!(got[0].relations[0].weight, 0.5);
}

#[test]
fn relate_creates_then_updates() {
    let (_d, e) = temp_engine();
    let a = remember_one(&e, item("node a"));
    let b = remember_one(&e, item("node b"));
    let rel = |w| RelateItem {
        from: a.clone(),
        to: b.clone(),
        kind: "knows".into(),
        weight: Some(w),
        metadata: None,
        namespace: None,
    };
    let (r1, created1) = e.relate(&[rel(0.3)]).unwrap().remove(0).unwrap();
    let (r2, created2) = e.relate(&[rel(0.9)]).unwrap().remove(0).unwrap();
    assert!(created1 && !created2);
    assert_eq!(r1.id, r2.id);
    assert_eq!(r2.weight, 0.9);
    let bad = RelateItem {
        to: "m_doesnotexist".into(),
        ..rel(0.1)
    };
    let err = e.relate(&[bad]).unwrap().remove(0).unwrap_err();
    assert!(err.to_string().contains("relations[0].to"), "{err}");
}

#[test]
fn update_keeps_history_and_reindexes() {
    let (_d, e) = temp_engine();
    let id = remember_one(&e, item("meeting on monday"));
    let patch = MemoryPatch {
        content: Some("meeting moved to tuesday".into()),
        importance: Some(0.9),
        ..MemoryPatch::default()
    };
    let m = e
        .update(&MemoryRef::Id(id.clone()), &patch, "test")
        .unwrap();
    assert_eq!(m.version, 2);
    assert_eq!(recall_ids(&e, "tuesday"), std::slice::from_ref(&id));
    assert!(recall_ids(&e, "monday").is_empty());
    let d = e.get(&[MemoryRef::Id(id)], true).unwrap().remove(0);
    let h = d.history.unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].op, "update");
    assert_eq!(h[0].previous["content"], "meeting on monday");
}

#[test]
fn forget_and_restore_round_trip() {
    let (_d, e) = temp_engine();
    let id = remember_one(&e, item("temporary secret plan"));
    let r = e.forget(&[MemoryRef::Id(id.clone())], &[], "test").unwrap();
    assert_eq!(r.memories, std::slice::from_ref(&id));
    assert!(recall_ids(&e, "secret plan").is_empty());
    // Forgotten content may be remembered afresh: it gets a new id.
    e.restore(&[MemoryRef::Id(id.clone())], &[], "test")
        .unwrap();
    assert_eq!(recall_ids(&e, "secret plan"), std::slice::from_ref(&id));
    let err = e
        .forget(&[MemoryRef::Id("m_nope".into())], &[], "t")
        .unwrap_err();
    assert!(err.is_user_error());
}

#[test]
fn filters_and_paging() {
    let (_d, e) = temp_engine();
    let items: Vec<RememberItem> = (0..25)
        .map(|i| RememberItem {
            content: format!("project status report number {i}"),
            namespace: Some(if i % 2 == 0 { "even" } else { "odd" }.into()),
            tags: if i % 5 == 0 {
                vec!["five".into()]
            } else {
                vec![]
            },
            importance: Some(i as f64 / 25.0),
            ..RememberItem::default()
        })
        .collect();
    e.remember(&items).unwrap();
    let base = RecallQuery {
        text: "status report".into(),
        limit: 10,
        mode: RecallMode::Text,
        ..RecallQuery::default()
    };
    let p1 = e.recall(&base).unwrap();
    assert_eq!(p1.hits.len(), 10);
    let p3 = e
        .recall(&RecallQuery {
            offset: 20,
            ..base.clone()
        })
        .unwrap();
    assert_eq!(p3.hits.len(), 5);
    assert!(!p3.more);
    let odd = e
        .recall(&RecallQuery {
            namespaces: NamespaceScope::Only(vec!["odd".into()]),
            limit: 100,
            ..base.clone()
        })
        .unwrap();
    assert_eq!(odd.hits.len(), 12);
    let tagged = e
        .recall(&RecallQuery {
            tags: vec!["five".into()],
            min_importance: Some(0.3),
            ..base.clone()
        })
        .unwrap();
    assert_eq!(tagged.hits.len(), 3); // 10, 15, 20
}

/// Pages continue after what earlier pages showed: the ranking moving between two pages (a new
/// best match written, a shown hit falling to the bottom) neither repeats a hit nor loses one,
/// where an offset into the moved ranking would do both.
#[test]
fn pages_continue_after_what_was_shown_when_the_ranking_moves() {
    let (_d, e) = temp_engine();
    // Shorter contents rank higher: report 0 first.
    let items: Vec<RememberItem> = (0..12)
        .map(|i| item(&format!("harbour crane report {}", "and so on ".repeat(i))))
        .collect();
    let ids: Vec<String> = e
        .remember(&items)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().id)
        .collect();
    let q = RecallQuery {
        text: "harbour crane".into(),
        limit: 5,
        mode: RecallMode::Text,
        expand: 0,
        ..RecallQuery::default()
    };
    let first = e.recall(&q).unwrap();
    let shown: Vec<String> = first.hits.iter().map(|h| h.memory.id.clone()).collect();
    assert_eq!(shown[0], ids[0]);
    assert!(first.more);
    // Between the pages: a new best match, and the best hit shown falls to the bottom.
    let new = e.remember(&[item("harbour crane, harbour crane")]).unwrap()[0]
        .as_ref()
        .unwrap()
        .id
        .clone();
    let patch = MemoryPatch {
        content: Some(format!("harbour crane report {}", "and so on ".repeat(40))),
        ..MemoryPatch::default()
    };
    e.update(&MemoryRef::Id(ids[0].clone()), &patch, "test")
        .unwrap();
    let mut all = shown.clone();
    let mut q = q;
    loop {
        q.seen.extend(
            all[q.seen.len()..]
                .iter()
                .map(|id| crate::engine::cursor::mark(id)),
        );
        let page = e.recall(&q).unwrap();
        all.extend(page.hits.iter().map(|h| h.memory.id.clone()));
        if !page.more {
            break;
        }
    }
    let mut want: Vec<String> = ids.iter().chain([&new]).cloned().collect();
    want.sort();
    let mut got = all.clone();
    got.sort();
    assert_eq!(got, want, "every match shown exactly once: {all:?}");
    assert_eq!(all[5], new, "the new best match opens the second page");
}

#[test]
fn recall_rejects_what_cannot_be_searched() {
    let (_d, e) = temp_engine();
    for (text, limit, field) in [
        ("", 10, "query"),
        ("?!", 10, "query"),
        ("x", 0, "limit"),
        ("x", 101, "limit"),
    ] {
        let err = e
            .recall(&RecallQuery {
                text: text.into(),
                limit,
                ..RecallQuery::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains(&format!("`{field}`")), "{err}");
    }
}

#[test]
fn a_deleted_index_is_rebuilt_with_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::for_db(dir.path().join("memory.db"));
    let before = {
        let e = Engine::open(cfg.clone()).unwrap();
        let items: Vec<_> = (0..50)
            .map(|i| item(&format!("alpha beta note {i} gamma{}", i % 7)))
            .collect();
        e.remember(&items).unwrap();
        recall_ids(&e, "gamma3 beta")
    };
    std::fs::remove_dir_all(cfg.text_index_dir()).unwrap();
    let e = Engine::open(cfg).unwrap();
    assert_eq!(recall_ids(&e, "gamma3 beta"), before);
    let report = e.doctor().unwrap();
    assert!(report.healthy(), "{report:?}");
}

#[test]
fn reindex_rebuilds_everything() {
    let (_d, e) = temp_engine();
    e.remember(&[item("one fish"), item("two fish")]).unwrap();
    assert_eq!(e.reindex_text().unwrap(), 2);
    assert_eq!(recall_ids(&e, "fish").len(), 2);
}

#[test]
fn two_engines_on_one_database_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::for_db(dir.path().join("memory.db"));
    let a = Engine::open(cfg.clone()).unwrap();
    let b = Engine::open(cfg).unwrap();
    let id_a = remember_one(&a, item("written by a: walrus"));
    assert_eq!(recall_ids(&a, "walrus"), std::slice::from_ref(&id_a)); // a now holds the writer
    let id_b = remember_one(&b, item("written by b: narwhal"));
    a.text.release_writer();
    assert_eq!(recall_ids(&b, "narwhal"), std::slice::from_ref(&id_b));
    assert_eq!(recall_ids(&a, "narwhal"), [id_b]);
    assert_eq!(recall_ids(&b, "walrus"), [id_a]);
}

#[test]
fn a_version_1_database_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("v1.db");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/data/compat/v1.db"),
        &db,
    )
    .unwrap();
    let e = Engine::open(Config::for_db(&db)).unwrap();
    let atlas = e
        .get(
            &[MemoryRef::Name {
                namespace: "compat".into(),
                name: "atlas".into(),
            }],
            true,
        )
        .unwrap()
        .remove(0);
    assert_eq!(atlas.memory.content, "Compat fixture: Atlas ships in April");
    assert_eq!(atlas.relations.len(), 2);
    assert_eq!(
        atlas.history.unwrap()[0].previous["content"],
        "Compat fixture: Atlas ships in March"
    );
    assert_eq!(recall_ids(&e, "who leads atlas").len(), 2);
    assert!(e.doctor().unwrap().healthy());
}

mod graph_reads {
    use super::*;
    use crate::engine::control::Progressing;
    use crate::engine::traverse::{PathRequest, Shape, TraverseRequest};
    use crate::graph::Direction;

    /// A chain a → b → c → d plus a → d (weak); names are the letters.
    fn chain() -> (tempfile::TempDir, Engine) {
        let (d, e) = temp_engine();
        let names = ["a", "b", "c", "d"];
        let items: Vec<RememberItem> = names
            .iter()
            .map(|n| RememberItem {
                content: format!("memory {n} about deployment step {n}"),
                name: Some((*n).into()),
                ..RememberItem::default()
            })
            .collect();
        e.remember(&items).unwrap();
        let rel = |from: &str, to: &str, w: f64| RelateItem {
            from: from.into(),
            to: to.into(),
            kind: "next".into(),
            weight: Some(w),
            metadata: None,
            namespace: None,
        };
        for r in e
            .relate(&[
                rel("a", "b", 0.9),
                rel("b", "c", 0.9),
                rel("c", "d", 0.9),
                rel("a", "d", 0.1),
            ])
            .unwrap()
        {
            r.unwrap();
        }
        (d, e)
    }

    fn req(depth: u8, shape: Shape) -> TraverseRequest {
        TraverseRequest {
            seeds: vec![MemoryRef::Name {
                namespace: "default".into(),
                name: "a".into(),
            }],
            query: None,
            namespaces: NamespaceScope::All,
            depth,
            direction: Direction::Out,
            kinds: vec![],
            min_weight: 0.0,
            valid_at: None,
            max_nodes: 100,
            shape,
            focus: None,
            limit: 50,
            include_archived: false,
            access: crate::engine::Access::All,
        }
    }

    fn names(r: &crate::engine::traverse::TraverseResult) -> Vec<String> {
        r.nodes
            .iter()
            .map(|n| n.memory.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn traversal_follows_writes_and_forgets() {
        let (_d, e) = chain();
        let ctl = Progressing::default();
        let r = e.traverse(&req(1, Shape::Nodes), &ctl).unwrap();
        assert_eq!(names(&r), ["a", "b", "d"]);
        let r = e.traverse(&req(3, Shape::Nodes), &ctl).unwrap();
        assert_eq!(r.reached, 4);
        assert_eq!(r.nodes[1].via.as_ref().unwrap().kind, "next");
        // Forgetting c cuts the chain; restoring it mends it.
        let c = MemoryRef::Name {
            namespace: "default".into(),
            name: "c".into(),
        };
        e.forget(std::slice::from_ref(&c), &[], "t").unwrap();
        let r = e.traverse(&req(3, Shape::Nodes), &ctl).unwrap();
        assert_eq!(names(&r), ["a", "b", "d"]);
        e.restore(&[c], &[], "t").unwrap();
        assert_eq!(e.traverse(&req(3, Shape::Nodes), &ctl).unwrap().reached, 4);
    }

    #[test]
    fn paths_subgraph_and_focus() {
        let (_d, e) = chain();
        let ctl = Progressing::default();
        let r = e.traverse(&req(3, Shape::Paths), &ctl).unwrap();
        let to_d = r
            .paths
            .iter()
            .find(|p| p.ids.len() == 4)
            .expect("strong path to d");
        assert_eq!(to_d.kinds, ["next", "next", "next"]);
        let r = e.traverse(&req(3, Shape::Subgraph), &ctl).unwrap();
        assert_eq!(r.edges.len(), 4);
        let mut focused = req(3, Shape::Nodes);
        focused.focus = Some("step c".into());
        let r = e.traverse(&focused, &ctl).unwrap();
        assert_eq!(r.nodes[0].memory.name.as_deref(), Some("c"));
        assert!(ctl.snapshot().visited >= 4);
    }

    #[test]
    fn find_paths_and_bad_requests() {
        let (_d, e) = chain();
        let ctl = Progressing::default();
        let n = |s: &str| MemoryRef::Name {
            namespace: "default".into(),
            name: s.into(),
        };
        let spec = PathRequest {
            direction: Direction::Out,
            kinds: vec![],
            min_weight: 0.0,
            valid_at: None,
            max_hops: 8,
            access: crate::engine::Access::All,
        };
        let r = e.find_paths(&n("a"), &n("d"), 2, &spec, &ctl).unwrap();
        assert_eq!(r.paths.len(), 2);
        assert_eq!(r.paths[0].ids.len(), 4);
        assert!(
            e.traverse(&req(0, Shape::Nodes), &ctl)
                .unwrap_err()
                .to_string()
                .contains("`depth`")
        );
        assert!(
            e.traverse(&req(50, Shape::Nodes), &ctl)
                .unwrap_err()
                .to_string()
                .contains("`depth`")
        );
        let mut unknown = req(2, Shape::Nodes);
        unknown.seeds = vec![n("nobody")];
        assert!(e.traverse(&unknown, &ctl).unwrap_err().is_user_error());
        ctl.cancelled
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut focused = req(3, Shape::Nodes);
        focused.focus = Some("x".into());
        assert!(matches!(e.traverse(&focused, &ctl), Err(Error::Cancelled)));
    }

    #[test]
    fn unused_relations_weaken_and_a_walk_through_them_restores_their_strength() {
        let (_d, e) = temp_engine();
        let day = 86_400_000i64;
        let now = crate::model::now_millis();
        let at = |days: i64| crate::model::format_time(now - days * day);
        // a → b was given weight 0.9 but nobody used it for 90 days (strength 0.9 × (1/2 + 1/16)
        // ≈ 0.51); a → c weighs 0.6, used 10 days ago (0.6 × (1/2 + 2^(−1/3)/2) ≈ 0.54).
        let relation = |id: &str, to: &str, weight: f64, days: i64| {
            format!(
                r#"{{"type":"relation","id":"{id}","from":"m_a","to":"{to}","kind":"knows","weight":{weight},"reinforced_at":"{}"}}"#,
                at(days)
            )
        };
        let data = [
            r#"{"type":"memory","id":"m_a","name":"a","content":"the seed"}"#.to_owned(),
            r#"{"type":"memory","id":"m_b","name":"b","content":"an old strong tie"}"#.to_owned(),
            r#"{"type":"memory","id":"m_c","name":"c","content":"a recent weaker tie"}"#.to_owned(),
            relation("r_ab", "m_b", 0.9, 90),
            relation("r_ac", "m_c", 0.6, 10),
        ]
        .join("\n");
        let report = import_text(&e, &data);
        assert_eq!(report.errors, 0, "{report:?}");
        let ctl = Progressing::default();
        let walk = |e: &Engine| {
            let r = e.traverse(&req(1, Shape::Paths), &ctl).unwrap();
            r.nodes
                .iter()
                .skip(1)
                .map(|n| {
                    (
                        n.memory.name.clone().unwrap(),
                        (n.strength * 1000.0).round(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            walk(&e),
            vec![("c".to_owned(), 538.0), ("b".to_owned(), 506.0)],
            "the recent tie ranks first"
        );
        // The walk used both relations: once recorded, each is back at its full weight.
        e.flush_touched();
        assert_eq!(
            walk(&e),
            vec![("b".to_owned(), 900.0), ("c".to_owned(), 600.0)]
        );
        // The weights themselves never change, and a filter judges them, not the strength.
        let mut strict = req(1, Shape::Nodes);
        strict.min_weight = 0.5;
        assert_eq!(names(&e.traverse(&strict, &ctl).unwrap()), ["a", "b", "c"]);
        let rel = e
            .get(&[MemoryRef::Id("m_a".into())], false)
            .unwrap()
            .remove(0)
            .relations;
        let mut weights: Vec<f64> = rel.iter().map(|r| r.weight).collect();
        weights.sort_by(f64::total_cmp);
        assert_eq!(weights, [0.6, 0.9]);
    }
}

// Accesses were written a flush a tick, a statement per key; then every 5 s in one flush, which
// under 64 clients took the cores for long enough to stretch the p99. What a mark takes is now
// written a chunk a tick; a memory's accesses are never split; what comes after the mark waits
// for the next one; `flush_touched` (close, undo) still writes everything.
#[test]
fn accesses_taken_at_a_mark_are_written_a_chunk_at_a_time() {
    let (_dir, e) = temp_engine();
    let ids: Vec<String> = (0..6)
        .map(|i| remember_text(&e, &format!("memory number {i}")))
        .collect();
    // Read from the store: a `get` is itself a use.
    let rows = |e: &Engine| -> Vec<crate::model::Memory> {
        e.store
            .read(|c| {
                ids.iter()
                    .map(|i| {
                        let r = MemoryRef::Id(i.clone());
                        Ok(crate::engine::write::lookup(c, &r, false)?.expect("stored"))
                    })
                    .collect()
            })
            .unwrap()
    };
    let keys: Vec<MemoryKey> = rows(&e).into_iter().map(|m| m.key).collect();
    let counts = |e: &Engine| -> Vec<i64> { rows(e).into_iter().map(|m| m.access_count).collect() };
    // Memory 1 twice, memory 0 three times, the rest once; in no order.
    let order = [5, 1, 0, 4, 1, 3, 0, 2, 0];
    e.note_touched(order.iter().map(|&i| keys[i]), 1_000);
    assert!(e.flush_access_step(true, 2), "more queued");
    // Sorted by key: memory 0's three accesses go together, past the chunk of 2.
    assert_eq!(counts(&e), [3, 0, 0, 0, 0, 0]);
    e.note_touched([keys[0]].into_iter(), 2_000); // after the mark
    assert!(e.flush_access_step(false, 2));
    assert_eq!(counts(&e), [3, 2, 0, 0, 0, 0]);
    assert!(e.flush_access_step(false, 2));
    assert!(
        !e.flush_access_step(false, 2),
        "the mark's accesses are written"
    );
    assert_eq!(
        counts(&e),
        [3, 2, 1, 1, 1, 1],
        "the later one waits for its mark"
    );
    e.note_touched([keys[5]].into_iter(), 3_000);
    assert!(!e.flush_access_step(false, 2));
    assert_eq!(counts(&e)[5], 1, "no mark, no take");
    e.flush_touched();
    assert_eq!(counts(&e), [4, 2, 1, 1, 1, 2]);
}

mod semantic {
    use super::*;
    use crate::embed::Embedder;
    use crate::model::Hit;

    /// A recall of the matches alone (no expansion).
    fn query(text: &str, mode: RecallMode) -> RecallQuery {
        RecallQuery {
            text: text.into(),
            limit: 10,
            mode,
            expand: 0,
            ..RecallQuery::default()
        }
    }

    fn ids(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.memory.id.as_str()).collect()
    }

    #[test]
    fn the_builtin_model_finds_meaning_without_shared_words() {
        let (_d, e) = temp_engine();
        let car = remember_one(&e, item("The automobile would not start this morning"));
        remember_one(&e, item("Bought fresh basil and tomatoes at the market"));
        remember_one(&e, item("The quarterly tax filing is due in April"));
        let text = e
            .recall(&query("car engine trouble", RecallMode::Text))
            .unwrap();
        assert!(text.hits.is_empty());
        let vector = e
            .recall(&query("car engine trouble", RecallMode::Vector))
            .unwrap();
        assert_eq!(vector.hits[0].memory.id, car);
        let hybrid = e
            .recall(&query("car engine trouble", RecallMode::Hybrid))
            .unwrap();
        assert_eq!(hybrid.hits.first().map(|h| h.memory.id.clone()), Some(car));
        assert!(hybrid.warnings.is_empty(), "{:?}", hybrid.warnings);
    }

    #[test]
    fn explain_shows_each_signal_and_the_fused_score() {
        let (_d, e) = temp_engine();
        let id = remember_one(&e, item("Ada prefers green tea in the afternoon"));
        let page = e
            .recall(&RecallQuery {
                explain: true,
                ..query("green tea", RecallMode::Hybrid)
            })
            .unwrap();
        let hit = &page.hits[0];
        assert_eq!(hit.memory.id, id);
        let x = hit.explain.as_ref().unwrap();
        assert_eq!((x.text_rank, x.vector_rank), (Some(1), Some(1)));
        // First in both lists: the fused score is 1.
        assert!((x.fused - 1.0).abs() < 1e-6);
        assert!((x.score - x.fused * x.importance_boost * x.recency_boost).abs() < 1e-6);
        assert_eq!(hit.score, x.score);
    }

    #[test]
    fn forgotten_and_updated_memories_follow_in_the_vector_index() {
        let (_d, e) = temp_engine();
        let a = remember_one(&e, item("The cat sleeps on the warm windowsill"));
        let b = remember_one(&e, item("Quarterly revenue grew by eight percent"));
        assert_eq!(
            e.recall(&query("kitten napping", RecallMode::Vector))
                .unwrap()
                .hits[0]
                .memory
                .id,
            a
        );
        e.forget(&[MemoryRef::Id(a.clone())], &[], "test").unwrap();
        let after = e
            .recall(&query("kitten napping", RecallMode::Vector))
            .unwrap();
        assert!(!ids(&after.hits).contains(&a.as_str()));
        e.update(
            &MemoryRef::Id(b.clone()),
            &MemoryPatch {
                content: Some("A kitten naps on the sunny sill".into()),
                ..MemoryPatch::default()
            },
            "test",
        )
        .unwrap();
        assert_eq!(
            e.recall(&query("kitten napping", RecallMode::Vector))
                .unwrap()
                .hits[0]
                .memory
                .id,
            b
        );
        assert_eq!(e.stats().unwrap().vectors, 1);
    }

    #[test]
    fn expansion_adds_neighbours_with_the_relation_they_came_through() {
        let (_d, e) = temp_engine();
        let seed = remember_one(&e, item("Project Orion kickoff meeting notes"));
        let other = remember_one(
            &e,
            RememberItem {
                content: "Budget spreadsheet for next year".into(),
                links: vec![Link {
                    to: seed.clone(),
                    kind: "part_of".into(),
                    weight: Some(0.8),
                }],
                ..RememberItem::default()
            },
        );
        let plain = e.recall(&query("Orion kickoff", RecallMode::Text)).unwrap();
        assert_eq!(ids(&plain.hits), [seed.as_str()]);
        let expanded = e
            .recall(&RecallQuery {
                expand: 1,
                ..query("Orion kickoff", RecallMode::Text)
            })
            .unwrap();
        assert_eq!(ids(&expanded.hits), [seed.as_str(), other.as_str()]);
        let via = expanded.hits[1].via.as_ref().unwrap();
        assert_eq!(
            (via.from.as_str(), via.relation.as_str(), via.hops),
            (seed.as_str(), "part_of", 1)
        );
        let want = expanded.hits[0].score * crate::engine::recall::EXPAND_DECAY * 0.8;
        assert!((expanded.hits[1].score - want).abs() < 1e-6);
    }

    /// A hub (a session holding many turns) passes on a share shrunk by its degree, so the
    /// turns next to a hit rank above the hub and the hub's other members; by default a recall
    /// expands two hops.
    #[test]
    fn expansion_damps_hubs_and_reaches_two_hops_by_default() {
        use crate::engine::recall::{EXPAND_DECAY, HUB_DEGREE};
        let (_d, e) = temp_engine();
        let hub = remember_one(&e, item("Session of the ninth of May"));
        let link = |to: &str, kind: &str| Link {
            to: to.to_owned(),
            kind: kind.into(),
            weight: None,
        };
        let turn = |content: &str, before: Option<&str>| RememberItem {
            content: content.into(),
            links: std::iter::once(link(&hub, "part_of"))
                .chain(before.map(|b| link(b, "follows")))
                .collect(),
            ..RememberItem::default()
        };
        let first = remember_one(&e, turn("Where did you go last weekend?", None));
        let answer = remember_one(&e, turn("We hiked up Mount Tamalpais", Some(&first)));
        let after = remember_one(&e, turn("It rained the whole way down", Some(&answer)));
        let mut last = after.clone();
        for i in 0..17 {
            last = remember_one(
                &e,
                turn(&format!("Unrelated remark number {i}"), Some(&last)),
            );
        }
        let recalled = e
            .recall(&RecallQuery {
                expand: 1,
                ..query("Tamalpais", RecallMode::Text)
            })
            .unwrap();
        let got = ids(&recalled.hits);
        assert_eq!(got[..3], [answer.as_str(), first.as_str(), after.as_str()]);
        // The hub: 20 relations against the answer's 3.
        let hub_hit = recalled.hits.iter().find(|h| h.memory.id == hub).unwrap();
        let s = recalled.hits[0].score;
        let want = s * EXPAND_DECAY * HUB_DEGREE / (3.0f32 * 20.0).sqrt();
        assert!(
            (hub_hit.score - want).abs() < 1e-5,
            "{} vs {want}",
            hub_hit.score
        );
        assert_eq!(
            recalled.hits.len(),
            4,
            "one hop: the hit, its two turns, the hub"
        );
        // Two hops along the turns: the turn after the next one, at the decay squared.
        let two = e
            .recall(&RecallQuery {
                text: "Tamalpais".into(),
                limit: 10,
                mode: RecallMode::Text,
                ..RecallQuery::default()
            })
            .unwrap();
        let second_after = two
            .hits
            .iter()
            .find(|h| {
                h.via
                    .as_ref()
                    .is_some_and(|v| v.hops == 2 && v.relation == "follows")
            })
            .expect("a turn two hops away");
        assert!((second_after.score - s * EXPAND_DECAY * EXPAND_DECAY).abs() < 1e-5);
    }

    #[test]
    fn near_duplicates_collapse_into_the_best_hit() {
        let (_d, e) = temp_engine();
        let a = remember_one(&e, item("Ada's birthday is on the fourth of May"));
        let b = remember_one(
            &e,
            RememberItem {
                namespace: Some("other".into()),
                ..item("Ada's birthday is on the fourth of May")
            },
        );
        let page = e
            .recall(&query("when is Ada's birthday", RecallMode::Hybrid))
            .unwrap();
        assert_eq!(page.hits.len(), 1);
        let kept = &page.hits[0];
        let dropped = if kept.memory.id == a { &b } else { &a };
        assert_eq!(kept.duplicates, std::slice::from_ref(dropped));
    }

    /// A memory listed under a hit's `duplicates` counts as shown: the next page's cursor
    /// carries it, so a later page does not bring it back when the ranking moves (here the hit
    /// it was listed under is forgotten between the pages).
    #[test]
    fn duplicates_listed_on_a_page_count_as_shown() {
        use crate::engine::control::Progressing;
        use crate::engine::cursor::{decode_cursor, mark};
        let (_d, e) = temp_engine();
        let text = "Ada's birthday is on the fourth of May";
        let a = remember_one(&e, item(text));
        let b = remember_one(
            &e,
            RememberItem {
                namespace: Some("other".into()),
                ..item(text)
            },
        );
        let cake = remember_one(&e, item("Ada's birthday cake was lemon"));
        let mut q = query("when is Ada's birthday", RecallMode::Hybrid);
        q.limit = 1;
        let out = crate::engine::work::recall(
            &e,
            &q,
            0,
            100,
            false,
            &Access::All,
            &Progressing::default(),
        )
        .unwrap();
        let kept = out["hits"][0]["id"].as_str().unwrap().to_owned();
        let dropped = if kept == a { &b } else { &a };
        assert_eq!(out["hits"][0]["duplicates"], serde_json::json!([dropped]));
        let (offset, seen) = decode_cursor(&q, out["next_cursor"].as_str().unwrap()).unwrap();
        assert_eq!((offset, &seen), (0, &vec![mark(&kept), mark(dropped)]));
        e.forget(&[MemoryRef::Id(kept)], &[], "test").unwrap();
        q.seen = seen;
        q.limit = 10;
        let next = e.recall(&q).unwrap();
        assert_eq!(
            ids(&next.hits),
            [cake.as_str()],
            "the duplicate does not come back"
        );
    }

    /// The pages of `q` with and without skipping the rows that cannot reach them (ids, scores,
    /// how each was found, duplicates) are the same; true when the skipping ranking was redone.
    fn same_page_with_and_without_skipping(e: &Engine, q: &RecallQuery) -> bool {
        let q = RecallQuery {
            explain: true,
            ..q.clone()
        };
        let (pruned, redone) = e.recall_with(&q, true).unwrap();
        let (all, _) = e.recall_with(&q, false).unwrap();
        assert_eq!(ids(&pruned.hits), ids(&all.hits), "{}", q.text);
        for (p, a) in pruned.hits.iter().zip(&all.hits) {
            assert!((p.score - a.score).abs() < 1e-5, "{p:?} {a:?}");
            assert_eq!((&p.via, &p.duplicates), (&a.via, &a.duplicates));
            let (px, ax) = (p.explain.as_ref().unwrap(), a.explain.as_ref().unwrap());
            assert_eq!(
                (px.text_rank, px.vector_rank),
                (ax.text_rank, ax.vector_rank)
            );
        }
        assert_eq!(pruned.more, all.more, "{}", q.text);
        redone
    }

    /// Recall skips reading the rows of candidates found by meaning alone that cannot reach
    /// the page: when duplicates thin the hits above the bar, one of them may reach it after
    /// all, and the ranking is redone with their rows.
    #[test]
    fn rows_skipped_are_read_when_duplicates_leave_room_on_the_page() {
        let (_d, e) = temp_engine();
        for ns in ["a", "b", "c", "d", "e", "f"] {
            remember_one(
                &e,
                RememberItem {
                    namespace: Some(ns.into()),
                    ..item("The lighthouse keeper logs every ship in the harbour")
                },
            );
        }
        let beacon = remember_one(
            &e,
            item("The beacon warden records every boat entering the bay"),
        );
        let q = RecallQuery {
            limit: 2,
            ..query("lighthouse keeper logs ship harbour", RecallMode::Hybrid)
        };
        assert!(same_page_with_and_without_skipping(&e, &q));
        let page = e.recall(&q).unwrap();
        assert_eq!(page.hits.len(), 2);
        assert_eq!(page.hits[0].duplicates.len(), 5);
        assert_eq!(page.hits[1].memory.id, beacon);
    }

    /// ... and when a relation brings a skipped candidate onto the page, it is ranked with its
    /// own signals too, as if its row had been read from the start.
    #[test]
    fn rows_skipped_are_read_when_a_relation_brings_one_in() {
        let (_d, e) = temp_engine();
        let keeper = remember_one(
            &e,
            item("Lighthouse keeper Ada writes down each vessel in the harbour"),
        );
        for i in 0..6 {
            remember_one(
                &e,
                item(&format!(
                    "The lighthouse on cape {i} was painted red and white"
                )),
            );
        }
        let beacon = remember_one(
            &e,
            RememberItem {
                links: vec![Link {
                    to: keeper.clone(),
                    kind: "about".into(),
                    weight: Some(1.0),
                }],
                // No word of the query; by meaning just over the floor of a vector-only
                // candidate (0.35), so its row is skipped until the relation brings it in.
                ..item("The beacon warden writes down every boat entering the bay")
            },
        );
        let mut redone = 0;
        for (limit, offset, expand) in [(2, 0, 1), (2, 0, 2), (1, 1, 1), (3, 0, 0), (1, 0, 1)] {
            let q = RecallQuery {
                limit,
                offset,
                expand,
                ..query("lighthouse keeper Ada", RecallMode::Hybrid)
            };
            redone += usize::from(same_page_with_and_without_skipping(&e, &q));
        }
        assert!(redone >= 2, "redone {redone} times");
        let page = e
            .recall(&RecallQuery {
                limit: 2,
                expand: 1,
                explain: true,
                ..query("lighthouse keeper Ada", RecallMode::Hybrid)
            })
            .unwrap();
        assert_eq!(ids(&page.hits), [keeper.as_str(), beacon.as_str()]);
        let x = page.hits[1].explain.as_ref().unwrap();
        assert!(x.vector_rank.is_some() && x.expanded.is_some(), "{x:?}");
    }

    /// A provider that answers with the wrong number of dimensions.
    struct WrongDim;

    impl Embedder for WrongDim {
        fn model_id(&self) -> &str {
            "wrong-dim"
        }
        fn dim(&self) -> usize {
            8
        }
        fn embed(&self, texts: &[&str]) -> crate::Result<Vec<Vec<f32>>> {
            Ok(texts.iter().map(|_| vec![0.5; 3]).collect())
        }
    }

    #[test]
    fn a_failing_provider_falls_back_to_text_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::for_db(dir.path().join("memory.db"));
        let e = Engine::open_with(cfg, Some(std::sync::Arc::new(WrongDim))).unwrap();
        let id = remember_one(&e, item("the lighthouse keeper logs every ship"));
        for mode in [RecallMode::Hybrid, RecallMode::Vector] {
            let page = e.recall(&query("lighthouse", mode)).unwrap();
            assert_eq!(ids(&page.hits), [id.as_str()]);
            assert!(
                page.warnings[0].contains("3 dimensions"),
                "{:?}",
                page.warnings
            );
        }
        assert_eq!(e.stats().unwrap().vectors, 0);
        assert_eq!(e.get(&[MemoryRef::Id(id)], false).unwrap().len(), 1);
    }

    #[test]
    fn the_vector_dump_is_reloaded_and_a_corrupt_one_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::for_db(dir.path().join("memory.db"));
        let q = query("solar panels on the roof", RecallMode::Vector);
        let before = {
            let e = Engine::open(cfg.clone()).unwrap();
            for i in 0..50 {
                remember_one(
                    &e,
                    item(&format!(
                        "note {i}: the roof has {i} solar panels and a garden"
                    )),
                );
            }
            let p = e.recall(&q).unwrap();
            ids(&p.hits)
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        }; // dropped: the index is dumped
        let vdir = cfg.vector_index_dir();
        assert!(std::fs::read_dir(&vdir).unwrap().count() > 0);
        {
            let e = Engine::open(cfg.clone()).unwrap();
            let p = e.recall(&q).unwrap();
            assert_eq!(ids(&p.hits), before);
        }
        for f in std::fs::read_dir(&vdir).unwrap() {
            let f = f.unwrap().path();
            if f.is_file() {
                std::fs::write(&f, b"garbage").unwrap();
            }
        }
        let e = Engine::open(cfg).unwrap();
        let p = e.recall(&q).unwrap();
        assert_eq!(ids(&p.hits), before);
    }
}

fn knows(from: &str, to: &str) -> RelateItem {
    RelateItem {
        from: from.into(),
        to: to.into(),
        kind: "knows".into(),
        weight: Some(0.5),
        metadata: None,
        namespace: None,
    }
}

// A hit's relation count comes from the graph when the recall expanded through it, from the
// database otherwise; both count the relations a walk can follow (none to a forgotten memory).
#[test]
fn a_hit_counts_the_relations_it_can_be_walked_along() {
    let (_d, e) = temp_engine();
    let hub = remember_one(&e, item("the zeppelin hangar"));
    let b = remember_one(&e, item("node b"));
    let c = remember_one(&e, item("node c"));
    for r in e
        .relate(&[knows(&hub, &b), knows(&hub, &c), knows(&c, &hub)])
        .unwrap()
    {
        r.unwrap();
    }
    let count = |expand: u8| {
        let page = e
            .recall(&RecallQuery {
                text: "zeppelin".into(),
                mode: RecallMode::Text,
                expand,
                limit: 10,
                ..RecallQuery::default()
            })
            .unwrap();
        assert_eq!(page.hits[0].memory.id, hub);
        page.hits[0].n_relations
    };
    assert_eq!((count(0), count(2)), (3, 3));
    e.forget(&[MemoryRef::Id(c)], &[], "test").unwrap();
    assert_eq!((count(0), count(2)), (1, 1));
}

#[test]
fn a_walk_holds_a_snapshot_and_never_blocks_writers_or_other_graph_reads() {
    let (_d, e) = temp_engine();
    let a = remember_one(&e, item("node a"));
    let b = remember_one(&e, item("node b"));
    let c = remember_one(&e, item("node c"));
    e.relate(&[knows(&a, &b)]).unwrap().remove(0).unwrap();
    let e = Arc::new(e);
    // A long walk in progress: it holds its snapshot of the graph the whole time.
    let walk = e.synced_graph().unwrap();
    assert_eq!(walk.edge_count(), 1);
    let (tx, rx) = std::sync::mpsc::channel();
    let other = Arc::clone(&e);
    let (a2, c2) = (a.clone(), c.clone());
    std::thread::spawn(move || {
        other.relate(&[knows(&a2, &c2)]).unwrap().remove(0).unwrap();
        let edges = other.with_graph(|g| g.edge_count()).unwrap();
        let _ = tx.send(edges);
    });
    let edges = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("a write and a graph read finish while a walk runs");
    assert_eq!(edges, 2, "the next graph read sees the write");
    assert_eq!(walk.edge_count(), 1, "the walk's snapshot is unchanged");
}

#[test]
fn a_panic_in_a_write_or_a_graph_change_leaves_the_engine_working() {
    let (_d, e) = temp_engine();
    let a = remember_one(&e, item("node a"));
    let b = remember_one(&e, item("node b"));
    e.relate(&[knows(&a, &b)]).unwrap().remove(0).unwrap();
    e.sync_graph().unwrap();
    // A panic inside a write transaction.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.store
            .write(|_| -> crate::error::Result<()> { panic!("forced") })
    }));
    assert!(panicked.is_err());
    // A panic while the graph is being changed.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.graph.panic_holding_state();
    }));
    assert!(panicked.is_err());
    // The same for the vector state and the writer of every other lock.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.vectors.panic_holding_index();
    }));
    assert!(panicked.is_err());
    let c = remember_one(&e, item("node c written after the panics"));
    e.relate(&[knows(&a, &c)]).unwrap().remove(0).unwrap();
    assert_eq!(
        e.with_graph(|g| g.edge_count()).unwrap(),
        2,
        "graph reloaded"
    );
    assert_eq!(recall_ids(&e, "panics"), [c]);
}

/// Every relation of the engine's graph, sorted (see [`crate::graph::tests::edge_list`]).
#[allow(clippy::type_complexity)]
fn graph_edges(e: &Engine) -> Vec<(i64, i64, i64, String, f32, i64, i64)> {
    e.with_graph(crate::graph::tests::edge_list).unwrap()
}

#[test]
fn a_restart_reads_the_graph_file_and_replays_what_changed_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let ids: Vec<String> = {
        let e = Engine::open(Config::for_db(&db)).unwrap();
        let ids: Vec<String> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| remember_one(&e, item(&format!("node {n}"))))
            .collect();
        for w in ids.windows(2) {
            e.relate(&[knows(&w[0], &w[1])]).unwrap().remove(0).unwrap();
        }
        e.sync_graph().unwrap();
        assert!(!e.graph_stats().unwrap().from_file);
        ids
    };
    let file = Config::for_db(&db)
        .index_dir
        .join(crate::index::graph_file::FILE_NAME);
    assert!(file.exists(), "closing writes the graph file");
    {
        // Another process changes the relations without loading the graph.
        let e = Engine::open(Config::for_db(&db)).unwrap();
        e.relate(&[knows(&ids[0], &ids[3])])
            .unwrap()
            .remove(0)
            .unwrap();
        e.forget(&[MemoryRef::Id(ids[1].clone())], &[], "t")
            .unwrap();
    }
    let from_file = {
        let e = Engine::open(Config::for_db(&db)).unwrap();
        assert!(e.graph_stats().unwrap().from_file);
        graph_edges(&e)
    };
    assert_eq!(
        from_file.len(),
        2,
        "c-d and the new a-d; b's relations went with it"
    );
    std::fs::remove_file(&file).unwrap();
    let e = Engine::open(Config::for_db(&db)).unwrap();
    assert!(!e.graph_stats().unwrap().from_file);
    assert_eq!(
        graph_edges(&e),
        from_file,
        "the same graph as from the database"
    );
}

#[test]
fn a_graph_file_of_another_history_or_damaged_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let backup = dir.path().join("backup.db");
    let (a, b) = {
        let e = Engine::open(Config::for_db(&db)).unwrap();
        (
            remember_one(&e, item("node a")),
            remember_one(&e, item("node b")),
        )
    };
    copy_db(&db, &backup);
    {
        let e = Engine::open(Config::for_db(&db)).unwrap();
        e.relate(&[knows(&a, &b)]).unwrap().remove(0).unwrap();
        e.sync_graph().unwrap();
    }
    // The backup from before the relation comes back; the newer graph file stays beside it.
    copy_db(&backup, &db);
    {
        let e = Engine::open(Config::for_db(&db)).unwrap();
        remember_one(&e, item("node c, written after the restore"));
        let stats = e.graph_stats().unwrap();
        assert!(!stats.from_file, "the file is of another history");
        assert_eq!(stats.relations, 0, "the restored database has no relation");
    }
    let file = Config::for_db(&db)
        .index_dir
        .join(crate::index::graph_file::FILE_NAME);
    std::fs::write(&file, b"MGGRAPH1 damaged").unwrap();
    let e = Engine::open(Config::for_db(&db)).unwrap();
    e.relate(&[knows(&a, &b)]).unwrap().remove(0).unwrap();
    let stats = e.graph_stats().unwrap();
    assert!(!stats.from_file);
    assert_eq!(stats.relations, 1);
}

/// A run's progress reports, with something done to the lease at the `at`-th report.
struct LeaseProbe {
    reports: std::sync::atomic::AtomicUsize,
    /// `(report number, what to do)`.
    on: Vec<(usize, LeaseAct)>,
    /// Whether another holder could take the lease when it tried.
    intruder_got_it: std::sync::Mutex<Option<bool>>,
    engine_path: std::path::PathBuf,
}

#[derive(Clone, Copy)]
enum LeaseAct {
    /// Leave the lease looking silent for longer than it may, then wait past a renewal.
    GoQuietAndWait,
    /// Another holder tries to take it the ordinary way.
    TryToTake,
    /// Another holder takes it whatever its state.
    TakeOver,
}

impl LeaseProbe {
    fn new(engine: &Engine, on: Vec<(usize, LeaseAct)>) -> LeaseProbe {
        LeaseProbe {
            reports: Default::default(),
            on,
            intruder_got_it: Default::default(),
            engine_path: engine.config().db_path.clone(),
        }
    }
}

impl crate::engine::control::Control for LeaseProbe {
    fn report(&self, _p: &crate::engine::control::WorkProgress) {
        use crate::engine::curate::{LEASE, LEASE_STALE_MS};
        use crate::store::runs;
        let n = self
            .reports
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let Some(&(_, act)) = self.on.iter().find(|(at, _)| *at == n) else {
            return;
        };
        // A second connection, as another process would have.
        let other = crate::store::Store::open(&Config::for_db(&self.engine_path)).unwrap();
        let now = crate::model::now_millis();
        match act {
            LeaseAct::GoQuietAndWait => {
                other
                    .write(|tx| {
                        let held = runs::lease(tx, LEASE)?.expect("the run holds the lease");
                        let back = now - LEASE_STALE_MS - 10_000;
                        let took = runs::take_lease(
                            tx,
                            LEASE,
                            &held.holder,
                            held.run_id.as_deref(),
                            back,
                            LEASE_STALE_MS,
                        )?;
                        assert!(took.is_ok(), "its own holder takes it again");
                        assert_eq!(runs::lease(tx, LEASE)?.map(|l| l.heartbeat_at), Some(back));
                        Ok(())
                    })
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2_200));
            }
            LeaseAct::TryToTake => {
                let got = other
                    .write(|tx| {
                        runs::take_lease(
                            tx,
                            LEASE,
                            "run:intruder",
                            Some("intruder"),
                            now,
                            LEASE_STALE_MS,
                        )
                    })
                    .unwrap()
                    .is_ok();
                *self.intruder_got_it.lock().unwrap() = Some(got);
            }
            LeaseAct::TakeOver => other
                .write(|tx| {
                    runs::take_lease(tx, LEASE, "run:intruder", Some("intruder"), now, 0).map(drop)
                })
                .unwrap(),
        }
    }
    fn is_cancelled(&self) -> bool {
        false
    }
}

fn consolidate_req(steps: &[&str]) -> crate::engine::curate::ConsolidateRequest {
    crate::engine::curate::ConsolidateRequest {
        steps: Some(steps.iter().map(|s| s.to_string()).collect()),
        started_by: "test".into(),
        ..Default::default()
    }
}

#[test]
fn a_run_keeps_its_lease_while_it_plans_and_commits_nothing() {
    let (_d, e) = temp_engine();
    // Two namespaces without duplicates: the merge step plans each and commits nothing between.
    for ns in ["one", "two"] {
        remember_one(
            &e,
            RememberItem {
                namespace: Some(ns.into()),
                ..item(&format!("a single note of namespace {ns}"))
            },
        );
    }
    let probe = LeaseProbe::new(
        &e,
        vec![(1, LeaseAct::GoQuietAndWait), (2, LeaseAct::TryToTake)],
    );
    let report = e.consolidate(&consolidate_req(&["merge"]), &probe).unwrap();
    assert_eq!(report.state, "completed");
    assert_eq!(
        *probe.intruder_got_it.lock().unwrap(),
        Some(false),
        "the lease went stale while the run planned: another run could start beside it"
    );
}

#[test]
fn a_run_whose_lease_was_taken_over_stops_without_writing_its_batch() {
    let (_d, e) = temp_engine();
    remember_one(
        &e,
        item("Greta keeps bees on the roof of her house in Porto."),
    );
    remember_one(
        &e,
        item("Greta keeps bees on the roof of her house in Porto!"),
    );
    let probe = LeaseProbe::new(&e, vec![(1, LeaseAct::TakeOver)]);
    let err = e
        .consolidate(&consolidate_req(&["merge"]), &probe)
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert!(err.to_string().contains("another run took"), "{err}");
    let run = e.consolidation_runs(1).unwrap().remove(0);
    assert_eq!(run.state, "failed");
    let hits = recall_ids(&e, "Greta bees Porto");
    assert_eq!(hits.len(), 2, "nothing was merged: {hits:?}");
}

#[test]
fn a_memory_holding_the_rare_words_of_a_question_outranks_one_named_by_a_common_one() {
    let (_d, e) = temp_engine();
    let named = |name: &str, content: &str| RememberItem {
        name: Some(name.into()),
        ..item(content)
    };
    let alice = remember_one(
        &e,
        named("alice", "Alice is the tech lead of the Atlas project"),
    );
    let atlas = remember_one(
        &e,
        named(
            "atlas",
            "The Atlas project ships its first release in March",
        ),
    );
    remember_one(
        &e,
        item("Alice prefers green tea over coffee in the morning"),
    );
    remember_one(
        &e,
        item("Deploys of Atlas go through the staging cluster first"),
    );
    // BM25 alone ranks the Atlas memory first (its name matches "atlas"); it does not hold
    // "leads", the question's rarest word, which the first does.
    for mode in [RecallMode::Text, RecallMode::Hybrid] {
        let ids = recall_ids_in(&e, "Who leads the Atlas project?", mode);
        assert_eq!(ids[..2], [alice.clone(), atlas.clone()], "{mode:?}");
    }
    // A named entity is still found first by its name alone.
    assert_eq!(recall_ids(&e, "atlas")[0], atlas);
}
