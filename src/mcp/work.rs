//! The long path between the tools and the task runner: which calls are long work (a tool's
//! `Descriptor` says, or a conformance fixture), the [`Work`] they become,
//! its estimate, who a call acts for ([`Acting`]), and [`McpExecutor`], what the task runner
//! runs work with — the engine's, plus the conformance fixtures and the task rows of older
//! versions.

use rmcp::model::JsonObject;
use serde_json::Value;

use crate::engine::control::{Answering, Control};
use crate::engine::work::Work;
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::mcp::tools;
use crate::tasks::Executor;

/// Who a call acts for: the namespaces it may use, and the subject history names (over HTTP
/// with tokens; on stdio every namespace and no subject).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Acting {
    pub access: Access,
    pub subject: Option<String>,
    /// What the client can answer when the work asks (only a call that may become a task).
    pub answers: Answering,
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

/// Whether this call of `tool` is long work (it goes through the inline-or-task decision).
pub(crate) fn is_long(tool: &str, args: &JsonObject) -> bool {
    #[cfg(feature = "conformance")]
    if crate::mcp::fixtures::is_long(tool) {
        return true;
    }
    tools::find(tool).is_some_and(|d| d.long.as_ref().is_some_and(|l| (l.when)(args)))
}

/// The work a long call of `tool` asks for, checked and converted once (see
/// `tools::ToWork`).
pub fn work_of(tool: &str, args: &Value, who: &Acting, owner: &str, tasks: bool) -> Result<Work> {
    #[cfg(feature = "conformance")]
    if crate::mcp::fixtures::is_long(tool) {
        return Ok(Work::Probe {
            name: tool.to_owned(),
            args: args.clone(),
        });
    }
    match tools::find(tool).and_then(|d| d.long.as_ref()) {
        Some(long) => (long.work)(args, who, owner, tasks),
        None => Err(Error::invalid(
            "tool",
            format!("`{tool}` does not run as a task"),
            "call it directly",
        )),
    }
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
/// under `_` keys) are read by [`Executor::legacy`].
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
        ..Acting::default()
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
        assert!(is_long("recall", deep.as_object().unwrap()));
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
            ..Acting::default()
        };
        let walk = json!({"query": "storms", "depth": 3, "max_nodes": 50_000});
        let mut old = walk.clone();
        old["_access"] = who.access.to_json().unwrap();
        old["_subject"] = json!("bot");
        old["_inline_limit"] = json!(true);
        old["max_nodes"] = json!(crate::mcp::tools::INLINE_WORK_LIMIT);
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
            Some(crate::mcp::tools::INLINE_IMPORT_LIMIT)
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
        assert_eq!(
            inline_limit,
            Some(crate::engine::work::INLINE_CONSOLIDATE_LIMIT)
        );
        // Stored work reads back as itself.
        let w = work_of("traverse", &walk, &who, "bot", true).unwrap();
        let stored = serde_json::to_value(&w).unwrap();
        assert_eq!(serde_json::from_value::<Work>(stored).unwrap(), w);
    }

    #[test]
    fn truncation_hints_name_what_helps_the_client() {
        use crate::engine::work::truncation_hint;
        assert_eq!(truncation_hint(false, 10, true), None);
        let capped = truncation_hint(true, crate::mcp::tools::INLINE_WORK_LIMIT, true).unwrap();
        assert!(capped.contains("narrow the walk"), "{capped}");
        assert!(capped.contains("MCP tasks"), "{capped}");
        assert!(!capped.contains("max_nodes"), "{capped}");
        let free = truncation_hint(true, 50_000, false).unwrap();
        assert!(free.contains("raise `max_nodes`"), "{free}");
    }
}
