//! The one place where library errors become MCP answers: bad arguments → `invalid_params`, other
//! user errors → a tool result with `isError` and a message that says what to do, internal errors
//! → logged and `internal_error`.

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock};

use crate::error::Error;

/// How a failed tool call is answered.
pub(super) enum ToolFailure {
    /// A JSON-RPC error.
    Protocol(McpError),
    /// A tool result with `isError: true`.
    Result(CallToolResult),
}

pub(super) fn tool_failure(e: Error) -> ToolFailure {
    match e {
        Error::InvalidArgument { .. } => {
            ToolFailure::Protocol(McpError::invalid_params(e.to_string(), None))
        }
        e if e.is_user_error() => {
            ToolFailure::Result(CallToolResult::error(vec![ContentBlock::text(
                e.to_string(),
            )]))
        }
        e => {
            tracing::error!(error = %e, "tool call failed");
            ToolFailure::Protocol(McpError::internal_error(
                "internal error in mnemograph; see the server log (stderr)",
                None,
            ))
        }
    }
}

/// Maps an error for a non-tool request (resources): user errors are `invalid_params`.
pub(super) fn request_error(e: Error) -> McpError {
    if e.is_user_error() {
        McpError::invalid_params(e.to_string(), None)
    } else {
        tracing::error!(error = %e, "request failed");
        McpError::internal_error(
            "internal error in mnemograph; see the server log (stderr)",
            None,
        )
    }
}

/// Arguments that do not fit the tool's schema, with the path of the offending field.
pub(super) fn bad_arguments(
    tool: &str,
    e: serde_path_to_error::Error<serde_json::Error>,
) -> McpError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let msg = if path == "." {
        format!("invalid arguments for `{tool}`: {inner}. See the tool's input schema")
    } else {
        format!("invalid `{path}` in arguments for `{tool}`: {inner}. See the tool's input schema")
    };
    McpError::invalid_params(msg, None)
}
