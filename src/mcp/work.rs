//! Tools whose work can be long (traverse, find_paths, recall with deep expansion): argument
//! conversion, the synchronous run against the engine (inline or inside a task), and their output.
//! `McpExecutor` is how the task runner re-runs them after a restart.

use serde_json::Value;

use crate::engine::control::{Control, WorkKind};
use crate::engine::traverse::{
    DEFAULT_MAX_NODES, MAX_MAX_NODES, PathRequest, Shape, TraverseRequest, TraversedNode,
};
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::graph::Direction;
use crate::mcp::{convert, dto};
use crate::model::{DEFAULT_NAMESPACE, MemoryRef, NamespaceScope, format_time, parse_time};
use crate::tasks::Executor;

/// Work limit for clients that cannot receive tasks.
pub const INLINE_WORK_LIMIT: usize = 10_000;
/// Expansion depth up to which recall never becomes a task.
pub const INLINE_EXPAND: u8 = 2;
const DEFAULT_DEPTH: u8 = 2;
const DEFAULT_LIMIT: u32 = 50;
const DEFAULT_K: u32 = 3;
const DEFAULT_MAX_HOPS: u8 = 6;

/// Tools that go through the inline-or-task decision.
pub fn is_long(tool: &str, args: &Value) -> bool {
    match tool {
        "traverse" | "find_paths" | "import" | "export" => true,
        "consolidate" => crate::mcp::curation::is_run(args),
        "recall" => args
            .get("expand")
            .and_then(Value::as_u64)
            .is_some_and(|e| e > u64::from(INLINE_EXPAND)),
        #[cfg(feature = "conformance")]
        fixture if crate::mcp::fixtures::is_long(fixture) => true,
        _ => false,
    }
}

/// Who a call acts for: the namespaces it may use, and the subject history names (over HTTP
/// with tokens; on stdio every namespace and no subject).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Acting {
    pub access: Access,
    pub subject: Option<String>,
}

/// Where [`Acting`] travels in a task's arguments (kept in its durable row, so a task adopted by
/// another process keeps its caller's limits).
const ACCESS_KEY: &str = "_access";
const SUBJECT_KEY: &str = "_subject";

impl Acting {
    /// What history records as the author of a change made by `tool`.
    pub fn actor(&self, tool: &str) -> String {
        match &self.subject {
            Some(s) => format!("tool:{tool} by {s}"),
            None => format!("tool:{tool}"),
        }
    }

    /// Writes this into a long call's arguments, replacing whatever the client put there.
    pub fn stamp(&self, args: &mut Value) {
        if let Value::Object(o) = args {
            o.remove(ACCESS_KEY);
            o.remove(SUBJECT_KEY);
            if let Some(a) = self.access.to_json() {
                o.insert(ACCESS_KEY.into(), a);
            }
            if let Some(s) = &self.subject {
                o.insert(SUBJECT_KEY.into(), Value::from(s.clone()));
            }
        }
    }

    /// The caller [`Acting::stamp`] wrote into `args`, and the arguments without it.
    pub fn split(args: &Value) -> (Acting, Value) {
        let mut rest = args.clone();
        let acting = Acting {
            access: Access::from_json(args.get(ACCESS_KEY)),
            subject: args
                .get(SUBJECT_KEY)
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        if let Value::Object(o) = &mut rest {
            o.remove(ACCESS_KEY);
            o.remove(SUBJECT_KEY);
        }
        (acting, rest)
    }
}

/// Long tools whose work cannot be bounded for a client that cannot poll: such a client gets
/// -32021 (none of the real tools; some conformance fixtures).
pub fn requires_task(tool: &str) -> bool {
    #[cfg(feature = "conformance")]
    if crate::mcp::fixtures::requires_task(tool) {
        return true;
    }
    let _ = tool;
    false
}

pub fn parse<T: serde::de::DeserializeOwned>(tool: &str, args: &Value) -> Result<T> {
    serde_path_to_error::deserialize(args).map_err(|e| crate::mcp::errors::bad_arguments(tool, e))
}

fn direction(d: Option<dto::DirectionInput>) -> Direction {
    match d {
        Some(dto::DirectionInput::Out) => Direction::Out,
        Some(dto::DirectionInput::In) => Direction::In,
        Some(dto::DirectionInput::Both) | None => Direction::Both,
    }
}

fn time(field: &str, s: Option<&str>) -> Result<Option<i64>> {
    s.map(|s| {
        parse_time(s).ok_or_else(|| {
            Error::invalid(
                field,
                format!("{s:?} is not a time"),
                "use RFC 3339 like 2024-05-01T10:00:00Z",
            )
        })
    })
    .transpose()
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

pub fn traverse_request(p: dto::TraverseParams, access: &Access) -> Result<TraverseRequest> {
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
            Some(dto::ReturnInput::Paths) => Shape::Paths,
            Some(dto::ReturnInput::Subgraph) => Shape::Subgraph,
            Some(dto::ReturnInput::Nodes) | None => Shape::Nodes,
        },
        focus: p.focus,
        limit: p.limit.unwrap_or(DEFAULT_LIMIT) as usize,
        include_archived: p.include_archived.unwrap_or(false),
        access: access.clone(),
    })
}

pub struct PathsCall {
    pub from: MemoryRef,
    pub to: MemoryRef,
    pub k: usize,
    pub spec: PathRequest,
}

pub fn paths_call(p: dto::FindPathsParams, access: &Access) -> Result<PathsCall> {
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

pub fn node_out(n: TraversedNode) -> dto::NodeOut {
    dto::NodeOut {
        id: n.memory.id,
        namespace: n.memory.namespace,
        kind: n.memory.kind,
        name: n.memory.name,
        snippet: n.snippet,
        depth: n.depth,
        strength: n.strength,
        relevance: n.relevance,
        via: n.via.map(|v| dto::ViaOut {
            from: v.from,
            kind: v.kind,
            weight: v.weight,
            forward: v.forward,
        }),
    }
}

/// What helps when a walk stopped at its node budget. A client without tasks cannot raise the
/// budget (it is capped at [`INLINE_WORK_LIMIT`] for it), so the hint names what can help it.
fn truncation_hint(truncated: bool, max_nodes: usize, inline_limited: bool) -> Option<String> {
    truncated.then(|| {
        if inline_limited {
            format!(
                "stopped at the work limit of {max_nodes} nodes for clients without MCP tasks: narrow the walk (a smaller depth, only some `kinds`, a higher `min_weight`, one `direction`), or use a client with MCP tasks support to run it in full"
            )
        } else {
            format!(
                "stopped at the node budget of {max_nodes}: narrow the walk (a smaller depth, only some `kinds`, a higher `min_weight`, one `direction`), or raise `max_nodes` (up to {MAX_MAX_NODES})"
            )
        }
    })
}

fn run_traverse(engine: &Engine, args: &Value, ctl: &dyn Control, who: &Acting) -> Result<Value> {
    let params: dto::TraverseParams = parse("traverse", args)?;
    let inline_limited = params.inline_limit.unwrap_or(false);
    let req = traverse_request(params, &who.access)?;
    let r = engine.traverse(&req, ctl)?;
    let paths = (req.shape == Shape::Paths).then(|| {
        r.paths
            .into_iter()
            .map(|p| dto::PathOut {
                ids: p.ids,
                kinds: p.kinds,
                strength: p.strength,
            })
            .collect()
    });
    let edges = (req.shape == Shape::Subgraph).then(|| {
        r.edges
            .into_iter()
            .map(|e| dto::EdgeOut {
                from: e.from,
                to: e.to,
                kind: e.kind,
                weight: e.weight,
            })
            .collect()
    });
    Ok(serde_json::to_value(dto::TraverseOut {
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

fn run_find_paths(engine: &Engine, args: &Value, ctl: &dyn Control, who: &Acting) -> Result<Value> {
    let call = paths_call(parse("find_paths", args)?, &who.access)?;
    let r = engine.find_paths(&call.from, &call.to, call.k, &call.spec, ctl)?;
    Ok(serde_json::to_value(dto::PathsOut {
        paths: r
            .paths
            .into_iter()
            .map(|p| dto::PathOut {
                ids: p.ids,
                kinds: p.kinds,
                strength: p.strength,
            })
            .collect(),
        visited: r.visited,
    })?)
}

/// Recall, with related memories `expand` hops around the hits.
pub fn run_recall(engine: &Engine, args: &Value, ctl: &dyn Control, who: &Acting) -> Result<Value> {
    let p: dto::RecallParams = parse("recall", args)?;
    let full = p.full.unwrap_or(false);
    let expand = p.expand.unwrap_or(crate::model::DEFAULT_EXPAND);
    if expand > crate::engine::traverse::MAX_DEPTH {
        return Err(Error::invalid(
            "expand",
            format!("is {expand}"),
            "give 0 to 8 hops",
        ));
    }
    let q = recall_query(&p, &who.access)?;
    // A deep expansion is a walk from the hits, which lists them and records their use: the
    // recall itself records none, so each hit counts once.
    let page = if expand > INLINE_EXPAND {
        engine.recall_unrecorded(&q)?
    } else {
        engine.recall(&q)?
    };
    let (mut related, mut truncated) = (None, None);
    if expand > INLINE_EXPAND && !page.hits.is_empty() {
        let max_nodes = args
            .get("max_nodes")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_MAX_NODES, |n| n as usize);
        let req = expansion(
            &page.hits,
            expand,
            max_nodes,
            q.limit * 2 + page.hits.len(),
            q.include_archived,
            &who.access,
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
    let hits = page
        .hits
        .into_iter()
        .map(|h| dto::HitOut {
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
    Ok(serde_json::to_value(dto::RecallOut {
        hits,
        warnings: page.warnings,
        next_cursor: page.next_offset.map(|o| convert::encode_cursor(&q, o)),
        related,
        truncated,
    })?)
}

/// The recall a caller asked for, within the namespaces it may use.
fn recall_query(p: &dto::RecallParams, access: &Access) -> Result<crate::model::RecallQuery> {
    let mut q = convert::recall_query(p)?;
    let field = if p.namespaces.is_some() {
        "namespaces"
    } else {
        "namespace"
    };
    q.namespaces = access.narrow(field, q.namespaces)?;
    Ok(q)
}

/// The walk that adds related memories `depth` hops around recall hits.
fn expansion(
    hits: &[crate::model::Hit],
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

/// Runs the long tools for the task runner.
pub struct McpExecutor;

impl Executor for McpExecutor {
    fn execute(
        &self,
        engine: &Engine,
        tool: &str,
        args: &Value,
        ctl: &dyn Control,
    ) -> Result<Value> {
        let (who, args) = Acting::split(args);
        let args = &args;
        match tool {
            "traverse" => run_traverse(engine, args, ctl, &who),
            "find_paths" => run_find_paths(engine, args, ctl, &who),
            "recall" => run_recall(engine, args, ctl, &who),
            "import" => crate::mcp::transfer::run_import(engine, args, ctl, &who),
            "export" => crate::mcp::transfer::run_export(engine, args, ctl, &who),
            "consolidate" => crate::mcp::curation::run(engine, args, ctl, &who),
            #[cfg(feature = "conformance")]
            fixture if crate::mcp::fixtures::is_long(fixture) => {
                crate::mcp::fixtures::run(fixture, args, ctl)
            }
            other => Err(Error::invalid(
                "tool",
                format!("`{other}` does not run as a task"),
                "call it directly",
            )),
        }
    }

    fn rerunnable(&self, tool: &str) -> bool {
        matches!(tool, "traverse" | "find_paths" | "recall" | "export")
    }

    fn resumable(&self, tool: &str) -> bool {
        matches!(tool, "import" | "consolidate")
    }

    fn work_kind(&self, tool: &str) -> WorkKind {
        match tool {
            "import" => WorkKind::Import,
            "export" => WorkKind::Export,
            "consolidate" => WorkKind::Consolidate,
            _ => WorkKind::Walk,
        }
    }

    fn summary(&self, tool: &str, output: &Value) -> Option<String> {
        match tool {
            "consolidate" => crate::mcp::curation::summary(output),
            _ => None,
        }
    }
}

/// Cheap checks and the cost estimate of a long call, before the decision.
pub fn estimate(engine: &Engine, tool: &str, args: &Value) -> Result<f64> {
    let (who, args) = Acting::split(args);
    let args = &args;
    match tool {
        "import" | "export" => crate::mcp::transfer::estimate(engine, tool, args, &who),
        "consolidate" => crate::mcp::curation::estimate(engine, args, &who),
        "traverse" => {
            let req = traverse_request(parse("traverse", args)?, &who.access)?;
            let seeds = engine.check_traverse(&req)?;
            Ok(engine.estimate_traverse(&req, &seeds)?.ms)
        }
        "find_paths" => {
            let call = paths_call(parse("find_paths", args)?, &who.access)?;
            if call.k > 10 {
                return Err(Error::invalid(
                    "k",
                    format!("is {}", call.k),
                    "give 0 to 10 alternatives",
                ));
            }
            Ok(engine.estimate_paths(&call.from, &call.spec, call.k)?.ms)
        }
        "recall" => {
            let p: dto::RecallParams = parse("recall", args)?;
            let q = recall_query(&p, &who.access)?;
            // An estimate only looks: the hits do not count as used (the run that follows
            // records its own).
            let hits = engine.recall_unrecorded(&q)?;
            let depth = p
                .expand
                .unwrap_or(0)
                .clamp(1, crate::engine::traverse::MAX_DEPTH);
            let req = expansion(
                &hits.hits,
                depth,
                DEFAULT_MAX_NODES,
                q.limit,
                q.include_archived,
                &who.access,
            );
            if req.seeds.is_empty() {
                return Ok(0.0);
            }
            let seeds = engine.check_traverse(&req)?;
            Ok(engine.estimate_traverse(&req, &seeds)?.ms)
        }
        #[cfg(feature = "conformance")]
        fixture if crate::mcp::fixtures::is_long(fixture) => {
            Ok(crate::mcp::fixtures::estimate(fixture, args))
        }
        _ => Ok(0.0),
    }
}

/// A task as the `tasks` tool lists it to `caller`.
pub fn task_out(v: &crate::tasks::TaskView, caller: &str) -> dto::TaskOut {
    dto::TaskOut {
        owner: (v.row.owner != caller).then(|| v.row.owner.clone()),
        task_id: v.row.id.clone(),
        tool: v.row.tool.clone(),
        status: v.row.status.as_str().to_owned(),
        status_message: v.status_message(),
        created_at: format_time(v.row.created_at),
        last_updated_at: format_time(v.row.updated_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn estimates_and_dry_runs_write_nothing() {
        use crate::engine::control::Progressing;
        use crate::engine::tests::uses_history_and_head;
        use crate::engine::{Link, RememberItem};
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::Config::for_db(dir.path().join("memory.db"));
        let embedder = std::sync::Arc::new(crate::embed::hashing::HashingEmbedder::new(64));
        let engine = Engine::open_with(cfg, Some(embedder)).unwrap();
        let note = |content: &str, links: Vec<Link>| RememberItem {
            content: content.into(),
            links,
            ..RememberItem::default()
        };
        let first = engine
            .remember(&[note("the lighthouse keeper logs the storms", vec![])])
            .unwrap()
            .remove(0)
            .unwrap()
            .id;
        let link = |to: &str| Link {
            to: to.into(),
            kind: "about".into(),
            weight: None,
        };
        engine
            .remember(&[
                note("the lighthouse lamp was replaced", vec![link(&first)]),
                note("the lighthouse lamp was replaced!", vec![link(&first)]),
                note("storms flooded the harbour road", vec![link(&first)]),
            ])
            .unwrap();
        let before = uses_history_and_head(&engine);
        let deep = json!({"query": "lighthouse lamp", "expand": 5});
        assert!(is_long("recall", &deep));
        assert!(estimate(&engine, "recall", &deep).unwrap() > 0.0);
        let walk = json!({"query": "lighthouse storms", "depth": 3});
        estimate(&engine, "traverse", &walk).unwrap();
        assert_eq!(uses_history_and_head(&engine), before, "an estimate wrote");

        let dry = json!({"dry_run": true, "policy": {"merge_similarity": 0.5}});
        estimate(&engine, "consolidate", &dry).unwrap();
        let report = McpExecutor
            .execute(&engine, "consolidate", &dry, &Progressing::default())
            .unwrap();
        assert_eq!(report["counts"]["merged"], 1, "{report}");
        assert_eq!(uses_history_and_head(&engine), before, "a dry run wrote");

        // The calls themselves record their hits' use, once.
        McpExecutor
            .execute(&engine, "recall", &deep, &Progressing::default())
            .unwrap();
        let (after, head) = uses_history_and_head(&engine);
        assert_eq!(head, before.1);
        let used = |state: &[String]| state.iter().filter(|l| !l.contains(" uses 0 ")).count();
        assert_eq!(used(&before.0), 0);
        assert!(used(&after) > 0, "{after:?}");
        assert!(after.iter().all(|l| !l.contains(" uses 2 ")), "{after:?}");
    }

    #[test]
    fn truncation_hints_name_what_helps_the_client() {
        assert_eq!(truncation_hint(false, 10, true), None);
        let capped = truncation_hint(true, INLINE_WORK_LIMIT, true).unwrap();
        assert!(capped.contains("narrow the walk"), "{capped}");
        assert!(capped.contains("MCP tasks"), "{capped}");
        assert!(!capped.contains("max_nodes"), "{capped}");
        let free = truncation_hint(true, 50_000, false).unwrap();
        assert!(free.contains("raise `max_nodes`"), "{free}");
    }
}
