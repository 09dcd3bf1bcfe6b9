//! The in-memory graph of live relations (petgraph), kept in step with the change log by the
//! engine. Pure: no I/O, no `Result`; traversal reports progress to a visitor that can stop it.

mod frozen;
pub mod paths;
pub mod traverse;

use std::collections::HashMap;
use std::sync::Arc;

use petgraph::Direction as PetDirection;
use petgraph::stable_graph::{EdgeIndex, NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;

/// Internal key of a memory (the engine's `MemoryKey.0`).
pub type Key = i64;

/// Id of an interned relation kind.
pub type KindId = u32;

/// What the graph keeps of one relation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EdgeData {
    /// Internal key of the relation row.
    pub relation: i64,
    pub kind: KindId,
    /// The weight the relation was given.
    pub weight: f32,
    /// Its strength on the graph's day: between the weight and half of it, by how long the
    /// relation went unused (see [`strength`]); what walks rank by.
    pub strength: f32,
    /// The day (since 1970) the relation was made or last reinforced by use.
    pub reinforced_day: i32,
    /// Validity bounds in milliseconds; `i64::MIN` / `i64::MAX` when open.
    pub valid_from: i64,
    pub valid_until: i64,
}

/// Days after which the part of an unused relation's strength that decays halves.
pub const HALF_LIFE_DAYS: f64 = 30.0;
/// Share of the weight an unused relation keeps however long unused: decay ranks relations
/// used lately above those that were not, it never switches the old graph off.
pub const STRENGTH_FLOOR: f64 = 0.5;
const DAY_MS: i64 = 86_400_000;

/// The day (since 1970) of a time in milliseconds.
pub fn day_of(ms: i64) -> i32 {
    ms.div_euclid(DAY_MS)
        .clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// Strength on `today` of a relation of `weight` last reinforced on `day`: the weight times
/// `FLOOR + (1 − FLOOR) · 2^(−unused days / HALF_LIFE_DAYS)` — the weight on the day of use,
/// three quarters of it a half-life later, never below half.
pub fn strength(weight: f32, day: i32, today: i32) -> f32 {
    let unused = (i64::from(today) - i64::from(day)).max(0) as f64;
    let decay = 0.5f64.powf(unused / HALF_LIFE_DAYS);
    (f64::from(weight) * (STRENGTH_FLOOR + (1.0 - STRENGTH_FLOOR) * decay)) as f32
}

impl EdgeData {
    /// True when the relation holds at time `t` (or no time is asked).
    pub fn valid_at(&self, t: Option<i64>) -> bool {
        t.is_none_or(|t| self.valid_from <= t && t <= self.valid_until)
    }
}

pub use crate::model::EdgeRow;

/// No node for this key.
const NONE: u32 = u32::MAX;

/// Which way edges are followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Direction {
    Out,
    In,
    Both,
}

/// Adjacency of all live relations between live memories. Cloning copies the petgraph graph and
/// shares the compact adjacency.
#[derive(Default, Clone)]
pub struct MemoryGraph {
    g: StableDiGraph<Key, EdgeData, u32>,
    /// Node of each memory key (keys are dense row ids); `NONE` where the memory has no node.
    nodes: Vec<u32>,
    kinds: Vec<String>,
    kind_ids: HashMap<String, KindId>,
    /// Compact adjacency for walks; `None` after any change until [`MemoryGraph::freeze`].
    frozen: Option<Arc<frozen::Frozen>>,
    /// Counts changes, so a compact adjacency built from a copy is only installed unchanged.
    version: u64,
    /// The day strengths are computed for (0 until [`MemoryGraph::set_today`]: no decay).
    today: i32,
}

/// A compact adjacency built from one state of a graph, to install later without holding the
/// graph meanwhile (see [`MemoryGraph::build_compact`]).
pub struct Compact {
    frozen: Arc<frozen::Frozen>,
    version: u64,
}

impl MemoryGraph {
    /// An empty graph with room for `nodes` and `edges`.
    pub fn with_capacity(nodes: usize, edges: usize) -> MemoryGraph {
        MemoryGraph {
            g: StableDiGraph::with_capacity(nodes, edges),
            nodes: Vec::with_capacity(nodes),
            kinds: Vec::new(),
            kind_ids: HashMap::new(),
            frozen: None,
            version: 0,
            today: 0,
        }
    }

    /// Computes strengths for `day` (see [`strength`]); true when that changed the graph (a new
    /// day), which drops the compact adjacency until it is rebuilt.
    pub fn set_today(&mut self, day: i32) -> bool {
        if day == self.today {
            return false;
        }
        self.today = day;
        for e in self.g.edge_weights_mut() {
            e.strength = strength(e.weight, e.reinforced_day, day);
        }
        self.changed();
        true
    }

    /// The day strengths are computed for.
    pub fn today(&self) -> i32 {
        self.today
    }

    /// Builds the graph from rows (fastest when they come sorted by source).
    pub fn from_rows(rows: impl IntoIterator<Item = EdgeRow>, hint_edges: usize) -> MemoryGraph {
        let mut g = MemoryGraph::with_capacity(hint_edges / 4, hint_edges);
        for row in rows {
            g.insert_edge_unchecked(&row);
        }
        g
    }

    /// The id of `kind`, interning it when new.
    pub fn intern(&mut self, kind: &str) -> KindId {
        // Vocabularies are small: a scan beats hashing the string.
        if self.kinds.len() <= 16 {
            if let Some(i) = self.kinds.iter().position(|k| k == kind) {
                return i as KindId;
            }
        } else if let Some(&id) = self.kind_ids.get(kind) {
            return id;
        }
        let id = self.kinds.len() as KindId;
        self.kinds.push(kind.to_owned());
        self.kind_ids.insert(kind.to_owned(), id);
        id
    }

    /// The id of `kind` if any relation ever had it.
    pub fn kind_id(&self, kind: &str) -> Option<KindId> {
        self.kind_ids.get(kind).copied()
    }

    /// The name of an interned kind.
    pub fn kind_name(&self, id: KindId) -> &str {
        self.kinds.get(id as usize).map_or("", String::as_str)
    }

    fn node(&mut self, key: Key) -> NodeIndex<u32> {
        if let Some(n) = self.node_of(key) {
            return n;
        }
        let n = self.g.add_node(key);
        let slot = usize::try_from(key).expect("memory keys are positive");
        if slot >= self.nodes.len() {
            self.nodes
                .resize((slot + 1).max(self.nodes.len() * 5 / 4), NONE);
        }
        self.nodes[slot] = n.index() as u32;
        n
    }

    /// The node of a memory, when it has any relation.
    pub fn node_of(&self, key: Key) -> Option<NodeIndex<u32>> {
        let n = *self.nodes.get(usize::try_from(key).ok()?)?;
        (n != NONE).then(|| NodeIndex::new(n as usize))
    }

    /// The memory of a node.
    pub fn key_of(&self, n: NodeIndex<u32>) -> Key {
        self.g[n]
    }

    fn data(&mut self, row: &EdgeRow) -> EdgeData {
        let day = day_of(row.reinforced_at);
        EdgeData {
            relation: row.relation,
            kind: self.intern(&row.kind),
            weight: row.weight as f32,
            strength: strength(row.weight as f32, day, self.today),
            reinforced_day: day,
            valid_from: row.valid_from.unwrap_or(i64::MIN),
            valid_until: row.valid_until.unwrap_or(i64::MAX),
        }
    }

    /// Adds one relation while loading (no check for an existing copy of it).
    #[allow(clippy::too_many_arguments)]
    pub fn add_loaded(
        &mut self,
        relation: i64,
        src: Key,
        dst: Key,
        kind: &str,
        weight: f64,
        reinforced_at: i64,
        valid_from: Option<i64>,
        valid_until: Option<i64>,
    ) {
        let day = day_of(reinforced_at);
        let data = EdgeData {
            relation,
            kind: self.intern(kind),
            weight: weight as f32,
            strength: strength(weight as f32, day, self.today),
            reinforced_day: day,
            valid_from: valid_from.unwrap_or(i64::MIN),
            valid_until: valid_until.unwrap_or(i64::MAX),
        };
        self.add_edge_data(src, dst, data);
    }

    /// Adds one relation whose kind is already interned, while loading (no check for an
    /// existing copy of it); its strength is computed for the graph's day.
    pub fn add_edge_data(&mut self, src: Key, dst: Key, mut data: EdgeData) {
        data.strength = strength(data.weight, data.reinforced_day, self.today);
        let (a, b) = (self.node(src), self.node(dst));
        self.g.add_edge(a, b, data);
        self.changed();
    }

    /// Every interned relation kind, in id order.
    pub fn kinds(&self) -> &[String] {
        &self.kinds
    }

    /// Calls `f(source key, target key, edge)` for every relation, grouped by source.
    pub fn for_each_edge(&self, mut f: impl FnMut(Key, Key, &EdgeData)) {
        for n in self.g.node_indices() {
            let src = self.g[n];
            for e in self.g.edges_directed(n, PetDirection::Outgoing) {
                f(src, self.g[e.target()], e.weight());
            }
        }
    }

    fn insert_edge_unchecked(&mut self, row: &EdgeRow) {
        let data = self.data(row);
        let (a, b) = (self.node(row.src), self.node(row.dst));
        self.g.add_edge(a, b, data);
        self.changed();
    }

    fn find(&self, relation: i64, src: Key, dst: Key) -> Option<EdgeIndex<u32>> {
        let (a, b) = (self.node_of(src)?, self.node_of(dst)?);
        self.g
            .edges_connecting(a, b)
            .find(|e| e.weight().relation == relation)
            .map(|e| e.id())
    }

    /// Adds the relation, or replaces what the graph knew of it.
    pub fn upsert_edge(&mut self, row: &EdgeRow) {
        match self.find(row.relation, row.src, row.dst) {
            Some(e) => {
                let data = self.data(row);
                self.g[e] = data;
                self.changed();
            }
            None => self.insert_edge_unchecked(row),
        }
    }

    /// Removes the relation if present; drops end nodes left without edges.
    pub fn remove_edge(&mut self, relation: i64, src: Key, dst: Key) {
        if let Some(e) = self.find(relation, src, dst) {
            self.g.remove_edge(e);
            self.changed();
            self.drop_if_isolated(src);
            self.drop_if_isolated(dst);
        }
    }

    fn drop_if_isolated(&mut self, key: Key) {
        if let Some(n) = self.node_of(key)
            && self.g.neighbors_undirected(n).next().is_none()
        {
            self.g.remove_node(n);
            self.changed();
            self.nodes[key as usize] = NONE;
        }
    }

    /// Removes a memory and every relation touching it.
    pub fn remove_node(&mut self, key: Key) {
        if let Some(n) = self.node_of(key) {
            self.nodes[key as usize] = NONE;
            let neighbours: Vec<Key> = self.g.neighbors_undirected(n).map(|m| self.g[m]).collect();
            self.g.remove_node(n);
            self.changed();
            for k in neighbours {
                self.drop_if_isolated(k);
            }
        }
    }

    /// Number of memories with at least one relation.
    pub fn node_count(&self) -> usize {
        self.g.node_count()
    }

    /// Number of relations.
    pub fn edge_count(&self) -> usize {
        self.g.edge_count()
    }

    /// Upper bound of node indices (for dense per-node arrays).
    pub(crate) fn node_bound(&self) -> usize {
        self.g
            .node_indices()
            .next_back()
            .map_or(0, |n| n.index() + 1)
    }

    /// Edges of `n` in direction `dir`: (neighbour, edge data).
    pub(crate) fn edges(
        &self,
        n: NodeIndex<u32>,
        dir: Direction,
    ) -> Box<dyn Iterator<Item = (NodeIndex<u32>, &EdgeData, bool)> + '_> {
        if let Some(f) = &self.frozen {
            let (o, i) = f.of(n.index());
            let out = if matches!(dir, Direction::Out | Direction::Both) {
                o
            } else {
                &[]
            };
            let inc = if matches!(dir, Direction::In | Direction::Both) {
                i
            } else {
                &[]
            };
            let g = &self.g;
            return Box::new(
                out.iter()
                    .map(move |a| {
                        (
                            NodeIndex::new(a.nbr as usize),
                            &g[frozen::edge_index(*a)],
                            true,
                        )
                    })
                    .chain(inc.iter().map(move |a| {
                        (
                            NodeIndex::new(a.nbr as usize),
                            &g[frozen::edge_index(*a)],
                            false,
                        )
                    })),
            );
        }
        let out = matches!(dir, Direction::Out | Direction::Both)
            .then(|| self.g.edges_directed(n, PetDirection::Outgoing))
            .into_iter()
            .flatten()
            .map(|e| (e.target(), e.weight(), true));
        let inc = matches!(dir, Direction::In | Direction::Both)
            .then(|| self.g.edges_directed(n, PetDirection::Incoming))
            .into_iter()
            .flatten()
            .map(|e| (e.source(), e.weight(), false));
        Box::new(out.chain(inc))
    }

    /// Calls `f(neighbour, edge, strength, forward)` for every edge of `n` in direction `dir`:
    /// the hot loop of walks, reading the compact adjacency when there is one.
    #[inline]
    pub(crate) fn for_each_adjacent(
        &self,
        n: NodeIndex<u32>,
        dir: Direction,
        mut f: impl FnMut(NodeIndex<u32>, u32, f32, bool),
    ) {
        let (want_out, want_in) = (
            matches!(dir, Direction::Out | Direction::Both),
            matches!(dir, Direction::In | Direction::Both),
        );
        if let Some(fr) = &self.frozen {
            let (out, inc) = fr.of(n.index());
            if want_out {
                for a in out {
                    f(NodeIndex::new(a.nbr as usize), a.edge, a.weight, true);
                }
            }
            if want_in {
                for a in inc {
                    f(NodeIndex::new(a.nbr as usize), a.edge, a.weight, false);
                }
            }
            return;
        }
        if want_out {
            for e in self.g.edges_directed(n, PetDirection::Outgoing) {
                f(e.target(), e.id().index() as u32, e.weight().strength, true);
            }
        }
        if want_in {
            for e in self.g.edges_directed(n, PetDirection::Incoming) {
                f(
                    e.source(),
                    e.id().index() as u32,
                    e.weight().strength,
                    false,
                );
            }
        }
    }

    /// Calls `f(neighbour key, relation kind, strength, forward)` for every relation of memory
    /// `key`, both directions (nothing when it has none).
    pub fn adjacent(&self, key: Key, mut f: impl FnMut(Key, &str, f32, bool)) {
        let Some(n) = self.node_of(key) else { return };
        for (nbr, e, forward) in self.edges(n, Direction::Both) {
            f(
                self.key_of(nbr),
                self.kind_name(e.kind),
                e.strength,
                forward,
            );
        }
    }

    /// Hints that node `n` will be expanded soon (see [`frozen::Frozen::prefetch`]).
    #[inline]
    pub(crate) fn prefetch(&self, n: NodeIndex<u32>, near: bool) {
        if let Some(f) = &self.frozen {
            f.prefetch(n.index(), near);
        }
    }

    /// The data of an edge named by `MemoryGraph::for_each_adjacent` or a [`traverse::Reached`].
    #[inline]
    pub fn edge(&self, edge: u32) -> &EdgeData {
        &self.g[petgraph::stable_graph::EdgeIndex::new(edge as usize)]
    }

    /// Builds the compact adjacency walks use (until the next change). Worth it on large graphs
    /// that are read more than written; cheap to skip.
    pub fn freeze(&mut self) {
        if self.frozen.is_none() {
            let c = self.build_compact();
            self.install_compact(c);
        }
    }

    /// Builds the compact adjacency of the graph as it is now, without changing it.
    pub fn build_compact(&self) -> Compact {
        Compact {
            frozen: Arc::new(frozen::Frozen::build(&self.g, self.node_bound())),
            version: self.version,
        }
    }

    /// Installs a compact adjacency built by [`MemoryGraph::build_compact`]; false (and nothing
    /// installed) when the graph changed since.
    pub fn install_compact(&mut self, c: Compact) -> bool {
        if c.version != self.version {
            return false;
        }
        self.frozen = Some(c.frozen);
        true
    }

    /// Drops the compact adjacency after a change.
    fn changed(&mut self) {
        self.frozen = None;
        self.version += 1;
    }

    /// True while the compact adjacency is current.
    pub fn is_frozen(&self) -> bool {
        self.frozen.is_some()
    }

    /// Approximate heap bytes held per relation (edge and node storage plus the key index),
    /// for reporting. Counts allocated capacity, not only what is in use.
    pub fn bytes_per_relation(&self) -> f64 {
        // petgraph keeps per edge its weight, two next-edge links and two end nodes (u32 each);
        // per node its weight and two first-edge links.
        let edge = std::mem::size_of::<EdgeData>() + 4 * 4;
        let node = std::mem::size_of::<Key>() + 2 * 4;
        let edges = self.edge_count().max(1) as f64;
        let total = edge as f64 * self.edge_count() as f64
            + node as f64 * self.node_count() as f64
            + 4.0 * self.nodes.capacity() as f64
            + self.frozen.as_ref().map_or(0, |f| f.bytes()) as f64;
        total / edges
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn row(relation: i64, src: Key, dst: Key, kind: &str, weight: f64) -> EdgeRow {
        EdgeRow {
            relation,
            src,
            dst,
            kind: kind.into(),
            weight,
            reinforced_at: 0,
            valid_from: None,
            valid_until: None,
        }
    }

    /// Every relation of `g` as (relation, source, target, kind, weight, valid from, valid
    /// until), sorted by relation.
    #[allow(clippy::type_complexity)]
    pub(crate) fn edge_list(g: &MemoryGraph) -> Vec<(i64, Key, Key, String, f32, i64, i64)> {
        let mut out = Vec::new();
        g.for_each_edge(|src, dst, e| {
            out.push((
                e.relation,
                src,
                dst,
                g.kind_name(e.kind).to_owned(),
                e.weight,
                e.valid_from,
                e.valid_until,
            ));
        });
        out.sort_by_key(|e| e.0);
        out
    }

    #[test]
    fn strength_decays_toward_half_the_weight_unused_and_follows_the_day() {
        assert_eq!(strength(0.8, 10, 10), 0.8);
        assert!((strength(0.8, 0, 30) - 0.6).abs() < 1e-6);
        assert!((strength(0.8, 0, 60) - 0.5).abs() < 1e-6);
        assert!(
            (strength(0.8, 0, 100_000) - 0.4).abs() < 1e-6,
            "never below half"
        );
        assert_eq!(strength(0.8, 10, 5), 0.8, "never above the weight");
        assert_eq!(day_of(86_400_000 * 3 + 5), 3);
        assert_eq!(day_of(-1), -1);
        let mut g = MemoryGraph::from_rows([row(1, 1, 2, "a", 1.0)], 1);
        g.freeze();
        assert!(!g.set_today(0), "the day it was made: nothing to change");
        assert!(g.is_frozen());
        assert!(g.set_today(60));
        assert!(!g.is_frozen(), "new strengths need a new compact adjacency");
        let n = g.node_of(1).unwrap();
        let mut seen = Vec::new();
        g.for_each_adjacent(n, Direction::Out, |_, _, s, _| seen.push(s));
        g.freeze();
        g.for_each_adjacent(n, Direction::Out, |_, _, s, _| seen.push(s));
        assert_eq!(seen, [0.625, 0.625]);
        // A relation added later decays from its own day.
        let mut fresh = row(2, 2, 3, "a", 0.5);
        fresh.reinforced_at = 60 * 86_400_000;
        g.upsert_edge(&fresh);
        let mut seen = Vec::new();
        g.for_each_adjacent(g.node_of(2).unwrap(), Direction::Out, |_, _, s, _| {
            seen.push(s)
        });
        assert_eq!(seen, [0.5]);
        assert_eq!(g.edge(0).weight, 1.0, "the weight stays as given");
    }

    #[test]
    fn upsert_replace_and_remove() {
        let mut g = MemoryGraph::from_rows([row(1, 10, 20, "a", 1.0), row(2, 20, 30, "b", 0.5)], 2);
        assert_eq!((g.node_count(), g.edge_count()), (3, 2));
        g.upsert_edge(&row(2, 20, 30, "b", 0.25));
        assert_eq!(g.edge_count(), 2);
        let n20 = g.node_of(20).unwrap();
        let w: Vec<f32> = g
            .edges(n20, Direction::Out)
            .map(|(_, d, _)| d.weight)
            .collect();
        assert_eq!(w, [0.25]);
        g.remove_edge(2, 20, 30);
        assert_eq!((g.node_count(), g.edge_count()), (2, 1));
        assert!(g.node_of(30).is_none());
        g.remove_node(10);
        assert_eq!((g.node_count(), g.edge_count()), (0, 0));
    }

    #[test]
    fn kinds_are_interned() {
        let mut g = MemoryGraph::default();
        let a = g.intern("about");
        assert_eq!(g.intern("about"), a);
        assert_eq!(g.kind_name(a), "about");
        assert_eq!(g.kind_id("missing"), None);
    }
}
