//! MCP over Streamable HTTP: rmcp's server transport (a tower service) at `/mcp` on axum, both
//! protocol eras (2025-11-25 sessions with `Mcp-Session-Id`, 2026-07-28 stateless requests that
//! any instance can answer), beside `/healthz` (liveness), `/readyz` (the database answers,
//! the indexes have caught up) and `/metrics` (Prometheus). rmcp checks `Origin` (403) for `/mcp`;
//! `hosts` checks `Host` on every endpoint (DNS rebinding: 403); this module adds bearer tokens (401),
//! sessions that belong to the caller that opened them (404 for another's), a body read within a
//! deadline (408) and refused by its declared length (413), JSON-RPC errors for bodies that are
//! not JSON-RPC (400), a per-request timeout (504), a cap on requests in flight (503) with a share
//! per caller (429), request logs and the graceful shutdown; `listener` holds
//! connections to their deadlines and to a cap.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::mcp::auth::{Caller, Gate, Refusal};
use crate::mcp::hosts::{allowed_hosts, check_host};
use crate::mcp::listener::{self, Limits};
use crate::mcp::metrics::Metrics;
use crate::mcp::sessions::{OwnedSessions, Owners, Whose};
use crate::mcp::{MemoryServer, ServerOptions};

/// Path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// How the HTTP transport listens and what it admits.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Browser origins admitted besides the loopback ones (`http://localhost:*` and the like);
    /// a request with any other `Origin` gets 403.
    pub allowed_origins: Vec<String>,
    /// `Host` values admitted besides the loopback names; empty on a non-loopback address admits
    /// any host.
    pub allowed_hosts: Vec<String>,
    /// Largest request body (413 beyond; before it is read when its declared length is over).
    pub max_body_bytes: usize,
    /// Longest a request may take to be answered (504 beyond); long work is a task instead.
    pub request_timeout: Duration,
    /// Requests handled at once (503 with `Retry-After` beyond).
    pub max_in_flight: usize,
    /// Requests one caller (a token's subject; without tokens, a client address) may have in
    /// flight (429 with `Retry-After` beyond); `None`: half of `max_in_flight`.
    pub max_in_flight_per_caller: Option<usize>,
    /// Connections open at once (503 and closed beyond); lowered to fit the open-files limit.
    pub max_connections: usize,
    /// Longest from a request's first byte to the end of its head (the connection is closed).
    pub header_timeout: Duration,
    /// Longest a request body may take to arrive (408).
    pub body_timeout: Duration,
    /// Longest a connection may sit without a request, before its first or between two (it is
    /// closed).
    pub idle_timeout: Duration,
    /// How long requests in flight may finish after a shutdown signal.
    pub grace: Duration,
    /// How MCP requests are authorised: bearer tokens of a file and/or JWTs of an OAuth
    /// authorisation server (none: no authorisation, loopback only).
    pub auth: Option<Arc<Gate>>,
    /// Also serve one session on stdin/stdout (same server, same task runner); the process
    /// stops when that session ends, as a stdio server does.
    pub with_stdio: bool,
    /// Serve the memory browser at `/` (a page that speaks MCP to `/mcp` with the caller's
    /// token).
    pub ui: bool,
    /// Told the bound address once listening (an address of port 0 gets a free port).
    pub listening: Option<std::sync::mpsc::Sender<SocketAddr>>,
}

impl HttpOptions {
    /// Defaults for `addr`.
    pub fn new(addr: SocketAddr) -> HttpOptions {
        HttpOptions {
            addr,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: 32 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            max_in_flight: 256,
            max_in_flight_per_caller: None,
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(30),
            grace: Duration::from_secs(10),
            auth: None,
            with_stdio: false,
            ui: true,
            listening: None,
        }
    }
}

/// Origins of pages served from this machine, any port.
const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// Serves MCP over HTTP until `shutdown` resolves; then stops accepting, lets requests in flight
/// finish within the grace period, and stops the task runner (running task rows are left for
/// the next process to adopt). Logs the endpoint's URL once listening.
pub async fn serve_http(
    engine: Arc<Engine>,
    options: ServerOptions,
    http: HttpOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = listener::bind(http.addr).map_err(|e| {
        Error::invalid(
            "http",
            format!("cannot listen on {}: {e}", http.addr),
            "give a free port, or an address of this machine",
        )
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Internal(format!("the listener has no address: {e}")))?;
    let readiness = Arc::clone(&engine);
    let metrics = Arc::new(Metrics::new()?);
    let scrape = (Arc::clone(&metrics), Arc::clone(&engine));
    let server = MemoryServer::new(engine, options).with_metrics(metrics);
    let tasks = Arc::clone(&server.tasks);
    let stdio_ended = if http.with_stdio {
        let session = tokio::spawn(super::run_stdio(server.clone()));
        futures::future::Either::Left(async move {
            match session.await {
                Ok(Ok(())) => tracing::info!("the stdio session ended; stopping"),
                Ok(Err(e)) => tracing::warn!(error = %e, "the stdio session failed; stopping"),
                Err(e) => tracing::error!(error = %e, "the stdio session panicked; stopping"),
            }
        })
    } else {
        futures::future::Either::Right(std::future::pending::<()>())
    };
    let stopping = CancellationToken::new();
    let sessions = Arc::new(OwnedSessions::default());
    let owners = sessions.owners();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        sessions,
        transport_config(&http, local, stopping.child_token()),
    );
    let admission = Arc::new(Admission::new(&http));
    let body = Arc::new(BodyLimits {
        max_bytes: http.max_body_bytes,
        timeout: http.body_timeout,
    });
    let hosts = Arc::new(allowed_hosts(&http, local));
    // The page's own requests pass rmcp's origin check where `Host` is checked or tokens needed.
    let same_origin = !hosts.is_empty() || http.auth.is_some();
    // `/mcp`'s layers, outermost first: one stack, not route layers (each boxed the route below
    // it, cloned all the way down at every layer of every request); an unknown path is 404.
    let mcp = tower::ServiceBuilder::new()
        .option_layer(
            http.auth
                .clone()
                .map(|gate| axum::middleware::from_fn_with_state(gate, authenticate)),
        )
        .option_layer(same_origin.then(|| axum::middleware::from_fn(super::ui::same_origin)))
        .layer(axum::middleware::from_fn_with_state(owners, owned_session))
        .layer(axum::middleware::from_fn_with_state(admission, admit))
        .layer(axum::middleware::from_fn_with_state(body, read_body))
        .layer(axum::middleware::from_fn(session_ended))
        .service(service);
    let mut app = axum::Router::new().route_service(MCP_PATH, mcp);
    if let Some(oauth) = http.auth.as_ref().and_then(|g| g.oauth.as_ref()) {
        // RFC 9728: at the root, and with the resource's path inserted; never behind a token.
        let doc = oauth.metadata().to_string();
        let serve = move || {
            let doc = doc.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], doc) }
        };
        app = app
            .route(WELL_KNOWN, axum::routing::get(serve.clone()))
            .route(
                &format!("{WELL_KNOWN}{MCP_PATH}"),
                axum::routing::get(serve),
            );
    }
    if http.ui {
        app = app.merge(super::ui::routes());
    }
    let app = app
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(ready).with_state(readiness))
        .route("/metrics", axum::routing::get(scraped).with_state(scrape))
        .layer(axum::middleware::from_fn_with_state(hosts, check_host))
        .layer(axum::middleware::from_fn(log_request));
    let open_files = crate::open_files::raise_to_hard_limit();
    let limits = Limits {
        max_connections: listener::connection_cap(http.max_connections, open_files),
        header_timeout: http.header_timeout,
        idle_timeout: http.idle_timeout,
    };
    if limits.max_connections < http.max_connections {
        tracing::warn!(
            asked = http.max_connections,
            max_connections = limits.max_connections,
            open_files,
            "fewer open connections than asked: the open-files limit is lower"
        );
    }
    tracing::info!(url = %format!("http://{local}{MCP_PATH}"), ui = http.ui, "serving MCP over HTTP");
    if let Some(listening) = &http.listening {
        let _ = listening.send(local);
    }
    tracing::debug!(
        max_connections = limits.max_connections,
        header_timeout_ms = http.header_timeout.as_millis() as u64,
        body_timeout_ms = http.body_timeout.as_millis() as u64,
        idle_timeout_ms = http.idle_timeout.as_millis() as u64,
        max_in_flight = http.max_in_flight,
        "HTTP limits"
    );

    let (signalled, mut on_signal) = tokio::sync::watch::channel(false);
    let stop = stopping.clone();
    let serving = listener::serve(listener, app, limits, async move {
        tokio::select! {
            () = shutdown => {}
            () = stdio_ended => {}
        }
        tracing::info!("shutting down: no new requests; finishing those in flight");
        let _ = signalled.send(true);
        // Ends sessions' streams, which would otherwise hold their connections open.
        stop.cancel();
    });
    let grace = http.grace;
    let outcome = tokio::select! {
        () = serving => Ok(()),
        () = async {
            let _ = on_signal.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(grace_ms = grace.as_millis() as u64, "requests still in flight after the grace period were dropped");
            Ok(())
        }
    };
    // Work still running is stopped and its rows left for the next process to adopt.
    tasks.shutdown();
    outcome
}

/// rmcp's transport settings: hosts and origins admitted, body limit, JSON answers where no
/// stream is needed.
fn transport_config(
    http: &HttpOptions,
    local: SocketAddr,
    stopping: CancellationToken,
) -> StreamableHttpServerConfig {
    let config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_max_request_body_bytes(http.max_body_bytes)
        .with_cancellation_token(stopping)
        .with_allowed_origins(
            LOOPBACK_ORIGINS
                .iter()
                .map(|o| (*o).to_owned())
                .chain(http.allowed_origins.iter().cloned()),
        )
        .enforce_origin_validation();
    let hosts = allowed_hosts(http, local);
    if hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(hosts)
    }
}

/// Changes the indexes may lag the database by and the server still be ready.
pub const READY_MAX_LAG: i64 = 1_000;

/// Readiness: 200 when the database answers and what a search sees (text, vectors) lags it by
/// at most [`READY_MAX_LAG`] changes, else 503; a JSON body says which.
async fn ready(State(engine): State<Arc<Engine>>) -> Response {
    let checked =
        tokio::task::spawn_blocking(move || crate::mcp::metrics::index_lags(&engine)).await;
    let (status, body) = match checked {
        Ok(Ok((text, vector))) => {
            let ready = text.max(vector) <= READY_MAX_LAG;
            (
                if ready {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                },
                serde_json::json!({"ready": ready, "text_index_lag": text, "vector_index_lag": vector}),
            )
        }
        Ok(Err(e)) => {
            // The details (the database's address, its user) are for the log, not for anyone
            // who can reach this unauthenticated endpoint.
            tracing::warn!(error = %e, "not ready");
            let error = if e.is_database_unavailable() {
                "the memory database is unavailable; see the server log"
            } else {
                "the readiness check failed; see the server log"
            };
            (
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"ready": false, "error": error}),
            )
        }
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"ready": false, "error": "the readiness check failed; see the server log"}),
        ),
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// The log target of request lines (`MNEMOGRAPH_LOG=info,mnemograph::http::request=warn`
/// silences them).
const REQUEST_LOG: &str = "mnemograph::http::request";

/// One log line per request on stderr: method, path, status, time to the response head and the
/// token's subject; never a token, a header's value or a body. Probes log at debug.
async fn log_request(request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let subject = response
        .extensions()
        .get::<crate::mcp::auth::Caller>()
        .map_or("-", |c| c.subject.as_str());
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let status = response.status().as_u16();
    if path == MCP_PATH {
        tracing::info!(target: REQUEST_LOG, %method, %path, status, ms, subject, "http request");
    } else {
        tracing::debug!(target: REQUEST_LOG, %method, %path, status, ms, "http request");
    }
    response
}

/// The Prometheus text exposition of the server's metrics.
async fn scraped(State((metrics, engine)): State<(Arc<Metrics>, Arc<Engine>)>) -> Response {
    match tokio::task::spawn_blocking(move || metrics.render(&engine)).await {
        Ok(Ok(text)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            text,
        )
            .into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "metrics could not be read");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be read; see the server log\n",
        )
            .into_response(),
    }
}

/// Lets a request through when it carries a known bearer token, with its [`Caller`] in the
/// request's extensions (rmcp hands them to the handler); 401 with `WWW-Authenticate` otherwise.
///
/// [`Caller`]: crate::mcp::auth::Caller
async fn authenticate(State(gate): State<Arc<Gate>>, mut request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match gate.admit(given).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller.clone());
            let mut response = next.run(request).await;
            // For the request log.
            response.extensions_mut().insert(caller);
            response
        }
        Err(refusal) => {
            let (status, error, text) = match refusal {
                Refusal::Missing => (
                    StatusCode::UNAUTHORIZED,
                    None,
                    match (gate.tokens.is_some(), gate.oauth.is_some()) {
                        (_, false) => {
                            "this server needs a bearer token: send `Authorization: Bearer <token>` with a token its operator made with `mnemograph token add`\n"
                        }
                        (false, true) => {
                            "this server needs a bearer token: send `Authorization: Bearer <token>` with an access token from the authorisation server its protected-resource metadata names\n"
                        }
                        (true, true) => {
                            "this server needs a bearer token: send `Authorization: Bearer <token>` with an access token from the authorisation server its protected-resource metadata names, or a token its operator made with `mnemograph token add`\n"
                        }
                    },
                ),
                Refusal::Invalid => (
                    StatusCode::UNAUTHORIZED,
                    Some("invalid_token"),
                    "the bearer token is not one this server knows or can verify; get a new one\n",
                ),
                Refusal::Expired => (
                    StatusCode::UNAUTHORIZED,
                    Some("invalid_token"),
                    "the access token has expired; get a new one from the authorisation server\n",
                ),
                Refusal::NoScope => (
                    StatusCode::FORBIDDEN,
                    Some("insufficient_scope"),
                    "the access token grants none of the scopes read, write, admin; ask for one that does\n",
                ),
            };
            let mut challenge = r#"Bearer realm="mnemograph""#.to_owned();
            if let Some(e) = error {
                challenge.push_str(&format!(r#", error="{e}""#));
            }
            if let Some(oauth) = &gate.oauth {
                challenge.push_str(&format!(
                    r#", resource_metadata="{}""#,
                    metadata_url(oauth.audience())
                ));
                if refusal == Refusal::NoScope {
                    challenge.push_str(r#", scope="read write admin""#);
                }
            }
            tracing::info!(refused = ?refusal, "request without a valid bearer token");
            let mut response = (status, text).into_response();
            if let Ok(v) = axum::http::HeaderValue::from_str(&challenge) {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
            response
        }
    }
}

/// Where the protected-resource metadata is served, below the root.
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The URL of the protected-resource metadata of `resource` (RFC 9728: the well-known path
/// inserted before the resource's path).
fn metadata_url(resource: &str) -> String {
    match resource.parse::<axum::http::Uri>() {
        Ok(uri) if uri.scheme().is_some() && uri.authority().is_some() => {
            let path = uri.path().trim_end_matches('/');
            format!(
                "{}://{}{WELL_KNOWN}{path}",
                uri.scheme_str().unwrap_or("https"),
                uri.authority().map_or("", |a| a.as_str())
            )
        }
        _ => WELL_KNOWN.to_owned(),
    }
}

/// Answers a session's end (`DELETE /mcp`) with 200 rather than rmcp's 202: the session is
/// gone when the answer is sent, and clients such as the Python SDK take any other status than
/// 200 or 204 as a failed termination.
async fn session_ended(request: Request, next: Next) -> Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// Answers a request naming a 2025-11-25 session another caller opened exactly as one naming an
/// unknown session (404), before rmcp sees it: a session id that leaks does not let another
/// token read its answers, send on it or end it. Ending an unknown session is 404 too (rmcp
/// answers it as if it had ended one).
async fn owned_session(
    State(owners): State<Arc<Owners>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(id) = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        let refused = match owners.whose(id, request.extensions().get::<Caller>()) {
            Whose::Mine => false,
            Whose::Another => {
                tracing::info!("refused a request on a session another caller opened");
                true
            }
            Whose::Unknown => request.method() == Method::DELETE,
        };
        if refused {
            return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
        }
    }
    next.run(request).await
}

/// Whom a share of the request slots is counted for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Who {
    /// A token's subject (all its tokens together).
    Subject(String),
    /// A client address, on a server without tokens.
    Address(IpAddr),
}

/// The limits every MCP request passes: slots in flight, a share of them per caller, the time
/// to an answer.
struct Admission {
    max: usize,
    per_caller: usize,
    timeout: Duration,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: usize,
    by_caller: HashMap<Who, usize>,
}

/// Why a request got no slot.
enum NoSlot {
    /// Every slot is taken (503).
    Full,
    /// Its caller holds its share (429).
    Share,
}

/// A slot held by a request, freed when dropped.
struct Slot {
    admission: Arc<Admission>,
    who: Option<Who>,
}

impl Admission {
    fn new(http: &HttpOptions) -> Admission {
        let max = http.max_in_flight.max(1);
        Admission {
            max,
            per_caller: http
                .max_in_flight_per_caller
                .unwrap_or(max / 2)
                .clamp(1, max),
            timeout: http.request_timeout,
            held: Mutex::new(Held::default()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        // Counters only: consistent whatever panicked while they were held.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn enter(self: &Arc<Self>, who: Option<Who>) -> std::result::Result<Slot, NoSlot> {
        let mut held = self.held();
        if held.total >= self.max {
            return Err(NoSlot::Full);
        }
        if let Some(w) = &who {
            let mine = held.by_caller.entry(w.clone()).or_default();
            if *mine >= self.per_caller {
                return Err(NoSlot::Share);
            }
            *mine += 1;
        }
        held.total += 1;
        Ok(Slot {
            admission: Arc::clone(self),
            who,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.admission.held();
        held.total = held.total.saturating_sub(1);
        if let Some(w) = &self.who
            && let Some(mine) = held.by_caller.get_mut(w)
        {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                held.by_caller.remove(w);
            }
        }
    }
}

/// Admits an MCP request when a slot is free and its caller holds less than its share, and
/// answers 504 when it outlasts the timeout.
async fn admit(State(a): State<Arc<Admission>>, request: Request, next: Next) -> Response {
    let who = match request.extensions().get::<Caller>() {
        Some(c) => Some(Who::Subject(c.subject.clone())),
        None => request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| Who::Address(peer.ip())),
    };
    let _slot = match a.enter(who) {
        Ok(slot) => slot,
        Err(NoSlot::Full) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                "too many requests in flight; retry in a second\n",
            )
                .into_response();
        }
        Err(NoSlot::Share) => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                format!(
                    "this caller has {} requests in flight, the most one caller may have at once; retry in a second\n",
                    a.per_caller
                ),
            )
                .into_response();
        }
    };
    match tokio::time::timeout(a.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "the request was not answered within {} ms; long work runs as a task when the client supports tasks\n",
                a.timeout.as_millis()
            ),
        )
            .into_response(),
    }
}

/// How a request body is read.
struct BodyLimits {
    max_bytes: usize,
    timeout: Duration,
}

/// Why a body was not read.
enum Unread {
    TooLarge,
    Failed(axum::Error),
}

/// Reads a POST body whole, within the body deadline (408) and the size limit (413: at once
/// when its declared length is over, before any of it is read), before rmcp parses it; then
/// answers a body rmcp could not take as a JSON-RPC message with a JSON-RPC error (400)
/// instead of rmcp's plain-text 415.
async fn read_body(
    State(limits): State<Arc<BodyLimits>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_bytes as u64) {
        return too_large(limits.max_bytes);
    }
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(limits.timeout, collect(body, limits.max_bytes)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(Unread::TooLarge)) => return too_large(limits.max_bytes),
        Ok(Err(Unread::Failed(e))) => {
            tracing::debug!(error = %e, "a request body could not be read");
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONNECTION, "close")],
                "the request body could not be read\n",
            )
                .into_response();
        }
        Err(_) => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                [(header::CONNECTION, "close")],
                format!(
                    "the request body did not arrive within {} ms\n",
                    limits.timeout.as_millis()
                ),
            )
                .into_response();
        }
    };
    let json = is_json(&parts.headers);
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    // rmcp answers 415 both for a Content-Type that is not JSON (right, and kept) and for a
    // JSON body it could not parse as a message (a JSON-RPC error here).
    if json && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return not_json_rpc(&bytes);
    }
    response
}

fn too_large(max_bytes: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        [(header::CONNECTION, "close")],
        format!(
            "Payload Too Large: request body exceeds {max_bytes} bytes; send less per call, or import a large data set from a file\n"
        ),
    )
        .into_response()
}

/// A body's bytes, up to `max` of them.
async fn collect(mut body: Body, max: usize) -> std::result::Result<Bytes, Unread> {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(data) = frame.map_err(Unread::Failed)?.into_data() else {
            continue;
        };
        if data.len() > max.saturating_sub(len) {
            return Err(Unread::TooLarge);
        }
        len += data.len();
        chunks.push(data);
    }
    if chunks.len() <= 1 {
        return Ok(chunks.pop().unwrap_or_default());
    }
    let mut whole = Vec::with_capacity(len);
    for c in &chunks {
        whole.extend_from_slice(c);
    }
    Ok(Bytes::from(whole))
}

/// Whether a request says its body is JSON (as rmcp reads `Content-Type`).
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        })
}

/// The JSON-RPC answer to a body that is not a JSON-RPC message: a parse error (-32700) when it
/// is not JSON, an invalid request (-32600, with its id when it has a usable one) otherwise.
fn not_json_rpc(body: &[u8]) -> Response {
    let shape = r#"a request is {"jsonrpc": "2.0", "id": <string or integer>, "method": "…", "params": {…}}"#;
    let (code, id, message) = match serde_json::from_slice::<Value>(body) {
        Err(e) => (
            -32700,
            Value::Null,
            format!(
                "parse error: the body is not valid JSON ({e}); send one JSON-RPC message as UTF-8 JSON"
            ),
        ),
        Ok(v) => {
            let id = v
                .get("id")
                .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
                .cloned()
                .unwrap_or(Value::Null);
            let why = serde_json::from_slice::<ClientJsonRpcMessage>(body)
                .err()
                .map_or_else(String::new, |e| format!(" ({e})"));
            let what = if v.is_array() {
                "a batch (JSON array) is not accepted; send one message per request".to_owned()
            } else {
                format!("the body is JSON but not a JSON-RPC message{why}")
            };
            (-32600, id, format!("invalid request: {what}; {shape}"))
        }
    };
    tracing::debug!(code, "answered a body that is not JSON-RPC");
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            .to_string(),
    )
        .into_response()
}

/// Resolves on SIGINT or SIGTERM (Ctrl-C elsewhere).
pub async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch for SIGTERM; stopping on SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_caller_holds_at_most_its_share_of_the_slots() {
        let mut http = HttpOptions::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        http.max_in_flight = 4;
        let a = Arc::new(Admission::new(&http));
        assert_eq!(a.per_caller, 2);
        let alice = || Some(Who::Subject("alice".into()));
        let first = a.enter(alice()).ok().unwrap();
        let _second = a.enter(alice()).ok().unwrap();
        assert!(matches!(a.enter(alice()), Err(NoSlot::Share)));
        let _bob = a.enter(Some(Who::Subject("bob".into()))).ok().unwrap();
        let _anonymous = a.enter(None).ok().unwrap();
        assert!(matches!(
            a.enter(Some(Who::Subject("carol".into()))),
            Err(NoSlot::Full)
        ));
        drop(first);
        assert!(a.enter(alice()).is_ok());
        http.max_in_flight_per_caller = Some(100);
        assert_eq!(Admission::new(&http).per_caller, 4);
        http.max_in_flight = 1;
        http.max_in_flight_per_caller = None;
        assert_eq!(Admission::new(&http).per_caller, 1);
    }

    #[tokio::test]
    async fn bodies_that_are_not_json_rpc_get_json_rpc_errors() {
        for (body, code, id) in [
            (&b"not json"[..], -32700, Value::Null),
            (br#"{"jsonrpc":"2.0","id":7,"#, -32700, Value::Null),
            (br#"{"hello":"world"}"#, -32600, Value::Null),
            (
                br#"{"jsonrpc":"2.0","id":"x","params":{}}"#,
                -32600,
                json!("x"),
            ),
            (
                br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                -32600,
                Value::Null,
            ),
            (br#"42"#, -32600, Value::Null),
        ] {
            let response = not_json_rpc(body);
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
            let text = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            let v: Value = serde_json::from_slice(&text).unwrap();
            assert_eq!(v["jsonrpc"], "2.0");
            assert_eq!(v["error"]["code"], code, "{v}");
            assert_eq!(v["id"], id, "{v}");
        }
    }
}
