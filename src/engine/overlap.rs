//! Word overlap: the distinct words of a text and the Jaccard similarity of two such sets, for
//! recall's duplicate collapse and curation's merges and summaries.

/// The distinct lower-cased words (letters and digits) of a text, sorted.
pub(crate) fn word_set(text: &str) -> Vec<String> {
    word_set_borrowed(text)
        .into_iter()
        .map(std::borrow::Cow::into_owned)
        .collect()
}

/// [`word_set`] borrowing the words that are lower-case already (most are): the same words in
/// the same order, with a string only for those that lower-casing changes.
pub(crate) fn word_set_borrowed(text: &str) -> Vec<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    let mut words: Vec<Cow<'_, str>> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            if w.is_ascii() && !w.bytes().any(|b| b.is_ascii_uppercase()) {
                Cow::Borrowed(w)
            } else {
                Cow::Owned(w.to_lowercase())
            }
        })
        .collect();
    words.sort_unstable();
    words.dedup();
    words
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
        assert_eq!(word_set_borrowed("tea Tea"), ["tea"]);
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
