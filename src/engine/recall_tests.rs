//! Recall's ranking on small memories whose right answer is plain: names that do not shout, and
//! meaning that carries what the words do not.

use crate::config::Config;
use crate::engine::{Engine, RememberItem};
use crate::model::{RecallMode, RecallQuery};

/// A fresh engine on a real SQLite file with the built-in embedder, holding `items`.
fn engine_with(dir: &std::path::Path, items: &[RememberItem]) -> Engine {
    std::fs::create_dir_all(dir).unwrap();
    let e = Engine::open(Config::for_db(dir.join("memory.db"))).unwrap();
    for r in e.remember(items).unwrap() {
        r.unwrap();
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
