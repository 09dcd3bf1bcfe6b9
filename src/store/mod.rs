//! All SQL of mnemograph: the schema and its migrations, memories, relations, history, the change
//! log and task rows. SQLite is the source of truth; nothing else in the crate speaks SQL.

mod pg;
mod schema;
mod sql;
#[cfg(feature = "tls")]
mod tls;

pub mod changes;
pub mod copy;
pub mod history;
pub mod import_keys;
pub mod jobs;
pub mod memories;
pub mod relations;
pub mod runs;
pub mod tasks;
pub mod vectors;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::config::{Config, Durability};
use crate::error::{Error, Result};
use crate::lock;

pub use pg::Listener;
pub use schema::{OLDEST_SUPPORTED_SCHEMA, SCHEMA_VERSION};
use sql::Conn;
pub(crate) use sql::args;
pub use sql::{Arg, FromColumn, Row, Scalar, ToArg};

/// Most idle read connections kept for reuse.
const MAX_IDLE_READERS: usize = 4;

/// The database: one connection for writes, a small pool for reads (SQLite's WAL and
/// PostgreSQL's snapshots let them run together).
pub struct Store {
    backend: Backend,
    writer: Mutex<Option<Db>>,
    readers: Mutex<Vec<Db>>,
}

/// Where the store's connections go.
enum Backend {
    /// A SQLite file.
    Lite {
        path: PathBuf,
        busy_timeout: Duration,
        durability: Durability,
    },
    /// A PostgreSQL database.
    Pg(Box<pg::Target>),
}

/// The database as [`Store::read`], [`Store::snapshot`] and [`Store::write`] lend it: what every
/// store function takes. Callers pass it on; only `store` reaches the connection inside.
pub struct Db {
    conn: Conn,
}

/// Rolls back the open write transaction when dropped before its commit: on an error, and while
/// unwinding from a panic in the caller's closure.
struct RollbackUnlessCommitted<'a>(&'a Db);

impl Drop for RollbackUnlessCommitted<'_> {
    fn drop(&mut self) {
        if self.0.in_transaction()
            && let Err(e) = self.0.transaction_step("ROLLBACK", false)
        {
            // The next write rolls back before it begins.
            tracing::warn!(error = %e, "could not roll back a failed write");
        }
    }
}

impl Store {
    /// Opens (creating it when missing) and migrates the database of `cfg`: the PostgreSQL
    /// database its URL names, else the SQLite file (and its folder).
    pub fn open(cfg: &Config) -> Result<Store> {
        let (backend, writer) = match &cfg.postgres {
            Some(url) => {
                let target = pg::Target::parse(url)?;
                let writer = target.connect()?;
                pg::migrate(&writer)?;
                (Backend::Pg(Box::new(target)), writer)
            }
            None => open_sqlite(cfg)?,
        };
        Ok(Store {
            backend,
            writer: Mutex::new(Some(writer)),
            readers: Mutex::new(Vec::new()),
        })
    }

    /// Path of the database file (for PostgreSQL, an empty path).
    pub fn path(&self) -> &Path {
        match &self.backend {
            Backend::Lite { path, .. } => path,
            Backend::Pg(_) => Path::new(""),
        }
    }

    /// True when the store is a PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Pg(_))
    }

    /// The database as logs and reports name it: the file's path, or the PostgreSQL URL without
    /// its password.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Lite { path, .. } => path.display().to_string(),
            Backend::Pg(t) => t.describe(),
        }
    }

    fn connect(&self) -> Result<Db> {
        match &self.backend {
            Backend::Lite {
                path,
                busy_timeout,
                durability,
            } => Ok(Db {
                conn: Conn::Lite(open_connection(path, *busy_timeout, *durability)?),
            }),
            Backend::Pg(t) => t.connect(),
        }
    }

    /// A listener for other processes' commits to the change log: on PostgreSQL only (`None` on
    /// SQLite, whose processes read the log's head instead).
    pub fn listen(&self) -> Result<Option<Listener>> {
        match &self.backend {
            Backend::Lite { .. } => Ok(None),
            Backend::Pg(t) => Listener::start(t).map(Some),
        }
    }

    /// Runs `f` on a read connection (a consistent snapshot for the duration of `f` when it opens
    /// a transaction; otherwise each statement sees the latest commit). On PostgreSQL, when the
    /// connection turns out to be gone (the server restarted, the network failed), the idle
    /// connections are dropped and `f` runs once more on a new one: a read changes nothing, so
    /// running it again is safe.
    pub fn read<T>(&self, f: impl Fn(&Db) -> Result<T>) -> Result<T> {
        match self.with_reader(&f) {
            Err(e) if self.is_postgres() && e.is_database_unavailable() => {
                tracing::warn!(error = %e, "the database connection was lost; reading again on a new one");
                lock::lock(&self.readers).clear();
                self.with_reader(&f)
            }
            other => other,
        }
    }

    /// Runs `f` on a read connection from the pool (a new one when none is idle), and puts it
    /// back when it is still sound.
    fn with_reader<T>(&self, f: impl FnOnce(&Db) -> Result<T>) -> Result<T> {
        let db = lock::lock(&self.readers).pop();
        let db = match db {
            Some(db) if !db.is_broken() => db,
            _ => self.connect()?,
        };
        let res = f(&db);
        let mut pool = lock::lock(&self.readers);
        if pool.len() < MAX_IDLE_READERS && !db.is_broken() && !db.in_transaction() {
            pool.push(db);
        }
        res
    }

    /// Runs `f` inside one read transaction: every statement sees the same snapshot. Not run
    /// again on a lost connection (`f` may have written what it read somewhere).
    pub fn snapshot<T>(&self, f: impl FnOnce(&Db) -> Result<T>) -> Result<T> {
        let begin = if self.is_postgres() {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        } else {
            "BEGIN DEFERRED"
        };
        self.with_reader(|db| {
            db.transaction_step(begin, true)?;
            let _open = RollbackUnlessCommitted(db);
            let res = f(db);
            db.transaction_step("COMMIT", false)?;
            res
        })
    }

    /// Runs `f` in one write transaction; commits when `f` succeeds, rolls back otherwise. A
    /// panic in `f` rolls back too (the transaction is dropped while unwinding), and the next
    /// write goes on with the same connection. Writers take turns, within a process and across
    /// processes: SQLite's `BEGIN IMMEDIATE` queues them on the busy timeout; on PostgreSQL
    /// every write transaction first locks the change log's head row (see [`changes`]).
    ///
    /// On PostgreSQL a write connection found gone before anything was sent (a restarted
    /// server) is replaced and the write begins again on the new one. A connection lost during
    /// the transaction stored nothing (the server rolls back); one lost during the commit may
    /// or may not have stored it: the error says so, and repeating the call is safe (remember,
    /// relate and forget recognise what is already stored).
    pub fn write<T>(&self, f: impl FnOnce(&Db) -> Result<T>) -> Result<T> {
        let mut slot = lock::lock(&self.writer);
        if slot.as_ref().is_none_or(Db::is_broken) {
            *slot = None;
            *slot = Some(self.connect()?);
        }
        let Some(db) = slot.as_ref() else {
            return Err(Error::Internal("no write connection".into()));
        };
        if db.in_transaction() {
            // Only when a rollback while unwinding failed: never start inside a stale transaction.
            db.transaction_step("ROLLBACK", false)?;
        }
        let begun = self.begin_write(db);
        let db = match begun {
            Err(e) if self.is_postgres() && e.is_database_unavailable() => {
                tracing::warn!(error = %e, "the write connection was lost; beginning again on a new one");
                *slot = None;
                *slot = Some(self.connect()?);
                let Some(db) = slot.as_ref() else {
                    return Err(Error::Internal("no write connection".into()));
                };
                self.begin_write(db)?;
                db
            }
            other => {
                other?;
                db
            }
        };
        let _open = RollbackUnlessCommitted(db);
        let out = match f(db) {
            Err(e) if self.is_postgres() && e.is_database_unavailable() => {
                return Err(Error::Unavailable(format!(
                    "the connection to the database was lost during the write ({e}); nothing of it was stored: try again"
                )));
            }
            other => other?,
        };
        if db.take_logged() {
            // Delivered at the commit, to every process that listens (see `changes`).
            db.batch(changes::NOTIFY)?;
        }
        match db.transaction_step("COMMIT", false) {
            Err(e) if self.is_postgres() && e.is_database_unavailable() => {
                Err(Error::Unavailable(format!(
                    "the connection to the database was lost while the write committed ({e}): it may or may not have been stored; repeating the call is safe (remember, relate and forget recognise what is already stored and add nothing twice)"
                )))
            }
            other => other.map(|()| out),
        }
    }

    /// Opens a write transaction on `db`.
    fn begin_write(&self, db: &Db) -> Result<()> {
        match &self.backend {
            Backend::Lite { .. } => db.transaction_step("BEGIN IMMEDIATE", true),
            Backend::Pg(_) => {
                db.transaction_step("BEGIN", true)?;
                changes::lock_head(db)
            }
        }
    }

    /// Copies the write-ahead log into the database file as far as no other reader needs it,
    /// without waiting (as closing the last connection does): for a process that ends while
    /// another thread still holds the store. Nothing to do on PostgreSQL.
    pub fn checkpoint(&self) -> Result<()> {
        if self.is_postgres() {
            return Ok(());
        }
        let slot = lock::lock(&self.writer);
        if let Some(Db {
            conn: Conn::Lite(c),
        }) = slot.as_ref()
        {
            c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
        }
        Ok(())
    }

    /// Schema version of the open database.
    pub fn schema_version(&self) -> Result<i64> {
        self.read(|db| match &db.conn {
            Conn::Lite(c) => Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?),
            Conn::Pg(_) => pg::schema_version(db),
        })
    }

    /// Runs SQLite's own consistency check; returns its complaints (empty when healthy). On
    /// PostgreSQL, which checks its pages itself, always empty.
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        self.read(|db| match &db.conn {
            Conn::Lite(c) => {
                let mut stmt = c.prepare("PRAGMA integrity_check")?;
                let rows: Vec<String> = stmt
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(rows.into_iter().filter(|r| r != "ok").collect())
            }
            Conn::Pg(_) => Ok(Vec::new()),
        })
    }

    /// Size of the database file plus its write-ahead log, in bytes (of the PostgreSQL
    /// database, as the server reports it).
    pub fn size_bytes(&self) -> u64 {
        match &self.backend {
            Backend::Lite { path, .. } => {
                let mut wal = path.clone().into_os_string();
                wal.push("-wal");
                [path.as_os_str(), wal.as_os_str()]
                    .iter()
                    .filter_map(|p| std::fs::metadata(p).ok())
                    .map(|m| m.len())
                    .sum()
            }
            Backend::Pg(_) => self.read(pg::size_bytes).unwrap_or(0),
        }
    }
}

/// Opens the SQLite file of `cfg` (and its folder), migrated: the backend and the writer.
fn open_sqlite(cfg: &Config) -> Result<(Backend, Db)> {
    if let Some(dir) = cfg.db_path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    let busy_timeout = Duration::from_millis(cfg.busy_timeout_ms);
    // Processes starting together on a new file race to switch it to WAL and migrate it;
    // SQLite answers some of those steps with "locked" at once instead of waiting, so the
    // loser tries again (the migration itself skips what the winner did).
    let deadline = std::time::Instant::now() + busy_timeout;
    let writer = loop {
        let attempt = open_connection(&cfg.db_path, busy_timeout, cfg.durability)
            .and_then(|mut c| schema::migrate(&mut c).map(|()| c));
        match attempt {
            Err(Error::Sqlite(e))
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other?,
        }
    };
    let backend = Backend::Lite {
        path: cfg.db_path.clone(),
        busy_timeout,
        durability: cfg.durability,
    };
    Ok((
        backend,
        Db {
            conn: Conn::Lite(writer),
        },
    ))
}

fn open_connection(
    path: &Path,
    busy_timeout: Duration,
    durability: Durability,
) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(busy_timeout)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    let synchronous = match durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "cache_size", -16_000)?;
    // Reads go through a memory map of the file's first 2 GiB instead of a read call per page:
    // loading a recall's ~200 candidate rows from a million memories took 1.4 ms with read
    // calls and 1.0 ms mapped. SQLite writes through its journal as before (the map is only
    // read), and remaps when another connection grows or shrinks the file.
    conn.pragma_update(None, "mmap_size", MMAP_BYTES)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Bytes of the database file each connection reads through a memory map (SQLite's own cap,
/// 2 GiB less 64 KiB, applies).
const MMAP_BYTES: i64 = 1 << 31;

/// A fresh random id with `prefix`, 20 base-32 characters (100 bits) after it.
pub fn new_id(prefix: &str) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    let mut s = String::with_capacity(prefix.len() + 20);
    s.push_str(prefix);
    s.extend(bytes.iter().map(|b| ALPHABET[(b & 31) as usize] as char));
    s
}

/// Appends ` {joiner} namespace IN (?, …)` to `sql` and the namespaces to `list`, for a listing
/// limited to `namespaces` (nothing for `None`: every namespace). False when the list is empty:
/// nothing can match, and the caller answers with nothing.
pub(crate) fn namespace_in<'a>(
    sql: &mut String,
    list: &mut Vec<Arg<'a>>,
    joiner: &str,
    namespaces: Option<&'a [String]>,
) -> bool {
    let Some(nss) = namespaces else {
        return true;
    };
    if nss.is_empty() {
        return false;
    }
    sql.push_str(&format!(
        " {joiner} namespace IN ({})",
        vec!["?"; nss.len()].join(", ")
    ));
    list.extend(nss.iter().map(|s| Arg::Text(s)));
    true
}

/// Calls `f` for `keys` in chunks, with the placeholders of an `IN (…)` list and its arguments.
/// Chunks are padded (repeating their last key) to a few fixed sizes, so a connection prepares
/// only a few statements.
pub(crate) fn in_chunks(
    keys: &[i64],
    mut f: impl FnMut(&str, &[Arg<'_>]) -> Result<()>,
) -> Result<()> {
    const SIZES: [usize; 4] = [8, 32, 128, 512];
    for chunk in keys.chunks(SIZES[SIZES.len() - 1]) {
        let size = SIZES
            .iter()
            .copied()
            .find(|&s| s >= chunk.len())
            .unwrap_or(chunk.len());
        let last = chunk[chunk.len() - 1];
        let list: Vec<Arg<'_>> = chunk
            .iter()
            .copied()
            .chain(std::iter::repeat(last))
            .take(size)
            .map(Arg::Int)
            .collect();
        f(&vec!["?"; size].join(", "), &list)?;
    }
    Ok(())
}

/// Runs `f` inside a savepoint of the open transaction: when `f` fails, its writes are undone and
/// the rest of the transaction goes on (one bad item of a batch leaves nothing half-written).
pub fn in_savepoint<T>(db: &Db, f: impl FnOnce() -> Result<T>) -> Result<T> {
    db.batch("SAVEPOINT item")?;
    match f() {
        Ok(v) => {
            db.batch("RELEASE item")?;
            Ok(v)
        }
        Err(e) => {
            db.batch("ROLLBACK TO item; RELEASE item")?;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = Config::for_db(dir.path().join("sub/memory.db"));
        let store = Store::open(&cfg).expect("open store");
        (dir, store)
    }

    #[test]
    fn opens_migrated_and_reopens() {
        let (dir, store) = temp_store();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert!(store.integrity_check().unwrap().is_empty());
        drop(store);
        let store = Store::open(&Config::for_db(dir.path().join("sub/memory.db"))).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn writes_are_synced_as_the_durability_says() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (durability, level) in [(Durability::Normal, 1), (Durability::Full, 2)] {
            let mut cfg = Config::for_db(dir.path().join("memory.db"));
            cfg.durability = durability;
            let store = Store::open(&cfg).unwrap();
            let synchronous = |db: &Db| -> Result<i64> {
                Ok(db
                    .lite()
                    .pragma_query_value(None, "synchronous", |r| r.get(0))?)
            };
            assert_eq!(store.write(synchronous).unwrap(), level, "{durability:?}");
            assert_eq!(store.read(synchronous).unwrap(), level, "{durability:?}");
        }
    }

    #[test]
    fn newer_schema_is_refused() {
        let (dir, store) = temp_store();
        store
            .write(|db| {
                Ok(db
                    .lite()
                    .pragma_update(None, "user_version", SCHEMA_VERSION + 1)?)
            })
            .unwrap();
        drop(store);
        let err = Store::open(&Config::for_db(dir.path().join("sub/memory.db")))
            .err()
            .unwrap();
        assert!(err.to_string().contains("newer"), "{err}");
    }

    #[test]
    fn savepoint_undoes_only_the_failed_item() {
        let (_dir, store) = temp_store();
        store
            .write(|tx| {
                in_savepoint(tx, || {
                    changes::log_relation(tx, 1)?;
                    Ok(())
                })?;
                let failed: Result<()> = in_savepoint(tx, || {
                    changes::log_relation(tx, 2)?;
                    Err(Error::Internal("boom".into()))
                });
                assert!(failed.is_err());
                Ok(())
            })
            .unwrap();
        assert_eq!(store.read(changes::max_seq).unwrap(), 1);
    }

    #[test]
    fn a_write_that_panics_is_rolled_back_and_the_next_write_succeeds() {
        let (_dir, store) = temp_store();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.write(|tx| -> Result<()> {
                changes::log_relation(tx, 1)?;
                panic!("forced");
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(store.read(changes::max_seq).unwrap(), 0, "rolled back");
        store
            .write(|tx| changes::log_relation(tx, 2).map(drop))
            .unwrap();
        assert_eq!(store.read(changes::max_seq).unwrap(), 1);
    }

    #[test]
    fn ids_are_distinct_and_prefixed() {
        let a = new_id("m_");
        assert!(a.starts_with("m_") && a.len() == 22);
        assert_ne!(a, new_id("m_"));
    }
}
