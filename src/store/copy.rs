//! Copying a whole database into another store (SQLite ↔ PostgreSQL, or the same kind): every row
//! of every table with its keys, ids and timestamps, the change log with its stamps, and the
//! database's identity, so indexes built from the source stay valid for the copy.
//!
//! The source is opened to read only (never created, never migrated) and read in one snapshot
//! per run. The target must be empty; it receives the rows table by table in key order, in
//! batches of one write transaction each, and every batch also records in the target's `meta`
//! (`migrate_from`) how far the copy got. Running the same copy again after an interruption goes
//! on from there, adding nothing twice, as long as the source's change log has not moved. The
//! last transaction sets the target's key sequences and log head past the copied keys, takes the
//! source's identity and replaces the progress row with `migrated_from`.
//!
//! Size: copying every table between the two dialects, and checking a resumed copy, read one table
//! list that keeps them in step.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use postgres::types::Type;
use rusqlite::types::ValueRef;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::sql::Conn;
use super::{Arg, Db, FromColumn, RollbackUnlessCommitted, Row, SCHEMA_VERSION, Store, args};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::LogPosition;

/// A table as the copy moves it.
#[derive(Debug)]
pub struct Table {
    pub name: &'static str,
    /// The columns copied: every column both schemas have (SQLite's unused `memories.embedding`
    /// and `memories.embedding_model` are left behind).
    pub columns: &'static [&'static str],
    /// Its primary key, the order the rows are copied in.
    pub key: &'static [&'static str],
    /// Rows the target holds already (task, run and lease rows of a server started on the empty
    /// target) are kept and the source's row of that key is skipped.
    pub keep_existing: bool,
}

/// Every table but `meta`, in the order they are copied (rows before the rows that refer to
/// them). `meta` is copied in the last transaction.
pub const TABLES: &[Table] = &[
    Table {
        name: "memories",
        columns: &[
            "key",
            "id",
            "namespace",
            "kind",
            "name",
            "content",
            "tags",
            "importance",
            "metadata",
            "content_hash",
            "created_at",
            "updated_at",
            "accessed_at",
            "access_count",
            "valid_from",
            "valid_until",
            "superseded_by",
            "version",
            "deleted_at",
            "merged_into",
            "archived_at",
            "salience",
            "salience_at",
        ],
        key: &["key"],
        keep_existing: false,
    },
    Table {
        name: "relations",
        columns: &[
            "key",
            "id",
            "src",
            "dst",
            "kind",
            "weight",
            "metadata",
            "created_at",
            "reinforced_at",
            "valid_from",
            "valid_until",
            "deleted_at",
        ],
        key: &["key"],
        keep_existing: false,
    },
    Table {
        name: "history",
        columns: &[
            "seq",
            "entity",
            "entity_key",
            "op",
            "actor",
            "at",
            "previous",
            "run",
        ],
        key: &["seq"],
        keep_existing: false,
    },
    Table {
        name: "changes",
        columns: &["seq", "memory_key", "relation_key", "op", "stamp"],
        key: &["seq"],
        keep_existing: false,
    },
    Table {
        name: "vectors",
        columns: &["memory_key", "model", "version", "dim", "vec"],
        key: &["memory_key"],
        keep_existing: false,
    },
    Table {
        name: "import_keys",
        columns: &["namespace", "ext", "memory_key"],
        key: &["namespace", "ext"],
        keep_existing: false,
    },
    Table {
        name: "tasks",
        columns: &[
            "id",
            "owner",
            "tool",
            "arguments",
            "status",
            "status_message",
            "progress",
            "result",
            "error",
            "created_at",
            "updated_at",
            "ttl_ms",
            "poll_interval_ms",
            "checkpoint",
            "boot_id",
            "heartbeat_at",
            "cancel_requested",
            "input_requests",
            "input_responses",
            "access_grant",
        ],
        key: &["id"],
        keep_existing: true,
    },
    Table {
        name: "runs",
        columns: &[
            "id",
            "started_by",
            "namespaces",
            "steps",
            "policy",
            "state",
            "counts",
            "checkpoint",
            "task_id",
            "started_at",
            "ended_at",
            "undone_at",
            "undone_by",
        ],
        key: &["id"],
        keep_existing: true,
    },
    Table {
        name: "leases",
        columns: &["name", "holder", "run_id", "heartbeat_at"],
        key: &["name"],
        keep_existing: true,
    },
    Table {
        name: "jobs",
        columns: &[
            "namespace",
            "name",
            "state",
            "head",
            "created_by",
            "created_at",
            "updated_at",
            "closed_at",
            "summary_key",
            "archived_at",
        ],
        key: &["namespace", "name"],
        keep_existing: false,
    },
    Table {
        name: "job_versions",
        columns: &[
            "namespace",
            "job",
            "version",
            "parent",
            "reverts_to",
            "body",
            "author",
            "task_id",
            "created_at",
        ],
        key: &["namespace", "job", "version"],
        keep_existing: false,
    },
    Table {
        name: "job_memories",
        columns: &["memory_key", "namespace", "job", "added_at", "head_version"],
        key: &["memory_key"],
        keep_existing: false,
    },
    Table {
        name: "job_results",
        columns: &[
            "task_id",
            "namespace",
            "job",
            "tool",
            "status",
            "summary",
            "result",
            "finished_at",
            "reach",
        ],
        key: &["task_id"],
        keep_existing: false,
    },
];

/// The `meta` row of a copy in progress, on the target.
const IN_PROGRESS: &str = "migrate_from";
/// The `meta` row a finished copy leaves on the target.
const FINISHED: &str = "migrated_from";
/// `meta` rows that belong to each database and are never copied.
const OWN_META: &[&str] = &["schema_version", IN_PROGRESS, FINISHED, "database_id"];
/// Most statement arguments of one multi-row insert.
const MAX_ARGS: usize = 4_000;
/// Largest batch allowed.
pub const MAX_BATCH: usize = 100_000;

/// One column value, owned.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    fn arg(&self) -> Arg<'_> {
        match self {
            Value::Null => Arg::Null,
            Value::Int(i) => Arg::Int(*i),
            Value::Real(f) => Arg::Real(*f),
            Value::Text(s) => Arg::Text(s),
            Value::Blob(b) => Arg::Blob(b),
        }
    }

    /// A key value as the progress row keeps it.
    fn to_json(&self) -> Result<Json> {
        match self {
            Value::Int(i) => Ok(Json::from(*i)),
            Value::Text(s) => Ok(Json::from(s.as_str())),
            other => Err(Error::Internal(format!(
                "a key column holds {other:?}, not an integer or text"
            ))),
        }
    }

    fn from_json(v: &Json) -> Result<Value> {
        match v {
            Json::Number(n) => n.as_i64().map(Value::Int),
            Json::String(s) => Some(Value::Text(s.clone())),
            _ => None,
        }
        .ok_or_else(|| Error::Corrupted {
            what: format!("`{IN_PROGRESS}` row of the target's meta table"),
            reason: format!("the last key copied is {v}"),
        })
    }
}

impl FromColumn for Value {
    fn from_column(row: &Row<'_>, i: usize) -> Result<Value> {
        match row {
            Row::Lite(r) => Ok(match r.get_ref(i)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(n) => Value::Int(n),
                ValueRef::Real(f) => Value::Real(f),
                ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Value::Blob(b.to_vec()),
            }),
            Row::Pg(r) => {
                let v = match *r.columns()[i].type_() {
                    Type::INT8 | Type::INT4 | Type::INT2 | Type::BOOL => {
                        row.get::<Option<i64>>(i)?.map(Value::Int)
                    }
                    Type::FLOAT8 | Type::FLOAT4 => row.get::<Option<f64>>(i)?.map(Value::Real),
                    Type::BYTEA => row.get::<Option<Vec<u8>>>(i)?.map(Value::Blob),
                    _ => row.get::<Option<String>>(i)?.map(Value::Text),
                };
                Ok(v.unwrap_or(Value::Null))
            }
        }
    }
}

/// A database opened to be copied: read only, never created or migrated.
pub struct Source {
    db: Db,
    described: String,
}

impl Source {
    /// Opens the database of `cfg` to read it: a SQLite file that must exist (opened read-only),
    /// or a PostgreSQL database (read in read-only transactions). Its schema must be the one
    /// this build writes.
    pub fn open(cfg: &Config) -> Result<Source> {
        let (db, described) = match &cfg.postgres {
            Some(url) => {
                let target = super::pg::Target::parse(url)?;
                (target.connect()?, target.describe())
            }
            None => (
                open_read_only(&cfg.db_path, Duration::from_millis(cfg.busy_timeout_ms))?,
                cfg.db_path.display().to_string(),
            ),
        };
        let source = Source { db, described };
        source.check_schema()?;
        Ok(source)
    }

    /// The database as messages name it (a PostgreSQL URL without its password).
    pub fn describe(&self) -> &str {
        &self.described
    }

    fn check_schema(&self) -> Result<()> {
        let not_ours = |why: String| {
            Error::invalid(
                "from",
                format!("{} is not a mnemograph database ({why})", self.described),
                "name the database a mnemograph server uses (what it was given as --db)",
            )
        };
        let (version, current) = if self.db.is_postgres() {
            let v = super::pg::schema_version(&self.db).map_err(|e| not_ours(e.to_string()))?;
            (v, super::pg::PG_SCHEMA_VERSION)
        } else {
            let v: i64 = self
                .db
                .query_one("PRAGMA user_version", &[], |r| r.get(0))
                .map_err(|e| not_ours(e.to_string()))?;
            (v, SCHEMA_VERSION)
        };
        if version == 0 {
            return Err(not_ours("it has no tables".into()));
        }
        if version > current {
            return Err(Error::invalid(
                "from",
                format!(
                    "{} has schema version {version}, newer than this build understands ({current})",
                    self.described
                ),
                "migrate with the mnemograph version that wrote it",
            ));
        }
        if version < current {
            return Err(Error::invalid(
                "from",
                format!(
                    "{} has schema version {version}, older than this build's ({current}), and is only read here",
                    self.described
                ),
                "bring it up to date first by opening it once with this version, e.g. `mnemograph stats --db SOURCE`",
            ));
        }
        Ok(())
    }
}

/// A SQLite file opened read-only, as [`Source`] reads it.
fn open_read_only(path: &Path, busy_timeout: Duration) -> Result<Db> {
    if !path.is_file() {
        return Err(Error::invalid(
            "from",
            format!("there is no database file at {}", path.display()),
            "name an existing SQLite file, or a postgres:// URL",
        ));
    }
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
        | rusqlite::OpenFlags::SQLITE_OPEN_URI;
    let conn = rusqlite::Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(busy_timeout)?;
    Ok(Db {
        conn: Conn::Lite(conn),
    })
}

/// How far a copy got, as the target's `meta` keeps it while the copy runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Mark {
    /// The source's identity, and the head of its change log when the copy began.
    source: String,
    seq: i64,
    stamp: i64,
    /// The table being copied (absent: every table is copied).
    table: Option<String>,
    /// The key of the last row of `table` copied (absent: none yet).
    after: Option<Vec<Json>>,
    /// Rows written so far, per table.
    copied: BTreeMap<String, u64>,
}

/// What the target's `migrated_from` row says.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Finished {
    source: String,
    seq: i64,
    stamp: i64,
    /// The source as messages name it.
    from: String,
    at: String,
    rows: u64,
}

/// How a copy begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Into an empty target.
    Fresh,
    /// Going on with an interrupted copy of the same source, after this many rows.
    Resumed { rows: u64 },
    /// The target is a finished copy of the source as it is now: nothing to do.
    AlreadyCopied,
}

/// Where a copy is, for progress reports.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The table being copied.
    pub table: &'a str,
    /// Rows copied so far (earlier runs included) and rows to copy in all.
    pub done: u64,
    pub total: u64,
}

/// What a finished copy did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Rows written per table, in the order copied (earlier runs included; `meta` last).
    pub tables: Vec<(&'static str, u64)>,
    /// Rows written by this run.
    pub copied_now: u64,
}

/// A copy from `source` into `target`, checked and ready to run: the source's snapshot is open
/// until it is dropped.
pub struct Copy<'a> {
    source: &'a Source,
    target: &'a Store,
    _snapshot: RollbackUnlessCommitted<'a>,
    start: Start,
    mark: Mark,
    head: LogPosition,
    /// Rows of each table of [`TABLES`] in the source.
    totals: Vec<u64>,
    batch: usize,
}

/// Opens the source's snapshot and checks the target: empty (then the copy is claimed in its
/// `meta` at once), or holding an interrupted copy of this very source (which goes on), or a
/// finished copy of the source as it is now. Anything else is refused with what to do; nothing
/// is written then.
pub fn begin<'a>(source: &'a Source, target: &'a Store, batch: usize) -> Result<Copy<'a>> {
    if batch == 0 || batch > MAX_BATCH {
        return Err(Error::invalid(
            "batch",
            format!("{batch} rows per transaction"),
            format!("give 1 to {MAX_BATCH}"),
        ));
    }
    let db = &source.db;
    db.transaction_step(
        if db.is_postgres() {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        } else {
            "BEGIN DEFERRED"
        },
        true,
    )?;
    let snapshot = RollbackUnlessCommitted(db);
    let head = super::changes::head(db)?;
    let totals = TABLES
        .iter()
        .map(|t| count(db, t.name))
        .collect::<Result<Vec<u64>>>()?;
    let described = target.describe();
    let (start, mark) = target.write(|t| claim(t, source, &head, &described))?;
    Ok(Copy {
        source,
        target,
        _snapshot: snapshot,
        start,
        mark,
        head,
        totals,
        batch,
    })
}

/// Decides how the copy begins from the target's `meta` and rows, inside a write transaction
/// on the target; a fresh copy writes its progress row.
fn claim(t: &Db, source: &Source, head: &LogPosition, target: &str) -> Result<(Start, Mark)> {
    let from = source.describe();
    let fresh = Mark {
        source: head.database.clone(),
        seq: head.seq,
        stamp: head.stamp,
        table: TABLES.first().map(|t| t.name.to_owned()),
        after: None,
        copied: BTreeMap::new(),
    };
    if let Some(mark) = meta_json::<Mark>(t, IN_PROGRESS)? {
        if mark.source != head.database {
            return Err(Error::invalid(
                "to",
                format!(
                    "{target} holds an unfinished migration from another database ({}), not from {from} ({})",
                    mark.source, head.database
                ),
                "run that migration again with its own --from to finish it, or migrate into a new empty target",
            ));
        }
        if (mark.seq, mark.stamp) != (head.seq, head.stamp) {
            return Err(Error::invalid(
                "from",
                format!(
                    "{from} changed since the migration into {target} began (its change log was at {}, now {})",
                    mark.seq, head.seq
                ),
                "stop every server writing to the source, then migrate into a new empty target (the partial copy in this one cannot be finished)",
            ));
        }
        let rows = mark.copied.values().sum();
        return Ok((Start::Resumed { rows }, mark));
    }
    let memories = count(t, "memories")?;
    let entries = count(t, "changes")? + count(t, "history")?;
    let finished = meta_json::<Finished>(t, FINISHED)?;
    if let Some(done) = &finished
        && done.source == head.database
        && (done.seq, done.stamp) == (head.seq, head.stamp)
    {
        let own = super::changes::head(t)?;
        if (own.seq, own.stamp) == (head.seq, head.stamp) {
            return Ok((Start::AlreadyCopied, fresh));
        }
    }
    if memories > 0 || entries > 0 {
        let copy_of = finished.map_or(String::new(), |d| {
            format!(" (a copy of {} made {})", d.from, d.at)
        });
        return Err(Error::invalid(
            "to",
            format!(
                "{target} is not empty: it holds {memories} memories and {entries} change-log and history entries{copy_of}"
            ),
            "migrate into a new SQLite file or a new empty PostgreSQL database (createdb), or remove this one first; nothing was written to it",
        ));
    }
    if super::changes::database_id(t)? == head.database {
        return Err(Error::invalid(
            "to",
            format!("{target} has the identity of {from}: it is the source itself"),
            "name another database as --to",
        ));
    }
    put_meta(t, IN_PROGRESS, &serde_json::to_string(&fresh)?)?;
    Ok((Start::Fresh, fresh))
}

fn count(db: &Db, table: &str) -> Result<u64> {
    let n: i64 = db.query_one(
        &format!("SELECT CAST(count(*) AS BIGINT) FROM {table}"),
        &[],
        |r| r.get(0),
    )?;
    Ok(n.max(0) as u64)
}

fn meta_json<T: serde::de::DeserializeOwned>(db: &Db, key: &str) -> Result<Option<T>> {
    let value: Option<String> =
        db.query_opt("SELECT value FROM meta WHERE key = ?1", args![key], |r| {
            r.get(0)
        })?;
    value
        .map(|v| {
            serde_json::from_str(&v).map_err(|e| Error::Corrupted {
                what: format!("`{key}` row of the target's meta table"),
                reason: e.to_string(),
            })
        })
        .transpose()
}

fn put_meta(db: &Db, key: &str, value: &str) -> Result<()> {
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        args![key, value],
    )?;
    Ok(())
}

impl Copy<'_> {
    /// How this copy begins.
    pub fn start(&self) -> Start {
        self.start
    }

    /// Rows of the source to copy, in all.
    pub fn total_rows(&self) -> u64 {
        self.totals.iter().sum()
    }

    /// Copies what is left, calling `progress` after every batch, and finishes the target.
    pub fn run(mut self, progress: &mut dyn FnMut(&Step<'_>)) -> Result<Summary> {
        if self.start == Start::AlreadyCopied {
            return Ok(Summary {
                tables: Vec::new(),
                copied_now: 0,
            });
        }
        let total = self.total_rows();
        let before: u64 = self.mark.copied.values().sum();
        let first = match &self.mark.table {
            Some(name) => {
                TABLES
                    .iter()
                    .position(|t| t.name == name)
                    .ok_or_else(|| Error::Corrupted {
                        what: format!("`{IN_PROGRESS}` row of the target's meta table"),
                        reason: format!("it names table {name}, which is not copied"),
                    })?
            }
            None => TABLES.len(),
        };
        for (i, table) in TABLES.iter().enumerate().skip(first) {
            self.copy_table(table, total, progress)?;
            self.mark.table = TABLES.get(i + 1).map(|t| t.name.to_owned());
            self.mark.after = None;
            let mark = serde_json::to_string(&self.mark)?;
            self.target.write(|t| put_meta(t, IN_PROGRESS, &mark))?;
        }
        let meta = self.finish()?;
        let mut tables: Vec<(&'static str, u64)> = TABLES
            .iter()
            .map(|t| (t.name, self.mark.copied.get(t.name).copied().unwrap_or(0)))
            .collect();
        tables.push(("meta", meta));
        let after: u64 = self.mark.copied.values().sum();
        Ok(Summary {
            tables,
            copied_now: after - before + meta,
        })
    }

    /// Copies the rows of `table` after the mark, a batch per transaction.
    fn copy_table(
        &mut self,
        table: &'static Table,
        total: u64,
        progress: &mut dyn FnMut(&Step<'_>),
    ) -> Result<()> {
        let key_at: Vec<usize> = table
            .key
            .iter()
            .map(|k| table.columns.iter().position(|c| c == k))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::Internal(format!("{}'s key is not copied", table.name)))?;
        let columns = table.columns.join(", ");
        let order = table.key.join(", ");
        let first_sql = format!(
            "SELECT {columns} FROM {} ORDER BY {order} LIMIT ?1",
            table.name
        );
        let after_sql = {
            let marks: Vec<String> = (1..=table.key.len()).map(|i| format!("?{i}")).collect();
            format!(
                "SELECT {columns} FROM {} WHERE ({order}) > ({}) ORDER BY {order} LIMIT ?{}",
                table.name,
                marks.join(", "),
                table.key.len() + 1
            )
        };
        let width = table.columns.len();
        loop {
            let after: Option<Vec<Value>> = match &self.mark.after {
                Some(keys) => Some(keys.iter().map(Value::from_json).collect::<Result<_>>()?),
                None => None,
            };
            let read = |r: &Row<'_>| -> Result<Vec<Value>> {
                (0..width).map(|i| r.get::<Value>(i)).collect()
            };
            let rows = match &after {
                None => self
                    .source
                    .db
                    .query_all(&first_sql, args![self.batch], read)?,
                Some(keys) => {
                    let mut a: Vec<Arg<'_>> = keys.iter().map(Value::arg).collect();
                    a.push(Arg::Int(self.batch as i64));
                    self.source.db.query_all(&after_sql, &a, read)?
                }
            };
            let Some(last) = rows.last() else {
                return Ok(());
            };
            let last_key: Vec<Json> = key_at
                .iter()
                .map(|&i| last[i].to_json())
                .collect::<Result<_>>()?;
            let mut mark = self.mark.clone();
            mark.after = Some(last_key);
            self.target.write(|t| {
                let n = insert_rows(t, table, &rows)?;
                *mark.copied.entry(table.name.to_owned()).or_insert(0) += n;
                put_meta(t, IN_PROGRESS, &serde_json::to_string(&mark)?)
            })?;
            self.mark = mark;
            progress(&Step {
                table: table.name,
                done: self.mark.copied.values().sum::<u64>().min(total),
                total,
            });
            if rows.len() < self.batch {
                return Ok(());
            }
        }
    }

    /// The last transaction: the source's `meta` rows and identity, key sequences and the log
    /// head past the copied keys (PostgreSQL), the progress row replaced by `migrated_from`.
    /// Returns the `meta` rows written.
    fn finish(&self) -> Result<u64> {
        let meta: Vec<(String, String)> =
            self.source
                .db
                .query_all("SELECT key, value FROM meta ORDER BY key", &[], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
        let finished = Finished {
            source: self.head.database.clone(),
            seq: self.head.seq,
            stamp: self.head.stamp,
            from: self.source.describe().to_owned(),
            at: crate::model::format_time(crate::model::now_millis()),
            rows: self.mark.copied.values().sum(),
        };
        self.target.write(|t| {
            let mut written = 0;
            for (key, value) in &meta {
                if !OWN_META.contains(&key.as_str()) {
                    put_meta(t, key, value)?;
                    written += 1;
                }
            }
            put_meta(t, "database_id", &self.head.database)?;
            t.execute("DELETE FROM meta WHERE key = ?1", args![IN_PROGRESS])?;
            put_meta(t, FINISHED, &serde_json::to_string(&finished)?)?;
            if t.is_postgres() {
                for (table, column) in [
                    ("memories", "key"),
                    ("relations", "key"),
                    ("history", "seq"),
                ] {
                    t.query_one(
                        &format!(
                            "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
                             coalesce(max({column}), 0) + 1, false) FROM {table}"
                        ),
                        &[],
                        |_| Ok(()),
                    )?;
                }
                t.execute(
                    "UPDATE log_head SET seq = (SELECT coalesce(max(seq), 0) FROM changes) \
                     WHERE id = 1",
                    &[],
                )?;
                // Servers listening on the target catch up at the commit.
                t.mark_logged();
            }
            Ok(written + 1)
        })
    }
}

/// Inserts `rows` of `table` (the columns of [`Table::columns`]) in statements of many rows;
/// returns the rows written.
fn insert_rows(t: &Db, table: &Table, rows: &[Vec<Value>]) -> Result<u64> {
    let width = table.columns.len();
    let per_statement = (MAX_ARGS / width).max(1);
    let one = format!("({})", vec!["?"; width].join(", "));
    let mut written = 0u64;
    for chunk in rows.chunks(per_statement) {
        let sql = format!(
            "INSERT INTO {} ({}) VALUES {}{}",
            table.name,
            table.columns.join(", "),
            vec![one.as_str(); chunk.len()].join(", "),
            if table.keep_existing {
                " ON CONFLICT DO NOTHING"
            } else {
                ""
            }
        );
        let args: Vec<Arg<'_>> = chunk.iter().flatten().map(Value::arg).collect();
        written += t.execute(&sql, &args)? as u64;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MemoryKey, NewMemory};
    use crate::store::changes::{self, ChangeOp};

    fn open(dir: &tempfile::TempDir, name: &str) -> (Config, Store) {
        let cfg = Config::for_db(dir.path().join(name));
        let store = Store::open(&cfg).expect("open the store");
        (cfg, store)
    }

    /// `n` memories, each with a change-log entry, a vector and an import key, each but the
    /// first related to the one before; a history row, a task, a run and a lease.
    fn fill(store: &Store, n: usize) {
        store
            .write(|db| {
                let mut previous: Option<MemoryKey> = None;
                for i in 0..n {
                    let m = super::super::memories::insert(
                        db,
                        &format!("m_{i}"),
                        &NewMemory::note(&format!("memory {i}")),
                        1_000 + i as i64,
                    )?;
                    changes::log_memory(db, m.key, ChangeOp::Insert)?;
                    super::super::vectors::put(db, m.key, "test", 1, &[i as f32, 0.5])?;
                    super::super::import_keys::put(db, "default", &format!("x:{i}"), m.key)?;
                    if let Some(p) = previous {
                        db.execute(
                            "INSERT INTO relations (id, src, dst, kind, created_at, reinforced_at) \
                             VALUES (?1, ?2, ?3, 'follows', 5, 6)",
                            args![format!("r_{i}"), m.key.0, p.0],
                        )?;
                        changes::log_relation(db, i as i64)?;
                    }
                    previous = Some(m.key);
                }
                super::super::history::record(
                    db,
                    super::super::history::Entity::Memory,
                    1,
                    "update",
                    "test",
                    7,
                    &serde_json::json!({"content": "before"}),
                )?;
                db.execute(
                    "INSERT INTO tasks (id, owner, tool, arguments, status, created_at, \
                     updated_at, boot_id, heartbeat_at) \
                     VALUES ('t1', 'o', 'traverse', '{}', 'completed', 1, 2, 'b', 3)",
                    &[],
                )?;
                db.execute(
                    "INSERT INTO runs (id, started_by, namespaces, steps, policy, state, \
                     started_at) VALUES ('run1', 'cli', '[]', '[]', '{}', 'done', 4)",
                    &[],
                )?;
                db.execute(
                    "INSERT INTO leases (name, holder, heartbeat_at) VALUES ('curate', 'h', 5)",
                    &[],
                )?;
                Ok(())
            })
            .unwrap();
    }

    /// Every row of every copied table, in key order.
    fn dump(store: &Store) -> Vec<(&'static str, Vec<Vec<Value>>)> {
        store
            .read(|db| {
                let mut out = Vec::new();
                for t in TABLES {
                    let rows = db.query_all(
                        &format!(
                            "SELECT {} FROM {} ORDER BY {}",
                            t.columns.join(", "),
                            t.name,
                            t.key.join(", ")
                        ),
                        &[],
                        |r| (0..t.columns.len()).map(|i| r.get::<Value>(i)).collect(),
                    )?;
                    out.push((t.name, rows));
                }
                Ok(out)
            })
            .unwrap()
    }

    fn meta(store: &Store, key: &str) -> Option<String> {
        store
            .read(|db| {
                db.query_opt("SELECT value FROM meta WHERE key = ?1", args![key], |r| {
                    r.get(0)
                })
            })
            .unwrap()
    }

    #[test]
    fn a_copy_holds_every_row_and_new_keys_follow_the_copied_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (from, source_store) = open(&dir, "a.db");
        fill(&source_store, 12);
        let source = Source::open(&from).unwrap();
        let (_, target) = open(&dir, "b.db");
        let job = begin(&source, &target, 5).unwrap();
        assert_eq!(job.start(), Start::Fresh);
        let mut steps = Vec::new();
        let summary = job
            .run(&mut |s| steps.push((s.table.to_owned(), s.done)))
            .unwrap();
        assert!(steps.windows(2).all(|w| w[0].1 <= w[1].1), "{steps:?}");
        assert_eq!(summary.tables[0], ("memories", 12));
        assert_eq!(summary.tables[1], ("relations", 11));
        assert_eq!(dump(&target), dump(&source_store));
        let id = |s: &Store| s.read(changes::database_id).unwrap();
        assert_eq!(
            id(&target),
            id(&source_store),
            "the copy keeps the identity"
        );
        assert_eq!(meta(&target, IN_PROGRESS), None);
        assert!(meta(&target, FINISHED).is_some());
        let head = |s: &Store| s.read(changes::head).unwrap();
        assert_eq!(head(&target), head(&source_store));

        // New rows of the copy take keys and log positions after the copied ones.
        let before = head(&target).seq;
        let (key, seq) = target
            .write(|db| {
                let m =
                    super::super::memories::insert(db, "m_new", &NewMemory::note("new"), 9_000)?;
                changes::log_memory(db, m.key, ChangeOp::Insert)?;
                super::super::history::record(
                    db,
                    super::super::history::Entity::Memory,
                    m.key.0,
                    "update",
                    "test",
                    9,
                    &serde_json::json!({}),
                )?;
                let seq: i64 = db.query_one(
                    "SELECT seq FROM sqlite_sequence WHERE name = 'changes'",
                    &[],
                    |r| r.get(0),
                )?;
                Ok((m.key.0, seq))
            })
            .unwrap();
        assert_eq!(key, 13);
        assert_eq!(seq, before + 1);
        assert_eq!(head(&target).seq, before + 1);

        // Again: nothing to do.
        let (_, again) = open(&dir, "c.db");
        begin(&source, &again, 5).unwrap().run(&mut |_| {}).unwrap();
        let job = begin(&source, &again, 5).unwrap();
        assert_eq!(job.start(), Start::AlreadyCopied);
    }

    #[test]
    fn an_interrupted_copy_goes_on_from_its_last_batch_unless_the_source_moved() {
        let dir = tempfile::tempdir().unwrap();
        let (from, source_store) = open(&dir, "a.db");
        fill(&source_store, 9);
        let (_, target) = open(&dir, "b.db");
        {
            let source = Source::open(&from).unwrap();
            let job = begin(&source, &target, 2).unwrap();
            let mut batches = 0;
            let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                job.run(&mut |_| {
                    batches += 1;
                    assert!(batches < 8, "stopped after 7 batches");
                })
            }));
            assert!(stopped.is_err());
        }
        let progress: Mark = serde_json::from_str(&meta(&target, IN_PROGRESS).unwrap()).unwrap();
        assert_eq!(progress.table.as_deref(), Some("relations"), "{progress:?}");
        assert_eq!(progress.copied.values().sum::<u64>(), 15, "{progress:?}");

        let source = Source::open(&from).unwrap();
        let job = begin(&source, &target, 2).unwrap();
        assert_eq!(job.start(), Start::Resumed { rows: 15 });
        let summary = job.run(&mut |_| {}).unwrap();
        assert_eq!(summary.tables[0], ("memories", 9));
        assert_eq!(dump(&target), dump(&source_store));

        // A source written to after the copy began cannot be finished into it.
        let (_, other) = open(&dir, "c.db");
        {
            let job = begin(&source, &other, 2).unwrap();
            let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                job.run(&mut |_| panic!("stop after the first batch"))
            }));
            assert!(stopped.is_err());
        }
        source_store
            .write(|db| {
                let m =
                    super::super::memories::insert(db, "m_late", &NewMemory::note("late"), 9_000)?;
                changes::log_memory(db, m.key, ChangeOp::Insert)
            })
            .unwrap();
        let source = Source::open(&from).unwrap();
        let err = begin(&source, &other, 2).err().unwrap().to_string();
        assert!(err.contains("changed since the migration"), "{err}");
    }

    #[test]
    fn a_target_that_is_not_empty_or_is_the_source_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (from, source_store) = open(&dir, "a.db");
        fill(&source_store, 3);
        let (_, target) = open(&dir, "b.db");
        fill(&target, 1);
        let before = dump(&target);
        let source = Source::open(&from).unwrap();
        let err = begin(&source, &target, 10).err().unwrap().to_string();
        assert!(err.contains("is not empty: it holds 1 memories"), "{err}");
        assert_eq!(dump(&target), before);
        assert_eq!(meta(&target, IN_PROGRESS), None);

        let (empty_cfg, _empty) = open(&dir, "e.db");
        let empty = Source::open(&empty_cfg).unwrap();
        let itself = Store::open(&empty_cfg).unwrap();
        let err = begin(&empty, &itself, 10).err().unwrap().to_string();
        assert!(err.contains("it is the source itself"), "{err}");

        let err = Source::open(&Config::for_db(dir.path().join("none.db")))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("there is no database file"), "{err}");
        assert!(!dir.path().join("none.db").exists());
        let err = begin(&source, &target, 0).err().unwrap().to_string();
        assert!(err.contains("batch"), "{err}");
    }
}
