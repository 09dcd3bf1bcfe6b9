//! Criterion benchmarks of the vector index: top-10 search over 100,000 unit vectors of dim 256
//! (all keys, and predicates keeping half and a tenth of them), loading that index from its
//! dump, and building a 10,000-vector index. The 100,000-vector build is too long to repeat, so
//! the setup times it once and reports it on stderr with per-query search percentiles, recall@10
//! against the exact scan, dump size and resident memory. Run: `cargo bench --bench vector`.

#[allow(dead_code)]
mod fixture;

use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use mnemograph::index::vector::{LoadState, Scope, VectorIndex};

use fixture::Rng;

/// Vectors in the big index.
const N: usize = 100_000;
/// Vector length (the built-in model's).
const DIM: usize = 256;
/// Hits asked of each search.
const K: usize = 10;
/// Cluster centres the vectors are drawn around.
const CLUSTERS: usize = 1_000;
/// Per-coordinate noise around a centre, times 1/sqrt(DIM): cosine to the centre about 0.75.
const NOISE: f32 = 0.9;
/// Distinct queries cycled through, and timed one by one for the percentiles.
const N_QUERIES: usize = 1_000;
/// Queries whose hits are checked against the exact scan.
const RECALL_QUERIES: usize = 200;
/// Vectors per upsert call while building (as the engine feeds them).
const BATCH: usize = 1_000;
/// Vectors in the index whose build is sampled by criterion.
const SMALL_N: usize = 10_000;
const MODEL: &str = "bench-model";
const SEED: u64 = 0x7665_6374_6f72_7331;

fn log(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

fn gauss(rng: &mut Rng) -> f32 {
    let u = rng.unit().max(1e-12);
    let v = rng.unit();
    ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
}

fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Seeded unit vectors around `CLUSTERS` random centres; `stream` keeps data and queries apart.
fn vectors(stream: u64, n: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(SEED);
    let centres: Vec<Vec<f32>> = (0..CLUSTERS)
        .map(|_| normalized((0..DIM).map(|_| gauss(&mut rng)).collect()))
        .collect();
    let mut rng = Rng::new(SEED ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let sigma = NOISE / (DIM as f32).sqrt();
    (0..n)
        .map(|_| {
            let c = &centres[rng.below(CLUSTERS as u64) as usize];
            normalized(c.iter().map(|x| x + sigma * gauss(&mut rng)).collect())
        })
        .collect()
}

fn build(points: &[Vec<f32>]) -> VectorIndex {
    let index = VectorIndex::new(MODEL, DIM).expect("an empty index");
    for (b, chunk) in points.chunks(BATCH).enumerate() {
        let items: Vec<(u64, Vec<f32>)> = chunk
            .iter()
            .enumerate()
            .map(|(i, v)| ((b * BATCH + i) as u64, v.clone()))
            .collect();
        index.upsert(&items).expect("upsert");
    }
    index
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The 100,000-vector index, its queries and its dump; figures of the one-off steps on stderr.
struct Big {
    index: VectorIndex,
    queries: Vec<Vec<f32>>,
    dump: tempfile::TempDir,
}

fn big() -> Big {
    let points = vectors(1, N);
    let queries = vectors(2, N_QUERIES);
    let rss_before = fixture::resident_bytes();
    let started = Instant::now();
    let index = build(&points);
    let built = started.elapsed();
    let rss_after = fixture::resident_bytes();
    drop(points);
    log(format_args!(
        "vector/build: {N} vectors of dim {DIM}, batches of {BATCH}: {built:.2?} ({:.0} vectors/s)",
        N as f64 / built.as_secs_f64()
    ));
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        let per = after.saturating_sub(before) as f64 / N as f64;
        log(format_args!(
            "vector/memory: resident +{:.0} MiB for the index, {per:.0} bytes per vector \
             ({} of them the vector, as f16)",
            after.saturating_sub(before) as f64 / (1 << 20) as f64,
            DIM * 2
        ));
    }

    let mut times: Vec<Duration> = queries
        .iter()
        .map(|q| {
            let t = Instant::now();
            black_box(index.search(q, K, Scope::All));
            t.elapsed()
        })
        .collect();
    times.sort();
    log(format_args!(
        "vector/search k={K} over {N}: p50 {:.0?}, p90 {:.0?}, p99 {:.0?}, max {:.0?}",
        percentile(&times, 0.5),
        percentile(&times, 0.9),
        percentile(&times, 0.99),
        times[times.len() - 1]
    ));
    let mut found = 0usize;
    for q in &queries[..RECALL_QUERIES] {
        let truth: Vec<u64> = index.exact(q, K, Scope::All).iter().map(|h| h.0).collect();
        found += index
            .search(q, K, Scope::All)
            .iter()
            .filter(|h| truth.contains(&h.0))
            .count();
    }
    log(format_args!(
        "vector/recall@{K}: {:.4} over {RECALL_QUERIES} queries",
        found as f64 / (RECALL_QUERIES * K) as f64
    ));

    let dump = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    index.dump(dump.path()).expect("dump");
    log(format_args!(
        "vector/dump: {:.2?}, {:.0} MiB on disk",
        started.elapsed(),
        dir_bytes(dump.path()) as f64 / (1 << 20) as f64
    ));
    Big {
        index,
        queries,
        dump,
    }
}

fn benches(c: &mut Criterion) {
    let big = big();
    let mut g = c.benchmark_group("vector");
    g.throughput(Throughput::Elements(1));

    let mut i = 0usize;
    g.bench_function("search_k10_100k", |b| {
        b.iter(|| {
            let q = &big.queries[i % big.queries.len()];
            i += 1;
            let hits = big.index.search(black_box(q), K, Scope::All);
            assert_eq!(hits.len(), K);
            hits
        })
    });

    // Half the keys in scope: the graph with its candidates filtered. A tenth: a scan of those
    // keys is cheaper, and is what runs.
    for (name, share) in [("predicate_50pct", 2u64), ("predicate_10pct", 10)] {
        let accept = move |k: u64| k % share == 1;
        let mut i = 0usize;
        g.bench_function(format!("search_k10_100k_{name}"), |b| {
            b.iter(|| {
                let q = &big.queries[i % big.queries.len()];
                i += 1;
                let hits = big.index.search(black_box(q), K, Scope::Predicate(&accept));
                assert_eq!(hits.len(), K);
                hits
            })
        });
    }

    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("load_100k", |b| {
        b.iter_with_large_drop(|| {
            let (index, state) = VectorIndex::load(big.dump.path(), MODEL, DIM).expect("loads");
            assert_eq!(state, LoadState::Loaded);
            assert_eq!(index.len(), N);
            index
        })
    });

    let small = vectors(3, SMALL_N);
    g.throughput(Throughput::Elements(SMALL_N as u64));
    g.measurement_time(Duration::from_secs(30));
    g.bench_function("build_10k", |b| {
        b.iter_batched(|| (), |()| build(&small), BatchSize::PerIteration)
    });
    g.finish();
}

criterion_group! {
    name = vector;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .sample_size(50);
    targets = benches
}
criterion_main!(vector);
