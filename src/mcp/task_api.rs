//! The MCP side of tasks: the inline-or-task answer of long tools, `tasks/get`, `tasks/update`,
//! `tasks/cancel` and the wire shapes of task rows.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, CreateTaskResult,
    DetailedTask, GetTaskResult, InputRequest, InputRequests, InputResponses, JsonObject,
    MetaObject, ProgressNotificationParam, ProtocolVersion, Task, TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use crate::engine::control::{Answering, status_message, work_done, work_total};
use crate::mcp::errors::{request_error, tool_answer, worker_failed};
use crate::mcp::work;
use crate::mcp::{budget, resources};
use crate::model::{TaskRow, TaskState, format_time};
use crate::tasks::{
    Answer, Capability, Decision, Plan, Requester, TaskView, Tasks, decide, short_id,
};

/// `_meta` key of the decision on a tool result or task handle.
const DECISION_KEY: &str = "mnemograph/decision";
/// `_meta` key of the machine-readable counters in `tasks/get`.
const PROGRESS_KEY: &str = "mnemograph/progress";
/// Request `_meta` key a client may use to ask for a task time-to-live, in milliseconds.
const TTL_KEY: &str = "mnemograph/taskTtlMs";
/// Request `_meta` key naming the job a long call's work is filed under (see [`named_job`]).
pub(crate) const JOB_KEY: &str = "mnemograph/job";

/// The job a request's `_meta` names, as (namespace, name): a name, in the namespace the call
/// works in (its `namespace` argument, or the default); or `{"name", "namespace"}`.
fn named_job(
    ctx: &RequestContext<RoleServer>,
    args: &JsonObject,
) -> crate::error::Result<Option<(Option<String>, String)>> {
    let bad = |why: &str| {
        crate::error::Error::invalid(
            format!("_meta[\"{JOB_KEY}\"]"),
            why,
            "give a job name, or {\"name\": …, \"namespace\": …}",
        )
    };
    let in_call = || {
        args.get("namespace")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match ctx.meta.0.0.get(JOB_KEY) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(name)) => Ok(Some((in_call(), name.clone()))),
        Some(Value::Object(o)) => {
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("has no `name`"))?;
            let ns = match o.get("namespace") {
                None | Some(Value::Null) => in_call(),
                Some(Value::String(ns)) => Some(ns.clone()),
                Some(_) => return Err(bad("has a `namespace` that is not a string")),
            };
            Ok(Some((ns, name.to_owned())))
        }
        Some(_) => Err(bad("is neither a name nor an object")),
    }
}

/// Whether this request may receive a task: when its client declared the tasks extension, in
/// either era (a 2025-11-25 client that lists it in `initialize` speaks its `tasks/*` methods).
pub(crate) fn capability(ctx: &RequestContext<RoleServer>) -> Capability {
    let modern = ctx
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    // Declared on the request (2026-07-28) or, in a 2025-11-25 session, in `initialize`: a
    // client that declared the extension polls its tasks, whatever the era.
    if ctx
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
    {
        Capability::Tasks
    } else if !modern {
        Capability::OldProtocol
    } else {
        Capability::NotDeclared
    }
}

/// What the client of this request can answer when its work asks, as it declared.
fn answering(ctx: &RequestContext<RoleServer>) -> Answering {
    ctx.client_capabilities()
        .map_or_else(Answering::default, |c| Answering {
            elicitation: c.elicitation.is_some(),
            sampling: c.sampling.is_some(),
        })
}

fn meta(value: Value) -> MetaObject {
    let mut m = MetaObject::new();
    if let Value::Object(o) = value {
        m.0 = o;
    }
    m
}

fn wire_status(s: TaskState) -> TaskStatus {
    match s {
        TaskState::Working => TaskStatus::Working,
        TaskState::InputRequired => TaskStatus::InputRequired,
        TaskState::Completed => TaskStatus::Completed,
        TaskState::Failed => TaskStatus::Failed,
        TaskState::Cancelled => TaskStatus::Cancelled,
    }
}

fn wire_task(row: &TaskRow, message: Option<String>, poll_interval_ms: Option<u64>) -> Task {
    let mut t = Task::new(
        row.id.clone(),
        wire_status(row.status),
        format_time(row.created_at),
        format_time(row.updated_at),
    );
    t.status_message = message;
    t.ttl_ms = row.ttl_ms.map(|t| t.max(0) as u64);
    t.poll_interval_ms = poll_interval_ms;
    t
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// The answer of a long tool: inline, or a task handle, as the decision says.
pub(crate) async fn call_long(
    tasks: &Arc<Tasks>,
    owner: Requester,
    tool: &str,
    args: JsonObject,
    ctx: &RequestContext<RoleServer>,
    who: &work::Acting,
) -> Result<CallToolResponse, McpError> {
    let cap = capability(ctx);
    if cap != Capability::Tasks && work::requires_task(tool) {
        return Err(McpError::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ));
    }
    // The arguments become the engine's work once: checked, within the caller's access, and
    // bounded for a client that cannot poll. A client that polls can also answer the work's
    // questions (`input_required`) with what it declared: forms, its model.
    let mut who = who.clone();
    if cap == Capability::Tasks {
        who.answers = answering(ctx);
    }
    let named = match named_job(ctx, &args) {
        Ok(n) => n,
        Err(e) => return tool_answer(e).map(CallToolResponse::Complete),
    };
    let mut work = match work::work_of(
        tool,
        &Value::Object(args),
        &who,
        &owner.owner,
        cap == Capability::Tasks,
    ) {
        Ok(w) => w,
        Err(e) => return tool_answer(e).map(CallToolResponse::Complete),
    };
    let engine = Arc::clone(tasks.engine());
    let for_estimate = work.clone();
    let access = who.access.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let job = match named {
            Some((ns, name)) => Some(engine.job_to_file(ns.as_deref(), &name, &access)?),
            None => None,
        };
        Ok::<_, crate::error::Error>((job, work::estimate(&engine, &for_estimate)?))
    })
    .await
    .map_err(|e| worker_failed("tools/call", e))?;
    let (job, estimate_ms) = match checked {
        Ok(c) => c,
        Err(e) => return tool_answer(e).map(CallToolResponse::Complete),
    };
    // An import under a job files what it learns there too.
    if let (Some(j), crate::engine::work::Work::Import { request }) = (&job, &mut work) {
        request.job = Some(j.clone());
    }
    let (mut plan, mut reason) = decide(cap, estimate_ms, tasks.config().inline_budget);
    if plan == Plan::Inline && cap == Capability::Tasks && work.may_ask() {
        // Only a task can wait for the client's answer: quick work that may ask races.
        plan = Plan::Race;
        reason.push_str("; it may ask the client, so it becomes a task if it does");
    }
    tracing::info!(tool, ?plan, estimate_ms, %reason, "inline or task");
    let decision = json!({ DECISION_KEY: {"plan": format!("{plan:?}").to_lowercase(), "reason": reason, "estimateMs": estimate_ms} });

    // Progress notifications for inline answers, all sent before the response.
    let token = ctx.meta.get_progress_token();
    let (tx, forwarder) = match token {
        Some(token) => {
            let (tx, mut rx) =
                tokio::sync::mpsc::unbounded_channel::<crate::engine::control::WorkProgress>();
            let peer = ctx.peer.clone();
            let fw = tokio::spawn(async move {
                while let Some(p) = rx.recv().await {
                    let n = ProgressNotificationParam::new(token.clone(), work_done(&p) as f64)
                        .with_total(work_total(&p) as f64)
                        .with_message(status_message(&p));
                    if let Err(e) = peer.notify_progress(n).await {
                        tracing::debug!(error = %e, "progress notification not sent");
                    }
                }
            });
            (Some(tx), Some(fw))
        }
        None => (None, None),
    };
    let on_progress: Option<crate::tasks::ProgressSink> = tx.map(|tx| {
        Arc::new(move |p| {
            let _ = tx.send(p);
        }) as crate::tasks::ProgressSink
    });
    let ttl = ctx.meta.0.0.get(TTL_KEY).and_then(Value::as_u64);
    // A client's `notifications/cancelled` stops the work while it is answered inline.
    let answer = tasks
        .run(
            &owner,
            tool,
            work,
            Decision {
                plan,
                estimate: std::time::Duration::from_secs_f64(estimate_ms.max(0.0) / 1e3),
            },
            ttl,
            job,
            on_progress,
            ctx.ct.cancelled(),
        )
        .await;
    if let Some(fw) = forwarder {
        let _ = fw.await; // every sender is gone once `run` returned: the loop ends after the last send
    }
    match answer {
        Err(e) | Ok(Answer::Inline(Err(e))) => tool_answer(e).map(CallToolResponse::Complete),
        Ok(Answer::Inline(Ok(v))) => Ok(CallToolResponse::Complete(
            CallToolResult::structured(v).with_meta(Some(meta(decision))),
        )),
        Ok(Answer::Task(row)) => {
            tracing::info!(
                task = short_id(&row.id),
                tool,
                "answered with a task handle"
            );
            let poll = row.poll_interval_ms.map(|t| t.max(0) as u64);
            let task = wire_task(&row, row.status_message.clone(), poll);
            Ok(CallToolResponse::Task(
                CreateTaskResult::new(task).with_meta(meta(decision)),
            ))
        }
    }
}

fn not_found(id: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "unknown task {}…: it does not exist, expired, or belongs to another client",
            short_id(id)
        ),
        None,
    )
}

/// `tasks/get`.
pub(crate) async fn get(
    tasks: &Arc<Tasks>,
    owner: Requester,
    id: String,
    tokens: usize,
) -> Result<rmcp::model::GetTaskResult, McpError> {
    let t = Arc::clone(tasks);
    let id2 = id.clone();
    let view = tokio::task::spawn_blocking(move || t.get(&owner, &id2))
        .await
        .map_err(|e| worker_failed("tasks/get", e))?
        .map_err(request_error)?
        .ok_or_else(|| not_found(&id))?;
    Ok(detailed(&view, tokens))
}

/// A task as `tasks/get` answers it; a result over `tokens` is cut, with links to its rest in
/// the task's row.
fn detailed(view: &TaskView, tokens: usize) -> GetTaskResult {
    let row = &view.row;
    let payload = match row.status {
        TaskState::Working => TaskPayload::Working,
        TaskState::InputRequired => TaskPayload::InputRequired {
            input_requests: input_requests(row),
        },
        TaskState::Cancelled => TaskPayload::Cancelled,
        TaskState::Completed => {
            let result = match (&row.result, &row.error) {
                (Some(v), _) => CallToolResult::structured(v.clone()),
                (None, Some(e)) => CallToolResult::error(vec![ContentBlock::text(
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                        .to_owned(),
                )]),
                (None, None) => CallToolResult::structured(Value::Null),
            };
            let result = if budget::over(&result, tokens) {
                budget::cut(&result, tokens, |c| resources::rest_of(&row.id, c))
            } else {
                result
            };
            TaskPayload::Completed {
                result: object(serde_json::to_value(result).unwrap_or(Value::Null)),
            }
        }
        TaskState::Failed => {
            let message = row
                .error
                .as_ref()
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("task failed");
            TaskPayload::Failed {
                error: object(json!({"code": -32603, "message": message})),
            }
        }
    };
    let mut res = GetTaskResult::new(DetailedTask::new(
        wire_task(row, view.status_message(), view.poll_interval_ms()),
        payload,
    ));
    res.meta = Some(meta(
        json!({ PROGRESS_KEY: view.progress_json(), "mnemograph/tool": row.tool }),
    ));
    res
}

/// The requests a task waits on, as the wire types (a request that is not one the client can
/// answer — elicitation, sampling, roots — is left out and logged).
fn input_requests(row: &TaskRow) -> InputRequests {
    let Some(Value::Object(requests)) = &row.input_requests else {
        return InputRequests::new();
    };
    requests
        .iter()
        .filter_map(
            |(key, request)| match serde_json::from_value::<InputRequest>(request.clone()) {
                Ok(r) => Some((key.clone(), r)),
                Err(e) => {
                    tracing::warn!(task = short_id(&row.id), key, error = %e, "input request left out: not one a client can answer");
                    None
                }
            },
        )
        .collect()
}

/// `tasks/cancel`.
pub(crate) async fn cancel(
    tasks: &Arc<Tasks>,
    owner: Requester,
    id: String,
) -> Result<(), McpError> {
    let t = Arc::clone(tasks);
    let id2 = id.clone();
    let found = tokio::task::spawn_blocking(move || t.cancel(Some(&owner), &id2))
        .await
        .map_err(|e| worker_failed("tasks/cancel", e))?
        .map_err(request_error)?;
    if found { Ok(()) } else { Err(not_found(&id)) }
}

/// `tasks/update`: the client's answers to a task's input requests. The task goes on once all
/// are answered; answers to requests it does not wait for are ignored.
pub(crate) async fn update(
    tasks: &Arc<Tasks>,
    owner: Requester,
    id: String,
    responses: InputResponses,
) -> Result<(), McpError> {
    let t = Arc::clone(tasks);
    let id2 = id.clone();
    let responses: serde_json::Map<String, Value> = responses.into_iter().collect();
    let found = tokio::task::spawn_blocking(move || t.update(&owner, &id2, &responses))
        .await
        .map_err(|e| worker_failed("tasks/update", e))?
        .map_err(request_error)?;
    if found { Ok(()) } else { Err(not_found(&id)) }
}
