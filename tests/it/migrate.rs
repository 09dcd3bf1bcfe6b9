//! `mnemograph migrate` on the real binary and a real PostgreSQL: a SQLite database moved to
//! PostgreSQL and back exports the same bytes and recalls the same memories; a migration whose
//! process is killed goes on where it stopped when run again, adding nothing twice; a target
//! that is not empty is refused and left as it was; every column of both schemas is copied.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mnemograph::config::Config;
use mnemograph::model::NewMemory;
use mnemograph::store::Store;
use mnemograph::store::changes::{self, ChangeOp};
use mnemograph::store::copy::TABLES;
use mnemograph::store::memories;
use serde_json::{Value, json};

use crate::support::{BIN, Era, Server};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/locomo/sample.json");
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data");

/// `mnemograph` with `args`, its cache folder (the default home of a PostgreSQL database's
/// indexes) in `scratch`.
fn command(args: &[&str], scratch: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("MNEMOGRAPH_DB")
        .env_remove("MNEMOGRAPH_INDEX_DIR")
        .env_remove("MNEMOGRAPH_IMPORT_ROOTS")
        .env("XDG_CACHE_HOME", scratch.join("cache"));
    cmd
}

fn run(args: &[&str], scratch: &Path) -> Output {
    command(args, scratch).output().expect("run mnemograph")
}

/// Runs the binary, which must succeed; its stdout.
fn ok(args: &[&str], scratch: &Path) -> String {
    let out = run(args, scratch);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// `export --format jsonl` of `db` (with `extra` flags), its header's time left out.
fn export(db: &str, extra: &[&str], scratch: &Path) -> String {
    let index = scratch.join("index-of-export");
    let mut args = vec!["export", "--format", "jsonl", "--db", db];
    args.extend(extra);
    if db.starts_with("postgres") {
        args.extend(["--index-dir", index.to_str().expect("a UTF-8 path")]);
    }
    let text = ok(&args, scratch);
    let (header, body) = text.split_once('\n').expect("a header line");
    let mut header: Value = serde_json::from_str(header).expect("the header is JSON");
    header
        .as_object_mut()
        .expect("the header is an object")
        .remove("exported_at");
    format!("{header}\n{body}")
}

/// Rows of each copied table, in `TABLES`' order.
fn counts(store: &Store) -> Vec<(&'static str, i64)> {
    store
        .read(|db| {
            TABLES
                .iter()
                .map(|t| {
                    let n = db.query_one(
                        &format!("SELECT CAST(count(*) AS BIGINT) FROM {}", t.name),
                        &[],
                        |r| r.get(0),
                    )?;
                    Ok((t.name, n))
                })
                .collect()
        })
        .expect("count the rows")
}

/// Writes a memory into a copy: it must take the key after the largest copied and the log
/// position after the copied head.
fn write_after_copy(cfg: &Config, what: &str) {
    let store = Store::open(cfg).expect("open the copy");
    let (largest, head) = store
        .read(|db| {
            let largest: i64 = db.query_one(
                "SELECT CAST(coalesce(max(key), 0) AS BIGINT) FROM memories",
                &[],
                |r| r.get(0),
            )?;
            Ok((largest, changes::max_seq(db)?))
        })
        .expect("read the copy");
    let key = store
        .write(|db| {
            let m = memories::insert(db, "m_after_the_copy", &NewMemory::note("written after"), 1)?;
            changes::log_memory(db, m.key, ChangeOp::Insert)?;
            Ok(m.key.0)
        })
        .unwrap_or_else(|e| panic!("{what}: a write after the copy failed: {e}"));
    assert_eq!(key, largest + 1, "{what}");
    assert_eq!(
        store.read(changes::max_seq).expect("the log head"),
        head + 1,
        "{what}"
    );
}

/// The hits `mnemograph recall` prints for `query`: (id, the whole line).
fn recall(db: &str, query: &str, scratch: &Path) -> Vec<(String, String)> {
    let index = scratch.join("index-of-recall");
    let mut args = vec!["recall", query, "--db", db];
    if db.starts_with("postgres") {
        args.extend(["--index-dir", index.to_str().expect("a UTF-8 path")]);
    }
    ok(&args, scratch)
        .lines()
        .skip(1)
        .filter_map(|l| {
            l.split_whitespace()
                .nth(1)
                .map(|id| (id.to_owned(), l.to_owned()))
        })
        .collect()
}

#[test]
fn a_database_moved_to_postgres_and_back_exports_the_same_bytes() {
    let Some(url) = crate::pg::database("migrate_round_trip") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path();
    let source = scratch.join("source.db");
    let source_arg = source.to_str().unwrap();
    ok(
        &["import", SAMPLE, "--import-root", DATA, "--db", source_arg],
        scratch,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let s = Server::start(&source, Era::Discover).await;
        let ids = s
            .remember(json!([
                {"content": "The copper kettle whistles when the water boils", "name": "kettle"},
                {"content": "The blue teapot holds four cups of oolong", "name": "teapot"},
                {"content": "A note to be forgotten about the old samovar"}
            ]))
            .await;
        let rel = s
            .ok(
                "relate",
                json!({"relations": [{"from": "kettle", "to": "teapot", "kind": "fills"}]}),
            )
            .await;
        assert_eq!(rel["ok"], 1, "{rel}");
        s.ok("forget", json!({"ids": [ids[2]]})).await;
        s.stop().await;
    });
    ok(&["consolidate", "--db", source_arg], scratch);
    let before = std::fs::read(&source).unwrap();

    let to_pg = ok(&["migrate", "--from", source_arg, "--to", &url], scratch);
    assert_eq!(to_pg.lines().count(), 1, "one summary line: {to_pg}");
    assert!(to_pg.starts_with("migrated "), "{to_pg}");
    assert!(to_pg.contains(" rows/s) · memories "), "{to_pg}");
    assert_eq!(
        std::fs::read(&source).unwrap(),
        before,
        "the source is only read"
    );
    let back = scratch.join("back.db");
    let back_arg = back.to_str().unwrap();
    ok(&["migrate", "--from", &url, "--to", back_arg], scratch);

    for extra in [&[][..], &["--vectors", "--history"][..]] {
        let original = export(source_arg, extra, scratch);
        assert!(original.contains("copper kettle"), "{original}");
        assert_eq!(export(&url, extra, scratch), original, "{extra:?}");
        assert_eq!(export(back_arg, extra, scratch), original, "{extra:?}");
    }
    let pg = Store::open(&Config::for_postgres(&url, scratch.join("pg-index"))).unwrap();
    let lite = Store::open(&Config::for_db(&back)).unwrap();
    let original = Store::open(&Config::for_db(&source)).unwrap();
    assert_eq!(counts(&pg), counts(&original));
    assert_eq!(counts(&lite), counts(&original));
    let memories = counts(&original)[0].1;
    assert!(
        to_pg.contains(&format!("memories {memories} · ")),
        "{to_pg}"
    );
    let head = |s: &Store| s.read(changes::head).unwrap();
    assert_eq!(
        head(&pg),
        head(&original),
        "the same identity and change log"
    );
    assert_eq!(
        head(&lite),
        head(&original),
        "the same identity and change log"
    );
    drop((pg, lite, original));
    let index = scratch.join("index-of-stats");
    let stats = ok(
        &[
            "stats",
            "--db",
            &url,
            "--index-dir",
            index.to_str().unwrap(),
        ],
        scratch,
    );
    assert!(
        stats.lines().any(|l| l.trim() == "forgotten       1"),
        "{stats}"
    );
    // Recall (which counts uses, so after the exports) finds on the copy what it finds on the
    // source, first the same memory.
    for (query, expected) in [("pottery class", "pottery"), ("copper kettle", "kettle")] {
        let found = recall(source_arg, query, scratch);
        let on_copy = recall(&url, query, scratch);
        assert!(found[0].1.contains(expected), "{query}: {found:?}");
        assert_eq!(on_copy[0].0, found[0].0, "{query}: {on_copy:?} {found:?}");
    }
    write_after_copy(
        &Config::for_postgres(&url, scratch.join("pg-index")),
        "postgres",
    );
    write_after_copy(&Config::for_db(&back), "sqlite");
}

/// Writes `n` memories as mnemograph JSONL, each but the first related to the one before.
fn write_corpus(path: &Path, n: usize) {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).expect("create the corpus"));
    for i in 0..n {
        let memory = json!({"type": "memory", "id": format!("m_mig{i}"), "content": format!("memory {i} about {}", ["tea", "rust", "kyoto"][i % 3])});
        writeln!(w, "{memory}").expect("write the corpus");
        if i > 0 {
            let relation = json!({"type": "relation", "from": format!("m_mig{i}"), "to": format!("m_mig{}", i - 1), "kind": "follows"});
            writeln!(w, "{relation}").expect("write the corpus");
        }
    }
}

/// The target's progress row, while a migration runs.
fn progress(client: &mut postgres::Client) -> Option<Value> {
    client
        .query_opt("SELECT value FROM meta WHERE key = 'migrate_from'", &[])
        .ok()
        .flatten()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).expect("the progress row is JSON"))
}

/// Rows a progress row says were copied.
fn copied(progress: &Value) -> u64 {
    progress["copied"]
        .as_object()
        .expect("rows copied per table")
        .values()
        .map(|n| n.as_u64().expect("a count"))
        .sum()
}

#[test]
fn a_killed_migration_goes_on_where_it_stopped() {
    let Some(url) = crate::pg::database("migrate_resume") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path();
    let corpus = scratch.join("corpus.jsonl");
    write_corpus(&corpus, 4_000);
    let source = scratch.join("source.db");
    let source_arg = source.to_str().unwrap();
    ok(
        &["import", corpus.to_str().unwrap(), "--db", source_arg],
        scratch,
    );

    let mut child = command(
        &[
            "migrate", "--from", source_arg, "--to", &url, "--batch", "10",
        ],
        scratch,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut client = crate::pg::connect(&url);
    let deadline = Instant::now() + Duration::from_secs(120);
    // Killed once the memories are over, somewhere in the 16,000 rows left (1,600 batches).
    let at_kill = loop {
        if let Some(p) = progress(&mut client)
            && copied(&p) >= 4_000
        {
            child.kill().unwrap();
            break p;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the migration ended before it could be killed"
        );
        assert!(Instant::now() < deadline, "no progress in 120 s");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(!child.wait().unwrap().success());
    let left = progress(&mut client).expect("the progress row stays");
    assert_eq!(left["source"], at_kill["source"]);
    assert!(copied(&left) >= copied(&at_kill), "{left}");
    let finished = client
        .query_opt("SELECT value FROM meta WHERE key = 'migrated_from'", &[])
        .unwrap();
    assert!(finished.is_none(), "killed before the end");

    let out = run(&["migrate", "--from", source_arg, "--to", &url], scratch);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("going on with the migration"), "{stderr}");
    assert!(
        stdout.contains("memories 4,000 · relations 3,999 · "),
        "{stdout}"
    );
    assert!(progress(&mut client).is_none());

    let pg = Store::open(&Config::for_postgres(&url, scratch.join("pg-index"))).unwrap();
    let lite = Store::open(&Config::for_db(&source)).unwrap();
    assert_eq!(counts(&pg), counts(&lite), "nothing copied twice");
    drop((pg, lite));
    assert_eq!(
        export(&url, &["--vectors"], scratch),
        export(source_arg, &["--vectors"], scratch)
    );
}

#[test]
fn a_target_that_is_not_empty_is_refused_and_left_as_it_was() {
    let Some(url) = crate::pg::database("migrate_refused") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path();
    let first = scratch.join("first.db");
    let second = scratch.join("second.db");
    let (first_arg, second_arg) = (first.to_str().unwrap(), second.to_str().unwrap());
    ok(
        &["import", SAMPLE, "--import-root", DATA, "--db", first_arg],
        scratch,
    );
    let corpus = scratch.join("corpus.jsonl");
    write_corpus(&corpus, 3);
    ok(
        &["import", corpus.to_str().unwrap(), "--db", second_arg],
        scratch,
    );
    ok(&["migrate", "--from", first_arg, "--to", &url], scratch);

    for (target, holds) in [(url.as_str(), 18), (first_arg, 18)] {
        let before = export(target, &["--history"], scratch);
        let out = run(&["migrate", "--from", second_arg, "--to", target], scratch);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{target}: {stderr}");
        assert!(out.stdout.is_empty(), "{target}");
        assert!(
            stderr.contains(&format!("is not empty: it holds {holds} memories")),
            "{stderr}"
        );
        assert!(stderr.contains("new empty PostgreSQL database"), "{stderr}");
        assert_eq!(export(target, &["--history"], scratch), before, "{target}");
    }
    let mut client = crate::pg::connect(&url);
    assert!(progress(&mut client).is_none());

    // The same migration again: nothing to do.
    let again = ok(&["migrate", "--from", first_arg, "--to", &url], scratch);
    assert!(again.contains("already a complete copy"), "{again}");
}

#[test]
fn every_column_of_both_schemas_is_copied() {
    let dir = tempfile::tempdir().unwrap();
    let columns = |t: &str| -> Vec<String> {
        let mut c: Vec<String> = TABLES
            .iter()
            .find(|x| x.name == t)
            .unwrap()
            .columns
            .iter()
            .map(|c| c.to_string())
            .collect();
        c.sort();
        c
    };
    let lite = Store::open(&Config::for_db(dir.path().join("m.db"))).unwrap();
    for t in TABLES {
        let mut have: Vec<String> = lite
            .read(|db| {
                db.query_all(&format!("PRAGMA table_info({})", t.name), &[], |r| {
                    r.get::<String>(1)
                })
            })
            .unwrap()
            .into_iter()
            // Columns of schema 1 that nothing uses since vectors got their own table.
            .filter(|c| c != "embedding" && c != "embedding_model")
            .collect();
        have.sort();
        assert_eq!(have, columns(t.name), "sqlite {}", t.name);
    }
    let Some(url) = crate::pg::database("migrate_columns") else {
        return;
    };
    let _pg = Store::open(&Config::for_postgres(&url, dir.path().join("pg"))).unwrap();
    let mut client = crate::pg::connect(&url);
    for t in TABLES {
        let mut have: Vec<String> = client
            .query(
                "SELECT column_name::text FROM information_schema.columns WHERE table_name = $1",
                &[&t.name],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        have.sort();
        assert_eq!(have, columns(t.name), "postgres {}", t.name);
    }
}
