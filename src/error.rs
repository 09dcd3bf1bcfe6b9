//! The one error type of the library: user errors (the caller can fix them) apart from internal ones.

/// Everything that can go wrong in mnemograph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is missing, malformed or out of range; `hint` says how to fix it.
    #[error("invalid `{field}`: {reason}. {hint}")]
    InvalidArgument {
        field: String,
        reason: String,
        hint: String,
    },
    /// A memory, relation or task that does not exist (or is not visible to the caller).
    #[error("{what} not found: {id}. {hint}")]
    NotFound {
        what: &'static str,
        id: String,
        hint: String,
    },
    /// The caller may not use what it named (a namespace outside its token's).
    #[error("not allowed: `{field}` {reason}. {hint}")]
    Forbidden {
        field: String,
        reason: String,
        hint: String,
    },
    /// A name that is already taken in its namespace.
    #[error("conflict: {reason}. {hint}")]
    Conflict { reason: String, hint: String },
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("postgres: {}", pg_reason(.0))]
    Postgres(#[from] postgres::Error),
    /// The database server cannot be reached; the message says where and what to check.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("text index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// An embedding provider failed or answered something unusable (wrong dimension, bad reply,
    /// missing model file). Recall falls back to text search when this happens.
    #[error("embedder {provider}: {reason}")]
    Embed { provider: String, reason: String },
    /// Stored state that cannot be read back.
    #[error("corrupted {what}: {reason}")]
    Corrupted { what: String, reason: String },
    /// The caller cancelled the work before it finished.
    #[error("cancelled")]
    Cancelled,
    /// A background worker died or a lock was poisoned.
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    /// True when the caller can fix it (bad input, unknown id); false for faults of the server.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Error::InvalidArgument { .. }
                | Error::NotFound { .. }
                | Error::Conflict { .. }
                | Error::Forbidden { .. }
        )
    }

    /// The disk holding the database or its indexes is full (SQLite's `SQLITE_FULL`, `ENOSPC`).
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Sqlite(e) => {
                e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) || io_full_in(e)
            }
            Error::Io(e) => io_full(e),
            Error::Tantivy(tantivy::TantivyError::IoError(e)) => io_full(e),
            Error::Tantivy(e) => io_full_in(e) || e.to_string().contains(ENOSPC_TEXT),
            _ => false,
        }
    }

    /// The database file is damaged or is not a database (`SQLITE_CORRUPT`, `SQLITE_NOTADB`).
    pub fn is_corrupt_database(&self) -> bool {
        matches!(
            self,
            Error::Sqlite(e) if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
            )
        )
    }

    /// The database server cannot be reached, or cut the connection a call was using (it stopped,
    /// restarts, or the network failed). The store connects again by itself on the next call.
    pub fn is_database_unavailable(&self) -> bool {
        match self {
            Error::Unavailable(_) => true,
            Error::Postgres(e) => pg_connection_lost(e),
            _ => false,
        }
    }

    /// The text index's writer has stopped: one of its worker threads failed on a write (tantivy
    /// keeps only a message, not the cause; most often the disk was full). The index drops such
    /// a writer and takes a new one on its next update.
    pub fn is_text_index_stopped(&self) -> bool {
        matches!(
            self,
            Error::Tantivy(tantivy::TantivyError::ErrorInThread(_))
        )
    }

    /// For a fault of the server that the operator can remedy (a full disk, a damaged database, a
    /// text index stopped by a failed write): what happened and what to do, fit to show a client.
    /// `None` for other faults.
    pub fn advice(&self) -> Option<String> {
        if self.is_disk_full() {
            Some(format!(
                "the disk holding the memory database or its indexes is full ({self}): free disk space, then try again (the indexes catch up by themselves); what this call was writing was not stored"
            ))
        } else if self.is_corrupt_database() {
            Some(format!(
                "the memory database file is damaged or is not a mnemograph database ({self}): run `mnemograph doctor` to check it, and restore it from a backup if it reports damage"
            ))
        } else if let Error::Unavailable(_) = self {
            // The reason names the database's address and user: it goes to the log, not to
            // clients.
            Some(
                "the memory database is unavailable: try again in a moment; the server connects again by itself once the database is back (its log says why)".to_owned(),
            )
        } else if let Error::Postgres(e) = self
            && pg_connection_lost(e)
        {
            Some(
                "the memory database is unavailable: the connection to it was lost; try again in a moment, the server connects again by itself (a write cut off this way may or may not have been stored; the server's log says why)".to_owned(),
            )
        } else if self.is_text_index_stopped() {
            Some(format!(
                "the text index stopped after a write to it failed, most often because the disk was full ({self}): free disk space, then try again (the index takes a new writer and catches up from the database by itself); memories can still be read by id with `get`"
            ))
        } else {
            None
        }
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(
        field: impl Into<String>,
        reason: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
            hint: hint.into(),
        }
    }

    /// Shorthand for [`Error::NotFound`].
    pub fn not_found(what: &'static str, id: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::NotFound {
            what,
            id: id.into(),
            hint: hint.into(),
        }
    }
}

/// What a PostgreSQL error says, with its causes: the client's own words are only the kind of
/// error ("db error", "error connecting to server"); the server's message or the OS error
/// follows them ("db error: FATAL: the database system is starting up").
pub(crate) fn pg_reason(e: &postgres::Error) -> String {
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// Whether `e` says the connection is gone or the server is going away or not yet up: closed,
/// an I/O error on the socket, a connection exception (SQLSTATE class 08), or a shutdown or
/// start-up in progress (57P01–57P03).
fn pg_connection_lost(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return code.code().starts_with("08")
            || [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
            ]
            .contains(code);
    }
    std::error::Error::source(e).is_some_and(|c| c.is::<std::io::Error>())
}

/// How the OS describes `ENOSPC` inside messages that keep no error value.
const ENOSPC_TEXT: &str = "(os error 28)";

fn io_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

/// Whether an `ENOSPC` lies anywhere in `e`'s chain of sources.
fn io_full_in(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.downcast_ref::<std::io::Error>().is_some_and(io_full) {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Result of every fallible library call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A real SQLite error: `sql` run on a connection to `path`.
    fn sqlite_error(path: &std::path::Path, setup: &str, sql: &str) -> Error {
        let conn = rusqlite::Connection::open(path).unwrap();
        if let Err(e) = conn.execute_batch(setup) {
            return e.into();
        }
        conn.execute_batch(sql)
            .expect_err("the statement must fail")
            .into()
    }

    #[test]
    fn a_file_that_is_not_a_database_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        std::fs::write(&path, vec![0xA5u8; 64 * 1024]).unwrap();
        let e = sqlite_error(&path, "SELECT 1", "SELECT count(*) FROM sqlite_master");
        assert!(e.is_corrupt_database(), "{e:?}");
        assert!(!e.is_disk_full(), "{e:?}");
        assert!(!e.is_user_error());
        let advice = e.advice().expect("advice for a damaged database");
        assert!(advice.contains("mnemograph doctor"), "{advice}");
        assert!(advice.contains("backup"), "{advice}");
    }

    #[test]
    fn a_full_database_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        // SQLite answers SQLITE_FULL when the file may not grow: the disk-full path of a real
        // database, without filling a disk.
        let e = sqlite_error(
            &path,
            "CREATE TABLE t (b BLOB); PRAGMA max_page_count = 3;",
            "INSERT INTO t VALUES (zeroblob(1000000))",
        );
        assert!(e.is_disk_full(), "{e:?}");
        assert!(!e.is_corrupt_database(), "{e:?}");
        let advice = e.advice().expect("advice for a full disk");
        assert!(advice.contains("free disk space"), "{advice}");
    }

    #[test]
    fn an_unreachable_database_says_so_and_what_to_do() {
        let e = Error::Unavailable(
            "cannot connect to PostgreSQL at postgres://db.example/memory (error connecting to server)".into(),
        );
        assert!(e.is_database_unavailable() && !e.is_user_error());
        let advice = e.advice().expect("advice for an unreachable database");
        assert!(advice.contains("database is unavailable"), "{advice}");
        assert!(advice.contains("try again"), "{advice}");
        assert!(
            !advice.contains("db.example") && !advice.contains("postgres://"),
            "where the database is and who connects to it stay in the log: {advice}"
        );
        assert!(!Error::Internal("boom".into()).is_database_unavailable());
    }

    #[test]
    fn other_sources_of_the_same_faults_are_recognised() {
        let enospc = std::io::Error::from_raw_os_error(28);
        assert!(Error::Io(enospc).is_disk_full());
        let tantivy = tantivy::TantivyError::from(std::io::Error::from_raw_os_error(28));
        assert!(Error::Tantivy(tantivy).is_disk_full());
        let corrupt = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some("database disk image is malformed".into()),
        );
        assert!(Error::Sqlite(corrupt).is_corrupt_database());
        let stopped = Error::Tantivy(tantivy::TantivyError::ErrorInThread(
            "An index writer was killed.".into(),
        ));
        assert!(stopped.is_text_index_stopped() && !stopped.is_disk_full());
        let advice = stopped.advice().expect("advice for a stopped text index");
        assert!(advice.contains("free disk space"), "{advice}");
        let other = Error::Io(std::io::Error::other("boom"));
        assert!(!other.is_disk_full() && !other.is_corrupt_database());
        assert_eq!(other.advice(), None);
        assert_eq!(Error::invalid("x", "y", "z").advice(), None);
    }
}
