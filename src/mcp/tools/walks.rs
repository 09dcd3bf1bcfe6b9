//! The walks: `traverse` (from seeds to ranked nodes, paths or a subgraph) and `find_paths`
//! (the strongest path between two memories and alternatives). Both are long work: inline
//! within the budget, else a task; a client that cannot poll gets a bounded walk.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Descriptor, Hints, Long, always, input_schema, parse, read, time};
use crate::engine::Access;
use crate::engine::traverse::{DEFAULT_MAX_NODES, PathRequest, Shape, TraverseRequest};
use crate::engine::work::Work;
use crate::error::{Error, Result};
use crate::graph::Direction;
use crate::mcp::work::Acting;
use crate::model::{DEFAULT_NAMESPACE, MemoryRef, NamespaceScope};

/// Node budget of a walk for clients that cannot receive tasks.
pub(crate) const INLINE_WORK_LIMIT: usize = 10_000;
const DEFAULT_DEPTH: u8 = 2;
const DEFAULT_LIMIT: u32 = 50;
const DEFAULT_K: u32 = 3;
const DEFAULT_MAX_HOPS: u8 = 6;

/// Which way relations are followed.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DirectionInput {
    Out,
    In,
    Both,
}

/// What a traversal returns.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReturnInput {
    Nodes,
    Paths,
    Subgraph,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TraverseParams {
    /// Seed ids.
    pub(crate) ids: Option<Vec<String>>,
    /// Seed names.
    pub(crate) names: Option<Vec<String>>,
    /// Seeds: this query's top hits.
    pub(crate) query: Option<String>,
    /// For names and the query.
    pub(crate) namespace: Option<String>,
    /// Hops, 1–8 (default 2).
    pub(crate) depth: Option<u8>,
    /// Default both.
    pub(crate) direction: Option<DirectionInput>,
    /// Relation kinds to follow.
    pub(crate) kinds: Option<Vec<String>>,
    /// Skip weaker relations (0–1).
    pub(crate) min_weight: Option<f64>,
    /// RFC 3339: relations valid then.
    pub(crate) valid_at: Option<String>,
    /// Node budget (default 10000).
    pub(crate) max_nodes: Option<u64>,
    /// nodes (default), paths or subgraph.
    #[serde(rename = "return")]
    pub(crate) return_: Option<ReturnInput>,
    /// Rank nodes by this text.
    pub(crate) focus: Option<String>,
    /// Nodes listed, 1–5000 (default 50; ~70 tokens each).
    pub(crate) limit: Option<u32>,
    /// Also archived.
    pub(crate) include_archived: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FindPathsParams {
    /// Start id or name.
    pub(crate) from: String,
    /// End id or name.
    pub(crate) to: String,
    /// Where names resolve.
    pub(crate) namespace: Option<String>,
    /// Other paths, 0–10 (default 3).
    pub(crate) k: Option<u32>,
    /// Default both.
    pub(crate) direction: Option<DirectionInput>,
    /// Relation kinds to follow.
    pub(crate) kinds: Option<Vec<String>>,
    /// Skip weaker relations.
    pub(crate) min_weight: Option<f64>,
    /// RFC 3339.
    pub(crate) valid_at: Option<String>,
    /// 1–8 (default 6).
    pub(crate) max_hops: Option<u8>,
}

pub(super) fn descriptors() -> Vec<Descriptor> {
    vec![
        Descriptor {
            name: "traverse",
            description: "Walk relations from seeds to ranked nodes, paths or a subgraph; may become a task.",
            schema: input_schema::<TraverseParams>,
            hints: Hints(true, false, true),
            scope: read,
            scope_note: "",
            long: Some(Long {
                when: always,
                work: walk,
            }),
            now: None,
        },
        Descriptor {
            name: "find_paths",
            description: "Strongest path between two memories plus up to k alternatives.",
            schema: input_schema::<FindPathsParams>,
            hints: Hints(true, false, true),
            scope: read,
            scope_note: "",
            long: Some(Long {
                when: always,
                work: paths,
            }),
            now: None,
        },
    ]
}

/// A walk as work; a client that cannot poll gets a bounded one.
fn walk(args: &Value, who: &Acting, _owner: &str, tasks: bool) -> Result<Work> {
    let mut request = traverse_request(parse("traverse", args)?, &who.access)?;
    if !tasks {
        request.max_nodes = request.max_nodes.min(INLINE_WORK_LIMIT);
    }
    Ok(Work::Walk {
        request,
        inline_limited: !tasks,
    })
}

/// A path search as work.
fn paths(args: &Value, who: &Acting, _owner: &str, _tasks: bool) -> Result<Work> {
    let call = paths_call(parse("find_paths", args)?, &who.access)?;
    if call.k > 10 {
        return Err(Error::invalid(
            "k",
            format!("is {}", call.k),
            "give 0 to 10 alternatives",
        ));
    }
    Ok(Work::Paths {
        from: call.from,
        to: call.to,
        k: call.k,
        spec: call.spec,
    })
}

fn direction(d: Option<DirectionInput>) -> Direction {
    match d {
        Some(DirectionInput::Out) => Direction::Out,
        Some(DirectionInput::In) => Direction::In,
        Some(DirectionInput::Both) | None => Direction::Both,
    }
}

fn reference(s: &str, ns: &str) -> MemoryRef {
    if s.starts_with("m_") {
        MemoryRef::Id(s.to_owned())
    } else {
        MemoryRef::Name {
            namespace: ns.to_owned(),
            name: s.to_owned(),
        }
    }
}

pub(super) fn traverse_request(p: TraverseParams, access: &Access) -> Result<TraverseRequest> {
    let ns = p
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    let mut seeds: Vec<MemoryRef> = p
        .ids
        .unwrap_or_default()
        .into_iter()
        .map(MemoryRef::Id)
        .collect();
    seeds.extend(
        p.names
            .unwrap_or_default()
            .into_iter()
            .map(|name| MemoryRef::Name {
                namespace: ns.clone(),
                name,
            }),
    );
    Ok(TraverseRequest {
        seeds,
        query: p.query,
        namespaces: p
            .namespace
            .map_or(NamespaceScope::All, |n| NamespaceScope::Only(vec![n])),
        depth: p.depth.unwrap_or(DEFAULT_DEPTH),
        direction: direction(p.direction),
        kinds: p.kinds.unwrap_or_default(),
        min_weight: p.min_weight.unwrap_or(0.0),
        valid_at: time("valid_at", p.valid_at.as_deref())?,
        max_nodes: p
            .max_nodes
            .map_or(DEFAULT_MAX_NODES, |n| n.min(usize::MAX as u64) as usize),
        shape: match p.return_ {
            Some(ReturnInput::Paths) => Shape::Paths,
            Some(ReturnInput::Subgraph) => Shape::Subgraph,
            Some(ReturnInput::Nodes) | None => Shape::Nodes,
        },
        focus: p.focus,
        limit: p.limit.unwrap_or(DEFAULT_LIMIT) as usize,
        include_archived: p.include_archived.unwrap_or(false),
        access: access.clone(),
    })
}

struct PathsCall {
    from: MemoryRef,
    to: MemoryRef,
    k: usize,
    spec: PathRequest,
}

fn paths_call(p: FindPathsParams, access: &Access) -> Result<PathsCall> {
    let ns = p.namespace.unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    Ok(PathsCall {
        from: reference(&p.from, &ns),
        to: reference(&p.to, &ns),
        k: p.k.unwrap_or(DEFAULT_K) as usize,
        spec: PathRequest {
            direction: direction(p.direction),
            kinds: p.kinds.unwrap_or_default(),
            min_weight: p.min_weight.unwrap_or(0.0),
            valid_at: time("valid_at", p.valid_at.as_deref())?,
            max_hops: p.max_hops.unwrap_or(DEFAULT_MAX_HOPS),
            access: access.clone(),
        },
    })
}
