//! The only module that knows MCP: the server handler (tools, resources), the wire shapes and their
//! conversion, and the mapping of errors. Both protocol eras are served over stdio.

mod convert;
pub mod dto;
mod errors;
mod resources;
pub mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};

use crate::engine::Engine;
use crate::error::{Error, Result};

const INSTRUCTIONS: &str = "Graph memory. `recall` before answering from memory; `remember` \
facts worth keeping (one memory per fact, with a namespace per project or user); `relate` links \
them; `get` shows a memory with its relations. Memories are resources at memory://{namespace}/{id}.";

/// The MCP server over one engine.
#[derive(Clone)]
pub struct MemoryServer {
    engine: Arc<Engine>,
}

impl MemoryServer {
    pub fn new(engine: Arc<Engine>) -> MemoryServer {
        MemoryServer { engine }
    }
}

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("mnemograph", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::all()))
    }

    #[tracing::instrument(skip_all, fields(tool = %request.name))]
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let started = std::time::Instant::now();
        let res = tools::call(&self.engine, &request.name, args).await;
        tracing::debug!(
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            ok = res.is_ok(),
            "tool call"
        );
        res.map(CallToolResponse::Complete)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            resources::template(),
        ]))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(Vec::new()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ReadResourceResponse, McpError> {
        resources::read(&self.engine, request.uri)
            .await
            .map(Into::into)
    }
}

/// Serves MCP on stdin/stdout until the client closes the stream.
pub async fn serve_stdio(engine: Arc<Engine>) -> Result<()> {
    let (reader, writer) = rmcp::transport::io::stdio_pipes();
    let service = MemoryServer::new(engine)
        .serve((reader, writer))
        .await
        .map_err(|e| Error::Internal(format!("MCP session did not start: {e}")))?;
    service
        .waiting()
        .await
        .map_err(|e| Error::Internal(format!("MCP session ended abnormally: {e}")))?;
    Ok(())
}
