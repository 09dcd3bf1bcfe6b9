//! The one place where library errors become MCP answers. In a tool call, user errors — invalid
//! arguments (naming the field, the JSON path for schema errors), unknown ids, conflicts — are tool
//! results with `isError` and a message that says what to do, so the model can correct itself (MCP
//! 2025-11-25, SEP-1303); so are faults the operator can remedy (a full disk, a damaged
//! database), with what to do. Other internal errors are logged and answered `internal_error`.
//! JSON-RPC errors are left for requests that are not a call of a known tool, and tasks/* rules.

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock};

use crate::error::Error;

/// What a client is told about an internal error it cannot act on.
const SEE_THE_LOG: &str = "internal error in mnemograph; see the server log (stderr)";

/// How a failed tool call is answered.
pub(super) enum ToolFailure {
    /// A JSON-RPC error.
    Protocol(McpError),
    /// A tool result with `isError: true`.
    Result(CallToolResult),
}

/// A tool result with `isError: true` and `message` as its text.
pub(super) fn error_result(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

pub(super) fn tool_failure(e: Error) -> ToolFailure {
    if e.is_user_error() {
        return ToolFailure::Result(error_result(e.to_string()));
    }
    if matches!(e, Error::Cancelled) {
        return ToolFailure::Result(error_result(
            "cancelled: the call was stopped before it finished".into(),
        ));
    }
    tracing::error!(error = %e, "tool call failed");
    match e.advice() {
        Some(advice) => ToolFailure::Result(error_result(advice)),
        None => ToolFailure::Protocol(McpError::internal_error(SEE_THE_LOG, None)),
    }
}

/// The answer of a failed tool call.
pub(super) fn tool_answer(e: Error) -> Result<CallToolResult, McpError> {
    match tool_failure(e) {
        ToolFailure::Protocol(err) => Err(err),
        ToolFailure::Result(r) => Ok(r),
    }
}

/// Maps an error for a non-tool request (resources, tasks/*): user errors are `invalid_params`,
/// faults the operator can remedy say so, others point to the log.
pub(super) fn request_error(e: Error) -> McpError {
    if e.is_user_error() {
        return McpError::invalid_params(e.to_string(), None);
    }
    tracing::error!(error = %e, "request failed");
    McpError::internal_error(e.advice().unwrap_or_else(|| SEE_THE_LOG.to_owned()), None)
}

/// Blocking work that did not finish (it panicked): logged, answered as an internal error.
pub(super) fn worker_failed(method: &str, e: tokio::task::JoinError) -> McpError {
    tracing::error!(%method, error = %e, "blocking work of a request failed");
    super::guard::panicked(method)
}

/// Arguments that do not fit the tool's schema, naming the offending field by its JSON path.
pub(super) fn bad_arguments(tool: &str, e: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let path = e.path().to_string();
    Error::invalid(
        if path == "." {
            "arguments".to_owned()
        } else {
            path
        },
        e.into_inner().to_string(),
        format!("see the input schema of `{tool}` in tools/list"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result_text(f: ToolFailure) -> String {
        match f {
            ToolFailure::Result(r) => {
                assert_eq!(r.is_error, Some(true));
                r.content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect()
            }
            ToolFailure::Protocol(e) => panic!("a JSON-RPC error, not a tool result: {e:?}"),
        }
    }

    #[test]
    fn bad_arguments_are_tool_results_the_model_can_read() {
        let text = result_text(tool_failure(Error::invalid(
            "limit",
            "is 500",
            "give 1 to 100",
        )));
        assert_eq!(text, "invalid `limit`: is 500. give 1 to 100");
    }

    #[test]
    fn a_full_disk_says_what_to_do() {
        let text = result_text(tool_failure(Error::Io(std::io::Error::from_raw_os_error(
            28,
        ))));
        assert!(text.contains("free disk space"), "{text}");
    }
}
