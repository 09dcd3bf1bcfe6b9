//! A database of memories and relations for the examples that measure walks and the memory
//! browser, built once and cached under `target/bench-data`: memory `i` says "memory {i} about
//! topic {i % 97} and {i % 13}" (memory 0 is named `root`), and each memory has about
//! `relations / memories` relations of kind `about` — to the next memory, and pseudo-random
//! others.

use std::path::PathBuf;

use mnemograph::engine::{RelateItem, RememberItem};
use mnemograph::{Config, Engine};

use crate::fixture;

/// Bumped when the database recipe changes.
const DATA_VERSION: u32 = 1;

/// The examples' pseudo-random numbers (xorshift64).
pub(crate) fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// The cached database of `memories` memories and `relations` relations (built when missing).
pub(crate) fn database(memories: usize, relations: usize) -> PathBuf {
    let dir =
        fixture::bench_data_dir().join(format!("graph-v{DATA_VERSION}-{memories}-{relations}"));
    let db = dir.join("graph.db");
    if dir.join("complete").exists() {
        return db;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("data dir");
    let engine = Engine::open(Config::for_db(&db)).expect("open");
    let mut ids = Vec::with_capacity(memories);
    for start in (0..memories).step_by(10_000) {
        let items: Vec<RememberItem> = (start..start + 10_000)
            .map(|i| RememberItem {
                content: format!("memory {i} about topic {} and {}", i % 97, i % 13),
                name: (i == 0).then(|| "root".into()),
                ..RememberItem::default()
            })
            .collect();
        ids.extend(
            engine
                .remember(&items)
                .expect("remember")
                .into_iter()
                .map(|r| r.expect("stored").id),
        );
    }
    let mut s = 42u64;
    let mut batch = Vec::with_capacity(10_000);
    let per_memory = relations.div_ceil(memories);
    for n in 0..relations {
        let from = n / per_memory;
        let to = if n % per_memory == 0 {
            (from + 1) % memories
        } else {
            (xorshift(&mut s) % memories as u64) as usize
        };
        if to == from {
            continue;
        }
        batch.push(RelateItem {
            from: ids[from].clone(),
            to: ids[to].clone(),
            kind: "about".into(),
            weight: Some(0.8),
            metadata: None,
            namespace: None,
        });
        if batch.len() == 10_000 {
            engine.relate(&batch).expect("relate");
            batch.clear();
        }
    }
    if !batch.is_empty() {
        engine.relate(&batch).expect("relate");
    }
    engine.sync_text().expect("index");
    drop(engine);
    std::fs::write(dir.join("complete"), b"ok").expect("mark");
    db
}
