//! Consolidation runs and leases: a row per run (who started it, policy, steps, counts,
//! checkpoint, state) and one lease row per job, so one run at a time holds the database.

use super::{Db, Row, args};
use crate::error::Result;
use crate::model::{Millis, RunRow};

const COLS: &str = "id, started_by, namespaces, steps, policy, state, counts, checkpoint, task_id, \
    started_at, ended_at, undone_at, undone_by";

fn json(s: Option<String>) -> serde_json::Value {
    s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn from_row(r: &Row<'_>) -> Result<RunRow> {
    let list = |s: String| serde_json::from_str::<Vec<String>>(&s).unwrap_or_default();
    let checkpoint: Option<String> = r.get(7)?;
    Ok(RunRow {
        id: r.get(0)?,
        started_by: r.get(1)?,
        namespaces: list(r.get(2)?),
        steps: list(r.get(3)?),
        policy: json(r.get(4)?),
        state: r.get(5)?,
        counts: json(r.get(6)?),
        checkpoint: checkpoint.map(|c| json(Some(c))),
        task_id: r.get(8)?,
        started_at: r.get(9)?,
        ended_at: r.get(10)?,
        undone_at: r.get(11)?,
        undone_by: r.get(12)?,
    })
}

/// Stores a new run.
pub fn insert(db: &Db, run: &RunRow) -> Result<()> {
    db.execute(
        &format!(
            "INSERT INTO runs ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        ),
        args![
            run.id,
            run.started_by,
            serde_json::to_string(&run.namespaces)?,
            serde_json::to_string(&run.steps)?,
            serde_json::to_string(&run.policy)?,
            run.state,
            serde_json::to_string(&run.counts)?,
            run.checkpoint
                .as_ref()
                .map(serde_json::to_string)
                .transpose()?,
            run.task_id,
            run.started_at,
            run.ended_at,
            run.undone_at,
            run.undone_by,
        ],
    )?;
    Ok(())
}

/// A run by id.
pub fn get(db: &Db, id: &str) -> Result<Option<RunRow>> {
    db.query_opt(
        &format!("SELECT {COLS} FROM runs WHERE id = ?1"),
        args![id],
        from_row,
    )
}

/// The newest `limit` runs, newest first.
pub fn list(db: &Db, limit: usize) -> Result<Vec<RunRow>> {
    db.query_all(
        &format!("SELECT {COLS} FROM runs ORDER BY started_at DESC, id LIMIT ?1"),
        args![limit],
        from_row,
    )
}

/// The newest run started by `started_by`.
pub fn newest_by(db: &Db, started_by: &str) -> Result<Option<RunRow>> {
    db.query_opt(
        &format!(
            "SELECT {COLS} FROM runs WHERE started_by = ?1 ORDER BY started_at DESC, id LIMIT 1"
        ),
        args![started_by],
        from_row,
    )
}

/// Runs in state `state`.
pub fn in_state(db: &Db, state: &str) -> Result<Vec<RunRow>> {
    db.query_all(
        &format!("SELECT {COLS} FROM runs WHERE state = ?1 ORDER BY started_at"),
        args![state],
        from_row,
    )
}

/// Saves a run's counts and checkpoint (in the transaction of the batch they describe).
pub fn save_progress(
    db: &Db,
    id: &str,
    counts: &serde_json::Value,
    checkpoint: Option<&serde_json::Value>,
) -> Result<()> {
    db.execute(
        "UPDATE runs SET counts = ?2, checkpoint = ?3 WHERE id = ?1",
        args![
            id,
            serde_json::to_string(counts)?,
            checkpoint.map(serde_json::to_string).transpose()?
        ],
    )?;
    Ok(())
}

/// Ends a running run in `state`; false when it was not running (another process marked it
/// interrupted, and it may have been undone since: that stays).
pub fn finish(
    db: &Db,
    id: &str,
    state: &str,
    counts: &serde_json::Value,
    at: Millis,
) -> Result<bool> {
    let n = db.execute(
        "UPDATE runs SET state = ?2, counts = ?3, ended_at = ?4 WHERE id = ?1 AND state = 'running'",
        args![id, state, serde_json::to_string(counts)?, at],
    )?;
    Ok(n == 1)
}

/// Marks a run that is resumed running again (it may have been marked interrupted meanwhile);
/// false when it was undone, or is unknown.
pub fn reopen(db: &Db, id: &str) -> Result<bool> {
    let n = db.execute(
        "UPDATE runs SET state = 'running', ended_at = NULL WHERE id = ?1 AND state <> 'undone'",
        args![id],
    )?;
    Ok(n == 1)
}

/// Marks a run undone.
pub fn set_undone(db: &Db, id: &str, at: Millis, by: &str) -> Result<()> {
    db.execute(
        "UPDATE runs SET state = 'undone', undone_at = ?2, undone_by = ?3 WHERE id = ?1",
        args![id, at, by],
    )?;
    Ok(())
}

/// Who holds a lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub holder: String,
    pub run_id: Option<String>,
    pub heartbeat_at: Millis,
}

/// Who holds lease `name`, if anyone (however old its heartbeat).
pub fn lease(db: &Db, name: &str) -> Result<Option<Lease>> {
    db.query_opt(
        "SELECT holder, run_id, heartbeat_at FROM leases WHERE name = ?1",
        args![name],
        |r| {
            Ok(Lease {
                holder: r.get(0)?,
                run_id: r.get(1)?,
                heartbeat_at: r.get(2)?,
            })
        },
    )
}

/// Takes lease `name` for `holder` when it is free, already `holder`'s, or its heartbeat is
/// older than `stale_ms`; otherwise returns who holds it.
pub fn take_lease(
    db: &Db,
    name: &str,
    holder: &str,
    run_id: Option<&str>,
    now: Millis,
    stale_ms: i64,
) -> Result<std::result::Result<(), Lease>> {
    if let Some(l) = lease(db, name)?
        && l.holder != holder
        && now - l.heartbeat_at < stale_ms
    {
        return Ok(Err(l));
    }
    db.execute(
        "INSERT INTO leases (name, holder, run_id, heartbeat_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (name) DO UPDATE SET holder = ?2, run_id = ?3, heartbeat_at = ?4",
        args![name, holder, run_id, now],
    )?;
    Ok(Ok(()))
}

/// Renews `holder`'s lease; false when it lost it.
pub fn renew_lease(db: &Db, name: &str, holder: &str, now: Millis) -> Result<bool> {
    let n = db.execute(
        "UPDATE leases SET heartbeat_at = ?3 WHERE name = ?1 AND holder = ?2",
        args![name, holder, now],
    )?;
    Ok(n == 1)
}

/// Gives lease `name` up when `holder` has it.
pub fn release_lease(db: &Db, name: &str, holder: &str) -> Result<()> {
    db.execute(
        "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
        args![name, holder],
    )?;
    Ok(())
}
