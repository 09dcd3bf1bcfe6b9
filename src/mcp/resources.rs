//! Memories as MCP resources: `memory://{namespace}/{id}` reads one memory with its relations.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{ReadResourceResult, ResourceContents, ResourceTemplate};

use crate::engine::{Access, Engine};
use crate::error::Error;
use crate::mcp::errors;
use crate::model::MemoryRef;

const SCHEME: &str = "memory://";

pub(super) fn template() -> ResourceTemplate {
    ResourceTemplate::new("memory://{namespace}/{id}", "memory")
        .with_description("One memory with its relations, as JSON")
        .with_mime_type("application/json")
}

/// `resources/read` for a caller limited to the namespaces of `access`: a memory outside them
/// is an error that says so.
pub(super) async fn read(
    engine: &Arc<Engine>,
    uri: String,
    access: Access,
) -> Result<ReadResourceResult, McpError> {
    let not_found = || {
        McpError::resource_not_found(
            format!("no memory at {uri}; use memory://{{namespace}}/{{id}} with an id from recall"),
            Some(serde_json::json!({ "uri": uri })),
        )
    };
    let Some((namespace, id)) = uri
        .strip_prefix(SCHEME)
        .and_then(|rest| rest.split_once('/'))
    else {
        return Err(not_found());
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
