//! The HNSW graph behind the vector index: usearch, holding each vector once as bfloat16 (16
//! bits: a float's 8-bit exponent and its top 8 bits of mantissa), its points keyed by the
//! index's slots.
//!
//! bfloat16 rather than IEEE half precision because the CPU multiplies it directly (AVX-512
//! BF16's `vdpbf16ps`; half precision is widened number by number first): on the built-in
//! model's vectors of 100,000 real conversation turns (`examples/vector_scale.rs --lists`), a
//! search for the 100 a recall asks with a list of 200 took 0.43 ms against 0.60 ms, at
//! recall@10 0.980 against 0.984 (both against an exact scan of the vectors as embedded), in
//! the same memory. One byte a number (`i8`, usearch scaling each vector into ±127) searched in
//! 0.29 ms but reached only 0.942 (0.973 with this index's own scale), and it would make every
//! score coarser.
//!
//! usearch serves concurrent calls from a fixed pool of per-thread contexts, reserved up front,
//! and fails a call that finds none free; a semaphore here keeps calls within the pool, so a
//! burst of searches waits its turn instead of failing. Growing the graph's capacity must not
//! overlap any call: [`Graph::reserve`] takes `&mut self`, which the index's lock provides.

use std::sync::{Condvar, Mutex, PoisonError};

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

/// Links per point in the upper layers (twice as many in layer 0).
pub(super) const CONNECTIVITY: usize = 16;
/// Candidate list while inserting. On 200,000 real 256-d memory embeddings (two cores): 64
/// built 12,900 vectors/s to recall@10 0.62 at a search list of 64, 128 built 6,200/s to 0.68;
/// 32 links per point instead of 16 raised recall by a tenth and cost 35 % of the build rate.
pub(super) const EXPANSION_ADD: usize = 128;
/// Calls the graph serves at once; more wait for a free context.
const CONTEXTS: usize = 32;
/// usearch's own shortest candidate list: a search's list is `max(LIST_FLOOR, count)`, so the
/// index chooses each search's list by the count it asks for.
const LIST_FLOOR: usize = 16;
/// Smallest capacity reserved, in points.
const MIN_CAPACITY: usize = 1_024;

/// Counting semaphore over usearch's per-thread contexts.
struct Permits {
    free: Mutex<usize>,
    freed: Condvar,
}

struct Permit<'a>(&'a Permits);

impl Permits {
    fn take(&self) -> Permit<'_> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

/// An HNSW graph of `dim`-float unit vectors under inner-product distance (1 − dot), keyed by slot.
pub(super) struct Graph {
    index: Index,
    dim: usize,
    /// usearch's per-thread contexts, and as many permits.
    contexts: usize,
    permits: Permits,
}

impl Graph {
    fn options(dim: usize) -> IndexOptions {
        IndexOptions {
            dimensions: dim,
            metric: MetricKind::IP,
            quantization: ScalarKind::BF16,
            connectivity: CONNECTIVITY,
            expansion_add: EXPANSION_ADD,
            // A search's list is the count it asks for (see `Graph::search`).
            expansion_search: LIST_FLOOR,
            multi: false,
        }
    }

    fn with_index(index: Index, dim: usize, contexts: usize) -> Graph {
        Graph {
            index,
            dim,
            contexts,
            permits: Permits {
                free: Mutex::new(contexts),
                freed: Condvar::new(),
            },
        }
    }

    /// An empty graph with room for `capacity` points.
    pub(super) fn new(dim: usize, capacity: usize) -> Result<Graph, String> {
        Graph::with_contexts(dim, capacity, CONTEXTS)
    }

    fn with_contexts(dim: usize, capacity: usize, contexts: usize) -> Result<Graph, String> {
        let index = Index::new(&Graph::options(dim)).map_err(|e| format!("vector graph: {e}"))?;
        let mut graph = Graph::with_index(index, dim, contexts);
        graph.reserve(capacity)?;
        Ok(graph)
    }

    /// The graph saved at `path` (a file [`Graph::save`] wrote and the caller verified).
    pub(super) fn load(path: &str, dim: usize) -> Result<Graph, String> {
        let index = Index::new(&Graph::options(dim)).map_err(|e| format!("vector graph: {e}"))?;
        index
            .load(path)
            .map_err(|e| format!("graph unreadable: {e}"))?;
        if index.dimensions() != dim {
            return Err(format!(
                "graph has {} dimensions, expected {dim}",
                index.dimensions()
            ));
        }
        // The list is the count a search asks for, whatever the file's writer used.
        index.change_expansion_search(LIST_FLOOR);
        let graph = Graph::with_index(index, dim, CONTEXTS);
        // A loaded graph has room for its points but contexts for as many threads as the
        // machine has cores: reserve one per permit, or a search beyond the core count fails.
        let target = graph.len().max(MIN_CAPACITY);
        graph
            .index
            .reserve_capacity_and_threads(target, graph.contexts)
            .map_err(|e| format!("vector graph: cannot reserve {target} points: {e}"))?;
        Ok(graph)
    }

    /// Makes room for at least `points` points (growing by half again, so repeated calls stay
    /// cheap). Exclusive: no other call may run meanwhile.
    pub(super) fn reserve(&mut self, points: usize) -> Result<(), String> {
        let current = self.index.capacity();
        if points <= current && current > 0 {
            return Ok(());
        }
        let target = points.max(current + current / 2).max(MIN_CAPACITY);
        self.index
            .reserve_capacity_and_threads(target, self.contexts)
            .map_err(|e| format!("vector graph: cannot reserve {target} points: {e}"))
    }

    /// Points in the graph.
    pub(super) fn len(&self) -> usize {
        self.index.size()
    }

    /// Inserts the vector of `slot` (a unit vector of `dim` floats), replacing the slot's point
    /// if it has one (a batch retried after a failure halfway). Needs capacity (see
    /// [`Graph::reserve`]).
    pub(super) fn add(&self, slot: u32, vector: &[f32]) -> Result<(), String> {
        let _permit = self.permits.take();
        let key = u64::from(slot);
        if self.index.contains(key) {
            let _ = self.index.remove(key);
        }
        self.index
            .add(key, vector)
            .map_err(|e| format!("vector graph: insert of slot {slot}: {e}"))
    }

    /// Takes `slot` out of the graph (its place is reused by later insertions); absent slots
    /// are ignored.
    pub(super) fn remove(&self, slot: u32) {
        let _permit = self.permits.take();
        // Fails only for a slot that is not there, which is what was asked.
        let _ = self.index.remove(u64::from(slot));
    }

    /// Up to `count` slots nearest to `query`, nearest first, each with its distance
    /// `1 − query · t` (the query rounded to bfloat16 as the points are), found with a
    /// candidate list of `count` (at least [`LIST_FLOOR`]); an error of the graph is returned,
    /// never taken for "nothing near".
    pub(super) fn search(&self, query: &[f32], count: usize) -> Result<Vec<(u32, f32)>, String> {
        let _permit = self.permits.take();
        slots(self.index.search(query, count))
    }

    /// Up to `count` slots that `accept` passes nearest to `query`, as [`Graph::search`]: the
    /// walk goes through every point, and only those passed enter its list of `count`, so it
    /// walks on until it holds `count` of them.
    pub(super) fn filtered_search(
        &self,
        query: &[f32],
        count: usize,
        accept: impl Fn(u32) -> bool,
    ) -> Result<Vec<(u32, f32)>, String> {
        let _permit = self.permits.take();
        slots(
            self.index
                .filtered_search(query, count, |key| u32::try_from(key).is_ok_and(&accept)),
        )
    }

    /// The stored vector of `slot` (rounded to bfloat16), into `out`; false when the slot is
    /// not in the graph.
    pub(super) fn vector(&self, slot: u32, out: &mut [f32]) -> bool {
        debug_assert_eq!(out.len(), self.dim);
        // Widening bfloat16 is a shift, which usearch's cast does a vector at a time.
        matches!(self.index.get(u64::from(slot), out), Ok(1))
    }

    /// Renames `from` to `to` (a slot not in the graph).
    pub(super) fn rename(&self, from: u32, to: u32) -> Result<(), String> {
        let _permit = self.permits.take();
        self.index
            .rename(u64::from(from), u64::from(to))
            .map(|_| ())
            .map_err(|e| format!("vector graph: rename of slot {from}: {e}"))
    }

    /// Writes the graph to `path`.
    pub(super) fn save(&self, path: &str) -> Result<(), String> {
        self.index
            .save(path)
            .map_err(|e| format!("vector graph: save: {e}"))
    }
}

/// A search's answer as slots and their distances, nearest first; its failure as text.
fn slots(
    answer: Result<usearch::ffi::Matches, impl std::fmt::Display>,
) -> Result<Vec<(u32, f32)>, String> {
    let found = answer.map_err(|e| format!("vector graph: search: {e}"))?;
    Ok(found
        .keys
        .iter()
        .zip(&found.distances)
        .map(|(&k, &d)| (k as u32, d))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A slot inserted again (a batch retried after failing halfway) replaces its point.
    #[test]
    fn adding_a_slot_again_replaces_its_point() {
        let mut graph = Graph::new(4, 16).unwrap();
        graph.reserve(16).unwrap();
        graph.add(3, &[1.0, 0.0, 0.0, 0.0]).unwrap();
        graph.add(3, &[0.0, 1.0, 0.0, 0.0]).unwrap();
        assert_eq!(graph.len(), 1);
        let mut out = [0.0; 4];
        assert!(graph.vector(3, &mut out));
        assert_eq!(out, [0.0, 1.0, 0.0, 0.0]);
        let found = graph.search(&[0.0, 1.0, 0.0, 0.0], 5).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, 3);
        assert!(found[0].1.abs() < 1e-6, "distance {}", found[0].1);
    }

    /// Many more callers than contexts: each waits for one instead of failing (usearch fails a
    /// call that finds none free).
    #[test]
    fn callers_beyond_the_contexts_wait_instead_of_failing() {
        const DIM: usize = 64;
        let mut graph = Graph::with_contexts(DIM, 2_000, 2).unwrap();
        let vector = |i: usize| -> Vec<f32> {
            let v: Vec<f32> = (0..DIM)
                .map(|d| ((i * 31 + d * 17) % 97) as f32 - 48.0)
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        };
        for i in 0..2_000 {
            graph.add(i as u32, &vector(i)).unwrap();
        }
        graph.reserve(2_000).unwrap();
        let graph = Arc::new(graph);
        let callers: Vec<_> = (0..16)
            .map(|t| {
                let graph = graph.clone();
                std::thread::spawn(move || {
                    (0..200).all(|n| {
                        graph
                            .search(&vector(t * 200 + n), 10)
                            .is_ok_and(|found| found.len() == 10)
                    })
                })
            })
            .collect();
        for c in callers {
            assert!(c.join().unwrap(), "a search failed for want of a context");
        }
    }
}
