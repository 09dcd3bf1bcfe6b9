//! Task rows: the durable registry behind MCP tasks. Every process on the database sees every row;
//! a live row (`working`, or `input_required` while it waits for the client) belongs to the
//! process whose `boot_id` it carries while its heartbeat is fresh.

use super::{Db, Row, args};
use crate::error::Result;
use crate::model::{Millis, TaskRow, TaskState};

const COLS: &str = "id, owner, tool, arguments, status, status_message, progress, result, error, \
    created_at, updated_at, ttl_ms, poll_interval_ms, checkpoint, boot_id, heartbeat_at, cancel_requested, \
    input_requests, input_responses, access_grant";

/// The statuses of a task whose work has not ended.
const LIVE: &str = "status IN ('working', 'input_required')";

fn json(s: Option<String>) -> Option<serde_json::Value> {
    s.and_then(|s| serde_json::from_str(&s).ok())
}

fn from_row(r: &Row<'_>) -> Result<TaskRow> {
    Ok(TaskRow {
        id: r.get(0)?,
        owner: r.get(1)?,
        tool: r.get(2)?,
        arguments: json(r.get(3)?).unwrap_or(serde_json::Value::Null),
        status: TaskState::parse(r.get_str(4)?),
        status_message: r.get(5)?,
        progress: json(r.get(6)?).unwrap_or(serde_json::Value::Null),
        result: json(r.get(7)?),
        error: json(r.get(8)?),
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
        ttl_ms: r.get(11)?,
        poll_interval_ms: r.get(12)?,
        checkpoint: json(r.get(13)?),
        boot_id: r.get(14)?,
        heartbeat_at: r.get(15)?,
        cancel_requested: r.get(16)?,
        input_requests: json(r.get(17)?),
        input_responses: json(r.get(18)?),
        grant: json(r.get(19)?),
    })
}

fn text(v: &Option<serde_json::Value>) -> Option<String> {
    v.as_ref().map(|v| v.to_string())
}

pub fn insert(db: &Db, t: &TaskRow) -> Result<()> {
    db.execute(
        &format!(
            "INSERT INTO tasks ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"
        ),
        args![
        t.id,
        t.owner,
        t.tool,
        t.arguments.to_string(),
        t.status.as_str(),
        t.status_message,
        t.progress.to_string(),
        text(&t.result),
        text(&t.error),
        t.created_at,
        t.updated_at,
        t.ttl_ms,
        t.poll_interval_ms,
        text(&t.checkpoint),
        t.boot_id,
        t.heartbeat_at,
        t.cancel_requested,
        text(&t.input_requests),
        text(&t.input_responses),
        text(&t.grant),
        ],
    )?;
    Ok(())
}

pub fn get(db: &Db, id: &str) -> Result<Option<TaskRow>> {
    db.query_opt(
        &format!("SELECT {COLS} FROM tasks WHERE id = ?1"),
        args![id],
        from_row,
    )
}

/// Records progress of a live task this process runs (the status message only while it works,
/// not while it waits for input); returns whether cancellation was asked (by anyone), or `None`
/// when the row is no longer this process's live task.
pub fn heartbeat(
    db: &Db,
    id: &str,
    boot_id: &str,
    beat: &Beat<'_>,
    now: Millis,
) -> Result<Option<bool>> {
    db.query_opt(
        &format!(
            "UPDATE tasks SET status_message = CASE status WHEN 'working' THEN ?3 ELSE status_message END, \
             progress = ?4, checkpoint = coalesce(?5, checkpoint), \
             poll_interval_ms = coalesce(?7, poll_interval_ms), \
             heartbeat_at = ?6, updated_at = ?6 WHERE id = ?1 AND boot_id = ?2 AND {LIVE} \
             RETURNING cancel_requested"
        ),
        args![
            id,
            boot_id,
            beat.status_message,
            beat.progress.to_string(),
            beat.checkpoint.map(|c| c.to_string()),
            now,
            beat.poll_interval_ms
        ],
        |r| r.get(0),
    )
}

/// What a heartbeat records of a live task.
#[derive(Debug, Clone, Copy)]
pub struct Beat<'a> {
    pub status_message: &'a str,
    pub progress: &'a serde_json::Value,
    /// Where a resumed task starts again (`None`: the stored one stays).
    pub checkpoint: Option<&'a serde_json::Value>,
    /// How long a poller should wait now (`None`: the stored advice stays).
    pub poll_interval_ms: Option<i64>,
}

/// How a task ends: its terminal state, last word and progress, and its result or error.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub status: TaskState,
    pub status_message: &'a str,
    pub progress: &'a serde_json::Value,
    pub result: Option<&'a serde_json::Value>,
    pub error: Option<&'a serde_json::Value>,
}

/// Moves a live task of this process to a terminal state; false when it was not ours or not live.
pub fn finish(db: &Db, id: &str, boot_id: &str, end: &Ending<'_>, now: Millis) -> Result<bool> {
    let n = db.execute(
        &format!(
            "UPDATE tasks SET status = ?3, status_message = ?4, progress = ?5, result = ?6, error = ?7, \
             input_requests = NULL, updated_at = ?8, heartbeat_at = ?8 \
             WHERE id = ?1 AND boot_id = ?2 AND {LIVE}"
        ),
        args![
            id,
            boot_id,
            end.status.as_str(),
            end.status_message,
            end.progress.to_string(),
            end.result.map(|v| v.to_string()),
            end.error.map(|v| v.to_string()),
            now
        ],
    )?;
    Ok(n == 1)
}

/// Asks the process running a task to stop it.
pub fn request_cancel(db: &Db, id: &str, now: Millis) -> Result<bool> {
    let n = db.execute(
        &format!("UPDATE tasks SET cancel_requested = 1, updated_at = ?2 WHERE id = ?1 AND {LIVE}"),
        args![id, now],
    )?;
    Ok(n == 1)
}

/// Marks a live task cancelled whatever process ran it (used for orphans and by operators).
pub fn force_cancel(db: &Db, id: &str, message: &str, now: Millis) -> Result<bool> {
    let n = db.execute(
        &format!(
            "UPDATE tasks SET status = 'cancelled', status_message = ?2, cancel_requested = 1, \
             input_requests = NULL, updated_at = ?3 WHERE id = ?1 AND {LIVE}"
        ),
        args![id, message, now],
    )?;
    Ok(n == 1)
}

/// The newest tasks, of one owner or of all.
pub fn list(db: &Db, owner: Option<&str>, limit: usize) -> Result<Vec<TaskRow>> {
    db.query_all(
        &format!(
            "SELECT {COLS} FROM tasks WHERE (CAST(?1 AS TEXT) IS NULL OR owner = ?1) ORDER BY created_at DESC, id LIMIT ?2"
        ),
        args![owner, limit],
        from_row,
    )
}

/// How many tasks there are in each status.
pub fn count_by_status(db: &Db) -> Result<Vec<(String, i64)>> {
    db.query_all(
        "SELECT status, COUNT(*) FROM tasks GROUP BY status ORDER BY status",
        &[],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// Deletes tasks whose time to live has run out; returns how many.
pub fn sweep(db: &Db, now: Millis) -> Result<usize> {
    db.execute(
        &format!(
            "DELETE FROM tasks WHERE ttl_ms IS NOT NULL AND created_at + ttl_ms < ?1 AND NOT {LIVE}"
        ),
        args![now],
    )
}

/// Live tasks whose process has not shown life since `stale_before`.
pub fn orphans(db: &Db, stale_before: Millis) -> Result<Vec<TaskRow>> {
    db.query_all(
        &format!("SELECT {COLS} FROM tasks WHERE {LIVE} AND heartbeat_at < ?1 ORDER BY created_at"),
        args![stale_before],
        from_row,
    )
}

/// Takes over an orphaned task; true for exactly one of the processes that try.
pub fn adopt(
    db: &Db,
    id: &str,
    old_boot: &str,
    new_boot: &str,
    stale_before: Millis,
    now: Millis,
) -> Result<bool> {
    let n = db.execute(
        &format!(
            "UPDATE tasks SET boot_id = ?3, heartbeat_at = ?5, updated_at = ?5 \
             WHERE id = ?1 AND boot_id = ?2 AND {LIVE} AND heartbeat_at < ?4"
        ),
        args![id, old_boot, new_boot, stale_before, now],
    )?;
    Ok(n == 1)
}

/// Saves where a resumable task goes on from, inside the transaction that committed the work it
/// describes (so the two never disagree). False when the row is gone or its work has ended.
pub fn set_checkpoint(db: &Db, id: &str, checkpoint: &serde_json::Value) -> Result<bool> {
    let n = db.execute(
        &format!("UPDATE tasks SET checkpoint = ?2 WHERE id = ?1 AND {LIVE}"),
        args![id, checkpoint.to_string()],
    )?;
    Ok(n > 0)
}

/// Parks a live task of this process until the client answers `requests` (a JSON object by
/// key): status `input_required`. False when the row is not this process's live task.
pub fn await_input(
    db: &Db,
    id: &str,
    boot_id: &str,
    requests: &serde_json::Value,
    status_message: &str,
    now: Millis,
) -> Result<bool> {
    let n = db.execute(
        &format!(
            "UPDATE tasks SET status = 'input_required', input_requests = ?3, status_message = ?4, \
             updated_at = ?5 WHERE id = ?1 AND boot_id = ?2 AND {LIVE}"
        ),
        args![id, boot_id, requests.to_string(), status_message, now],
    )?;
    Ok(n == 1)
}

/// Stops waiting for the client's input (its time is up): the requests still pending are
/// recorded as answered `null` (the work takes its default for them, and a re-run does not ask
/// again), and the task is `working` again. False when the task was not waiting (answered
/// meanwhile, or no longer this process's live task). Read and written in the caller's one
/// transaction.
pub fn give_up_input(
    db: &Db,
    id: &str,
    boot_id: &str,
    status_message: &str,
    now: Millis,
) -> Result<bool> {
    use serde_json::{Map, Value};
    let row: Option<(Option<String>, Option<String>)> = db.query_opt(
        "SELECT input_requests, input_responses FROM tasks WHERE id = ?1 AND boot_id = ?2 \
         AND status = 'input_required'",
        args![id, boot_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let Some((requests, answers)) = row else {
        return Ok(false);
    };
    let object = |s: Option<String>| match json(s) {
        Some(Value::Object(o)) => o,
        _ => Map::new(),
    };
    let mut answered = object(answers);
    for key in object(requests).keys() {
        answered.entry(key.clone()).or_insert(Value::Null);
    }
    let n = db.execute(
        "UPDATE tasks SET status = 'working', input_requests = NULL, input_responses = ?3, \
         status_message = ?4, updated_at = ?5 WHERE id = ?1 AND boot_id = ?2 \
         AND status = 'input_required'",
        args![
            id,
            boot_id,
            Value::Object(answered).to_string(),
            status_message,
            now
        ],
    )?;
    Ok(n == 1)
}

/// What [`answer_input`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The task was not waiting for input: nothing changed.
    NotWaiting,
    /// The answers to pending keys were recorded; this many requests are still unanswered
    /// (0: the task works again).
    Pending(usize),
}

/// Records the client's answers to a task waiting for input: responses to keys the task still
/// waits for move from `input_requests` to `input_responses` (others are ignored), and once none
/// is pending the task is `working` again. Read and written in the caller's one transaction.
pub fn answer_input(
    db: &Db,
    id: &str,
    responses: &serde_json::Map<String, serde_json::Value>,
    resumed_message: &str,
    now: Millis,
) -> Result<Answered> {
    use serde_json::{Map, Value};
    let row: Option<(String, Option<String>, Option<String>)> = db.query_opt(
        "SELECT status, input_requests, input_responses FROM tasks WHERE id = ?1",
        args![id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let Some((status, requests, answers)) = row else {
        return Ok(Answered::NotWaiting);
    };
    if status != "input_required" {
        return Ok(Answered::NotWaiting);
    }
    let object = |s: Option<String>| match json(s) {
        Some(Value::Object(o)) => o,
        _ => Map::new(),
    };
    let (mut pending, mut answered) = (object(requests), object(answers));
    for (key, response) in responses {
        if pending.remove(key).is_some() {
            answered.insert(key.clone(), response.clone());
        }
    }
    let left = pending.len();
    let answered = Value::Object(answered).to_string();
    if left == 0 {
        db.execute(
            "UPDATE tasks SET status = 'working', input_requests = NULL, input_responses = ?2, \
             status_message = ?3, updated_at = ?4 WHERE id = ?1",
            args![id, answered, resumed_message, now],
        )?;
    } else {
        db.execute(
            "UPDATE tasks SET input_requests = ?2, input_responses = ?3, updated_at = ?4 WHERE id = ?1",
            args![id, Value::Object(pending).to_string(), answered, now],
        )?;
    }
    Ok(Answered::Pending(left))
}
