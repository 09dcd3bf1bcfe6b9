//! Scheduled work (`serve --consolidate-every`): every period the server starts a consolidation
//! of every namespace as a durable task of owner [`OWNER`], through the same path as a tool
//! call's task (row committed first, heartbeats, progress, cancel, adoption after a crash).
//!
//! Timing. A run is due one period after the newest scheduled run recorded in the database ended
//! (whichever process ran it), and never sooner than one period after this process's own last
//! attempt. With no scheduled run on record, the first is due one period after start, or one
//! minute after start when the period is longer: servers that MCP hosts start per session
//! rarely live six hours, and the database, not the process, remembers when the last run was.
//! So restarts never add runs, and several servers on one database make one run per period
//! between them. The schedule waits for its own task to end before it looks again, so it
//! never starts a run while its previous one is still running. When two processes are due at
//! once, the consolidation lease lets one run; the other's task completes as `skipped`, naming
//! the run that holds the database (logged at info: it is no error).
//!
//! The work is the engine's [`Work::Consolidate`] of every namespace with the default steps and
//! policy, started by [`OWNER`]; no front end is involved.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::curate::ConsolidateRequest;
use crate::engine::work::Work;
use crate::model::{Millis, TaskState, now_millis};
use crate::tasks::{Answer, Plan, Tasks, flatten, short_id};

/// Owner of scheduled tasks (and `started_by` of their runs).
pub const OWNER: &str = "scheduler";
/// The first run of a process with no scheduled run on record waits at most this long.
const FIRST_RUN_WITHIN: Duration = Duration::from_secs(60);
/// Longest single sleep: the schedule looks at the database again at least this often (another
/// process's run moves the next one; a suspended machine wakes to a correct clock).
const LOOK_AGAIN: Duration = Duration::from_secs(60);
/// How often the schedule checks whether its task has ended.
const WAIT_STEP: Duration = Duration::from_millis(200);

/// What to start, and how often.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The period (at least one second).
    pub every: Duration,
    /// What the task is listed as (the tool that starts the same work).
    pub tool: String,
    /// The work.
    pub work: Work,
}

impl Schedule {
    /// A consolidation of every namespace with the default steps and policy, every `every`.
    pub fn consolidation(every: Duration) -> Schedule {
        Schedule {
            every,
            tool: "consolidate".into(),
            work: Work::Consolidate {
                request: ConsolidateRequest {
                    started_by: OWNER.to_owned(),
                    ..ConsolidateRequest::default()
                },
                inline_limit: None,
            },
        }
    }
}

/// When the next run is due: one period after the newest scheduled run on record ended (or
/// started, when it has not ended) and after this process's last attempt; with neither, one
/// period after `started` but at most `FIRST_RUN_WITHIN`.
pub fn next_due(
    started: Millis,
    every: Duration,
    newest_run: Option<Millis>,
    last_attempt: Option<Millis>,
) -> Millis {
    let every = every.as_millis().min(i64::MAX as u128) as i64;
    let first = every.min(FIRST_RUN_WITHIN.as_millis() as i64);
    let mut due = started.saturating_add(first);
    for at in [newest_run, last_attempt].into_iter().flatten() {
        due = due.max(at.saturating_add(every));
    }
    due
}

/// A period as people write it: `6h`, `30m`, `90s`, `1h30m`.
pub fn human(every: Duration) -> String {
    let mut secs = every.as_secs();
    if secs == 0 {
        return format!("{}ms", every.as_millis());
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

impl Tasks {
    /// Starts `schedule` in the background; it ends when the process shuts down.
    pub fn start_schedule(self: &Arc<Self>, schedule: Schedule) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        tokio::spawn(async move { me.keep_schedule(schedule).await })
    }

    /// When the newest scheduled run on record ended (or started, while it runs).
    async fn newest_scheduled_run(&self) -> Option<Millis> {
        let engine = Arc::clone(self.engine());
        let newest =
            flatten(tokio::task::spawn_blocking(move || engine.newest_run_by(OWNER)).await);
        match newest {
            Ok(run) => run.map(|r| r.ended_at.unwrap_or(r.started_at)),
            Err(e) => {
                tracing::warn!(error = %e, "could not read when the last scheduled run was; timing the next from this process's own runs");
                None
            }
        }
    }

    async fn keep_schedule(self: Arc<Self>, schedule: Schedule) {
        let started = now_millis();
        let every = schedule.every.max(Duration::from_secs(1));
        let mut last_attempt: Option<Millis> = None;
        let mut announced = false;
        loop {
            if self.is_shutting_down() {
                return;
            }
            let newest = self.newest_scheduled_run().await;
            let due = next_due(started, every, newest, last_attempt);
            let now = now_millis();
            if !announced {
                announced = true;
                tracing::info!(
                    tool = %schedule.tool,
                    every = %human(every),
                    first_in = %human(Duration::from_millis(due.saturating_sub(now).max(0) as u64)),
                    "scheduled: a run of every namespace as a task of owner `{OWNER}`"
                );
            }
            if now < due {
                let wait = Duration::from_millis((due - now) as u64).min(LOOK_AGAIN);
                tokio::time::sleep(wait).await;
                continue;
            }
            last_attempt = Some(now);
            self.run_once(&schedule).await;
        }
    }

    /// Starts one scheduled task and waits for it to end.
    async fn run_once(self: &Arc<Self>, schedule: &Schedule) {
        let answer = self
            .run(
                &super::Requester::full(OWNER),
                &schedule.tool,
                schedule.work.clone(),
                Plan::Task.into(),
                None,
                None,
                None,
                std::future::pending(),
            )
            .await;
        let id = match answer {
            Ok(Answer::Task(row)) => row.id,
            Ok(Answer::Inline(out)) => {
                // A plan of `Task` always makes a task; should that change, say what happened.
                tracing::warn!(ok = out.is_ok(), tool = %schedule.tool, "scheduled work was answered inline");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, tool = %schedule.tool, "could not start the scheduled task; trying again next period");
                return;
            }
        };
        tracing::info!(task = short_id(&id), tool = %schedule.tool, "scheduled task started");
        while self.runs_here(&id) {
            tokio::time::sleep(WAIT_STEP).await;
        }
        if self.is_shutting_down() {
            return;
        }
        let engine = Arc::clone(self.engine());
        let id2 = id.clone();
        match flatten(tokio::task::spawn_blocking(move || engine.task_get(&id2)).await) {
            Ok(Some(row)) if row.status == TaskState::Failed => tracing::warn!(
                task = short_id(&id),
                status_message = row.status_message.as_deref().unwrap_or(""),
                "scheduled task failed"
            ),
            Ok(Some(row)) => tracing::info!(
                task = short_id(&id),
                status = row.status.as_str(),
                status_message = row.status_message.as_deref().unwrap_or(""),
                "scheduled task ended"
            ),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(task = short_id(&id), error = %e, "could not read how the scheduled task ended")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;

    #[test]
    fn the_first_run_waits_a_period_or_a_minute_and_later_ones_follow_the_database() {
        let six = Duration::from_secs(6 * 3_600);
        // Nothing on record: a minute after start for long periods, a period for short ones.
        assert_eq!(next_due(1_000, six, None, None), 1_000 + MIN);
        assert_eq!(next_due(1_000, Duration::from_secs(1), None, None), 2_000);
        // A scheduled run ended an hour before start: due five hours after start.
        let start = 10 * HOUR;
        assert_eq!(
            next_due(start, six, Some(start - HOUR), None),
            start + 5 * HOUR
        );
        // Ended long ago: a minute after start.
        assert_eq!(
            next_due(start, six, Some(start - 9 * HOUR), None),
            start + MIN
        );
        // After an attempt that was skipped (another process ran): a period after either.
        assert_eq!(
            next_due(start, six, Some(start + 2 * MIN), Some(start + MIN)),
            start + 2 * MIN + 6 * HOUR
        );
        assert_eq!(
            next_due(start, six, Some(start - 9 * HOUR), Some(start + MIN)),
            start + MIN + 6 * HOUR
        );
    }

    #[test]
    fn periods_read_as_written() {
        assert_eq!(human(Duration::from_secs(6 * 3_600)), "6h");
        assert_eq!(human(Duration::from_secs(90)), "1m30s");
        assert_eq!(human(Duration::from_secs(1)), "1s");
        assert_eq!(human(Duration::from_secs(86_400 + 60)), "1d1m");
    }
}
