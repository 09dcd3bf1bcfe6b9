//! Throughput of the built-in static embedder on one core: memory-sized texts per second.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mnemograph::embed::Embedder;
use mnemograph::embed::static_model::StaticModel;

/// Texts per measured batch.
const BATCH: usize = 1_000;

/// Memory-like sentences of 12–30 words, varied by seed.
fn texts() -> Vec<String> {
    let words = [
        "meeting",
        "project",
        "Alice",
        "deadline",
        "prefers",
        "coffee",
        "server",
        "deploy",
        "Friday",
        "budget",
        "review",
        "the",
        "of",
        "and",
        "customer",
        "asked",
        "about",
        "invoice",
        "travel",
        "Berlin",
        "database",
        "migration",
        "scheduled",
        "weekly",
        "notes",
        "from",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..BATCH)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let n = 12 + (state % 19) as usize;
            (0..n)
                .map(|i| words[((state >> (i % 48)) as usize + i * 7) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn embed(c: &mut Criterion) {
    let model = StaticModel::builtin();
    model.load().expect("the built-in model loads");
    let texts = texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut g = c.benchmark_group("embed");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("builtin static model, 1,000 texts, one core", |b| {
        b.iter(|| model.embed(&refs).expect("embed"))
    });
    g.bench_function("builtin model first load", |b| {
        b.iter(|| StaticModel::builtin().load().expect("load"))
    });
    g.finish();
}

criterion_group!(benches, embed);
criterion_main!(benches);
