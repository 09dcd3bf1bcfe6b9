//! Tools whose work can be long (traverse, find_paths, recall with deep expansion, import,
//! export, a consolidation run): their arguments checked and converted once into the engine's
//! [`Work`], which runs inline or inside a task. `McpExecutor` is what the task runner runs work
//! with (the engine's, plus the conformance fixtures and task rows of older versions).

use serde_json::Value;

use crate::engine::control::Control;
use crate::engine::traverse::{DEFAULT_MAX_NODES, PathRequest, Shape, TraverseRequest};
use crate::engine::work::{INLINE_CONSOLIDATE_LIMIT, Work};
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::graph::Direction;
use crate::mcp::{convert, dto};
use crate::model::{DEFAULT_NAMESPACE, MemoryRef, NamespaceScope, format_time, parse_time};
use crate::tasks::Executor;

/// Work limit for clients that cannot receive tasks.
pub const INLINE_WORK_LIMIT: usize = 10_000;
pub use crate::engine::work::INLINE_EXPAND;
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

impl Acting {
    /// What history records as the author of a change made by `tool`.
    pub fn actor(&self, tool: &str) -> String {
        match &self.subject {
            Some(s) => format!("tool:{tool} by {s}"),
            None => format!("tool:{tool}"),
        }
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

/// The work a long call asks for, checked and converted once. `tasks`: whether the caller can
/// receive a task (otherwise the work is bounded to what it can wait for); `owner`: who the
/// call's tasks belong to (a consolidation run records it).
pub fn work_of(tool: &str, args: &Value, who: &Acting, owner: &str, tasks: bool) -> Result<Work> {
    match tool {
        "traverse" => {
            let mut request = traverse_request(parse(tool, args)?, &who.access)?;
            if !tasks {
                // A client that cannot poll gets a bounded walk.
                request.max_nodes = request.max_nodes.min(INLINE_WORK_LIMIT);
            }
            Ok(Work::Walk {
                request,
                inline_limited: !tasks,
            })
        }
        "find_paths" => {
            let call = paths_call(parse(tool, args)?, &who.access)?;
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
        "recall" => recall_work(parse(tool, args)?, who),
        "import" => {
            let mut request = crate::mcp::transfer::import_request(parse(tool, args)?, who)?;
            if !tasks {
                // A client that cannot poll gets a bounded import; repeating the call goes on.
                request.max_records = Some(crate::mcp::transfer::INLINE_IMPORT_LIMIT);
            }
            Ok(Work::Import { request })
        }
        "export" => {
            let (request, target) = crate::mcp::transfer::export_call(parse(tool, args)?, who)?;
            Ok(Work::Export { request, target })
        }
        "consolidate" => {
            let p: dto::ConsolidateParams = parse(tool, args)?;
            Ok(Work::Consolidate {
                request: crate::mcp::curation::request(&p, who, owner)?,
                inline_limit: (!tasks).then_some(INLINE_CONSOLIDATE_LIMIT),
            })
        }
        #[cfg(feature = "conformance")]
        fixture if crate::mcp::fixtures::is_long(fixture) => Ok(Work::Probe {
            name: fixture.to_owned(),
            args: args.clone(),
        }),
        other => Err(Error::invalid(
            "tool",
            format!("`{other}` does not run as a task"),
            "call it directly",
        )),
    }
}

/// A recall as work: its query within the caller's namespaces, and how deep its hits expand.
pub fn recall_work(p: dto::RecallParams, who: &Acting) -> Result<Work> {
    let expand = p.expand.unwrap_or(crate::model::DEFAULT_EXPAND);
    if expand > crate::engine::traverse::MAX_DEPTH {
        return Err(Error::invalid(
            "expand",
            format!("is {expand}"),
            "give 0 to 8 hops",
        ));
    }
    Ok(Work::Recall {
        query: recall_query(&p, &who.access)?,
        expand,
        max_nodes: DEFAULT_MAX_NODES,
        full: p.full.unwrap_or(false),
        access: who.access.clone(),
    })
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

/// The cost estimate of `work`, in milliseconds (the conformance fixtures say their own).
pub fn estimate(engine: &Engine, work: &Work) -> Result<f64> {
    match work {
        #[cfg(feature = "conformance")]
        Work::Probe { name, args } => Ok(crate::mcp::fixtures::estimate(name, args)),
        work => work.estimate(engine),
    }
}

/// Runs work for the task runner: every real tool's work runs in the engine
/// ([`Work::run`]); the conformance fixtures run here. Task rows written before work was
/// stored as [`Work`] (a tool name and the client's arguments, with the server's additions
/// under `_` keys) are read by [`McpExecutor::legacy`].
pub struct McpExecutor;

impl Executor for McpExecutor {
    fn execute(&self, engine: &Engine, work: &Work, ctl: &dyn Control) -> Result<Value> {
        match work {
            #[cfg(feature = "conformance")]
            Work::Probe { name, args } => crate::mcp::fixtures::run(name, args, ctl),
            work => work.run(engine, ctl),
        }
    }

    fn legacy(&self, tool: &str, args: &Value) -> Result<Work> {
        legacy_work(tool, args)
    }
}

/// The work of a task row from before work was stored typed: the client's arguments with the
/// server's decisions under `_` keys (`_access`, `_subject`, `_by`, `_inline`, `_inline_limit`,
/// `_max_records`, `_scheduled`).
fn legacy_work(tool: &str, args: &Value) -> Result<Work> {
    let key = |k: &str| args.get(k).filter(|v| !v.is_null());
    let who = Acting {
        access: Access::from_json(key("_access")),
        subject: key("_subject").and_then(Value::as_str).map(str::to_owned),
    };
    let bounded = ["_inline", "_inline_limit", "_max_records"]
        .iter()
        .any(|k| key(k).is_some());
    let owner = key("_by").and_then(Value::as_str).unwrap_or("anonymous");
    let mut rest = args.clone();
    if let Value::Object(o) = &mut rest {
        o.retain(|k, _| !k.starts_with('_'));
    }
    let mut work = work_of(tool, &rest, &who, owner, !bounded)?;
    if let Work::Consolidate { request, .. } = &mut work
        && key("_scheduled").is_some_and(|v| v == true)
    {
        request.started_by = crate::tasks::schedule::OWNER.to_owned();
    }
    Ok(work)
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
        let work = |tool: &str, args: &Value| {
            work_of(tool, args, &Acting::default(), "test", true).expect("the arguments are good")
        };
        let before = uses_history_and_head(&engine);
        let deep = json!({"query": "lighthouse lamp", "expand": 5});
        assert!(is_long("recall", &deep));
        assert!(estimate(&engine, &work("recall", &deep)).unwrap() > 0.0);
        let walk = json!({"query": "lighthouse storms", "depth": 3});
        estimate(&engine, &work("traverse", &walk)).unwrap();
        assert_eq!(uses_history_and_head(&engine), before, "an estimate wrote");

        let dry = json!({"dry_run": true, "policy": {"merge_similarity": 0.5}});
        estimate(&engine, &work("consolidate", &dry)).unwrap();
        let report = McpExecutor
            .execute(&engine, &work("consolidate", &dry), &Progressing::default())
            .unwrap();
        assert_eq!(report["counts"]["merged"], 1, "{report}");
        assert_eq!(uses_history_and_head(&engine), before, "a dry run wrote");

        // The calls themselves record their hits' use, once.
        McpExecutor
            .execute(&engine, &work("recall", &deep), &Progressing::default())
            .unwrap();
        let (after, head) = uses_history_and_head(&engine);
        assert_eq!(head, before.1);
        let used = |state: &[String]| state.iter().filter(|l| !l.contains(" uses 0 ")).count();
        assert_eq!(used(&before.0), 0);
        assert!(used(&after) > 0, "{after:?}");
        assert!(after.iter().all(|l| !l.contains(" uses 2 ")), "{after:?}");
    }

    #[test]
    fn task_rows_of_older_versions_read_as_the_same_work() {
        let who = Acting {
            access: Access::Only(vec!["a".into()]),
            subject: Some("bot".into()),
        };
        let walk = json!({"query": "storms", "depth": 3, "max_nodes": 50_000});
        let mut old = walk.clone();
        old["_access"] = who.access.to_json().unwrap();
        old["_subject"] = json!("bot");
        old["_inline_limit"] = json!(true);
        old["max_nodes"] = json!(INLINE_WORK_LIMIT);
        assert_eq!(
            legacy_work("traverse", &old).unwrap(),
            work_of("traverse", &walk, &who, "bot", false).unwrap()
        );
        let import = json!({"source": {"text": "{}"}, "_max_records": 10_000, "_subject": "bot"});
        let Work::Import { request } = legacy_work("import", &import).unwrap() else {
            panic!("an import");
        };
        assert_eq!(
            request.max_records,
            Some(crate::mcp::transfer::INLINE_IMPORT_LIMIT)
        );
        assert_eq!(request.actor, "tool:import by bot");
        let run = json!({"_scheduled": true});
        let Work::Consolidate {
            request,
            inline_limit,
        } = legacy_work("consolidate", &run).unwrap()
        else {
            panic!("a run");
        };
        assert_eq!(
            (request.started_by.as_str(), inline_limit),
            ("scheduler", None)
        );
        let asked = json!({"_by": "alice", "_inline": true, "dry_run": true});
        let Work::Consolidate {
            request,
            inline_limit,
        } = legacy_work("consolidate", &asked).unwrap()
        else {
            panic!("a run");
        };
        assert_eq!(request.started_by, "tool:alice");
        assert!(request.dry_run);
        assert_eq!(inline_limit, Some(INLINE_CONSOLIDATE_LIMIT));
        // Stored work reads back as itself.
        let w = work_of("traverse", &walk, &who, "bot", true).unwrap();
        let stored = serde_json::to_value(&w).unwrap();
        assert_eq!(serde_json::from_value::<Work>(stored).unwrap(), w);
    }

    #[test]
    fn truncation_hints_name_what_helps_the_client() {
        use crate::engine::work::truncation_hint;
        assert_eq!(truncation_hint(false, 10, true), None);
        let capped = truncation_hint(true, INLINE_WORK_LIMIT, true).unwrap();
        assert!(capped.contains("narrow the walk"), "{capped}");
        assert!(capped.contains("MCP tasks"), "{capped}");
        assert!(!capped.contains("max_nodes"), "{capped}");
        let free = truncation_hint(true, 50_000, false).unwrap();
        assert!(free.contains("raise `max_nodes`"), "{free}");
    }
}
