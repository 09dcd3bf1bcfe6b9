//! Recall's ranking on small memories whose right answer is plain: names that do not shout, and
//! meaning that carries what the words do not.

use crate::config::Config;
use crate::engine::{Engine, RememberItem};
use crate::model::{RecallMode, RecallQuery};

/// A fresh engine on a real SQLite file with the built-in embedder, holding `items`.
fn engine_with(dir: &std::path::Path, items: &[RememberItem]) -> Engine {
    std::fs::create_dir_all(dir).unwrap();
    let e = Engine::open(Config::for_db(dir.join("memory.db"))).unwrap();
    if !items.is_empty() {
        for r in e.remember(items).unwrap() {
            r.unwrap();
        }
    }
    e
}

fn fact(content: &str, name: Option<&str>) -> RememberItem {
    RememberItem {
        content: content.into(),
        name: name.map(str::to_owned),
        kind: Some("fact".into()),
        ..RememberItem::default()
    }
}

/// The demo's memories.
fn team() -> Vec<RememberItem> {
    vec![
        fact("Alice is the tech lead of the Atlas project", Some("alice")),
        fact(
            "The Atlas project ships its first release in March",
            Some("atlas"),
        ),
        fact("Alice prefers green tea over coffee in the morning", None),
        fact(
            "Deploys of Atlas go through the staging cluster first",
            None,
        ),
    ]
}

/// The hits' contents, best first, at the default settings but `mode`.
fn contents(e: &Engine, text: &str, mode: RecallMode) -> Vec<String> {
    e.recall(&RecallQuery {
        text: text.into(),
        limit: 10,
        mode,
        ..RecallQuery::default()
    })
    .unwrap()
    .hits
    .into_iter()
    .map(|h| h.memory.content)
    .collect()
}

fn first(e: &Engine, text: &str, mode: RecallMode) -> String {
    contents(e, text, mode)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{text:?} ({mode:?}) found nothing"))
}

const TEA: &str = "Alice prefers green tea over coffee in the morning";

// A memory named `alice` that says "Alice is the tech lead" used to win every query naming
// her, by words (the name matched again, twice as heavy) and by meaning (the name embedded
// again), whatever the query asked about her.
#[test]
fn a_name_the_content_already_says_does_not_count_twice() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), &team());
    for mode in [RecallMode::Hybrid, RecallMode::Vector] {
        assert_eq!(first(&e, "what does Alice drink?", mode), TEA, "{mode:?}");
    }
    // A question about the named memory still finds it; a query that is a whole name finds
    // that memory first (whatever its case and separators); a name's own words (not in its
    // content) find it too.
    assert_eq!(
        first(&e, "Who leads the Atlas project?", RecallMode::Hybrid),
        "Alice is the tech lead of the Atlas project"
    );
    for q in ["alice", "Alice"] {
        assert_eq!(
            first(&e, q, RecallMode::Text),
            "Alice is the tech lead of the Atlas project"
        );
    }
    let e2 = engine_with(
        &dir.path().join("b"),
        &[
            fact(
                "Deploys go through the staging cluster first",
                Some("atlas runbook"),
            ),
            fact("The cluster has three nodes", None),
        ],
    );
    assert_eq!(
        first(&e2, "Atlas-Runbook", RecallMode::Hybrid),
        "Deploys go through the staging cluster first"
    );
    assert_eq!(
        first(&e2, "runbook", RecallMode::Text),
        "Deploys go through the staging cluster first"
    );
}

// "drink" is in no memory: the meaning half must carry it.
#[test]
fn meaning_finds_what_the_words_do_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), &team());
    for q in ["drink", "beverages", "hot drinks"] {
        assert_eq!(first(&e, q, RecallMode::Hybrid), TEA, "{q}");
    }
    // Words nothing relates to find nothing by meaning in hybrid mode.
    assert!(contents(&e, "xyzzy plugh", RecallMode::Hybrid).is_empty());
}

/// Remembers `content` named `name`, following the memory named `after`; its id.
fn turn(e: &Engine, content: &str, name: &str, after: Option<&str>) -> String {
    let item = RememberItem {
        content: content.into(),
        name: Some(name.into()),
        kind: Some("turn".into()),
        links: after
            .map(|a| crate::engine::Link {
                to: a.into(),
                kind: "follows".into(),
                weight: None,
            })
            .into_iter()
            .collect(),
        ..RememberItem::default()
    };
    e.remember(&[item]).unwrap().remove(0).unwrap().id
}

// A chat's turn beside a short match used to inherit 0.9 of the match's score whatever it said,
// and took the place of a direct match ranked below that: expansion crowded the page.
#[test]
fn a_neighbour_of_a_short_match_earns_its_place_by_its_own_meaning() {
    use crate::engine::recall::{EXPAND_DECAY, LONG_SOURCE_WORDS};
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), &[]);
    let sunrise = "Melanie painted a sunrise over the lake";
    turn(&e, sunrise, "t1", None);
    let chat = turn(
        &e,
        "Anyway, how was the rest of your week?",
        "t2",
        Some("t1"),
    );
    let other = "Melanie watched a sunrise over the sea";
    turn(&e, other, "o1", None);
    let page = |text: &str| {
        e.recall(&RecallQuery {
            text: text.into(),
            limit: 10,
            explain: true,
            ..RecallQuery::default()
        })
        .unwrap()
        .hits
    };
    let hits = page("Melanie painted a sunrise");
    let got: Vec<&str> = hits.iter().map(|h| h.memory.content.as_str()).collect();
    assert_eq!(got[..2], [sunrise, other]);
    let (best, direct) = (hits[0].score, hits[1].score);
    let beside = hits.iter().find(|h| h.memory.id == chat).unwrap();
    // Inheriting in full, the chat would rank above the direct match.
    assert!(best * EXPAND_DECAY > direct, "{best} × 0.9 vs {direct}");
    assert!(beside.score < direct, "{} vs {direct}", beside.score);
    assert!(beside.explain.as_ref().unwrap().expanded.is_some());

    // A long match (an answer of many sentences) passes its score on whole to the turn beside
    // it, what it answers.
    let long = format!(
        "{sunrise}. {}",
        "She kept at it every morning before the mist lifted off the water. ".repeat(6)
    );
    assert!(long.split_whitespace().count() as f32 >= LONG_SOURCE_WORDS);
    let e2 = engine_with(&dir.path().join("b"), &[]);
    turn(&e2, &long, "t1", None);
    let chat = turn(
        &e2,
        "Anyway, how was the rest of your week?",
        "t2",
        Some("t1"),
    );
    let hits = e2
        .recall(&RecallQuery {
            text: "Melanie painted a sunrise".into(),
            limit: 10,
            ..RecallQuery::default()
        })
        .unwrap()
        .hits;
    assert_eq!(hits[0].memory.content, long);
    let beside = hits.iter().find(|h| h.memory.id == chat).unwrap();
    let want = hits[0].score * EXPAND_DECAY;
    assert!(
        (beside.score - want).abs() < 1e-5,
        "{} vs {want}",
        beside.score
    );
}

/// A recall scoped to namespaces searches by meaning within them through the vector index's own
/// record of each vector's namespace (no keys read from the database), which a reopened index
/// learns again from the database: its dump does not keep them.
#[test]
fn a_namespace_scoped_search_by_meaning_stays_in_its_namespaces_across_a_restart() {
    use crate::model::NamespaceScope;
    let dir = tempfile::tempdir().unwrap();
    let in_ns = |content: &str, ns: &str| RememberItem {
        namespace: Some(ns.into()),
        ..fact(content, None)
    };
    let items = vec![
        in_ns(TEA, "kitchen"),
        in_ns("The kettle is descaled every Sunday", "kitchen"),
        in_ns("Bob drinks black coffee with his lunch", "office"),
        in_ns("The garage door opener needs new batteries", "garage"),
    ];
    let scoped = |e: &Engine, text: &str, ns: &str| -> Vec<String> {
        e.recall(&RecallQuery {
            text: text.into(),
            limit: 10,
            mode: RecallMode::Vector,
            namespaces: NamespaceScope::Only(vec![ns.into()]),
            ..RecallQuery::default()
        })
        .unwrap()
        .hits
        .into_iter()
        .map(|h| {
            assert_eq!(h.memory.namespace, ns, "{text:?} in {ns}");
            h.memory.content
        })
        .collect()
    };
    let drinks = "what does she like to drink";
    let before = {
        let e = engine_with(dir.path(), &items);
        let kitchen = scoped(&e, drinks, "kitchen");
        assert_eq!(kitchen.first().map(String::as_str), Some(TEA));
        let office = scoped(&e, drinks, "office");
        assert_eq!(office, ["Bob drinks black coffee with his lunch"]);
        assert_eq!(e.vectors_unplaced(), Some(0));
        (kitchen, office)
    };
    // Reopened: every vector placed before any search, the same answers.
    let reopened = || {
        let e = engine_with(dir.path(), &[]);
        e.ensure_vectors(true).unwrap();
        assert_eq!(e.vectors_unplaced(), Some(0));
        assert_eq!(
            (scoped(&e, drinks, "kitchen"), scoped(&e, drinks, "office")),
            before
        );
        e
    };
    // The dump is loaded and its vectors placed again.
    let e = reopened();
    let oil = "Motor oil for the car is changed every spring";
    e.remember(&[in_ns(oil, "garage")]).unwrap();
    assert_eq!(
        scoped(&e, "engine lubricant", "garage")
            .first()
            .map(String::as_str),
        Some(oil)
    );
    assert!(!scoped(&e, "engine lubricant", "kitchen").contains(&oil.to_owned()));
    assert_eq!(e.vectors_unplaced(), Some(0));
    // Without the dump and the compact file, the index is filled from the stored vectors, each
    // placed from the row that brings it, no memory read again for them.
    let vector_dir = Config::for_db(dir.path().join("memory.db")).vector_index_dir();
    drop(e);
    std::fs::remove_dir_all(vector_dir).unwrap();
    reopened();
}
