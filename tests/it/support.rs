//! Spawning the real `mnemograph serve` binary and talking MCP to it, in both protocol eras.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ListResourceTemplatesResult, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResult,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
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
}

static NEXT_LOG: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Server {
    /// Spawns `mnemograph serve --db <db>` (stderr to a log file beside the database) and opens a
    /// session of `era`.
    pub(crate) async fn start(db: &Path, era: Era) -> Server {
        let n = NEXT_LOG.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = db.with_file_name(format!("server-{}-{n}.log", std::process::id()));
        let stderr = std::fs::File::create(&log).expect("create the server log");
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.arg("serve").arg("--db").arg(db).kill_on_drop(true);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn mnemograph serve");
        let client = match era {
            Era::Initialize => ().serve(transport).await,
            Era::Discover => {
                ().serve_with_lifecycle(
                    transport,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
            }
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => panic!("{era:?} session did not start: {e}\n{}", tail(&log)),
        };
        let info = client.peer_info().expect("the server described itself");
        assert_eq!(info.protocol_version, era.protocol_version(), "{era:?}");
        assert_eq!(
            info.server_info.as_ref().map(|i| i.name.as_str()),
            Some("mnemograph")
        );
        Server { client, era, log }
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

    pub(crate) async fn read_resource(
        &self,
        uri: &str,
    ) -> Result<ReadResourceResult, ServiceError> {
        self.client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
    }

    /// The server's log (stderr) so far, for failure messages.
    pub(crate) fn log_tail(&self) -> String {
        tail(&self.log)
    }

    /// Ends the session: closes the child's stdin and waits for it to exit.
    pub(crate) async fn stop(self) {
        let _ = tokio::time::timeout(Duration::from_secs(20), self.client.cancel()).await;
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
