//! The engine's copy of the relation graph: read from its file beside the database when that file
//! belongs to this database's history (else loaded from SQLite in one snapshot), then kept in step
//! by replaying the change log before each use (so a traversal sees every committed write). The
//! file is rewritten when the graph has moved and been quiet for a while, and at close.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::Engine;
use crate::error::Result;
use crate::graph::MemoryGraph;
use crate::index::graph_file;
use crate::lock;
use crate::model::MemoryKey;
use crate::store::changes::{self, ChangeOp};
use crate::store::{Db, relations};

/// The engine's copy of the relation graph, one component: the loaded graph, the lock that lets
/// one caller load it, and how long the last load took.
///
/// Lock order: `loading` → `state` → the store's writer or reader pool. No vector lock is held
/// with any of them; walks hold an `Arc` snapshot of the graph, not its lock.
#[derive(Default)]
pub(crate) struct Graph {
    /// The loaded graph, or none before the first use.
    state: std::sync::RwLock<Option<GraphState>>,
    /// Milliseconds the last load took.
    load_ms: std::sync::Mutex<f64>,
    /// Held while the graph loads, so two callers do not both load it.
    loading: std::sync::Mutex<()>,
}

impl Graph {
    /// True when the graph is in memory (walks need not load it first).
    fn loaded(&self) -> bool {
        lock::read_or_reset(&self.state, unload).is_some()
    }

    /// The right to load the graph, waiting for whoever loads it.
    fn one_loader(&self) -> std::sync::MutexGuard<'_, ()> {
        lock::lock(&self.loading)
    }

    /// Notes how long the last load took.
    fn loaded_in(&self, ms: f64) {
        *lock::lock(&self.load_ms) = ms;
    }

    /// The loaded graph, to change it (keep the guard short: walks hold snapshots, not this).
    fn state_mut(&self) -> std::sync::RwLockWriteGuard<'_, Option<GraphState>> {
        lock::write_or_reset(&self.state, unload)
    }

    /// True while another caller loads the graph.
    fn being_loaded(&self) -> bool {
        matches!(
            self.loading.try_lock(),
            Err(std::sync::TryLockError::WouldBlock)
        )
    }

    /// The loaded graph when it holds the change log up to `target` and strengths of `day`.
    fn current(&self, target: i64, day: i32) -> Option<GraphView> {
        let guard = lock::read_or_reset(&self.state, unload);
        guard
            .as_ref()
            .filter(|s| s.seq >= target && s.graph.today() == day)
            .map(|s| GraphView(Arc::clone(&s.graph)))
    }

    /// A snapshot of the graph and its position when the file beside the database is due (see
    /// [`Engine::write_graph_file_if_due`]).
    fn file_due(&self, force: bool) -> Option<(Arc<MemoryGraph>, i64)> {
        let guard = lock::read_or_reset(&self.state, unload);
        let s = guard.as_ref()?;
        let due = s.seq > s.file_seq
            && (force
                || s.file_tried_at.is_none_or(|t| {
                    t.elapsed() >= FILE_EVERY && s.changed_at.elapsed() >= FREEZE_AFTER_QUIET
                }));
        due.then(|| (Arc::clone(&s.graph), s.seq))
    }

    /// Notes a try to write the file at `seq` (`written`: it succeeded).
    fn file_tried(&self, seq: i64, written: bool) {
        let mut guard = lock::write_or_reset(&self.state, unload);
        if let Some(s) = guard.as_mut() {
            // Also after a failure: tried again after the interval, not on every tick.
            s.file_tried_at = Some(Instant::now());
            if written {
                s.file_seq = s.file_seq.max(seq);
            }
        }
    }

    /// A snapshot of the graph when it has been quiet for a while and its compact adjacency is
    /// not built yet.
    fn quiet_unfrozen(&self) -> Option<Arc<MemoryGraph>> {
        let guard = lock::read_or_reset(&self.state, unload);
        guard
            .as_ref()
            .filter(|s| !s.graph.is_frozen() && s.changed_at.elapsed() >= FREEZE_AFTER_QUIET)
            .map(|s| Arc::clone(&s.graph))
    }

    /// Installs a compact adjacency when nothing changed since it was built and no walk still
    /// holds the graph; returns whether it did.
    fn install_compact(&self, compact: crate::graph::Compact) -> bool {
        let mut guard = lock::write_or_reset(&self.state, unload);
        guard
            .as_mut()
            .and_then(|s| Arc::get_mut(&mut s.graph))
            .is_some_and(|g| g.install_compact(compact))
    }

    /// Whether the loaded graph was read from the file, and how long the last load took.
    fn origin(&self) -> (bool, f64) {
        let from_file = lock::read_or_reset(&self.state, unload)
            .as_ref()
            .is_some_and(|s| s.from_file);
        (from_file, *lock::lock(&self.load_ms))
    }

    /// Panics while holding the graph's write lock (tests of lock recovery).
    #[cfg(test)]
    pub(crate) fn panic_holding_state(&self) {
        let _g = self.state.write();
        panic!("forced");
    }
}

/// The loaded graph and the change-log position it reflects.
pub(crate) struct GraphState {
    /// Shared with the walks running on it: a change copies it when a walk still holds it, so a
    /// walk never holds the lock and never sees a change half-way.
    pub(crate) graph: Arc<MemoryGraph>,
    pub(crate) seq: i64,
    /// When the graph last changed (the compact adjacency is rebuilt once it has been quiet).
    pub(crate) changed_at: Instant,
    /// Change-log position of the graph file on disk as far as this process knows (-1: none).
    file_seq: i64,
    /// When this process last wrote the file or tried to (`None`: never).
    file_tried_at: Option<Instant>,
    /// Whether this graph was read from the file (else loaded from the database).
    from_file: bool,
}

/// How long the graph must be unchanged before its compact adjacency is rebuilt.
const FREEZE_AFTER_QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// How often the graph file is rewritten while the graph moves (besides at close).
const FILE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Changes after the file's position replayed at load rather than scanning the relations table:
/// at least this many, else a 25th of the file's relations (replaying one change costs about as
/// much as scanning 25 relations).
const REPLAY_MIN: i64 = 1_000;
const REPLAY_PER_RELATION: i64 = 25;

/// A snapshot of the loaded graph: the graph as of the call, immutable, held without a lock.
pub(crate) struct GraphView(Arc<MemoryGraph>);

impl std::ops::Deref for GraphView {
    type Target = MemoryGraph;

    fn deref(&self) -> &MemoryGraph {
        &self.0
    }
}

/// Size and cost of the in-memory graph.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphStats {
    pub nodes: usize,
    pub relations: usize,
    pub bytes_per_relation: f64,
    pub load_ms: f64,
    /// Whether the graph was read from its file (else loaded from the database).
    pub from_file: bool,
}

/// A graph a panic may have left half-changed is dropped and loaded again.
fn unload(state: &mut Option<GraphState>) {
    *state = None;
}

impl Engine {
    fn load_graph(&self) -> Result<GraphState> {
        let started = Instant::now();
        let state = match self.graph_from_file() {
            Some(state) => state,
            None => self.graph_from_database()?,
        };
        let ms = started.elapsed().as_secs_f64() * 1e3;
        self.graph.loaded_in(ms);
        tracing::info!(
            nodes = state.graph.node_count(),
            relations = state.graph.edge_count(),
            load_ms = ms,
            from_file = state.from_file,
            "relation graph loaded"
        );
        Ok(state)
    }

    /// The graph of the file beside the database, when there is one of this database's history
    /// and not too far behind; the changes after it are replayed by the caller.
    fn graph_from_file(&self) -> Option<GraphState> {
        let (position, mut graph) = match graph_file::read(&self.cfg.index_dir) {
            Ok(Some(read)) => read,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "graph file unusable; loading the graph from the database");
                return None;
            }
        };
        let replay_max = REPLAY_MIN.max(graph.edge_count() as i64 / REPLAY_PER_RELATION);
        let usable =
            self.store.read(|c| {
                Ok(changes::follows(c, &position)?
                    && changes::max_seq(c)? - position.seq <= replay_max)
            });
        match usable {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(
                    seq = position.seq,
                    "graph file is from another history or far behind; loading the graph from the database"
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not check the graph file; loading the graph from the database");
                return None;
            }
        }
        graph.set_today(today());
        // Before any walk can hold it: the compact adjacency of a graph a walk holds could not
        // be installed.
        graph.freeze();
        Some(GraphState {
            graph: Arc::new(graph),
            seq: position.seq,
            changed_at: Instant::now(),
            file_seq: position.seq,
            file_tried_at: Some(Instant::now()),
            from_file: true,
        })
    }

    fn graph_from_database(&self) -> Result<GraphState> {
        self.store.snapshot(|c| {
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
                    r.reinforced_at,
                    r.valid_from,
                    r.valid_until,
                );
            })?;
            let forgotten = relations::forgotten_memory_keys(c)?;
            for key in forgotten {
                graph.remove_node(key);
            }
            graph.set_today(today());
            // Before any walk can hold it: the compact adjacency of a graph a walk holds could
            // not be installed.
            graph.freeze();
            Ok(GraphState {
                graph: Arc::new(graph),
                seq,
                changed_at: Instant::now(),
                file_seq: -1,
                file_tried_at: None,
                from_file: false,
            })
        })
    }

    /// Writes the graph file when the graph is loaded and moved past it.
    pub(crate) fn close_graph(&self) -> Result<()> {
        self.write_graph_file_if_due(true)
    }

    /// What closing does that the next start reads, for a process that ends while another
    /// thread still holds the engine (so it is never dropped): the graph file written, the
    /// database's write-ahead log checkpointed.
    pub fn prepare_exit(&self) -> Result<()> {
        let graph = self.close_graph();
        self.store.checkpoint()?;
        graph
    }

    /// Writes the graph file when the graph moved past it and `force` (at close), this process
    /// never tried (right after a load from the database), or the graph has been quiet for a
    /// while and the last try is long enough ago. The graph is written from a snapshot, without
    /// holding the lock.
    pub(crate) fn write_graph_file_if_due(&self, force: bool) -> Result<()> {
        let Some((graph, seq)) = self.graph.file_due(force) else {
            return Ok(());
        };
        let Some(position) = self.store.read(|c| changes::position_at(c, seq))? else {
            return Ok(());
        };
        let started = Instant::now();
        let written = graph_file::write(&self.cfg.index_dir, &position, &graph);
        self.graph.file_tried(seq, written.is_ok());
        written?;
        tracing::debug!(
            relations = graph.edge_count(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "graph file written"
        );
        Ok(())
    }

    /// True when the graph is in memory (walks need not load it first).
    pub(crate) fn graph_loaded(&self) -> bool {
        self.graph.loaded()
    }

    /// Loads the graph when not loaded yet, then applies the change log up to now.
    pub fn sync_graph(&self) -> Result<()> {
        self.synced_graph().map(drop)
    }

    /// Rebuilds the compact adjacency of a graph that has been quiet for a while (background
    /// job). Built on a snapshot without holding the lock; installed only if nothing changed
    /// and no walk still holds the old snapshot (else a later tick tries again).
    pub(crate) fn freeze_graph_if_quiet(&self) -> Result<()> {
        let Some(snapshot) = self.graph.quiet_unfrozen() else {
            return Ok(());
        };
        let started = Instant::now();
        let compact = snapshot.build_compact();
        drop(snapshot);
        let installed = self.graph.install_compact(compact);
        tracing::debug!(
            ms = started.elapsed().as_secs_f64() * 1e3,
            installed,
            "graph adjacency compacted"
        );
        Ok(())
    }

    /// [`Engine::synced_graph`] for work that can be cancelled: while another thread (the
    /// background job) loads the graph, waits for it checking `cancelled` every 10 ms, so a
    /// task cancelled meanwhile ends at once.
    pub(crate) fn synced_graph_or_cancelled(
        &self,
        cancelled: impl Fn() -> bool,
    ) -> Result<GraphView> {
        while !self.graph_loaded() {
            if cancelled() {
                return Err(crate::error::Error::Cancelled);
            }
            if !self.graph.being_loaded() {
                // Nobody loads it: this call does.
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.synced_graph()
    }

    /// A snapshot of the graph with every write committed before the call.
    pub(crate) fn synced_graph(&self) -> Result<GraphView> {
        self.synced_graph_at(self.store.read(changes::max_seq)?)
    }

    /// A snapshot of the graph with at least the change log up to `target`, a head the caller
    /// read after its call began (so the snapshot holds every write committed before it).
    pub(crate) fn synced_graph_at(&self, target: i64) -> Result<GraphView> {
        let day = today();
        if let Some(view) = self.graph.current(target, day) {
            return Ok(view);
        }
        if !self.graph_loaded() {
            // Loaded outside the lock (a second or so at a million relations), so calls that
            // only ask whether it is loaded, or could use an older snapshot, never wait for it.
            let _one_loader = self.graph.one_loader();
            if !self.graph_loaded() {
                let loaded = self.load_graph()?;
                let mut guard = self.graph.state_mut();
                if guard.is_none() {
                    *guard = Some(loaded);
                }
            }
        }
        let mut guard = self.graph.state_mut();
        let state = match guard.as_mut() {
            Some(s) => s,
            None => guard.insert(self.load_graph()?),
        };
        if state.seq < target {
            let seq = state.seq;
            let graph = &mut state.graph;
            let (target, changed) = self.store.snapshot(|c| {
                let target = changes::max_seq(c)?;
                let pending = changes::since(c, seq, target)?;
                let changed = !pending.is_empty();
                if changed {
                    // Copies the graph only when a walk still holds this version.
                    let g = Arc::make_mut(graph);
                    for change in pending {
                        apply(c, g, change)?;
                    }
                }
                Ok((target, changed))
            })?;
            if changed {
                state.changed_at = Instant::now();
            }
            state.seq = target;
        }
        if state.graph.today() != day && Arc::make_mut(&mut state.graph).set_today(day) {
            // Strengths decayed by a day: the compact adjacency is rebuilt once quiet.
            state.changed_at = Instant::now();
        }
        Ok(GraphView(Arc::clone(&state.graph)))
    }

    /// Runs `f` on the graph, synced with every write committed before the call.
    pub fn with_graph<T>(&self, f: impl FnOnce(&MemoryGraph) -> T) -> Result<T> {
        let view = self.synced_graph()?;
        Ok(f(&view))
    }

    /// Nodes, relations and memory of the in-memory graph.
    pub fn graph_stats(&self) -> Result<GraphStats> {
        let view = self.synced_graph()?;
        let (from_file, load_ms) = self.graph.origin();
        Ok(GraphStats {
            nodes: view.node_count(),
            relations: view.edge_count(),
            bytes_per_relation: view.bytes_per_relation(),
            load_ms,
            from_file,
        })
    }
}

/// A relation's strength today: its weight decayed toward half by the days since it was last
/// reinforced (what walks and recall's expansion rank by).
pub fn relation_strength(r: &crate::model::Relation) -> f64 {
    f64::from(crate::graph::strength(
        r.weight as f32,
        crate::graph::day_of(r.reinforced_at),
        today(),
    ))
}

/// The day (since 1970) relation strengths are computed for.
fn today() -> i32 {
    crate::graph::day_of(crate::model::now_millis())
}

fn apply(c: &Db, g: &mut MemoryGraph, change: changes::Change) -> Result<()> {
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
