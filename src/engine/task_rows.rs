//! Task rows through the engine, so that the task runner never touches the store directly; and
//! the newest run of a starter, which the task runner's schedule is timed by.

use crate::engine::Engine;
use crate::error::Result;
use crate::model::{JobRef, JobResult, Millis, RunRow, TaskRow};
use crate::store::{jobs, runs, tasks};

impl Engine {
    /// The newest consolidation run `started_by` started (`scheduler`, `cli`, `tool:<owner>`).
    pub fn newest_run_by(&self, started_by: &str) -> Result<Option<RunRow>> {
        self.store.read(|c| runs::newest_by(c, started_by))
    }

    /// Inserts a new task row; one run under a job is filed under it (`working`) in the same
    /// transaction, so the job knows of every task it has from the moment the task exists.
    pub fn task_insert(&self, t: &TaskRow, job: Option<(&JobRef, &JobResult)>) -> Result<()> {
        self.store.write(|tx| {
            tasks::insert(tx, t)?;
            if let Some((job, filed)) = job {
                jobs::open(tx, &job.namespace, &job.name, &t.owner, t.created_at)?;
                jobs::file_result(tx, &job.namespace, &job.name, filed)?;
            }
            Ok(())
        })
    }

    pub fn task_get(&self, id: &str) -> Result<Option<TaskRow>> {
        self.store.read(|c| tasks::get(c, id))
    }

    /// Records a heartbeat of a live task this process runs (see [`tasks::heartbeat`]).
    pub fn task_heartbeat(
        &self,
        id: &str,
        boot_id: &str,
        beat: &tasks::Beat<'_>,
        now: Millis,
    ) -> Result<Option<bool>> {
        self.store
            .write(|tx| tasks::heartbeat(tx, id, boot_id, beat, now))
    }

    /// Ends a live task this process runs (see [`tasks::finish`]).
    pub fn task_finish(
        &self,
        id: &str,
        boot_id: &str,
        end: &tasks::Ending<'_>,
        now: Millis,
    ) -> Result<bool> {
        self.store.write(|tx| {
            let ended = tasks::finish(tx, id, boot_id, end, now)?;
            if ended {
                jobs::result_ended(
                    tx,
                    id,
                    end.status.as_str(),
                    end.status_message,
                    end.result.or(end.error),
                    now,
                )?;
            }
            Ok(ended)
        })
    }

    pub fn task_request_cancel(&self, id: &str, now: Millis) -> Result<bool> {
        self.store.write(|tx| tasks::request_cancel(tx, id, now))
    }

    pub fn task_force_cancel(&self, id: &str, message: &str, now: Millis) -> Result<bool> {
        self.store.write(|tx| {
            let ended = tasks::force_cancel(tx, id, message, now)?;
            if ended {
                jobs::result_ended(tx, id, "cancelled", message, None, now)?;
            }
            Ok(ended)
        })
    }

    /// Brings the result of a running task filed under a job up to date at a checkpoint.
    pub fn task_progressed_in_job(&self, id: &str, summary: &str, now: Millis) -> Result<bool> {
        self.store
            .write(|tx| jobs::result_progressed(tx, id, summary, now))
    }

    /// The job task `id` is filed under, if any, with its result there.
    pub fn task_job(&self, id: &str) -> Result<Option<(JobRef, JobResult)>> {
        self.store.read(|c| jobs::result_of(c, id))
    }

    pub fn task_list(&self, owner: Option<&str>, limit: usize) -> Result<Vec<TaskRow>> {
        self.store.read(|c| tasks::list(c, owner, limit))
    }

    /// How many tasks there are in each status (`working`, `completed`, …).
    pub fn task_counts(&self) -> Result<Vec<(String, i64)>> {
        self.store.read(tasks::count_by_status)
    }

    pub fn task_sweep(&self, now: Millis) -> Result<usize> {
        self.store.write(|tx| tasks::sweep(tx, now))
    }

    pub fn task_orphans(&self, stale_before: Millis) -> Result<Vec<TaskRow>> {
        self.store.read(|c| tasks::orphans(c, stale_before))
    }

    pub fn task_adopt(
        &self,
        id: &str,
        old_boot: &str,
        new_boot: &str,
        stale_before: Millis,
        now: Millis,
    ) -> Result<bool> {
        self.store
            .write(|tx| tasks::adopt(tx, id, old_boot, new_boot, stale_before, now))
    }

    /// Parks a live task of process `boot_id` until the client answers `requests`.
    pub fn task_await_input(
        &self,
        id: &str,
        boot_id: &str,
        requests: &serde_json::Value,
        status_message: &str,
        now: Millis,
    ) -> Result<bool> {
        self.store
            .write(|tx| tasks::await_input(tx, id, boot_id, requests, status_message, now))
    }

    /// Stops a task's wait for input whose time is up (see [`tasks::give_up_input`]).
    pub fn task_give_up_input(
        &self,
        id: &str,
        boot_id: &str,
        status_message: &str,
        now: Millis,
    ) -> Result<bool> {
        self.store
            .write(|tx| tasks::give_up_input(tx, id, boot_id, status_message, now))
    }

    /// Records the client's answers to a task waiting for input (see [`tasks::answer_input`]).
    pub fn task_answer_input(
        &self,
        id: &str,
        responses: &serde_json::Map<String, serde_json::Value>,
        resumed_message: &str,
        now: Millis,
    ) -> Result<tasks::Answered> {
        self.store
            .write(|tx| tasks::answer_input(tx, id, responses, resumed_message, now))
    }
}
