//! `consolidate`: a run (merge near-duplicates, summarise old episodes, flag contradictions,
//! archive the unused) is long work, inline within the budget or a task with progress; the undo
//! of a run and the list of recent runs are answered at once.

use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Descriptor, Hints, Long, Pending, blocking, input_schema, parse};
use crate::engine::curate::ConsolidateRequest;
use crate::engine::work::{INLINE_CONSOLIDATE_LIMIT, Work};
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::mcp::auth::Scope;
use crate::mcp::work::Acting;
use crate::model::RunRow;

/// Runs listed by `runs: true`.
const RUNS_LISTED: usize = 20;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConsolidateParams {
    /// Default all.
    pub(crate) namespaces: Option<Vec<String>>,
    /// Subset of merge, summarise, contradictions, decay, archive, hygiene.
    pub(crate) steps: Option<Vec<String>>,
    /// Overrides, e.g. {"resolve":"newest"}.
    pub(crate) policy: Option<serde_json::Map<String, serde_json::Value>>,
    /// Report, write nothing.
    pub(crate) dry_run: Option<bool>,
    /// Undo this run (its id) instead.
    pub(crate) undo: Option<String>,
    /// With undo: first undo later runs built on it.
    pub(crate) cascade: Option<bool>,
    /// List recent runs instead.
    pub(crate) runs: Option<bool>,
}

pub(super) fn descriptor() -> Descriptor {
    Descriptor {
        name: "consolidate",
        description: "Merge near-duplicates, summarise old episodes, flag contradictions, archive the unused; undo a run by id.",
        schema: input_schema::<ConsolidateParams>,
        hints: Hints(false, false, false),
        scope: |_| Scope::Admin,
        scope_note: "",
        long: Some(Long {
            when: is_run,
            work: run,
        }),
        now: Some(now),
    }
}

/// Whether the call is a run (long: inline or task) rather than an undo or a listing.
fn is_run(args: &JsonObject) -> bool {
    args.get("undo").is_none_or(Value::is_null) && !args.get("runs").is_some_and(|r| r == true)
}

/// A run as work; the run records `owner` as who started it, and a client that cannot poll
/// must fit the inline limit.
fn run(args: &Value, who: &Acting, owner: &str, tasks: bool) -> Result<Work> {
    let p: ConsolidateParams = parse("consolidate", args)?;
    Ok(Work::Consolidate {
        request: request(&p, who, owner)?,
        inline_limit: (!tasks).then_some(INLINE_CONSOLIDATE_LIMIT),
    })
}

fn now(c: Call, args: JsonObject) -> Pending {
    Box::pin(async move { undo_or_runs(&c.engine, c.requester.owner, args, &c.who).await })
}

/// The run a caller asks for, within the namespaces it may use; `owner` is who the run
/// records as having started it.
fn request(p: &ConsolidateParams, who: &Acting, owner: &str) -> Result<ConsolidateRequest> {
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
        answers: who.answers,
    })
}

/// Answers an undo or the list of runs at once.
async fn undo_or_runs(
    engine: &Arc<Engine>,
    owner: String,
    args: JsonObject,
    who: &Acting,
) -> Result<CallToolResult> {
    let p: ConsolidateParams = parse("consolidate", &Value::Object(args))?;
    if !who.access.is_all() {
        // A run may span namespaces: its undo and the list of runs are for callers that may
        // use every namespace.
        return Err(Error::Forbidden {
            field: if p.undo.is_none() && p.runs == Some(true) {
                "runs"
            } else {
                "undo"
            }
            .into(),
            reason: "covers runs over any namespace, and this caller may use some only".into(),
            hint: "ask the server's operator, or someone with a token for every namespace".into(),
        });
    }
    let v = blocking(engine, move |engine| -> Result<Value> {
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
    .await?;
    Ok(CallToolResult::structured(v))
}
