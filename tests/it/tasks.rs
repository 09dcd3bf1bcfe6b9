//! Long work as MCP tasks, over stdio and Streamable HTTP against the real binary: the per-call
//! inline/task decision, nodes-visited progress, cancellation, restart, owner isolation, clients
//! without tasks, and tasks shared by two HTTP servers on one database.
//!
//! The graph: 200,000 memories and 1,000,000 relations, built once per run through the library
//! (the fixture is not what is tested) and shared by every test here; each test runs its own
//! server processes on it.
//!
//! Size: one test per task behaviour over the real binary, sharing the client helpers at the top.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mnemograph::engine::{RelateItem, RememberItem};
use mnemograph::{Config, Engine};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, GetTaskResult, Implementation, NumberOrString, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, RequestMetaObject, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::{BIN, Era, HttpChild, Raw, Wire, http_transport, terminate};

/// `n` with thousands separators, as status messages show it.
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

const MEMORIES: usize = 200_000;
const RELATIONS: usize = 1_000_000;
const BATCH: usize = 10_000;
/// Bumped when the fixture's recipe changes.
const FIXTURE_VERSION: u32 = 1;

/// Words the fixture's memories are made of (every memory has two of them and its number).
const WORDS: [&str; 16] = [
    "deploy", "billing", "alice", "atlas", "staging", "invoice", "kyoto", "tea", "garden", "rust",
    "sqlite", "graph", "memory", "agent", "recall", "task",
];

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The shared fixture database, built on first use under the target folder and reused by later
/// runs while `FIXTURE_VERSION` is unchanged.
fn fixture() -> &'static Path {
    static DB: OnceLock<PathBuf> = OnceLock::new();
    DB.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("graph-fixture-v{FIXTURE_VERSION}"));
        let db = dir.join("graph.db");
        let done = dir.join("complete");
        if done.exists() {
            return db;
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fixture dir");
        build(&db);
        std::fs::write(&done, b"ok").expect("mark fixture complete");
        db
    })
}

fn build(db: &Path) {
    let engine = Engine::open(Config::for_db(db)).expect("open fixture db");
    let mut ids = Vec::with_capacity(MEMORIES);
    for start in (0..MEMORIES).step_by(BATCH) {
        let items: Vec<RememberItem> = (start..start + BATCH)
            .map(|i| RememberItem {
                content: format!(
                    "node {i} about {} and {}",
                    WORDS[i % 16],
                    WORDS[(i / 16) % 16]
                ),
                name: (i < 100).then(|| format!("n{i}")),
                namespace: Some("graph".into()),
                ..RememberItem::default()
            })
            .collect();
        for r in engine.remember(&items).expect("remember") {
            ids.push(r.expect("fixture memory").id);
        }
    }
    // Each node links to 5 others: two near it (a chain and a ring of neighbours) and three random
    // ones, so walks fan out fast and every node is reachable.
    let mut rng = 42u64;
    let mut items = Vec::with_capacity(BATCH);
    let mut n = 0;
    'outer: for i in 0..MEMORIES {
        for j in 0..5 {
            let to = match j {
                0 => (i + 1) % MEMORIES,
                1 => (i + 7) % MEMORIES,
                _ => (splitmix(&mut rng) % MEMORIES as u64) as usize,
            };
            if to == i {
                continue;
            }
            items.push(RelateItem {
                from: ids[i].clone(),
                to: ids[to].clone(),
                kind: if j < 2 { "next".into() } else { "about".into() },
                weight: Some(0.5 + (splitmix(&mut rng) % 50) as f64 / 100.0),
                metadata: None,
                namespace: Some("graph".into()),
            });
            n += 1;
            if items.len() == BATCH {
                engine.relate(&items).expect("relate");
                items.clear();
            }
            if n == RELATIONS {
                break 'outer;
            }
        }
    }
    engine.relate(&items).expect("relate");
    engine.sync_text().expect("index the fixture");
}

/// The progress notifications a client received: `progress` and `total`.
type ProgressLog = Arc<Mutex<Vec<(f64, Option<f64>)>>>;

/// A client that records progress notifications and may declare the tasks extension.
#[derive(Clone, Default)]
struct Recorder {
    tasks: bool,
    /// Declares forms (elicitation) and its own model (sampling), which a task's questions use.
    answers: bool,
    name: String,
    progress: ProgressLog,
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let mut caps = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        if self.answers {
            caps.elicitation = serde_json::from_value(json!({"form": {}})).ok();
            caps.sampling = serde_json::from_value(json!({})).ok();
        }
        ClientConfig::new(caps, Implementation::new(self.name.clone(), "1.0"))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.progress
            .lock()
            .expect("progress log")
            .push((params.progress, params.total));
    }
}

pub(crate) struct Client {
    service: RunningService<RoleClient, Recorder>,
    progress: ProgressLog,
    /// The server's process id.
    pub(crate) pid: u32,
    /// The server process when it is reached over HTTP.
    http: Option<HttpChild>,
}

pub(crate) async fn connect(
    db: &Path,
    modern: bool,
    tasks: bool,
    name: &str,
    extra: &[&str],
) -> Client {
    spawn_client(db, modern, tasks, name, extra, std::process::Stdio::null()).await
}

/// A 2026-07-28 client with the tasks extension, like [`connect`], whose server logs to `log`.
pub(crate) async fn connect_logged(
    db: impl AsRef<OsStr>,
    name: &str,
    extra: &[&str],
    log: &Path,
) -> Client {
    let file = std::fs::File::create(log).expect("create the server log");
    spawn_client(db, true, true, name, extra, file.into()).await
}

/// Opens a session of the recorder on `transport`: 2026-07-28 when `modern`, else `initialize`.
macro_rules! open_session {
    ($recorder:expr, $transport:expr, $modern:expr) => {
        if $modern {
            $recorder
                .serve_with_lifecycle(
                    $transport,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
        } else {
            $recorder.serve($transport).await
        }
        .expect("session")
    };
}

fn recorder(tasks: bool, name: &str) -> Recorder {
    Recorder {
        tasks,
        answers: false,
        name: name.into(),
        progress: Arc::default(),
    }
}

/// A 2026-07-28 client with the tasks extension that also declares forms and sampling, so a
/// task may ask it questions.
pub(crate) async fn connect_answering(db: &Path, name: &str, extra: &[&str]) -> Client {
    let recorder = Recorder {
        answers: true,
        ..recorder(true, name)
    };
    spawn_with(db, true, recorder, extra, std::process::Stdio::null()).await
}

async fn spawn_client(
    db: impl AsRef<OsStr>,
    modern: bool,
    tasks: bool,
    name: &str,
    extra: &[&str],
    stderr: std::process::Stdio,
) -> Client {
    spawn_with(db, modern, recorder(tasks, name), extra, stderr).await
}

/// A server on `db` and a session of `recorder` with it (2026-07-28 when `modern`).
async fn spawn_with(
    db: impl AsRef<OsStr>,
    modern: bool,
    recorder: Recorder,
    extra: &[&str],
    stderr: std::process::Stdio,
) -> Client {
    let (transport, _) = TokioChildProcess::builder(crate::support::serve_command(db, extra))
        .stderr(stderr)
        .spawn()
        .expect("spawn server");
    let pid = transport.id().expect("the server runs");
    let progress = Arc::clone(&recorder.progress);
    let service = open_session!(recorder, transport, modern);
    Client {
        service,
        progress,
        pid,
        http: None,
    }
}

/// A client like [`connect`] of a server reached over Streamable HTTP, logging to `log`; tasks
/// are declared when `modern`.
pub(crate) async fn connect_http(
    db: &Path,
    modern: bool,
    name: &str,
    extra: &[&str],
    log: &Path,
) -> Client {
    let http = HttpChild::spawn(db, extra, log).await;
    let pid = http.child.id().expect("the server runs");
    let mut c = http_client(&http.url, pid, modern, name).await;
    c.http = Some(http);
    c
}

/// Another client of the HTTP server at `url` (process `pid`), which it does not own.
async fn http_client(url: &str, pid: u32, modern: bool, name: &str) -> Client {
    http_client_with(url, pid, modern, name, None).await
}

/// Like [`http_client`], sending `token` as the bearer token.
pub(crate) async fn http_client_with(
    url: &str,
    pid: u32,
    modern: bool,
    name: &str,
    token: Option<&str>,
) -> Client {
    let recorder = recorder(modern, name);
    let progress = Arc::clone(&recorder.progress);
    let service = open_session!(recorder, http_transport(url, token), modern);
    Client {
        service,
        progress,
        pid,
        http: None,
    }
}

impl Client {
    pub(crate) async fn call(
        &self,
        tool: &str,
        args: Value,
        progress_token: Option<i64>,
    ) -> Result<CallToolResponse, ServiceError> {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        if let Some(t) = progress_token {
            let mut meta = RequestMetaObject::default();
            meta.set_progress_token(ProgressToken(NumberOrString::Number(t)));
            params.meta = Some(meta);
        }
        self.service.call_tool_once(params).await
    }

    /// `tools/call` with `meta` as the request's `_meta`.
    pub(crate) async fn call_meta(
        &self,
        tool: &str,
        args: Value,
        meta: Value,
    ) -> Result<CallToolResponse, ServiceError> {
        let (Value::Object(args), Value::Object(meta)) = (args, meta) else {
            panic!("args and meta must be objects")
        };
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        let mut m = RequestMetaObject::default();
        m.0.0.extend(meta);
        params.meta = Some(m);
        self.service.call_tool_once(params).await
    }

    /// `resources/read` of `uri`.
    pub(crate) async fn read(
        &self,
        uri: &str,
    ) -> Result<rmcp::model::ReadResourceResult, ServiceError> {
        self.service
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
    }

    pub(crate) async fn get(&self, id: &str) -> Result<GetTaskResult, ServiceError> {
        self.service.get_task(GetTaskParams::new(id)).await
    }

    /// Every resource `resources/list` gives, page after page.
    pub(crate) async fn all_resources(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .service
                .list_resources(Some(
                    rmcp::model::PaginatedRequestParams::default().with_cursor(cursor),
                ))
                .await
                .expect("resources/list");
            out.extend(page.resources.into_iter().map(|r| r.uri));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return out,
            }
        }
    }

    /// Whether `resources/read` of `uri` answers.
    pub(crate) async fn can_read(&self, uri: &str) -> bool {
        self.service
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
            .is_ok()
    }

    /// The namespaces `completion/complete` offers for `prefix`.
    pub(crate) async fn complete_namespace(&self, prefix: &str) -> Vec<String> {
        self.service
            .complete(rmcp::model::CompleteRequestParams::new(
                rmcp::model::Reference::for_resource("memory://{namespace}/{id}"),
                rmcp::model::ArgumentInfo::new("namespace", prefix),
            ))
            .await
            .expect("completion/complete")
            .completion
            .values
    }

    /// `tasks/update` of task `id` with `answers` (key → the response to that request).
    pub(crate) async fn answer(&self, id: &str, answers: Value) -> Result<(), ServiceError> {
        let Value::Object(answers) = answers else {
            panic!("answers must be an object")
        };
        self.service
            .update_task(UpdateTaskParams::new(
                id.to_owned(),
                rmcp::model::InputResponses::from_iter(answers),
            ))
            .await
    }

    /// `tasks/cancel` of task `id`.
    pub(crate) async fn cancel(&self, id: &str) -> Result<(), ServiceError> {
        self.service
            .cancel_task(CancelTaskParams::new(id))
            .await
            .map(drop)
    }

    /// Ends the session: closes the server's stdin and waits for it to exit (over HTTP: then
    /// stops the server with SIGTERM).
    pub(crate) async fn stop(self) {
        let _ = tokio::time::timeout(Duration::from_secs(20), self.service.cancel()).await;
        if let Some(http) = self.http {
            http.stop().await;
        }
    }
}

pub(crate) fn rpc_code(e: &ServiceError) -> Option<i32> {
    match e {
        ServiceError::McpError(e) => Some(e.code.0),
        _ => None,
    }
}

/// A walk whose work takes seconds: every memory within 7 hops (nearly all 200,000) is scored
/// against a focus text.
fn deep_walk() -> Value {
    json!({"names": ["n1"], "namespace": "graph", "depth": 7, "direction": "both", "max_nodes": 1_000_000, "focus": "billing invoice tea", "limit": 20})
}

/// Work done so far: nodes the walk visited plus memories scored against the focus.
fn visited(t: &GetTaskResult) -> u64 {
    let p = t.meta.as_ref().and_then(|m| m.0.get("mnemograph/progress"));
    let n = |k: &str| p.and_then(|p| p[k].as_u64()).unwrap_or(0);
    n("visited") + n("done")
}

/// Starts [`deep_walk`] on `c`, which must hand it back as a task; the task's id.
async fn start_deep_walk(c: &Client) -> String {
    match c.call("traverse", deep_walk(), None).await.expect("call") {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("a deep focused walk must become a task: {other:?}"),
    }
}

/// Polls task `id` until it is cancelled, asserting it stays working until then and is
/// cancelled within `limit` of `asked`.
async fn wait_cancelled(c: &Client, id: &str, asked: Instant, limit: Duration) {
    loop {
        let t = c.get(id).await.expect("tasks/get");
        if t.task.task.status == TaskStatus::Cancelled {
            return;
        }
        assert_eq!(t.task.task.status, TaskStatus::Working);
        assert!(
            asked.elapsed() < limit,
            "cancelled within {limit:?}: {:?}",
            asked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub(crate) async fn poll_until_terminal(
    c: &Client,
    id: &str,
    limit: Duration,
) -> (GetTaskResult, Vec<u64>) {
    let (done, polls) = follow(c, id, limit, Duration::from_secs(10)).await;
    (done, polls.iter().map(|p| p.work).collect())
}

/// One look at a working task.
#[derive(Debug, Clone)]
pub(crate) struct Poll {
    /// Work done by the kind's own counters (nodes visited plus memories scored, …).
    pub(crate) work: u64,
    /// The `progress`/`progressTotal` pair of `_meta`.
    pub(crate) pair: (u64, u64),
    /// The poll interval advised.
    pub(crate) interval_ms: u64,
}

/// Polls task `id` as its advice says (but at least every `most`) until it ends (at most
/// `limit`): the end, and every look at it while it worked.
pub(crate) async fn follow(
    c: &Client,
    id: &str,
    limit: Duration,
    most: Duration,
) -> (GetTaskResult, Vec<Poll>) {
    let deadline = Instant::now() + limit;
    let mut polls = Vec::new();
    loop {
        let t = c.get(id).await.expect("tasks/get");
        if t.task.task.status != TaskStatus::Working {
            return (t, polls);
        }
        let p = t.meta.as_ref().and_then(|m| m.0.get("mnemograph/progress"));
        let n = |k: &str| p.and_then(|p| p[k].as_u64()).unwrap_or(0);
        let interval_ms = t
            .task
            .task
            .poll_interval_ms
            .expect("a working task says when to look again");
        polls.push(Poll {
            work: visited(&t),
            pair: (n("progress"), n("progressTotal")),
            interval_ms,
        });
        assert!(
            Instant::now() < deadline,
            "task still working after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(interval_ms).min(most)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_walk_becomes_a_task_with_growing_progress_and_survives_restart() {
    for wire in [Wire::Stdio, Wire::Http] {
        deep_walk_task(wire).await;
    }
}

/// A 2026-07-28 client with the tasks extension of a new server on `db` reached over `wire`
/// (logging into `logs` over HTTP).
async fn connect_over(wire: Wire, db: &Path, name: &str, logs: &Path) -> Client {
    match wire {
        Wire::Stdio => connect(db, true, true, name, &[]).await,
        Wire::Http => {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let log = logs.join(format!("{name}-{n}.log"));
            connect_http(db, true, name, &[], &log).await
        }
    }
}

/// A second client, of another owner: of a new process over stdio, of the same server as
/// `c` over HTTP.
async fn another_client(wire: Wire, db: &Path, c: &Client, name: &str) -> Client {
    match (wire, &c.http) {
        (Wire::Http, Some(http)) => http_client(&http.url, c.pid, true, name).await,
        _ => connect(db, true, true, name, &[]).await,
    }
}

async fn deep_walk_task(wire: Wire) {
    let db = fixture();
    let logs = tempfile::tempdir().expect("a folder for logs");
    let c = connect_over(wire, db, "agent-a", logs.path()).await;
    let started = Instant::now();
    let CallToolResponse::Task(created) =
        c.call("traverse", deep_walk(), None).await.expect("call")
    else {
        panic!("a deep focused walk must become a task");
    };
    // The handle comes back while the walk still runs (the status below), even on a fresh server
    // whose graph is still loading (the task waits for it); the bound only catches a call that
    // waited for the whole walk, with room for a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the handle comes back without waiting for the walk: {:?}",
        started.elapsed()
    );
    let id = created.task.task_id.clone();
    assert_eq!(created.task.status, TaskStatus::Working);
    let decision = created
        .meta
        .as_ref()
        .and_then(|m| m.0.get("mnemograph/decision"))
        .expect("decision in _meta");
    assert_eq!(decision["plan"], "task", "{decision}");
    // Looked at more often than advised, to see the progress move.
    let (done, polls) = follow(
        &c,
        &id,
        Duration::from_secs(120),
        Duration::from_millis(100),
    )
    .await;
    let counts: Vec<u64> = polls.iter().map(|p| p.work).collect();
    // One pair a host draws as a bar: it never goes back, never passes its total, and ends full.
    let pairs: Vec<(u64, u64)> = polls.iter().map(|p| p.pair).collect();
    assert!(pairs.iter().all(|&(p, t)| p <= t), "{pairs:?}");
    assert!(pairs.iter().any(|&(p, _)| p > 0), "{pairs:?}");
    assert!(pairs.windows(2).all(|w| w[1].0 >= w[0].0), "{pairs:?}");
    let end = &done.meta.as_ref().expect("_meta")["mnemograph/progress"];
    assert_eq!(end["progress"], end["progressTotal"], "{end}");
    // The advice follows the work: between its floor and ceiling, and not one look per 250 ms.
    assert!(
        polls
            .iter()
            .all(|p| (100..=10_000).contains(&p.interval_ms)),
        "{polls:?}"
    );
    // Zero while a fresh server loads the graph (the task waits for it), then growing.
    let walking: Vec<u64> = counts.iter().copied().skip_while(|&n| n == 0).collect();
    assert!(walking.len() >= 2, "polled while working: {counts:?}");
    assert!(
        walking.windows(2).all(|w| w[1] > w[0]),
        "work done (nodes visited, then memories scored) strictly increases: {counts:?}"
    );
    assert_eq!(done.task.task.status, TaskStatus::Completed);
    let result = serde_json::to_value(&done).expect("the result holds it");
    let nodes = result["result"]["structuredContent"]["nodes"]
        .as_array()
        .expect("nodes in the result")
        .len();
    assert_eq!(nodes, 20);
    let reached = result["result"]["structuredContent"]["reached"]
        .as_u64()
        .expect("the result holds it");
    assert!(reached > 50_000, "reached {reached}");
    // The walk and the scoring are counted apart: no node is counted twice.
    let walked = result["result"]["structuredContent"]["visited"]
        .as_u64()
        .expect("the result holds it");
    assert!(walked <= reached, "visited {walked} of {reached} reached");
    let progress = &done.meta.as_ref().expect("the result holds it").0["mnemograph/progress"];
    assert_eq!(progress["visited"].as_u64(), Some(walked), "{progress}");
    assert_eq!(progress["done"].as_u64(), Some(reached), "{progress}");
    let message = done.task.task.status_message.clone().unwrap_or_default();
    assert!(
        message.contains(&format!("visited {} nodes", group(walked))),
        "{message}"
    );
    assert!(
        message.contains(&format!("scored {0} / {0}", group(reached))),
        "{message}"
    );

    // The tasks tool lists it.
    let CallToolResponse::Complete(listed) = c
        .call("tasks", json!({}), None)
        .await
        .expect("the result holds it")
    else {
        panic!()
    };
    assert!(
        listed.structured_content.expect("the result holds it")["tasks"]
            .as_array()
            .expect("the result holds it")
            .iter()
            .any(|t| t["taskId"] == id.as_str())
    );

    // A restarted server still returns the completed result; another client does not see it.
    c.stop().await;
    let c = connect_over(wire, db, "agent-a", logs.path()).await;
    let again = c.get(&id).await.expect("tasks/get after restart");
    assert_eq!(again.task.task.status, TaskStatus::Completed, "{wire:?}");
    assert_eq!(
        serde_json::to_value(&again).expect("the result holds it")["result"],
        result["result"]
    );
    let other = another_client(wire, db, &c, "agent-b").await;
    let err = other.get(&id).await.expect_err("foreign task");
    assert_eq!(rpc_code(&err), Some(-32602));
    let err = c
        .get("00000000000000000000000000000000")
        .await
        .expect_err("unknown task");
    assert_eq!(rpc_code(&err), Some(-32602));
    let err = other
        .service
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect_err("foreign cancel");
    assert_eq!(rpc_code(&err), Some(-32602));
    // Answers for a task are taken from its owner only; a finished task waits for none, so the
    // owner's are acknowledged and change nothing.
    let answers =
        || rmcp::model::InputResponses::from([("confirm".to_owned(), json!({"action": "accept"}))]);
    let err = other
        .service
        .update_task(UpdateTaskParams::new(id.clone(), answers()))
        .await
        .expect_err("foreign update");
    assert_eq!(rpc_code(&err), Some(-32602));
    c.service
        .update_task(UpdateTaskParams::new(id.clone(), answers()))
        .await
        .expect("the owner's update is acknowledged");
    let after = c.get(&id).await.expect("tasks/get after the update");
    assert_eq!(after.task.task.status, TaskStatus::Completed);
    assert_eq!(
        serde_json::to_value(&after).expect("the result holds it")["result"],
        result["result"]
    );
    other.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shallow_lookup_is_inline() {
    let c = connect(fixture(), true, true, "agent-a", &[]).await;
    // While a fresh server loads its million relations, a graph call may become a task (the
    // task waits for the graph, not the caller); once loaded, a shallow lookup is inline.
    let warm = c
        .call(
            "traverse",
            json!({"names": ["n2"], "namespace": "graph", "depth": 1}),
            None,
        )
        .await
        .unwrap();
    if let CallToolResponse::Task(t) = warm {
        poll_until_terminal(&c, &t.task.task_id, Duration::from_secs(120)).await;
    }
    let CallToolResponse::Complete(r) = c
        .call(
            "traverse",
            json!({"names": ["n2"], "namespace": "graph", "depth": 1}),
            None,
        )
        .await
        .unwrap()
    else {
        panic!("a depth-1 lookup is answered inline");
    };
    let out = r.structured_content.unwrap();
    assert!(out["reached"].as_u64().unwrap() >= 6, "{out}");
    assert_eq!(r.meta.unwrap().0["mnemograph/decision"]["plan"], "inline");
    let CallToolResponse::Complete(p) = c
        .call(
            "find_paths",
            json!({"from": "n1", "to": "n3", "namespace": "graph", "k": 2, "max_hops": 3}),
            None,
        )
        .await
        .unwrap()
    else {
        panic!("a short path search is answered inline");
    };
    assert!(
        !p.structured_content.unwrap()["paths"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_tasks_get_bounded_inline_answers_with_progress() {
    let db = fixture();
    for (modern, tasks) in [(false, false), (true, false)] {
        let c = connect(db, modern, tasks, "plain", &[]).await;
        let CallToolResponse::Complete(r) = c.call("traverse", deep_walk(), Some(7)).await.unwrap()
        else {
            panic!("modern={modern} tasks={tasks}: no task for this client");
        };
        let out = r.structured_content.unwrap();
        assert_eq!(out["truncated"], true, "{out}");
        // What helps this client: max_nodes is capped for it, so raising it does not.
        let hint = out["hint"].as_str().unwrap();
        assert!(hint.contains("narrow") && hint.contains("depth"), "{out}");
        assert!(hint.contains("tasks"), "{out}");
        assert!(!hint.contains("raise max_nodes"), "{out}");
        assert!(out["reached"].as_u64().unwrap() <= 10_000);
        // The client hands notifications to its handler on its own schedule, so only their
        // arrival is checked here; their order against the response is checked on the wire below.
        let deadline = Instant::now() + Duration::from_secs(2);
        while c.progress.lock().expect("progress log").is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let seen = c.progress.lock().expect("progress log").clone();
        assert!(
            !seen.is_empty(),
            "modern={modern}: progress notifications were sent"
        );
        assert!(seen.windows(2).all(|w| w[1].0 >= w[0].0));
        // Each says of how much: a host can draw a bar.
        assert!(
            seen.iter().all(|&(p, t)| t.is_some_and(|t| t >= p)),
            "{seen:?}"
        );
    }
}

/// A 2025-11-25 client that declared the tasks extension in `initialize` gets a task, polls it to
/// its end and reads its result: both eras tell the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_client_that_declared_tasks_gets_a_task() {
    let c = connect(fixture(), false, true, "agent-2025", &[]).await;
    let CallToolResponse::Task(created) = c.call("traverse", deep_walk(), None).await.unwrap()
    else {
        panic!("a deep walk of a client that declared tasks is a task, whatever its era");
    };
    let (done, _) = poll_until_terminal(&c, &created.task.task_id, Duration::from_secs(120)).await;
    assert_eq!(done.task.task.status, TaskStatus::Completed);
    let result = serde_json::to_value(&done).expect("serialise");
    let out = &result["result"]["structuredContent"];
    assert_eq!(out["nodes"].as_array().map(Vec::len), Some(20), "{out}");
    assert!(out.get("truncated").is_none_or(|t| t == false), "{out}");
    assert!(
        out.get("hint").is_none(),
        "no hint to do what it does: {out}"
    );
    c.stop().await;
}

/// On the wire: every progress notification of an inline call comes before its response, and
/// none after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_all_precede_the_response_on_the_wire() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .arg("--db")
        .arg(fixture())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut call =
        json!({"name": "traverse", "arguments": deep_walk(), "_meta": {"progressToken": "p1"}});
    call["arguments"]["max_nodes"] = json!(10_000);
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "wire", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}),
    ] {
        stdin
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .expect("write");
    }
    stdin.flush().await.expect("flush");
    let mut before = 0;
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("an answer in time")
            .expect("read")
            .expect("the server keeps stdout open");
        let msg: Value = serde_json::from_str(&line).expect("JSON-RPC");
        if msg["method"] == "notifications/progress" {
            assert_eq!(msg["params"]["progressToken"], "p1");
            before += 1;
        } else if msg["id"] == 2 {
            assert_eq!(
                msg["result"]["structuredContent"]["truncated"], true,
                "{msg}"
            );
            break;
        }
    }
    assert!(before >= 1, "progress was reported before the response");
    while let Ok(next) = tokio::time::timeout(Duration::from_millis(500), lines.next_line()).await {
        let Some(line) = next.expect("read") else {
            break;
        };
        let msg: Value = serde_json::from_str(&line).expect("JSON-RPC");
        assert_ne!(
            msg["method"], "notifications/progress",
            "progress after the response: {msg}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_task_promptly() {
    let c = connect(fixture(), true, true, "agent-c", &[]).await;
    let id = start_deep_walk(&c).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    c.service
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("cancel");
    // Cancelled long before the walk would end; generous for a loaded machine.
    wait_cancelled(&c, &id, asked, Duration::from_secs(5)).await;
    // The server's own account of how promptly the work stopped: the work done after the
    // request (nodes visited, memories scored), which does not depend on the machine's load, is
    // within one cancellation check (2,048 nodes, or a batch of 512 scored memories, and the
    // progress counted at those checks); the time, within the "milliseconds" docs/tasks.md
    // promises, with room for a loaded machine.
    let done = c.get(&id).await.expect("tasks/get");
    let stopped = done
        .meta
        .as_ref()
        .and_then(|m| m.0.get("mnemograph/progress"))
        .map(|p| p["stopped"].clone())
        .expect("the progress says how the work stopped");
    let work_after = stopped["workAfter"].as_u64().expect("workAfter");
    let after_ms = stopped["afterMs"].as_f64().expect("afterMs");
    assert!(work_after <= 2 * 2_048 + 512, "{stopped}");
    assert!(after_ms < 1_000.0, "{stopped}");
    // Cancelling a finished task is acknowledged.
    c.service
        .cancel_task(CancelTaskParams::new(id))
        .await
        .expect("cancel again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_zero_makes_every_eligible_call_a_task() {
    let c = connect(
        fixture(),
        true,
        true,
        "agent-d",
        &["--inline-budget-ms", "0"],
    )
    .await;
    let CallToolResponse::Task(created) = c
        .call(
            "traverse",
            json!({"names": ["n2"], "namespace": "graph", "depth": 1}),
            None,
        )
        .await
        .unwrap()
    else {
        panic!("budget 0: a task even for a cheap walk");
    };
    let (done, _) = poll_until_terminal(&c, &created.task.task_id, Duration::from_secs(30)).await;
    assert_eq!(done.task.task.status, TaskStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_traversals_get_clear_errors() {
    let c = connect(fixture(), true, true, "agent-e", &[]).await;
    for (args, field) in [
        (
            json!({"names": ["n1"], "namespace": "graph", "depth": 0}),
            "depth",
        ),
        (
            json!({"names": ["n1"], "namespace": "graph", "depth": 50}),
            "depth",
        ),
        (
            json!({"names": ["n1"], "namespace": "graph", "direction": "sideways"}),
            "direction",
        ),
        (json!({"namespace": "graph"}), "ids"),
    ] {
        let CallToolResponse::Complete(r) = c
            .call("traverse", args.clone(), None)
            .await
            .expect("bad arguments are a tool result")
        else {
            panic!("{args}: answered inline");
        };
        assert_eq!(r.is_error, Some(true), "{args}: {r:?}");
        let text = format!("{:?}", r.content);
        assert!(text.contains(field), "{args}: {text}");
    }
    let CallToolResponse::Complete(r) = c
        .call(
            "traverse",
            json!({"names": ["nobody"], "namespace": "graph"}),
            None,
        )
        .await
        .unwrap()
    else {
        panic!("unknown seed is answered inline");
    };
    assert_eq!(r.is_error, Some(true));
    assert!(format!("{:?}", r.content).contains("nobody"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_task_of_a_killed_process_is_rerun_by_the_next_one() {
    let db = fixture();
    let c = connect(db, true, true, "agent-f", &[]).await;
    let id = start_deep_walk(&c).await;
    // Kill the server mid-walk: the row stays `working` with a heartbeat that goes stale.
    drop(c);
    let c = connect(db, true, true, "agent-f", &[]).await;
    let (done, _) = poll_until_terminal(&c, &id, Duration::from_secs(60)).await;
    assert_eq!(
        done.task.task.status,
        TaskStatus::Completed,
        "{:?}",
        done.task.task.status_message
    );
    let result = serde_json::to_value(&done).unwrap();
    assert_eq!(
        result["result"]["structuredContent"]["nodes"]
            .as_array()
            .map(Vec::len),
        Some(20)
    );
}

/// An export into the answer that is too big is refused before any work, by every kind of
/// client (never a task that fails later), and the error names no argument that was not given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_too_big_for_the_answer_is_refused_before_it_starts() {
    let db = fixture();
    for (modern, tasks) in [(false, false), (true, false), (true, true)] {
        let c = connect(db, modern, tasks, "agent-g", &[]).await;
        let started = Instant::now();
        let CallToolResponse::Complete(r) = c
            .call("export", json!({}), None)
            .await
            .expect("a tool result")
        else {
            panic!("modern={modern} tasks={tasks}: refused at once, not a task");
        };
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let text = format!("{:?}", r.content);
        for said in ["too big", "MiB", "200000 memories", "give `path`"] {
            assert!(text.contains(said), "{said:?} in {text}");
        }
        assert!(!text.contains("invalid `path`"), "{text}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "refused from the estimate, not after exporting: {:?}",
            started.elapsed()
        );
    }
}

/// A subgraph export reads what it exports: eleven memories out of 200,000 are an inline
/// answer for a client that could take a task, with their relations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_subgraph_export_is_inline_whatever_the_database_holds() {
    let c = connect(fixture(), true, true, "agent-s", &[]).await;
    let CallToolResponse::Complete(r) = c
        .call(
            "export",
            json!({"namespaces": ["graph"], "subgraph": {"names": ["n0"], "depth": 1}}),
            None,
        )
        .await
        .expect("a tool result")
    else {
        panic!("a subgraph of a dozen memories is answered inline");
    };
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let out = r.structured_content.expect("structured");
    let memories = out["memories"].as_u64().expect("memory count");
    assert!((6..=16).contains(&memories), "{out}");
    assert!(
        out["relations"].as_u64().is_some_and(|n| n >= memories - 1),
        "{out}"
    );
}

/// A call that fails on its input while it runs (an export whose file appeared meanwhile)
/// answers the same way inline and as a task: a tool result with `isError`, the task
/// `completed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_failing_on_its_input_is_an_error_result_inline_and_as_a_task() {
    let db = fixture();
    let out_dir = tempfile::tempdir().unwrap();
    let root = out_dir.path().to_str().unwrap().to_owned();
    let c = connect(db, true, true, "agent-g", &["--import-root", &root]).await;
    let target = out_dir.path().join("everything.jsonl");
    let CallToolResponse::Task(created) = c
        .call("export", json!({"path": target.to_str().unwrap()}), None)
        .await
        .unwrap()
    else {
        panic!("exporting 200,000 memories is a task");
    };
    // Someone else writes the file while the export runs: exports never overwrite.
    std::fs::write(&target, "theirs").unwrap();
    let (done, _) = poll_until_terminal(&c, &created.task.task_id, Duration::from_secs(60)).await;
    assert_eq!(done.task.task.status, TaskStatus::Completed);
    let wire = serde_json::to_value(&done).unwrap();
    assert_eq!(wire["result"]["isError"], true, "{wire}");
    assert!(
        wire["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("appeared while exporting")),
        "{wire}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs");
}

/// `notifications/cancelled` for an inline call stops its work: an export to a file is abandoned
/// (no file), and the server goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancelling_an_inline_call_stops_its_work() {
    let out_dir = tempfile::tempdir().unwrap();
    let root = out_dir.path().to_str().unwrap().to_owned();
    let target = out_dir.path().join("everything.jsonl");
    let mut raw = Raw::spawn(fixture(), &["--import-root", &root]);
    // A client without tasks: its call stays inline, where `notifications/cancelled` applies.
    raw.start_session_as(Era::Initialize, false).await;
    let call = raw.request(
        json!("export-1"),
        "tools/call",
        json!({"name": "export", "arguments": {"path": target.to_str().unwrap()}}),
    );
    raw.send(&call).await;
    let started = Instant::now();
    while !raw.log_text().contains("inline or task") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the export never started\n{}",
            raw.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    raw.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "export-1", "reason": "the user changed their mind"}}),
    )
    .await;
    while !raw.log_text().contains("stopped: the client cancelled it") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the export was not stopped\n{}",
            raw.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listed: Vec<_> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(listed.is_empty(), "nothing is left behind: {listed:?}");
    let stats = raw
        .call("tools/call", json!({"name": "stats", "arguments": {}}))
        .await;
    assert!(
        stats["result"]["structuredContent"]["memories"].as_u64() > Some(0),
        "{stats}"
    );
    raw.close().await;
}

/// Over HTTP a deep walk is a task; a second server on the same database polls it to its end
/// with growing progress, and cancels another through its own endpoint; a client of another
/// name sees neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_over_http_are_answered_and_cancelled_by_another_server() {
    let db = fixture();
    let logs = tempfile::tempdir().unwrap();
    let a = connect_http(db, true, "agent-h", &[], &logs.path().join("a.log")).await;
    let b = connect_http(db, true, "agent-h", &[], &logs.path().join("b.log")).await;
    let id = start_deep_walk(&a).await;
    let (done, counts) = poll_until_terminal(&b, &id, Duration::from_secs(120)).await;
    assert_eq!(done.task.task.status, TaskStatus::Completed);
    let walking: Vec<u64> = counts.iter().copied().skip_while(|&n| n == 0).collect();
    assert!(
        walking.windows(2).all(|w| w[1] >= w[0]),
        "progress read through the other server never goes back: {counts:?}"
    );
    let result = serde_json::to_value(&done).unwrap();
    assert_eq!(
        result["result"]["structuredContent"]["nodes"]
            .as_array()
            .map(Vec::len),
        Some(20)
    );

    let id = start_deep_walk(&a).await;
    b.service
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("cancel through the other server");
    wait_cancelled(&a, &id, Instant::now(), Duration::from_secs(10)).await;

    let other = http_client(&b.http.as_ref().unwrap().url, b.pid, true, "agent-i").await;
    let err = other.get(&id).await.expect_err("foreign task");
    assert_eq!(rpc_code(&err), Some(-32602));
    other.stop().await;
    a.stop().await;
    b.stop().await;
}

/// Over HTTP a 2025-11-25 client (no tasks) gets the bounded inline answer with progress
/// notifications, streamed before the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_calls_stream_progress_over_http() {
    let logs = tempfile::tempdir().unwrap();
    let c = connect_http(fixture(), false, "plain", &[], &logs.path().join("s.log")).await;
    let CallToolResponse::Complete(r) = c.call("traverse", deep_walk(), Some(7)).await.unwrap()
    else {
        panic!("no task for a client without tasks");
    };
    let out = r.structured_content.unwrap();
    assert_eq!(out["truncated"], true, "{out}");
    let deadline = Instant::now() + Duration::from_secs(2);
    while c.progress.lock().expect("progress log").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = c.progress.lock().expect("progress log").clone();
    assert!(!seen.is_empty(), "progress notifications came over HTTP");
    assert!(seen.windows(2).all(|w| w[1].0 >= w[0].0));
    c.stop().await;
}

/// SIGTERM stops an HTTP server within its grace period; the task it was running stays a row
/// that the next server adopts and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_a_running_task_for_the_next_server() {
    let db = fixture();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("first.log");
    let mut a = connect_http(db, true, "agent-j", &[], &log).await;
    let id = start_deep_walk(&a).await;
    let mut http = a.http.take().expect("the server process");
    let stopped = Instant::now();
    terminate(&http.child);
    let status = tokio::time::timeout(Duration::from_secs(30), http.child.wait())
        .await
        .expect("the server exits within its grace period")
        .expect("wait for the server");
    assert!(status.success(), "exit status {status:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "{:?}",
        stopped.elapsed()
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("shutting down"), "{text}");
    drop(a);

    let b = connect_http(db, true, "agent-j", &[], &logs.path().join("second.log")).await;
    let (done, _) = poll_until_terminal(&b, &id, Duration::from_secs(120)).await;
    assert_eq!(
        done.task.task.status,
        TaskStatus::Completed,
        "{:?}",
        done.task.task.status_message
    );
    b.stop().await;
}

/// With bearer tokens, a task belongs to the token's subject: the same subject polls it from
/// another client, another subject gets -32602 for it, whatever client name each declares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_task_belongs_to_the_subject_of_its_token() {
    let db = fixture();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    let alice = crate::http::add_token(&file, "alice", "read");
    let bob = crate::http::add_token(&file, "bob", "read,write");
    let http = HttpChild::spawn(
        db,
        &["--tokens", file.to_str().unwrap()],
        &dir.path().join("server.log"),
    )
    .await;
    let pid = http.child.id().unwrap();
    let a = http_client_with(&http.url, pid, true, "same-name", Some(&alice)).await;
    let id = start_deep_walk(&a).await;
    let again = http_client_with(&http.url, pid, true, "another-name", Some(&alice)).await;
    again
        .get(&id)
        .await
        .expect("the same subject sees its task");
    let b = http_client_with(&http.url, pid, true, "same-name", Some(&bob)).await;
    let err = b.get(&id).await.expect_err("another subject's task");
    assert_eq!(rpc_code(&err), Some(-32602));
    let err = b
        .service
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect_err("another subject cannot cancel it");
    assert_eq!(rpc_code(&err), Some(-32602));
    a.service
        .cancel_task(CancelTaskParams::new(id))
        .await
        .expect("its subject can");
    for c in [a, again, b] {
        c.stop().await;
    }
    http.stop().await;
}
