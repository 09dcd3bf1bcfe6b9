//! The only module that knows MCP: the server handler (tools, resources), the tools by family
//! with their wire shapes ([`tools`]), the long path to tasks, and the mapping of errors. Both protocol eras are served over stdio and over
//! Streamable HTTP ([`http`]).

pub mod auth;
mod browse;
mod budget;
mod errors;
#[cfg(feature = "conformance")]
mod fixtures;
mod gate;
mod guard;
mod hosts;
pub mod http;
mod listener;
pub mod metrics;
pub mod oauth;
mod resources;
mod sessions;
mod task_api;
pub mod tools;
mod transport;
mod ui;
pub mod work;

use std::sync::Arc;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, ErrorCode, GetTaskParams, GetTaskResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::tasks::{Requester, TaskConfig, Tasks};

const INSTRUCTIONS: &str = "Graph memory. `recall` before answering from memory; `remember` \
facts worth keeping (one memory per fact, with a namespace per project or user); `relate` links \
them; `get` shows a memory with its relations. Memories are resources at memory://{namespace}/{id}.";

/// How long hosts may keep the lists that change only with the binary (tools, resource
/// templates), in milliseconds.
const LIST_TTL_MS: u64 = 3_600_000;

/// Largest incoming JSON-RPC message, in bytes.
const MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

/// How the server identifies callers and runs long work.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Owner of every task, instead of the client's name (for hosts that share one identity).
    pub owner: Option<String>,
    /// Most tokens a tool result takes (`None`: 4,000); see `serve --result-budget-tokens`.
    pub result_budget_tokens: Option<usize>,
    pub tasks: TaskConfig,
    /// Scheduled work (`serve --consolidate-every`), started as tasks of owner `scheduler`.
    pub schedule: Option<crate::tasks::Schedule>,
}

/// The MCP server over one engine.
#[derive(Clone)]
pub struct MemoryServer {
    engine: Arc<Engine>,
    tasks: Arc<Tasks>,
    owner: Option<String>,
    /// Most tokens a result takes unless a call asks for less.
    budget: usize,
    /// Counts tool calls when set (HTTP serves them at `/metrics`).
    metrics: Option<Arc<metrics::Metrics>>,
    /// The line in front of the cores that every session's calls answered at once share.
    gate: Arc<gate::Gate>,
}

impl MemoryServer {
    /// A server over `engine`; must be made inside a tokio runtime (it starts task maintenance,
    /// and the consolidation schedule when there is one).
    pub fn new(engine: Arc<Engine>, options: ServerOptions) -> MemoryServer {
        let tasks = Tasks::new(
            Arc::clone(&engine),
            options.tasks,
            Arc::new(work::McpExecutor),
        );
        tasks.start_maintenance();
        if let Some(schedule) = options.schedule {
            tasks.start_schedule(schedule);
        }
        MemoryServer {
            engine,
            tasks,
            owner: options.owner,
            budget: options
                .result_budget_tokens
                .unwrap_or(budget::DEFAULT_TOKENS)
                .max(budget::MIN_TOKENS),
            metrics: None,
            gate: gate::Gate::per_core(),
        }
    }

    /// This server, counting its tool calls in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<metrics::Metrics>) -> MemoryServer {
        self.metrics = Some(metrics);
        self
    }

    /// Who a request acts for, and with what rights: tasks are visible only to their owner
    /// with rights that cover the task's. Over HTTP with tokens, the token's subject and
    /// grant; otherwise every right.
    fn requester(&self, ctx: &RequestContext<RoleServer>) -> Requester {
        match caller(ctx) {
            Some(c) => Requester {
                owner: c.subject.clone(),
                grant: c.grant(),
            },
            None => Requester::full(self.owner(ctx)),
        }
    }

    /// The owner tasks are kept under: over HTTP with tokens, the token's subject.
    fn owner(&self, ctx: &RequestContext<RoleServer>) -> String {
        if let Some(c) = caller(ctx) {
            return c.subject.clone();
        }
        if let Some(o) = &self.owner {
            return o.clone();
        }
        ctx.client_info()
            .map_or_else(|| "anonymous".to_owned(), |i| format!("client:{}", i.name))
    }

    /// What a request may touch and whom history names: over HTTP with tokens, the token's
    /// namespaces and subject; otherwise every namespace.
    fn acting(ctx: &RequestContext<RoleServer>) -> work::Acting {
        caller(ctx).map_or_else(work::Acting::default, |c| work::Acting {
            access: c.access.clone(),
            subject: Some(c.subject.clone()),
            ..work::Acting::default()
        })
    }

    /// The result budget of a request: the server's, or less when the request's `_meta` asks
    /// (never under [`budget::MIN_TOKENS`]).
    fn budget(&self, ctx: &RequestContext<RoleServer>) -> usize {
        ctx.meta
            .0
            .0
            .get(budget::REQUEST_KEY)
            .and_then(serde_json::Value::as_u64)
            .map_or(self.budget, |asked| {
                (asked as usize).clamp(budget::MIN_TOKENS, self.budget)
            })
    }

    /// `tools/call` within the result budget: an answer too long to show whole is kept as a
    /// completed task of the caller and shown cut, with links to the rest.
    async fn call_tool_bounded(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        let tokens = self.budget(&context);
        let who = self.requester(&context);
        let tool = request.name.to_string();
        let answer = self.call_tool_unguarded(request, context).await?;
        let CallToolResponse::Complete(result) = answer else {
            return Ok(answer);
        };
        if !budget::over(&result, tokens) {
            return Ok(CallToolResponse::Complete(result));
        }
        let full = result.structured_content.clone().unwrap_or_default();
        let tasks = Arc::clone(&self.tasks);
        let kept = tokio::task::spawn_blocking(move || tasks.keep(&who, &tool, full))
            .await
            .map_err(|e| errors::worker_failed("tools/call", e))?;
        let cut = match kept {
            Ok(row) => budget::cut(&result, tokens, |c| resources::rest_of(&row.id, c)),
            Err(e) => {
                tracing::warn!(error = %e, "could not keep a cut result; its rest is not linked");
                budget::cut(&result, tokens, |_| {
                    "not kept (the memory database is unavailable): call again for the rest"
                        .to_owned()
                })
            }
        };
        Ok(CallToolResponse::Complete(cut))
    }

    /// `tools/call`: inline, or as a task when the call is long and the client can poll.
    async fn call_tool_unguarded(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        #[cfg(feature = "conformance")]
        if let Some(answer) =
            fixtures::call(&self.tasks, self.requester(&context), &request, &context).await
        {
            return answer;
        }
        let args = request.arguments.unwrap_or_default();
        let name = request.name.as_ref();
        // A conformance fixture has no descriptor; its long calls go the long path too.
        let tool = tools::find(name);
        if tool.is_none() && !work::is_long(name, &args) {
            return Err(McpError::invalid_params(
                format!("unknown tool `{name}`; call tools/list for the available tools"),
                None,
            ));
        }
        if let Some(c) = caller(&context) {
            let mut needed = tool.map_or(auth::Scope::Read, |t| (t.scope)(&args));
            // Work filed under a job writes to the job.
            let in_job = context.meta.0.0.contains_key(task_api::JOB_KEY);
            if in_job {
                needed = needed.max(auth::Scope::Write);
            }
            if c.scope < needed {
                return Ok(CallToolResponse::Complete(errors::error_result(format!(
                    "`{name}` needs a token with the {} scope{}; this token ({}) has {}: ask the server's operator for one with `--scopes {}`",
                    needed.name(),
                    if in_job {
                        " when its work is filed under a job"
                    } else {
                        tool.map_or("", |t| t.scope_note)
                    },
                    c.subject,
                    c.scope.name(),
                    needed.name()
                ))));
            }
        }
        let who = Self::acting(&context);
        if work::is_long(name, &args) {
            return task_api::call_long(
                &self.tasks,
                self.requester(&context),
                name,
                args,
                &context,
                &who,
            )
            .await;
        }
        let Some(now) = tool.and_then(|t| t.now) else {
            return Err(McpError::internal_error(
                format!("`{name}` has no answer for this call"),
                None,
            ));
        };
        // Calls answered at once take turns for the cores, by caller (see `gate`).
        let _turn = self.gate.enter(&self.owner(&context)).await;
        let call = tools::Call {
            engine: Arc::clone(&self.engine),
            tasks: Arc::clone(&self.tasks),
            requester: self.requester(&context),
            who,
            budget: self.budget(&context),
        };
        now(call, args)
            .await
            .or_else(errors::tool_answer)
            .map(CallToolResponse::Complete)
    }
}

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_completions()
                .enable_tasks()
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
        #[cfg_attr(not(feature = "conformance"), expect(unused_mut))]
        let mut all = tools::all();
        #[cfg(feature = "conformance")]
        all.extend(fixtures::tools());
        // The list is the same for every caller and changes only with the binary: hosts may
        // keep it (SEP-2549) instead of asking before every call.
        Ok(ListToolsResult::with_all_items(all)
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    #[tracing::instrument(skip_all, fields(tool = %request.name))]
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        let started = std::time::Instant::now();
        let name = request.name.to_string();
        let res = guard::caught("tools/call", self.call_tool_bounded(request, context)).await;
        let elapsed = started.elapsed().as_secs_f64();
        tracing::debug!(elapsed_ms = elapsed * 1e3, ok = res.is_ok(), "tool call");
        if let Some(m) = &self.metrics {
            use metrics::Outcome;
            let outcome = match &res {
                Ok(CallToolResponse::Task(_)) => Outcome::Task,
                Ok(CallToolResponse::Complete(r)) if r.is_error == Some(true) => Outcome::ToolError,
                Ok(_) => Outcome::Ok,
                Err(_) => Outcome::ProtocolError,
            };
            m.observe(&name, outcome, elapsed);
        }
        res
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<GetTaskResult, McpError> {
        let who = self.requester(&context);
        let tokens = self.budget(&context);
        guard::caught(
            "tasks/get",
            task_api::get(&self.tasks, who, request.task_id, tokens),
        )
        .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<(), McpError> {
        let who = self.requester(&context);
        guard::caught(
            "tasks/update",
            task_api::update(&self.tasks, who, request.task_id, request.input_responses),
        )
        .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<(), McpError> {
        let who = self.requester(&context);
        guard::caught(
            "tasks/cancel",
            task_api::cancel(&self.tasks, who, request.task_id),
        )
        .await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListPromptsResult, McpError> {
        Err(not_offered("prompts/list", "prompts"))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CompleteResult, McpError> {
        #[cfg(feature = "conformance")]
        if let Some(fixture) = fixtures::complete(&request) {
            return Ok(fixture);
        }
        let access = Self::acting(&context).access;
        guard::caught(
            "completion/complete",
            browse::complete(&self.engine, access, request),
        )
        .await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            resources::namespace_template(),
            resources::template(),
            resources::job_template(),
            resources::results_template(),
        ])
        .with_ttl_ms(LIST_TTL_MS)
        .with_cache_scope(CacheScope::Public))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourcesResult, McpError> {
        let access = Self::acting(&context).access;
        let cursor = request.and_then(|r| r.cursor);
        guard::caught("resources/list", browse::list(&self.engine, access, cursor)).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<ReadResourceResponse, McpError> {
        #[cfg(feature = "conformance")]
        if let Some(fixture) = fixtures::read_resource(&request.uri) {
            return Ok(fixture.into());
        }
        if request.uri.starts_with(resources::RESULTS) {
            let (who, tokens) = (self.requester(&context), self.budget(&context));
            return guard::caught(
                "resources/read",
                resources::read_rest(&self.tasks, who, request.uri, tokens),
            )
            .await
            .map(Into::into);
        }
        let access = Self::acting(&context).access;
        if request.uri.starts_with("mnemograph://jobs/") {
            return guard::caught(
                "resources/read",
                resources::read_job(&self.engine, request.uri, access, self.budget(&context)),
            )
            .await
            .map(Into::into);
        }
        guard::caught(
            "resources/read",
            resources::read(&self.engine, request.uri, access),
        )
        .await
        .map(Into::into)
    }
}

/// The caller a bearer token identified (HTTP with tokens only).
fn caller(ctx: &RequestContext<RoleServer>) -> Option<&auth::Caller> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<auth::Caller>())
}

/// A method of a capability the server does not declare.
fn not_offered(method: &str, capability: &str) -> McpError {
    McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!(
            "method not found: `{method}`; this server has no {capability} (it declares tools and resources)"
        ),
        None,
    )
}

/// Serves MCP on stdin/stdout until the client closes the stream.
pub async fn serve_stdio(engine: Arc<Engine>, options: ServerOptions) -> Result<()> {
    let server = MemoryServer::new(engine, options);
    let tasks = Arc::clone(&server.tasks);
    let ended = run_stdio(server).await;
    // Work still running is stopped and its rows left for the next process to adopt.
    tasks.shutdown();
    ended
}

/// One MCP session of `server` on stdin/stdout, until the client closes the stream.
async fn run_stdio(server: MemoryServer) -> Result<()> {
    let (reader, writer) = (tokio::io::stdin(), tokio::io::stdout());
    let session = Arc::new(transport::Session::default());
    // Room for the largest call the limits allow (16 MiB of content, JSON-escaped).
    let transport =
        transport::StdioTransport::new(reader, writer, MAX_MESSAGE_BYTES, Arc::clone(&session));
    let service = guard::Guarded::new(server, session)
        .serve(transport)
        .await
        .map_err(|e| Error::Internal(format!("MCP session did not start: {e}")))?;
    service
        .waiting()
        .await
        .map_err(|e| Error::Internal(format!("MCP session ended abnormally: {e}")))?;
    Ok(())
}
