//! The tools end to end, in both protocol eras: remember, recall, relate, get, update, forget,
//! restore, stats and recall paging.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::support::{Era, TestDb, hit_ids, ids_of_results};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remember_recall_round_trip_and_idempotent_remember() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let ids = s
            .remember(json!([
                {"content": "Alice drinks espresso every morning", "namespace": "rt", "kind": "fact",
                 "tags": ["people", "coffee"], "importance": 0.8, "metadata": {"source": "chat"}},
                {"content": "Bob prefers green tea in the afternoon", "namespace": "rt"},
                {"content": "The build server runs on Debian", "namespace": "rt"}
            ]))
            .await;
        assert_eq!(ids.len(), 3);
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3, "{ids:?}");

        let out = s
            .ok(
                "recall",
                json!({"query": "who drinks espresso?", "namespace": "rt"}),
            )
            .await;
        let hits = out["hits"].as_array().expect("hits");
        assert_eq!(hits.len(), 1, "{era:?}: {out}");
        assert_eq!(hits[0]["id"], ids[0].as_str());
        assert_eq!(hits[0]["namespace"], "rt");
        assert_eq!(hits[0]["kind"], "fact");
        assert!(hits[0]["score"].as_f64().expect("score") > 0.0);
        assert!(
            hits[0]["snippet"]
                .as_str()
                .expect("snippet")
                .contains("espresso"),
            "{out}"
        );
        assert!(out.get("next_cursor").is_none(), "{out}");

        let full = s
            .ok(
                "recall",
                json!({"query": "tea", "namespace": "rt", "full": true, "tags": []}),
            )
            .await;
        assert_eq!(full["hits"][0]["id"], ids[1].as_str());
        assert_eq!(
            full["hits"][0]["content"],
            "Bob prefers green tea in the afternoon"
        );

        // Filters: tags and kinds narrow the hits.
        let tagged = s
            .recall_ids(json!({"query": "espresso tea Debian", "tags": ["coffee"]}))
            .await;
        assert_eq!(tagged, [ids[0].clone()]);
        let facts = s
            .recall_ids(json!({"query": "espresso tea Debian", "kinds": ["fact"]}))
            .await;
        assert_eq!(facts, [ids[0].clone()]);

        let important = s
            .recall_ids(json!({"query": "espresso tea Debian", "min_importance": 0.7}))
            .await;
        assert_eq!(important, [ids[0].as_str()]);
        let since = s
            .recall_ids(json!({"query": "espresso tea Debian", "since": "2000-01-01"}))
            .await;
        assert_eq!(since.len(), 3, "{since:?}");
        let until = s
            .recall_ids(json!({"query": "espresso tea Debian", "until": "2000-01-01T00:00:00Z"}))
            .await;
        assert!(until.is_empty(), "{until:?}");
        let several = s
            .recall_ids(json!({"query": "espresso tea Debian", "namespaces": ["nowhere", "rt"]}))
            .await;
        assert_eq!(several.len(), 3, "{several:?}");

        // The same unnamed content, kind and validity in the same namespace is stored once.
        let again = s
            .ok(
                "remember",
                json!({"memories": [
                    {"content": "Alice drinks espresso every morning", "namespace": "rt", "kind": "fact"},
                    {"content": "Alice drinks espresso every morning", "namespace": "elsewhere", "kind": "fact"}
                ]}),
            )
            .await;
        assert_eq!(again["ok"], 2, "{again}");
        assert_eq!(again["results"][0]["id"], ids[0].as_str(), "{again}");
        assert_eq!(again["results"][0]["duplicate"], true, "{again}");
        assert_ne!(again["results"][1]["id"], ids[0].as_str(), "{again}");
        assert_eq!(again["results"][1]["duplicate"], false, "{again}");

        let stats = s.ok("stats", json!({})).await;
        assert_eq!(stats["memories"], 4, "{stats}");
        let rt = stats["by_namespace"]
            .as_array()
            .expect("by_namespace")
            .iter()
            .find(|c| c["name"] == "rt")
            .cloned();
        assert_eq!(rt.map(|c| c["count"].clone()), Some(json!(3)), "{stats}");

        let espresso = s
            .recall_ids(json!({"query": "espresso", "namespace": "rt"}))
            .await;
        assert_eq!(
            espresso,
            [ids[0].clone()],
            "a duplicate must not be indexed twice"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relate_and_get_by_name_within_a_namespace() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let ids = s
            .remember(json!([
                {"content": "Alice, tech lead", "kind": "entity", "name": "alice", "namespace": "proj"},
                {"content": "Atlas, the billing rewrite", "kind": "entity", "name": "atlas", "namespace": "proj"},
                {"content": "Another Alice, in accounting", "kind": "entity", "name": "alice", "namespace": "other"}
            ]))
            .await;
        let (alice, atlas, other_alice) = (&ids[0], &ids[1], &ids[2]);

        let rel = s
            .ok(
                "relate",
                json!({"relations": [{"from": "alice", "to": "atlas", "kind": "leads", "namespace": "proj", "weight": 0.9}]}),
            )
            .await;
        assert_eq!(rel["ok"], 1, "{rel}");
        assert_eq!(rel["results"][0]["created"], true, "{rel}");
        let rel_id = rel["results"][0]["id"]
            .as_str()
            .expect("relation id")
            .to_owned();
        assert!(rel_id.starts_with("r_"), "{rel}");

        // Relating the same pair and kind again updates the one relation.
        let again = s
            .ok(
                "relate",
                json!({"relations": [{"from": alice, "to": atlas, "kind": "leads"}]}),
            )
            .await;
        assert_eq!(again["results"][0]["id"], rel_id.as_str(), "{again}");
        assert_eq!(again["results"][0]["created"], false, "{again}");

        // A link given with a new memory becomes a relation too.
        let linked = s
            .ok(
                "remember",
                json!({"memories": [{"content": "Atlas deploys go through staging", "namespace": "proj",
                                     "links": [{"to": "atlas", "kind": "about"}]}]}),
            )
            .await;
        assert_eq!(linked["results"][0]["links"], 1, "{linked}");
        let note = linked["results"][0]["id"].as_str().expect("id").to_owned();

        let got = s
            .ok("get", json!({"names": ["alice"], "namespace": "proj"}))
            .await;
        let m = &got["memories"][0];
        assert_eq!(m["id"], alice.as_str(), "{got}");
        assert_eq!(m["content"], "Alice, tech lead");
        assert_eq!(m["name"], "alice");
        assert_eq!(m["kind"], "entity");
        let rels = m["relations"].as_array().expect("relations");
        assert_eq!(rels.len(), 1, "{got}");
        assert_eq!(rels[0]["id"], rel_id.as_str());
        assert_eq!(rels[0]["from"], alice.as_str());
        assert_eq!(rels[0]["to"], atlas.as_str());
        assert_eq!(rels[0]["kind"], "leads");

        let got = s
            .ok("get", json!({"names": ["atlas"], "namespace": "proj"}))
            .await;
        let rels = got["memories"][0]["relations"]
            .as_array()
            .expect("relations");
        let mut kinds: Vec<(&str, &str)> = rels
            .iter()
            .map(|r| {
                (
                    r["kind"].as_str().unwrap_or(""),
                    r["from"].as_str().unwrap_or(""),
                )
            })
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [("about", note.as_str()), ("leads", alice.as_str())],
            "{got}"
        );

        // The same name in another namespace is another memory, with no relations.
        let got = s
            .ok("get", json!({"names": ["alice"], "namespace": "other"}))
            .await;
        assert_eq!(got["memories"][0]["id"], other_alice.as_str(), "{got}");
        assert_eq!(got["memories"][0]["relations"], json!([]), "{got}");

        // Ids and names can be mixed; the answer keeps the order asked.
        let got = s
            .ok(
                "get",
                json!({"ids": [atlas, other_alice], "names": ["alice"], "namespace": "proj"}),
            )
            .await;
        let order: Vec<&str> = got["memories"]
            .as_array()
            .expect("memories")
            .iter()
            .map(|m| m["id"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            order,
            [atlas.as_str(), other_alice.as_str(), alice.as_str()]
        );

        // Recall reports relation counts.
        let out = s
            .ok(
                "recall",
                json!({"query": "billing rewrite", "namespace": "proj"}),
            )
            .await;
        assert_eq!(out["hits"][0]["id"], atlas.as_str(), "{out}");
        assert_eq!(out["hits"][0]["relations"], 2, "{out}");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_keeps_the_previous_version_in_history() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let ids = s
            .remember(json!([
                {"content": "The office coffee machine is broken", "name": "machine", "tags": ["office"]}
            ]))
            .await;
        let id = &ids[0];

        let updated = s
            .ok(
                "update",
                json!({"id": id, "content": "The office coffee machine was repaired on Monday", "tags": ["office", "fixed"], "importance": 0.9}),
            )
            .await;
        assert_eq!(updated["id"], id.as_str(), "{updated}");
        assert_eq!(updated["version"], 2, "{updated}");
        assert_eq!(updated["tags"], json!(["office", "fixed"]), "{updated}");
        assert_eq!(updated["importance"], 0.9, "{updated}");

        // By name, in the default namespace.
        let again = s
            .ok("update", json!({"name": "machine", "kind": "fact"}))
            .await;
        assert_eq!(again["id"], id.as_str(), "{again}");
        assert_eq!(again["version"], 3, "{again}");
        assert_eq!(again["kind"], "fact", "{again}");

        let got = s.ok("get", json!({"ids": [id], "history": true})).await;
        let m = &got["memories"][0];
        assert_eq!(
            m["content"], "The office coffee machine was repaired on Monday",
            "{got}"
        );
        let history = m["history"].as_array().expect("history");
        assert_eq!(history.len(), 2, "{got}");
        assert!(history.iter().all(|h| h["op"] == "update"), "{got}");
        let previous: Vec<&str> = history
            .iter()
            .map(|h| h["previous"]["content"].as_str().unwrap_or(""))
            .collect();
        assert!(
            previous.contains(&"The office coffee machine is broken"),
            "the first version is kept: {got}"
        );
        assert!(
            history
                .iter()
                .all(|h| h["actor"] == "tool:update" && h["at"].is_string()),
            "{got}"
        );

        // Without history=true there is none.
        let plain = s.ok("get", json!({"ids": [id]})).await;
        assert!(plain["memories"][0].get("history").is_none(), "{plain}");

        // Recall follows the new content and forgets the old words.
        let hits = s
            .recall_ids(json!({"query": "repaired", "mode": "text"}))
            .await;
        assert_eq!(hits, [id.as_str()]);
        let hits = s
            .recall_ids(json!({"query": "broken", "mode": "text"}))
            .await;
        assert!(
            hits.is_empty(),
            "{era:?}: old content still found: {hits:?}"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_and_restore_memories_and_relations() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        let ids = s
            .remember(json!([
                {"content": "Carol owns the payments service", "name": "carol"},
                {"content": "The payments service speaks gRPC", "name": "payments"}
            ]))
            .await;
        let (carol, payments) = (&ids[0], &ids[1]);
        let rel = s
            .ok(
                "relate",
                json!({"relations": [{"from": "carol", "to": "payments", "kind": "owns"}]}),
            )
            .await;
        let rel_id = ids_of_results(&rel).remove(0);

        let forgotten = s.ok("forget", json!({"ids": [carol]})).await;
        assert_eq!(forgotten["memories"], json!([carol]), "{forgotten}");
        let hits = s.recall_ids(json!({"query": "Carol owns payments"})).await;
        assert_eq!(
            hits,
            [payments.as_str()],
            "{era:?}: a forgotten memory was recalled"
        );
        // The forgotten memory still shows in `get`, marked as forgotten.
        let got = s.ok("get", json!({"ids": [carol]})).await;
        assert!(got["memories"][0]["forgotten_at"].is_string(), "{got}");
        let uri = format!("memory://default/{carol}");
        assert!(
            s.read_resource(&uri).await.is_err(),
            "a forgotten memory is not a resource"
        );

        let restored = s.ok("restore", json!({"names": ["carol"]})).await;
        assert_eq!(restored["memories"], json!([carol]), "{restored}");
        let hits = s.recall_ids(json!({"query": "Carol", "expand": 0})).await;
        assert_eq!(
            hits,
            [carol.as_str()],
            "{era:?}: a restored memory was not recalled"
        );
        // By default recall also brings the hit's neighbours, saying how it reached them.
        let page = s.ok("recall", json!({"query": "Carol"})).await;
        assert_eq!(page["hits"][0]["id"], carol.as_str(), "{page}");
        assert_eq!(page["hits"][1]["id"], payments.as_str(), "{page}");
        assert_eq!(page["hits"][1]["via"]["relation"], "owns", "{page}");
        let got = s.ok("get", json!({"ids": [carol]})).await;
        assert!(got["memories"][0].get("forgotten_at").is_none(), "{got}");
        assert_eq!(got["memories"][0]["relations"][0]["id"], rel_id.as_str());

        // A relation by its ends, then back by its id.
        let out = s
            .ok(
                "forget",
                json!({"relations": [{"from": "carol", "to": "payments", "kind": "owns"}]}),
            )
            .await;
        assert_eq!(out["relations"], json!([rel_id]), "{out}");
        let got = s.ok("get", json!({"ids": [carol, payments]})).await;
        for m in got["memories"].as_array().expect("memories") {
            assert_eq!(m["relations"], json!([]), "forgotten relation shown: {got}");
        }
        let out = s
            .ok("restore", json!({"relations": [{"id": rel_id}]}))
            .await;
        assert_eq!(out["relations"], json!([rel_id]), "{out}");
        let got = s.ok("get", json!({"ids": [payments]})).await;
        assert_eq!(
            got["memories"][0]["relations"][0]["id"],
            rel_id.as_str(),
            "{got}"
        );

        let stats = s.ok("stats", json!({})).await;
        assert_eq!(stats["memories"], 2, "{stats}");
        assert_eq!(stats["relations"], 1, "{stats}");
        assert_eq!(stats["forgotten_memories"], 0, "{stats}");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_pages_follow_next_cursor_without_overlap() {
    for era in Era::ALL {
        let db = TestDb::new();
        let s = db.serve(era).await;
        // Several batches, so the index holds several segments.
        let mut all = HashSet::new();
        for batch in 0..5 {
            let memories: Vec<Value> = (0..5)
                .map(|i| {
                    let n = batch * 5 + i;
                    json!({"content": format!("harbour crane log entry {n}: {}", "cargo ".repeat(n % 4 + 1)), "namespace": "pages"})
                })
                .collect();
            all.extend(s.remember(Value::Array(memories)).await);
            // Index each batch before the next one.
            assert!(!s.recall_ids(json!({"query": "harbour"})).await.is_empty());
        }
        let mut seen: Vec<String> = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let mut args = json!({"query": "harbour cargo", "namespace": "pages", "limit": 10});
            if let Some(c) = &cursor {
                args["cursor"] = json!(c);
            }
            let out = s.ok("recall", args).await;
            let ids = hit_ids(&out);
            pages += 1;
            for id in ids {
                assert!(!seen.contains(&id), "{era:?}: {id} on two pages");
                seen.push(id);
            }
            match out.get("next_cursor").and_then(Value::as_str) {
                Some(c) => {
                    assert_eq!(out["hits"].as_array().map(Vec::len), Some(10), "{out}");
                    cursor = Some(c.to_owned());
                }
                None => break,
            }
            assert!(pages < 10, "paging does not end");
        }
        assert_eq!(pages, 3, "{era:?}");
        assert_eq!(seen.len(), 25);
        assert_eq!(seen.iter().cloned().collect::<HashSet<_>>(), all);

        // The pages are the single big page cut in three.
        let one = s
            .recall_ids(json!({"query": "harbour cargo", "namespace": "pages", "limit": 100}))
            .await;
        assert_eq!(one, seen, "{era:?}: pages disagree with one big page");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_previous_versions_in_the_public_shape() {
    let db = TestDb::new();
    let s = db.serve(Era::Discover).await;
    let ids = s
        .remember(json!([{"content": "The standup moved to 9:30", "tags": ["team"]}]))
        .await;
    s.ok(
        "update",
        json!({"id": ids[0], "content": "The standup moved to 10:00"}),
    )
    .await;
    let got = s.ok("get", json!({"ids": [ids[0]], "history": true})).await;
    let current = &got["memories"][0];
    let previous = &current["history"][0]["previous"];
    assert_eq!(previous["content"], "The standup moved to 9:30", "{got}");
    // The internal row id is never shown to users (model::MemoryKey), and times are RFC 3339
    // strings everywhere else in the API.
    assert!(
        previous.get("key").is_none(),
        "history exposes the internal row id: {previous}"
    );
    assert_eq!(previous["id"], current["id"], "{previous}");
    assert!(
        previous["created_at"].is_string() && previous["created_at"] == current["created_at"],
        "history times are not in the API's format: {previous} vs {current}"
    );
    s.stop().await;
}

/// Two agents resuming one piece of work read the same memory, then both write it: with
/// `if_version` the second write is refused with a conflict naming the newer version, so
/// neither overwrites the other silently; without a condition both versions are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_update_from_a_stale_read_is_a_conflict() {
    let db = TestDb::new();
    let (a, b) = (
        db.serve(Era::Initialize).await,
        db.serve(Era::Discover).await,
    );
    let ids = a
        .remember(json!([{"content": "etl-42: step 1 of 3 done", "name": "job-etl-42"}]))
        .await;
    let id = &ids[0];
    let read_a = a.ok("get", json!({"ids": [id]})).await;
    let read_b = b.ok("get", json!({"ids": [id]})).await;
    let version = read_a["memories"][0]["version"].as_i64().expect("version");
    assert_eq!(read_b["memories"][0]["version"], version);

    let first = a
        .ok(
            "update",
            json!({"id": id, "content": "etl-42: step 2 of 3 done", "if_version": version}),
        )
        .await;
    assert_eq!(first["version"], version + 1, "{first}");
    match b
        .call(
            "update",
            json!({"id": id, "content": "etl-42: step 2 failed", "if_version": version}),
        )
        .await
    {
        Err(crate::support::CallError::Tool(m)) => {
            assert!(
                m.contains("conflict")
                    && m.contains(&format!("at version {}", version + 1))
                    && m.contains(&format!("if_version {}", version + 1)),
                "{m}"
            );
        }
        other => panic!("a write from a stale read went through: {other:?}"),
    }
    let now = b.ok("get", json!({"ids": [id], "history": true})).await;
    assert_eq!(
        now["memories"][0]["content"], "etl-42: step 2 of 3 done",
        "{now}"
    );
    // Read again, the write goes through; without a condition it always does, and history
    // keeps every version.
    b.ok(
        "update",
        json!({"id": id, "content": "etl-42: step 2 failed, retrying", "if_version": version + 1}),
    )
    .await;
    a.ok(
        "update",
        json!({"id": id, "content": "etl-42: step 3 of 3 done"}),
    )
    .await;
    let got = a.ok("get", json!({"ids": [id], "history": true})).await;
    let previous: Vec<&str> = got["memories"][0]["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|h| h["previous"]["content"].as_str())
        .collect();
    assert_eq!(
        previous,
        [
            "etl-42: step 2 failed, retrying",
            "etl-42: step 2 of 3 done",
            "etl-42: step 1 of 3 done"
        ],
        "{got}"
    );
    a.stop().await;
    b.stop().await;
}
