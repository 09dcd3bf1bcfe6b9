//! The `tasks` tool: the caller's recent tasks with status and progress, and the server's
//! scheduled consolidation runs (owner `scheduler`: background work on the memory the caller
//! uses). A result comes from `tasks/get`.

use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Call, Descriptor, Hints, Pending, input_schema, parse, read};
use crate::error::Error;
use crate::model::format_time;
use crate::tasks::TaskView;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TasksParams {
    /// 1–100 (default 20).
    pub(crate) limit: Option<u32>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskOut {
    pub(crate) task_id: String,
    pub(crate) tool: String,
    pub(crate) status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status_message: Option<String>,
    pub(crate) created_at: String,
    pub(crate) last_updated_at: String,
    /// Who runs it, when not the caller (`scheduler`: the server's scheduled consolidation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
}

pub(super) fn descriptor() -> Descriptor {
    Descriptor {
        name: "tasks",
        description: "Your recent tasks and their progress; results come from tasks/get.",
        schema: input_schema::<TasksParams>,
        hints: Hints(true, false, true),
        scope: read,
        scope_note: "",
        long: None,
        now: Some(list),
    }
}

fn list(c: Call, args: JsonObject) -> Pending {
    Box::pin(async move {
        let p: TasksParams = parse("tasks", &Value::Object(args))?;
        let limit = p.limit.unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("is {limit}"),
                "give 1 to 100",
            ));
        }
        let (tasks, who) = (Arc::clone(&c.tasks), c.requester.clone());
        let views = tokio::task::spawn_blocking(move || tasks.list_for(&who, limit as usize))
            .await
            .map_err(|e| Error::Internal(format!("tool worker panicked: {e}")))??;
        let out: Vec<_> = views
            .iter()
            .map(|v| task_out(v, &c.requester.owner))
            .collect();
        Ok(CallToolResult::structured(json!({ "tasks": out })))
    })
}

/// A task as the `tasks` tool lists it to `caller`.
fn task_out(v: &TaskView, caller: &str) -> TaskOut {
    TaskOut {
        owner: (v.row.owner != caller).then(|| v.row.owner.clone()),
        task_id: v.row.id.clone(),
        tool: v.row.tool.clone(),
        status: v.row.status.as_str().to_owned(),
        status_message: v.status_message(),
        created_at: format_time(v.row.created_at),
        last_updated_at: format_time(v.row.updated_at),
    }
}
