//! The tool surface, one family per file: each family holds its tools' wire shapes, their
//! conversion to the engine's requests and its handlers, and describes each tool once in a
//! `Descriptor` — name, description, schema, annotations, the scope a call needs, whether a
//! call may be long (and then the [`Work`] it becomes), how it is answered at once. `tools/list`,
//! the scope check, the inline-or-task path and the metrics' tool labels all read the one
//! table (`table`); nothing outside a family names its tools.

mod curation;
mod jobs;
mod memory;
mod recall;
mod schema;
mod tasks;
mod transfer;
mod walks;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::engine::Engine;
use crate::engine::work::Work;
use crate::error::{Error, Result};
use crate::mcp::auth::Scope;
use crate::mcp::errors::bad_arguments;
use crate::mcp::work::Acting;
use crate::model::{DEFAULT_NAMESPACE, MemoryRef, Millis, parse_time};
use crate::tasks::{Requester, Tasks};

pub(crate) use jobs::resumed as job_out;
pub(crate) use memory::detail_out;
pub(crate) use schema::input_schema;
#[cfg(test)]
pub(crate) use transfer::INLINE_IMPORT_LIMIT;
#[cfg(test)]
pub(crate) use walks::INLINE_WORK_LIMIT;

/// Hints of one tool: (read-only, destructive, idempotent).
pub(crate) struct Hints(pub bool, pub bool, pub bool);

/// What a handler answering at once gets: the engine, the task runner, who asks and with
/// what rights.
pub(crate) struct Call {
    pub(crate) engine: Arc<Engine>,
    pub(crate) tasks: Arc<Tasks>,
    pub(crate) requester: Requester,
    pub(crate) who: Acting,
    /// The result budget of this call, in tokens (a tool that pages itself fits its page to
    /// it; any result over it is cut with links to the rest).
    pub(crate) budget: usize,
}

/// An answer being computed.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Result<CallToolResult>> + Send>>;

/// Converts a long call's arguments into its work: (arguments, caller, the owner its task
/// belongs to, whether the caller can receive a task).
pub(crate) type ToWork = fn(&Value, &Acting, &str, bool) -> Result<Work>;

/// A tool whose calls may be long: they go through the inline-or-task decision.
pub(crate) struct Long {
    /// Whether this call is long (always, for most).
    pub(crate) when: fn(&JsonObject) -> bool,
    pub(crate) work: ToWork,
}

/// One tool, described once.
pub(crate) struct Descriptor {
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) schema: fn() -> JsonObject,
    pub(crate) hints: Hints,
    /// The scope a token needs for this call.
    pub(crate) scope: fn(&JsonObject) -> Scope,
    /// Said after a missing scope (what a bigger scope is for).
    pub(crate) scope_note: &'static str,
    /// How a long call becomes work.
    pub(crate) long: Option<Long>,
    /// How a call that is not long is answered.
    pub(crate) now: Option<fn(Call, JsonObject) -> Pending>,
}

impl Descriptor {
    /// The tool as `tools/list` shows it.
    pub(crate) fn tool(&self) -> Tool {
        let mut t = Tool::new(self.name, self.description, Arc::new((self.schema)()));
        // Hints at their spec defaults are left out (readOnly false; destructive and idempotent
        // mean nothing for a read-only tool); openWorld defaults to true, so it is always given.
        let Hints(read_only, destructive, idempotent) = self.hints;
        t.annotations = Some(ToolAnnotations::from_raw(
            None,
            read_only.then_some(true),
            (!read_only && !destructive).then_some(false),
            (!read_only && idempotent).then_some(true),
            Some(false),
        ));
        t
    }
}

/// Every tool, in the order `tools/list` shows them.
pub(crate) fn table() -> &'static [Descriptor] {
    static TABLE: std::sync::OnceLock<Vec<Descriptor>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut all = Vec::new();
        all.extend(memory::head());
        all.push(recall::descriptor());
        all.extend(memory::tail());
        all.extend(walks::descriptors());
        all.extend(transfer::descriptors());
        all.push(curation::descriptor());
        all.push(tasks::descriptor());
        all.push(jobs::descriptor());
        all.push(memory::stats());
        all
    })
}

/// The tool called `name`.
pub(crate) fn find(name: &str) -> Option<&'static Descriptor> {
    table().iter().find(|d| d.name == name)
}

/// Every tool as `tools/list` shows them.
pub fn all() -> Vec<Tool> {
    table().iter().map(Descriptor::tool).collect()
}

/// The scope a token needs to call `tool` with `args` (read for an unknown tool).
#[cfg(test)]
fn scope(tool: &str, args: &JsonObject) -> Scope {
    find(tool).map_or(Scope::Read, |d| (d.scope)(args))
}

/// Scopes by what a tool does: writes need `write`, the rest `read`.
fn read(_: &JsonObject) -> Scope {
    Scope::Read
}

fn write(_: &JsonObject) -> Scope {
    Scope::Write
}

fn always(_: &JsonObject) -> bool {
    true
}

/// The arguments of `tool` as its parameter type; a mismatch names the JSON path.
pub(crate) fn parse<T: DeserializeOwned>(tool: &str, args: &Value) -> Result<T> {
    serde_path_to_error::deserialize(args).map_err(|e| bad_arguments(tool, e))
}

fn parse_object<T: DeserializeOwned>(tool: &str, args: JsonObject) -> Result<T> {
    serde_path_to_error::deserialize(Value::Object(args)).map_err(|e| bad_arguments(tool, e))
}

/// Runs `f` on the blocking pool, never on a runtime worker.
async fn blocking<T: Send + 'static>(
    engine: &Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<T> + Send + 'static,
) -> Result<T> {
    let engine = Arc::clone(engine);
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .map_err(|e| Error::Internal(format!("tool worker panicked: {e}")))?
}

fn structured(value: impl serde::Serialize) -> Result<CallToolResult> {
    Ok(CallToolResult::structured(serde_json::to_value(value)?))
}

/// [`CallToolResult::structured`] of `value` whose text, `value` as compact JSON, is already
/// written: a result is not serialised once more to make it.
fn structured_as(value: Value, text: String) -> CallToolResult {
    let mut result = CallToolResult::structured(Value::Null);
    result.content = vec![rmcp::model::ContentBlock::text(text)];
    result.structured_content = Some(value);
    result
}

/// A time argument (RFC 3339, or a date).
fn time(field: &str, s: Option<&str>) -> Result<Option<Millis>> {
    s.map(|s| {
        parse_time(s).ok_or_else(|| {
            Error::invalid(
                field,
                format!("{s:?} is not a time"),
                "use RFC 3339 like 2024-05-01T10:00:00Z, or a date like 2024-05-01",
            )
        })
    })
    .transpose()
}

/// Memories by ids and by names in a namespace (default "default").
fn refs(ids: Option<Vec<String>>, names: Option<Vec<String>>, ns: Option<&str>) -> Vec<MemoryRef> {
    let ns = ns.unwrap_or(DEFAULT_NAMESPACE);
    let mut out: Vec<MemoryRef> = ids
        .unwrap_or_default()
        .into_iter()
        .map(MemoryRef::Id)
        .collect();
    out.extend(
        names
            .unwrap_or_default()
            .into_iter()
            .map(|name| MemoryRef::Name {
                namespace: ns.to_owned(),
                name,
            }),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_tools_need_the_read_scope_and_the_others_more() {
        for t in all() {
            let read_only = t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false);
            assert_eq!(
                scope(&t.name, &JsonObject::new()) == Scope::Read,
                read_only,
                "{}",
                t.name
            );
        }
        let args = |v: serde_json::Value| v.as_object().cloned().unwrap();
        assert_eq!(scope("consolidate", &JsonObject::new()), Scope::Admin);
        let file = args(serde_json::json!({"source": {"path": "notes/"}}));
        assert_eq!(scope("import", &file), Scope::Admin);
        let text = args(serde_json::json!({"source": {"text": "a"}}));
        assert_eq!(scope("import", &text), Scope::Write);
        assert_eq!(
            scope("export", &args(serde_json::json!({"path": "out.jsonl"}))),
            Scope::Admin
        );
        assert_eq!(
            scope("export", &args(serde_json::json!({"path": null}))),
            Scope::Read
        );
    }

    #[test]
    fn tools_list_stays_small() {
        let json = serde_json::to_string(&all()).unwrap();
        let tokens = json.len() / 4;
        assert!(tokens < 3_000, "tools/list is about {tokens} tokens");
    }

    #[test]
    fn every_tool_is_answered_one_way_or_another() {
        for d in table() {
            assert!(d.long.is_some() || d.now.is_some(), "{}", d.name);
        }
    }
}
