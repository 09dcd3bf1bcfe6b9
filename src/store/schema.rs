//! The schema and its migrations, keyed by `PRAGMA user_version`.

use rusqlite::Connection;

use crate::error::{Error, Result};

/// Version this build writes.
pub const SCHEMA_VERSION: i64 = 12;
/// Oldest version this build can migrate from (0 is an empty file).
pub const OLDEST_SUPPORTED_SCHEMA: i64 = 0;

const V1: &str = r#"
CREATE TABLE memories (
    key            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    namespace      TEXT NOT NULL,
    kind           TEXT NOT NULL,
    name           TEXT,
    content        TEXT NOT NULL,
    tags           TEXT NOT NULL DEFAULT '[]',
    importance     REAL NOT NULL DEFAULT 0.5,
    metadata       TEXT NOT NULL DEFAULT '{}',
    content_hash   BLOB NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    accessed_at    INTEGER,
    access_count   INTEGER NOT NULL DEFAULT 0,
    valid_from     INTEGER,
    valid_until    INTEGER,
    superseded_by  TEXT,
    embedding      BLOB,
    embedding_model TEXT,
    version        INTEGER NOT NULL DEFAULT 1,
    deleted_at     INTEGER
);
CREATE UNIQUE INDEX memories_live_name ON memories(namespace, name)
    WHERE name IS NOT NULL AND deleted_at IS NULL;
CREATE INDEX memories_hash ON memories(namespace, content_hash);
CREATE INDEX memories_ns_kind ON memories(namespace, kind);

CREATE TABLE relations (
    key            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    src            INTEGER NOT NULL REFERENCES memories(key),
    dst            INTEGER NOT NULL REFERENCES memories(key),
    kind           TEXT NOT NULL,
    weight         REAL NOT NULL DEFAULT 1.0,
    metadata       TEXT NOT NULL DEFAULT '{}',
    created_at     INTEGER NOT NULL,
    reinforced_at  INTEGER NOT NULL,
    valid_from     INTEGER,
    valid_until    INTEGER,
    deleted_at     INTEGER,
    UNIQUE (src, dst, kind)
);
CREATE INDEX relations_dst ON relations(dst);

CREATE TABLE history (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    entity      TEXT NOT NULL CHECK (entity IN ('memory', 'relation')),
    entity_key  INTEGER NOT NULL,
    op          TEXT NOT NULL,
    actor       TEXT NOT NULL,
    at          INTEGER NOT NULL,
    previous    TEXT NOT NULL
);
CREATE INDEX history_entity ON history(entity, entity_key);

CREATE TABLE changes (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_key   INTEGER,
    relation_key INTEGER,
    op           TEXT NOT NULL
);

CREATE TABLE tasks (
    id              TEXT PRIMARY KEY,
    owner           TEXT NOT NULL,
    tool            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    status          TEXT NOT NULL,
    status_message  TEXT,
    progress        TEXT NOT NULL DEFAULT '{}',
    result          TEXT,
    error           TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    ttl_ms          INTEGER,
    poll_interval_ms INTEGER,
    checkpoint      TEXT,
    boot_id         TEXT NOT NULL,
    heartbeat_at    INTEGER NOT NULL
);
CREATE INDEX tasks_owner ON tasks(owner, created_at);
"#;

/// Version 2: cross-process task cancellation and the index orphan scans use.
const V2: &str = r#"
ALTER TABLE tasks ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tasks_status ON tasks(status, heartbeat_at);
"#;

/// Version 3: looking up forgotten memories by name without a scan.
const V3: &str = r#"
CREATE INDEX memories_named ON memories(namespace, name) WHERE name IS NOT NULL;
"#;

/// Version 4: embeddings, one row per memory, tagged with the model and the memory version they
/// were computed from (the older `memories.embedding` columns stay unused so rows stay small).
const V4: &str = r#"
CREATE TABLE vectors (
    memory_key     INTEGER PRIMARY KEY REFERENCES memories(key) ON DELETE CASCADE,
    model          TEXT NOT NULL,
    version        INTEGER NOT NULL,
    dim            INTEGER NOT NULL,
    vec            BLOB NOT NULL
);
"#;

/// Version 5: identities of imported records (a MemoryGraph uuid, a LoCoMo turn id, an exported
/// memory's id), so importing the same source again adds nothing.
const V5: &str = r#"
CREATE TABLE import_keys (
    namespace   TEXT NOT NULL,
    ext         TEXT NOT NULL,
    memory_key  INTEGER NOT NULL REFERENCES memories(key) ON DELETE CASCADE,
    PRIMARY KEY (namespace, ext)
) WITHOUT ROWID;
"#;

/// Version 6: the database's identity and a random stamp on every change-log entry, so a derived
/// index can prove it was built from this database and this history (a restored backup reuses
/// positions of the change log with other entries; their stamps differ).
const V6: &str = r#"
CREATE TABLE meta (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
) WITHOUT ROWID;
ALTER TABLE changes ADD COLUMN stamp INTEGER NOT NULL DEFAULT 0;
"#;

/// Version 7: consolidation. A memory can be merged into another (`merged_into`, and it is then
/// forgotten), archived (`archived_at`: out of recall and traversal by default) and carries a
/// salience computed at `salience_at` that decays from there. History rows name the run that
/// wrote them, runs are rows, and one lease row per job keeps runs to one at a time.
const V7: &str = r#"
ALTER TABLE memories ADD COLUMN merged_into TEXT;
ALTER TABLE memories ADD COLUMN archived_at INTEGER;
ALTER TABLE memories ADD COLUMN salience REAL NOT NULL DEFAULT 0.5;
ALTER TABLE memories ADD COLUMN salience_at INTEGER NOT NULL DEFAULT 0;
UPDATE memories SET salience = importance;
ALTER TABLE history ADD COLUMN run TEXT;
CREATE INDEX history_run ON history(run, seq) WHERE run IS NOT NULL;
CREATE TABLE runs (
    id          TEXT PRIMARY KEY,
    started_by  TEXT NOT NULL,
    namespaces  TEXT NOT NULL,
    steps       TEXT NOT NULL,
    policy      TEXT NOT NULL,
    state       TEXT NOT NULL,
    counts      TEXT NOT NULL DEFAULT '{}',
    checkpoint  TEXT,
    task_id     TEXT,
    started_at  INTEGER NOT NULL,
    ended_at    INTEGER,
    undone_at   INTEGER,
    undone_by   TEXT
);
CREATE INDEX runs_started ON runs(started_at);
CREATE TABLE leases (
    name          TEXT PRIMARY KEY,
    holder        TEXT NOT NULL,
    run_id        TEXT,
    heartbeat_at  INTEGER NOT NULL
) WITHOUT ROWID;
"#;

/// Version 8: tasks that wait for the client (MCP `input_required`). `input_requests` holds the
/// requests still unanswered, by key; `input_responses` every answer given so far, by key, so
/// that work re-run after a restart finds the answers it asked for and asks only for the rest.
const V8: &str = r#"
ALTER TABLE tasks ADD COLUMN input_requests TEXT;
ALTER TABLE tasks ADD COLUMN input_responses TEXT;
"#;

/// Version 9: a task keeps the rights (scope and namespaces) of the call that started it, so
/// that a caller with narrower rights of the same subject does not see it.
const V9: &str = r#"
ALTER TABLE tasks ADD COLUMN access_grant TEXT;
"#;

/// Version 10: jobs, the memory of the work behind tasks. A job (by namespace and name) has a
/// head version; every checkpoint is a version with its parent (a revert names the version it
/// restores); memories and task results can be filed under a job.
const V10: &str = r#"
CREATE TABLE jobs (
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    state       TEXT NOT NULL,
    head        INTEGER NOT NULL DEFAULT 0,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    closed_at   INTEGER,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE job_versions (
    namespace   TEXT NOT NULL,
    job         TEXT NOT NULL,
    version     INTEGER NOT NULL,
    parent      INTEGER,
    reverts_to  INTEGER,
    body        TEXT NOT NULL,
    author      TEXT NOT NULL,
    task_id     TEXT,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (namespace, job, version)
);
CREATE TABLE job_memories (
    memory_key  INTEGER PRIMARY KEY REFERENCES memories(key),
    namespace   TEXT NOT NULL,
    job         TEXT NOT NULL,
    added_at    INTEGER NOT NULL
);
CREATE INDEX job_memories_job ON job_memories(namespace, job, added_at);
CREATE TABLE job_results (
    task_id     TEXT PRIMARY KEY,
    namespace   TEXT NOT NULL,
    job         TEXT NOT NULL,
    tool        TEXT NOT NULL,
    status      TEXT NOT NULL,
    summary     TEXT NOT NULL,
    result      TEXT,
    finished_at INTEGER NOT NULL
);
CREATE INDEX job_results_job ON job_results(namespace, job, finished_at);
"#;

/// Version 11: a memory filed under a job records the job's head version then, so "learned
/// since the latest checkpoint" is exact whatever the clocks of the servers that wrote them.
const V11: &str = r#"
ALTER TABLE job_memories ADD COLUMN head_version INTEGER NOT NULL DEFAULT 0;
"#;

/// Version 12: a job's task result keeps the namespaces the task could read, so that a reader
/// of the job with narrower rights sees that the result exists but not what it holds; a closed
/// job records the memory that summarises it and when its context was archived.
const V12: &str = r#"
ALTER TABLE job_results ADD COLUMN reach TEXT;
ALTER TABLE jobs ADD COLUMN summary_key INTEGER;
ALTER TABLE jobs ADD COLUMN archived_at INTEGER;
"#;

/// Brings the database up to [`SCHEMA_VERSION`], one version per transaction.
pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(Error::Corrupted {
            what: "database schema".into(),
            reason: format!(
                "version {version} is newer than this build understands ({SCHEMA_VERSION}); upgrade mnemograph"
            ),
        });
    }
    if version < OLDEST_SUPPORTED_SCHEMA {
        return Err(Error::Corrupted {
            what: "database schema".into(),
            reason: format!("version {version} is too old to migrate"),
        });
    }
    let steps: [&str; 12] = [V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12];
    for (i, sql) in steps.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the lock.
        let now: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if now > i as i64 {
            continue;
        }
        tx.execute_batch(sql)?;
        if i + 1 == 6 {
            tx.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('database_id', ?1)",
                [crate::store::new_id("db_")],
            )?;
        }
        if i + 1 == 7 {
            // Salience decays from when the memory entered this database, not from its
            // (possibly imported, old) creation time: existing memories start now.
            tx.execute(
                "UPDATE memories SET salience_at = ?1",
                [crate::model::now_millis()],
            )?;
        }
        tx.pragma_update(None, "user_version", i as i64 + 1)?;
        tx.commit()?;
        tracing::info!(version = i + 1, "database migrated");
    }
    Ok(())
}
