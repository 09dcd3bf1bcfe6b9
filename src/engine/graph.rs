//! The engine's copy of the relation graph: loaded from SQLite in one snapshot, then kept in step
//! by replaying the change log before each use (so a traversal sees every committed write).

use std::time::Instant;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::MemoryKey;
use crate::store::changes::{self, ChangeOp};
use crate::store::relations;

/// The loaded graph and the change-log position it reflects.
pub(crate) struct GraphState {
    pub(crate) graph: MemoryGraph,
    pub(crate) seq: i64,
    /// When the graph last changed (the compact adjacency is rebuilt once it has been quiet).
    pub(crate) changed_at: Instant,
}

/// How long the graph must be unchanged before its compact adjacency is rebuilt.
const FREEZE_AFTER_QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// Read access to a loaded graph (holds the read lock).
pub(crate) struct GraphView<'a>(std::sync::RwLockReadGuard<'a, Option<GraphState>>);

impl std::ops::Deref for GraphView<'_> {
    type Target = MemoryGraph;

    fn deref(&self) -> &MemoryGraph {
        &self
            .0
            .as_ref()
            .expect("a view is only made of a loaded graph")
            .graph
    }
}

/// Size and cost of the in-memory graph.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphStats {
    pub nodes: usize,
    pub relations: usize,
    pub bytes_per_relation: f64,
    pub load_ms: f64,
}

impl Engine {
    fn load_graph(&self) -> Result<GraphState> {
        let started = Instant::now();
        let state = self.store.snapshot(|c| {
            let seq = changes::max_seq(c)?;
            let n = relations::count(c)?;
            let mut graph = MemoryGraph::with_capacity(n / 4, n);
            relations::for_each_live_edge(c, |r| {
                graph.add_loaded(
                    r.relation,
                    r.src,
                    r.dst,
                    r.kind,
                    r.weight,
                    r.valid_from,
                    r.valid_until,
                );
            })?;
            let forgotten = relations::forgotten_memory_keys(c)?;
            for key in forgotten {
                graph.remove_node(key);
            }
            graph.freeze();
            Ok(GraphState {
                graph,
                seq,
                changed_at: Instant::now(),
            })
        })?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        *self
            .graph_load_ms
            .lock()
            .map_err(|_| Error::Internal("graph stats lock poisoned".into()))? = ms;
        tracing::info!(
            nodes = state.graph.node_count(),
            relations = state.graph.edge_count(),
            load_ms = ms,
            "relation graph loaded"
        );
        Ok(state)
    }

    /// Loads the graph when not loaded yet, then applies the change log up to now.
    pub fn sync_graph(&self) -> Result<()> {
        let target = self.store.read(changes::max_seq)?;
        {
            let guard = self
                .graph
                .read()
                .map_err(|_| Error::Internal("graph lock poisoned".into()))?;
            if guard.as_ref().is_some_and(|s| s.seq >= target) {
                return Ok(());
            }
        }
        let mut guard = self
            .graph
            .write()
            .map_err(|_| Error::Internal("graph lock poisoned".into()))?;
        let state = match guard.as_mut() {
            Some(s) => s,
            None => guard.insert(self.load_graph()?),
        };
        if state.seq >= target {
            return Ok(());
        }
        self.store.snapshot(|c| {
            let target = changes::max_seq(c)?;
            for change in changes::since(c, state.seq, target)? {
                apply(c, &mut state.graph, change)?;
            }
            state.seq = target;
            state.changed_at = Instant::now();
            Ok(())
        })
    }

    /// Rebuilds the compact adjacency of a graph that has been quiet for a while (background job).
    pub(crate) fn freeze_graph_if_quiet(&self) -> Result<()> {
        let quiet = {
            let guard = self
                .graph
                .read()
                .map_err(|_| Error::Internal("graph lock poisoned".into()))?;
            guard.as_ref().is_some_and(|s| {
                !s.graph.is_frozen() && s.changed_at.elapsed() >= FREEZE_AFTER_QUIET
            })
        };
        if quiet {
            let mut guard = self
                .graph
                .write()
                .map_err(|_| Error::Internal("graph lock poisoned".into()))?;
            if let Some(s) = guard.as_mut() {
                let started = Instant::now();
                s.graph.freeze();
                tracing::debug!(
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "graph adjacency compacted"
                );
            }
        }
        Ok(())
    }

    /// A read view of the graph, synced with every write committed before the call.
    pub(crate) fn synced_graph(&self) -> Result<GraphView<'_>> {
        self.sync_graph()?;
        let guard = self
            .graph
            .read()
            .map_err(|_| Error::Internal("graph lock poisoned".into()))?;
        if guard.is_none() {
            return Err(Error::Internal("graph not loaded".into()));
        }
        Ok(GraphView(guard))
    }

    /// Runs `f` on the graph, synced with every write committed before the call.
    pub fn with_graph<T>(&self, f: impl FnOnce(&MemoryGraph) -> T) -> Result<T> {
        let view = self.synced_graph()?;
        Ok(f(&view))
    }

    /// Nodes, relations and memory of the in-memory graph.
    pub fn graph_stats(&self) -> Result<GraphStats> {
        let load_ms = *self
            .graph_load_ms
            .lock()
            .map_err(|_| Error::Internal("graph stats lock poisoned".into()))?;
        self.with_graph(|g| GraphStats {
            nodes: g.node_count(),
            relations: g.edge_count(),
            bytes_per_relation: g.bytes_per_relation(),
            load_ms,
        })
    }
}

fn apply(c: &rusqlite::Connection, g: &mut MemoryGraph, change: changes::Change) -> Result<()> {
    match (change.op, change.memory, change.relation) {
        (ChangeOp::Relation, _, Some(r)) => {
            if let Some((edge, live)) = relations::edge(c, r)? {
                if live {
                    g.upsert_edge(&edge);
                } else {
                    g.remove_edge(edge.relation, edge.src, edge.dst);
                }
            }
        }
        (ChangeOp::Delete, Some(m), _) => g.remove_node(m.0),
        (ChangeOp::Upsert, Some(m), _) if g.node_of(m.0).is_none() => {
            // A restored memory gets its relations back.
            for edge in relations::live_edges_around(c, MemoryKey(m.0))? {
                g.upsert_edge(&edge);
            }
        }
        _ => {}
    }
    Ok(())
}
