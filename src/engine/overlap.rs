//! Word overlap: the distinct words of a text and the Jaccard similarity of two such sets, for
//! recall's duplicate collapse and curation's merges and summaries.

use crate::fnv;

/// The distinct lower-cased words (letters and digits) of a text, sorted.
pub(crate) fn word_set(text: &str) -> Vec<String> {
    let mut words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    words.sort_unstable();
    words.dedup();
    words
}

/// The words [`word_set`] finds, each as a 64-bit hash of its lower-cased form, sorted and
/// distinct: for recall's duplicate collapse, which compares the sets of its first hits pair by
/// pair and needs no word back. Two different words share a hash with odds of 2⁻⁶⁴ a pair. Text
/// all ASCII (most) is read byte by byte, lower-cased as it is hashed, no string made.
pub(crate) fn word_hashes(text: &str) -> Vec<u64> {
    let mut words = Vec::with_capacity(text.len() / 5);
    if text.is_ascii() {
        let mut h = None;
        for &b in text.as_bytes() {
            if b.is_ascii_alphanumeric() {
                h = Some(fnv::step(h.unwrap_or(fnv::OFFSET), b.to_ascii_lowercase()));
            } else if let Some(w) = h.take() {
                words.push(w);
            }
        }
        words.extend(h);
    } else {
        for w in text.split(|c: char| !c.is_alphanumeric()) {
            if !w.is_empty() {
                words.push(word_hash(&w.to_lowercase()));
            }
        }
    }
    words.sort_unstable();
    words.dedup();
    words
}

/// The 64-bit FNV-1a hash of a word as it is.
fn word_hash(w: &str) -> u64 {
    fnv::hash(w.as_bytes())
}

/// `J(a, b)`, shared over all, of two sorted lists without repeats (1 when both are empty).
pub(crate) fn jaccard<T: Ord>(a: &[T], b: &[T]) -> f32 {
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - shared;
    if union == 0 {
        return 1.0;
    }
    shared as f32 / union as f32
}

/// Whether two sets of `a` and `b` words may reach Jaccard similarity `t`: they share at most
/// the smaller count among at least the larger, so `J ≤ min / max` (with room for the rounding
/// of the `f32` quotient, so no pair that reaches `t` is ever skipped).
pub(crate) fn may_reach(a: usize, b: usize, t: f32) -> bool {
    let (lo, hi) = (a.min(b) as f64, a.max(b) as f64);
    lo >= (f64::from(t) - 1e-6) * hi
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn word_sets_are_lower_cased_sorted_and_distinct() {
        assert_eq!(
            word_set("Tea, tea and TEA; Straße or STRASSE? Ünïcode ünïcode 42"),
            ["42", "and", "or", "strasse", "straße", "tea", "ünïcode"]
        );
        let hashed = |t: &str| {
            let mut h: Vec<u64> = word_set(t).iter().map(|w| word_hash(w)).collect();
            h.sort_unstable();
            h
        };
        for t in [
            "Tea, tea and TEA; Straße or STRASSE? Ünïcode ünïcode 42",
            "The cat, the CAT; 3 cats",
            "tea Tea",
            "",
            "  ,;  ",
            "end with a word",
            "x",
        ] {
            assert_eq!(word_hashes(t), hashed(t), "{t:?}");
        }
    }

    #[test]
    fn word_overlap_skips_only_pairs_that_cannot_reach_it() {
        // Every pair of texts over a small vocabulary: the merge gives what sets give, and the
        // size bound never skips a pair at or above the threshold.
        let vocab = ["a", "B", "c", "d", "e", "f", "g", "h", "i", "j", "k"];
        let texts: Vec<String> = (1u32..1 << 11)
            .step_by(7)
            .map(|m| {
                let mut words: Vec<&str> = (0..11)
                    .filter(|b| m >> b & 1 == 1)
                    .map(|b| vocab[b])
                    .collect();
                words.push(words[0]); // a repeat counts once
                words.join(", ")
            })
            .collect();
        let (mut skipped, mut reached) = (0, 0);
        for a in &texts {
            for b in &texts {
                let (wa, wb) = (word_set(a), word_set(b));
                let sets = |w: &[String]| w.iter().cloned().collect::<HashSet<String>>();
                let (sa, sb) = (sets(&wa), sets(&wb));
                let want = sa.intersection(&sb).count() as f32 / sa.union(&sb).count() as f32;
                assert_eq!(jaccard(&wa, &wb), want, "{a:?} / {b:?}");
                assert_eq!(jaccard(&word_hashes(a), &word_hashes(b)), want);
                for t in [0.5, 0.75, 0.9] {
                    if !may_reach(wa.len(), wb.len(), t) {
                        skipped += 1;
                        assert!(want < t, "{a:?} / {b:?} at {t}");
                    } else if want >= t {
                        reached += 1;
                    }
                }
            }
        }
        assert!(skipped > 0 && reached > 0);
        assert_eq!(jaccard::<String>(&[], &[]), 1.0);
        assert_eq!(
            word_set("The cat, the CAT; 3 cats"),
            ["3", "cat", "cats", "the"]
        );
    }
}
