//! Durable tasks: long tool calls run in the background while the caller polls. Rows live in
//! SQLite (through the engine), so handles survive restarts and any process on the database can
//! answer for them; the process running a task keeps its live progress in memory and heartbeats
//! it to the row. Also the inline/task decision and the maintenance loop (TTL sweep, orphans).
//!
//! Size: the runner's phases (inline race, row, heartbeat, cancel, input, adoption) share `Live`;
//! about half of the file is their tests.

mod pace;
pub mod policy;
pub mod schedule;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::engine::control::{
    Control, Progressing, WorkKind, WorkProgress, status_message, work_done,
};
use crate::engine::work::Work;
use crate::engine::{Beat, Ending, Engine, Grant};
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::model::{JobRef, JobResult, Millis, TaskRow, TaskState, now_millis};

use pace::Pace;
pub use pace::Reading;
pub use policy::{Capability, Decision, Plan, decide};
pub use schedule::Schedule;

/// Runs the work a task stands for. [`EngineExecutor`] runs every [`Work`] in the engine; a
/// front end may add work of its own (probes) and read task rows of older versions.
pub trait Executor: Send + Sync + 'static {
    /// Runs `work` to its output, reporting to and obeying `ctl`.
    fn execute(&self, engine: &Engine, work: &Work, ctl: &dyn Control) -> Result<Value>;
    /// Whether the work only reads, so it can run again from scratch after its process died.
    fn rerunnable(&self, work: &Work) -> bool {
        work.rerunnable()
    }
    /// Whether the work saves checkpoints and goes on from the last one after its process died.
    fn resumable(&self, work: &Work) -> bool {
        work.resumable()
    }
    /// What the progress of the work counts, so that a task's status reads right before the
    /// work has reported anything.
    fn work_kind(&self, work: &Work) -> WorkKind {
        work.kind()
    }
    /// What a finished task's status says instead of its progress, when its output tells more.
    fn summary(&self, work: &Work, output: &Value) -> Option<String> {
        work.summary(output)
    }
    /// The work of a task row written before work was stored as [`Work`] (its tool name and
    /// arguments as the client sent them, with the server's decisions beside them).
    fn legacy(&self, tool: &str, _args: &Value) -> Result<Work> {
        Err(Error::Internal(format!(
            "a `{tool}` task row of an older version that this server cannot read"
        )))
    }
}

/// Runs every [`Work`] in the engine.
pub struct EngineExecutor;

impl Executor for EngineExecutor {
    fn execute(&self, engine: &Engine, work: &Work, ctl: &dyn Control) -> Result<Value> {
        work.run(engine, ctl)
    }
}

/// Settings of the task runner.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskConfig {
    /// How long a call may run before it becomes a task (0: every eligible call is a task).
    pub inline_budget: Duration,
    pub default_ttl_ms: u64,
    pub max_ttl_ms: u64,
    /// How often a running task's progress is written to its row (and cancellation looked up).
    pub heartbeat: Duration,
    /// A working row whose heartbeat is older than this belongs to a dead process.
    pub stale_after: Duration,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            inline_budget: Duration::from_millis(200),
            default_ttl_ms: 3_600_000,
            max_ttl_ms: 24 * 3_600_000,
            heartbeat: Duration::from_millis(100),
            stale_after: Duration::from_secs(3),
        }
    }
}

/// Key of the arguments of a row that keeps an inline answer (see [`Tasks::keep`]).
pub const KEPT_KEY: &str = "keptResult";

/// Status message of a row that keeps an inline answer.
const KEPT_MESSAGE: &str = "a result kept for its links (answered at once; too long to show whole)";

/// How a call was answered.
pub enum Answer {
    /// The output (or the error) of work that ran to its end.
    Inline(Result<Value>),
    /// A task was created; its row as committed.
    Task(Box<TaskRow>),
}

/// The shortened form of an id for logs (ids never appear whole there): its first 8 characters
/// (ids come from clients too, so they may be any text).
pub fn short_id(id: &str) -> &str {
    id.char_indices().nth(8).map_or(id, |(end, _)| &id[..end])
}

struct Live {
    /// The work, and the tool it is listed under.
    work: Arc<Work>,
    tool: String,
    ctl: Arc<Progressing>,
    extra: Mutex<WorkProgress>,
    /// Set once the work has a task row.
    task_id: std::sync::OnceLock<String>,
    /// The checkpoint a resumed task starts from.
    resume: Option<Value>,
    /// The work's latest checkpoint.
    checkpoint: Mutex<Option<Value>>,
    /// Whether the call may become a task, and so may wait for input from the client.
    may_wait: bool,
    /// Wakes work waiting for input when this process records an answer to it.
    answered: (Mutex<()>, Condvar),
    /// When this process asked the work to stop, and the work done by then: how promptly it
    /// stopped is told in the task's final progress.
    stop_asked: Mutex<Option<(std::time::Instant, u64)>>,
    /// How its progress reads and how often to poll it.
    pace: Pace,
    /// The job the work is filed under: its checkpoints and end are recorded there.
    job: Option<JobRef>,
}

impl Live {
    fn new(
        task_id: Option<String>,
        resume: Option<Value>,
        tool: &str,
        work: Arc<Work>,
        kind: WorkKind,
    ) -> Live {
        let id = std::sync::OnceLock::new();
        if let Some(t) = task_id {
            let _ = id.set(t);
        }
        Live {
            work,
            tool: tool.to_owned(),
            ctl: Arc::new(Progressing::default()),
            extra: Mutex::new(WorkProgress {
                kind,
                ..WorkProgress::default()
            }),
            task_id: id,
            resume,
            checkpoint: Mutex::new(None),
            may_wait: true,
            answered: (Mutex::new(()), Condvar::new()),
            stop_asked: Mutex::new(None),
            pace: Pace::fresh(Duration::ZERO),
            job: None,
        }
    }

    /// How the work reads now.
    fn reading(&self) -> Reading {
        self.pace.read(&self.progress())
    }

    /// Asks the work to stop (the first request is the one timed).
    fn stop(&self) {
        lock(&self.stop_asked)
            .get_or_insert_with(|| (std::time::Instant::now(), work_done(&self.progress())));
        self.ctl.cancelled.store(true, Ordering::Relaxed);
    }

    /// Wakes the work if it waits for input.
    fn nudge(&self) {
        let _guard = lock(&self.answered.0);
        self.answered.1.notify_all();
    }

    /// Sleeps until nudged or `timeout` has passed.
    fn wait_nudge(&self, timeout: Duration) {
        let guard = lock(&self.answered.0);
        // A poisoned wait gives the guard back all the same: nothing to recover.
        let _ = self.answered.1.wait_timeout(guard, timeout);
    }

    fn progress(&self) -> WorkProgress {
        let mut p = self.ctl.snapshot();
        {
            let e = lock(&self.extra);
            p.done = e.done;
            p.total = e.total;
            p.kind = e.kind;
            p.errors = e.errors;
            p.merged = e.merged;
            p.archived = e.archived;
            p.summaries = e.summaries;
        }
        p
    }
}

/// How often work waiting for input looks at its row for answers given through another process
/// (answers given through this one wake it at once).
const INPUT_POLL: Duration = Duration::from_millis(100);

/// Forwards progress into the shared counters and keeps item counts too; parks the task while
/// it waits for input.
struct LiveControl {
    live: Arc<Live>,
    engine: Arc<Engine>,
    boot_id: String,
}

impl LiveControl {
    /// The task row of this work, once there is one (a call racing its inline budget becomes a
    /// task when the budget runs out); an error for a call that is answered inline.
    fn row_id(&self) -> Result<String> {
        loop {
            if let Some(id) = self.live.task_id.get() {
                return Ok(id.clone());
            }
            if !self.live.may_wait {
                return Err(Error::invalid(
                    "input",
                    "this call needs answers from the client, and only a task can wait for them",
                    "call it from a client that declares the MCP tasks extension (io.modelcontextprotocol/tasks)",
                ));
            }
            if self.is_cancelled() {
                return Err(Error::Cancelled);
            }
            self.live.wait_nudge(Duration::from_millis(10));
        }
    }
}

/// The JSON object in `v`, or an empty one.
fn json_object(v: Option<Value>) -> serde_json::Map<String, Value> {
    match v {
        Some(Value::Object(o)) => o,
        _ => serde_json::Map::new(),
    }
}

impl Control for LiveControl {
    fn report(&self, p: &WorkProgress) {
        self.live.ctl.report(p);
        {
            let mut e = lock(&self.live.extra);
            e.done = p.done;
            e.total = p.total;
            e.kind = p.kind;
            e.errors = p.errors;
            e.merged = p.merged;
            e.archived = p.archived;
            e.summaries = p.summaries;
        }
    }

    fn is_cancelled(&self) -> bool {
        self.live.ctl.is_cancelled()
    }

    fn task_id(&self) -> Option<String> {
        self.live.task_id.get().cloned()
    }

    fn resume_from(&self) -> Option<Value> {
        self.live.resume.clone()
    }

    fn checkpointed(&self, checkpoint: &Value) {
        {
            let mut c = lock(&self.live.checkpoint);
            *c = Some(checkpoint.clone());
        }
        if let (Some(_), Some(id)) = (&self.live.job, self.live.task_id.get()) {
            let summary = format!("checkpoint · {}", self.live.reading().status_message);
            if let Err(e) = self
                .engine
                .task_progressed_in_job(id, &summary, now_millis())
            {
                tracing::warn!(task = short_id(id), error = %e, "could not record a checkpoint with the task's job");
            }
        }
    }

    /// Answers found in the row (given before a restart) are used as they are; the rest are
    /// asked for: the row turns `input_required` with them, and the work waits until the client
    /// has answered them all (`tasks/update`, through any process on the database).
    fn can_ask(&self) -> bool {
        self.live.may_wait
    }

    fn ask(
        &self,
        requests: &serde_json::Map<String, Value>,
        wait: Duration,
    ) -> Result<serde_json::Map<String, Value>> {
        let id = self.row_id()?;
        let gone = || Error::Cancelled;
        let row = self.engine.task_get(&id)?.ok_or_else(gone)?;
        let mut answered = json_object(row.input_responses);
        let pending: serde_json::Map<String, Value> = requests
            .iter()
            .filter(|(key, _)| !answered.contains_key(*key))
            .map(|(key, request)| (key.clone(), request.clone()))
            .collect();
        if !pending.is_empty() {
            let n = pending.len();
            let message = format!(
                "waiting for input · {n} request{}",
                if n == 1 { "" } else { "s" }
            );
            let pending = Value::Object(pending);
            if !self.engine.task_await_input(
                &id,
                &self.boot_id,
                &pending,
                &message,
                now_millis(),
            )? {
                return Err(Error::Cancelled); // the row is no longer this process's live task
            }
            tracing::info!(
                task = short_id(&id),
                n_requests = n,
                wait_s = wait.as_secs(),
                "task waits for input"
            );
            let deadline = std::time::Instant::now() + wait;
            loop {
                if self.is_cancelled() {
                    return Err(Error::Cancelled);
                }
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                self.live.wait_nudge(INPUT_POLL.min(left));
                if left.is_zero() {
                    let message = format!(
                        "no answer within {}: going on without it",
                        crate::engine::control::duration_words(wait)
                    );
                    if self
                        .engine
                        .task_give_up_input(&id, &self.boot_id, &message, now_millis())?
                    {
                        tracing::info!(
                            task = short_id(&id),
                            "no answer in time; the task goes on with its defaults"
                        );
                    }
                }
                let row = self.engine.task_get(&id)?.ok_or_else(gone)?;
                match row.status {
                    TaskState::InputRequired => {}
                    TaskState::Working => {
                        answered = json_object(row.input_responses);
                        break;
                    }
                    _ => return Err(Error::Cancelled),
                }
            }
            tracing::info!(task = short_id(&id), "task works again");
        }
        Ok(requests
            .keys()
            .filter_map(|key| answered.get(key).map(|a| (key.clone(), a.clone())))
            .collect())
    }
}

/// The task runner of one process.
pub struct Tasks {
    engine: Arc<Engine>,
    cfg: TaskConfig,
    boot_id: String,
    executor: Arc<dyn Executor>,
    live: Mutex<HashMap<String, Arc<Live>>>,
    /// Set when the process is going away: stopped work is not recorded as cancelled.
    shutting_down: std::sync::atomic::AtomicBool,
}

/// A view of one task for the front end: its row, with live progress when this process runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    pub row: TaskRow,
    pub progress: Option<Reading>,
}

impl TaskView {
    /// The status message, fresh when the task runs here.
    pub fn status_message(&self) -> Option<String> {
        match (&self.progress, self.row.status) {
            (Some(r), TaskState::Working) => Some(r.status_message.clone()),
            _ => self.row.status_message.clone(),
        }
    }

    /// Counters, fresh when the task runs here.
    pub fn progress_json(&self) -> Value {
        match (&self.progress, self.row.status) {
            (Some(r), TaskState::Working) => r.progress.clone(),
            _ => self.row.progress.clone(),
        }
    }

    /// How long a poller should wait before looking again (fresh when the task runs here);
    /// `None` once it has ended.
    pub fn poll_interval_ms(&self) -> Option<u64> {
        if self.row.status.is_terminal() {
            return None;
        }
        match &self.progress {
            Some(r) => Some(r.poll_interval.as_millis() as u64),
            None => self.row.poll_interval_ms.map(|t| t.max(0) as u64),
        }
    }
}

/// Who asks for a task: the owner tasks are kept under (a token's subject over HTTP, the
/// client on stdio) and the rights of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    pub owner: String,
    pub grant: Grant,
}

impl Requester {
    /// `owner` with every right (stdio, the schedule, tests).
    pub fn full(owner: impl Into<String>) -> Requester {
        Requester {
            owner: owner.into(),
            grant: Grant::full(),
        }
    }

    /// True when this requester may see `row`: its owner, with rights that cover the task's
    /// (a token limited to some namespaces does not see a task its subject started with a
    /// wider one; such a task does not exist for it).
    pub fn sees(&self, row: &TaskRow) -> bool {
        row.owner == self.owner && self.grant.covers(&Grant::from_json(row.grant.as_ref()))
    }
}

fn random_task_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn error_json(e: &Error) -> Value {
    let message = e.advice().unwrap_or_else(|| e.to_string());
    json!({"user": e.is_user_error(), "message": message})
}

impl Tasks {
    pub fn new(engine: Arc<Engine>, cfg: TaskConfig, executor: Arc<dyn Executor>) -> Arc<Tasks> {
        Arc::new(Tasks {
            engine,
            cfg,
            boot_id: random_task_id(),
            executor,
            live: Mutex::new(HashMap::new()),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn config(&self) -> &TaskConfig {
        &self.cfg
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    fn ttl(&self, requested: Option<u64>) -> u64 {
        requested
            .unwrap_or(self.cfg.default_ttl_ms)
            .clamp(1_000, self.cfg.max_ttl_ms)
    }

    /// Runs one call according to `plan`. `on_progress` is called (from async context) while
    /// an inline answer is being computed, and never after this returns. When `cancelled`
    /// completes while the call is still to be answered inline (the client cancelled the
    /// request), the work is stopped; once it is a task, only `tasks/cancel` stops it. Work
    /// under a `job` files its outcome there (a task from its start, see [`JobResult`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn run(
        self: &Arc<Self>,
        owner: &Requester,
        tool: &str,
        work: Work,
        decision: Decision,
        ttl_ms: Option<u64>,
        job: Option<JobRef>,
        on_progress: Option<ProgressSink>,
        cancelled: impl Future<Output = ()> + Send,
    ) -> Result<Answer> {
        let kind = self.executor.work_kind(&work);
        let arguments = serde_json::to_value(&work)?;
        let plan = decision.plan;
        let live = Arc::new(Live {
            may_wait: plan != Plan::Inline,
            pace: Pace::fresh(decision.estimate),
            job,
            ..Live::new(None, None, tool, Arc::new(work), kind)
        });
        let mut handle = self.spawn_work(&live);
        if plan != Plan::Task {
            /// How the inline phase ended.
            enum Ended {
                Done(Result<Value>),
                OverBudget,
                Cancelled,
            }
            let budget = (plan == Plan::Race).then_some(self.cfg.inline_budget);
            let sent = Arc::new(Mutex::new(None));
            let forward = on_progress
                .clone()
                .map(|f| spawn_forwarder(Arc::clone(&live), f, Arc::clone(&sent)));
            let ended = tokio::select! {
                out = async {
                    match budget {
                        None => Some(flatten((&mut handle).await)),
                        Some(b) => tokio::time::timeout(b, &mut handle).await.ok().map(flatten),
                    }
                } => out.map_or(Ended::OverBudget, Ended::Done),
                () = cancelled => Ended::Cancelled,
            };
            let out = match ended {
                Ended::Done(out) => Some(out),
                Ended::OverBudget => None,
                Ended::Cancelled => {
                    live.ctl.cancelled.store(true, Ordering::Relaxed);
                    let out = flatten((&mut handle).await);
                    tracing::info!(tool, "inline call stopped: the client cancelled it");
                    Some(out)
                }
            };
            if let Some(fw) = forward {
                fw.abort();
                let _ = fw.await;
            }
            if let Some(out) = out {
                // The last word on progress, also for work too quick for the forwarder to see
                // (never a value already sent: progress must grow with each notification).
                if let Some(f) = &on_progress {
                    let p = live.progress();
                    let last = *lock(&sent);
                    if last.is_none_or(|last| work_done(&p) > last) {
                        f(p);
                    }
                }
                if let Some(job) = &live.job {
                    self.file_inline(owner, job, &live, &out).await;
                }
                return Ok(Answer::Inline(out));
            }
        }
        // Becomes a task: the row is committed before the handle is returned.
        let now = now_millis();
        let reading = live.reading();
        let row = TaskRow {
            id: random_task_id(),
            owner: owner.owner.clone(),
            tool: tool.to_owned(),
            arguments,
            status: TaskState::Working,
            status_message: Some(reading.status_message),
            progress: reading.progress,
            result: None,
            error: None,
            created_at: now,
            updated_at: now,
            ttl_ms: Some(self.ttl(ttl_ms) as i64),
            poll_interval_ms: Some(reading.poll_interval.as_millis() as i64),
            checkpoint: lock(&live.checkpoint).clone(),
            boot_id: self.boot_id.clone(),
            heartbeat_at: now,
            cancel_requested: false,
            input_requests: None,
            input_responses: None,
            grant: Some(owner.grant.to_json()),
        };
        let engine = Arc::clone(&self.engine);
        let inserted = row.clone();
        let filed = live.job.clone().map(|job| {
            let r = JobResult {
                task_id: row.id.clone(),
                tool: tool.to_owned(),
                status: TaskState::Working.as_str().to_owned(),
                summary: row.status_message.clone().unwrap_or_default(),
                result: None,
                finished_at: now,
                reach: owner.grant.access.to_json(),
            };
            (job, r)
        });
        let res = tokio::task::spawn_blocking(move || {
            engine.task_insert(&inserted, filed.as_ref().map(|(j, r)| (j, r)))
        })
        .await;
        if let Err(e) = flatten(res) {
            live.ctl.cancelled.store(true, Ordering::Relaxed);
            return Err(e);
        }
        let _ = live.task_id.set(row.id.clone());
        live.nudge(); // work that asked for input during its inline budget can now wait for it
        tracing::info!(task = short_id(&row.id), tool, "task created");
        self.track(row.id.clone(), live, handle);
        Ok(Answer::Task(Box::new(row)))
    }

    fn spawn_work(&self, live: &Arc<Live>) -> tokio::task::JoinHandle<Result<Value>> {
        let engine = Arc::clone(&self.engine);
        let executor = Arc::clone(&self.executor);
        let (tool, work) = (live.tool.clone(), Arc::clone(&live.work));
        let ctl = LiveControl {
            live: Arc::clone(live),
            engine: Arc::clone(&self.engine),
            boot_id: self.boot_id.clone(),
        };
        tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                executor.execute(&engine, &work, &ctl)
            }))
            .unwrap_or_else(|_| Err(Error::Internal(format!("{tool} panicked"))))
        })
    }

    /// Keeps a task's row in step with its work until the work ends.
    fn track(
        self: &Arc<Self>,
        id: String,
        live: Arc<Live>,
        mut handle: tokio::task::JoinHandle<Result<Value>>,
    ) {
        lock(&self.live).insert(id.clone(), Arc::clone(&live));
        // Work registered after `shutdown` went through the map is stopped like the rest (its
        // row is left for the next process).
        if self.is_shutting_down() {
            live.ctl.cancelled.store(true, Ordering::Relaxed);
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(me.cfg.heartbeat);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let outcome = loop {
                tokio::select! {
                    joined = &mut handle => break flatten(joined),
                    _ = tick.tick() => {
                        let r = live.reading();
                        let (engine, id2, boot) = (Arc::clone(&me.engine), id.clone(), me.boot_id.clone());
                        let beat = tokio::task::spawn_blocking(move || {
                            let beat = Beat {
                                status_message: &r.status_message,
                                progress: &r.progress,
                                checkpoint: None,
                                poll_interval_ms: Some(r.poll_interval.as_millis() as i64),
                            };
                            engine.task_heartbeat(&id2, &boot, &beat, now_millis())
                        }).await;
                        match flatten(beat) {
                            Ok(Some(true)) | Ok(None) => live.stop(),
                            Ok(Some(false)) => {}
                            Err(e) => tracing::warn!(task = short_id(&id), error = %e, "task heartbeat failed"),
                        }
                    }
                }
            };
            me.finish(&id, &live, outcome).await;
            lock(&me.live).remove(&id);
        });
    }

    /// Whether [`Tasks::shutdown`] was called: the process is going away.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Whether task `id` runs in this process (its work has not ended yet).
    pub fn runs_here(&self, id: &str) -> bool {
        lock(&self.live).contains_key(id)
    }

    /// Stops all running work of this process without ending its tasks: their rows stay
    /// `working`, and the next process on the database adopts them once the heartbeat is stale.
    pub fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        {
            let live = lock(&self.live);
            for l in live.values() {
                l.ctl.cancelled.store(true, Ordering::Relaxed);
            }
            if !live.is_empty() {
                tracing::info!(
                    n_tasks = live.len(),
                    "stopping running tasks; another process will take them over"
                );
            }
        }
    }

    async fn finish(&self, id: &str, live: &Live, outcome: Result<Value>) {
        if self.shutting_down.load(Ordering::Acquire) && matches!(outcome, Err(Error::Cancelled)) {
            return;
        }
        let p = live.progress();
        let (status, msg, result, error) = self.ending(live, &p, &outcome);
        let engine = Arc::clone(&self.engine);
        let (id2, boot) = (id.to_owned(), self.boot_id.clone());
        let mut prog = live.pace.read(&p).progress;
        if status == TaskState::Cancelled
            && let Some((asked, done_then)) = *lock(&live.stop_asked)
            && let Value::Object(o) = &mut prog
        {
            // How promptly the work stopped once this process asked: the time, and the work
            // (nodes visited, items done) it did meanwhile, which does not depend on the load.
            let after_ms = asked.elapsed().as_secs_f64() * 1e3;
            let work_after = work_done(&p).saturating_sub(done_then);
            tracing::info!(
                task = short_id(id),
                after_ms,
                work_after,
                "task stopped after its cancellation"
            );
            o.insert(
                "stopped".into(),
                serde_json::json!({"afterMs": (after_ms * 10.0).round() / 10.0, "workAfter": work_after}),
            );
        }
        let res = tokio::task::spawn_blocking(move || {
            let end = Ending {
                status,
                status_message: &msg,
                progress: &prog,
                result: result.as_ref(),
                error: error.as_ref(),
            };
            engine.task_finish(&id2, &boot, &end, now_millis())
        })
        .await;
        match flatten(res) {
            Ok(true) => tracing::info!(
                task = short_id(id),
                status = status.as_str(),
                visited = p.visited,
                "task finished"
            ),
            Ok(false) => tracing::info!(
                task = short_id(id),
                "task was ended elsewhere before it finished"
            ),
            Err(e) => {
                tracing::error!(task = short_id(id), error = %e, "could not record the end of a task")
            }
        }
    }

    /// How work ended, as its task records it: the status, its message, the output or the
    /// error.
    fn ending(
        &self,
        live: &Live,
        p: &WorkProgress,
        outcome: &Result<Value>,
    ) -> (TaskState, String, Option<Value>, Option<Value>) {
        match outcome {
            Ok(v) => (
                TaskState::Completed,
                format!(
                    "done · {}",
                    self.executor
                        .summary(&live.work, v)
                        .unwrap_or_else(|| status_message(p))
                ),
                Some(v.clone()),
                None,
            ),
            Err(Error::Cancelled) => (
                TaskState::Cancelled,
                format!("cancelled · {}", status_message(p)),
                None,
                None,
            ),
            Err(e) if e.is_user_error() => (
                TaskState::Completed,
                format!("finished with an error · {e}"),
                None,
                Some(error_json(e)),
            ),
            Err(e) => (
                TaskState::Failed,
                format!("failed · {e}"),
                None,
                Some(error_json(e)),
            ),
        }
    }

    /// Files the outcome of work answered inline under its job, under an id of its own (a
    /// failure to file is logged: the caller has its answer).
    async fn file_inline(&self, owner: &Requester, job: &JobRef, live: &Live, out: &Result<Value>) {
        let (status, summary, result, error) = self.ending(live, &live.progress(), out);
        let r = JobResult {
            task_id: random_task_id(),
            tool: live.tool.clone(),
            status: status.as_str().to_owned(),
            summary,
            result: result.or(error),
            finished_at: now_millis(),
            reach: owner.grant.access.to_json(),
        };
        let (engine, job, by) = (Arc::clone(&self.engine), job.clone(), owner.owner.clone());
        let filed =
            tokio::task::spawn_blocking(move || engine.file_job_result(&job, &r, &by)).await;
        if let Err(e) = flatten(filed) {
            tracing::warn!(tool = %live.tool, error = %e, "could not file an inline answer with its job");
        }
    }

    /// The task `id` if `who` may see it: its owner, with rights that cover the task's.
    /// Unknown and foreign ids look the same: `None`.
    pub fn get(&self, who: &Requester, id: &str) -> Result<Option<TaskView>> {
        let Some(row) = self.engine.task_get(id)? else {
            return Ok(None);
        };
        if !who.sees(&row) || self.expired(&row, now_millis()) {
            return Ok(None);
        }
        let progress = lock(&self.live).get(id).map(|l| l.reading());
        Ok(Some(TaskView { row, progress }))
    }

    /// Keeps the full output of a call of `tool` answered inline whose result had to be cut, as
    /// a completed task of `who` (visible by the same rules, for the default time to live), so
    /// that the links of the cut result can be read; returns the row.
    pub fn keep(&self, who: &Requester, tool: &str, output: Value) -> Result<TaskRow> {
        let now = now_millis();
        let row = TaskRow {
            id: random_task_id(),
            owner: who.owner.clone(),
            tool: tool.to_owned(),
            arguments: json!({ KEPT_KEY: true }),
            status: TaskState::Completed,
            status_message: Some(KEPT_MESSAGE.to_owned()),
            progress: json!({}),
            result: Some(output),
            error: None,
            created_at: now,
            updated_at: now,
            ttl_ms: Some(self.ttl(None) as i64),
            poll_interval_ms: None,
            checkpoint: None,
            boot_id: self.boot_id.clone(),
            heartbeat_at: now,
            cancel_requested: false,
            input_requests: None,
            input_responses: None,
            grant: Some(who.grant.to_json()),
        };
        self.engine.task_insert(&row, None)?;
        Ok(row)
    }

    fn expired(&self, row: &TaskRow, now: Millis) -> bool {
        row.status.is_terminal() && row.ttl_ms.is_some_and(|ttl| row.created_at + ttl < now)
    }

    /// Asks a task to stop; `false` when `who` may not see such a task (`None`: an operator,
    /// who may stop any). Cancelling a finished task is acknowledged and changes nothing.
    pub fn cancel(&self, who: Option<&Requester>, id: &str) -> Result<bool> {
        let Some(row) = self.engine.task_get(id)? else {
            return Ok(false);
        };
        if who.is_some_and(|w| !w.sees(&row)) {
            return Ok(false);
        }
        if row.status.is_terminal() {
            return Ok(true);
        }
        if let Some(live) = lock(&self.live).get(id).cloned() {
            live.stop();
        }
        self.engine.task_request_cancel(id, now_millis())?;
        tracing::info!(task = short_id(id), "task cancellation requested");
        Ok(true)
    }

    /// Hands the client's answers to task `id` (`tasks/update`); `false` when `who` may not
    /// see such a task. Answers to requests the task does not wait for are ignored, and so is an
    /// update of a task that waits for nothing.
    pub fn update(
        &self,
        who: &Requester,
        id: &str,
        responses: &serde_json::Map<String, Value>,
    ) -> Result<bool> {
        let Some(row) = self.engine.task_get(id)? else {
            return Ok(false);
        };
        if !who.sees(&row) || self.expired(&row, now_millis()) {
            return Ok(false);
        }
        let outcome = self.engine.task_answer_input(
            id,
            responses,
            "input received · working again",
            now_millis(),
        )?;
        match outcome {
            crate::engine::Answered::Pending(left) => {
                tracing::info!(
                    task = short_id(id),
                    still_pending = left,
                    "task input answered"
                );
                if let Some(live) = lock(&self.live).get(id).cloned() {
                    live.nudge();
                }
            }
            crate::engine::Answered::NotWaiting => {
                tracing::debug!(
                    task = short_id(id),
                    "update of a task that waits for no input"
                )
            }
        }
        Ok(true)
    }

    /// The newest tasks `who` may see (at most `limit`): its own, and the server's scheduled
    /// runs when its rights cover them.
    pub fn list_for(&self, who: &Requester, limit: usize) -> Result<Vec<TaskView>> {
        // Rows of the owner started with wider rights are left out after the query: ask for
        // more than the page.
        let fetch = limit.saturating_mul(4).min(1_000);
        let mut views: Vec<TaskView> = self
            .list(Some(&who.owner), fetch)?
            .into_iter()
            .filter(|v| who.sees(&v.row))
            .collect();
        if who.owner != schedule::OWNER {
            views.extend(
                self.list(Some(schedule::OWNER), limit)?
                    .into_iter()
                    .filter(|v| who.grant.covers(&Grant::from_json(v.row.grant.as_ref()))),
            );
        }
        views.sort_by(|a, b| {
            b.row
                .created_at
                .cmp(&a.row.created_at)
                .then(a.row.id.cmp(&b.row.id))
        });
        views.truncate(limit);
        Ok(views)
    }

    /// The newest tasks of `owner` (all owners for `None`), for an operator.
    pub fn list(&self, owner: Option<&str>, limit: usize) -> Result<Vec<TaskView>> {
        let now = now_millis();
        let rows = self.engine.task_list(owner, limit)?;
        let live = lock(&self.live);
        Ok(rows
            .into_iter()
            .filter(|r| !self.expired(r, now))
            .map(|row| {
                let progress = live.get(&row.id).map(|l| l.reading());
                TaskView { row, progress }
            })
            .collect())
    }

    /// Starts the maintenance loop: sweep expired rows, adopt tasks of dead processes.
    pub fn start_maintenance(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Err(e) = me.maintain().await {
                    tracing::warn!(error = %e, "task maintenance failed");
                }
            }
        })
    }

    async fn maintain(self: &Arc<Self>) -> Result<()> {
        let engine = Arc::clone(&self.engine);
        let stale = self.cfg.stale_after.as_millis() as i64;
        let (swept, orphans) = flatten(
            tokio::task::spawn_blocking(move || {
                let now = now_millis();
                Ok((engine.task_sweep(now)?, engine.task_orphans(now - stale)?))
            })
            .await,
        )?;
        if swept > 0 {
            tracing::debug!(swept, "expired tasks removed");
        }
        for row in orphans {
            self.adopt(row).await?;
        }
        Ok(())
    }

    async fn adopt(self: &Arc<Self>, row: TaskRow) -> Result<()> {
        let engine = Arc::clone(&self.engine);
        let (id, old, new) = (row.id.clone(), row.boot_id.clone(), self.boot_id.clone());
        let stale = self.cfg.stale_after.as_millis() as i64;
        let won = flatten(
            tokio::task::spawn_blocking(move || {
                let now = now_millis();
                let won = engine.task_adopt(&id, &old, &new, now - stale, now)?;
                let job = match won {
                    true => engine.task_job(&id)?.map(|(job, _)| job),
                    false => None,
                };
                Ok((won, job))
            })
            .await,
        )?;
        let (won, job) = won;
        if !won {
            return Ok(()); // another process took it
        }
        // The row's work: stored as `Work`, or, for a row of an older version, read from the
        // tool and arguments it kept.
        let work = serde_json::from_value::<Work>(row.arguments.clone())
            .map_err(Error::from)
            .or_else(|_| self.executor.legacy(&row.tool, &row.arguments));
        let work = match work {
            Ok(w) => Arc::new(w),
            Err(e) => {
                tracing::warn!(task = short_id(&row.id), tool = %row.tool, error = %e, "an adopted task's work cannot be read");
                let probe = Arc::new(Work::Probe {
                    name: row.tool.clone(),
                    args: Value::Null,
                });
                let live = Live::new(None, None, &row.tool, probe, WorkKind::default());
                let err = Error::Internal(
                    "the process running this task stopped before it finished, and this server cannot read its work; run the call again"
                        .into(),
                );
                let outcome = if row.cancel_requested {
                    Err(Error::Cancelled)
                } else {
                    Err(err)
                };
                self.finish(&row.id, &live, outcome).await;
                return Ok(());
            }
        };
        let kind = self.executor.work_kind(&work);
        if row.cancel_requested {
            let live = Live::new(None, None, &row.tool, work, kind);
            self.finish(&row.id, &live, Err(Error::Cancelled)).await;
            return Ok(());
        }
        if self.executor.resumable(&work) {
            tracing::info!(task = short_id(&row.id), tool = %row.tool, "resuming a task whose process stopped, from its last checkpoint");
            let live = Arc::new(Live {
                pace: Pace::resumed(&row.progress),
                job: job.clone(),
                ..Live::new(
                    Some(row.id.clone()),
                    row.checkpoint.clone(),
                    &row.tool,
                    work,
                    kind,
                )
            });
            let handle = self.spawn_work(&live);
            self.track(row.id, live, handle);
        } else if self.executor.rerunnable(&work) {
            tracing::info!(task = short_id(&row.id), tool = %row.tool, "re-running a task whose process stopped");
            let live = Arc::new(Live {
                pace: Pace::resumed(&row.progress),
                job,
                ..Live::new(Some(row.id.clone()), None, &row.tool, work, kind)
            });
            let handle = self.spawn_work(&live);
            self.track(row.id, live, handle);
        } else {
            let live = Live::new(None, None, &row.tool, work, kind);
            let err = Error::Internal(
                "the process running this task stopped before it finished; run the call again"
                    .into(),
            );
            self.finish(&row.id, &live, Err(err)).await;
        }
        Ok(())
    }
}

/// What [`cancel_for_operator`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorCancel {
    /// The task had ended already (in this state); nothing changed.
    AlreadyEnded(TaskState),
    /// No live process held the task: it is now cancelled.
    Cancelled,
    /// A live process runs it and was asked to stop it (it does within a heartbeat).
    Requested,
}

/// Cancels task `row` for an operator (`mnemograph tasks cancel`). A task no live process holds
/// (heartbeat older than `stale_after`: its process is gone) would wait for a server to adopt it
/// before the request was seen, so it is ended here at once — taken over the way an orphan is
/// adopted (one conditional update: a process that adopted it first keeps it), then marked
/// cancelled. A live one is asked to stop.
pub fn cancel_for_operator(
    engine: &Engine,
    row: &TaskRow,
    stale_after: Duration,
) -> Result<OperatorCancel> {
    if row.status.is_terminal() {
        return Ok(OperatorCancel::AlreadyEnded(row.status));
    }
    let now = now_millis();
    let stale_before = now - stale_after.as_millis() as i64;
    if row.heartbeat_at < stale_before {
        let me = random_task_id();
        if engine.task_adopt(&row.id, &row.boot_id, &me, stale_before, now)? {
            let last = row
                .status_message
                .as_deref()
                .unwrap_or("no progress recorded");
            let message = format!("cancelled by an operator; no process was running it · {last}");
            let end = Ending {
                status: TaskState::Cancelled,
                status_message: &message,
                progress: &row.progress,
                result: None,
                error: None,
            };
            if engine.task_finish(&row.id, &me, &end, now_millis())? {
                tracing::info!(task = short_id(&row.id), "orphaned task cancelled");
                return Ok(OperatorCancel::Cancelled);
            }
        }
    }
    engine.task_request_cancel(&row.id, now_millis())?;
    Ok(OperatorCancel::Requested)
}

/// Where inline progress goes (the front end turns it into notifications).
pub type ProgressSink = Arc<dyn Fn(WorkProgress) + Send + Sync>;

/// Sends progress to `f` whenever the work done has grown, recording in `sent` the last value sent.
fn spawn_forwarder(
    live: Arc<Live>,
    f: ProgressSink,
    sent: Arc<Mutex<Option<u64>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut last = 0;
        loop {
            tick.tick().await;
            let p = live.progress();
            if work_done(&p) > last {
                last = work_done(&p);
                *lock(&sent) = Some(last);
                f(p);
            }
        }
    })
}

fn flatten<T>(joined: std::result::Result<Result<T>, tokio::task::JoinError>) -> Result<T> {
    joined.map_err(|e| Error::Internal(format!("background work failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::control::progress_json;

    #[test]
    fn ids_in_logs_are_short() {
        assert_eq!(short_id("0123456789abcdef"), "01234567");
    }

    #[test]
    fn short_ids_cut_between_characters() {
        assert_eq!(short_id("aéééé"), "aéééé");
        assert_eq!(short_id("ééééééééé"), "éééééééé");
        assert_eq!(short_id("日本語のタスク番号です"), "日本語のタスク番");
        assert_eq!(short_id("🦦🦦🦦🦦🦦🦦🦦🦦🦦"), "🦦🦦🦦🦦🦦🦦🦦🦦");
        assert_eq!(short_id(""), "");
    }

    fn working_row(id: &str, heartbeat_at: Millis) -> TaskRow {
        TaskRow {
            id: id.into(),
            owner: "me".into(),
            tool: "traverse".into(),
            arguments: json!({}),
            status: TaskState::Working,
            status_message: Some("visited 5 nodes · frontier 1".into()),
            progress: json!({"visited": 5}),
            result: None,
            error: None,
            created_at: heartbeat_at,
            updated_at: heartbeat_at,
            ttl_ms: Some(60_000),
            poll_interval_ms: None,
            checkpoint: None,
            boot_id: "elsewhere".into(),
            heartbeat_at,
            cancel_requested: false,
            input_requests: None,
            input_responses: None,
            grant: None,
        }
    }

    #[test]
    fn an_operator_ends_an_orphan_and_asks_a_live_task_to_stop() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(crate::Config::for_db(dir.path().join("m.db"))).unwrap();
        let stale = Duration::from_secs(3);
        let orphan = working_row("orphan", now_millis() - 10_000);
        let live = working_row("live", now_millis());
        engine.task_insert(&orphan, None).unwrap();
        engine.task_insert(&live, None).unwrap();
        assert_eq!(
            cancel_for_operator(&engine, &orphan, stale).unwrap(),
            OperatorCancel::Cancelled
        );
        let row = engine.task_get("orphan").unwrap().unwrap();
        assert_eq!(row.status, TaskState::Cancelled);
        assert_eq!(
            row.status_message.as_deref(),
            Some(
                "cancelled by an operator; no process was running it · visited 5 nodes · frontier 1"
            )
        );
        assert_eq!(
            cancel_for_operator(&engine, &row, stale).unwrap(),
            OperatorCancel::AlreadyEnded(TaskState::Cancelled)
        );
        assert_eq!(
            cancel_for_operator(&engine, &live, stale).unwrap(),
            OperatorCancel::Requested
        );
        let row = engine.task_get("live").unwrap().unwrap();
        assert_eq!(row.status, TaskState::Working);
        assert!(row.cancel_requested);
    }

    /// Work that reports nothing and runs until it is cancelled (or for 10 s at most, so that a
    /// failed test ends).
    struct Silent(WorkKind);

    impl Executor for Silent {
        fn execute(&self, _: &Engine, _: &Work, ctl: &dyn Control) -> Result<Value> {
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while !ctl.is_cancelled() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(Error::Cancelled)
        }

        fn rerunnable(&self, _: &Work) -> bool {
            false
        }

        fn work_kind(&self, _: &Work) -> WorkKind {
            self.0
        }
    }

    /// Starts `tool` as a task of owner `me`; its row.
    async fn start_task(tasks: &Arc<Tasks>, tool: &str, args: Value) -> Box<TaskRow> {
        let answer = tasks
            .run(
                &Requester::full("me"),
                tool,
                Work::Probe {
                    name: tool.into(),
                    args,
                },
                Plan::Task.into(),
                None,
                None,
                None,
                std::future::pending(),
            )
            .await
            .expect("the task starts");
        let Answer::Task(row) = answer else {
            panic!("a task was asked for");
        };
        row
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_reads_as_its_kind_of_work_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let engine =
            Arc::new(Engine::open(crate::Config::for_db(dir.path().join("m.db"))).unwrap());
        for (kind, tool, wording) in [
            (WorkKind::Import, "import", "imported 0 items"),
            (WorkKind::Export, "export", "exported 0 items"),
            (WorkKind::Walk, "traverse", "visited 0 nodes"),
        ] {
            let tasks = Tasks::new(
                Arc::clone(&engine),
                TaskConfig::default(),
                Arc::new(Silent(kind)),
            );
            let row = start_task(&tasks, tool, json!({})).await;
            let first = row.status_message.clone().unwrap_or_default();
            assert!(first.starts_with(wording), "{tool}: {first}");
            let view = tasks.get(&Requester::full("me"), &row.id).unwrap().unwrap();
            let live = view.status_message().unwrap_or_default();
            assert!(live.starts_with(wording), "{tool}: {live}");
            assert_eq!(
                view.progress_json(),
                progress_json(&WorkProgress {
                    kind,
                    ..WorkProgress::default()
                })
            );
            assert!(tasks.cancel(Some(&Requester::full("me")), &row.id).unwrap());
        }
    }

    /// Work that asks the client for the keys in `args["ask"]` (one round per inner list) and
    /// returns every answer.
    struct Asker;

    impl Executor for Asker {
        fn execute(&self, _: &Engine, work: &Work, ctl: &dyn Control) -> Result<Value> {
            let Work::Probe { args, .. } = work else {
                return Err(Error::Internal("not a probe".into()));
            };
            let mut all = serde_json::Map::new();
            for round in args["ask"].as_array().into_iter().flatten() {
                let requests = round
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|key| {
                        let request = json!({"method": "elicitation/create", "params": {
                            "mode": "form", "message": format!("{key}?"),
                            "requestedSchema": {"type": "object", "properties": {}}}});
                        (key.to_owned(), request)
                    })
                    .collect();
                all.extend(ctl.ask(&requests, Duration::from_secs(600))?);
            }
            Ok(Value::Object(all))
        }

        fn rerunnable(&self, _: &Work) -> bool {
            true
        }
    }

    fn asker(dir: &tempfile::TempDir) -> Arc<Tasks> {
        let engine =
            Arc::new(Engine::open(crate::Config::for_db(dir.path().join("m.db"))).unwrap());
        Tasks::new(engine, TaskConfig::default(), Arc::new(Asker))
    }

    async fn start(tasks: &Arc<Tasks>, args: Value) -> String {
        start_task(tasks, "ask", args).await.id
    }

    /// Polls task `id` until `done` holds for it (5 s at most).
    async fn until(tasks: &Arc<Tasks>, id: &str, done: impl Fn(&TaskRow) -> bool) -> TaskRow {
        for _ in 0..500 {
            let row = tasks.get(&Requester::full("me"), id).unwrap().unwrap().row;
            if done(&row) {
                return row;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {id} did not get there");
    }

    fn answers(pairs: &[(&str, Value)]) -> serde_json::Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_waits_for_input_and_goes_on_once_every_request_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = asker(&dir);
        let id = start(&tasks, json!({"ask": [["a", "b"], ["c"]]})).await;
        let row = until(&tasks, &id, |r| r.status == TaskState::InputRequired).await;
        let pending = row.input_requests.clone().unwrap();
        assert_eq!(pending.as_object().unwrap().len(), 2, "{pending}");
        assert_eq!(pending["a"]["method"], "elicitation/create");
        assert_eq!(
            row.status_message.as_deref(),
            Some("waiting for input · 2 requests")
        );

        // Another owner cannot answer, nor see that the task exists.
        assert!(
            !tasks
                .update(
                    &Requester::full("someone else"),
                    &id,
                    &answers(&[("a", json!(1))])
                )
                .unwrap()
        );
        // A partial answer (with a key nobody asked for) leaves the other request pending.
        assert!(
            tasks
                .update(
                    &Requester::full("me"),
                    &id,
                    &answers(&[("a", json!(1)), ("zz", json!(0))])
                )
                .unwrap()
        );
        let row = tasks.get(&Requester::full("me"), &id).unwrap().unwrap().row;
        assert_eq!(row.status, TaskState::InputRequired);
        let left: Vec<_> = row
            .input_requests
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(left, ["b"]);

        assert!(
            tasks
                .update(&Requester::full("me"), &id, &answers(&[("b", json!(2))]))
                .unwrap()
        );
        // The second round asks again; its answer ends the work.
        let row = until(&tasks, &id, |r| {
            r.status == TaskState::InputRequired
                && r.input_requests
                    .as_ref()
                    .is_some_and(|q| q.get("c").is_some())
        })
        .await;
        assert_eq!(row.input_requests.unwrap().as_object().unwrap().len(), 1);
        assert!(
            tasks
                .update(&Requester::full("me"), &id, &answers(&[("c", json!(3))]))
                .unwrap()
        );
        let row = until(&tasks, &id, |r| r.status.is_terminal()).await;
        assert_eq!(row.status, TaskState::Completed);
        assert_eq!(row.result, Some(json!({"a": 1, "b": 2, "c": 3})));
        assert_eq!(row.input_requests, None);
        // An update of a finished task is acknowledged and changes nothing.
        assert!(
            tasks
                .update(&Requester::full("me"), &id, &answers(&[("c", json!(4))]))
                .unwrap()
        );
        assert_eq!(
            tasks
                .get(&Requester::full("me"), &id)
                .unwrap()
                .unwrap()
                .row
                .result,
            row.result
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_waiting_for_input_can_be_cancelled() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = asker(&dir);
        let id = start(&tasks, json!({"ask": [["a"]]})).await;
        until(&tasks, &id, |r| r.status == TaskState::InputRequired).await;
        assert!(tasks.cancel(Some(&Requester::full("me")), &id).unwrap());
        let row = until(&tasks, &id, |r| r.status.is_terminal()).await;
        assert_eq!(row.status, TaskState::Cancelled);
        assert_eq!(row.input_requests, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_a_task_can_wait_for_input() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = asker(&dir);
        let answer = tasks
            .run(
                &Requester::full("me"),
                "ask",
                Work::Probe {
                    name: "ask".into(),
                    args: json!({"ask": [["a"]]}),
                },
                Plan::Inline.into(),
                None,
                None,
                None,
                std::future::pending(),
            )
            .await
            .unwrap();
        let Answer::Inline(Err(e)) = answer else {
            panic!("an inline call cannot wait for input");
        };
        assert!(e.is_user_error(), "{e}");
        assert!(e.to_string().contains("MCP tasks"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_given_while_no_process_ran_the_task_are_used_when_it_runs_again() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = asker(&dir);
        // A task whose process died while it waited; the client answered through another one.
        let mut row = working_row("orphan", now_millis() - 10_000);
        row.tool = "ask".into();
        row.arguments = serde_json::to_value(Work::Probe {
            name: "ask".into(),
            args: json!({"ask": [["a", "b"]]}),
        })
        .unwrap();
        row.status = TaskState::InputRequired;
        row.input_requests = Some(json!({"a": {}, "b": {}}));
        tasks.engine().task_insert(&row, None).unwrap();
        let answered = answers(&[("a", json!("yes")), ("b", json!("no"))]);
        assert!(
            tasks
                .update(&Requester::full("me"), "orphan", &answered)
                .unwrap()
        );
        assert_eq!(
            tasks.engine().task_get("orphan").unwrap().unwrap().status,
            TaskState::Working
        );
        // This process adopts it, re-runs it, and the work finds its answers in the row.
        tasks.maintain().await.unwrap();
        let row = until(&tasks, "orphan", |r| r.status.is_terminal()).await;
        assert_eq!(row.status, TaskState::Completed, "{:?}", row.status_message);
        assert_eq!(row.result, Some(json!({"a": "yes", "b": "no"})));
    }
}
