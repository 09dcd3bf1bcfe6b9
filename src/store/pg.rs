//! PostgreSQL as the store: connecting from a `postgres://` URL, and the schema with its
//! versioned migrations. The tables are those of the SQLite schema in PostgreSQL's types
//! (`BIGINT`, `DOUBLE PRECISION`, `BYTEA`), in SQL that PostgreSQL-compatible distributed
//! engines run too: no extension, no advisory lock, no `LOCK TABLE`.

use std::str::FromStr;
use std::time::Duration;

use super::Db;
use super::sql::{Conn, PgConn};
use crate::config::redact;
use crate::error::{Error, Result};

/// Version of the PostgreSQL schema this build writes (numbered on its own: the SQLite
/// schema's history of small steps starts here as one).
pub(crate) const PG_SCHEMA_VERSION: i64 = 5;

/// How long connecting may take when the URL does not say (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A PostgreSQL database to connect to.
pub(crate) struct Target {
    config: postgres::Config,
    described: String,
    /// TLS for `sslmode=require`, or with `sslrootcert` (feature `tls`).
    #[cfg(feature = "tls")]
    tls: Option<super::tls::MakeRustls>,
}

/// `url` without its `sslrootcert=FILE` parameter (which the client does not read), and that file.
fn split_root_cert(url: &str) -> (String, Option<std::path::PathBuf>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut ca = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| match p.strip_prefix("sslrootcert=") {
            Some(file) => {
                ca = Some(std::path::PathBuf::from(file));
                false
            }
            None => true,
        })
        .collect();
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, ca)
}

impl Target {
    /// Reads a `postgres://user:password@host:port/dbname?sslmode=…` URL (or the key=value form).
    pub(crate) fn parse(url: &str) -> Result<Target> {
        let (plain, ca) = split_root_cert(url);
        let mut config = postgres::Config::from_str(&plain).map_err(|e| {
            Error::invalid(
                "db",
                format!("`{}` is not a PostgreSQL URL ({e})", redact(url)),
                "write it as postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME",
            )
        })?;
        if config.get_dbname().is_none() {
            return Err(Error::invalid(
                "db",
                format!("`{}` names no database", redact(url)),
                "end the URL with /DBNAME",
            ));
        }
        let mode = config.get_ssl_mode();
        #[cfg(not(feature = "tls"))]
        if mode == postgres::config::SslMode::Require || ca.is_some() {
            return Err(Error::invalid(
                "db",
                "sslmode=require or sslrootcert asks for TLS, which this build does not speak",
                "build mnemograph with `--features tls`, or use sslmode=disable on a trusted network",
            ));
        }
        // TLS when the URL asks for it (`sslmode=require`, or a CA to check the server with).
        // The default `prefer` stays plain: libpq's `prefer` checks no certificate, and a
        // server with a private CA would otherwise be refused where a plain connection works.
        #[cfg(feature = "tls")]
        let tls = match mode {
            postgres::config::SslMode::Require => Some(super::tls::MakeRustls::new(ca.as_deref())?),
            postgres::config::SslMode::Prefer if ca.is_some() => {
                Some(super::tls::MakeRustls::new(ca.as_deref())?)
            }
            _ => None,
        };
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("mnemograph");
        Ok(Target {
            described: redact(url),
            config,
            #[cfg(feature = "tls")]
            tls,
        })
    }

    /// The URL without its password.
    pub(crate) fn describe(&self) -> String {
        self.described.clone()
    }

    /// A new connection.
    pub(crate) fn connect(&self) -> Result<Db> {
        #[cfg(feature = "tls")]
        let client = match &self.tls {
            Some(tls) => self.config.connect(tls.clone()),
            None => self.config.connect(postgres::NoTls),
        };
        #[cfg(not(feature = "tls"))]
        let client = self.config.connect(postgres::NoTls);
        let client = client.map_err(|e| {
            Error::Unavailable(format!(
                "cannot connect to PostgreSQL at {} ({}): check that the server runs and the URL, user and password are right",
                self.described,
                crate::error::pg_reason(&e)
            ))
        })?;
        Ok(Db {
            conn: Conn::Pg(Box::new(PgConn::new(client))),
        })
    }
}

/// A connection listening for commits that appended to the change log (PostgreSQL's
/// `LISTEN`), so a process learns of another's writes at once instead of at its next poll.
pub struct Listener {
    db: Db,
}

impl Listener {
    /// Opens its own connection and starts listening.
    pub(crate) fn start(target: &Target) -> Result<Listener> {
        let db = target.connect()?;
        db.batch(&format!("LISTEN {}", super::changes::CHANNEL))?;
        Ok(Listener { db })
    }

    /// Waits up to `timeout` for a notification; true when at least one came (all that came
    /// are taken). An error when the connection is gone: listen again on a new one.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        let Conn::Pg(c) = &self.db.conn else {
            return Ok(false);
        };
        use postgres::fallible_iterator::FallibleIterator;
        let mut client = c.client_mut()?;
        let came = {
            let mut notifications = client.notifications();
            let came = notifications.timeout_iter(timeout).next()?.is_some();
            if came {
                let mut pending = notifications.iter();
                while pending.next()?.is_some() {}
            }
            came
        };
        if !came && client.is_closed() {
            return Err(Error::Unavailable(
                "the connection listening for changes closed".into(),
            ));
        }
        Ok(came)
    }
}

/// Version 1: everything of SQLite schema 8. Keys are identities (`BY DEFAULT`, so a database
/// moved from SQLite keeps its keys); the change log's positions come from `log_head`, whose
/// one row every write transaction locks first (see `changes`).
const V1: &str = r#"
CREATE TABLE memories (
    key            BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    namespace      TEXT NOT NULL,
    kind           TEXT NOT NULL,
    name           TEXT,
    content        TEXT NOT NULL,
    tags           TEXT NOT NULL DEFAULT '[]',
    importance     DOUBLE PRECISION NOT NULL DEFAULT 0.5,
    metadata       TEXT NOT NULL DEFAULT '{}',
    content_hash   BYTEA NOT NULL,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    accessed_at    BIGINT,
    access_count   BIGINT NOT NULL DEFAULT 0,
    valid_from     BIGINT,
    valid_until    BIGINT,
    superseded_by  TEXT,
    version        BIGINT NOT NULL DEFAULT 1,
    deleted_at     BIGINT,
    merged_into    TEXT,
    archived_at    BIGINT,
    salience       DOUBLE PRECISION NOT NULL DEFAULT 0.5,
    salience_at    BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX memories_live_name ON memories(namespace, name)
    WHERE name IS NOT NULL AND deleted_at IS NULL;
CREATE INDEX memories_hash ON memories(namespace, content_hash);
CREATE INDEX memories_ns_kind ON memories(namespace, kind);
CREATE INDEX memories_named ON memories(namespace, name) WHERE name IS NOT NULL;

CREATE TABLE relations (
    key            BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    src            BIGINT NOT NULL REFERENCES memories(key),
    dst            BIGINT NOT NULL REFERENCES memories(key),
    kind           TEXT NOT NULL,
    weight         DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    metadata       TEXT NOT NULL DEFAULT '{}',
    created_at     BIGINT NOT NULL,
    reinforced_at  BIGINT NOT NULL,
    valid_from     BIGINT,
    valid_until    BIGINT,
    deleted_at     BIGINT,
    UNIQUE (src, dst, kind)
);
CREATE INDEX relations_dst ON relations(dst);

CREATE TABLE history (
    seq         BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    entity      TEXT NOT NULL CHECK (entity IN ('memory', 'relation')),
    entity_key  BIGINT NOT NULL,
    op          TEXT NOT NULL,
    actor       TEXT NOT NULL,
    at          BIGINT NOT NULL,
    previous    TEXT NOT NULL,
    run         TEXT
);
CREATE INDEX history_entity ON history(entity, entity_key);
CREATE INDEX history_run ON history(run, seq) WHERE run IS NOT NULL;

CREATE TABLE log_head (
    id   BIGINT PRIMARY KEY CHECK (id = 1),
    seq  BIGINT NOT NULL
);
INSERT INTO log_head (id, seq) VALUES (1, 0);

CREATE TABLE changes (
    seq          BIGINT PRIMARY KEY,
    memory_key   BIGINT,
    relation_key BIGINT,
    op           TEXT NOT NULL,
    stamp        BIGINT NOT NULL DEFAULT 0
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
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    ttl_ms          BIGINT,
    poll_interval_ms BIGINT,
    checkpoint      TEXT,
    boot_id         TEXT NOT NULL,
    heartbeat_at    BIGINT NOT NULL,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    input_requests  TEXT,
    input_responses TEXT
);
CREATE INDEX tasks_owner ON tasks(owner, created_at);
CREATE INDEX tasks_status ON tasks(status, heartbeat_at);

CREATE TABLE vectors (
    memory_key     BIGINT PRIMARY KEY REFERENCES memories(key) ON DELETE CASCADE,
    model          TEXT NOT NULL,
    version        BIGINT NOT NULL,
    dim            BIGINT NOT NULL,
    vec            BYTEA NOT NULL
);

CREATE TABLE import_keys (
    namespace   TEXT NOT NULL,
    ext         TEXT NOT NULL,
    memory_key  BIGINT NOT NULL REFERENCES memories(key) ON DELETE CASCADE,
    PRIMARY KEY (namespace, ext)
);

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
    started_at  BIGINT NOT NULL,
    ended_at    BIGINT,
    undone_at   BIGINT,
    undone_by   TEXT
);
CREATE INDEX runs_started ON runs(started_at);

CREATE TABLE leases (
    name          TEXT PRIMARY KEY,
    holder        TEXT NOT NULL,
    run_id        TEXT,
    heartbeat_at  BIGINT NOT NULL
);
"#;

/// The migrations, in order: step `i` brings version `i` to `i + 1`.
/// Version 2: a task keeps the rights of the call that started it (SQLite's version 9).
const V2: &str = "ALTER TABLE tasks ADD COLUMN access_grant TEXT";

/// Version 3: jobs, their versions, and the memories and task results filed under them
/// (SQLite's version 10).
const V3: &str = r#"
CREATE TABLE jobs (
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    state       TEXT NOT NULL,
    head        BIGINT NOT NULL DEFAULT 0,
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    closed_at   BIGINT,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE job_versions (
    namespace   TEXT NOT NULL,
    job         TEXT NOT NULL,
    version     BIGINT NOT NULL,
    parent      BIGINT,
    reverts_to  BIGINT,
    body        TEXT NOT NULL,
    author      TEXT NOT NULL,
    task_id     TEXT,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (namespace, job, version)
);
CREATE TABLE job_memories (
    memory_key  BIGINT PRIMARY KEY REFERENCES memories(key),
    namespace   TEXT NOT NULL,
    job         TEXT NOT NULL,
    added_at    BIGINT NOT NULL
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
    finished_at BIGINT NOT NULL
);
CREATE INDEX job_results_job ON job_results(namespace, job, finished_at);
"#;

/// Version 4: the job's head version when a memory was filed under it (SQLite's version 11).
const V4: &str = "ALTER TABLE job_memories ADD COLUMN head_version BIGINT NOT NULL DEFAULT 0";

/// Version 5: the namespaces a job's task result could read, a closed job's summary and when
/// its context was archived (SQLite's version 12).
const V5: &str = "ALTER TABLE job_results ADD COLUMN reach TEXT;
ALTER TABLE jobs ADD COLUMN summary_key BIGINT;
ALTER TABLE jobs ADD COLUMN archived_at BIGINT;";

const STEPS: [&str; PG_SCHEMA_VERSION as usize] = [V1, V2, V3, V4, V5];

/// Brings the database up to [`PG_SCHEMA_VERSION`], one version per transaction. Instances
/// starting together take turns on the `meta` row that holds the version (the first creates
/// the table; a loser of that race tries again).
pub(crate) fn migrate(db: &Db) -> Result<()> {
    let mut tries = 0;
    loop {
        let made = db.batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); \
             INSERT INTO meta (key, value) VALUES ('schema_version', '0') ON CONFLICT DO NOTHING",
        );
        match made {
            Ok(()) => break,
            // Two `CREATE TABLE IF NOT EXISTS` at once: one fails on the catalog's unique index.
            Err(_) if tries < 3 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
    loop {
        db.transaction_step("BEGIN", true)?;
        let step = migrate_one(db);
        match step {
            Ok(true) => db.transaction_step("COMMIT", false)?,
            Ok(false) => {
                db.transaction_step("COMMIT", false)?;
                return Ok(());
            }
            Err(e) => {
                let _ = db.transaction_step("ROLLBACK", false);
                return Err(e);
            }
        }
    }
}

/// Applies the next migration inside the open transaction; false when there was none.
fn migrate_one(db: &Db) -> Result<bool> {
    let version: i64 = db
        .query_one(
            "SELECT value FROM meta WHERE key = 'schema_version' FOR UPDATE",
            &[],
            |r| r.get::<String>(0),
        )?
        .parse()
        .map_err(|_| Error::Corrupted {
            what: "database schema".into(),
            reason: "the schema version in table meta is not a number".into(),
        })?;
    check_version(version)?;
    if version == PG_SCHEMA_VERSION {
        return Ok(false);
    }
    db.batch(STEPS[version as usize])?;
    if version == 0 {
        db.execute(
            "INSERT INTO meta (key, value) VALUES ('database_id', ?1) ON CONFLICT DO NOTHING",
            super::args![super::new_id("db_")],
        )?;
    }
    db.execute(
        "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
        super::args![(version + 1).to_string()],
    )?;
    tracing::info!(version = version + 1, "PostgreSQL database migrated");
    Ok(true)
}

fn check_version(version: i64) -> Result<()> {
    if version > PG_SCHEMA_VERSION {
        return Err(Error::Corrupted {
            what: "database schema".into(),
            reason: format!(
                "version {version} is newer than this build understands ({PG_SCHEMA_VERSION}); upgrade mnemograph"
            ),
        });
    }
    if version < 0 {
        return Err(Error::Corrupted {
            what: "database schema".into(),
            reason: format!("version {version} is not a version"),
        });
    }
    Ok(())
}

/// The schema version recorded in the database.
pub(crate) fn schema_version(db: &Db) -> Result<i64> {
    let v: String = db.query_one(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        &[],
        |r| r.get(0),
    )?;
    Ok(v.parse().unwrap_or(0))
}

/// The database's size on disk as the server reports it.
pub(crate) fn size_bytes(db: &Db) -> Result<u64> {
    let n: i64 = db.query_one(
        "SELECT CAST(pg_database_size(current_database()) AS BIGINT)",
        &[],
        |r| r.get(0),
    )?;
    Ok(n.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redact("postgres://ann:secret@db.example:5432/memory"),
            "postgres://ann:***@db.example:5432/memory"
        );
        assert_eq!(
            redact("postgres://ann@db.example/memory"),
            "postgres://ann@db.example/memory"
        );
    }

    #[test]
    fn the_root_certificate_is_taken_out_of_the_url() {
        let (url, ca) = split_root_cert("postgres://a@h/m?sslmode=require&sslrootcert=ca.pem");
        assert_eq!(url, "postgres://a@h/m?sslmode=require");
        assert_eq!(ca, Some(std::path::PathBuf::from("ca.pem")));
        let (url, ca) = split_root_cert("postgres://a@h/m?sslrootcert=ca.pem");
        assert_eq!((url.as_str(), ca.is_some()), ("postgres://a@h/m", true));
        assert_eq!(split_root_cert("postgres://a@h/m").1, None);
    }

    #[test]
    fn urls_without_a_database_or_asking_for_tls_are_refused() {
        let err = Target::parse("postgres://ann@localhost").err().unwrap();
        assert!(err.to_string().contains("names no database"), "{err}");
        if cfg!(not(feature = "tls")) {
            let err = Target::parse("postgres://ann@localhost/m?sslmode=require")
                .err()
                .unwrap();
            assert!(err.to_string().contains("TLS"), "{err}");
        }
        let err = Target::parse("postgres://ann:pw@local host:x/m")
            .err()
            .unwrap();
        assert!(!err.to_string().contains("pw"), "{err}");
    }
}
