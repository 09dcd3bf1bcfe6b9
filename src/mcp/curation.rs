//! The `consolidate` tool: a run through the inline-or-task decision (big runs are tasks with
//! progress), or, answered at once, the undo of a run and the list of recent runs.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use crate::engine::control::Control;
use crate::engine::curate::ConsolidateRequest;
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::mcp::dto;
use crate::mcp::errors::tool_answer;
use crate::mcp::work::{Acting, parse};
use crate::model::RunRow;

/// Most memories a run covers for a client that cannot receive tasks.
pub(super) const INLINE_CONSOLIDATE_LIMIT: i64 = 20_000;
/// Memories a run goes through per millisecond, roughly (for the inline-or-task decision).
const PER_MS: f64 = 3.0;
/// Runs listed by `runs: true`.
const RUNS_LISTED: usize = 20;

/// Whether the call is a run (long: inline or task) rather than an undo or a listing.
pub(super) fn is_run(args: &Value) -> bool {
    args.get("undo").is_none_or(Value::is_null) && !args.get("runs").is_some_and(|r| r == true)
}

fn request(p: &dto::ConsolidateParams, who: &Acting) -> Result<ConsolidateRequest> {
    let namespaces = match (&who.access, &p.namespaces) {
        (Access::All, _) => p.namespaces.clone(),
        (Access::Only(_), None) => {
            return Err(Error::Forbidden {
                field: "namespaces".into(),
                reason:
                    "is left out, which means every namespace, and this caller may use some only"
                        .into(),
                hint: "name the namespaces to consolidate".into(),
            });
        }
        (access, Some(list)) => access.narrow_list("namespaces", Some(list.clone()))?,
    };
    let started_by = if p.scheduled == Some(true) {
        crate::tasks::schedule::OWNER.to_owned()
    } else {
        format!("tool:{}", p.by.as_deref().unwrap_or("anonymous"))
    };
    Ok(ConsolidateRequest {
        namespaces,
        steps: p.steps.clone(),
        policy: p.policy.clone().map(Value::Object),
        dry_run: p.dry_run.unwrap_or(false),
        started_by,
    })
}

/// The arguments of the server's scheduled run: every namespace, the default steps and policy.
pub(super) fn scheduled_args() -> Value {
    json!({"_scheduled": true})
}

/// A finished run's status line when its progress tells nothing: a run skipped because
/// another holds the database names that run.
pub(super) fn summary(output: &Value) -> Option<String> {
    (output.get("state").and_then(Value::as_str) == Some("skipped")).then(|| {
        let holder = output
            .get("held_by")
            .and_then(Value::as_str)
            .unwrap_or("another run");
        format!("skipped: run {holder} holds the database; nothing done")
    })
}

/// Checks the arguments and estimates the run, in milliseconds.
pub(super) fn estimate(engine: &Engine, args: &Value, who: &Acting) -> Result<f64> {
    let p: dto::ConsolidateParams = parse("consolidate", args)?;
    let n = engine.consolidation_size(&request(&p, who)?)?;
    if p.inline.unwrap_or(false) && n > INLINE_CONSOLIDATE_LIMIT {
        return Err(Error::invalid(
            "namespaces",
            format!(
                "cover {n} memories, more than the {INLINE_CONSOLIDATE_LIMIT} a client without MCP tasks can wait for"
            ),
            "consolidate fewer namespaces per call, use a client with the tasks extension, or ask the operator to run `mnemograph consolidate` (or schedule it with --consolidate-every)",
        ));
    }
    Ok(n as f64 / PER_MS)
}

/// Runs consolidation for the task runner.
pub(super) fn run(engine: &Engine, args: &Value, ctl: &dyn Control, who: &Acting) -> Result<Value> {
    let p: dto::ConsolidateParams = parse("consolidate", args)?;
    let report = engine.consolidate(&request(&p, who)?, ctl)?;
    let mut v = serde_json::to_value(&report)?;
    if let Value::Object(o) = &mut v {
        let hint = match (report.state.as_str(), report.dry_run) {
            ("skipped", _) => Some("another run holds the database; try again when it ends"),
            (_, true) => Some("nothing was written; call again without dry_run to apply"),
            _ => Some("undo with {\"undo\": run_id}; nothing was deleted"),
        };
        if let Some(h) = hint {
            o.insert("hint".into(), h.into());
        }
    }
    Ok(v)
}

/// Answers an undo or the list of runs at once.
pub(super) async fn call(
    engine: &Arc<Engine>,
    owner: String,
    args: JsonObject,
    who: &Acting,
) -> std::result::Result<CallToolResult, McpError> {
    let res = async {
        let p: dto::ConsolidateParams = parse("consolidate", &Value::Object(args))?;
        if !who.access.is_all() {
            // A run may span namespaces: its undo and the list of runs are for callers that
            // may use every namespace.
            return Err(Error::Forbidden {
                field: if p.undo.is_some() { "undo" } else { "runs" }.into(),
                reason: "covers runs over any namespace, and this caller may use some only".into(),
                hint: "ask the server's operator, or someone with a token for every namespace"
                    .into(),
            });
        }
        let engine = Arc::clone(engine);
        let v = tokio::task::spawn_blocking(move || -> Result<Value> {
            if let Some(id) = &p.undo {
                let r = engine.undo_consolidation(
                    id,
                    p.cascade.unwrap_or(false),
                    &format!("tool:{owner}"),
                )?;
                return Ok(serde_json::to_value(r)?);
            }
            let runs = engine.consolidation_runs(RUNS_LISTED)?;
            Ok(json!({"runs": runs.iter().map(RunRow::listing).collect::<Vec<_>>()}))
        })
        .await
        .map_err(|e| Error::Internal(format!("tool worker panicked: {e}")))??;
        Ok::<_, Error>(CallToolResult::structured(v))
    }
    .await;
    res.or_else(tool_answer)
}
