//! Paths between two memories: the strongest path (highest product of weights, fewer hops on ties)
//! and up to `k` loop-free alternatives (Yen's algorithm).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use petgraph::stable_graph::NodeIndex;

use crate::graph::traverse::{CHECK_EVERY, Progress, Visitor};
use crate::graph::{Direction, EdgeData, Key, KindId, MemoryGraph};

/// Cost added per hop, so that among equally strong paths the shorter wins.
const HOP_COST: f64 = 0.01;

/// A path as the search builds it: (node reached, relation followed, forwards?) per hop.
type Steps = Vec<(NodeIndex<u32>, EdgeData, bool)>;

/// One step of a path: the relation followed and whether forwards.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub to: Key,
    pub edge: EdgeData,
    pub forward: bool,
}

/// A path from `from` through `steps`.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub from: Key,
    pub steps: Vec<Step>,
    /// Product of the weights along the path.
    pub strength: f64,
}

impl Path {
    fn cost(&self) -> f64 {
        self.steps.iter().map(|s| edge_cost(&s.edge)).sum()
    }

    fn nodes(&self) -> Vec<Key> {
        std::iter::once(self.from)
            .chain(self.steps.iter().map(|s| s.to))
            .collect()
    }
}

/// What edges a path may use.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    pub direction: Direction,
    pub kinds: Option<Vec<KindId>>,
    pub min_weight: f32,
    pub valid_at: Option<i64>,
    pub max_hops: u8,
    /// Only memories of these keys may be on a path; `None`: every memory.
    pub within: Option<Arc<HashSet<Key>>>,
}

/// The paths found and how much work it took.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PathsOutcome {
    pub paths: Vec<Path>,
    pub cancelled: bool,
    pub progress: Progress,
}

fn edge_cost(e: &EdgeData) -> f64 {
    -(f64::from(e.strength).max(1e-9)).ln() + HOP_COST
}

#[derive(PartialEq)]
struct Item {
    cost: f64,
    node: NodeIndex<u32>,
}

impl Eq for Item {}

impl Ord for Item {
    fn cmp(&self, other: &Self) -> Ordering {
        other.cost.total_cmp(&self.cost)
    }
}

impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

struct Search<'a> {
    graph: &'a MemoryGraph,
    spec: &'a PathSpec,
    progress: Progress,
    cancelled: bool,
}

impl Search<'_> {
    /// Dijkstra from `from` to `to` avoiding `blocked_nodes` and `blocked_edges` (relation keys
    /// with the node they leave from).
    fn shortest(
        &mut self,
        from: NodeIndex<u32>,
        to: NodeIndex<u32>,
        blocked_nodes: &HashSet<NodeIndex<u32>>,
        blocked_edges: &HashSet<(NodeIndex<u32>, i64)>,
        visitor: &mut dyn Visitor,
    ) -> Option<Vec<(NodeIndex<u32>, EdgeData, bool)>> {
        let bound = self.graph.node_bound();
        let mut dist = vec![f64::INFINITY; bound];
        let mut hops = vec![0u8; bound];
        let mut prev: Vec<Option<(NodeIndex<u32>, EdgeData, bool)>> = vec![None; bound];
        let mut heap = BinaryHeap::new();
        dist[from.index()] = 0.0;
        heap.push(Item {
            cost: 0.0,
            node: from,
        });
        while let Some(Item { cost, node }) = heap.pop() {
            if cost > dist[node.index()] {
                continue;
            }
            self.progress.visited += 1;
            if self.progress.visited.is_multiple_of(CHECK_EVERY) {
                self.progress.frontier = heap.len() as u64;
                if visitor.progress(&self.progress).is_break() {
                    self.cancelled = true;
                    return None;
                }
            }
            if node == to {
                break;
            }
            if hops[node.index()] >= self.spec.max_hops {
                continue;
            }
            for (m, e, forward) in self.graph.edges(node, self.spec.direction) {
                if e.weight < self.spec.min_weight
                    || !e.valid_at(self.spec.valid_at)
                    || self
                        .spec
                        .kinds
                        .as_ref()
                        .is_some_and(|k| !k.contains(&e.kind))
                    || blocked_nodes.contains(&m)
                    || self
                        .spec
                        .within
                        .as_ref()
                        .is_some_and(|w| !w.contains(&self.graph.key_of(m)))
                    || blocked_edges.contains(&(node, e.relation))
                {
                    continue;
                }
                let c = cost + edge_cost(e);
                if c < dist[m.index()] {
                    dist[m.index()] = c;
                    hops[m.index()] = hops[node.index()] + 1;
                    prev[m.index()] = Some((node, *e, forward));
                    heap.push(Item { cost: c, node: m });
                }
            }
        }
        if !dist[to.index()].is_finite() {
            return None;
        }
        let mut steps = Vec::new();
        let mut cur = to;
        while cur != from {
            let (p, e, forward) =
                prev[cur.index()].expect("every reached node but the start has a predecessor");
            steps.push((cur, e, forward));
            cur = p;
        }
        steps.reverse();
        Some(steps)
    }
}

fn to_path(graph: &MemoryGraph, from: Key, steps: &[(NodeIndex<u32>, EdgeData, bool)]) -> Path {
    let steps: Vec<Step> = steps
        .iter()
        .map(|&(n, edge, forward)| Step {
            to: graph.key_of(n),
            edge,
            forward,
        })
        .collect();
    let strength = steps.iter().map(|s| f64::from(s.edge.strength)).product();
    Path {
        from,
        steps,
        strength,
    }
}

/// The strongest path from `from` to `to` and up to `k` alternatives, strongest first.
pub fn find_paths(
    graph: &MemoryGraph,
    from: Key,
    to: Key,
    k: usize,
    spec: &PathSpec,
    visitor: &mut dyn Visitor,
) -> PathsOutcome {
    let mut out = PathsOutcome::default();
    let (Some(a), Some(b)) = (graph.node_of(from), graph.node_of(to)) else {
        return out;
    };
    if a == b {
        out.paths.push(Path {
            from,
            steps: Vec::new(),
            strength: 1.0,
        });
        return out;
    }
    let mut search = Search {
        graph,
        spec,
        progress: Progress {
            max_depth: spec.max_hops,
            ..Progress::default()
        },
        cancelled: false,
    };
    let none_n = HashSet::new();
    let none_e = HashSet::new();
    let Some(first) = search.shortest(a, b, &none_n, &none_e, visitor) else {
        out.cancelled = search.cancelled;
        out.progress = search.progress;
        return out;
    };
    let mut found: Vec<Vec<(NodeIndex<u32>, EdgeData, bool)>> = vec![first];
    let mut candidates: Vec<(f64, Steps)> = Vec::new();
    while found.len() <= k {
        let last = found.last().expect("found starts non-empty").clone();
        let last_nodes: Vec<NodeIndex<u32>> =
            std::iter::once(a).chain(last.iter().map(|s| s.0)).collect();
        for i in 0..last.len() {
            let spur = last_nodes[i];
            let root = &last[..i];
            let mut blocked_edges = HashSet::new();
            for p in &found {
                let p_nodes: Vec<NodeIndex<u32>> =
                    std::iter::once(a).chain(p.iter().map(|s| s.0)).collect();
                if p.len() > i && p_nodes[..=i] == last_nodes[..=i] {
                    blocked_edges.insert((spur, p[i].1.relation));
                }
            }
            let blocked_nodes: HashSet<NodeIndex<u32>> = last_nodes[..i].iter().copied().collect();
            if root.len() >= usize::from(spec.max_hops) {
                continue;
            }
            if let Some(tail) = search.shortest(spur, b, &blocked_nodes, &blocked_edges, visitor) {
                let mut total = root.to_vec();
                total.extend(tail);
                if total.len() <= usize::from(spec.max_hops)
                    && !found.contains(&total)
                    && !candidates.iter().any(|(_, c)| *c == total)
                {
                    let cost = total.iter().map(|s| edge_cost(&s.1)).sum();
                    candidates.push((cost, total));
                }
            }
            if search.cancelled {
                break;
            }
        }
        if search.cancelled || candidates.is_empty() {
            break;
        }
        let best = candidates
            .iter()
            .enumerate()
            .min_by(|x, y| x.1.0.total_cmp(&y.1.0))
            .map(|(i, _)| i)
            .expect("candidates is not empty");
        found.push(candidates.swap_remove(best).1);
    }
    out.paths = found.iter().map(|p| to_path(graph, from, p)).collect();
    out.paths.sort_by(|x, y| x.cost().total_cmp(&y.cost()));
    debug_assert!(out.paths.iter().all(|p| {
        let n = p.nodes();
        n.len() == n.iter().collect::<HashSet<_>>().len()
    }));
    out.cancelled = search.cancelled;
    out.progress = search.progress;
    out
}

/// A visitor that never stops the search.
pub fn unbounded(_: &Progress) -> ControlFlow<()> {
    ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::row;

    fn spec() -> PathSpec {
        PathSpec {
            direction: Direction::Out,
            kinds: None,
            min_weight: 0.0,
            valid_at: None,
            max_hops: 8,
            within: None,
        }
    }

    fn nodes(p: &Path) -> Vec<Key> {
        p.nodes()
    }

    #[test]
    fn strongest_path_then_alternatives() {
        // 1→2→4 strong, 1→3→4 medium, 1→4 weak direct.
        let g = MemoryGraph::from_rows(
            [
                row(1, 1, 2, "a", 0.9),
                row(2, 2, 4, "a", 0.9),
                row(3, 1, 3, "a", 0.7),
                row(4, 3, 4, "a", 0.7),
                row(5, 1, 4, "a", 0.2),
            ],
            5,
        );
        let o = find_paths(&g, 1, 4, 5, &spec(), &mut unbounded);
        let all: Vec<Vec<Key>> = o.paths.iter().map(nodes).collect();
        assert_eq!(all, [vec![1, 2, 4], vec![1, 3, 4], vec![1, 4]]);
        assert!((o.paths[0].strength - 0.81).abs() < 1e-6);
        let o = find_paths(&g, 1, 4, 0, &spec(), &mut unbounded);
        assert_eq!(o.paths.len(), 1);
    }

    #[test]
    fn no_path_and_direction() {
        let g = MemoryGraph::from_rows([row(1, 1, 2, "a", 1.0), row(2, 3, 2, "a", 1.0)], 2);
        assert!(
            find_paths(&g, 1, 3, 2, &spec(), &mut unbounded)
                .paths
                .is_empty()
        );
        let mut both = spec();
        both.direction = Direction::Both;
        let o = find_paths(&g, 1, 3, 2, &both, &mut unbounded);
        assert_eq!(
            o.paths.iter().map(nodes).collect::<Vec<_>>(),
            [vec![1, 2, 3]]
        );
        assert!(!o.paths[0].steps[1].forward);
        assert!(
            find_paths(&g, 1, 99, 2, &both, &mut unbounded)
                .paths
                .is_empty()
        );
    }

    #[test]
    fn hop_limit_applies() {
        let g = MemoryGraph::from_rows((0..10).map(|i| row(i, i, i + 1, "n", 1.0)), 10);
        let mut s = spec();
        s.max_hops = 5;
        assert!(
            find_paths(&g, 0, 10, 1, &s, &mut unbounded)
                .paths
                .is_empty()
        );
        s.max_hops = 10;
        assert_eq!(
            find_paths(&g, 0, 10, 1, &s, &mut unbounded).paths[0]
                .steps
                .len(),
            10
        );
    }
}
