//! The vector index against exact search on seeded data, its dump, its concurrency.
//!
//! Size: the tests share the seeded data (clusters, narrow cones, real sentences) and the recall
//! count against the exact scan; a group that grows its own helpers moves to a file of its own.

use super::topk::{Hit, rank};
use super::*;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::io;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

const MODEL: &str = "test-model";

/// SplitMix64, for seeded data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    fn gauss(&mut self) -> f32 {
        let u = self.unit().max(1e-12);
        let v = self.unit();
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }

    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = dot(&v, &v).sqrt();
    for x in &mut v {
        *x /= norm;
    }
    v
}

#[test]
fn dot_products_match_a_plain_sum_and_do_not_depend_on_the_cpu() {
    let mut rng = Rng(5);
    for len in [0, 1, 7, 8, 31, 32, 33, 64, 255, 256, 384, 1000] {
        let a: Vec<f32> = (0..len).map(|_| rng.gauss()).collect();
        let b: Vec<f32> = (0..len).map(|_| rng.gauss()).collect();
        let plain: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        let got = dot(&a, &b);
        assert!(
            (f64::from(got) - plain).abs() <= 1e-4 * (1.0 + plain.abs()),
            "length {len}: {got} against {plain}"
        );
        assert_eq!(got.to_bits(), dot_lanes(&a, &b).to_bits(), "length {len}");
    }
}

fn random_unit(rng: &mut Rng, dim: usize) -> Vec<f32> {
    normalized((0..dim).map(|_| rng.gauss()).collect())
}

/// A unit vector in a narrow cone around the unit vector `common` (cosine to it about 0.9), as
/// a static model's vectors crowd around their mean.
fn in_cone(common: &[f32], rng: &mut Rng) -> Vec<f32> {
    let noise = random_unit(rng, common.len());
    normalized(
        common
            .iter()
            .zip(&noise)
            .map(|(c, n)| 2.0 * c + n)
            .collect(),
    )
}

/// Unit vectors around `clusters` random centres: cosine to the centre about 0.75, to
/// points of another cluster about 0 — the hard case of near ties inside each cluster.
struct Clusters {
    centres: Vec<Vec<f32>>,
    dim: usize,
}

impl Clusters {
    fn new(seed: u64, clusters: usize, dim: usize) -> Clusters {
        let mut rng = Rng(seed);
        Clusters {
            centres: (0..clusters).map(|_| random_unit(&mut rng, dim)).collect(),
            dim,
        }
    }

    fn points(&self, seed: u64, n: usize) -> Vec<Vec<f32>> {
        let mut rng = Rng(seed);
        let sigma = 0.9 / (self.dim as f32).sqrt();
        (0..n)
            .map(|_| {
                let c = &self.centres[rng.below(self.centres.len())];
                normalized(c.iter().map(|x| x + sigma * rng.gauss()).collect())
            })
            .collect()
    }
}

/// Keys are not slots: key of point i.
fn key(i: usize) -> u64 {
    (i as u64) * 7 + 1_000
}

fn build(points: &[Vec<f32>], dim: usize) -> VectorIndex {
    let index = VectorIndex::new(MODEL, dim).unwrap();
    let items: Vec<(u64, Vec<f32>)> = points
        .iter()
        .enumerate()
        .map(|(i, v)| (key(i), v.clone()))
        .collect();
    for batch in items.chunks(5_000) {
        index.upsert(batch).unwrap();
    }
    index
}

fn keys_of(hits: &[(u64, f32)]) -> Vec<u64> {
    hits.iter().map(|h| h.0).collect()
}

fn recall(index: &VectorIndex, queries: &[Vec<f32>], k: usize, scope: Scope<'_>) -> f64 {
    let mut found = 0usize;
    let mut total = 0usize;
    for q in queries {
        let truth: HashSet<u64> = keys_of(&index.exact(q, k, scope)).into_iter().collect();
        let got = index.search(q, k, scope);
        assert!(got.windows(2).all(|w| rank(
            &Hit {
                score: w[0].1,
                key: w[0].0
            },
            &Hit {
                score: w[1].1,
                key: w[1].0
            }
        ) == Ordering::Less));
        found += got.iter().filter(|h| truth.contains(&h.0)).count();
        total += truth.len();
    }
    found as f64 / total.max(1) as f64
}

fn report(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{msg}");
}

#[test]
fn index_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<VectorIndex>();
}

#[test]
fn recall_at_10_of_graph_search_is_at_least_095() {
    let dim = 128;
    let clusters = Clusters::new(1, 100, dim);
    let points = clusters.points(2, 20_000);
    let queries = clusters.points(3, 200);
    let started = std::time::Instant::now();
    let index = build(&points, dim);
    let built = started.elapsed();
    assert_eq!(index.len(), 20_000);
    let r = recall(&index, &queries, 10, Scope::All);
    report(format_args!(
        "recall@10 over 20,000 clustered vectors (dim {dim}): {r:.4}; built in {built:.1?}"
    ));
    assert!(r >= 0.95, "recall@10 = {r:.4}");
    // A query that is a stored vector finds its key first, with similarity ~1 (the graph
    // keeps vectors as bfloat16).
    let hits = index.search(&points[123], 10, Scope::All);
    assert_eq!(hits[0].0, key(123));
    assert!((hits[0].1 - 1.0).abs() < 1e-3, "{}", hits[0].1);
}

/// Sentences of real English prose: this project's own documentation (README, architecture
/// notes and the docs), lines of tables and code left out.
fn real_sentences() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut sentences = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut in_code = false;
        for line in text.lines() {
            in_code ^= line.trim_start().starts_with("```");
            if in_code || line.trim_start().starts_with(['|', '#', '`']) {
                continue;
            }
            sentences.extend(
                line.split_inclusive(['.', '?', '!'])
                    .map(str::trim)
                    .filter(|s| s.split_whitespace().count() >= 4)
                    .map(str::to_owned),
            );
        }
    }
    sentences
}

/// The graph finds the exact top 10 of vectors the built-in model gives real text, which crowd
/// into a narrow cone (unlike the Gaussian clusters above), at the list length the index
/// chooses for their number: memories of one to three sentences of real prose, queries
/// sentences none of them holds. A much shorter list misses, so the check can fail.
#[test]
fn graph_search_finds_the_exact_top_10_of_real_text_vectors() {
    use crate::embed::Embedder;
    const N: usize = 30_000;
    let sentences = real_sentences();
    assert!(sentences.len() >= 1_000, "{} sentences", sentences.len());
    // Queries are sentences no memory holds: every fifth sentence.
    let (held, kept): (Vec<_>, Vec<_>) =
        sentences.iter().enumerate().partition(|(i, _)| i % 5 == 0);
    let kept: Vec<&str> = kept.into_iter().map(|(_, s)| s.as_str()).collect();
    let mut rng = Rng(0x7265_616c);
    let memories: Vec<String> = (0..N)
        .map(|_| {
            let parts = 1 + rng.below(3);
            let text: Vec<&str> = (0..parts).map(|_| kept[rng.below(kept.len())]).collect();
            text.join(" ")
        })
        .collect();
    let questions: Vec<String> = held.into_iter().take(200).map(|(_, s)| s.clone()).collect();
    let model = crate::embed::static_model::StaticModel::builtin();
    let embed = |texts: &[String]| -> Vec<Vec<f32>> {
        texts
            .chunks(4_096)
            .flat_map(|c| {
                let refs: Vec<&str> = c.iter().map(String::as_str).collect();
                model.embed(&refs).unwrap()
            })
            .collect()
    };
    let index = build(&embed(&memories), model.dim());
    let queries = embed(&questions);
    let points = index.read().graph.len();
    assert_eq!(points, index.len(), "every vector is in the graph");
    let chosen = list_for(10, points);
    // A hybrid recall's vector half asks for 100 (its fusion's depth): its first ten are judged.
    let chosen_for_100 = list_for(100, points);
    let recall_with = |want: usize, list: usize| {
        let (mut found, mut asked) = (0, 0);
        for q in &queries {
            let truth = index.exact(q, 10, Scope::All);
            let tenth = truth.last().map_or(f32::MAX, |h| h.1);
            asked += truth.len();
            // A hit tying the exact 10th is as right (the same text under two keys). Each is
            // judged by its stored vector's score (the graph's own carries the query's
            // rounding, below).
            found += index
                .search_with_list(q, want, list)
                .iter()
                .take(10)
                .filter(|h| index.exact(q, 1, Scope::Keys(&[h.0]))[0].1 >= tenth)
                .count();
        }
        found as f64 / asked.max(1) as f64
    };
    // A graph hit is scored from the distance the graph measured (no vector read back): the
    // same number as scoring its stored vector, to the order of a float sum.
    let mut worst = 0.0f32;
    for q in queries.iter().take(50) {
        for (key, score) in index.search_with_list(q, 100, 200) {
            let exact = index.exact(q, 1, Scope::Keys(&[key]));
            worst = worst.max((score - exact[0].1).abs());
        }
    }
    report(format_args!(
        "graph hits scored from their distance: at most {worst:.2e} from the stored vector's score"
    ));
    assert!(worst < 2e-6, "a graph hit's score is off by {worst}");
    let (at_chosen, at_short) = (recall_with(10, chosen), recall_with(10, 12));
    let for_100 = recall_with(100, chosen_for_100);
    let searched = recall(&index, &queries, 10, Scope::All);
    report(format_args!(
        "real text vectors ({N} memories of {} sentences): recall@10 {at_chosen:.4} at the chosen list {chosen}, {at_short:.4} at 12, {for_100:.4} asking 100 at list {chosen_for_100}; search {searched:.4} counting keys only",
        sentences.len()
    ));
    assert!(
        at_chosen >= 0.95,
        "recall@10 {at_chosen:.4} at list {chosen}"
    );
    assert!(
        for_100 >= 0.95,
        "recall@10 of a search for 100 {for_100:.4} at list {chosen_for_100}"
    );
    assert!(
        at_short < 0.95,
        "a list of 12 would pass too: {at_short:.4}"
    );
}

/// Unit vectors in a narrow cone: ranked by `(q − 0.6·c)·t`, the directions from the centre
/// put the exact top 10 by `q·x` near the top, closer than the query's own direction from
/// the centre does.
#[test]
fn the_graph_is_searched_toward_a_direction_that_ranks_like_the_scores() {
    let dim = 64;
    let mut rng = Rng(91);
    let common = random_unit(&mut rng, dim);
    let cone = |rng: &mut Rng| -> Vec<f32> {
        let noise = random_unit(rng, dim);
        let spread = 0.5 + rng.unit() as f32;
        normalized(
            common
                .iter()
                .zip(&noise)
                .map(|(c, n)| 2.0 * c + spread * n)
                .collect(),
        )
    };
    let points: Vec<Vec<f32>> = (0..4_000).map(|_| cone(&mut rng)).collect();
    let index = build(&points, dim);
    let st = index.read();
    assert!(st.centred);
    // Among how many directions, ranked by `toward`, the exact top 10 lie.
    let depth = |v: &[f32], toward: &[f32]| -> usize {
        let mut exact: Vec<(f32, usize)> = points
            .iter()
            .enumerate()
            .map(|(i, x)| (dot(v, x), i))
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut proxy: Vec<(f32, usize)> = points
            .iter()
            .enumerate()
            .map(|(i, x)| (dot(toward, &st.direction(x).0), i))
            .collect();
        proxy.sort_by(|a, b| b.0.total_cmp(&a.0));
        exact[..10]
            .iter()
            .map(|(_, i)| proxy.iter().position(|(_, j)| j == i).unwrap_or(usize::MAX))
            .max()
            .unwrap_or(0)
            + 1
    };
    let (mut toward, mut own) = (0, 0);
    for _ in 0..50 {
        let v = cone(&mut rng);
        let q = st.query(v.clone());
        let expected: Vec<f32> = {
            let t: Vec<f32> = v
                .iter()
                .zip(&st.centre)
                .map(|(v, c)| v - QUERY_CENTRE_SHARE * c)
                .collect();
            normalized(t)
        };
        // Rounded to bfloat16 (8 bits of mantissa): within about 10⁻³.
        assert!((dot(&expected, &q.toward) - 1.0).abs() < 2e-3);
        toward += depth(&v, &q.toward);
        own += depth(&v, &q.direction);
    }
    report(format_args!(
        "exact top 10 within the first {toward} (toward) against {own} (own direction) over 50 queries"
    ));
    assert!(toward < own, "{toward} against {own}");
}

/// Vectors sharing one dominant direction, as a static model's are: the index centres them
/// once it holds enough, and scores stay the dot products of the vectors themselves,
/// whether they came by upsert (some already in the graph) or by staging.
#[test]
fn vectors_in_a_narrow_cone_are_centred_and_scored_as_given() {
    let dim = 64;
    let mut rng = Rng(77);
    let common = random_unit(&mut rng, dim);
    let points: Vec<Vec<f32>> = (0..3_000).map(|_| in_cone(&common, &mut rng)).collect();
    let queries: Vec<Vec<f32>> = (0..50).map(|_| in_cone(&common, &mut rng)).collect();
    let by_upsert = VectorIndex::new(MODEL, dim).unwrap();
    for (b, chunk) in points.chunks(500).enumerate() {
        let items: Vec<(u64, Vec<f32>)> = chunk
            .iter()
            .enumerate()
            .map(|(i, v)| (key(b * 500 + i), v.clone()))
            .collect();
        by_upsert.upsert(&items).unwrap();
    }
    let by_stage = VectorIndex::new(MODEL, dim).unwrap();
    let items: Vec<(u64, Vec<f32>)> = points
        .iter()
        .enumerate()
        .map(|(i, v)| (key(i), v.clone()))
        .collect();
    by_stage.stage(&items[..800]).unwrap();
    by_stage.index_staged(usize::MAX).unwrap();
    by_stage.stage(&items[800..]).unwrap();
    while by_stage.index_staged(1_000).unwrap() > 0 {}
    for index in [&by_upsert, &by_stage] {
        let st = index.read();
        assert!(st.centred);
        assert!(
            dot(&st.centre, &st.centre).sqrt() > 0.8,
            "the common direction"
        );
        drop(st);
        let r = recall(index, &queries, 10, Scope::All);
        report(format_args!("cone recall@10 {r:.4}"));
        assert!(r >= 0.95, "recall@10 {r:.4}");
        for q in &queries[..10] {
            for (k, score) in index.search(q, 10, Scope::All) {
                let i = points
                    .iter()
                    .enumerate()
                    .find(|(i, _)| key(*i) == k)
                    .unwrap()
                    .0;
                assert!((score - dot(q, &points[i])).abs() < 2e-3, "{score}");
            }
        }
    }
}

/// A vector keeps its score wherever it is held: scored outside the index (a change the index
/// has not applied yet), staged (scanned), in the graph read back by a scan, or in the graph
/// scored from the distance the graph measured. Near-tied hits then keep their order while the
/// index moves vectors from one to the next, so the pages of one recall neither repeat nor skip
/// one.
#[test]
fn a_vector_keeps_its_score_from_outside_the_index_to_the_staged_list_to_the_graph() {
    let dim = 64;
    let mut rng = Rng(91);
    let common = random_unit(&mut rng, dim);
    let points: Vec<Vec<f32>> = (0..3_000).map(|_| in_cone(&common, &mut rng)).collect();
    let queries: Vec<Vec<f32>> = (0..20).map(|_| in_cone(&common, &mut rng)).collect();
    let items: Vec<(u64, Vec<f32>)> = points
        .iter()
        .enumerate()
        .map(|(i, v)| (key(i), v.clone()))
        .collect();
    let index = VectorIndex::new(MODEL, dim).unwrap();
    // Enough in the graph to fix the centre; the last thousand come later.
    index.upsert(&items[..2_000]).unwrap();
    assert!(index.read().centred);
    let late: Vec<u64> = (2_000..3_000).map(key).collect();
    let refs: Vec<&[f32]> = points[2_000..].iter().map(Vec::as_slice).collect();
    let outside: Vec<Vec<f32>> = queries
        .iter()
        .map(|q| {
            let scores = index.similarities(q, &refs);
            scores.into_iter().map(Option::unwrap).collect()
        })
        .collect();
    let held = |q: &[f32]| -> HashMap<u64, f32> {
        index
            .search(q, late.len(), Scope::Keys(&late))
            .into_iter()
            .collect()
    };
    index.stage(&items[2_000..]).unwrap();
    assert_eq!(index.staged(), 1_000);
    let staged: Vec<HashMap<u64, f32>> = queries.iter().map(|q| held(q)).collect();
    while index.index_staged(300).unwrap() > 0 {}
    let in_graph: Vec<HashMap<u64, f32>> = queries.iter().map(|q| held(q)).collect();
    let mut worst = 0.0f32;
    for (qi, q) in queries.iter().enumerate() {
        for (i, &k) in late.iter().enumerate() {
            // Outside, staged and read back from the graph: the very same number.
            assert_eq!(
                outside[qi][i].to_bits(),
                staged[qi][&k].to_bits(),
                "staged {k}"
            );
            assert_eq!(
                outside[qi][i].to_bits(),
                in_graph[qi][&k].to_bits(),
                "graph {k}"
            );
        }
        // From the graph's own distance: to the order of a float sum.
        for (k, score) in index.search(q, 20, Scope::All) {
            let scanned = index.search(q, 1, Scope::Keys(&[k]))[0].1;
            worst = worst.max((score - scanned).abs());
        }
    }
    report(format_args!(
        "a graph hit's score against its scanned score: at most {worst:.2e}"
    ));
    assert!(worst <= 2e-6, "a graph hit's score is off by {worst}");
}

#[test]
fn replaced_and_removed_keys_are_respected() {
    let dim = 64;
    let clusters = Clusters::new(10, 50, dim);
    let points = clusters.points(11, 12_000);
    let index = build(&points, dim);
    // Remove 500 keys; replace 500 others, half by new vectors like the rest (inliers), half
    // by random directions far from every cluster (outliers).
    let removed: Vec<u64> = (0..500).map(key).collect();
    index.remove(&removed);
    let mut rng = Rng(12);
    let inliers = clusters.points(14, 250);
    let replaced: Vec<(u64, Vec<f32>)> = (500..1_000)
        .map(|i| match i {
            ..750 => (key(i), inliers[i - 500].clone()),
            _ => (key(i), random_unit(&mut rng, dim)),
        })
        .collect();
    index.upsert(&replaced).unwrap();
    assert_eq!(index.len(), 11_500);
    assert!(!index.contains(key(0)));
    assert!(index.contains(key(600)));
    for (i, point) in points.iter().enumerate().take(1_000) {
        let hits = index.search(point, 10, Scope::All);
        assert_eq!(hits.len(), 10);
        let ks = keys_of(&hits);
        assert!(
            !ks.contains(&key(i)),
            "key {} found by its old vector",
            key(i)
        );
        assert!(ks.iter().all(|k| !removed.contains(k)));
        assert!(
            keys_of(&index.exact(point, 10, Scope::All))
                .iter()
                .all(|k| *k != key(i))
        );
    }
    let mut outliers_missed = 0;
    for (j, (k, v)) in replaced.iter().enumerate() {
        let hits = index.search(v, 10, Scope::All);
        if j < 250 {
            assert_eq!(hits[0].0, *k, "replaced key not found by its new vector");
        } else if hits[0].0 != *k {
            outliers_missed += 1;
        }
    }
    // Approximate search on outliers: none missed in practice, a few would be tolerable.
    report(format_args!(
        "outliers not found first by their own vector: {outliers_missed} of 250"
    ));
    assert!(outliers_missed <= 2, "{outliers_missed} outliers missed");
    // Re-upserting identical vectors adds no slot.
    let slots = index.read().keys.len();
    index.upsert(&replaced[..10]).unwrap();
    assert_eq!(index.read().keys.len(), slots);
    // Within one batch the last vector of a key wins.
    let twice = vec![(1, points[1].clone()), (1, points[2].clone())];
    index.upsert(&twice).unwrap();
    assert_eq!(index.search(&points[2], 1, Scope::All)[0].0, 1);

    // 1,000 dead of 12,501 slots: not yet; 3,500 more removals pass a quarter.
    assert!(!index.needs_compaction());
    index.remove(&(1_000..4_500).map(key).collect::<Vec<_>>());
    assert!(index.needs_compaction());
    let queries = clusters.points(13, 50);
    let before: Vec<_> = queries
        .iter()
        .map(|q| index.exact(q, 10, Scope::All))
        .collect();
    index.compact().unwrap();
    assert!(!index.needs_compaction());
    assert_eq!(index.read().keys.len(), 8_001);
    assert_eq!(index.len(), 8_001);
    let after: Vec<_> = queries
        .iter()
        .map(|q| index.exact(q, 10, Scope::All))
        .collect();
    assert_eq!(before, after);
    assert!(recall(&index, &queries, 10, Scope::All) >= 0.95);
    for (i, point) in points.iter().enumerate().take(4_500) {
        let ks = keys_of(&index.search(point, 10, Scope::All));
        assert!(!ks.contains(&key(i)) || (500..1_000).contains(&i));
    }
}

#[test]
fn scopes_only_return_keys_in_scope() {
    let dim = 64;
    let clusters = Clusters::new(20, 50, dim);
    let points = clusters.points(21, 20_000);
    let index = build(&points, dim);
    index.remove(&(0..300).map(|i| key(i * 3)).collect::<Vec<_>>());
    let queries = clusters.points(22, 100);

    // Keys: duplicates, unknown and removed keys welcome; exact.
    let mut rng = Rng(23);
    let mut subset: Vec<u64> = (0..60).map(|_| key(rng.below(6_000))).collect();
    subset.extend([key(0), key(3), 1, 2, subset[0]]);
    let allowed: HashSet<u64> = subset
        .iter()
        .copied()
        .filter(|k| index.contains(*k))
        .collect();
    for q in &queries {
        let hits = index.search(q, 10, Scope::Keys(&subset));
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| allowed.contains(&h.0)));
        assert_eq!(hits, index.exact(q, 10, Scope::Keys(&subset)));
    }
    assert_eq!(
        index.search(&queries[0], 100, Scope::Keys(&subset)).len(),
        allowed.len()
    );

    // Predicate through the graph: a third of the keys.
    let third = |k: u64| k.is_multiple_of(3);
    assert!(
        index
            .read()
            .graph_plan(10, state::Within::Keys(&third))
            .is_some()
    );
    let points = index.read().graph.len();
    assert_eq!(
        index.read().graph_plan(10, state::Within::All),
        Some(list_for(10, points))
    );
    for q in &queries {
        let hits = index.search(q, 10, Scope::Predicate(&third));
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| third(h.0) && index.contains(h.0)));
    }
    let r = recall(&index, &queries, 10, Scope::Predicate(&third));
    report(format_args!("recall@10 with a 1/3 predicate: {r:.4}"));
    assert!(r >= 0.95, "predicate recall@10 = {r:.4}");

    // A selective predicate (1%) is scanned: exact.
    let rare = |k: u64| k.is_multiple_of(100);
    assert_eq!(
        index.read().graph_plan(10, state::Within::Keys(&rare)),
        None
    );
    for q in &queries {
        let hits = index.search(q, 10, Scope::Predicate(&rare));
        assert!(hits.iter().all(|h| rare(h.0)));
        assert_eq!(hits, index.exact(q, 10, Scope::Predicate(&rare)));
    }
    // A predicate nothing passes.
    let none = |_: u64| false;
    assert!(
        index
            .search(&queries[0], 10, Scope::Predicate(&none))
            .is_empty()
    );
}

/// The namespace of key `i` in the namespace tests: one in a hundred in "small", the rest in
/// "large".
fn namespace_of(i: usize) -> &'static str {
    if i.is_multiple_of(100) {
        "small"
    } else {
        "large"
    }
}

#[test]
fn a_namespace_scope_finds_what_its_keys_find() {
    let dim = 64;
    let clusters = Clusters::new(60, 50, dim);
    let points = clusters.points(61, 20_000);
    let queries = clusters.points(62, 100);
    let index = build(&points, dim);
    assert_eq!(index.unplaced(), 20_000);
    let names: Vec<(u64, &str)> = (0..points.len())
        .map(|i| (key(i), namespace_of(i)))
        .collect();
    index.place(&names);
    assert_eq!(index.unplaced(), 0);
    let keys_in = |ns: &str| -> Vec<u64> {
        (0..points.len())
            .filter(|&i| namespace_of(i) == ns && index.contains(key(i)))
            .map(key)
            .collect()
    };
    let small = ["small".to_owned()];
    let large = ["large".to_owned()];
    let both = ["small".to_owned(), "large".to_owned()];
    // One in a hundred is scanned: the very hits of its keys.
    let small_keys = keys_in("small");
    for q in &queries {
        let hits = index.search(q, 10, Scope::Namespaces(&small));
        assert_eq!(hits, index.exact(q, 10, Scope::Keys(&small_keys)));
    }
    // The rest go through the graph: the keys' exact hits, at the graph's recall.
    let large_keys = keys_in("large");
    let (mut found, mut total) = (0, 0);
    for q in &queries {
        let truth = keys_of(&index.exact(q, 10, Scope::Keys(&large_keys)));
        let hits = index.search(q, 10, Scope::Namespaces(&large));
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| large_keys.contains(&h.0)));
        found += hits.iter().filter(|h| truth.contains(&h.0)).count();
        total += truth.len();
    }
    let r = found as f64 / total as f64;
    report(format_args!("recall@10 in a namespace of 99/100: {r:.4}"));
    assert!(r >= 0.95, "namespace recall@10 = {r:.4}");
    let r = recall(&index, &queries, 10, Scope::Namespaces(&both));
    assert!(r >= 0.95, "two namespaces' recall@10 = {r:.4}");
    assert!(
        index
            .search(&queries[0], 10, Scope::Namespaces(&["nowhere".to_owned()]))
            .is_empty()
    );

    // A key's new vector keeps its namespace; removing keys leaves none unplaced.
    index.upsert(&[(key(100), points[101].clone())]).unwrap();
    index.stage(&[(key(200), points[201].clone())]).unwrap();
    index.remove(&[key(300)]);
    assert_eq!(index.unplaced(), 0);
    let small_keys = keys_in("small");
    for q in queries.iter().take(20) {
        assert_eq!(
            index.search(q, 10, Scope::Namespaces(&small)),
            index.exact(q, 10, Scope::Keys(&small_keys))
        );
    }
    // A memory that moves is placed again.
    index.place(&[(key(100), "large")]);
    let near = index.search(&points[101], 5, Scope::Namespaces(&small));
    assert!(!keys_of(&near).contains(&key(100)));
    assert!(keys_of(&index.search(&points[101], 2, Scope::Namespaces(&large))).contains(&key(100)));

    // A new key is unplaced, and searched in every namespace until placed.
    index.stage(&[(key(20_000), points[5].clone())]).unwrap();
    assert_eq!(index.unplaced(), 1);
    assert_eq!(
        index.search(&points[5], 1, Scope::Namespaces(&small))[0].0,
        key(20_000)
    );
    index.place(&[(key(20_000), "large"), (key(99_999_999), "small")]);
    assert_eq!(index.unplaced(), 0);
    assert_ne!(
        index.search(&points[5], 1, Scope::Namespaces(&small))[0].0,
        key(20_000)
    );

    // Compaction keeps them; a dump does not: a loaded index knows no namespace.
    let small_keys: Vec<u64> = small_keys.into_iter().filter(|&k| k != key(100)).collect();
    index.index_staged(usize::MAX).unwrap();
    index.compact().unwrap();
    assert_eq!(index.unplaced(), 0);
    for q in queries.iter().take(20) {
        assert_eq!(
            index.search(q, 10, Scope::Namespaces(&small)),
            index.exact(q, 10, Scope::Keys(&small_keys))
        );
    }
    index.set_seq(3);
    let dir = tempfile::tempdir().unwrap();
    index.dump(dir.path()).unwrap();
    let (back, _) = VectorIndex::load(dir.path(), MODEL, dim).unwrap();
    assert_eq!(back.unplaced(), back.len());
    assert_eq!(
        back.search(&queries[0], 10, Scope::Namespaces(&small)),
        back.search(&queries[0], 10, Scope::All)
    );
}

#[test]
fn staged_vectors_are_found_at_once_and_after_the_graph_takes_them() {
    let dim = 64;
    let clusters = Clusters::new(40, 50, dim);
    let points = clusters.points(41, 12_000);
    let queries = clusters.points(42, 100);
    // 8,000 in the graph, 4,000 staged: searches must see all 12,000.
    let index = build(&points[..8_000], dim);
    let staged: Vec<(u64, Vec<f32>)> = (8_000..12_000)
        .map(|i| (key(i), points[i].clone()))
        .collect();
    index.stage(&staged).unwrap();
    assert_eq!((index.len(), index.staged()), (12_000, 4_000));
    let r = recall(&index, &queries, 10, Scope::All);
    assert!(r >= 0.95, "recall@10 with 4,000 staged: {r}");
    // A staged vector is its own nearest neighbour right away, also in a predicate scope.
    let even = |k: u64| k.is_multiple_of(2);
    for i in [8_000usize, 9_999, 11_999] {
        let hit = index.search(&points[i], 1, Scope::All);
        assert_eq!(hit[0].0, key(i));
        if even(key(i)) {
            assert_eq!(
                index.search(&points[i], 1, Scope::Predicate(&even))[0].0,
                key(i)
            );
        }
    }
    // Nothing is dumped while staged.
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(index.dump(dir.path()).unwrap(), None);
    // Removing or replacing a staged key is respected.
    index.remove(&[key(8_000)]);
    index.upsert(&[(key(8_001), points[0].clone())]).unwrap();
    assert!(!keys_of(&index.search(&points[8_000], 10, Scope::All)).contains(&key(8_000)));
    assert_eq!(
        index.search(&points[0], 2, Scope::Keys(&[key(8_001)]))[0].0,
        key(8_001)
    );
    // Into the graph in chunks; every search in between still sees everything.
    while index.index_staged(1_000).unwrap() > 0 {
        assert_eq!(
            index.search(&points[11_999], 1, Scope::All)[0].0,
            key(11_999)
        );
    }
    assert_eq!(index.staged(), 0);
    let r = recall(&index, &queries, 10, Scope::All);
    assert!(r >= 0.95, "recall@10 after indexing: {r}");
    index.set_seq(7);
    assert_eq!(index.dump(dir.path()).unwrap(), Some(7));
}

#[test]
fn many_staged_vectors_are_searched_by_sketch() {
    let dim = 64;
    let clusters = Clusters::new(60, 80, dim);
    let n = 2_000 + 3 * staged::EXACT_UP_TO;
    let points = clusters.points(51, n);
    let queries = clusters.points(52, 100);
    // 2,000 in the graph, the rest staged (past the exact scan's limit).
    let index = build(&points[..2_000], dim);
    let staged: Vec<(u64, Vec<f32>)> = (2_000..n).map(|i| (key(i), points[i].clone())).collect();
    index.stage(&staged).unwrap();
    assert_eq!(index.staged(), n - 2_000);
    let r = recall(&index, &queries, 10, Scope::All);
    report(format_args!(
        "recall@10 with {} staged, by sketch: {r:.3}",
        n - 2_000
    ));
    assert!(r >= 0.9, "recall@10 by sketch: {r}");
    let even = |k: u64| k.is_multiple_of(2);
    let r = recall(&index, &queries, 10, Scope::Predicate(&even));
    assert!(r >= 0.9, "recall@10 by sketch in a predicate scope: {r}");
    // A staged vector (its own sketch) and a graph point are their own nearest neighbours.
    for i in [0, 1_999, 2_000, n / 2, n - 1] {
        assert_eq!(index.search(&points[i], 1, Scope::All)[0].0, key(i));
    }
    // Removed and replaced staged keys are respected; compaction keeps the sketches in step.
    index.remove(&[key(n - 1)]);
    index.upsert(&[(key(n - 2), points[0].clone())]).unwrap();
    assert!(!keys_of(&index.search(&points[n - 1], 10, Scope::All)).contains(&key(n - 1)));
    assert_eq!(index.search(&points[0], 1, Scope::All).len(), 1);
    let gone: Vec<u64> = (2_000..2_000 + staged::EXACT_UP_TO).map(key).collect();
    index.remove(&gone);
    assert!(index.needs_compaction());
    index.compact().unwrap();
    let i = n / 2;
    assert_eq!(index.search(&points[i], 1, Scope::All)[0].0, key(i));
    let r = recall(&index, &queries, 10, Scope::All);
    assert!(r >= 0.9, "recall@10 after compaction: {r}");
    while index.index_staged(4_096).unwrap() > 0 {}
    let r = recall(&index, &queries, 10, Scope::All);
    assert!(r >= 0.95, "recall@10 once in the graph: {r}");
}

/// A loaded index served as many concurrent searches as its graph admits: usearch had
/// contexts for the core count only, the searches beyond failed, and each failure was
/// answered by scanning every vector.
#[test]
fn a_loaded_index_serves_more_concurrent_searches_than_cores_from_its_graph() {
    let dim = 48;
    let clusters = Clusters::new(70, 40, dim);
    let points = clusters.points(71, 4_000);
    let dir = tempfile::tempdir().unwrap();
    build(&points, dim).dump(dir.path()).unwrap();
    let (loaded, state) = VectorIndex::load(dir.path(), MODEL, dim).unwrap();
    assert_eq!(state, LoadState::Loaded);
    let loaded = Arc::new(loaded);
    let queries = Arc::new(clusters.points(72, 64));
    let threads = 64;
    let start = Arc::new(std::sync::Barrier::new(threads));
    let searchers: Vec<_> = (0..threads)
        .map(|t| {
            let (index, queries, start) = (loaded.clone(), queries.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut fell_back = Vec::new();
                for n in 0..40 {
                    let (hits, why) =
                        index.search_noting(&queries[(t + n) % queries.len()], 10, Scope::All);
                    assert_eq!(hits.len(), 10);
                    fell_back.extend(why);
                }
                fell_back
            })
        })
        .collect();
    let fell_back: Vec<String> = searchers
        .into_iter()
        .flat_map(|s| s.join().unwrap())
        .collect();
    assert!(
        fell_back.is_empty(),
        "{} of {} searches fell back to a scan: {:?}",
        fell_back.len(),
        threads * 40,
        fell_back.first()
    );
    assert!(recall(&loaded, &queries, 10, Scope::All) >= 0.95);
}

#[test]
fn dump_then_load_gives_the_same_index() {
    let dim = 48;
    let clusters = Clusters::new(30, 40, dim);
    let points = clusters.points(31, 4_000);
    let index = build(&points, dim);
    index.remove(&[key(1), key(2), key(3)]);
    index.upsert(&[(key(4), points[5].clone())]).unwrap();
    index.set_seq(42);
    let dir = tempfile::tempdir().unwrap();
    index.dump(dir.path()).unwrap();

    let (loaded, state) = VectorIndex::load(dir.path(), MODEL, dim).unwrap();
    assert_eq!(state, LoadState::Loaded);
    assert_eq!(loaded.seq(), 42);
    assert_eq!(loaded.len(), index.len());
    assert_eq!(loaded.model(), MODEL);
    assert_eq!(loaded.dim(), dim);
    assert!(!loaded.contains(key(1)));
    let queries = clusters.points(32, 100);
    let third = |k: u64| k.is_multiple_of(3);
    for q in &queries {
        assert_eq!(
            index.search(q, 10, Scope::All),
            loaded.search(q, 10, Scope::All)
        );
        assert_eq!(
            index.exact(q, 10, Scope::All),
            loaded.exact(q, 10, Scope::All)
        );
        assert_eq!(
            index.search(q, 10, Scope::Predicate(&third)),
            loaded.search(q, 10, Scope::Predicate(&third))
        );
    }

    // The loaded index keeps working, and a second dump replaces the first one's files.
    loaded.upsert(&[(key(9_999), points[7].clone())]).unwrap();
    loaded.set_seq(43);
    loaded.dump(dir.path()).unwrap();
    let names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let (again, state) = VectorIndex::load(dir.path(), MODEL, dim).unwrap();
    assert_eq!(state, LoadState::Loaded);
    assert_eq!(again.seq(), 43);
    assert!(again.contains(key(9_999)));
    assert_eq!(
        again.search(&points[7], 2, Scope::All),
        loaded.search(&points[7], 2, Scope::All)
    );
}

#[test]
fn empty_and_small_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let (index, state) = VectorIndex::load(dir.path(), MODEL, 8).unwrap();
    assert_eq!(state, LoadState::Missing);
    assert!(index.is_empty());
    let q = vec![0.5f32; 8];
    assert!(index.search(&q, 10, Scope::All).is_empty());
    index.dump(dir.path()).unwrap();
    let (index, state) = VectorIndex::load(dir.path(), MODEL, 8).unwrap();
    assert_eq!(state, LoadState::Loaded);
    assert!(index.is_empty());

    // A few hundred vectors are scanned, so exact; vectors are normalised on the way in.
    let mut rng = Rng(40);
    let items: Vec<(u64, Vec<f32>)> = (0..300)
        .map(|i| (i, (0..8).map(|_| rng.gauss() * 3.0).collect()))
        .collect();
    index.upsert(&items).unwrap();
    let hits = index.search(&items[17].1, 5, Scope::All);
    assert_eq!(hits[0].0, 17);
    assert!((hits[0].1 - 1.0).abs() < 1e-5);
    assert_eq!(hits, index.exact(&items[17].1, 5, Scope::All));
    // Everything removed: empty results, then a dump of only tombstones round-trips.
    index.remove(&(0..300).collect::<Vec<_>>());
    assert!(index.search(&q, 10, Scope::All).is_empty());
    index.dump(dir.path()).unwrap();
    let (index, state) = VectorIndex::load(dir.path(), MODEL, 8).unwrap();
    assert_eq!(state, LoadState::Loaded);
    assert!(index.is_empty());
    assert!(index.needs_compaction());
    index.compact().unwrap();
    assert!(!index.needs_compaction());
}

#[test]
fn bad_vectors_and_queries() {
    let index = VectorIndex::new(MODEL, 4).unwrap();
    let good = (1u64, vec![1.0, 0.0, 0.0, 0.0]);
    assert!(index.upsert(&[good.clone(), (2, vec![1.0; 3])]).is_err());
    assert!(
        index
            .upsert(&[good.clone(), (2, vec![f32::NAN, 0.0, 0.0, 0.0])])
            .is_err()
    );
    assert!(index.is_empty(), "a failed batch changes nothing");
    index.upsert(&[good, (2, vec![0.0; 4])]).unwrap();
    assert_eq!(index.len(), 2);
    assert!(index.search(&[1.0, 0.0, 0.0], 5, Scope::All).is_empty());
    assert!(index.search(&[0.0; 4], 5, Scope::All).is_empty());
    assert!(
        index
            .search(&[f32::INFINITY, 0.0, 0.0, 0.0], 5, Scope::All)
            .is_empty()
    );
    assert!(
        index
            .search(&[1.0, 0.0, 0.0, 0.0], 0, Scope::All)
            .is_empty()
    );
    let hits = index.search(&[2.0, 0.0, 0.0, 0.0], 5, Scope::All);
    assert_eq!(hits, vec![(1, 1.0), (2, 0.0)]);
}

/// Dumps 3,000 vectors of dim 16 into a fresh directory; returns it and the file names.
fn dumped() -> (tempfile::TempDir, DumpNames) {
    let dim = 16;
    let points = Clusters::new(50, 10, dim).points(51, 3_000);
    let index = build(&points, dim);
    let dir = tempfile::tempdir().unwrap();
    index.dump(dir.path()).unwrap();
    let meta: Meta =
        serde_json::from_slice(&fs::read(dir.path().join(META_FILE)).unwrap()).unwrap();
    (dir, DumpNames::new(&meta.generation))
}

fn assert_rebuilt(dir: &Path, model: &str, dim: usize, why: &str) {
    let (index, state) = VectorIndex::load(dir, model, dim).unwrap();
    match state {
        LoadState::Rebuilt(reason) => assert!(reason.contains(why), "{reason:?} lacks {why:?}"),
        other => panic!("expected Rebuilt({why}), got {other:?}"),
    }
    assert!(index.is_empty());
    assert_eq!(index.model(), model);
    assert_eq!(index.dim(), dim);
    assert_eq!(index.seq(), 0);
}

// None of these cases may reach the graph's loader with a bad file (it trusts the offsets
// in it): every damage below is caught by the length and checksum checks before it runs.
#[test]
fn damaged_or_foreign_dumps_load_empty() {
    let (dir, names) = dumped();
    let (_, state) = VectorIndex::load(dir.path(), MODEL, 16).unwrap();
    assert_eq!(state, LoadState::Loaded);
    assert_rebuilt(dir.path(), "other-model", 16, "model");
    assert_rebuilt(dir.path(), MODEL, 32, "dimensions");

    // Truncated graph file.
    let (dir, names2) = dumped();
    let data = dir.path().join(&names2.graph);
    let len = fs::metadata(&data).unwrap().len();
    File::options()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    assert_rebuilt(dir.path(), MODEL, 16, "bytes");

    // Garbled graph file, same length.
    let (dir, names3) = dumped();
    let graph = dir.path().join(&names3.graph);
    let mut bytes = fs::read(&graph).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0x5a;
    }
    fs::write(&graph, bytes).unwrap();
    assert_rebuilt(dir.path(), MODEL, 16, "checksum");

    // Missing file; a directory in a file's place.
    let (dir, names4) = dumped();
    fs::remove_file(dir.path().join(&names4.slots)).unwrap();
    assert_rebuilt(dir.path(), MODEL, 16, "unreadable");
    fs::create_dir(dir.path().join(&names4.slots)).unwrap();
    assert_rebuilt(dir.path(), MODEL, 16, "not a regular file");

    // Garbled metadata; metadata of another format.
    let meta = dir.path().join(META_FILE);
    fs::write(&meta, b"{\"format\": 1, \"engi").unwrap();
    assert_rebuilt(dir.path(), MODEL, 16, "metadata");
    let (dir5, _) = dumped();
    let text = fs::read_to_string(dir5.path().join(META_FILE)).unwrap();
    fs::write(
        dir5.path().join(META_FILE),
        text.replace("\"format\": 3", "\"format\": 99"),
    )
    .unwrap();
    assert_rebuilt(dir5.path(), MODEL, 16, "format");

    // A dump of the half-precision graph this version replaced: rebuilt, not misread.
    let (dir6, _) = dumped();
    let text = fs::read_to_string(dir6.path().join(META_FILE)).unwrap();
    fs::write(
        dir6.path().join(META_FILE),
        text.replace(GRAPH_ENGINE, "usearch 2.26.6 f16"),
    )
    .unwrap();
    assert_rebuilt(dir6.path(), MODEL, 16, "usearch 2.26.6 f16");

    // No metadata at all: missing, whatever else lies there.
    fs::remove_file(dir5.path().join(META_FILE)).unwrap();
    let (index, state) = VectorIndex::load(dir5.path(), MODEL, 16).unwrap();
    assert_eq!(state, LoadState::Missing);
    assert!(index.is_empty());

    // A dump over a damaged one works and cleans up the other generation's files.
    let fresh = VectorIndex::new(MODEL, 16).unwrap();
    fresh.upsert(&[(5, vec![1.0; 16])]).unwrap();
    fresh.dump(dir.path()).unwrap();
    let (index, state) = VectorIndex::load(dir.path(), MODEL, 16).unwrap();
    assert_eq!(state, LoadState::Loaded);
    assert_eq!(index.len(), 1);
    assert!(!dir.path().join(&names4.graph).exists());
    drop(names);
}

#[test]
fn concurrent_searches_while_upserting() {
    let dim = 32;
    let clusters = Clusters::new(60, 20, dim);
    let points = clusters.points(61, 8_000);
    let index = Arc::new(build(&points[..3_000], dim));
    let queries = Arc::new(clusters.points(62, 64));
    let done = Arc::new(AtomicBool::new(false));
    let searchers: Vec<_> = (0..4)
        .map(|t| {
            let (index, queries, done) = (index.clone(), queries.clone(), done.clone());
            std::thread::spawn(move || {
                let odd = |k: u64| k % 2 == 1;
                let mut n = 0usize;
                while !done.load(AtomicOrdering::Relaxed) || n < 20 {
                    let q = &queries[(n + t) % queries.len()];
                    let scope = match n % 3 {
                        0 => Scope::All,
                        1 => Scope::Predicate(&odd),
                        _ => Scope::Keys(&[1_000, 1_007, 1_014]),
                    };
                    let hits = index.search(q, 10, scope);
                    assert!(hits.len() <= 10);
                    n += 1;
                }
                n
            })
        })
        .collect();
    for (b, chunk) in points[3_000..].chunks(250).enumerate() {
        let items: Vec<(u64, Vec<f32>)> = chunk
            .iter()
            .enumerate()
            .map(|(i, v)| (key(3_000 + b * 250 + i), v.clone()))
            .collect();
        index.upsert(&items).unwrap();
        index.upsert(&items[..3]).unwrap();
        index
            .upsert(&[(key(b), points[7_999 - b].clone())])
            .unwrap();
        index.remove(&[key(100 + b)]);
        if b == 10 {
            index.compact().unwrap();
        }
    }
    done.store(true, AtomicOrdering::Relaxed);
    for s in searchers {
        assert!(s.join().unwrap() >= 20);
    }
    assert_eq!(index.len(), 8_000 - 20);
    let queries = clusters.points(63, 50);
    assert!(recall(&index, &queries, 10, Scope::All) >= 0.95);
}
