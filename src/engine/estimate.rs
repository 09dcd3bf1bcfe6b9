//! Cost estimates of graph work before it runs, from a small sample of frontier growth, so the
//! server can decide between answering inline and handing back a task.

use std::ops::ControlFlow;

use crate::engine::Engine;
use crate::engine::traverse::{PathRequest, Shape, TraverseRequest};
use crate::error::Result;
use crate::graph::traverse::{Order, Progress, Spec, traverse};
use crate::graph::{Direction, MemoryGraph};
use crate::model::{MemoryKey, MemoryRef};

/// Depth the sampler walks to measure growth.
const SAMPLE_DEPTH: u8 = 2;
/// Node budget of the sample.
const SAMPLE_NODES: usize = 20_000;
/// Cost of expanding one node of a plain walk, in microseconds.
const WALK_US: f64 = 0.25;
/// Extra cost of scoring one reached memory against `focus` (a database read and analysis).
const FOCUS_US: f64 = 12.0;
/// Extra cost per reached node of best-first order and path bookkeeping.
const PATHS_US: f64 = 0.4;
/// Extra cost per reached node of collecting subgraph edges.
const SUBGRAPH_US: f64 = 0.3;
/// Cost of one node settled by a path search (heap and distance arrays).
const DIJKSTRA_US: f64 = 0.6;

/// Cost of loading one relation into the in-memory graph, in microseconds (≈ 0.4 measured at
/// 1,000,000 relations on the reference machine; rounded up for a busy one).
const LOAD_US: f64 = 0.6;
/// Below this expected load time, an estimate loads the graph and measures the walk itself.
const LOAD_INLINE_MS: f64 = 50.0;

/// What a call is expected to cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub ms: f64,
    /// Memories the walk is expected to reach.
    pub reach: f64,
    /// One line on how the figure came about (shown in `_meta` and logs).
    pub basis: String,
}

fn sample_reach(
    graph: &MemoryGraph,
    seeds: &[i64],
    direction: Direction,
    kinds: Option<Vec<u32>>,
    depth: u8,
    cap: usize,
) -> (f64, String) {
    let spec = Spec {
        depth: depth.min(SAMPLE_DEPTH),
        direction,
        kinds,
        min_weight: 0.0,
        valid_at: None,
        max_nodes: SAMPLE_NODES,
        order: Order::Breadth,
        within: None,
    };
    let mut never = |_: &Progress| ControlFlow::Continue(());
    let o = traverse(graph, seeds, &spec, &mut never);
    let mut levels = [0f64; (SAMPLE_DEPTH + 1) as usize];
    for r in &o.reached {
        levels[r.depth as usize] += 1.0;
    }
    let sampled = o.reached.len() as f64;
    let limit = (graph.node_count() as f64 + seeds.len() as f64).min(cap as f64);
    if o.truncated || depth <= SAMPLE_DEPTH {
        let basis = format!(
            "sampled {sampled:.0} nodes{}",
            if o.truncated { " (sample cap hit)" } else { "" }
        );
        let reach = if o.truncated {
            limit.max(sampled)
        } else {
            sampled
        };
        return (reach.min(limit), basis);
    }
    let growth = if levels[1] > 0.0 {
        (levels[2] / levels[1]).max(levels[1] / levels[0].max(1.0))
    } else {
        0.0
    };
    let mut reach = sampled;
    let mut level = levels[2];
    for _ in SAMPLE_DEPTH..depth {
        level *= growth;
        reach += level;
        if reach >= limit {
            break;
        }
    }
    (
        reach.min(limit),
        format!("frontier grows ×{growth:.1} per hop"),
    )
}

impl Engine {
    /// When the relation graph is not in memory yet and loading it is not quick, the cost of
    /// loading it and of the walk at its bound: a large call then becomes a task at once, and
    /// the task waits for the graph instead of the caller.
    ///
    /// Without the graph the walk cannot be sampled: it is taken at its bound, `max_nodes` nodes
    /// (at most one per relation) at `per_node` µs each.
    fn unloaded_graph(&self, max_nodes: usize, per_node: f64) -> Result<Option<Estimate>> {
        if self.graph_loaded() {
            return Ok(None);
        }
        let relations = self
            .store
            .read(crate::store::relations::approximate_count)?;
        let load_ms = relations as f64 * LOAD_US / 1e3;
        let reach = max_nodes.min(relations + 1) as f64;
        let ms = load_ms + reach * per_node / 1e3;
        Ok((load_ms >= LOAD_INLINE_MS).then(|| Estimate {
            ms,
            reach,
            basis: format!(
                "the relation graph (~{relations} relations) is loading (~{load_ms:.0} ms); then up to {reach:.0} nodes × {per_node:.1} µs"
            ),
        }))
    }

    /// Expected cost of a traversal (seeds must exist; see [`Engine::check_traverse`]).
    pub fn estimate_traverse(
        &self,
        req: &TraverseRequest,
        seeds: &[MemoryKey],
    ) -> Result<Estimate> {
        let mut per_node = WALK_US;
        if req.focus.is_some() {
            per_node += FOCUS_US;
        }
        match req.shape {
            Shape::Paths => per_node += PATHS_US,
            Shape::Subgraph => per_node += SUBGRAPH_US,
            Shape::Nodes => {}
        }
        if let Some(loading) = self.unloaded_graph(req.max_nodes, per_node)? {
            return Ok(loading);
        }
        let view = self.synced_graph()?;
        let graph: &MemoryGraph = &view;
        let keys: Vec<i64> = seeds.iter().map(|k| k.0).collect();
        let kinds = (!req.kinds.is_empty()).then(|| {
            req.kinds
                .iter()
                .map(|k| graph.kind_id(k).unwrap_or(u32::MAX))
                .collect()
        });
        let (reach, basis) =
            sample_reach(graph, &keys, req.direction, kinds, req.depth, req.max_nodes);
        let ms = reach * per_node / 1e3 + req.limit as f64 * 0.02;
        Ok(Estimate {
            ms,
            reach,
            basis: format!("{basis}; ~{reach:.0} nodes × {per_node:.1} µs"),
        })
    }

    /// Expected cost of a path search: every node within `max_hops` may be settled, k + 1 times.
    pub fn estimate_paths(
        &self,
        from: &MemoryRef,
        spec: &PathRequest,
        k: usize,
    ) -> Result<Estimate> {
        let key = self
            .store
            .read(|c| crate::engine::write::lookup(c, from, false))?
            .map(|m| m.key.0);
        if key.is_some()
            && let Some(loading) = self.unloaded_graph(usize::MAX, DIJKSTRA_US * (k + 1) as f64)?
        {
            return Ok(loading);
        }
        let view = self.synced_graph()?;
        let graph: &MemoryGraph = &view;
        let Some(key) = key else {
            return Ok(Estimate {
                ms: 0.0,
                reach: 0.0,
                basis: "unknown start".into(),
            });
        };
        let (reach, basis) = sample_reach(
            graph,
            &[key],
            spec.direction,
            None,
            spec.max_hops,
            usize::MAX,
        );
        let runs = (k + 1) as f64;
        Ok(Estimate {
            ms: reach * DIJKSTRA_US * runs / 1e3,
            reach,
            basis: format!("{basis}; ~{reach:.0} nodes × {runs} searches"),
        })
    }
}
