//! The stdio transport in front of rmcp: reads newline-delimited JSON-RPC and answers itself what
//! rmcp would drop or answer without an id — lines over the size limit, text that is not JSON,
//! JSON that is not a JSON-RPC request, params that do not fit a known method, a request id still
//! in use, `ping` in the 2026-07-28 era. Every line out, its own and rmcp's, goes through one writer
//! task, so lines never interleave and stdout carries nothing but JSON-RPC.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, GetMeta, JsonRpcMessage,
    ProtocolVersion, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

/// JSON-RPC error codes the transport answers with.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// Longest id value kept while looking for the id of a line over the size limit.
const MAX_ID_BYTES: usize = 1024;

/// Methods rmcp knows: a request naming one whose params do not fit is `invalid params`.
const KNOWN_METHODS: [&str; 21] = [
    "ping",
    "initialize",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// What the transport and the request handlers share about one connection: the ids of the
/// requests in progress, and whether a session (either era) has begun.
#[derive(Debug, Default)]
pub(crate) struct Session {
    in_flight: Mutex<HashMap<RequestId, InFlight>>,
    started: AtomicBool,
}

#[derive(Debug, Default, Clone, Copy)]
struct InFlight {
    /// The client cancelled it: no answer will be written.
    cancelled: bool,
    /// Its handler has returned.
    handled: bool,
}

impl Session {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, InFlight>> {
        // The map stays consistent whatever panicked while it was held.
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a request; false when its id belongs to a request still in progress.
    fn begin(&self, id: &RequestId) -> bool {
        let mut map = self.map();
        if map.contains_key(id) {
            return false;
        }
        map.insert(id.clone(), InFlight::default());
        true
    }

    /// Its answer is being written: the id is free again.
    fn answered(&self, id: &RequestId) {
        self.map().remove(id);
    }

    /// The client cancelled it (its answer will not be written).
    fn cancelled(&self, id: &RequestId) {
        let mut map = self.map();
        if let Some(f) = map.get_mut(id) {
            if f.handled {
                map.remove(id);
            } else {
                f.cancelled = true;
            }
        }
    }

    /// Its handler returned; `cancelled` when the request was cancelled meanwhile (rmcp drops the
    /// answer then, so nothing else frees the id).
    pub(crate) fn handled(&self, id: &RequestId, cancelled: bool) {
        let mut map = self.map();
        if let Some(f) = map.get_mut(id) {
            if cancelled || f.cancelled {
                map.remove(id);
            } else {
                f.handled = true;
            }
        }
    }

    /// A session began: notifications and responses from the client are now delivered (before,
    /// rmcp would take one for a failed handshake and end the connection).
    pub(crate) fn start(&self) {
        self.started.store(true, Ordering::Release);
    }

    fn has_started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }
}

/// One line for the writer task, with whom to tell when it is written.
struct Line {
    bytes: Vec<u8>,
    written: Option<oneshot::Sender<std::io::Result<()>>>,
}

/// Writes lines in the order they come, each whole.
fn spawn_writer<W>(mut w: W) -> (mpsc::UnboundedSender<Line>, tokio::task::JoinHandle<()>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Line>();
    let task = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            let res = match w.write_all(&line.bytes).await {
                Ok(()) => w.flush().await,
                Err(e) => Err(e),
            };
            let failed = res.is_err();
            if let Err(e) = &res {
                tracing::error!(error = %e, "cannot write to stdout; the client is gone");
            }
            if let Some(done) = line.written {
                let _ = done.send(res);
            }
            if failed {
                break;
            }
        }
    });
    (tx, task)
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotConnected, "stdout is closed")
}

/// The stdio transport of one connection.
pub(crate) struct StdioTransport<R> {
    read: BufReader<R>,
    /// The line being read (kept across cancelled reads).
    line: Vec<u8>,
    /// Skipping the rest of a line over the limit, looking for its id as it goes by.
    oversized: Option<Oversized>,
    max_bytes: usize,
    out: Option<mpsc::UnboundedSender<Line>>,
    writer: Option<tokio::task::JoinHandle<()>>,
    session: std::sync::Arc<Session>,
}

/// What one bounded line read found.
enum Read {
    Line,
    /// Over the limit; the line's id (`null` when it has none this server can echo).
    TooLarge(Value),
    Eof,
    Failed(std::io::Error),
}

/// A line over the limit being skipped.
struct Oversized {
    scan: IdScan,
    /// Its answer went out (its id was found before its end).
    answered: bool,
}

impl<R: AsyncRead + Unpin + Send> StdioTransport<R> {
    /// Reads `read`, writes `write`; lines longer than `max_bytes` (newline excluded) are refused.
    pub(crate) fn new<W>(
        read: R,
        write: W,
        max_bytes: usize,
        session: std::sync::Arc<Session>,
    ) -> StdioTransport<R>
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, writer) = spawn_writer(write);
        StdioTransport {
            read: BufReader::with_capacity(64 * 1024, read),
            line: Vec::new(),
            oversized: None,
            max_bytes,
            out: Some(out),
            writer: Some(writer),
            session,
        }
    }

    /// Reads up to the next newline into `self.line` without letting it grow past the limit.
    /// A line over the limit is skipped without being kept, and answered once its id has gone
    /// by (at once when the id comes first) or, at the latest, at its end. Cancel-safe: bytes
    /// are moved from the reader's buffer with no await between, so a cancelled read resumes
    /// where it stopped.
    async fn read_line(&mut self) -> Read {
        loop {
            let (consumed, outcome) = {
                let available = match self.read.fill_buf().await {
                    Ok(a) => a,
                    Err(e) => return Read::Failed(e),
                };
                if available.is_empty() {
                    // End of input; a last line without its newline still counts.
                    return match self.oversized.take() {
                        Some(o) if !o.answered => Read::TooLarge(o.scan.id()),
                        Some(_) => Read::Eof,
                        None if self.line.is_empty() => Read::Eof,
                        None => Read::Line,
                    };
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                let content = take - usize::from(newline.is_some());
                if let Some(o) = &mut self.oversized {
                    if !o.answered {
                        o.scan.feed(&available[..content]);
                    }
                    let outcome = if newline.is_some() {
                        let unanswered = (!o.answered).then(|| o.scan.id());
                        self.oversized = None;
                        unanswered.map(Read::TooLarge)
                    } else if !o.answered && o.scan.done() {
                        o.answered = true;
                        Some(Read::TooLarge(o.scan.id()))
                    } else {
                        None
                    };
                    (take, outcome)
                } else if self.line.len().saturating_add(content) > self.max_bytes {
                    let mut scan = IdScan::default();
                    scan.feed(&self.line);
                    scan.feed(&available[..content]);
                    // What was kept of the line is freed.
                    self.line = Vec::new();
                    if newline.is_some() {
                        (take, Some(Read::TooLarge(scan.id())))
                    } else {
                        let answered = scan.done();
                        let outcome = answered.then(|| Read::TooLarge(scan.id()));
                        self.oversized = Some(Oversized { scan, answered });
                        (take, outcome)
                    }
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (take, newline.map(|_| Read::Line))
                }
            };
            self.read.consume(consumed);
            if let Some(r) = outcome {
                return r;
            }
        }
    }

    /// Queues a line of the transport's own (an error answer).
    fn reply(&self, msg: Value) {
        let mut bytes = serde_json::to_vec(&msg).expect("a JSON value serialises");
        bytes.push(b'\n');
        if let Some(out) = &self.out {
            let _ = out.send(Line {
                bytes,
                written: None,
            });
        }
    }

    fn refuse(&self, id: Value, code: i64, message: String) {
        tracing::debug!(%id, code, %message, "refused a message");
        self.reply(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        );
    }

    /// What to do with one whole line: a message for rmcp, or `None` when it was answered here
    /// (or is nothing to answer).
    fn take(&self, line: &[u8]) -> Option<ClientJsonRpcMessage> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
            Ok(msg) => self.admit(msg, line),
            Err(e) if e.is_syntax() || e.is_eof() => {
                self.refuse(
                    Value::Null,
                    PARSE_ERROR,
                    format!(
                        "parse error: the line is not valid JSON ({e}). send one JSON-RPC message per line, as UTF-8 JSON"
                    ),
                );
                None
            }
            Err(e) => {
                self.explain(line, &e);
                None
            }
        }
    }

    /// A message that parsed: requests are checked for what rmcp would not catch.
    fn admit(&self, msg: ClientJsonRpcMessage, line: &[u8]) -> Option<ClientJsonRpcMessage> {
        match &msg {
            JsonRpcMessage::Request(req) => {
                let id = req.id.clone().into_json_value();
                if let ClientRequest::CustomRequest(custom) = &req.request
                    && KNOWN_METHODS.contains(&custom.method.as_str())
                {
                    // rmcp takes a known method whose params do not fit as a custom request.
                    let params = serde_json::from_slice::<Value>(line)
                        .ok()
                        .and_then(|mut v| v.get_mut("params").map(Value::take));
                    self.refuse(
                        id,
                        INVALID_PARAMS,
                        params_problem(&custom.method, params.as_ref()),
                    );
                    return None;
                }
                let version = req.request.get_meta().protocol_version();
                let modern = version
                    .as_ref()
                    .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
                if modern && matches!(req.request, ClientRequest::PingRequest(_)) {
                    self.refuse(
                        id,
                        METHOD_NOT_FOUND,
                        "method not found: `ping` is not part of protocol 2026-07-28 (every request stands alone there); send any request, e.g. server/discover, to check that the server answers".into(),
                    );
                    return None;
                }
                if !self.session.begin(&req.id) {
                    self.refuse(
                        id.clone(),
                        INVALID_REQUEST,
                        format!(
                            "request id {id} is in use by a request still in progress; give every request a new id (the first request with this id goes on and will be answered)"
                        ),
                    );
                    return None;
                }
                let opens = match &req.request {
                    ClientRequest::InitializeRequest(_) => true,
                    ClientRequest::DiscoverRequest(_) | ClientRequest::PingRequest(_) => false,
                    other => other
                        .get_meta()
                        .missing_required_keys(&ProtocolVersion::V_2026_07_28)
                        .is_empty(),
                };
                if opens {
                    self.session.start();
                }
                Some(msg)
            }
            JsonRpcMessage::Notification(n) => {
                if !self.session.has_started() {
                    tracing::debug!("ignoring a notification that came before the session");
                    return None;
                }
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.session.cancelled(id);
                }
                Some(msg)
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {
                if self.session.has_started() {
                    Some(msg)
                } else {
                    tracing::debug!("ignoring a response that came before the session");
                    None
                }
            }
        }
    }

    /// Answers JSON that is not a message rmcp takes, with the most precise error that applies.
    fn explain(&self, line: &[u8], e: &serde_json::Error) {
        let v: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                self.refuse(
                    Value::Null,
                    PARSE_ERROR,
                    format!("parse error: the line is not valid JSON ({e}). send one JSON-RPC message per line"),
                );
                return;
            }
        };
        let shape = "a request is {\"jsonrpc\": \"2.0\", \"id\": <string or integer>, \"method\": \"…\", \"params\": {…}}";
        let o = match v {
            Value::Object(o) => o,
            Value::Array(_) => {
                self.refuse(
                    Value::Null,
                    INVALID_REQUEST,
                    "invalid request: a batch (JSON array) is not accepted; send each message on its own line".into(),
                );
                return;
            }
            other => {
                let kind = match other {
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    Value::Bool(_) => "a boolean",
                    _ => "null",
                };
                self.refuse(
                    Value::Null,
                    INVALID_REQUEST,
                    format!("invalid request: the message is {kind}, not an object; {shape}"),
                );
                return;
            }
        };
        let id = o.get("id").filter(|id| is_valid_id(id)).cloned();
        let wire_id = id.clone().unwrap_or(Value::Null);
        match o.get("method") {
            None if o.contains_key("result") || o.contains_key("error") => {
                tracing::debug!(error = %e, "ignoring a malformed response from the client");
            }
            None => self.refuse(
                wire_id,
                INVALID_REQUEST,
                format!("invalid request: it has no `method`; {shape}"),
            ),
            Some(Value::String(_)) if !o.contains_key("id") => {
                tracing::debug!(error = %e, "ignoring a malformed notification");
            }
            Some(Value::String(method)) => {
                let (code, message) = if id.is_none() {
                    (
                        INVALID_REQUEST,
                        format!("invalid request: `id` must be a string or an integer; {shape}"),
                    )
                } else if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
                    (
                        INVALID_REQUEST,
                        format!("invalid request: `jsonrpc` must be \"2.0\"; {shape}"),
                    )
                } else if o.contains_key("result") || o.contains_key("error") {
                    (
                        INVALID_REQUEST,
                        "invalid request: it has a `method` and also a `result` or `error`; send either a request or a response".into(),
                    )
                } else if KNOWN_METHODS.contains(&method.as_str()) {
                    (INVALID_PARAMS, params_problem(method, o.get("params")))
                } else {
                    (
                        METHOD_NOT_FOUND,
                        format!("method not found: `{method}` is not a method of this server"),
                    )
                };
                self.refuse(wire_id, code, message);
            }
            Some(_) => self.refuse(
                wire_id,
                INVALID_REQUEST,
                format!("invalid request: `method` must be a string; {shape}"),
            ),
        }
    }
}

/// A JSON-RPC id this server echoes: a string or an integer.
fn is_valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// Why `params` do not fit `method`, with the path of the offending field where known.
fn params_problem(method: &str, params: Option<&Value>) -> String {
    fn why<T: DeserializeOwned>(params: &Value) -> Option<String> {
        serde_path_to_error::deserialize::<_, T>(params)
            .err()
            .map(|e| {
                let path = e.path().to_string();
                if path == "." {
                    e.into_inner().to_string()
                } else {
                    format!("`{path}`: {}", e.into_inner())
                }
            })
    }
    use rmcp::model as m;
    let hint = match method {
        "tools/call" => "give `name` (a tool from tools/list) and `arguments` (an object)",
        "tasks/get" | "tasks/cancel" => "give `taskId`: the id string of a task handle",
        "tasks/update" => "give `taskId` (the id string of a task handle) and `inputResponses`",
        "resources/read" => "give `uri`, a string like memory://default/m_…",
        _ => "see this method in the MCP schema",
    };
    let detail = match params {
        None => Some("they are missing".to_owned()),
        Some(p) => match method {
            "tools/call" => why::<m::CallToolRequestParams>(p),
            "tasks/get" => why::<m::GetTaskParams>(p),
            "tasks/cancel" => why::<m::CancelTaskParams>(p),
            "tasks/update" => why::<m::UpdateTaskParams>(p),
            "resources/read" => why::<m::ReadResourceRequestParams>(p),
            "initialize" => why::<m::InitializeRequestParams>(p),
            _ => None,
        }
        .or_else(|| (!p.is_object()).then(|| "they are not an object".to_owned())),
    };
    match detail {
        Some(d) => format!("invalid params for `{method}`: {d}. {hint}"),
        None => format!("invalid params for `{method}` (or its `_meta`). {hint}"),
    }
}

/// The answer to a line over the limit, with its id (`null` when it has none to echo).
fn too_large(id: Value, max_bytes: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {
        "code": INVALID_REQUEST,
        "message": format!(
            "message too large: the line is over the limit of {max_bytes} bytes ({} MiB) and was not read. send less per call (split a batch into several calls), or put a large data set in a file and import it with `import` and `source.path`",
            max_bytes / (1024 * 1024)
        ),
    }})
}

/// Finds the top-level `"id"` of a JSON object fed to it in pieces, wherever in the object it
/// comes, without keeping the rest: the answer to a line too large to hold can still carry the
/// id its client is waiting on. Stops at the first top-level `"id"`; anything but an object, or
/// an id that is not a string or an integer, gives `null`.
#[derive(Debug, Default)]
struct IdScan {
    at: Scan,
    /// Bytes fed so far (a byte-order mark is skipped at the start only).
    fed: usize,
    /// The key being read: up to three bytes, enough to tell `id` from the others.
    key: Vec<u8>,
    /// The value being read belongs to the key `id`.
    is_id: bool,
    /// The id's text, while it is being read.
    value: Vec<u8>,
    /// Inside the value: in a string, after a backslash, nesting of objects and arrays.
    in_string: bool,
    escaped: bool,
    depth: usize,
    found: Option<Value>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Before the opening brace.
    #[default]
    Start,
    /// Before a key (or the closing brace).
    Key,
    InKey,
    Colon,
    /// Before a value.
    Value,
    /// In a string, object or array value.
    Nested,
    /// In a number, `true`, `false` or `null`.
    Scalar,
    /// Before a comma or the closing brace.
    After,
    /// Nothing more to learn.
    Done,
}

impl IdScan {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.at == Scan::Done {
                return;
            }
            self.fed += 1;
            self.step(b);
        }
    }

    fn done(&self) -> bool {
        self.at == Scan::Done
    }

    /// The id found, or `null`.
    fn id(&self) -> Value {
        self.found.clone().unwrap_or(Value::Null)
    }

    fn keep(&mut self, b: u8) {
        if self.is_id {
            if self.value.len() < MAX_ID_BYTES {
                self.value.push(b);
            } else {
                // Far too long for an id this server echoes.
                self.at = Scan::Done;
            }
        }
    }

    /// The end of a value: when it was the id's, the scan is over.
    fn end_value(&mut self) {
        if self.is_id {
            self.found = serde_json::from_slice::<Value>(&self.value)
                .ok()
                .filter(is_valid_id);
            self.at = Scan::Done;
        } else {
            self.at = Scan::After;
        }
    }

    fn step(&mut self, b: u8) {
        match self.at {
            Scan::Start => match b {
                0xEF | 0xBB | 0xBF if self.fed <= 3 => {}
                b'{' => self.at = Scan::Key,
                _ if b.is_ascii_whitespace() => {}
                _ => self.at = Scan::Done,
            },
            Scan::Key => match b {
                b'"' => {
                    self.key.clear();
                    self.escaped = false;
                    self.at = Scan::InKey;
                }
                _ if b.is_ascii_whitespace() => {}
                _ => self.at = Scan::Done,
            },
            Scan::InKey => {
                if self.escaped {
                    self.escaped = false;
                    self.key.push(b'\\');
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.is_id = self.key == b"id";
                    self.at = Scan::Colon;
                } else if self.key.len() < 3 {
                    self.key.push(b);
                }
            }
            Scan::Colon => match b {
                b':' => self.at = Scan::Value,
                _ if b.is_ascii_whitespace() => {}
                _ => self.at = Scan::Done,
            },
            Scan::Value => {
                if b.is_ascii_whitespace() {
                    return;
                }
                self.value.clear();
                self.keep(b);
                match b {
                    b'"' => {
                        self.in_string = true;
                        self.escaped = false;
                        self.depth = 0;
                        self.at = Scan::Nested;
                    }
                    b'{' | b'[' => {
                        self.in_string = false;
                        self.depth = 1;
                        self.at = Scan::Nested;
                    }
                    b',' | b'}' | b']' | b':' => self.at = Scan::Done,
                    _ => self.at = Scan::Scalar,
                }
            }
            Scan::Nested => {
                self.keep(b);
                if self.in_string {
                    if self.escaped {
                        self.escaped = false;
                    } else if b == b'\\' {
                        self.escaped = true;
                    } else if b == b'"' {
                        self.in_string = false;
                        if self.depth == 0 {
                            self.end_value();
                        }
                    }
                } else {
                    match b {
                        b'"' => self.in_string = true,
                        b'{' | b'[' => self.depth += 1,
                        b'}' | b']' => {
                            self.depth -= 1;
                            if self.depth == 0 {
                                self.end_value();
                            }
                        }
                        _ => {}
                    }
                }
            }
            Scan::Scalar => {
                if matches!(b, b',' | b'}') || b.is_ascii_whitespace() {
                    self.end_value();
                    if self.at == Scan::After {
                        self.step(b);
                    }
                } else {
                    self.keep(b);
                }
            }
            Scan::After => match b {
                b',' => self.at = Scan::Key,
                _ if b.is_ascii_whitespace() => {}
                _ => self.at = Scan::Done,
            },
            Scan::Done => {}
        }
    }
}

/// The line for a message of rmcp's; an error without an id gets `"id": null` (JSON-RPC 2.0).
fn encode(msg: &ServerJsonRpcMessage) -> std::io::Result<Vec<u8>> {
    let mut bytes = match msg {
        JsonRpcMessage::Error(e) if e.id.is_none() => {
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": null, "error": e.error}))?
        }
        other => serde_json::to_vec(other)?,
    };
    bytes.push(b'\n');
    Ok(bytes)
}

impl<R: AsyncRead + Unpin + Send + 'static> Transport<RoleServer> for StdioTransport<R> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // The id is free before its answer goes out: the client may reuse it once it reads it.
        match &item {
            JsonRpcMessage::Response(r) => self.session.answered(&r.id),
            JsonRpcMessage::Error(e) => {
                if let Some(id) = &e.id {
                    self.session.answered(id);
                }
            }
            _ => {}
        }
        let bytes = encode(&item);
        let out = self.out.clone();
        async move {
            let bytes = bytes?;
            let out = out.ok_or_else(closed)?;
            let (tx, rx) = oneshot::channel();
            out.send(Line {
                bytes,
                written: Some(tx),
            })
            .map_err(|_| closed())?;
            rx.await.map_err(|_| closed())?
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            match self.read_line().await {
                Read::Line => {}
                Read::TooLarge(id) => {
                    tracing::warn!(
                        max_bytes = self.max_bytes,
                        "a message over the size limit was refused"
                    );
                    self.reply(too_large(id, self.max_bytes));
                    continue;
                }
                Read::Eof => return None,
                Read::Failed(e) => {
                    tracing::error!(error = %e, "cannot read stdin; ending the session");
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(msg) = self.take(&line) {
                return Some(msg);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.out.take());
        if let Some(writer) = self.writer.take()
            && tokio::time::timeout(std::time::Duration::from_secs(5), writer)
                .await
                .is_err()
        {
            tracing::warn!("stdout did not take the last answers within 5 s");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id `IdScan` finds in `bytes`, fed at once and fed a byte at a time (the same).
    fn scan_id(bytes: &[u8]) -> Value {
        let mut whole = IdScan::default();
        whole.feed(bytes);
        let mut bytewise = IdScan::default();
        for b in bytes {
            bytewise.feed(std::slice::from_ref(b));
        }
        assert_eq!(
            whole.id(),
            bytewise.id(),
            "{}",
            String::from_utf8_lossy(bytes)
        );
        whole.id()
    }

    #[test]
    fn the_id_of_an_oversized_line_is_found_wherever_it_comes() {
        let cases: [(&[u8], Value); 13] = [
            (
                br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":"xxx"#,
                json!(7),
            ),
            (br#"  {"id" : "abc", "params": {"#, json!("abc")),
            (
                br#"{"jsonrpc":"2.0","method":"x","params":{"id":3,"s":"a\"}"},"id":"real","p":"#,
                json!("real"),
            ),
            (br#"{"params":{"content":"xxxxxxxxxxxxxxxxx"#, Value::Null),
            (br#"{"id":{"nested":1},"x":"#, Value::Null),
            (br#"{"id":1.5,"x":"#, Value::Null),
            (br#"{"id":12"#, Value::Null),
            (br#"[{"id":1}"#, Value::Null),
            (b"\xEF\xBB\xBF{\"id\":-4,\"m\":", json!(-4)),
            // After the bulk: the id its client waits on.
            (
                br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"remember","arguments":{"memories":[{"content":"x\"},{]"}]}},"id":7}"#,
                json!(7),
            ),
            (br#"{"method":"m","params":[1,[2,{"id":9}]], "id" : "late" }"#, json!("late")),
            (br#"{"ids":[1],"idx":2,"i\d":3,"id":4}"#, json!(4)),
            (br#"{"a":true,"b":null,"id":5}"#, json!(5)),
        ];
        for (head, want) in cases {
            assert_eq!(scan_id(head), want, "{}", String::from_utf8_lossy(head));
        }
        let mut long = br#"{"id":""#.to_vec();
        long.resize(4 * MAX_ID_BYTES, b'x');
        long.extend_from_slice(br#"","p":1}"#);
        assert_eq!(scan_id(&long), Value::Null);
    }

    #[test]
    fn params_problems_name_the_field() {
        let m = params_problem("tasks/get", Some(&json!({"taskId": 5})));
        assert!(m.contains("`taskId`") && m.contains("string"), "{m}");
        let m = params_problem("tools/call", Some(&json!({"arguments": {}})));
        assert!(m.contains("name"), "{m}");
        let m = params_problem("tools/list", Some(&json!(5)));
        assert!(m.contains("not an object"), "{m}");
        let m = params_problem("tasks/cancel", None);
        assert!(m.contains("missing"), "{m}");
    }

    #[test]
    fn ids_are_freed_when_answered_or_when_a_cancelled_request_ends() {
        let s = Session::default();
        let id = RequestId::Number(1);
        assert!(s.begin(&id));
        assert!(!s.begin(&id));
        s.handled(&id, false);
        assert!(!s.begin(&id), "handled but not yet answered");
        s.answered(&id);
        assert!(s.begin(&id));
        // Cancelled while running: freed when its handler returns.
        s.cancelled(&id);
        assert!(!s.begin(&id));
        s.handled(&id, false);
        assert!(s.begin(&id));
        // Cancelled after its handler returned (its answer is dropped): freed at once.
        s.handled(&id, false);
        s.cancelled(&id);
        assert!(s.begin(&id));
    }

    #[tokio::test]
    async fn lines_are_read_whole_and_oversized_ones_refused() {
        let input = b"{\"a\":1}\r\n0123456789ABCDEF\n{\"b\":2}".to_vec();
        let (w, mut r) = tokio::io::duplex(1 << 16);
        let mut t = StdioTransport::new(&input[..], w, 12, std::sync::Arc::new(Session::default()));
        assert!(matches!(t.read_line().await, Read::Line));
        assert_eq!(t.line, b"{\"a\":1}\r\n");
        t.line.clear();
        assert!(matches!(t.read_line().await, Read::TooLarge(Value::Null)));
        assert!(matches!(t.read_line().await, Read::Line));
        assert_eq!(t.line, b"{\"b\":2}");
        t.line.clear();
        assert!(matches!(t.read_line().await, Read::Eof));
        drop(t);
        let mut out = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut r, &mut out)
            .await
            .unwrap();
        assert!(out.is_empty());
    }

    #[tokio::test]
    async fn an_oversized_line_is_answered_with_the_id_that_follows_its_bulk() {
        let input = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"a":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},"id":7}
{"id":8,"p":"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"}
{"b":2}
{"id":"eof","p":"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"#
            .to_vec();
        let (w, _r) = tokio::io::duplex(1 << 16);
        let mut t = StdioTransport::new(&input[..], w, 12, std::sync::Arc::new(Session::default()));
        assert!(matches!(t.read_line().await, Read::TooLarge(id) if id == json!(7)));
        assert!(matches!(t.read_line().await, Read::TooLarge(id) if id == json!(8)));
        assert!(matches!(t.read_line().await, Read::Line));
        assert_eq!(t.line, b"{\"b\":2}\n");
        t.line.clear();
        assert!(matches!(t.read_line().await, Read::TooLarge(id) if id == json!("eof")));
        assert!(matches!(t.read_line().await, Read::Eof));
    }
}
