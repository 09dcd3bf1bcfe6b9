//! Long work as data. A [`Work`] is one call that may take long — a walk, a path search, a
//! deep recall, an import, an export, a consolidation — already checked and converted from
//! what a client sent, carrying the caller's access (and the actor history names) in its
//! requests. The task runner stores it in the task row (serde) and runs it here, so a task
//! adopted by another process runs the very same work; nothing in this module knows a
//! protocol. [`Work::estimate`] is the cost the inline-or-task decision weighs, and
//! [`Work::run`] the run, answering in the shapes of [`output`].

pub mod output;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::control::{Control, WorkKind};
use crate::engine::curate::ConsolidateRequest;
use crate::engine::export::{ExportRequest, ExportTarget};
use crate::engine::import::ImportRequest;
use crate::engine::traverse::{
    MAX_DEPTH, MAX_MAX_NODES, PathRequest, Shape, TraverseRequest, TraversedNode,
};
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::graph::Direction;
use crate::model::{Hit, MemoryRef, NamespaceScope, RecallQuery, format_time};
use output::{
    EdgeOut, ExportOut, HitOut, NodeOut, PathOut, PathsOut, RecallOut, TraverseOut, ViaOut,
};

/// Expansion depth up to which recall is quick work (never a task).
pub const INLINE_EXPAND: u8 = 2;
/// Most memories a consolidation covers for a caller that cannot wait for a task.
pub const INLINE_CONSOLIDATE_LIMIT: i64 = 20_000;
/// Memories a consolidation goes through per millisecond, roughly (for the estimate).
const CONSOLIDATE_PER_MS: f64 = 3.0;

/// One long call, ready to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "work", rename_all = "snake_case")]
pub enum Work {
    /// A walk from seeds. `inline_limited`: its node budget was capped because the caller
    /// cannot wait for a task (the hint of a truncated walk says what helps then).
    Walk {
        request: TraverseRequest,
        inline_limited: bool,
    },
    /// The strongest paths between two memories.
    Paths {
        from: MemoryRef,
        to: MemoryRef,
        k: usize,
        spec: PathRequest,
    },
    /// A recall whose hits are expanded `expand` hops (beyond [`INLINE_EXPAND`], by a walk of at
    /// most `max_nodes`).
    Recall {
        query: RecallQuery,
        expand: u8,
        max_nodes: usize,
        /// Whole contents instead of snippets.
        full: bool,
        access: Access,
    },
    Import {
        request: ImportRequest,
    },
    Export {
        request: ExportRequest,
        target: ExportTarget,
    },
    /// A consolidation run; `inline_limit`: the most memories it may cover (a caller that
    /// cannot wait for a task).
    Consolidate {
        request: ConsolidateRequest,
        inline_limit: Option<i64>,
    },
    /// Work that only probes the task runner (the conformance fixtures and tests): a name and
    /// its arguments, run by an executor that knows them.
    Probe {
        name: String,
        args: Value,
    },
}

impl Work {
    /// What the progress of this work counts, so a task's status reads right before the work
    /// has reported anything.
    pub fn kind(&self) -> WorkKind {
        match self {
            Work::Import { .. } => WorkKind::Import,
            Work::Export { .. } => WorkKind::Export,
            Work::Consolidate { .. } => WorkKind::Consolidate,
            _ => WorkKind::Walk,
        }
    }

    /// Whether it only reads, so it can run again from scratch after its process died.
    pub fn rerunnable(&self) -> bool {
        matches!(
            self,
            Work::Walk { .. } | Work::Paths { .. } | Work::Recall { .. } | Work::Export { .. }
        )
    }

    /// Whether it may ask the client a question while it runs (which only a task can wait
    /// for): a consolidation that writes, started by a client that can answer.
    pub fn may_ask(&self) -> bool {
        match self {
            Work::Consolidate { request, .. } => {
                !request.dry_run && (request.answers.elicitation || request.answers.sampling)
            }
            _ => false,
        }
    }

    /// Whether it saves checkpoints and goes on from the last one after its process died.
    pub fn resumable(&self) -> bool {
        matches!(self, Work::Import { .. } | Work::Consolidate { .. })
    }

    /// What a finished task's status says instead of its progress, when the output tells
    /// more: a consolidation skipped because another run holds the database did no work.
    pub fn summary(&self, output: &Value) -> Option<String> {
        if !matches!(self, Work::Consolidate { .. }) {
            return None;
        }
        if output.get("state").and_then(Value::as_str) == Some("declined") {
            return Some("declined: nothing changed".to_owned());
        }
        (output.get("state").and_then(Value::as_str) == Some("skipped")).then(|| {
            let holder = output
                .get("held_by")
                .and_then(Value::as_str)
                .unwrap_or("another run");
            format!("skipped: run {holder} holds the database; nothing done")
        })
    }

    /// Cheap checks and the cost of the work, in milliseconds. Writes nothing: an estimate
    /// records no use of what it looks at.
    pub fn estimate(&self, engine: &Engine) -> Result<f64> {
        match self {
            Work::Walk { request, .. } => {
                let seeds = engine.check_traverse(request)?;
                Ok(engine.estimate_traverse(request, &seeds)?.ms)
            }
            Work::Paths { from, spec, k, .. } => Ok(engine.estimate_paths(from, spec, *k)?.ms),
            Work::Recall {
                query,
                expand,
                access,
                ..
            } => {
                let hits = engine.recall_unrecorded(query)?;
                let depth = (*expand).clamp(1, MAX_DEPTH);
                let walk = expansion(
                    &hits.hits,
                    depth,
                    crate::engine::traverse::DEFAULT_MAX_NODES,
                    query.limit,
                    query.include_archived,
                    access,
                );
                if walk.seeds.is_empty() {
                    return Ok(0.0);
                }
                let seeds = engine.check_traverse(&walk)?;
                Ok(engine.estimate_traverse(&walk, &seeds)?.ms)
            }
            Work::Import { request } => engine.estimate_import(request),
            Work::Export { request, target } => engine.estimate_export(request, target),
            Work::Consolidate {
                request,
                inline_limit,
            } => {
                let n = engine.consolidation_size(request)?;
                if let Some(limit) = inline_limit
                    && n > *limit
                {
                    return Err(Error::invalid(
                        "namespaces",
                        format!(
                            "cover {n} memories, more than the {limit} a client without MCP tasks can wait for"
                        ),
                        "consolidate fewer namespaces per call, use a client with the tasks extension, or ask the operator to run `mnemograph consolidate` (or schedule it with --consolidate-every)",
                    ));
                }
                Ok(n as f64 / CONSOLIDATE_PER_MS)
            }
            Work::Probe { name, .. } => Err(not_here(name)),
        }
    }

    /// Runs the work to its answer, reporting to and obeying `ctl`.
    pub fn run(&self, engine: &Engine, ctl: &dyn Control) -> Result<Value> {
        match self {
            Work::Walk {
                request,
                inline_limited,
            } => walk(engine, request, *inline_limited, ctl),
            Work::Paths { from, to, k, spec } => {
                let r = engine.find_paths(from, to, *k, spec, ctl)?;
                Ok(serde_json::to_value(PathsOut {
                    paths: r.paths.into_iter().map(path_out).collect(),
                    visited: r.visited,
                })?)
            }
            Work::Recall {
                query,
                expand,
                max_nodes,
                full,
                access,
            } => recall(engine, query, *expand, *max_nodes, *full, access, ctl),
            Work::Import { request } => {
                let report = engine.import(request, ctl)?;
                let mut v = serde_json::to_value(&report)?;
                if report.truncated
                    && let Value::Object(o) = &mut v
                {
                    o.insert(
                        "hint".into(),
                        Value::from("stopped at the inline work limit (this client cannot receive tasks): call import again with the same arguments to go on; stored records are skipped"),
                    );
                }
                Ok(v)
            }
            Work::Export { request, target } => {
                let out = engine.export_to(request, target, ctl)?;
                Ok(serde_json::to_value(ExportOut {
                    format: request.format.name().to_owned(),
                    memories: out.counts.memories,
                    relations: out.counts.relations,
                    bytes: out.bytes,
                    path: out.path.map(|p| p.display().to_string()),
                    data: out.text,
                })?)
            }
            Work::Consolidate { request, .. } => {
                let report = engine.consolidate(request, ctl)?;
                let mut v = serde_json::to_value(&report)?;
                if let Value::Object(o) = &mut v {
                    let hint = match (report.state.as_str(), report.dry_run) {
                        ("skipped", _) => "another run holds the database; try again when it ends",
                        (_, true) => "nothing was written; call again without dry_run to apply",
                        _ => "undo with {\"undo\": run_id}; nothing was deleted",
                    };
                    o.insert("hint".into(), hint.into());
                }
                Ok(v)
            }
            Work::Probe { name, .. } => Err(not_here(name)),
        }
    }
}

fn not_here(name: &str) -> Error {
    Error::invalid(
        "tool",
        format!("`{name}` does not run here"),
        "call one of the tools tools/list names",
    )
}

/// What helps when a walk stopped at its node budget. A caller without tasks cannot raise the
/// budget (it is capped for it), so the hint names what can help it.
pub fn truncation_hint(truncated: bool, max_nodes: usize, inline_limited: bool) -> Option<String> {
    truncated.then(|| {
        if inline_limited {
            format!(
                "stopped at the work limit of {max_nodes} nodes for clients without MCP tasks: narrow the walk (a smaller depth, only some `kinds`, a higher `min_weight`, one `direction`), or call it from a client that declares the MCP tasks extension (io.modelcontextprotocol/tasks) to run it in full as a task"
            )
        } else {
            format!(
                "stopped at the node budget of {max_nodes}: narrow the walk (a smaller depth, only some `kinds`, a higher `min_weight`, one `direction`), or raise `max_nodes` (up to {MAX_MAX_NODES})"
            )
        }
    })
}

fn path_out(p: crate::engine::traverse::PathView) -> PathOut {
    PathOut {
        ids: p.ids,
        kinds: p.kinds,
        strength: p.strength,
    }
}

/// A reached memory as answers list it.
pub fn node_out(n: TraversedNode) -> NodeOut {
    NodeOut {
        id: n.memory.id,
        namespace: n.memory.namespace,
        kind: n.memory.kind,
        name: n.memory.name,
        snippet: n.snippet,
        depth: n.depth,
        strength: n.strength,
        relevance: n.relevance,
        via: n.via.map(|v| ViaOut {
            from: v.from,
            kind: v.kind,
            weight: v.weight,
            forward: v.forward,
        }),
    }
}

fn walk(
    engine: &Engine,
    req: &TraverseRequest,
    inline_limited: bool,
    ctl: &dyn Control,
) -> Result<Value> {
    let r = engine.traverse(req, ctl)?;
    let paths = (req.shape == Shape::Paths).then(|| r.paths.into_iter().map(path_out).collect());
    let edges = (req.shape == Shape::Subgraph).then(|| {
        r.edges
            .into_iter()
            .map(|e| EdgeOut {
                from: e.from,
                to: e.to,
                kind: e.kind,
                weight: e.weight,
            })
            .collect()
    });
    Ok(serde_json::to_value(TraverseOut {
        seeds: r.seeds,
        nodes: r.nodes.into_iter().map(node_out).collect(),
        paths,
        edges,
        reached: r.reached,
        visited: r.visited,
        truncated: r.truncated,
        hint: truncation_hint(r.truncated, req.max_nodes, inline_limited),
    })?)
}

/// Recall, with related memories `expand` hops around the hits when that is deeper than
/// recall's own expansion.
pub fn recall(
    engine: &Engine,
    q: &RecallQuery,
    expand: u8,
    max_nodes: usize,
    full: bool,
    access: &Access,
    ctl: &dyn Control,
) -> Result<Value> {
    let deep = expand > INLINE_EXPAND;
    // A deep expansion is a walk from the hits, which lists them and records their use: the
    // recall itself records none, so each hit counts once.
    let page = if deep {
        engine.recall_unrecorded(q)?
    } else {
        engine.recall(q)?
    };
    let (mut related, mut truncated) = (None, None);
    if deep && !page.hits.is_empty() {
        let req = expansion(
            &page.hits,
            expand,
            max_nodes,
            q.limit * 2 + page.hits.len(),
            q.include_archived,
            access,
        );
        let r = engine.traverse(&req, ctl)?;
        truncated = Some(r.truncated);
        related = Some(
            r.nodes
                .into_iter()
                .filter(|n| n.depth > 0)
                .take(q.limit * 2)
                .map(node_out)
                .collect(),
        );
    }
    let next_cursor = page.more.then(|| {
        let shown = page.hits.iter().map(|h| {
            let duplicates = h.duplicates.iter().map(String::as_str);
            (h.memory.id.as_str(), duplicates)
        });
        crate::engine::cursor::next_cursor(q, shown)
    });
    let hits = page
        .hits
        .into_iter()
        .map(|h| HitOut {
            id: h.memory.id,
            namespace: h.memory.namespace,
            kind: h.memory.kind,
            name: h.memory.name,
            snippet: (!full).then_some(h.snippet),
            content: full.then_some(h.memory.content),
            score: h.score,
            relations: h.n_relations,
            created_at: format_time(h.memory.created_at),
            via: h.via,
            duplicates: h.duplicates,
            explain: h.explain,
        })
        .collect();
    Ok(serde_json::to_value(RecallOut {
        hits,
        warnings: page.warnings,
        next_cursor,
        related,
        truncated,
    })?)
}

/// The walk that adds related memories `depth` hops around recall hits.
fn expansion(
    hits: &[Hit],
    depth: u8,
    max_nodes: usize,
    limit: usize,
    include_archived: bool,
    access: &Access,
) -> TraverseRequest {
    TraverseRequest {
        seeds: hits
            .iter()
            .map(|h| MemoryRef::Id(h.memory.id.clone()))
            .collect(),
        query: None,
        namespaces: NamespaceScope::All,
        depth,
        direction: Direction::Both,
        kinds: vec![],
        min_weight: 0.0,
        valid_at: None,
        max_nodes,
        shape: Shape::Nodes,
        focus: None,
        limit,
        include_archived,
        access: access.clone(),
    }
}
