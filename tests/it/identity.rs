//! What counts as "the same memory" over stdio: a named memory is its name (distinct turns
//! with the same words stay distinct), an unnamed one is its content, kind and validity.

use serde_json::{Value, json};

use crate::support::{Era, TestDb};

fn duplicate(out: &Value, i: usize) -> bool {
    out["results"][i]["duplicate"] == json!(true)
}

fn id(out: &Value, i: usize) -> String {
    out["results"][i]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id at {i}: {out}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_turns_with_the_same_words_are_distinct_and_unnamed_repeats_are_not() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let turns = s
            .ok(
                "remember",
                json!({"memories": [
                    {"content": "Haha", "name": "turn-1", "kind": "episode"},
                    {"content": "Haha", "name": "turn-2", "kind": "episode"},
                ]}),
            )
            .await;
        assert_eq!(turns["ok"], 2, "{era:?}: {turns}");
        assert!(!duplicate(&turns, 0) && !duplicate(&turns, 1), "{turns}");
        assert_ne!(id(&turns, 0), id(&turns, 1), "{turns}");
        let related = s
            .ok(
                "relate",
                json!({"relations": [{"from": "turn-2", "to": "turn-1", "kind": "follows"}]}),
            )
            .await;
        assert_eq!(related["ok"], 1, "{era:?}: {related}");
        // The same named turn sent again is a repeat.
        let again = s
            .ok(
                "remember",
                json!({"memories": [{"content": "Haha", "name": "turn-2", "kind": "episode"}]}),
            )
            .await;
        assert!(duplicate(&again, 0), "{again}");
        assert_eq!(id(&again, 0), id(&turns, 1));

        let plain = s
            .ok(
                "remember",
                json!({"memories": [{"content": "ok"}, {"content": "ok"}]}),
            )
            .await;
        assert!(!duplicate(&plain, 0) && duplicate(&plain, 1), "{plain}");
        assert_eq!(id(&plain, 0), id(&plain, 1));
        let others = s
            .ok(
                "remember",
                json!({"memories": [
                    {"content": "ok", "kind": "episode"},
                    {"content": "ok", "valid_from": "2024-01-01T00:00:00Z"},
                ]}),
            )
            .await;
        assert!(!duplicate(&others, 0) && !duplicate(&others, 1), "{others}");
        let stats = s.ok("stats", json!({})).await;
        assert_eq!(stats["memories"], 5, "{era:?}: {stats}");
        s.stop().await;
    }
}
