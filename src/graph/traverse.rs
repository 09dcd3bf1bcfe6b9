//! Traversal from seed memories: breadth-first or best-first (strongest path first), with filters
//! on relation kind, weight and validity, a node budget, and a visitor that sees progress and can
//! stop the walk every few thousand nodes.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::ops::ControlFlow;
use std::sync::Arc;

use petgraph::stable_graph::NodeIndex;

use crate::graph::{Direction, Key, KindId, MemoryGraph};

/// Queue distances at which a breadth-first walk prefetches a node's offsets and its edges.
const PREFETCH_FAR: usize = 16;
const PREFETCH_NEAR: usize = 8;

/// Nodes expanded between two calls of the visitor.
pub const CHECK_EVERY: u64 = 2_048;

/// In which order nodes are expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Level by level: nearest first.
    Breadth,
    /// Strongest path (highest product of strengths) first.
    BestFirst,
}

/// What to follow and how far.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub depth: u8,
    pub direction: Direction,
    /// Only these relation kinds; `None` follows all.
    pub kinds: Option<Vec<KindId>>,
    pub min_weight: f32,
    /// Only relations valid at this time (ms).
    pub valid_at: Option<i64>,
    /// Stop after reaching this many nodes (seeds included).
    pub max_nodes: usize,
    pub order: Order,
    /// Only memories of these keys may be stepped on (a caller limited to some namespaces);
    /// `None`: every memory.
    pub within: Option<Arc<HashSet<Key>>>,
}

impl Spec {
    /// True when the walk may take the edge; reads the edge data only when a filter needs it.
    /// `min_weight` judges the weight a relation was given, not its decayed strength.
    #[inline]
    fn follows(&self, graph: &MemoryGraph, edge: u32) -> bool {
        if self.kinds.is_none() && self.valid_at.is_none() && self.min_weight <= 0.0 {
            return true;
        }
        let e = graph.edge(edge);
        e.weight >= self.min_weight
            && e.valid_at(self.valid_at)
            && self.kinds.as_ref().is_none_or(|k| k.contains(&e.kind))
    }

    /// True when the walk may step on node `m`.
    #[inline]
    fn admits(&self, graph: &MemoryGraph, m: NodeIndex<u32>) -> bool {
        self.within
            .as_ref()
            .is_none_or(|w| w.contains(&graph.key_of(m)))
    }
}

/// Counters the visitor sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Nodes expanded so far.
    pub visited: u64,
    /// Nodes waiting to be expanded.
    pub frontier: u64,
    /// Depth being expanded.
    pub depth: u8,
    pub max_depth: u8,
    /// Nodes reached (expanded or waiting).
    pub reached: u64,
}

/// Watches a walk; returning `Break` stops it (cancellation).
pub trait Visitor {
    fn progress(&mut self, p: &Progress) -> ControlFlow<()>;
}

impl<F: FnMut(&Progress) -> ControlFlow<()>> Visitor for F {
    fn progress(&mut self, p: &Progress) -> ControlFlow<()> {
        self(p)
    }
}

/// One reached memory and how it was reached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reached {
    pub key: Key,
    pub depth: u8,
    /// Product of the strengths along the path from its seed (1 for seeds).
    pub score: f32,
    /// Index in `Outcome::reached` of the node it was reached from.
    pub parent: Option<u32>,
    /// The relation it was reached through (see [`MemoryGraph::edge`]), and whether it was
    /// followed forwards.
    pub via: Option<(u32, bool)>,
}

/// Result of a walk.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Seeds first, then in the order reached.
    pub reached: Vec<Reached>,
    /// The node budget stopped the walk early.
    pub truncated: bool,
    /// The visitor stopped the walk.
    pub cancelled: bool,
    pub progress: Progress,
}

impl Outcome {
    /// The path from a seed to `reached[i]`, as indices into `reached`, seed first.
    pub fn path_to(&self, i: usize) -> Vec<usize> {
        let mut path = vec![i];
        let mut cur = i;
        while let Some(p) = self.reached[cur].parent {
            cur = p as usize;
            path.push(cur);
        }
        path.reverse();
        path
    }
}

#[derive(PartialEq)]
struct Candidate {
    score: f32,
    idx: u32,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.idx.cmp(&self.idx))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Walks from `seeds` (memory keys; those without relations are reached but lead nowhere).
pub fn traverse(
    graph: &MemoryGraph,
    seeds: &[Key],
    spec: &Spec,
    visitor: &mut dyn Visitor,
) -> Outcome {
    let mut out = Outcome::default();
    out.progress.max_depth = spec.depth;
    // slot[node] = index in `reached` + 1; 0 = not reached yet.
    let mut slot: Vec<u32> = vec![0; graph.node_bound()];
    let mut nodes: Vec<Option<NodeIndex<u32>>> = Vec::new();
    for &key in seeds {
        let node = graph.node_of(key);
        if let Some(n) = node {
            if slot[n.index()] != 0 {
                continue;
            }
            slot[n.index()] = out.reached.len() as u32 + 1;
        } else if out.reached.iter().any(|r| r.key == key) {
            continue;
        }
        out.reached.push(Reached {
            key,
            depth: 0,
            score: 1.0,
            parent: None,
            via: None,
        });
        nodes.push(node);
    }
    match spec.order {
        Order::Breadth => breadth(graph, spec, visitor, &mut out, &mut slot, &mut nodes),
        Order::BestFirst => best_first(graph, spec, visitor, &mut out, &mut slot, &mut nodes),
    }
    for (r, n) in out.reached.iter_mut().zip(&nodes) {
        if let Some(n) = n {
            r.key = graph.key_of(*n);
        }
    }
    out.progress.reached = out.reached.len() as u64;
    out
}

/// Every [`CHECK_EVERY`] expanded nodes, shows the visitor the counters; true when it stopped
/// the walk (which is then marked cancelled).
fn checkpoint(out: &mut Outcome, frontier: usize, visitor: &mut dyn Visitor) -> bool {
    if !out.progress.visited.is_multiple_of(CHECK_EVERY) {
        return false;
    }
    out.progress.frontier = frontier as u64;
    out.progress.reached = out.reached.len() as u64;
    out.cancelled = visitor.progress(&out.progress).is_break();
    out.cancelled
}

fn breadth(
    graph: &MemoryGraph,
    spec: &Spec,
    visitor: &mut dyn Visitor,
    out: &mut Outcome,
    slot: &mut [u32],
    nodes: &mut Vec<Option<NodeIndex<u32>>>,
) {
    // A bitset of reached nodes: small enough to stay in cache where `slot` would not.
    let mut seen = vec![0u64; slot.len().div_ceil(64)];
    for (i, s) in slot.iter().enumerate() {
        if *s != 0 {
            seen[i >> 6] |= 1u64 << (i & 63);
        }
    }
    let mut queue: VecDeque<u32> = (0..out.reached.len() as u32).collect();
    while let Some(idx) = queue.pop_front() {
        // Fetch ahead: the offsets of the node 16 places on, the edges of the one 8 places on.
        if let Some(&far) = queue.get(PREFETCH_FAR)
            && let Some(n) = nodes[far as usize]
        {
            graph.prefetch(n, false);
        }
        if let Some(&near) = queue.get(PREFETCH_NEAR)
            && let Some(n) = nodes[near as usize]
        {
            graph.prefetch(n, true);
        }
        let r = out.reached[idx as usize];
        out.progress.visited += 1;
        out.progress.depth = r.depth;
        if checkpoint(out, queue.len(), visitor) {
            return;
        }
        if r.depth >= spec.depth {
            continue;
        }
        let Some(n) = nodes[idx as usize] else {
            continue;
        };
        let mut full = false;
        graph.for_each_adjacent(n, spec.direction, |m, edge, strength, forward| {
            let (word, bit) = (m.index() >> 6, 1u64 << (m.index() & 63));
            if full || seen[word] & bit != 0 || !spec.follows(graph, edge) || !spec.admits(graph, m)
            {
                return;
            }
            if out.reached.len() >= spec.max_nodes {
                full = true;
                return;
            }
            seen[word] |= bit;
            let next = out.reached.len() as u32;
            out.reached.push(Reached {
                key: 0, // filled in after the walk, off the hot loop
                depth: r.depth + 1,
                score: r.score * strength,
                parent: Some(idx),
                via: Some((edge, forward)),
            });
            nodes.push(Some(m));
            queue.push_back(next);
        });
        if full {
            out.truncated = true;
            out.progress.frontier = queue.len() as u64;
            return;
        }
    }
    out.progress.frontier = 0;
}

fn best_first(
    graph: &MemoryGraph,
    spec: &Spec,
    visitor: &mut dyn Visitor,
    out: &mut Outcome,
    slot: &mut [u32],
    nodes: &mut Vec<Option<NodeIndex<u32>>>,
) {
    let mut heap: BinaryHeap<Candidate> = (0..out.reached.len() as u32)
        .map(|idx| Candidate { score: 1.0, idx })
        .collect();
    let mut done = vec![false; out.reached.len()];
    while let Some(Candidate { score, idx }) = heap.pop() {
        let i = idx as usize;
        if done[i] || score < out.reached[i].score {
            continue; // a stronger path to it was expanded already
        }
        done[i] = true;
        let r = out.reached[i];
        out.progress.visited += 1;
        out.progress.depth = out.progress.depth.max(r.depth);
        if checkpoint(out, heap.len(), visitor) {
            return;
        }
        if r.depth >= spec.depth {
            continue;
        }
        let Some(n) = nodes[i] else { continue };
        graph.for_each_adjacent(n, spec.direction, |m, edge, strength, forward| {
            if !spec.follows(graph, edge) || !spec.admits(graph, m) {
                return;
            }
            let s = r.score * strength;
            let seen = slot[m.index()];
            if seen != 0 {
                let j = (seen - 1) as usize;
                if !done[j] && s > out.reached[j].score {
                    out.reached[j].score = s;
                    out.reached[j].depth = r.depth + 1;
                    out.reached[j].parent = Some(idx);
                    out.reached[j].via = Some((edge, forward));
                    heap.push(Candidate {
                        score: s,
                        idx: j as u32,
                    });
                }
                return;
            }
            if out.reached.len() >= spec.max_nodes {
                out.truncated = true;
                return;
            }
            let next = out.reached.len() as u32;
            slot[m.index()] = next + 1;
            out.reached.push(Reached {
                key: graph.key_of(m),
                depth: r.depth + 1,
                score: s,
                parent: Some(idx),
                via: Some((edge, forward)),
            });
            nodes.push(Some(m));
            done.push(false);
            heap.push(Candidate {
                score: s,
                idx: next,
            });
        });
    }
    out.progress.frontier = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::row;

    fn spec(depth: u8, order: Order) -> Spec {
        Spec {
            depth,
            direction: Direction::Out,
            kinds: None,
            min_weight: 0.0,
            valid_at: None,
            max_nodes: 1_000,
            order,
            within: None,
        }
    }

    fn never_stop(_: &Progress) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    // 1 → 2 → 3 → 4, and 1 → 4 weak, 2 → 5 of another kind.
    fn sample() -> MemoryGraph {
        MemoryGraph::from_rows(
            [
                row(1, 1, 2, "a", 0.9),
                row(2, 2, 3, "a", 0.9),
                row(3, 3, 4, "a", 0.9),
                row(4, 1, 4, "a", 0.1),
                row(5, 2, 5, "b", 1.0),
            ],
            5,
        )
    }

    /// Reached keys level by level, sorted within a level (edge order is not part of the contract).
    fn keys(o: &Outcome) -> Vec<Key> {
        let mut by_level: Vec<(u8, Key)> = o.reached.iter().map(|r| (r.depth, r.key)).collect();
        by_level.sort();
        by_level.into_iter().map(|(_, k)| k).collect()
    }

    #[test]
    fn breadth_respects_depth_and_direction() {
        let g = sample();
        let o = traverse(&g, &[1], &spec(1, Order::Breadth), &mut never_stop);
        assert_eq!(keys(&o), [1, 2, 4]);
        let mut s = spec(2, Order::Breadth);
        s.direction = Direction::In;
        let o = traverse(&g, &[4], &s, &mut never_stop);
        assert_eq!(keys(&o), [4, 1, 3, 2]);
        let two = o.reached.iter().position(|r| r.key == 2).unwrap();
        assert_eq!(o.path_to(two).len(), 3);
    }

    #[test]
    fn best_first_prefers_strong_paths() {
        let g = sample();
        let o = traverse(&g, &[1], &spec(3, Order::BestFirst), &mut never_stop);
        let four = o.reached.iter().position(|r| r.key == 4).unwrap();
        assert!((o.reached[four].score - 0.729).abs() < 1e-4);
        assert_eq!(o.reached[four].depth, 3);
        let path: Vec<Key> = o
            .path_to(four)
            .into_iter()
            .map(|i| o.reached[i].key)
            .collect();
        assert_eq!(path, [1, 2, 3, 4]);
    }

    #[test]
    fn filters_on_kind_weight_and_budget() {
        let mut g = sample();
        let b = g.kind_id("b").unwrap();
        let mut s = spec(5, Order::Breadth);
        s.kinds = Some(vec![b]);
        assert_eq!(keys(&traverse(&g, &[2], &s, &mut never_stop)), [2, 5]);
        let mut s = spec(5, Order::Breadth);
        s.min_weight = 0.5;
        assert_eq!(
            keys(&traverse(&g, &[1], &s, &mut never_stop)),
            [1, 2, 3, 5, 4]
        );
        let mut s = spec(5, Order::Breadth);
        s.max_nodes = 2;
        let o = traverse(&g, &[1], &s, &mut never_stop);
        assert!(o.truncated);
        assert_eq!(o.reached.len(), 2);
        g.upsert_edge(&crate::graph::EdgeRow {
            valid_until: Some(100),
            ..row(1, 1, 2, "a", 0.9)
        });
        let mut s = spec(5, Order::Breadth);
        s.valid_at = Some(200);
        assert_eq!(keys(&traverse(&g, &[1], &s, &mut never_stop)), [1, 4]);
    }

    #[test]
    fn visitor_can_cancel_and_sees_growing_counts() {
        let rows = (1..10_000).map(|i| row(i, 0, i, "spoke", 1.0));
        let g = MemoryGraph::from_rows(rows, 10_000);
        let mut seen = Vec::new();
        let mut stop_after_two = |p: &Progress| {
            seen.push(p.visited);
            if seen.len() == 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        let mut s = spec(1, Order::Breadth);
        s.max_nodes = usize::MAX;
        let o = traverse(&g, &[0], &s, &mut stop_after_two);
        assert!(o.cancelled);
        assert_eq!(seen, [CHECK_EVERY, 2 * CHECK_EVERY]);
    }

    #[test]
    fn isolated_and_duplicate_seeds() {
        let g = sample();
        let o = traverse(
            &g,
            &[99, 99, 1, 1],
            &spec(0, Order::Breadth),
            &mut never_stop,
        );
        assert_eq!(keys(&o), [1, 99]);
    }
}
