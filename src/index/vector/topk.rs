//! Which keys a search may return ([`Scope`], and [`ScopeFilter`] for candidates scored outside
//! the index) and the k best hits of a ranking ([`TopK`]), best first with ties broken by key.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};
use std::fmt;

use super::distance::*;

/// Which keys a search may return.
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    /// Every live key.
    All,
    /// Only these keys (duplicates and unknown keys are fine); always answered by an exact scan.
    Keys(&'a [u64]),
    /// Only keys the function accepts. It is called many times per search, from the searching
    /// thread (also from inside the graph library's walk, where a panic aborts the process), and
    /// should be cheap.
    Predicate(&'a (dyn Fn(u64) -> bool + Sync)),
    /// Only keys whose memory is in one of these namespaces, as [`VectorIndex::place`] recorded
    /// them, and keys whose namespace is not recorded (the caller checks what it gets).
    ///
    /// [`VectorIndex::place`]: super::VectorIndex::place
    Namespaces(&'a [String]),
}

impl fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::All => f.write_str("All"),
            Scope::Keys(keys) => write!(f, "Keys({} keys)", keys.len()),
            Scope::Predicate(_) => f.write_str("Predicate"),
            Scope::Namespaces(names) => write!(f, "Namespaces({names:?})"),
        }
    }
}

/// Whether a key is in a search's scope, for candidates scored outside the index.
pub(crate) enum ScopeFilter<'a> {
    All,
    Keys(HashSet<u64>),
    Few(&'a [u64]),
    Predicate(&'a (dyn Fn(u64) -> bool + Sync)),
}

impl<'a> ScopeFilter<'a> {
    /// A filter for `n_tested` keys to come (a short key list is searched, a long one hashed).
    pub(crate) fn new(scope: &Scope<'a>, n_tested: usize) -> ScopeFilter<'a> {
        match *scope {
            Scope::All => ScopeFilter::All,
            Scope::Keys(keys) if keys.len().saturating_mul(n_tested) <= 100_000 => {
                ScopeFilter::Few(keys)
            }
            Scope::Keys(keys) => ScopeFilter::Keys(keys.iter().copied().collect()),
            Scope::Predicate(accept) => ScopeFilter::Predicate(accept),
            // A key's namespace is not known outside the index: every key passes, as a key not
            // placed passes inside it, and the caller checks what it gets.
            Scope::Namespaces(_) => ScopeFilter::All,
        }
    }

    pub(crate) fn accepts(&self, key: u64) -> bool {
        match self {
            ScopeFilter::All => true,
            ScopeFilter::Keys(set) => set.contains(&key),
            ScopeFilter::Few(keys) => keys.contains(&key),
            ScopeFilter::Predicate(accept) => accept(key),
        }
    }
}

/// One result while ranking.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hit {
    pub(super) score: f32,
    pub(super) key: u64,
}

/// Best first: higher score, then lower key (so equal scores rank the same way every time).
pub(super) fn rank(a: &Hit, b: &Hit) -> Ordering {
    b.score.total_cmp(&a.score).then(a.key.cmp(&b.key))
}

/// Heap entry whose maximum is the worst hit kept.
pub(super) struct Worst(Hit);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        rank(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        rank(&self.0, &other.0)
    }
}

/// The k best hits seen so far.
pub(super) struct TopK {
    pub(super) k: usize,
    pub(super) heap: BinaryHeap<Worst>,
}

impl TopK {
    pub(super) fn new(k: usize) -> TopK {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(1_024) + 1),
        }
    }

    pub(super) fn push(&mut self, hit: Hit) {
        if self.heap.len() < self.k {
            self.heap.push(Worst(hit));
        } else if let Some(worst) = self.heap.peek()
            && rank(&hit, &worst.0) == Ordering::Less
        {
            self.heap.pop();
            self.heap.push(Worst(hit));
        }
    }

    pub(super) fn into_sorted(self) -> Vec<Hit> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|w| w.0)
            .collect()
    }
}

/// The `k` best of `(key, dot product)` pairs, best first (ties by key), scored as searches
/// score them (for candidates scored outside the index).
pub(crate) fn best_of(k: usize, dots: impl Iterator<Item = (u64, f32)>) -> Vec<(u64, f32)> {
    let mut top = TopK::new(k);
    for (key, dot) in dots {
        top.push(Hit {
            score: similarity(distance(dot)),
            key,
        });
    }
    top.into_sorted()
        .into_iter()
        .map(|h| (h.key, h.score))
        .collect()
}
