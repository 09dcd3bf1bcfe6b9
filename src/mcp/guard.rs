//! Every request gets an answer: the server's handler runs under `catch_unwind`, so a request whose
//! handling panics is answered with a JSON-RPC internal error (and logged) instead of leaving the
//! client waiting, and the server goes on serving.

use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use rmcp::model::{ClientNotification, ClientRequest, ProtocolVersion, ServerConfig, ServerResult};
use rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, Service};

use crate::mcp::MemoryServer;
use crate::mcp::transport::Session;

/// A server handler ([`MemoryServer`]) behind a guard against panics; also tells the transport
/// when requests end.
pub(crate) struct Guarded<S = MemoryServer> {
    server: S,
    session: Arc<Session>,
}

impl<S: ServerHandler> Guarded<S> {
    pub(crate) fn new(server: S, session: Arc<Session>) -> Guarded<S> {
        Guarded { server, session }
    }
}

/// The text of a panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// The answer to a request whose handling panicked.
pub(crate) fn panicked(method: &str) -> McpError {
    McpError::internal_error(
        format!(
            "internal error in mnemograph while handling `{method}`: the server hit a bug and did not finish this request (the details are in its log, on stderr). nothing else is affected: try again, and report the log lines if it happens again"
        ),
        None,
    )
}

/// `handling`'s outcome, or when it panics an internal error naming `method` (and a log line):
/// the guard for transports that take a [`ServerHandler`] rather than a [`Service`] (HTTP).
pub(crate) async fn caught<T>(
    method: &str,
    handling: impl Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    AssertUnwindSafe(handling)
        .catch_unwind()
        .await
        .unwrap_or_else(|payload| Err(answer_panic(method, None, payload.as_ref())))
}

/// Logs a request handler's panic and returns the error that answers the request.
fn answer_panic(
    method: &str,
    id: Option<&rmcp::model::RequestId>,
    payload: &(dyn std::any::Any + Send),
) -> McpError {
    let panic = panic_text(payload);
    match id {
        Some(id) => tracing::error!(
            %method,
            request = %id,
            %panic,
            "a request handler panicked; answered with an internal error"
        ),
        None => tracing::error!(
            %method,
            %panic,
            "a request handler panicked; answered with an internal error"
        ),
    }
    panicked(method)
}

impl<S: ServerHandler> Service<RoleServer> for Guarded<S> {
    fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ServerResult, McpError>> + MaybeSendFuture + '_ {
        let method = request.method().to_owned();
        let (id, cancelled) = (context.id.clone(), context.ct.clone());
        if !matches!(request, ClientRequest::DiscoverRequest(_)) {
            self.session.start();
        }
        let handling = <S as Service<RoleServer>>::handle_request(&self.server, request, context);
        async move {
            let outcome = AssertUnwindSafe(handling).catch_unwind().await;
            self.session.handled(&id, cancelled.is_cancelled());
            outcome
                .unwrap_or_else(|payload| Err(answer_panic(&method, Some(&id), payload.as_ref())))
        }
    }

    fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        let handling =
            <S as Service<RoleServer>>::handle_notification(&self.server, notification, context);
        async move {
            AssertUnwindSafe(handling)
                .catch_unwind()
                .await
                .unwrap_or_else(|payload| {
                    tracing::error!(
                        panic = %panic_text(payload.as_ref()),
                        "a notification handler panicked"
                    );
                    Ok(())
                })
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.server)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        ServerHandler::supported_protocol_versions(&self.server)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rmcp::ServiceExt;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    };
    use rmcp::service::ServiceError;

    use super::*;
    use crate::mcp::transport::StdioTransport;

    /// A handler with a bug in `tools/list`.
    struct Fragile;

    impl ServerHandler for Fragile {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _: Option<PaginatedRequestParams>,
            _: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, McpError> {
            panic!("a bug in list_tools");
        }

        async fn call_tool(
            &self,
            _: CallToolRequestParams,
            _: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, McpError> {
            Ok(CallToolResponse::Complete(CallToolResult::success(vec![
                ContentBlock::text("fine"),
            ])))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_whose_handler_panics_is_answered_and_the_server_goes_on() {
        let (server_end, client_end) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server_end);
        let session = Arc::new(Session::default());
        let transport = StdioTransport::new(read, write, 1 << 20, Arc::clone(&session));
        let server = tokio::spawn(async move {
            let running = Guarded::new(Fragile, session).serve(transport).await;
            running.expect("session").waiting().await
        });
        let client = ().serve(client_end).await.expect("client session");
        let listed = tokio::time::timeout(Duration::from_secs(10), client.list_tools(None))
            .await
            .expect("the panicking request is answered");
        match listed {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.code, ErrorCode::INTERNAL_ERROR, "{e:?}");
                assert!(e.message.contains("`tools/list`"), "{e:?}");
                assert!(e.message.contains("try again"), "{e:?}");
            }
            other => panic!("{other:?}"),
        }
        let called = tokio::time::timeout(
            Duration::from_secs(10),
            client.call_tool(CallToolRequestParams::new("any")),
        )
        .await
        .expect("the next request is answered")
        .expect("and served");
        assert_eq!(called.is_error, Some(false));
        client.cancel().await.expect("close the client");
        let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    }
}
