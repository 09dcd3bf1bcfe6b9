//! Pairs of word sets whose Jaccard similarity reaches a threshold, found without comparing all
//! pairs: a prefix-filtered similarity join (the AllPairs scheme). Words are ranked rarest first;
//! two sets `x`, `y` with `J(x, y) ≥ t` share at least `⌈t·|x|⌉` words, so they meet within the
//! first `|x| − ⌈t·|x|⌉ + 1` words of each (their prefixes). Sets are visited by size; each
//! probes the prefixes indexed before it, skipping sets too small to reach `t`, and is then
//! indexed by its own prefix — a shorter one, as every later set is at least as large. Rare words make short posting lists, so the sets compared are
//! few; the answer is exact — every pair at or above the threshold, nothing below.

use crate::engine::overlap::jaccard;
use crate::error::Result;

/// One set: the group it may pair within (pairs never cross groups) and its word ids (any order,
/// repeats allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WordSet {
    pub group: u32,
    pub words: Vec<u32>,
}

/// Sets visited between two calls of the progress callback.
const TICK_EVERY: usize = 2_000;
/// Slack for the float products of the size bounds (a bound errs toward comparing more).
const EPS: f64 = 1e-9;

/// Fewest shared words a set of `n` words needs with any partner to reach `t`.
fn needed(n: usize, t: f64) -> usize {
    ((t * n as f64) - EPS).ceil().max(0.0) as usize
}

/// Every pair `(i, j)` (indexes into `sets`, `i < j`) in one group with `J ≥ t`, with its
/// similarity; empty sets pair with nothing. `t` must be above 0 (at 0 every pair qualifies and
/// the prefixes are whole sets). `tick` hears how many sets were visited so far and may stop the
/// join by returning an error.
pub(super) fn similar_pairs(
    sets: &[WordSet],
    t: f64,
    mut tick: impl FnMut(usize) -> Result<()>,
) -> Result<Vec<(usize, usize, f32)>> {
    // Rank words rarest first (ties by id), and rewrite each set as sorted ranks.
    let vocab = sets
        .iter()
        .flat_map(|s| s.words.iter())
        .max()
        .map_or(0, |&w| w as usize + 1);
    let mut sorted: Vec<Vec<u32>> = sets
        .iter()
        .map(|s| {
            let mut w = s.words.clone();
            w.sort_unstable();
            w.dedup();
            w
        })
        .collect();
    let mut df = vec![0u32; vocab];
    for s in &sorted {
        for &w in s {
            df[w as usize] += 1;
        }
    }
    let mut by_rarity: Vec<u32> = (0..vocab as u32).collect();
    by_rarity.sort_unstable_by_key(|&w| (df[w as usize], w));
    let mut rank = vec![0u32; vocab];
    for (r, &w) in by_rarity.iter().enumerate() {
        rank[w as usize] = r as u32;
    }
    for s in &mut sorted {
        for w in s.iter_mut() {
            *w = rank[*w as usize];
        }
        s.sort_unstable();
    }
    drop((df, rank, by_rarity));

    let mut order: Vec<usize> = (0..sets.len()).filter(|&i| !sorted[i].is_empty()).collect();
    order.sort_unstable_by_key(|&i| (sorted[i].len(), i));
    // Per word rank: the sets indexed under it, in the order visited (so by size), and where the
    // sets still large enough to pair with the current one begin.
    let mut postings: Vec<Vec<u32>> = vec![Vec::new(); vocab];
    let mut start: Vec<usize> = vec![0; vocab];
    let mut seen_by = vec![usize::MAX; sets.len()];
    let mut candidates: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    for (visited, &x) in order.iter().enumerate() {
        if visited % TICK_EVERY == 0 {
            tick(visited)?;
        }
        let words = &sorted[x];
        let prefix = words.len() - needed(words.len(), t) + 1;
        let smallest = t * words.len() as f64 - EPS;
        candidates.clear();
        for &w in &words[..prefix.min(words.len())] {
            let list = &postings[w as usize];
            let from = &mut start[w as usize];
            while *from < list.len() && (sorted[list[*from] as usize].len() as f64) < smallest {
                *from += 1;
            }
            for &y in &list[*from..] {
                let y = y as usize;
                if seen_by[y] != x && sets[y].group == sets[x].group {
                    seen_by[y] = x;
                    candidates.push(y);
                }
            }
        }
        for &y in &candidates {
            let j = jaccard(words, &sorted[y]);
            if f64::from(j) >= t {
                out.push((x.min(y), x.max(y), j));
            }
        }
        // Later sets are at least as large: a partner shares `⌈2t/(1+t)·|x|⌉` words with `x`,
        // so a shorter prefix of `x` indexes it.
        let indexed = words.len() - needed(words.len(), 2.0 * t / (1.0 + t)) + 1;
        for &w in &words[..indexed.min(words.len())] {
            postings[w as usize].push(x as u32);
        }
    }
    tick(order.len())?;
    out.sort_unstable_by_key(|&(a, b, _)| (a, b));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(group: u32, words: &[u32]) -> WordSet {
        WordSet {
            group,
            words: words.to_vec(),
        }
    }

    /// Every pair, compared one by one: what the join must equal.
    fn brute(sets: &[WordSet], t: f64) -> Vec<(usize, usize, f32)> {
        let norm = |s: &WordSet| {
            let mut w = s.words.clone();
            w.sort_unstable();
            w.dedup();
            w
        };
        let mut out = Vec::new();
        for i in 0..sets.len() {
            for j in i + 1..sets.len() {
                let (a, b) = (norm(&sets[i]), norm(&sets[j]));
                if sets[i].group != sets[j].group || a.is_empty() || b.is_empty() {
                    continue;
                }
                let s = jaccard(&a, &b);
                if f64::from(s) >= t {
                    out.push((i, j, s));
                }
            }
        }
        out
    }

    #[test]
    fn finds_exactly_the_pairs_at_or_above_the_threshold() {
        let sets = vec![
            set(0, &[1, 2, 3, 4]),
            set(0, &[1, 2, 3, 5]),
            set(0, &[1, 2, 3, 4, 4]),
            set(1, &[1, 2, 3, 4]),
            set(0, &[7, 8]),
            set(0, &[]),
            set(0, &[]),
            set(0, &[9, 1, 2, 3, 4, 5, 6, 10]),
        ];
        let got = similar_pairs(&sets, 0.5, |_| Ok(())).unwrap();
        assert_eq!(got, brute(&sets, 0.5));
        let pairs: Vec<(usize, usize)> = got.iter().map(|&(a, b, _)| (a, b)).collect();
        // 0~1 share 3 of 5; 0~2 are the same set; groups never cross; empty sets pair with none.
        assert_eq!(pairs, vec![(0, 1), (0, 2), (0, 7), (1, 2), (1, 7), (2, 7)]);
    }

    #[test]
    fn agrees_with_comparing_every_pair_on_random_sets() {
        // A small deterministic generator: Zipf-like words (a few very common, many rare), sets
        // of 1–20 words, some near-copies of earlier sets.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut sets: Vec<WordSet> = Vec::new();
        for i in 0..600 {
            let copy = i > 10 && next() % 3 == 0;
            let words = if copy {
                let mut w = sets[(next() % i as u64) as usize].words.clone();
                if !w.is_empty() && next() % 2 == 0 {
                    w.remove((next() % w.len() as u64) as usize);
                }
                w.push((next() % 400) as u32);
                w
            } else {
                let n = 1 + next() % 20;
                (0..n)
                    .map(|_| {
                        let r = (next() % 1000) as f64 / 1000.0;
                        (r * r * r * 400.0) as u32
                    })
                    .collect()
            };
            sets.push(WordSet {
                group: (next() % 3) as u32,
                words,
            });
        }
        for t in [0.3, 0.5, 0.6, 0.8, 1.0] {
            let got = similar_pairs(&sets, t, |_| Ok(())).unwrap();
            assert_eq!(got, brute(&sets, t), "threshold {t}");
        }
        assert!(!brute(&sets, 0.8).is_empty(), "the data has close pairs");
    }

    #[test]
    fn the_callback_can_stop_the_join() {
        let sets = vec![set(0, &[1]), set(0, &[1])];
        let stopped = similar_pairs(&sets, 0.5, |_| Err(crate::error::Error::Cancelled));
        assert!(matches!(stopped, Err(crate::error::Error::Cancelled)));
    }
}
