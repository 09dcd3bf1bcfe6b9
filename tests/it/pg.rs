//! A real PostgreSQL server for the tests: a fresh, empty database per test, on a throwaway
//! cluster this test process starts with the installed binaries, or on the server
//! `MNEMOGRAPH_TEST_PG` names. Without PostgreSQL the tests say SKIPPED and pass, unless
//! `MNEMOGRAPH_REQUIRE_PG` is set: then they fail.
//!
//! The throwaway cluster is one per test process, started on first use: `initdb` into a temp
//! folder, the server on a free port of 127.0.0.1 with its socket in that folder. A watchdog
//! process stops it and removes the folder once the test process has exited, however it exits
//! (statics are never dropped). As root, the cluster runs as the `postgres` user, since
//! PostgreSQL refuses to run as root.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The PostgreSQL server the tests' databases are made on.
enum Server {
    /// The server `MNEMOGRAPH_TEST_PG` names: the URL to connect to for CREATE DATABASE.
    External(String),
    /// This test process's own cluster.
    Throwaway(Cluster),
}

/// The server, started on first use; the reason the tests are skipped when there is none.
static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

/// A fresh, empty database for the test `test`, as a URL
/// (`postgres://postgres@127.0.0.1:PORT/t_<test>_<random>`), or on the server
/// `MNEMOGRAPH_TEST_PG` names. `None` when PostgreSQL is not installed or does not start, after
/// a SKIPPED line on stderr naming `test`; a panic instead when `MNEMOGRAPH_REQUIRE_PG` is set.
///
/// Callable from async tests too (the database is made on a thread of its own, since the sync
/// client runs a runtime of its own).
pub(crate) fn database(test: &str) -> Option<String> {
    let server = match server() {
        Ok(server) => server,
        Err(reason) => {
            skip(test, reason);
            return None;
        }
    };
    let name = database_name(test);
    let url = match server {
        Server::External(url) => {
            create_database(url, &name);
            with_database(url, &name)
        }
        Server::Throwaway(cluster) => {
            create_database(&cluster.url("postgres"), &name);
            cluster.url(&name)
        }
    };
    Some(url)
}

/// A cluster of one test's own, for tests that restart or stop the server: on the shared
/// cluster that would cut the connections of every test running at the same time. Started
/// even when `MNEMOGRAPH_TEST_PG` names a server (that one is not ours to restart); stopped
/// and removed when dropped (and by its watchdog, should the test process die first).
pub(crate) struct OwnCluster {
    cluster: Cluster,
}

/// A throwaway cluster for `test` alone; `None` after a SKIPPED line (or a panic with
/// `MNEMOGRAPH_REQUIRE_PG`) when PostgreSQL is not installed or does not start.
pub(crate) fn own_cluster(test: &str) -> Option<OwnCluster> {
    match Cluster::start() {
        Ok(cluster) => Some(OwnCluster { cluster }),
        Err(reason) => {
            skip(test, &reason);
            None
        }
    }
}

impl OwnCluster {
    /// Writes `name` into the cluster's data folder (readable by the server's user alone, as
    /// PostgreSQL wants a key file); `configure` and `restart` to use it.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn put_file(&self, name: &str, contents: &[u8]) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.cluster.dir.join("data").join(name);
        std::fs::write(&path, contents).expect("write into the data folder");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        if let Some(user) = &self.cluster.user {
            std::os::unix::fs::chown(&path, user_id(Some(user)), group_id(user)).expect("chown");
        }
    }

    /// Appends settings to the cluster's postgresql.conf (they apply at the next `restart`).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn configure(&self, settings: &str) {
        self.cluster
            .append_conf(&format!("\n{settings}\n"))
            .expect("configure the cluster");
    }

    /// A fresh, empty database on this cluster, as a URL.
    pub(crate) fn database(&self, test: &str) -> String {
        let name = database_name(test);
        create_database(&self.cluster.url("postgres"), &name);
        self.cluster.url(&name)
    }

    /// Restarts the server in place (`pg_ctl restart -m fast`: open connections are cut,
    /// committed data stays, same port).
    pub(crate) fn restart(&self) {
        self.cluster
            .pg_ctl(&["restart", "-m", "fast", "-w", "-t", "60"])
            .unwrap_or_else(|e| panic!("restart PostgreSQL: {e}"));
    }

    /// Stops the server (`-m fast`), waits `pause`, and starts it again on the same port.
    pub(crate) fn stop_for(&self, pause: Duration) {
        self.cluster
            .pg_ctl(&["stop", "-m", "fast", "-w", "-t", "60"])
            .unwrap_or_else(|e| panic!("stop PostgreSQL: {e}"));
        std::thread::sleep(pause);
        self.cluster
            .pg_ctl(&["start", "-w", "-t", "60"])
            .unwrap_or_else(|e| panic!("start PostgreSQL again: {e}"));
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = self
            .cluster
            .pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "60"]);
        let _ = std::fs::remove_dir_all(&self.cluster.dir);
    }
}

/// A connection to the database at `url` (no TLS).
///
/// The sync client starts a runtime of its own: from an async test, call it inside
/// `tokio::task::spawn_blocking` (or a thread).
pub(crate) fn connect(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// The server, started on the first call.
fn server() -> &'static Result<Server, String> {
    SERVER.get_or_init(|| match env("MNEMOGRAPH_TEST_PG") {
        Some(url) => {
            let url = url.to_string_lossy().into_owned();
            assert!(
                url.starts_with("postgres://") || url.starts_with("postgresql://"),
                "MNEMOGRAPH_TEST_PG must be a postgres:// URL, not {url:?}"
            );
            Ok(Server::External(url))
        }
        None => Cluster::start().map(Server::Throwaway),
    })
}

/// Says why `test` cannot run, on the process's stderr itself (which the test harness does not
/// capture, so the skip shows in every run); panics instead when `MNEMOGRAPH_REQUIRE_PG` is set.
fn skip(test: &str, reason: &str) {
    assert!(
        env("MNEMOGRAPH_REQUIRE_PG").is_none(),
        "{test}: {reason} (MNEMOGRAPH_REQUIRE_PG is set, so this is a failure, not a skip)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {reason}; set MNEMOGRAPH_TEST_PG or install postgresql"
    );
}

/// A non-empty environment variable.
#[allow(
    clippy::disallowed_methods,
    reason = "where the tests find PostgreSQL, not configuration"
)]
fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// `t_<test>_<random>`: lowercase, `[a-z0-9_]`, at most 63 characters (PostgreSQL's limit).
fn database_name(test: &str) -> String {
    let test: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    let random = getrandom::u64().expect("random bits for a database name");
    format!("t_{test}_{:012x}", random & 0xffff_ffff_ffff)
}

/// `CREATE DATABASE name` through a connection to `url`, on a thread of its own (see
/// [`database`]).
fn create_database(url: &str, name: &str) {
    std::thread::scope(|s| {
        s.spawn(|| {
            connect(url)
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .unwrap_or_else(|e| panic!("CREATE DATABASE {name} on {url}: {e}"));
        })
        .join()
        .expect("create the database");
    });
}

/// `url` with its database (the path) replaced by `name`; user, host and parameters kept.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let end = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut out = format!("{}/{name}", &base[..end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// A cluster in a temp folder (`data/`, `sock/`, `log`), serving 127.0.0.1:`port`.
struct Cluster {
    /// The folder of `initdb` and `pg_ctl`.
    bin: PathBuf,
    /// The temp folder.
    dir: PathBuf,
    port: u16,
    /// The user the cluster runs as when the tests run as root.
    user: Option<String>,
}

impl Cluster {
    /// `initdb` and `pg_ctl start` in a new temp folder, or why that was not possible.
    fn start() -> Result<Cluster, String> {
        let bin = find_bin().ok_or(
            "PostgreSQL is not installed (no initdb and pg_ctl on PATH or in \
             /usr/lib/postgresql/*/bin)",
        )?;
        let root = user_id(None) == Some(0);
        let user = root.then(|| "postgres".to_owned());
        // As root, under /tmp: the postgres user must reach the folder, and TMPDIR may be a
        // folder of root's.
        let parent = if root {
            PathBuf::from("/tmp")
        } else {
            std::env::temp_dir()
        };
        let dir = tempfile::Builder::new()
            .prefix("mnemograph-pg-")
            .tempdir_in(&parent)
            .map_err(|e| format!("PostgreSQL did not start: temp folder in {parent:?}: {e}"))?
            .keep();
        let cluster = Cluster {
            bin,
            dir,
            port: 0,
            user,
        };
        // First, so nothing is left behind from here on, whatever fails next.
        cluster.spawn_watchdog()?;
        cluster
            .prepare()
            .map_err(|e| format!("PostgreSQL did not start: {e}"))
    }

    /// The folder for the cluster's user, `initdb`, and the server on a free port (three tries,
    /// should another process take the port between its choice and the start).
    fn prepare(mut self) -> Result<Cluster, String> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod {}: {e}", self.dir.display()))?;
        if let Some(user) = &self.user {
            let (Some(uid), Some(gid)) = (user_id(Some(user)), group_id(user)) else {
                return Err(format!(
                    "the tests run as root and there is no `{user}` user to run it as"
                ));
            };
            std::os::unix::fs::chown(&self.dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", self.dir.display()))?;
        }
        let data = self.dir.join("data");
        let sock = self.dir.join("sock");
        self.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "--auth=trust".as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                // The C locale: the machine's LANG may name a locale that is not installed.
                "--locale=C".as_ref(),
                "--no-sync".as_ref(),
            ],
        )?;
        // postgresql.conf rather than `-o`: no quoting, and `pg_ctl restart` keeps it all.
        std::fs::create_dir(&sock).map_err(|e| format!("create {}: {e}", sock.display()))?;
        if let Some(user) = &self.user {
            // The server creates its socket there.
            let (uid, gid) = (user_id(Some(user)), group_id(user));
            std::os::unix::fs::chown(&sock, uid, gid)
                .map_err(|e| format!("chown {}: {e}", sock.display()))?;
        }
        let settings = format!(
            "\n# The test harness's throwaway cluster.\nlisten_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{}'\nmax_connections = 200\nfsync = off\n\
             synchronous_commit = off\nfull_page_writes = off\n",
            sock.display()
        );
        self.append_conf(&settings)?;
        let mut failures = Vec::new();
        for _ in 0..3 {
            self.port = free_port()?;
            self.append_conf(&format!("port = {}\n", self.port))?;
            match self.pg_ctl(&["start", "-w", "-t", "60"]) {
                Ok(()) => return Ok(self),
                Err(e) => failures.push(e),
            }
        }
        Err(failures.join("; "))
    }

    /// A URL of database `name` on this cluster.
    fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Appends `text` to the cluster's postgresql.conf.
    fn append_conf(&self, text: &str) -> Result<(), String> {
        let conf = self.dir.join("data/postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| format!("append to {}: {e}", conf.display()))
    }

    /// `pg_ctl -D data -l log <args…>` (the log always named: without it the server would write
    /// to pg_ctl's stdout, which is read to its end).
    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let data = self.dir.join("data");
        let log = self.dir.join("log");
        let mut all = vec![
            "-D".as_ref(),
            data.as_os_str(),
            "-l".as_ref(),
            log.as_os_str(),
        ];
        all.extend(args.iter().map(std::ffi::OsStr::new));
        self.run("pg_ctl", &all).map_err(|e| {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("{e}\nserver log:\n{}", tail.join("\n"))
        })
    }

    /// Runs `program` of the PostgreSQL binaries with `args`, as the cluster's user.
    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
        let argv = self.argv(program, args);
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            // PostgreSQL's programs need to read their current folder; the tests' may be closed
            // to the cluster's user.
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run {program}: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{program} {} failed ({}): {}{}",
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ))
    }

    /// The command line of `program` with `args`, as the cluster's user: through `runuser`, or
    /// `su` where there is no `runuser`.
    fn argv(&self, program: &str, args: &[&std::ffi::OsStr]) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![self.bin.join(program).into_os_string()];
        argv.extend(args.iter().map(|a| a.to_os_string()));
        let Some(user) = &self.user else {
            return argv;
        };
        if let Some(runuser) = find_on_path("runuser", &["/usr/sbin", "/sbin"]) {
            let mut wrapped: Vec<OsString> = vec![runuser.into(), "-u".into(), user.into()];
            wrapped.push("--".into());
            wrapped.extend(argv);
            return wrapped;
        }
        vec![
            "su".into(),
            user.into(),
            "-s".into(),
            "/bin/sh".into(),
            "-c".into(),
            shell_line(&argv).into(),
        ]
    }

    /// A detached `sh` that waits for this test process to exit, then stops the server and
    /// removes the folder. Its own process group, so a Ctrl-C of the tests does not end it.
    fn spawn_watchdog(&self) -> Result<(), String> {
        let data = self.dir.join("data");
        let stop = self.argv(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "stop".as_ref(),
                "-m".as_ref(),
                "immediate".as_ref(),
            ],
        );
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done\n\
             [ -f {pidfile} ] && {stop} >/dev/null 2>&1\n\
             rm -rf {dir}\n",
            pid = std::process::id(),
            pidfile = shell_quote(&data.join("postmaster.pid").into_os_string()),
            stop = shell_line(&stop),
            dir = shell_quote(&self.dir.clone().into_os_string()),
        );
        Command::new("sh")
            .args(["-c", &script])
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map(drop)
            .map_err(|e| format!("PostgreSQL did not start: spawn the cleanup watchdog: {e}"))
    }
}

/// The folder of `initdb` and `pg_ctl`: the one on PATH, else the newest of Debian's
/// `/usr/lib/postgresql/<version>/bin`.
fn find_bin() -> Option<PathBuf> {
    let complete = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(initdb) = find_on_path("initdb", &[]) {
        // Through a symlink (/usr/local/bin/initdb → …/bin/initdb) to the real folder.
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        if let Some(dir) = real.parent().filter(|d| complete(d)) {
            return Some(dir.to_owned());
        }
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bin = entry.path().join("bin");
            complete(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// `name` in a folder of PATH, or of `extra`.
fn find_on_path(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = env("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// `id -u [user]`: the user id of `user`, or this process's.
fn user_id(user: Option<&str>) -> Option<u32> {
    id(&["-u"], user)
}

/// `id -g user`: the group id of `user`.
fn group_id(user: &str) -> Option<u32> {
    id(&["-g"], Some(user))
}

/// A number `id` prints for `user` (this process without one).
fn id(flags: &[&str], user: Option<&str>) -> Option<u32> {
    let out = Command::new("id")
        .args(flags)
        .args(user)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// A port of 127.0.0.1 no one listens on (the OS's choice).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("find a free port: {e}"))
}

/// `argv` as one line of `sh`.
fn shell_line(argv: &[OsString]) -> String {
    argv.iter().map(shell_quote).collect::<Vec<_>>().join(" ")
}

/// `word` in single quotes for `sh`.
fn shell_quote(word: &OsString) -> String {
    format!("'{}'", word.to_string_lossy().replace('\'', r"'\''"))
}

/// A table `memories` in the database at `url` holding one row, `(1, word)`.
fn fill(url: &str, word: &str) {
    let mut c = connect(url);
    c.batch_execute("CREATE TABLE memories (id bigint PRIMARY KEY, text text NOT NULL)")
        .expect("create the table");
    c.execute(
        "INSERT INTO memories (id, text) VALUES ($1, $2)",
        &[&1_i64, &word],
    )
    .expect("insert the row");
}

/// The rows of [`fill`]'s table.
fn rows(url: &str) -> Vec<(i64, String)> {
    connect(url)
        .query("SELECT id, text FROM memories ORDER BY id", &[])
        .expect("read the table")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[test]
fn a_throwaway_cluster_serves_fresh_databases() {
    let test = "a_throwaway_cluster_serves_fresh_databases";
    let Some(a) = database(test) else {
        return;
    };
    let b = database(test).unwrap();
    assert_ne!(a, b);
    for (url, word) in [(&a, "alpha"), (&b, "beta")] {
        let tables: i64 = connect(url)
            .query_one(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(tables, 0, "{url} is not empty");
        fill(url, word);
    }
    assert_eq!(rows(&a), [(1, "alpha".to_owned())]);
    assert_eq!(rows(&b), [(1, "beta".to_owned())]);
}

#[test]
fn a_cluster_of_its_own_restarts_and_stops_keeping_the_data() {
    let test = "a_cluster_of_its_own_restarts_and_stops_keeping_the_data";
    let Some(own) = own_cluster(test) else {
        return;
    };
    let (a, b) = (own.database(test), own.database(test));
    for (url, word) in [(&a, "alpha"), (&b, "beta")] {
        fill(url, word);
    }
    let started = |c: &mut postgres::Client| -> String {
        c.query_one("SELECT pg_postmaster_start_time()::text", &[])
            .unwrap()
            .get(0)
    };
    let mut before = connect(&a);
    let first_start = started(&mut before);
    own.restart();
    // A restart indeed: the connection from before is cut, the server started anew.
    assert!(before.simple_query("SELECT 1").is_err());
    let mut after = connect(&a);
    assert_ne!(started(&mut after), first_start);
    assert_eq!(rows(&a), [(1, "alpha".to_owned())]);
    assert_eq!(rows(&b), [(1, "beta".to_owned())]);

    own.stop_for(Duration::from_millis(300));
    assert!(after.simple_query("SELECT 1").is_err());
    assert_eq!(rows(&a), [(1, "alpha".to_owned())]);
    assert_eq!(rows(&b), [(1, "beta".to_owned())]);
}
