//! The `job` tool: the memory of a job an agent works on across sessions and servers —
//! resume it (its latest checkpoint, what was learned since, its tasks' results), write a
//! checkpoint from the version read, list its versions, compare two, go back to one, close it.
//! One tool with an `action` rather than six: the surface `tools/list` shows stays small.

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Call, Descriptor, Hints, Pending, blocking, input_schema, parse_object, structured};
use crate::engine::job_context::Resumed;
use crate::error::{Error, Result};
use crate::mcp::auth::Scope;
use crate::mcp::resources;
use crate::model::{JobResult, JobVersion, format_time};

/// Memories and task results a resume shows (the result budget cuts further, with links).
const RESUME_ITEMS: usize = 20;
/// Versions a history page lists (`next_version` pages on).
const HISTORY_PAGE: usize = 20;
/// Characters of a learned memory's content a resume shows.
const CONTENT_CHARS: usize = 300;
/// Largest task result a resume shows whole (bytes of compact JSON); a larger one is read at
/// its address.
const INLINE_RESULT_BYTES: usize = 600;

// What a call does with the job (no doc comment: it would be the schema's description).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    #[default]
    Resume,
    Checkpoint,
    History,
    Diff,
    Revert,
    Close,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobParams {
    pub(crate) name: String,
    pub(crate) namespace: Option<String>,
    pub(crate) action: Option<Action>,
    /// The version read (0: first); diff: from.
    pub(crate) base: Option<i64>,
    /// revert: go back to; diff: to; history: below.
    pub(crate) version: Option<i64>,
    pub(crate) note: Option<String>,
    pub(crate) learned: Option<Vec<String>>,
    pub(crate) open_questions: Option<Vec<String>>,
    pub(crate) state: Option<Map<String, Value>>,
}

pub(super) fn descriptor() -> Descriptor {
    Descriptor {
        name: "job",
        description: "Memory of a job across sessions: resume it, checkpoint from the version read, history, diff, revert, close.",
        schema: input_schema::<JobParams>,
        hints: Hints(false, false, false),
        scope,
        scope_note: "",
        long: None,
        now: Some(job),
    }
}

/// Reading a job needs `read` (a read-only token names the action: resume, history, diff);
/// writing to it, `write`.
fn scope(args: &JsonObject) -> Scope {
    match args.get("action").and_then(Value::as_str) {
        Some("resume" | "history" | "diff") => Scope::Read,
        _ => Scope::Write,
    }
}

fn job(c: Call, args: JsonObject) -> Pending {
    Box::pin(async move {
        let p: JobParams = parse_object("job", args)?;
        let action = p.action.unwrap_or_default();
        let author = c.who.actor("job");
        let access = c.who.access.clone();
        let out = blocking(&c.engine, move |e| {
            let ns = p.namespace.as_deref();
            let name = p.name.as_str();
            match action {
                Action::Resume => Ok(resumed(
                    e.job_resume(ns, name, &access, RESUME_ITEMS)?,
                    name,
                )),
                Action::Checkpoint => {
                    let mut body = Map::new();
                    if let Some(n) = &p.note {
                        body.insert("note".into(), json!(n));
                    }
                    if let Some(l) = &p.learned {
                        body.insert("learned".into(), json!(l));
                    }
                    if let Some(q) = &p.open_questions {
                        body.insert("open_questions".into(), json!(q));
                    }
                    if let Some(s) = &p.state {
                        body.insert("state".into(), Value::Object(s.clone()));
                    }
                    if body.is_empty() {
                        return Err(Error::invalid(
                            "checkpoint",
                            "says nothing",
                            "give note, learned, open_questions and/or state",
                        ));
                    }
                    let base = needed(
                        "base",
                        p.base,
                        "the version you resumed (0 for the first checkpoint)",
                    )?;
                    let v =
                        e.job_checkpoint(ns, name, base, &Value::Object(body), &author, &access)?;
                    Ok(written(name, &v))
                }
                Action::Revert => {
                    let base = needed("base", p.base, "the version you resumed")?;
                    let to = needed("version", p.version, "the version to go back to")?;
                    let v = e.job_revert(ns, name, base, to, &author, &access)?;
                    Ok(written(name, &v))
                }
                Action::History => {
                    let (job, versions) =
                        e.job_history(ns, name, p.version, HISTORY_PAGE, &access)?;
                    let next = versions
                        .last()
                        .filter(|v| versions.len() == HISTORY_PAGE && v.version > 1)
                        .map(|v| v.version);
                    Ok(json!({
                        "job": name,
                        "state": job.state,
                        "head": job.head,
                        "versions": versions.iter().map(version_line).collect::<Vec<_>>(),
                        "next_version": next,
                    }))
                }
                Action::Diff => {
                    let (job, _) = e.job_history(ns, name, None, 1, &access)?;
                    let to = p.version.unwrap_or(job.head);
                    let from = p.base.unwrap_or(to - 1);
                    let d = e.job_diff(ns, name, from, to, &access)?;
                    Ok(json!({"job": name, "from": d.from, "to": d.to, "changes": d.changes}))
                }
                Action::Close => {
                    let job = e.job_close(ns, name, &access)?;
                    Ok(json!({
                        "job": name,
                        "state": job.state,
                        "head": job.head,
                        "closed_at": job.closed_at.map(format_time),
                    }))
                }
            }
        })
        .await?;
        structured(out)
    })
}

fn needed(field: &str, v: Option<i64>, what: &str) -> Result<i64> {
    v.ok_or_else(|| Error::invalid(field, "is missing", format!("give {what}")))
}

/// A version as history lists it: its place in the chain, who wrote it, and its note.
fn version_line(v: &JobVersion) -> Value {
    json!({
        "version": v.version,
        "parent": v.parent,
        "reverts_to": v.reverts_to,
        "author": v.author,
        "at": format_time(v.created_at),
        "note": v.body.get("note"),
    })
}

fn written(name: &str, v: &JobVersion) -> Value {
    json!({
        "job": name,
        "version": v.version,
        "parent": v.parent,
        "reverts_to": v.reverts_to,
        "next": format!("write the next checkpoint with base {}", v.version),
    })
}

/// One task result as a resume shows it: where it stands, and its result when small (always
/// at its address, paged, for as long as the job is kept).
fn result_line(t: &JobResult, withheld: &[String]) -> Value {
    let mut o = json!({
        "taskId": t.task_id,
        "tool": t.tool,
        "status": t.status,
        "summary": t.summary,
        "at": format_time(t.finished_at),
    });
    if withheld.contains(&t.task_id) {
        o["result"] = json!("withheld: the work could read namespaces you may not");
    } else if let Some(v) = &t.result {
        o["uri"] = json!(format!("{}{}", resources::RESULTS, t.task_id));
        if crate::mcp::budget::size(v) <= INLINE_RESULT_BYTES {
            o["result"] = v.clone();
        }
    }
    o
}

/// A resumed job as the tool (and its resource) answers it.
pub(crate) fn resumed(r: Resumed, name: &str) -> Value {
    let Some(job) = &r.job else {
        return json!({
            "job": name,
            "state": "new",
            "next": "nothing is stored under this job yet: write its first checkpoint with base 0, and remember with `job` to file memories under it",
        });
    };
    let head = r.head.as_ref().map(|h| {
        let mut o = h.body.as_object().cloned().unwrap_or_default();
        o.insert("version".into(), json!(h.version));
        o.insert("parent".into(), json!(h.parent));
        o.insert("author".into(), json!(h.author));
        o.insert("at".into(), json!(format_time(h.created_at)));
        Value::Object(o)
    });
    json!({
        "job": name,
        "namespace": job.namespace,
        "state": job.state,
        "head": head,
        "learned_since": {
            "total": r.learned_total,
            "memories": r.learned.iter().map(|m| json!({
                "id": m.id,
                "name": m.name,
                "content": m.content.chars().take(CONTENT_CHARS).collect::<String>(),
            })).collect::<Vec<_>>(),
        },
        "results": {
            "total": r.results_total,
            "tasks": r.results.iter().map(|t| result_line(t, &r.withheld)).collect::<Vec<_>>(),
        },
        "next": format!("checkpoint with base {} to save where the work stands", job.head),
    })
}
