//! Spawning the real `mnemograph serve` binary and talking MCP to it, in both protocol eras.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{
    ArgumentInfo, CallToolRequestParams, CompleteRequestParams, CompleteResult, CompletionContext,
    ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResult, Reference,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_mnemograph");

/// JSON-RPC code of invalid arguments.
pub(crate) const INVALID_PARAMS: i32 = -32602;

/// How a client starts its session with the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// `initialize` / `notifications/initialized`, protocol 2025-11-25.
    Initialize,
    /// `server/discover` and per-request `_meta`, protocol 2026-07-28 (stateless).
    Discover,
}

impl Era {
    /// Both eras, for tests that must pass in each.
    pub(crate) const ALL: [Era; 2] = [Era::Initialize, Era::Discover];

    /// The protocol version a session of this era must end up on.
    pub(crate) fn protocol_version(self) -> ProtocolVersion {
        match self {
            Era::Initialize => ProtocolVersion::V_2025_11_25,
            Era::Discover => ProtocolVersion::V_2026_07_28,
        }
    }
}

/// How the client reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// The server's stdin and stdout.
    Stdio,
    /// Streamable HTTP: `serve --http 127.0.0.1:0`, endpoint `/mcp`.
    Http,
}

/// A `mnemograph serve --http` child: its process and the URL of its MCP endpoint.
pub(crate) struct HttpChild {
    pub(crate) child: tokio::process::Child,
    pub(crate) url: String,
    /// The file its stderr goes to.
    pub(crate) log: PathBuf,
}

impl HttpChild {
    /// Spawns `mnemograph serve --db <db> <extra…> --http 127.0.0.1:0`, stderr to `log`, and
    /// waits until its log names the endpoint it listens on. `db` is a SQLite file's path or a
    /// PostgreSQL URL.
    pub(crate) async fn spawn(db: impl AsRef<OsStr>, extra: &[&str], log: &Path) -> HttpChild {
        let stderr = std::fs::File::create(log).expect("create the server log");
        let child = serve_command(db, extra)
            .args(["--http", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn mnemograph serve --http");
        let url = http_url(log).await;
        HttpChild {
            child,
            url,
            log: log.to_owned(),
        }
    }

    /// [`HttpChild::spawn`] on the SQLite file `db`, logging to the file `log_name` beside it.
    pub(crate) async fn beside(db: &Path, log_name: &str, extra: &[&str]) -> HttpChild {
        HttpChild::spawn(db, extra, &db.with_file_name(log_name)).await
    }

    /// Stops the server as a service manager would (SIGTERM) and waits for it to exit.
    pub(crate) async fn stop(mut self) {
        terminate(&self.child);
        let _ = tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await;
    }

    /// `host:port` the server listens on.
    pub(crate) fn authority(&self) -> &str {
        let rest = self.url.trim_start_matches("http://");
        rest.split('/').next().unwrap_or(rest)
    }
}

/// The URL of the MCP endpoint a server logging to `log` serves, once it logs it (within 60 s).
pub(crate) async fn http_url(log: &Path) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(url) = text
            .lines()
            .filter(|l| l.contains("serving MCP over HTTP"))
            .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("url=")))
        {
            return url.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the HTTP server did not start in 60 s\n{}",
            tail(log)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `mnemograph serve --db <db> <extra…>`, killed when dropped. `db` is a SQLite file's path or
/// a PostgreSQL URL.
pub(crate) fn serve_command(db: impl AsRef<OsStr>, extra: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("serve")
        .arg("--db")
        .arg(db.as_ref())
        .args(extra)
        .kill_on_drop(true);
    cmd
}

/// One HTTP/1.1 request to `authority` (`host:port`, also the `Host` unless `headers` name one)
/// over a plain TCP connection: the status code and the whole answer (head and body). For what
/// an MCP client never sends (foreign origins, oversized bodies, missing tokens).
pub(crate) async fn http_request(
    authority: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect to the server");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {authority}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("send the head");
    // A server may answer (413) before it has read the whole body; the status is what counts.
    let _ = stream.write_all(body).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    (status, text)
}

/// An rmcp client transport to the MCP endpoint at `url`, sending `token` as the bearer token.
pub(crate) fn http_transport(
    url: &str,
    token: Option<&str>,
) -> impl rmcp::transport::Transport<RoleClient> + 'static {
    let mut config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_owned(),
        );
    if let Some(t) = token {
        config = config.auth_header(t.to_owned());
    }
    StreamableHttpClientTransport::from_config(config)
}

/// A scratch folder with the path of a database inside it (not yet created).
pub(crate) struct TestDb {
    _dir: tempfile::TempDir,
    pub(crate) path: PathBuf,
}

impl TestDb {
    pub(crate) fn new() -> TestDb {
        let dir = tempfile::tempdir().expect("create a temp dir");
        let path = dir.path().join("memory.db");
        TestDb { _dir: dir, path }
    }

    /// The tantivy folder of this database: `<db>.index/text`.
    pub(crate) fn text_index_dir(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".index");
        PathBuf::from(p).join("text")
    }

    /// Starts a server on this database.
    pub(crate) async fn serve(&self, era: Era) -> Server {
        Server::start(&self.path, era).await
    }

    /// Starts a server on this database reached over `wire`.
    pub(crate) async fn serve_over(&self, wire: Wire, era: Era) -> Server {
        Server::start_over(&self.path, wire, era).await
    }
}

/// A failed tool call, as the client sees it.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// A JSON-RPC error answer.
    Rpc { code: i32, message: String },
    /// A tool result with `isError: true`; its text content.
    Tool(String),
    /// Anything else (transport closed, timeout, …).
    Other(String),
}

impl CallError {
    pub(crate) fn message(&self) -> &str {
        match self {
            CallError::Rpc { message, .. } => message,
            CallError::Tool(m) | CallError::Other(m) => m,
        }
    }
}

/// One running `mnemograph serve` child with an rmcp client session on it.
pub(crate) struct Server {
    client: RunningService<RoleClient, ()>,
    pub(crate) era: Era,
    log: PathBuf,
    /// The server process when it is reached over HTTP (over stdio the transport owns it).
    pub(crate) http: Option<HttpChild>,
}

/// Opens a client session of `era` on `transport`.
macro_rules! open_session {
    ($transport:expr, $era:expr) => {
        match $era {
            Era::Initialize => ().serve($transport).await,
            Era::Discover => {
                ().serve_with_lifecycle(
                    $transport,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
            }
        }
    };
}

static NEXT_LOG: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Server {
    /// Spawns `mnemograph serve --db <db>` (stderr to a log file beside the database) and opens a
    /// session of `era` over stdio.
    pub(crate) async fn start(db: &Path, era: Era) -> Server {
        Server::start_over(db, Wire::Stdio, era).await
    }

    /// A client session of `era` on the HTTP server at `url` (which logs to `log`), sending
    /// `token` as its bearer token.
    pub(crate) async fn attach(url: &str, era: Era, token: Option<&str>, log: &Path) -> Server {
        let client = match open_session!(http_transport(url, token), era) {
            Ok(c) => c,
            Err(e) => panic!(
                "{era:?} session over HTTP did not start: {e}\n{}",
                tail(log)
            ),
        };
        Server {
            client,
            era,
            log: log.to_owned(),
            http: None,
        }
    }

    /// Like [`Server::start`], reaching the server over `wire`.
    pub(crate) async fn start_over(db: &Path, wire: Wire, era: Era) -> Server {
        Server::start_with(db, wire, era, &[]).await
    }

    /// Like [`Server::start_over`], with more arguments of `serve`.
    pub(crate) async fn start_with(db: &Path, wire: Wire, era: Era, extra: &[&str]) -> Server {
        let n = NEXT_LOG.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = db.with_file_name(format!("server-{}-{n}.log", std::process::id()));
        Server::start_logged(db, wire, era, extra, log).await
    }

    /// Like [`Server::start_with`], with the server's stderr going to `log`; `db` is a SQLite
    /// file's path or a PostgreSQL URL (which has no folder to put a log beside).
    pub(crate) async fn start_logged(
        db: impl AsRef<OsStr>,
        wire: Wire,
        era: Era,
        extra: &[&str],
        log: PathBuf,
    ) -> Server {
        let db = db.as_ref();
        let (client, http) = match wire {
            Wire::Stdio => {
                let stderr = std::fs::File::create(&log).expect("create the server log");
                let (transport, _) = TokioChildProcess::builder(serve_command(db, extra))
                    .stderr(Stdio::from(stderr))
                    .spawn()
                    .expect("spawn mnemograph serve");
                (open_session!(transport, era), None)
            }
            Wire::Http => {
                let http = HttpChild::spawn(db, extra, &log).await;
                let transport = StreamableHttpClientTransport::from_uri(http.url.clone());
                (open_session!(transport, era), Some(http))
            }
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => panic!(
                "{era:?} session over {wire:?} did not start: {e}\n{}",
                tail(&log)
            ),
        };
        let info = client.peer_info().expect("the server described itself");
        assert_eq!(info.protocol_version, era.protocol_version(), "{era:?}");
        assert_eq!(
            info.server_info.as_ref().map(|i| i.name.as_str()),
            Some("mnemograph")
        );
        Server {
            client,
            era,
            log,
            http,
        }
    }

    /// Calls a tool: `Ok(structured content)`, or the error as the client saw it.
    pub(crate) async fn call(&self, tool: &str, args: Value) -> Result<Value, CallError> {
        self.call_within(tool, args, Duration::from_secs(60))
            .await
            .unwrap_or_else(|| panic!("{tool} did not answer in 60 s\n{}", tail(&self.log)))
    }

    /// Like [`Server::call`], but `None` when no answer comes within `limit`.
    pub(crate) async fn call_within(
        &self,
        tool: &str,
        args: Value,
        limit: Duration,
    ) -> Option<Result<Value, CallError>> {
        let Value::Object(args) = args else {
            panic!("tool arguments must be a JSON object");
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        let res = tokio::time::timeout(limit, self.client.call_tool(params))
            .await
            .ok()?;
        Some(Self::outcome(res))
    }

    fn outcome(res: Result<rmcp::model::CallToolResult, ServiceError>) -> Result<Value, CallError> {
        match res {
            Ok(r) if r.is_error == Some(true) => {
                let text = r
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect::<Vec<_>>()
                    .join("\n");
                Err(CallError::Tool(text))
            }
            Ok(r) => Ok(r.structured_content.unwrap_or(Value::Null)),
            Err(ServiceError::McpError(e)) => Err(CallError::Rpc {
                code: e.code.0,
                message: e.message.into_owned(),
            }),
            Err(e) => Err(CallError::Other(e.to_string())),
        }
    }

    /// Calls a tool that must succeed; returns its structured content.
    pub(crate) async fn ok(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args.clone()).await {
            Ok(v) => v,
            Err(e) => panic!(
                "{:?}: {tool} {args} failed: {}\n{e:?}\n{}",
                self.era,
                e.message(),
                tail(&self.log)
            ),
        }
    }

    /// Remembers `memories` (an array of memory objects); asserts every one was stored and
    /// returns their ids in order.
    pub(crate) async fn remember(&self, memories: Value) -> Vec<String> {
        let n = memories.as_array().map_or(0, Vec::len);
        let out = self.ok("remember", json!({ "memories": memories })).await;
        assert_eq!(out["failed"], 0, "{out}");
        assert_eq!(out["ok"], n, "{out}");
        ids_of_results(&out)
    }

    /// Ids of the hits of a recall, in rank order.
    pub(crate) async fn recall_ids(&self, args: Value) -> Vec<String> {
        hit_ids(&self.ok("recall", args).await)
    }

    pub(crate) async fn resource_templates(
        &self,
    ) -> Result<ListResourceTemplatesResult, ServiceError> {
        self.client.list_resource_templates(None).await
    }

    /// `resources/list`, from `cursor` when given.
    pub(crate) async fn list_resources(
        &self,
        cursor: Option<String>,
    ) -> Result<ListResourcesResult, ServiceError> {
        self.client
            .list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
    }

    /// `completion/complete` of `argument` = `value` of the resource template `uri`, with the
    /// arguments already chosen.
    pub(crate) async fn complete(
        &self,
        uri: &str,
        argument: &str,
        value: &str,
        chosen: &[(&str, &str)],
    ) -> Result<CompleteResult, ServiceError> {
        let mut params = CompleteRequestParams::new(
            Reference::for_resource(uri),
            ArgumentInfo::new(argument, value),
        );
        if !chosen.is_empty() {
            params = params.with_context(CompletionContext::with_arguments(
                chosen
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ));
        }
        self.client.complete(params).await
    }

    pub(crate) async fn read_resource(
        &self,
        uri: &str,
    ) -> Result<ReadResourceResult, ServiceError> {
        self.client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
    }

    /// Where the server logs (its stderr).
    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// The server's log (stderr) so far, for failure messages.
    pub(crate) fn log_tail(&self) -> String {
        tail(&self.log)
    }

    /// Ends the session: closes the child's stdin and waits for it to exit (over HTTP: ends
    /// the session, then stops the server as a service manager would, with SIGTERM).
    pub(crate) async fn stop(self) {
        let _ = tokio::time::timeout(Duration::from_secs(20), self.client.cancel()).await;
        if let Some(http) = self.http {
            http.stop().await;
        }
    }
}

/// Sends `signal` (`TERM`, `KILL`, …) to process `pid`; true when it was delivered.
pub(crate) fn send_signal(pid: u32, signal: &str) -> bool {
    std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// Sends SIGTERM to a running child.
pub(crate) fn terminate(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        send_signal(pid, "TERM");
    }
}

/// Ids of a `remember` / `relate` batch answer, in order.
pub(crate) fn ids_of_results(out: &Value) -> Vec<String> {
    out["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["id"].as_str().expect("result id").to_owned())
        .collect()
}

/// Ids of a recall answer's hits, in rank order.
pub(crate) fn hit_ids(out: &Value) -> Vec<String> {
    out["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("recall answer without hits: {out}"))
        .iter()
        .map(|h| h["id"].as_str().expect("hit id").to_owned())
        .collect()
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(30);
    format!("--- server log ---\n{}", lines[from..].join("\n"))
}

/// Runs the binary with raw newline-delimited JSON on stdin (then closes stdin) and returns its
/// stdout once it exits.
pub(crate) async fn raw_session(db: &Path, lines: &[Value], log_level: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .arg("--db")
        .arg(db)
        .env("MNEMOGRAPH_LOG", log_level)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mnemograph serve");
    let mut stdin = child.stdin.take().expect("stdin");
    for line in lines {
        let mut text = serde_json::to_string(line).expect("serialise a message");
        text.push('\n');
        stdin.write_all(text.as_bytes()).await.expect("write stdin");
    }
    stdin.flush().await.expect("flush stdin");
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the server exits once stdin is closed")
        .expect("collect stdout");
    assert!(out.status.success(), "server exited with {}", out.status);
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// 2026-07-28 request `_meta`: protocol version, client info and capabilities (with the tasks
/// extension).
pub(crate) fn modern_meta(client: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1.0"}
    })
}

/// A `mnemograph serve` child spoken to in raw JSON-RPC lines, for what a well-behaved client
/// never sends. Every stdout line must be JSON (checked as it is read).
pub(crate) struct Raw {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    out: tokio::sync::mpsc::UnboundedReceiver<String>,
    stash: std::collections::VecDeque<Value>,
    /// The era of the session once [`Raw::start_session`] ran.
    pub(crate) era: Option<Era>,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
    next_id: i64,
}

impl Raw {
    /// Spawns `mnemograph serve --db <db> <extra…>` in `cwd` (the database's folder by default),
    /// with no session yet.
    pub(crate) fn spawn(db: &Path, extra: &[&str]) -> Raw {
        let dir = db.parent().expect("the database has a folder");
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.arg("serve")
            .arg("--db")
            .arg(db)
            .args(extra)
            .current_dir(dir);
        Raw::spawn_command(cmd)
    }

    /// The process id of the server.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().expect("the server is running")
    }

    /// Spawns `cmd`, which must end up running `mnemograph serve`, with no session yet.
    pub(crate) fn spawn_command(mut cmd: tokio::process::Command) -> Raw {
        use tokio::io::AsyncBufReadExt;
        let log_dir = tempfile::tempdir().expect("a folder for the server log");
        let log = log_dir.path().join("server.log");
        let stderr = std::fs::File::create(&log).expect("create the server log");
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mnemograph serve");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let (tx, out) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Raw {
            child,
            stdin,
            out,
            stash: Default::default(),
            era: None,
            log,
            _log_dir: log_dir,
            next_id: 1_000,
        }
    }

    /// Spawns a server and opens a session of `era` (declaring the tasks extension).
    pub(crate) async fn open(db: &Path, era: Era) -> Raw {
        let mut raw = Raw::spawn(db, &[]);
        raw.start_session(era).await;
        raw
    }

    /// `initialize` (declaring the tasks extension) + `notifications/initialized`, or
    /// `server/discover`.
    pub(crate) async fn start_session(&mut self, era: Era) {
        self.start_session_as(era, true).await;
    }

    /// Like [`Raw::start_session`]; a 2025-11-25 client declares the tasks extension in
    /// `initialize` when `tasks` (a 2026-07-28 one declares it per request, or not).
    pub(crate) async fn start_session_as(&mut self, era: Era, tasks: bool) {
        self.era = Some(era);
        let capabilities = if tasks {
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
        } else {
            json!({})
        };
        let reply = match era {
            Era::Initialize => {
                let r = self
                    .call_raw(
                        "initialize",
                        json!({"protocolVersion": "2025-11-25",
                            "capabilities": capabilities,
                            "clientInfo": {"name": "raw-client", "version": "1.0"}}),
                    )
                    .await;
                self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                    .await;
                r
            }
            Era::Discover => self.call("server/discover", json!({})).await,
        };
        assert!(reply.get("result").is_some(), "{era:?}: {reply}");
    }

    /// Writes `bytes` to the server's stdin as they are.
    pub(crate) async fn write(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(bytes).await.expect("write to the server");
        stdin.flush().await.expect("flush");
    }

    /// Writes one message as a line.
    pub(crate) async fn send(&mut self, msg: &Value) {
        let mut line = serde_json::to_vec(msg).expect("serialise");
        line.push(b'\n');
        self.write(&line).await;
    }

    /// A fresh request id.
    pub(crate) fn next_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// A request of this session's era: `_meta` added to object params in the 2026 era.
    pub(crate) fn request(&mut self, id: Value, method: &str, mut params: Value) -> Value {
        if self.era == Some(Era::Discover)
            && let Value::Object(p) = &mut params
            && !p.contains_key("_meta")
        {
            p.insert("_meta".into(), modern_meta("raw-client"));
        }
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// Sends a request of this session's era and waits for its answer.
    pub(crate) async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id();
        let msg = self.request(json!(id), method, params);
        self.send(&msg).await;
        self.reply(&json!(id)).await
    }

    /// Sends a request exactly as given (plus an id) and waits for its answer.
    async fn call_raw(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.reply(&json!(id)).await
    }

    /// The next message from the server, or `None` when none comes within `limit`.
    pub(crate) async fn next_within(&mut self, limit: Duration) -> Option<Value> {
        if let Some(m) = self.stash.pop_front() {
            return Some(m);
        }
        let line = tokio::time::timeout(limit, self.out.recv()).await.ok()??;
        Some(parse_line(&line))
    }

    /// The answer (result or error) to request `id`; panics after 60 s.
    pub(crate) async fn reply(&mut self, id: &Value) -> Value {
        match self.reply_within(id, Duration::from_secs(60)).await {
            Some(m) => m,
            None => panic!("no answer to request {id} in 60 s\n{}", tail(&self.log)),
        }
    }

    /// The answer to request `id`, or `None` when none comes within `limit`; other messages
    /// read meanwhile are kept for later.
    pub(crate) async fn reply_within(&mut self, id: &Value, limit: Duration) -> Option<Value> {
        if let Some(i) = self.stash.iter().position(|m| is_answer(m, id)) {
            return self.stash.remove(i);
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let line = tokio::time::timeout_at(deadline, self.out.recv())
                .await
                .ok()??;
            let msg = parse_line(&line);
            if is_answer(&msg, id) {
                return Some(msg);
            }
            self.stash.push_back(msg);
        }
    }

    /// The server's log (stderr) so far.
    pub(crate) fn log_tail(&self) -> String {
        tail(&self.log)
    }

    /// The whole server log so far.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Closes stdin and waits for the server to exit; returns the messages not yet read.
    pub(crate) async fn close(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the server exits once stdin is closed")
            .expect("wait for the server");
        assert!(
            status.success(),
            "server exited with {status}\n{}",
            tail(&self.log)
        );
        let mut rest: Vec<Value> = self.stash.drain(..).collect();
        while let Ok(line) = self.out.try_recv() {
            rest.push(parse_line(&line));
        }
        rest
    }
}

/// A stdout line as a JSON-RPC 2.0 message; panics on anything else.
fn parse_line(line: &str) -> Value {
    let msg: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:.300}"));
    assert_eq!(msg["jsonrpc"], "2.0", "not JSON-RPC 2.0: {line:.300}");
    msg
}

/// Whether `msg` answers request `id` (a response or an error carrying that id).
fn is_answer(msg: &Value, id: &Value) -> bool {
    msg.get("method").is_none() && msg.get("id") == Some(id)
}

/// The error code of an answer, if it is an error.
pub(crate) fn error_code(msg: &Value) -> Option<i64> {
    msg["error"]["code"].as_i64()
}
