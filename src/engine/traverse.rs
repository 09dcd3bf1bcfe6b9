//! Graph reads: traverse from seeds (ids, names or a query's top hits) and find paths between two
//! memories. Long walks report progress and stop when cancelled, through a [`Control`].

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use crate::engine::access::Within;
use crate::engine::control::{Control, WorkProgress};
use crate::engine::write::lookup_in;
use crate::engine::{Access, Engine, snippet};
use crate::error::{Error, Result};
use crate::graph::paths::{PathSpec, find_paths};
use crate::graph::traverse::{Order, Progress, Spec, traverse};
use crate::graph::{Direction, MemoryGraph};
use crate::model::{Memory, MemoryKey, MemoryRef, Millis, NamespaceScope, RecallQuery, now_millis};
use crate::store::memories;

/// Deepest walk accepted.
pub const MAX_DEPTH: u8 = 8;
/// Node budget of a walk when the caller names none.
pub const DEFAULT_MAX_NODES: usize = 10_000;
/// Largest node budget accepted.
pub const MAX_MAX_NODES: usize = 2_000_000;
/// Most nodes (or paths) one answer lists.
pub const MAX_LIMIT: usize = 5_000;
/// Seeds taken from a query's top hits.
const QUERY_SEEDS: usize = 5;
/// Memories scored against `focus` per database round trip.
const FOCUS_BATCH: usize = 512;

/// The graph walk a request asks for, in `order`.
fn walk_spec(graph: &MemoryGraph, req: &TraverseRequest, order: Order, within: Within) -> Spec {
    Spec {
        depth: req.depth,
        direction: req.direction,
        kinds: kind_filter(graph, &req.kinds),
        min_weight: req.min_weight as f32,
        valid_at: req.valid_at,
        max_nodes: req.max_nodes,
        order,
        within,
    }
}

/// What a traversal returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Shape {
    Nodes,
    Paths,
    Subgraph,
}

/// A traversal as a caller asks for it (validated by [`Engine::traverse`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraverseRequest {
    pub seeds: Vec<MemoryRef>,
    /// Seeds from the top hits of this query when no seeds are named.
    pub query: Option<String>,
    /// Where query seeds are searched.
    pub namespaces: NamespaceScope,
    pub depth: u8,
    pub direction: Direction,
    pub kinds: Vec<String>,
    pub min_weight: f64,
    pub valid_at: Option<Millis>,
    pub max_nodes: usize,
    pub shape: Shape,
    /// Rank reached memories by relevance to this text (scores each one).
    pub focus: Option<String>,
    pub limit: usize,
    /// List archived memories reached too (they are always walked through).
    pub include_archived: bool,
    /// The namespaces the caller may use: seeds outside them are an error, and the walk does
    /// not step out of them.
    pub access: Access,
}

/// How a node was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Via {
    pub from: String,
    pub kind: String,
    pub weight: f64,
    /// True when the relation was followed from its source to its target.
    pub forward: bool,
}

/// One reached memory.
#[derive(Debug, Clone, PartialEq)]
pub struct TraversedNode {
    pub memory: Memory,
    pub snippet: String,
    pub depth: u8,
    /// Product of weights along the path from its seed.
    pub strength: f64,
    /// Relevance to `focus`, when asked.
    pub relevance: Option<f64>,
    pub via: Option<Via>,
}

/// One path: memory ids and the relation kinds between them.
#[derive(Debug, Clone, PartialEq)]
pub struct PathView {
    pub ids: Vec<String>,
    pub kinds: Vec<String>,
    pub strength: f64,
}

/// One edge of a subgraph.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeView {
    pub from: String,
    pub to: String,
    pub kind: String,
    pub weight: f64,
}

/// What a traversal found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraverseResult {
    pub seeds: Vec<String>,
    pub nodes: Vec<TraversedNode>,
    pub paths: Vec<PathView>,
    pub edges: Vec<EdgeView>,
    /// Memories reached in all (the answer lists at most `limit`).
    pub reached: usize,
    /// The node budget stopped the walk.
    pub truncated: bool,
    pub visited: u64,
}

/// What `find_paths` found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PathsResult {
    pub paths: Vec<PathView>,
    pub visited: u64,
}

/// A walk's counters as progress, of at most `bound` units of work (see [`WorkProgress::bound`]).
fn direction_progress(p: &Progress, bound: u64) -> WorkProgress {
    WorkProgress {
        visited: p.visited,
        frontier: p.frontier,
        depth: p.depth,
        max_depth: p.max_depth,
        bound,
        ..WorkProgress::default()
    }
}

/// Most nodes a walk of at most `max_nodes` settles in `graph`, times the memories it will
/// score (`focus`): the bound of its progress.
fn walk_bound(graph: &MemoryGraph, max_nodes: usize, focus: bool) -> u64 {
    let nodes = max_nodes.min(graph.node_count()) as u64;
    if focus { 2 * nodes } else { nodes }
}

/// A graph visitor that reports to `ctl`, of at most `bound` units of work, and stops when it
/// is cancelled.
fn watch(ctl: &dyn Control, bound: u64) -> impl FnMut(&Progress) -> ControlFlow<()> + '_ {
    move |p: &Progress| {
        ctl.report(&direction_progress(p, bound));
        if ctl.is_cancelled() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

fn cancelled() -> Error {
    Error::Cancelled
}

impl Engine {
    fn resolve_seeds(&self, req: &TraverseRequest) -> Result<Vec<MemoryKey>> {
        if !req.seeds.is_empty() {
            return self.store.read(|c| {
                req.seeds
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        // A seed outside the caller's namespaces does not exist for it.
                        lookup_in(c, r, false, &req.access)?.map(|m| m.key).ok_or_else(|| {
                            Error::not_found(
                                "memory",
                                r.to_string(),
                                format!("check seed {i}: use an id from remember/recall, or a name with its namespace"),
                            )
                        })
                    })
                    .collect()
            });
        }
        let Some(q) = &req.query else {
            return Err(Error::invalid(
                "ids",
                "no seeds given",
                "give `ids`, `names` or a `query` to start from",
            ));
        };
        // The answer records the use of what it lists; finding the seeds, which an estimate
        // does too, records nothing.
        let page = self.recall_unrecorded(&RecallQuery {
            text: q.clone(),
            namespaces: req.access.narrow("namespace", req.namespaces.clone())?,
            limit: QUERY_SEEDS,
            // The seeds are the memories the words find; the walk itself reaches their neighbours.
            expand: 0,
            ..RecallQuery::default()
        })?;
        if page.hits.is_empty() {
            return Err(Error::not_found(
                "memory",
                format!("matching {q:?}"),
                "the query found no memory to start from; try other words or give ids",
            ));
        }
        Ok(page.hits.into_iter().map(|h| h.memory.key).collect())
    }

    fn validate_traverse(req: &TraverseRequest) -> Result<()> {
        if req.depth == 0 || req.depth > MAX_DEPTH {
            return Err(Error::invalid(
                "depth",
                format!("is {}", req.depth),
                format!("give 1 to {MAX_DEPTH}"),
            ));
        }
        if req.max_nodes == 0 || req.max_nodes > MAX_MAX_NODES {
            return Err(Error::invalid(
                "max_nodes",
                format!("is {}", req.max_nodes),
                format!("give 1 to {MAX_MAX_NODES}"),
            ));
        }
        if req.limit == 0 || req.limit > MAX_LIMIT {
            return Err(Error::invalid(
                "limit",
                format!("is {}", req.limit),
                format!("give 1 to {MAX_LIMIT}"),
            ));
        }
        if !(0.0..=1.0).contains(&req.min_weight) {
            return Err(Error::invalid(
                "min_weight",
                format!("is {}", req.min_weight),
                "give a number from 0 to 1",
            ));
        }
        if let Some(f) = &req.focus
            && f.trim().is_empty()
        {
            return Err(Error::invalid(
                "focus",
                "is empty",
                "leave it out, or give the words to rank by",
            ));
        }
        Ok(())
    }

    /// Cheap checks of a traversal request (bounds, seeds exist) before any work is planned.
    pub fn check_traverse(&self, req: &TraverseRequest) -> Result<Vec<MemoryKey>> {
        Self::validate_traverse(req)?;
        self.resolve_seeds(req)
    }

    /// Walks the graph from the seeds. Stops with [`Error::Cancelled`] when `ctl` says so.
    /// Every memory a walk reaches (seeds included), unranked and unmaterialised: what an
    /// export of a subgraph writes. `req.limit` is not used.
    pub(crate) fn reach(&self, req: &TraverseRequest, ctl: &dyn Control) -> Result<Vec<MemoryKey>> {
        let check = TraverseRequest {
            limit: 1,
            ..req.clone()
        };
        let seeds = self.check_traverse(&check)?;
        let view = self.synced_graph_or_cancelled(|| ctl.is_cancelled())?;
        let graph: &MemoryGraph = &view;
        let spec = walk_spec(graph, req, Order::Breadth, self.within(&req.access)?);
        let mut visitor = watch(ctl, walk_bound(graph, req.max_nodes, false));
        let seed_keys: Vec<i64> = seeds.iter().map(|k| k.0).collect();
        let outcome = traverse(graph, &seed_keys, &spec, &mut visitor);
        if outcome.cancelled {
            return Err(cancelled());
        }
        ctl.report(&direction_progress(
            &outcome.progress,
            outcome.progress.visited,
        ));
        Ok(outcome.reached.iter().map(|r| MemoryKey(r.key)).collect())
    }

    /// Takes the memories consolidation archived out of a walk's listing (they are walked
    /// through, so what lies behind them is still reached; seeds are always listed), reading
    /// rows only until `limit` nodes are kept.
    fn drop_archived(
        &self,
        order: &mut Vec<usize>,
        reached: &[crate::graph::traverse::Reached],
        limit: usize,
    ) -> Result<()> {
        let mut kept = Vec::with_capacity(limit.min(order.len()));
        for chunk in order.chunks(FOCUS_BATCH) {
            if kept.len() >= limit {
                break;
            }
            let keys: Vec<MemoryKey> = chunk.iter().map(|&i| MemoryKey(reached[i].key)).collect();
            let archived: HashSet<i64> = self
                .store
                .read(|c| memories::by_keys(c, &keys))?
                .into_iter()
                .filter(|m| m.archived_at.is_some())
                .map(|m| m.key.0)
                .collect();
            kept.extend(
                chunk
                    .iter()
                    .copied()
                    .filter(|&i| reached[i].depth == 0 || !archived.contains(&reached[i].key)),
            );
        }
        *order = kept;
        Ok(())
    }

    pub fn traverse(&self, req: &TraverseRequest, ctl: &dyn Control) -> Result<TraverseResult> {
        let seeds = self.check_traverse(req)?;
        let view = self.synced_graph_or_cancelled(|| ctl.is_cancelled())?;
        let graph: &MemoryGraph = &view;
        let order = if req.shape == Shape::Paths {
            Order::BestFirst
        } else {
            Order::Breadth
        };
        let spec = walk_spec(graph, req, order, self.within(&req.access)?);
        let focus = req.focus.is_some();
        let mut visitor = watch(ctl, walk_bound(graph, req.max_nodes, focus));
        let seed_keys: Vec<i64> = seeds.iter().map(|k| k.0).collect();
        let outcome = traverse(graph, &seed_keys, &spec, &mut visitor);
        if outcome.cancelled {
            return Err(cancelled());
        }
        // The walk has ended: the bound is now what it settled, plus what it will score.
        let to_score = if focus {
            outcome.reached.len() as u64
        } else {
            0
        };
        let mut progress =
            direction_progress(&outcome.progress, outcome.progress.visited + to_score);
        ctl.report(&progress);

        // Rank: by relevance to `focus` when asked (scoring every reached memory), else by depth
        // then strength.
        let mut order: Vec<usize> = (0..outcome.reached.len()).collect();
        let mut relevance: Option<Vec<f64>> = None;
        if let Some(focus) = &req.focus {
            let terms = self.text.query_weights(focus);
            let keys: Vec<MemoryKey> = outcome.reached.iter().map(|r| MemoryKey(r.key)).collect();
            let mut scores = vec![0.0; keys.len()];
            progress.total = keys.len() as u64;
            for (chunk_idx, chunk) in keys.chunks(FOCUS_BATCH).enumerate() {
                if ctl.is_cancelled() {
                    return Err(cancelled());
                }
                let rows = self.store.read(|c| memories::by_keys(c, chunk))?;
                let by_key: HashMap<MemoryKey, &Memory> = rows.iter().map(|m| (m.key, m)).collect();
                for (j, key) in chunk.iter().enumerate() {
                    if let Some(m) = by_key.get(key) {
                        scores[chunk_idx * FOCUS_BATCH + j] =
                            self.text.relevance(&terms, &m.content, m.name.as_deref());
                    }
                }
                // Scoring is counted apart from the walk: `visited` stays the walk's count.
                progress.done += chunk.len() as u64;
                ctl.report(&progress);
            }
            order.sort_by(|&a, &b| {
                let sa = scores[a] * (0.5 + 0.5 * f64::from(outcome.reached[a].score));
                let sb = scores[b] * (0.5 + 0.5 * f64::from(outcome.reached[b].score));
                sb.total_cmp(&sa).then(a.cmp(&b))
            });
            relevance = Some(scores);
        } else if spec.order == Order::BestFirst {
            order.sort_by(|&a, &b| {
                outcome.reached[b]
                    .score
                    .total_cmp(&outcome.reached[a].score)
                    .then(a.cmp(&b))
            });
        } else {
            order.sort_by(|&a, &b| {
                let (ra, rb) = (&outcome.reached[a], &outcome.reached[b]);
                ra.depth
                    .cmp(&rb.depth)
                    .then(rb.score.total_cmp(&ra.score))
                    .then(a.cmp(&b))
            });
        }
        if !req.include_archived {
            self.drop_archived(&mut order, &outcome.reached, req.limit)?;
        }
        order.truncate(req.limit);
        // What the answer lists was used: its memories, and the relations on the paths to them.
        let now = now_millis();
        self.note_touched(
            order.iter().map(|&i| MemoryKey(outcome.reached[i].key)),
            now,
        );
        let mut walked: HashSet<i64> = HashSet::new();
        for &i in &order {
            let mut at = i;
            while let (Some(p), Some((e, _))) =
                (outcome.reached[at].parent, outcome.reached[at].via)
            {
                if !walked.insert(graph.edge(e).relation) {
                    break;
                }
                at = p as usize;
            }
        }
        self.note_walked(walked.into_iter(), now);

        // Materialise only what the answer lists (plus path ancestors).
        let mut wanted: HashSet<usize> = order.iter().copied().collect();
        if req.shape == Shape::Paths {
            for &i in &order {
                wanted.extend(outcome.path_to(i));
            }
        }
        for &i in &order {
            if let Some(p) = outcome.reached[i].parent {
                wanted.insert(p as usize);
            }
        }
        let keys: Vec<MemoryKey> = wanted
            .iter()
            .map(|&i| MemoryKey(outcome.reached[i].key))
            .collect();
        let rows = self.store.read(|c| memories::by_keys(c, &keys))?;
        let by_key: HashMap<i64, Memory> = rows.into_iter().map(|m| (m.key.0, m)).collect();
        let id_of = |i: usize| {
            by_key
                .get(&outcome.reached[i].key)
                .map(|m| m.id.clone())
                .unwrap_or_default()
        };

        let mut result = TraverseResult {
            seeds: (0..seeds.len().min(outcome.reached.len()))
                .map(id_of)
                .collect(),
            reached: outcome.reached.len(),
            truncated: outcome.truncated,
            visited: progress.visited,
            ..TraverseResult::default()
        };
        let focus_text = req.focus.as_deref().or(req.query.as_deref()).unwrap_or("");
        for &i in &order {
            let r = &outcome.reached[i];
            let Some(m) = by_key.get(&r.key) else {
                continue;
            };
            let via = match (r.parent, r.via) {
                (Some(p), Some((e, forward))) => Some(Via {
                    from: id_of(p as usize),
                    kind: graph.kind_name(graph.edge(e).kind).to_owned(),
                    weight: f64::from(graph.edge(e).weight),
                    forward,
                }),
                _ => None,
            };
            result.nodes.push(TraversedNode {
                memory: m.clone(),
                snippet: snippet::snippet(&m.content, focus_text),
                depth: r.depth,
                strength: f64::from(r.score),
                relevance: relevance.as_ref().map(|s| s[i]),
                via,
            });
            if req.shape == Shape::Paths {
                let path = outcome.path_to(i);
                result.paths.push(PathView {
                    ids: path.iter().map(|&j| id_of(j)).collect(),
                    kinds: path[1..]
                        .iter()
                        .filter_map(|&j| {
                            outcome.reached[j]
                                .via
                                .map(|(e, _)| graph.kind_name(graph.edge(e).kind).to_owned())
                        })
                        .collect(),
                    strength: f64::from(r.score),
                });
            }
        }
        if req.shape == Shape::Subgraph {
            result.edges = subgraph_edges(
                graph,
                &order
                    .iter()
                    .map(|&i| outcome.reached[i].key)
                    .collect::<Vec<_>>(),
                &spec,
                |k| by_key.get(&k).map(|m| m.id.clone()),
            );
        }
        Ok(result)
    }

    /// The strongest path between two memories and up to `k` alternatives.
    #[allow(clippy::too_many_arguments)]
    pub fn find_paths(
        &self,
        from: &MemoryRef,
        to: &MemoryRef,
        k: usize,
        spec: &PathRequest,
        ctl: &dyn Control,
    ) -> Result<PathsResult> {
        if k > 10 {
            return Err(Error::invalid(
                "k",
                format!("is {k}"),
                "give 0 to 10 alternatives",
            ));
        }
        if spec.max_hops == 0 || spec.max_hops > MAX_DEPTH {
            return Err(Error::invalid(
                "max_hops",
                format!("is {}", spec.max_hops),
                format!("give 1 to {MAX_DEPTH}"),
            ));
        }
        let (a, b) = self.store.read(|c| {
            // An end outside the caller's namespaces does not exist for it.
            let a = lookup_in(c, from, false, &spec.access)?
                .ok_or_else(|| Error::not_found("memory", from.to_string(), "check `from`"))?;
            let b = lookup_in(c, to, false, &spec.access)?
                .ok_or_else(|| Error::not_found("memory", to.to_string(), "check `to`"))?;
            Ok((a, b))
        })?;
        let view = self.synced_graph_or_cancelled(|| ctl.is_cancelled())?;
        let graph: &MemoryGraph = &view;
        let pspec = PathSpec {
            direction: spec.direction,
            kinds: kind_filter(graph, &spec.kinds),
            min_weight: spec.min_weight as f32,
            valid_at: spec.valid_at,
            max_hops: spec.max_hops,
            within: self.within(&spec.access)?,
        };
        // Each of the `k` searches settles at most every node (Yen's spur searches are smaller).
        let bound = (graph.node_count() as u64).saturating_mul(k.max(1) as u64);
        let mut visitor = watch(ctl, bound);
        let out = find_paths(graph, a.key.0, b.key.0, k, &pspec, &mut visitor);
        if out.cancelled {
            return Err(cancelled());
        }
        ctl.report(&direction_progress(&out.progress, out.progress.visited));
        let now = now_millis();
        self.note_walked(
            out.paths
                .iter()
                .flat_map(|p| p.steps.iter().map(|s| s.edge.relation)),
            now,
        );
        let keys: Vec<MemoryKey> = out
            .paths
            .iter()
            .flat_map(|p| std::iter::once(p.from).chain(p.steps.iter().map(|s| s.to)))
            .map(MemoryKey)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let rows = self.store.read(|c| memories::by_keys(c, &keys))?;
        let ids: HashMap<i64, String> = rows.into_iter().map(|m| (m.key.0, m.id)).collect();
        Ok(PathsResult {
            paths: out
                .paths
                .iter()
                .map(|p| PathView {
                    ids: std::iter::once(p.from)
                        .chain(p.steps.iter().map(|s| s.to))
                        .map(|k| ids.get(&k).cloned().unwrap_or_default())
                        .collect(),
                    kinds: p
                        .steps
                        .iter()
                        .map(|s| graph.kind_name(s.edge.kind).to_owned())
                        .collect(),
                    strength: p.strength,
                })
                .collect(),
            visited: out.progress.visited,
        })
    }
}

/// Filters of a path search.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PathRequest {
    pub direction: Direction,
    pub kinds: Vec<String>,
    pub min_weight: f64,
    pub valid_at: Option<Millis>,
    pub max_hops: u8,
    /// The namespaces the caller may use: both ends must be in them, and so must every memory
    /// on a path.
    pub access: Access,
}

/// Kind names to ids; a name no relation ever had matches nothing (so the filter still applies).
fn kind_filter(graph: &MemoryGraph, kinds: &[String]) -> Option<Vec<u32>> {
    (!kinds.is_empty()).then(|| {
        kinds
            .iter()
            .map(|k| graph.kind_id(k).unwrap_or(u32::MAX))
            .collect()
    })
}

fn subgraph_edges(
    graph: &MemoryGraph,
    keys: &[i64],
    spec: &Spec,
    id: impl Fn(i64) -> Option<String>,
) -> Vec<EdgeView> {
    let inside: HashSet<i64> = keys.iter().copied().collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for &k in keys {
        let Some(n) = graph.node_of(k) else { continue };
        for (m, e, forward) in graph.edges(n, Direction::Out) {
            let other = graph.key_of(m);
            if !forward || !inside.contains(&other) || !seen.insert(e.relation) {
                continue;
            }
            if e.weight < spec.min_weight
                || !e.valid_at(spec.valid_at)
                || spec.kinds.as_ref().is_some_and(|ks| !ks.contains(&e.kind))
            {
                continue;
            }
            if let (Some(from), Some(to)) = (id(k), id(other)) {
                out.push(EdgeView {
                    from,
                    to,
                    kind: graph.kind_name(e.kind).to_owned(),
                    weight: f64::from(e.weight),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod progress_tests {
    use std::sync::Mutex;

    use super::*;
    use crate::Config;
    use crate::engine::{RelateItem, RememberItem};

    /// Keeps every report.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<WorkProgress>>);

    impl Control for Recorder {
        fn report(&self, p: &WorkProgress) {
            self.0.lock().unwrap().push(*p);
        }

        fn is_cancelled(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_focused_walk_counts_the_walk_and_the_scoring_apart() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(Config::for_db(dir.path().join("memory.db"))).unwrap();
        const N: usize = 40;
        let items: Vec<RememberItem> = (0..N)
            .map(|i| RememberItem {
                content: format!("station {i} on the river line"),
                name: Some(format!("s{i}")),
                ..RememberItem::default()
            })
            .collect();
        e.remember(&items).unwrap();
        let rels: Vec<RelateItem> = (1..N)
            .map(|i| RelateItem {
                from: format!("s{}", i - 1),
                to: format!("s{i}"),
                kind: "next".into(),
                weight: None,
                metadata: None,
                namespace: None,
            })
            .collect();
        for r in e.relate(&rels).unwrap() {
            r.unwrap();
        }
        let req = TraverseRequest {
            seeds: vec![MemoryRef::Name {
                namespace: "default".into(),
                name: "s0".into(),
            }],
            query: None,
            namespaces: NamespaceScope::All,
            depth: MAX_DEPTH,
            direction: crate::graph::Direction::Out,
            kinds: vec![],
            min_weight: 0.0,
            valid_at: None,
            max_nodes: 1_000,
            shape: Shape::Nodes,
            focus: Some("station 7".into()),
            limit: 5,
            include_archived: false,
            access: crate::engine::Access::All,
        };
        let ctl = Recorder::default();
        let r = e.traverse(&req, &ctl).unwrap();
        let reached = (MAX_DEPTH as usize + 1) as u64;
        assert_eq!(r.reached as u64, reached);
        assert_eq!(
            r.visited, reached,
            "each node the walk reached is counted once"
        );
        let reports = ctl.0.lock().unwrap();
        let last = reports.last().unwrap();
        assert_eq!(last.visited, reached, "{last:?}");
        assert_eq!((last.done, last.total), (reached, reached), "{last:?}");
        assert!(
            reports.windows(2).all(|w| w[1].visited >= w[0].visited),
            "{reports:?}"
        );
    }
}
