//! What a host can browse: `resources/list` (the caller's namespaces and jobs, then its memories
//! newest first, paged by a cursor) and `completion/complete` of the `memory://{namespace}/{id}`
//! template (namespaces, then the ids of a namespace). Everything is read with the caller's
//! rights: a namespace outside them is neither listed nor completed.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, ListResourcesResult, Reference, Resource,
};
use serde_json::json;

use crate::engine::{Access, Engine};
use crate::mcp::errors;
use crate::mcp::resources::{
    MEMORY_TEMPLATE, NAMESPACE_TEMPLATE, job_uri, memory_uri, namespace_uri,
};
use crate::model::MemoryKey;
use crate::store::memories::Listing;

/// Memories listed per page of `resources/list` (a page stays well within the result budget).
const PAGE: usize = 50;
/// Most namespaces and jobs listed (on the first page).
const MAX_NAMESPACES: usize = 100;
const MAX_JOBS: usize = 50;
/// Characters of a memory's content its title shows.
const TITLE_CHARS: usize = 80;
/// Cursor prefix: the memories below this key are next.
const BELOW: &str = "below:";

fn cursor_error(cursor: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "cursor {cursor:?} is not one this server gave; start again without a cursor and \
             pass back each `nextCursor` as it comes"
        ),
        Some(json!({ "cursor": cursor })),
    )
}

/// `text` cut to `n` characters, with "…" when cut, on one line.
fn head(text: &str, n: usize) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= n {
        return line;
    }
    let mut cut: String = line.chars().take(n).collect();
    cut.push('…');
    cut
}

fn memory_resource(m: &Listing) -> Resource {
    Resource::new(
        memory_uri(&m.namespace, &m.id),
        m.name.clone().unwrap_or_else(|| m.id.clone()),
    )
    .with_title(head(&m.head, TITLE_CHARS))
    .with_description(format!("{} in {}", m.kind, m.namespace))
    .with_mime_type("application/json")
}

/// `resources/list`: without a cursor, the caller's namespaces and its newest memories; with
/// one, the memories after it.
pub(super) async fn list(
    engine: &Arc<Engine>,
    access: Access,
    cursor: Option<String>,
) -> Result<ListResourcesResult, McpError> {
    let below = match cursor.as_deref() {
        None => None,
        Some(c) => Some(
            c.strip_prefix(BELOW)
                .and_then(|k| k.parse::<i64>().ok())
                .filter(|k| *k > 0)
                .map(MemoryKey)
                .ok_or_else(|| cursor_error(c))?,
        ),
    };
    let engine = Arc::clone(engine);
    let (namespaces, jobs, page) = tokio::task::spawn_blocking(move || {
        let (namespaces, jobs) = match below {
            None => (
                engine.namespaces_in(&access)?,
                engine.jobs_in(&access, MAX_JOBS)?,
            ),
            Some(_) => (Vec::new(), Vec::new()),
        };
        let page = engine.newest_memories(&access, below, PAGE + 1)?;
        Ok::<_, crate::error::Error>((namespaces, jobs, page))
    })
    .await
    .map_err(|e| errors::worker_failed("resources/list", e))?
    .map_err(errors::request_error)?;
    let mut resources: Vec<Resource> = namespaces
        .iter()
        .take(MAX_NAMESPACES)
        .map(|ns| {
            Resource::new(namespace_uri(ns), ns.clone())
                .with_title(format!("namespace {ns}"))
                .with_description("its memories counted by kind, and the newest of them")
                .with_mime_type("application/json")
        })
        .collect();
    resources.extend(jobs.iter().map(|j| {
        Resource::new(job_uri(&j.namespace, &j.name), j.name.clone())
            .with_title(format!("job {}", j.name))
            .with_description(format!(
                "{} job of {} at version {}: its latest checkpoint, what was learned since, its tasks' results",
                j.state, j.namespace, j.head
            ))
            .with_mime_type("application/json")
    }));
    let more = page.len() > PAGE;
    resources.extend(page.iter().take(PAGE).map(memory_resource));
    let mut out = ListResourcesResult::with_all_items(resources);
    if more && let Some(last) = page.get(PAGE - 1) {
        out.next_cursor = Some(format!("{BELOW}{}", last.key.0));
    }
    Ok(out)
}

/// `completion/complete` for the memory templates: `namespace` from the caller's namespaces,
/// `id` from the ids of the namespace already chosen (`context.arguments.namespace`).
pub(super) async fn complete(
    engine: &Arc<Engine>,
    access: Access,
    request: CompleteRequestParams,
) -> Result<CompleteResult, McpError> {
    let Reference::Resource(r) = &request.r#ref else {
        return Err(McpError::invalid_params(
            "this server has no prompts; completion works for the resource templates \
             memory://{namespace} and memory://{namespace}/{id}",
            None,
        ));
    };
    if r.uri != MEMORY_TEMPLATE && r.uri != NAMESPACE_TEMPLATE {
        return Err(McpError::invalid_params(
            format!(
                "no resource template {:?}; completion works for {NAMESPACE_TEMPLATE} and \
                 {MEMORY_TEMPLATE}",
                r.uri
            ),
            None,
        ));
    }
    let prefix = request.argument.value.clone();
    let chosen = request
        .context
        .as_ref()
        .and_then(|c| c.get_argument("namespace"))
        .cloned();
    let engine = Arc::clone(engine);
    let (values, more) = match request.argument.name.as_str() {
        "namespace" => {
            let nss = tokio::task::spawn_blocking(move || engine.namespaces_in(&access))
                .await
                .map_err(|e| errors::worker_failed("completion/complete", e))?
                .map_err(errors::request_error)?;
            let mut found: Vec<String> = nss
                .into_iter()
                .filter(|ns| ns.starts_with(&prefix))
                .collect();
            let more = found.len() > CompletionInfo::MAX_VALUES;
            found.truncate(CompletionInfo::MAX_VALUES);
            (found, more)
        }
        "id" if r.uri == MEMORY_TEMPLATE => {
            let Some(ns) = chosen.filter(|ns| access.allows(ns)) else {
                // Without a namespace the ids cannot be told apart from another's.
                return Ok(CompleteResult::new(CompletionInfo::default()));
            };
            let mut ids = tokio::task::spawn_blocking(move || {
                engine.ids_with_prefix(&ns, &prefix, CompletionInfo::MAX_VALUES + 1)
            })
            .await
            .map_err(|e| errors::worker_failed("completion/complete", e))?
            .map_err(errors::request_error)?;
            let more = ids.len() > CompletionInfo::MAX_VALUES;
            ids.truncate(CompletionInfo::MAX_VALUES);
            (ids, more)
        }
        other => {
            return Err(McpError::invalid_params(
                format!(
                    "{:?} has no argument {other:?}; it takes `namespace`{}",
                    r.uri,
                    if r.uri == MEMORY_TEMPLATE {
                        " and `id`"
                    } else {
                        ""
                    }
                ),
                None,
            ));
        }
    };
    let info = CompletionInfo::with_pagination(values, None, more)
        .map_err(|e| McpError::internal_error(e, None))?;
    Ok(CompleteResult::new(info))
}
