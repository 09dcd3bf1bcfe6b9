//! What the server serves as MCP resources: namespaces (`memory://{namespace}`, counts and the
//! newest memories), memories (`memory://{namespace}/{id}`, one memory with its relations) and the rest of cut tool results (`mnemograph://results/{taskId}/…`,
//! paged), each read with the caller's rights.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{ReadResourceResult, ResourceContents, ResourceTemplate};
use serde_json::{Value, json};

use crate::engine::{Access, Engine};
use crate::error::Error;
use crate::mcp::budget::{self, Cut};
use crate::mcp::errors;
use crate::model::MemoryRef;
use crate::tasks::{Requester, Tasks};

const SCHEME: &str = "memory://";

/// The templates of a namespace and of one memory.
pub(super) const NAMESPACE_TEMPLATE: &str = "memory://{namespace}";
pub(super) const MEMORY_TEMPLATE: &str = "memory://{namespace}/{id}";

/// The error of a read that finds nothing at `uri`, with what to do instead.
fn not_found_at(uri: &str, what: &str, instead: &str) -> McpError {
    McpError::resource_not_found(
        format!("no {what} at {uri}; {instead}"),
        Some(json!({ "uri": uri })),
    )
}

/// The template of a job (its name percent-encoded).
pub(super) const JOB_TEMPLATE: &str = "mnemograph://jobs/{namespace}/{name}";
const JOBS: &str = "mnemograph://jobs/";

/// Memories and task results a job's resource shows.
const JOB_ITEMS: usize = 20;

/// The address of a job.
pub(super) fn job_uri(namespace: &str, name: &str) -> String {
    format!("{JOBS}{}/{}", encode(namespace), encode(name))
}

/// `s` with every byte but ASCII letters, digits and `-._~` percent-encoded.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The text `s` percent-decodes to; `None` when it is not well formed.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

pub(super) fn job_template() -> ResourceTemplate {
    ResourceTemplate::new(JOB_TEMPLATE, "job-memory")
        .with_description(
            "A job's memory: its latest checkpoint, what was learned since and its tasks' results, as the job tool resumes it",
        )
        .with_mime_type("application/json")
}

/// `resources/read` of a job: what `job` resumes; nothing for a job outside `access` or never
/// written.
pub(super) async fn read_job(
    engine: &Arc<Engine>,
    uri: String,
    access: Access,
    tokens: usize,
) -> Result<ReadResourceResult, McpError> {
    let not_found = || {
        not_found_at(
            &uri,
            "job memory",
            "resources/list lists the jobs you may read",
        )
    };
    let Some((namespace, name)) = uri
        .strip_prefix(JOBS)
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(ns, name)| Some((decode(ns)?, decode(name)?)))
    else {
        return Err(not_found());
    };
    if !access.allows(&namespace) {
        return Err(not_found());
    }
    let engine = Arc::clone(engine);
    let wanted = name.clone();
    let resumed = tokio::task::spawn_blocking(move || {
        engine.job_resume(Some(&namespace), &wanted, &access, JOB_ITEMS)
    })
    .await
    .map_err(|e| errors::worker_failed("resources/read", e))?;
    let resumed = match resumed {
        Ok(r) if r.job.is_some() => r,
        Ok(_) => return Err(not_found()),
        Err(e) if e.is_user_error() => return Err(not_found()),
        Err(e) => return Err(errors::request_error(e)),
    };
    // Within the result budget like the tool's answer: what does not fit is named in `cut`
    // (the job tool, whose answer links the rest, or `recall` read it whole).
    let mut body = crate::mcp::tools::job_out(resumed, &name);
    let cuts = budget::fit(&mut body, budget::bytes(tokens).saturating_sub(512));
    if let (false, Value::Object(o)) = (cuts.is_empty(), &mut body) {
        let cut: Vec<Value> = cuts
            .iter()
            .map(|c| json!({"field": c.field(), "shown": c.shown, "total": c.total}))
            .collect();
        o.insert(budget::NOTE_KEY.into(), json!(cut));
    }
    let text = body.to_string();
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type("application/json"),
    ]))
}

/// Newest memories a namespace's resource shows.
const NAMESPACE_NEWEST: usize = 10;

/// The address of one memory.
pub(super) fn memory_uri(namespace: &str, id: &str) -> String {
    format!("{SCHEME}{namespace}/{id}")
}

/// The address of a namespace.
pub(super) fn namespace_uri(namespace: &str) -> String {
    format!("{SCHEME}{namespace}")
}

/// Where the rest of cut results is read: `mnemograph://results/{taskId}{JSON pointer}?from=N`.
pub(super) const RESULTS: &str = "mnemograph://results/";

/// The template of the rest of cut results.
pub(super) fn results_template() -> ResourceTemplate {
    ResourceTemplate::new("mnemograph://results/{taskId}/{field}", "result")
        .with_description(
            "The rest of a tool result too long to show whole, paged (follow `next`); kept as \
             long as its task, or its job",
        )
        .with_mime_type("application/json")
}

/// The address of the rest of what `cut` cut from the result kept under task `id`.
pub(super) fn rest_of(id: &str, cut: &Cut) -> String {
    format!("{RESULTS}{id}{}?from={}", cut.pointer, cut.shown)
}

/// `resources/read` of a cut result's rest: a page that fits `tokens`, with the address of the
/// next. The result must belong to a task `who` may see (its own, with rights that cover it).
pub(super) async fn read_rest(
    tasks: &Arc<Tasks>,
    who: Requester,
    uri: String,
    tokens: usize,
) -> Result<ReadResourceResult, McpError> {
    let gone = |why: &str| {
        McpError::resource_not_found(
            format!(
                "no result at {uri}: {why}; a cut result is kept as long as its task (an hour \
                 unless the call asked otherwise), or its job's when the call named a job: call \
                 the tool again"
            ),
            Some(json!({ "uri": uri })),
        )
    };
    let Some(rest) = uri.strip_prefix(RESULTS) else {
        return Err(gone("not a result address"));
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (id, pointer) = match path.find('/') {
        Some(i) => (&path[..i], &path[i..]),
        None => (path, ""),
    };
    let from = match query.strip_prefix("from=") {
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| gone("`from` is not a number"))?,
        None if query.is_empty() => 0,
        None => return Err(gone("the only query it takes is `from=N`")),
    };
    // A task's own result while the task is kept; after that (or for another reader of the
    // job) the result filed under the task's job, if it was run under one.
    let (t, task) = (Arc::clone(tasks), id.to_owned());
    let found = tokio::task::spawn_blocking(move || -> crate::error::Result<_> {
        if let Some(view) = t.get(&who, &task)? {
            return Ok(Some((view.row.status.as_str().to_owned(), view.row.result)));
        }
        let filed = t.engine().job_result(&task, &who.grant.access)?;
        Ok(filed.map(|r| (r.status, r.result)))
    })
    .await
    .map_err(|e| errors::worker_failed("resources/read", e))?
    .map_err(errors::request_error)?;
    let Some((status, result)) = found else {
        return Err(gone("it expired, or it is not one of your results"));
    };
    let Some(full) = &result else {
        return Err(gone(&format!(
            "its task is {status}, with no result to show you"
        )));
    };
    let page = budget::page(
        full,
        pointer,
        from,
        budget::bytes(tokens).saturating_sub(256),
    )
    .ok_or_else(|| gone("that result has no such field"))?;
    let mut body = page.body;
    if let (Some(next), Value::Object(o)) = (page.next, &mut body) {
        o.insert("next".into(), json!(format!("{RESULTS}{path}?from={next}")));
    }
    let text = body.to_string();
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type("application/json"),
    ]))
}

pub(super) fn template() -> ResourceTemplate {
    ResourceTemplate::new(MEMORY_TEMPLATE, "memory")
        .with_description("One memory with its relations, as JSON")
        .with_mime_type("application/json")
}

pub(super) fn namespace_template() -> ResourceTemplate {
    ResourceTemplate::new(NAMESPACE_TEMPLATE, "namespace")
        .with_description(
            "A namespace: its memories counted by kind, and the newest of them, as JSON",
        )
        .with_mime_type("application/json")
}

/// `resources/read` of a namespace: its counts by kind and its newest memories (with their
/// addresses); nothing for a namespace outside `access` or without memories.
async fn read_namespace(
    engine: &Arc<Engine>,
    uri: String,
    namespace: String,
    access: Access,
) -> Result<ReadResourceResult, McpError> {
    let not_found = || {
        not_found_at(
            &uri,
            "namespace",
            "resources/list lists the namespaces you may read",
        )
    };
    if !access.allows(&namespace) {
        return Err(not_found());
    }
    let engine = Arc::clone(engine);
    let ns = namespace.clone();
    let (stats, newest) = tokio::task::spawn_blocking(move || {
        let only = Access::only([ns]);
        Ok::<_, Error>((
            engine.stats_in(&only)?,
            engine.newest_memories(&only, None, NAMESPACE_NEWEST)?,
        ))
    })
    .await
    .map_err(|e| errors::worker_failed("resources/read", e))?
    .map_err(errors::request_error)?;
    if stats.memories == 0 && newest.is_empty() {
        return Err(not_found());
    }
    let body = json!({
        "namespace": namespace,
        "memories": stats.memories,
        "relations": stats.relations,
        "by_kind": stats.by_kind.iter().map(|(k, n)| json!({"kind": k, "memories": n})).collect::<Vec<_>>(),
        "newest": newest.iter().map(|m| json!({
            "id": m.id,
            "name": m.name,
            "kind": m.kind,
            "uri": memory_uri(&m.namespace, &m.id),
            "head": m.head.chars().take(120).collect::<String>(),
        })).collect::<Vec<_>>(),
    });
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(body.to_string(), uri).with_mime_type("application/json"),
    ]))
}

/// `resources/read` for a caller limited to the namespaces of `access`: a memory outside them
/// is an error that says so.
pub(super) async fn read(
    engine: &Arc<Engine>,
    uri: String,
    access: Access,
) -> Result<ReadResourceResult, McpError> {
    let not_found = || {
        not_found_at(
            &uri,
            "memory",
            "use memory://{namespace}/{id} with an id from recall",
        )
    };
    let Some(rest) = uri.strip_prefix(SCHEME) else {
        return Err(not_found());
    };
    let Some((namespace, id)) = rest.split_once('/') else {
        if rest.is_empty() {
            return Err(not_found());
        }
        let namespace = rest.to_owned();
        return read_namespace(engine, uri, namespace, access).await;
    };
    let (namespace, id) = (namespace.to_owned(), id.to_owned());
    if !access.allows(&namespace) {
        // A memory outside the caller's namespaces does not exist for it.
        return Err(not_found());
    }
    let engine = Arc::clone(engine);
    let wanted = id.clone();
    let found = tokio::task::spawn_blocking(move || {
        engine.get_in(&[MemoryRef::Id(wanted)], false, &access)
    })
    .await
    .map_err(|e| errors::worker_failed("resources/read", e))?;
    let detail = match found {
        Ok(mut d) if d.len() == 1 => d.remove(0),
        Ok(_) => return Err(not_found()),
        Err(e @ Error::Forbidden { .. }) => return Err(errors::request_error(e)),
        Err(e) if e.is_user_error() => return Err(not_found()),
        Err(e) => return Err(errors::request_error(e)),
    };
    if detail.memory.namespace != namespace
        || detail.memory.id != id
        || detail.memory.deleted_at.is_some()
    {
        return Err(not_found());
    }
    let text = serde_json::to_string(&crate::mcp::tools::detail_out(detail))
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type("application/json"),
    ]))
}
