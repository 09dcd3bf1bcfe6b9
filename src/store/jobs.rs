//! Jobs: one row per job (namespace and name, state, head version), its versions (checkpoints
//! with their parents), and the memories and task results filed under it. A checkpoint is
//! written only from the version it was read at: the head moves by a compare-and-set in the
//! writing transaction, so two writers from the same version cannot both win.

use super::{Arg, Db, Row, args};
use crate::error::Result;
use crate::model::{JobRef, JobResult, JobRow, JobVersion, MemoryKey, Millis};

const JOB_COLS: &str =
    "namespace, name, state, head, created_by, created_at, updated_at, closed_at";
const VERSION_COLS: &str = "version, parent, reverts_to, body, author, task_id, created_at";
const RESULT_COLS: &str = "task_id, tool, status, summary, result, finished_at, reach";

fn json(s: Option<String>) -> Option<serde_json::Value> {
    s.and_then(|s| serde_json::from_str(&s).ok())
}

fn job_row(r: &Row<'_>) -> Result<JobRow> {
    Ok(JobRow {
        namespace: r.get(0)?,
        name: r.get(1)?,
        state: r.get(2)?,
        head: r.get(3)?,
        created_by: r.get(4)?,
        created_at: r.get(5)?,
        updated_at: r.get(6)?,
        closed_at: r.get(7)?,
    })
}

fn version_row(r: &Row<'_>) -> Result<JobVersion> {
    Ok(JobVersion {
        version: r.get(0)?,
        parent: r.get(1)?,
        reverts_to: r.get(2)?,
        body: json(r.get(3)?).unwrap_or_default(),
        author: r.get(4)?,
        task_id: r.get(5)?,
        created_at: r.get(6)?,
    })
}

fn result_row(r: &Row<'_>) -> Result<JobResult> {
    Ok(JobResult {
        task_id: r.get(0)?,
        tool: r.get(1)?,
        status: r.get(2)?,
        summary: r.get(3)?,
        result: json(r.get(4)?),
        finished_at: r.get(5)?,
        reach: json(r.get(6)?),
    })
}

/// The job `name` of `namespace`.
pub fn get(db: &Db, namespace: &str, name: &str) -> Result<Option<JobRow>> {
    db.query_opt(
        &format!("SELECT {JOB_COLS} FROM jobs WHERE namespace = ?1 AND name = ?2"),
        args![namespace, name],
        job_row,
    )
}

/// The job `name` of `namespace`, created open (by `by`, at `now`) when there is none.
pub fn open(db: &Db, namespace: &str, name: &str, by: &str, now: Millis) -> Result<JobRow> {
    db.execute(
        "INSERT INTO jobs (namespace, name, state, head, created_by, created_at, updated_at) \
         VALUES (?1, ?2, 'open', 0, ?3, ?4, ?4) ON CONFLICT (namespace, name) DO NOTHING",
        args![namespace, name, by, now],
    )?;
    get(db, namespace, name)?
        .ok_or_else(|| crate::error::Error::Internal(format!("job {name} of {namespace} vanished")))
}

/// A new checkpoint `body` of an open job, written from version `base`: the job's head moves
/// from `base` to `base + 1` and the version is stored with `base` as its parent. `Ok(None)`
/// when the head is no longer `base` (another writer was first) or the job is closed or gone:
/// nothing is written, and the caller reads the job again to say why.
#[allow(clippy::too_many_arguments)]
pub fn checkpoint(
    db: &Db,
    namespace: &str,
    name: &str,
    base: i64,
    body: &serde_json::Value,
    reverts_to: Option<i64>,
    author: &str,
    task_id: Option<&str>,
    now: Millis,
) -> Result<Option<i64>> {
    let version = base + 1;
    let moved = db.execute(
        "UPDATE jobs SET head = ?3, updated_at = ?4 \
         WHERE namespace = ?1 AND name = ?2 AND head = ?5 AND state = 'open'",
        args![namespace, name, version, now, base],
    )?;
    if moved != 1 {
        return Ok(None);
    }
    db.execute(
        &format!(
            "INSERT INTO job_versions (namespace, job, {VERSION_COLS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
        ),
        args![
            namespace,
            name,
            version,
            (base > 0).then_some(base),
            reverts_to,
            body.to_string(),
            author,
            task_id,
            now
        ],
    )?;
    Ok(Some(version))
}

/// Version `version` of a job.
pub fn version(db: &Db, namespace: &str, job: &str, version: i64) -> Result<Option<JobVersion>> {
    db.query_opt(
        &format!(
            "SELECT {VERSION_COLS} FROM job_versions \
             WHERE namespace = ?1 AND job = ?2 AND version = ?3"
        ),
        args![namespace, job, version],
        version_row,
    )
}

/// Up to `n` versions of a job below `before` (all when `None`), newest first.
pub fn versions(
    db: &Db,
    namespace: &str,
    job: &str,
    before: Option<i64>,
    n: usize,
) -> Result<Vec<JobVersion>> {
    db.query_all(
        &format!(
            "SELECT {VERSION_COLS} FROM job_versions \
             WHERE namespace = ?1 AND job = ?2 AND version < ?3 ORDER BY version DESC LIMIT ?4"
        ),
        args![namespace, job, before.unwrap_or(i64::MAX), n as i64],
        version_row,
    )
}

/// Closes an open job; false when it was not open.
pub fn close(db: &Db, namespace: &str, name: &str, now: Millis) -> Result<bool> {
    let n = db.execute(
        "UPDATE jobs SET state = 'closed', closed_at = ?3, updated_at = ?3 \
         WHERE namespace = ?1 AND name = ?2 AND state = 'open'",
        args![namespace, name, now],
    )?;
    Ok(n == 1)
}

/// Files memories under a job (a memory already filed, under this job or another, stays where
/// it is), noting the job's head version (0 before its first checkpoint); returns how many were
/// filed.
pub fn file_memories(
    db: &Db,
    namespace: &str,
    job: &str,
    keys: &[MemoryKey],
    now: Millis,
) -> Result<usize> {
    let head = get(db, namespace, job)?.map_or(0, |j| j.head);
    let mut n = 0;
    for k in keys {
        n += db.execute(
            "INSERT INTO job_memories (memory_key, namespace, job, added_at, head_version) \
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (memory_key) DO NOTHING",
            args![k.0, namespace, job, now, head],
        )?;
    }
    Ok(n)
}

/// Up to `n` of the memories filed under a job while its head was `version` or later (what
/// was learned since that checkpoint), newest first, and how many there are.
pub fn memories_since(
    db: &Db,
    namespace: &str,
    job: &str,
    version: i64,
    n: usize,
) -> Result<(Vec<MemoryKey>, i64)> {
    let keys = db.query_all(
        "SELECT memory_key FROM job_memories WHERE namespace = ?1 AND job = ?2 \
         AND head_version >= ?3 ORDER BY added_at DESC, memory_key DESC LIMIT ?4",
        args![namespace, job, version, n as i64],
        |r| Ok(MemoryKey(r.get(0)?)),
    )?;
    let total = db.query_one(
        "SELECT count(*) FROM job_memories WHERE namespace = ?1 AND job = ?2 \
         AND head_version >= ?3",
        args![namespace, job, version],
        |r| r.get(0),
    )?;
    Ok((keys, total))
}

/// The job each of `keys` is filed under, if any (for curation, which keeps jobs apart).
pub fn jobs_of(db: &Db, keys: &[MemoryKey]) -> Result<Vec<(MemoryKey, JobRef)>> {
    let raw: Vec<i64> = keys.iter().map(|k| k.0).collect();
    let mut out = Vec::new();
    super::in_chunks(&raw, |marks, list| {
        db.for_each(
            &format!(
                "SELECT memory_key, namespace, job FROM job_memories WHERE memory_key IN ({marks})"
            ),
            list,
            |r| {
                let job = JobRef {
                    namespace: r.get(1)?,
                    name: r.get(2)?,
                };
                out.push((MemoryKey(r.get(0)?), job));
                Ok(())
            },
        )
    })?;
    out.sort_by_key(|(k, _)| *k);
    out.dedup_by(|a, b| a.0 == b.0);
    Ok(out)
}

/// Those of `keys` whose job keeps them from being archived: filed under a job that is open
/// (or has no row), or that was closed after `closed_before`.
pub fn kept_by_jobs(db: &Db, keys: &[MemoryKey], closed_before: Millis) -> Result<Vec<MemoryKey>> {
    let raw: Vec<i64> = keys.iter().map(|k| k.0).collect();
    let mut out = Vec::new();
    super::in_chunks(&raw, |marks, list| {
        let mut args = list.to_vec();
        args.push(Arg::Int(closed_before));
        db.for_each(
            &format!(
                "SELECT m.memory_key FROM job_memories m LEFT JOIN jobs j \
                 ON j.namespace = m.namespace AND j.name = m.job \
                 WHERE m.memory_key IN ({marks}) \
                 AND (j.state IS NULL OR j.state = 'open' OR j.closed_at > ?)"
            ),
            &args,
            |r| {
                out.push(MemoryKey(r.get(0)?));
                Ok(())
            },
        )
    })?;
    Ok(out)
}

/// Closed jobs of `namespace` that have no summary yet, oldest closed first (at most `n`).
pub fn closed_unsummarised(db: &Db, namespace: &str, n: usize) -> Result<Vec<JobRow>> {
    db.query_all(
        &format!(
            "SELECT {JOB_COLS} FROM jobs WHERE namespace = ?1 AND state = 'closed' \
             AND summary_key IS NULL ORDER BY closed_at, name LIMIT ?2"
        ),
        args![namespace, n as i64],
        job_row,
    )
}

/// Whether job `name` of `namespace` is closed and has no summary yet.
pub fn unsummarised(db: &Db, namespace: &str, name: &str) -> Result<bool> {
    Ok(db
        .query_opt(
            "SELECT 1 FROM jobs WHERE namespace = ?1 AND name = ?2 AND state = 'closed' \
             AND summary_key IS NULL",
            args![namespace, name],
            |r| r.get::<i64>(0),
        )?
        .is_some())
}

/// Records the memory that summarises a closed job.
pub fn set_summary(db: &Db, namespace: &str, name: &str, key: MemoryKey) -> Result<()> {
    db.execute(
        "UPDATE jobs SET summary_key = ?3 WHERE namespace = ?1 AND name = ?2",
        args![namespace, name, key.0],
    )?;
    Ok(())
}

/// Closed jobs of `namespace` whose context is due to be archived: closed at or before
/// `closed_before`, summarised, not archived yet (at most `n`).
pub fn due_for_archive(
    db: &Db,
    namespace: &str,
    closed_before: Millis,
    n: usize,
) -> Result<Vec<JobRow>> {
    db.query_all(
        &format!(
            "SELECT {JOB_COLS} FROM jobs WHERE namespace = ?1 AND state = 'closed' \
             AND closed_at <= ?2 AND summary_key IS NOT NULL AND archived_at IS NULL \
             ORDER BY closed_at, name LIMIT ?3"
        ),
        args![namespace, closed_before, n as i64],
        job_row,
    )
}

/// Records that a closed job's context was archived.
pub fn set_archived(db: &Db, namespace: &str, name: &str, now: Millis) -> Result<()> {
    db.execute(
        "UPDATE jobs SET archived_at = ?3 WHERE namespace = ?1 AND name = ?2",
        args![namespace, name, now],
    )?;
    Ok(())
}

/// Up to `n` keys of the memories filed under a job, above `after`, in key order.
pub fn memory_keys(
    db: &Db,
    namespace: &str,
    job: &str,
    after: MemoryKey,
    n: usize,
) -> Result<Vec<MemoryKey>> {
    db.query_all(
        "SELECT memory_key FROM job_memories WHERE namespace = ?1 AND job = ?2 \
         AND memory_key > ?3 ORDER BY memory_key LIMIT ?4",
        args![namespace, job, after.0, n as i64],
        |r| Ok(MemoryKey(r.get(0)?)),
    )
}

/// Files (or replaces) the outcome of task `r.task_id` under a job.
pub fn file_result(db: &Db, namespace: &str, job: &str, r: &JobResult) -> Result<()> {
    let result = r.result.as_ref().map(serde_json::Value::to_string);
    let reach = r.reach.as_ref().map(serde_json::Value::to_string);
    db.execute(
        &format!(
            "INSERT INTO job_results (namespace, job, {RESULT_COLS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (task_id) DO UPDATE SET \
             status = excluded.status, summary = excluded.summary, result = excluded.result, \
             finished_at = excluded.finished_at"
        ),
        &[
            Arg::Text(namespace),
            Arg::Text(job),
            Arg::Text(&r.task_id),
            Arg::Text(&r.tool),
            Arg::Text(&r.status),
            Arg::Text(&r.summary),
            result.as_deref().map_or(Arg::Null, Arg::Text),
            Arg::Int(r.finished_at),
            reach.as_deref().map_or(Arg::Null, Arg::Text),
        ],
    )?;
    Ok(())
}

/// Brings a running task's result up to date at a checkpoint (`summary`: where it stands);
/// false when the task is not filed under a job, or has ended.
pub fn result_progressed(db: &Db, task_id: &str, summary: &str, now: Millis) -> Result<bool> {
    let n = db.execute(
        "UPDATE job_results SET summary = ?2, finished_at = ?3 \
         WHERE task_id = ?1 AND status = 'working'",
        args![task_id, summary, now],
    )?;
    Ok(n == 1)
}

/// Records how a task filed under a job ended (nothing when it is not filed under one): in the
/// transaction that ends the task, so the two never disagree.
pub fn result_ended(
    db: &Db,
    task_id: &str,
    status: &str,
    summary: &str,
    result: Option<&serde_json::Value>,
    now: Millis,
) -> Result<bool> {
    let result = result.map(serde_json::Value::to_string);
    let n = db.execute(
        "UPDATE job_results SET status = ?2, summary = ?3, result = ?4, finished_at = ?5 \
         WHERE task_id = ?1 AND status = 'working'",
        &[
            Arg::Text(task_id),
            Arg::Text(status),
            Arg::Text(summary),
            result.as_deref().map_or(Arg::Null, Arg::Text),
            Arg::Int(now),
        ],
    )?;
    Ok(n == 1)
}

/// The job task `task_id` is filed under, and its result there.
pub fn result_of(db: &Db, task_id: &str) -> Result<Option<(JobRef, JobResult)>> {
    db.query_opt(
        &format!("SELECT {RESULT_COLS}, namespace, job FROM job_results WHERE task_id = ?1"),
        args![task_id],
        |r| {
            let job = JobRef {
                namespace: r.get(7)?,
                name: r.get(8)?,
            };
            Ok((job, result_row(r)?))
        },
    )
}

/// Up to `n` of a job's task results, newest first, and how many it has.
pub fn results(db: &Db, namespace: &str, job: &str, n: usize) -> Result<(Vec<JobResult>, i64)> {
    let rows = db.query_all(
        &format!(
            "SELECT {RESULT_COLS} FROM job_results WHERE namespace = ?1 AND job = ?2 \
             ORDER BY finished_at DESC, task_id LIMIT ?3"
        ),
        args![namespace, job, n as i64],
        result_row,
    )?;
    let total = db.query_one(
        "SELECT count(*) FROM job_results WHERE namespace = ?1 AND job = ?2",
        args![namespace, job],
        |r| r.get(0),
    )?;
    Ok((rows, total))
}

/// Up to `n` jobs of `namespaces` (all for `None`), the most recently updated first.
pub fn list(db: &Db, namespaces: Option<&[String]>, n: usize) -> Result<Vec<JobRow>> {
    let mut sql = format!("SELECT {JOB_COLS} FROM jobs");
    let mut list: Vec<Arg<'_>> = Vec::new();
    if !super::namespace_in(&mut sql, &mut list, "WHERE", namespaces) {
        return Ok(Vec::new());
    }
    sql.push_str(" ORDER BY updated_at DESC, namespace, name LIMIT ?");
    list.push(Arg::Int(n as i64));
    db.query_all(&sql, &list, job_row)
}
