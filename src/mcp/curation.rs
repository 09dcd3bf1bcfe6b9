//! The `consolidate` tool: a run through the inline-or-task decision (big runs are tasks with
//! progress), or, answered at once, the undo of a run and the list of recent runs.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use crate::engine::curate::ConsolidateRequest;
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::mcp::dto;
use crate::mcp::errors::tool_answer;
use crate::mcp::work::{Acting, parse};
use crate::model::RunRow;

/// Runs listed by `runs: true`.
const RUNS_LISTED: usize = 20;

/// Whether the call is a run (long: inline or task) rather than an undo or a listing.
pub(super) fn is_run(args: &Value) -> bool {
    args.get("undo").is_none_or(Value::is_null) && !args.get("runs").is_some_and(|r| r == true)
}

/// The run a caller asks for, within the namespaces it may use; `owner` is who the run
/// records as having started it.
pub(super) fn request(
    p: &dto::ConsolidateParams,
    who: &Acting,
    owner: &str,
) -> Result<ConsolidateRequest> {
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
    let started_by = format!("tool:{owner}");
    Ok(ConsolidateRequest {
        namespaces,
        steps: p.steps.clone(),
        policy: p.policy.clone().map(Value::Object),
        dry_run: p.dry_run.unwrap_or(false),
        started_by,
    })
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
