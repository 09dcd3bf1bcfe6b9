//! Many `mnemograph serve` processes on one PostgreSQL database, each with its own index folder:
//! interleaved writes from three servers with nothing lost and everything found everywhere,
//! propagation of a write to another server's recall within a second, tasks created on one
//! server and polled, cancelled or adopted after a `kill -9` through the others, servers that
//! reconnect by themselves when PostgreSQL restarts under them without losing an acknowledged
//! write, and stateless 2026-07-28 HTTP requests spread over two servers as a load balancer
//! would spread them.
//!
//! Each test makes its own database (see `pg`); without PostgreSQL they say SKIPPED and pass.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResponse, GetTaskResult, TaskStatus};
use serde_json::{Value, json};

use crate::support::{BIN, CallError, Era, HttpChild, Server, Wire, http_request, modern_meta};
use crate::tasks::{Client, connect_logged, poll_until_terminal};

/// Prints a measured figure: shown with `--nocapture`, and with the output of a failed test.
macro_rules! report {
    ($($arg:tt)*) => {
        report_line(format_args!($($arg)*))
    };
}

#[expect(
    clippy::print_stderr,
    reason = "the measured figures are the tests' report"
)]
fn report_line(line: std::fmt::Arguments<'_>) {
    eprintln!("{line}");
}

/// A test's scratch folder: an index folder and a log file per server.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("a scratch folder"),
        }
    }

    /// The index folder of server `name` (`--index-dir`), as an argument.
    fn index_dir(&self, name: &str) -> String {
        self.dir
            .path()
            .join(format!("{name}.index"))
            .to_str()
            .expect("a UTF-8 temp path")
            .to_owned()
    }

    /// The log (stderr) of server `name`.
    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// The log of server `name` so far.
    fn log_text(&self, name: &str) -> String {
        std::fs::read_to_string(self.log(name)).unwrap_or_default()
    }
}

/// Starts server `name` on the database at `url`, with its own index folder, and opens a session
/// of `era` over `wire`.
async fn start(
    url: &str,
    scratch: &Scratch,
    name: &str,
    wire: Wire,
    era: Era,
    extra: &[&str],
) -> Server {
    let index = scratch.index_dir(name);
    let mut args = vec!["--index-dir", index.as_str()];
    args.extend_from_slice(extra);
    Server::start_logged(url, wire, era, &args, scratch.log(name)).await
}

/// A 2026-07-28 client with the tasks extension, named `client`, of a new stdio server `name` on
/// `url` (text recall only: the graph's vectors are not what these tests are about).
async fn task_server(url: &str, scratch: &Scratch, name: &str, client: &str) -> Client {
    let index = scratch.index_dir(name);
    connect_logged(
        url,
        client,
        &["--index-dir", &index, "--embedder", "none"],
        &scratch.log(name),
    )
    .await
}

/// Splitmix64: deterministic samples.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The word only memory `n` of server `letter` holds.
fn token(letter: char, n: usize) -> String {
    format!("w{letter}{n}x")
}

/// `count` memories of server `letter` from number `first` on, with distinctive contents.
fn notes(letter: char, first: usize, count: usize, namespace: &str) -> Value {
    let upper = letter.to_ascii_uppercase();
    Value::Array(
        (first..first + count)
            .map(|n| {
                json!({
                    "content": format!(
                        "note from server {upper} number {n}: {} marks this one among many",
                        token(letter, n)
                    ),
                    "namespace": namespace,
                })
            })
            .collect(),
    )
}

/// The ids of a `remember` answer that stored every one of `n` memories, or why it did not.
fn stored_ids(out: Result<Value, CallError>, n: usize) -> Result<Vec<String>, String> {
    let out = out.map_err(|e| format!("{e:?}"))?;
    if out["ok"] != n || out["failed"] != 0 {
        return Err(format!("not every memory was stored: {out}"));
    }
    Ok(crate::support::ids_of_results(&out))
}

/// The `memories` count of a server's `stats`.
async fn memories_count(s: &Server) -> u64 {
    s.ok("stats", json!({})).await["memories"]
        .as_u64()
        .expect("a count of memories")
}

const SERVERS_WRITING: usize = 3;
const PER_SERVER: usize = 5_000;
const PER_CALL: usize = 100;
/// Memories of each server looked up through each server.
const SAMPLES: usize = 300;

/// Server `letter` writes its memories in calls of `PER_CALL`: their ids in order, and the errors
/// (a call that failed, timed out or stored less than all it was given).
async fn write_all(s: &Server, letter: char) -> (Vec<String>, Vec<String>) {
    let mut ids = Vec::with_capacity(PER_SERVER);
    let mut errors = Vec::new();
    for call in 0..PER_SERVER / PER_CALL {
        let memories = notes(letter, call * PER_CALL, PER_CALL, "shared");
        let answer = s
            .call_within(
                "remember",
                json!({ "memories": memories }),
                Duration::from_secs(60),
            )
            .await;
        match answer.map(|out| stored_ids(out, PER_CALL)) {
            Some(Ok(got)) => ids.extend(got),
            Some(Err(e)) => errors.push(format!("server {letter}, call {call}: {e}")),
            None => errors.push(format!("server {letter}, call {call}: no answer in 60 s")),
        }
    }
    (ids, errors)
}

/// The `samples` (server, number) that recall on `s` does not find by their word, the memory's
/// id (from `ids`) first among the hits; those still missing at `deadline` are looked up again
/// until then.
async fn unfound(
    s: &Server,
    samples: &[(char, usize)],
    ids: &HashMap<char, Vec<String>>,
    deadline: Instant,
) -> Vec<String> {
    let mut pending: Vec<(char, usize)> = samples.to_vec();
    loop {
        let mut still = Vec::new();
        for &(letter, n) in &pending {
            let hits = crate::support::hit_ids(
                &s.ok(
                    "recall",
                    json!({"query": token(letter, n), "namespace": "shared", "mode": "text", "limit": 5}),
                )
                .await,
            );
            if hits.first() != Some(&ids[&letter][n]) {
                still.push((letter, n));
            }
        }
        pending = still;
        if pending.is_empty() || Instant::now() > deadline {
            return pending
                .iter()
                .map(|&(letter, n)| format!("{} ({})", token(letter, n), ids[&letter][n]))
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many times, in the order the memories were stored, the server that wrote them changes.
async fn writer_turns(url: &str) -> usize {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let rows = crate::pg::connect(&url)
            .query(
                "SELECT content FROM memories WHERE namespace = 'shared' ORDER BY key",
                &[],
            )
            .expect("read the memories in the order they were stored");
        let writers: Vec<String> = rows
            .iter()
            .map(|r| {
                let content: String = r.get(0);
                content.split_whitespace().nth(3).unwrap_or("").to_owned()
            })
            .collect();
        writers.windows(2).filter(|w| w[0] != w[1]).count()
    })
    .await
    .expect("count the turns")
}

/// Three servers write 5,000 memories each at once, in calls of 100: no call fails, every server
/// counts all 15,000, and a sample of each server's memories is found by its word through every
/// server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_write_interleaved_and_every_server_finds_every_memory() {
    let Some(url) = crate::pg::database("three_servers_write_interleaved") else {
        return;
    };
    let scratch = Scratch::new();
    // Both eras, over stdio and HTTP: the store does not care who asked.
    let (a, b, c) = tokio::join!(
        start(&url, &scratch, "a", Wire::Stdio, Era::Initialize, &[]),
        start(&url, &scratch, "b", Wire::Stdio, Era::Discover, &[]),
        start(&url, &scratch, "c", Wire::Http, Era::Discover, &[]),
    );
    let servers = [('a', &a), ('b', &b), ('c', &c)];

    let started = Instant::now();
    let (wa, wb, wc) = tokio::join!(write_all(&a, 'a'), write_all(&b, 'b'), write_all(&c, 'c'));
    let wall = started.elapsed();
    let total = SERVERS_WRITING * PER_SERVER;
    report!(
        "{total} memories from {SERVERS_WRITING} servers in {wall:.2?}: {:.0} memories/s",
        total as f64 / wall.as_secs_f64()
    );
    let errors: Vec<&String> = [&wa.1, &wb.1, &wc.1].into_iter().flatten().collect();
    assert!(
        errors.is_empty(),
        "{} failed calls, e.g. {:?}\nA: {}",
        errors.len(),
        &errors[..errors.len().min(3)],
        a.log_tail()
    );
    let ids: HashMap<char, Vec<String>> = [('a', wa.0), ('b', wb.0), ('c', wc.0)].into();
    let distinct: std::collections::HashSet<&String> = ids.values().flatten().collect();
    assert_eq!(distinct.len(), total, "every memory got an id of its own");

    for (letter, s) in servers {
        assert_eq!(
            memories_count(s).await,
            total as u64,
            "stats of server {letter}"
        );
    }
    let turns = writer_turns(&url).await;
    report!("in commit order, the writing server changed {turns} times");
    assert!(
        turns >= 2 * SERVERS_WRITING,
        "the servers' writes interleaved: {turns} changes of writer"
    );

    // Through every server, a sample of every server's memories, by their words.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seed = 7;
    for (letter, s) in servers {
        let samples: Vec<(char, usize)> = (0..SAMPLES)
            .map(|i| {
                let writer = ['a', 'b', 'c'][i % 3];
                (writer, (splitmix(&mut seed) % PER_SERVER as u64) as usize)
            })
            .collect();
        let looked = Instant::now();
        let missing = unfound(s, &samples, &ids, deadline).await;
        assert!(
            missing.is_empty(),
            "server {letter} does not find {} of {SAMPLES} memories, e.g. {:?}\n{}",
            missing.len(),
            &missing[..missing.len().min(5)],
            s.log_tail()
        );
        report!(
            "server {letter} found all {SAMPLES} sampled memories in {:.2?}",
            looked.elapsed()
        );
    }
    let after = started.elapsed();
    report!("written, counted and found everywhere {after:.2?} after the first write");
    for s in [a, b, c] {
        s.stop().await;
    }
}

/// A write through one server is found by recall on another within a second (polling every
/// 20 ms), in both directions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_one_server_is_recalled_on_another_within_a_second() {
    let Some(url) = crate::pg::database("a_write_is_recalled_on_another") else {
        return;
    };
    let scratch = Scratch::new();
    let (a, b) = tokio::join!(
        start(&url, &scratch, "a", Wire::Stdio, Era::Initialize, &[]),
        start(&url, &scratch, "b", Wire::Stdio, Era::Discover, &[]),
    );
    // Both have read the (empty) database and answer recalls.
    for s in [&a, &b] {
        s.recall_ids(json!({"query": "warm", "mode": "text"})).await;
    }
    let mut seen = Vec::new();
    for round in 0..10 {
        let (writer, reader, letter) = if round % 2 == 0 {
            (&a, &b, 'a')
        } else {
            (&b, &a, 'b')
        };
        let id = writer
            .remember(notes(letter, round, 1, "propagation"))
            .await
            .remove(0);
        let written = Instant::now();
        let query =
            json!({"query": token(letter, round), "namespace": "propagation", "mode": "text"});
        loop {
            if reader.recall_ids(query.clone()).await.first() == Some(&id) {
                break;
            }
            assert!(
                written.elapsed() <= Duration::from_secs(1),
                "round {round}: not found on the other server after {:?}\n{}",
                written.elapsed(),
                reader.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = written.elapsed();
        assert!(took <= Duration::from_secs(1), "round {round}: {took:?}");
        seen.push(took);
    }
    seen.sort();
    report!(
        "propagation to the other server's recall: min {:.1?}, median {:.1?}, max {:.1?}",
        seen[0],
        seen[seen.len() / 2],
        seen[seen.len() - 1]
    );
    a.stop().await;
    b.stop().await;
}

/// Memories of the walk graph.
const GRAPH_MEMORIES: i64 = 100_000;

/// Fills the database at `url` (migrated, empty) with a graph for long walks, in a few
/// statements on the server's side: `GRAPH_MEMORIES` memories in namespace `graph` (`n0`…`n99`
/// named), each linked to its next, its seventh next and three others, and the change log that
/// writing them one by one would have left. Through the engine this would take many minutes;
/// the graph is the fixture, not what is tested.
fn fill_graph(url: &str) {
    let mut db = crate::pg::connect(url);
    let now = mnemograph::model::now_millis();
    let n = GRAPH_MEMORIES;
    db.batch_execute(&format!(
        "BEGIN;
         SELECT seq FROM log_head WHERE id = 1 FOR UPDATE;
         INSERT INTO memories (key, id, namespace, kind, name, content, content_hash, created_at,
                               updated_at, salience_at)
         SELECT i, 'm_' || translate(lpad(i::text, 20, '0'), '0123456789', 'abcdefghij'),
                'graph', 'note', CASE WHEN i <= 100 THEN 'n' || (i - 1) END, content,
                sha256(convert_to(content, 'UTF8')), {now}, {now}, {now}
         FROM (SELECT i, format('node %s about %s and %s', i - 1,
                                (ARRAY['deploy', 'billing', 'alice', 'atlas', 'staging', 'invoice',
                                       'kyoto', 'tea', 'garden', 'rust', 'sqlite', 'graph',
                                       'memory', 'agent', 'recall', 'task'])[(i - 1) % 16 + 1],
                                (ARRAY['deploy', 'billing', 'alice', 'atlas', 'staging', 'invoice',
                                       'kyoto', 'tea', 'garden', 'rust', 'sqlite', 'graph',
                                       'memory', 'agent', 'recall', 'task'])[((i - 1) / 16) % 16 + 1])
                      AS content
               FROM generate_series(1, {n}) AS i) AS made;
         SELECT setval(pg_get_serial_sequence('memories', 'key'), {n});
         INSERT INTO relations (id, src, dst, kind, weight, created_at, reinforced_at)
         SELECT 'r_' || translate(lpad((i * 5 + j)::text, 20, '0'), '0123456789', 'abcdefghij'),
                i, dst, CASE WHEN j < 2 THEN 'next' ELSE 'about' END,
                0.5 + ((i * 31 + j * 17) % 50) / 100.0, {now}, {now}
         FROM (SELECT i, j, CASE j WHEN 0 THEN i % {n} + 1
                                   WHEN 1 THEN (i + 6) % {n} + 1
                                   ELSE (i * 2654435761 + j * 40503) % {n} + 1 END AS dst
               FROM generate_series(1, {n}) AS i, generate_series(0, 4) AS j) AS pairs
         WHERE dst <> i
         ON CONFLICT DO NOTHING;
         INSERT INTO changes (seq, memory_key, relation_key, op, stamp)
         SELECT key, key, NULL, 'insert', 1 + floor(random() * 9e18)::bigint FROM memories;
         INSERT INTO changes (seq, memory_key, relation_key, op, stamp)
         SELECT {n} + row_number() OVER (ORDER BY key), NULL, key, 'relation',
                1 + floor(random() * 9e18)::bigint
         FROM relations;
         UPDATE log_head SET seq = (SELECT max(seq) FROM changes) WHERE id = 1;
         COMMIT;"
    ))
    .unwrap_or_else(|e| panic!("fill the graph: {e}"));
}

/// A fresh database holding the walk graph, for test `test`; `None` after a SKIPPED line.
async fn graph_database(test: &str) -> Option<String> {
    let url = crate::pg::database(test)?;
    let at = url.clone();
    let made = Instant::now();
    tokio::task::spawn_blocking(move || {
        // The schema as the server makes it, then the graph.
        let dir = tempfile::tempdir().expect("a folder for the builder's indexes");
        let mut cfg = mnemograph::Config::for_postgres(at.as_str(), dir.path());
        cfg.embedder = mnemograph::config::EmbedderSpec::None;
        drop(mnemograph::Engine::open(cfg).expect("create the schema"));
        fill_graph(&at);
    })
    .await
    .expect("build the graph");
    report!(
        "graph of {GRAPH_MEMORIES} memories made in {:.2?}",
        made.elapsed()
    );
    Some(url)
}

/// A walk whose work takes seconds: nearly every memory within 7 hops, scored against a focus.
fn deep_walk() -> Value {
    json!({"names": ["n1"], "namespace": "graph", "depth": 7, "direction": "both",
           "max_nodes": 1_000_000, "focus": "billing invoice tea", "limit": 20})
}

/// Starts [`deep_walk`] on `c`, which must hand it back as a task; the task's id.
async fn start_deep_walk(c: &Client) -> String {
    match c.call("traverse", deep_walk(), None).await.expect("call") {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("a deep focused walk must become a task: {other:?}"),
    }
}

/// Work done so far as the task's answer reports it: nodes visited plus memories scored.
fn work_done(t: &GetTaskResult) -> u64 {
    let p = t.meta.as_ref().and_then(|m| m.0.get("mnemograph/progress"));
    let n = |k: &str| p.and_then(|p| p[k].as_u64()).unwrap_or(0);
    n("visited") + n("done")
}

/// Polls task `id` through `c` while it works until its progress has grown `times` times; the
/// values seen. Fails when the task ends first.
async fn progress_grows(c: &Client, id: &str, times: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen: Vec<u64> = Vec::new();
    loop {
        let t = c.get(id).await.expect("tasks/get");
        assert_eq!(
            t.task.task.status,
            TaskStatus::Working,
            "the walk ended before its progress was seen to grow {times} times: {seen:?}"
        );
        let done = work_done(&t);
        if done > 0 && seen.last().is_none_or(|&last| done > last) {
            seen.push(done);
        }
        if seen.len() > times {
            return seen;
        }
        assert!(Instant::now() < deadline, "no progress in 60 s: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls task `id` through `c` until it is no longer working; its answer and when that was seen.
async fn wait_terminal(c: &Client, id: &str, limit: Duration) -> (GetTaskResult, Instant) {
    let deadline = Instant::now() + limit;
    loop {
        let t = c.get(id).await.expect("tasks/get");
        if t.task.task.status != TaskStatus::Working {
            return (t, Instant::now());
        }
        assert!(
            Instant::now() < deadline,
            "task {id} still works after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A task is created through server A, polled with live progress through B and cancelled through
/// C; the work on A stops at its next heartbeat and the task ends cancelled. Then a task whose
/// server is killed (`kill -9`) is adopted by exactly one of the other two, which runs it to its
/// end, as `tasks/get` through either and `mnemograph tasks show` tell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_polled_cancelled_and_adopted_across_servers() {
    let Some(url) = graph_database("tasks_across_servers").await else {
        return;
    };
    let scratch = Scratch::new();
    let owner = "agent-shared";
    let (a, b, c) = tokio::join!(
        task_server(&url, &scratch, "a", owner),
        task_server(&url, &scratch, "b", owner),
        task_server(&url, &scratch, "c", owner),
    );

    // Created on A, progress read through B (from the row A heartbeats), cancelled through C.
    let id = start_deep_walk(&a).await;
    let seen = progress_grows(&b, &id, 3).await;
    report!("progress of the task on A read through B: {seen:?}");
    let asked = Instant::now();
    c.cancel(&id).await.expect("tasks/cancel through C");
    let (t, ended) = wait_terminal(&a, &id, Duration::from_secs(10)).await;
    assert_eq!(t.task.task.status, TaskStatus::Cancelled, "{t:?}");
    report!(
        "cancelled through C, seen cancelled on A {:.0?} later",
        ended - asked
    );
    // The work on A noticed at a heartbeat (every 100 ms) and ended the task itself; generous
    // for a loaded machine.
    assert!(
        ended - asked < Duration::from_secs(5),
        "{:?}",
        ended - asked
    );
    let short = &id[..8];
    let finished = format!("task finished task=\"{short}\" status=\"cancelled\"");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !scratch.log_text("a").contains(&finished) {
        assert!(
            Instant::now() < deadline,
            "A ends the task itself\n{}",
            scratch.log_text("a")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for s in [&b, &c] {
        let t = s.get(&id).await.expect("tasks/get");
        assert_eq!(t.task.task.status, TaskStatus::Cancelled);
    }

    // A task whose server dies mid-walk is taken over by exactly one of the others.
    let id = start_deep_walk(&a).await;
    progress_grows(&b, &id, 1).await;
    assert!(crate::support::send_signal(a.pid, "KILL"), "kill -9 A");
    let killed = Instant::now();
    let (done, _) = poll_until_terminal(&c, &id, Duration::from_secs(120)).await;
    assert_eq!(
        done.task.task.status,
        TaskStatus::Completed,
        "{:?}",
        done.task.task.status_message
    );
    report!(
        "the task of the killed server completed {:.1?} after the kill",
        killed.elapsed()
    );
    let result = serde_json::to_value(&done).unwrap();
    assert_eq!(
        result["result"]["structuredContent"]["nodes"]
            .as_array()
            .map(Vec::len),
        Some(20),
        "{result}"
    );
    let short = &id[..8];
    let adopters: Vec<&str> = ["b", "c"]
        .into_iter()
        .filter(|s| {
            let log = scratch.log_text(s);
            log.lines()
                .any(|l| l.contains("re-running a task whose process stopped") && l.contains(short))
        })
        .collect();
    assert_eq!(
        adopters.len(),
        1,
        "exactly one server adopts task {short}: {adopters:?}\nB: {}\nC: {}",
        scratch.log_text("b"),
        scratch.log_text("c")
    );
    let t = b.get(&id).await.expect("tasks/get through B");
    assert_eq!(t.task.task.status, TaskStatus::Completed);

    // The operator's view agrees.
    let shown = std::process::Command::new(BIN)
        .args(["tasks", "show", &id, "--db", &url, "--index-dir"])
        .arg(scratch.index_dir("cli"))
        .args(["--embedder", "none"])
        .output()
        .expect("run mnemograph tasks show");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("status") && l.ends_with("completed")),
        "{text}"
    );
    drop(a);
    b.stop().await;
    c.stop().await;
}

/// What a writer of [`writes_survive_a_database_restart`] saw.
#[derive(Default)]
struct Outcome {
    /// Ids of memories whose `remember` was answered with success.
    acknowledged: Vec<String>,
    /// When each call failed, and its message.
    failures: Vec<(Instant, String)>,
    /// When each call succeeded.
    successes: Vec<Instant>,
}

/// Remembers 5 memories a call on `s` until `stop` is set, each call limited to 30 s.
async fn keep_writing(s: &Server, letter: char, stop: &AtomicBool) -> Outcome {
    let mut out = Outcome::default();
    let mut n = 0;
    while !stop.load(Ordering::Acquire) {
        let memories = notes(letter, n, 5, "restart");
        n += 5;
        let answer = s
            .call_within(
                "remember",
                json!({ "memories": memories }),
                Duration::from_secs(30),
            )
            .await;
        match answer {
            None => panic!(
                "server {letter}: a remember call hung for 30 s\n{}",
                s.log_tail()
            ),
            Some(res) => match stored_ids(res, 5) {
                Ok(ids) => {
                    out.acknowledged.extend(ids);
                    out.successes.push(Instant::now());
                }
                Err(e) => out.failures.push((Instant::now(), e)),
            },
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    out
}

/// The errors a server's log reports, each once (without the time).
fn errors_logged(log: &str) -> String {
    let mut lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR"))
        .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest))
        .collect();
    lines.sort_unstable();
    lines.dedup();
    lines.join("\n")
}

/// Two servers write continuously while PostgreSQL restarts, and again while it is stopped for
/// two seconds. Calls during an outage fail with a message that says the database is
/// unavailable, never hang, and succeed again within seconds of its return; every memory whose
/// write was acknowledged is there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_database_restart() {
    let test = "writes_survive_a_database_restart";
    let Some(own) = crate::pg::own_cluster(test) else {
        return;
    };
    let own = Arc::new(own);
    let url = own.database(test);
    let scratch = Scratch::new();
    let (c_index, c_log) = (scratch.index_dir("c"), scratch.log("c"));
    let c_args = ["--index-dir", c_index.as_str(), "--embedder", "none"];
    let (a, b, c) = tokio::join!(
        start(&url, &scratch, "a", Wire::Stdio, Era::Initialize, &[]),
        start(&url, &scratch, "b", Wire::Stdio, Era::Discover, &[]),
        // Asked only whether it is ready, as a load balancer does.
        HttpChild::spawn(&url, &c_args, &c_log,),
    );
    // The start-up log names the database served (without a password), not a file.
    let started = scratch.log_text("c");
    let engine_open = started
        .lines()
        .find(|l| l.contains("engine open"))
        .unwrap_or_default();
    assert!(
        engine_open.contains("db=postgres://") && !engine_open.contains(".db "),
        "{engine_open}"
    );
    let stop = AtomicBool::new(false);
    let (stopped_at, stopped_until) = (
        std::sync::Mutex::new(None::<Instant>),
        std::sync::Mutex::new(None::<Instant>),
    );
    let outages = async {
        let mut back = Vec::new();
        for restart in [true, false] {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let own = Arc::clone(&own);
            let down = Instant::now();
            if !restart {
                *stopped_at.lock().expect("lock") = Some(down);
            }
            tokio::task::spawn_blocking(move || {
                if restart {
                    own.restart();
                } else {
                    own.stop_for(Duration::from_secs(2));
                }
            })
            .await
            .expect("restart PostgreSQL");
            report!(
                "PostgreSQL {} and back in {:.1?}",
                if restart { "restarted" } else { "stopped" },
                down.elapsed()
            );
            back.push(Instant::now());
            if !restart {
                *stopped_until.lock().expect("lock") = back.last().copied();
            }
        }
        // Time to recover, then the writers stop.
        tokio::time::sleep(Duration::from_secs(10)).await;
        stop.store(true, Ordering::Release);
        back
    };
    let readiness = async {
        let mut seen = Vec::new();
        while !stop.load(Ordering::Acquire) {
            let (status, answer) = http_request(c.authority(), "GET", "/readyz", &[], b"").await;
            seen.push((Instant::now(), status, answer));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    };
    let (back, wa, wb, ready) = tokio::join!(
        outages,
        keep_writing(&a, 'a', &stop),
        keep_writing(&b, 'b', &stop),
        readiness
    );

    // While PostgreSQL is stopped, the server reports itself not ready, saying why; once it is
    // back, ready again.
    let (from, until) = (
        stopped_at.lock().expect("lock").expect("stopped"),
        stopped_until.lock().expect("lock").expect("back"),
    );
    let during: Vec<&(Instant, u16, String)> = ready
        .iter()
        .filter(|(at, _, _)| *at > from && *at < until)
        .collect();
    let unready: Vec<&String> = during
        .iter()
        .filter(|(_, status, _)| *status == 503)
        .map(|(_, _, answer)| answer)
        .collect();
    assert!(
        !unready.is_empty(),
        "not one of {} probes during the outage answered 503",
        during.len()
    );
    for answer in &unready {
        assert!(
            answer.contains(r#""ready":false"#) && answer.contains("unavailable"),
            "{answer}"
        );
        // No one needs a token to ask: the database's address stays in the server's log.
        assert!(
            !answer.contains("postgres://") && !answer.contains("127.0.0.1"),
            "{answer}"
        );
    }
    let (_, status, answer) = ready.last().expect("probes");
    assert_eq!(*status, 200, "ready again after the outage: {answer}");
    report!(
        "readiness during the outage: {} of {} probes 503: {}",
        unready.len(),
        during.len(),
        unready[0].lines().last().unwrap_or_default()
    );

    for (letter, w) in [('a', &wa), ('b', &wb)] {
        report!(
            "server {letter}: {} memories acknowledged, {} calls failed",
            w.acknowledged.len(),
            w.failures.len()
        );
        let mut messages: Vec<&str> = w.failures.iter().map(|(_, m)| m.as_str()).collect();
        messages.sort_unstable();
        messages.dedup();
        report!("server {letter}: failures said {messages:#?}");
        for message in messages {
            let m = message.to_lowercase();
            assert!(
                m.contains("database") && m.contains("unavailable"),
                "server {letter}: a failure during an outage says the database is unavailable: \
                 {message}\n{}",
                errors_logged(&scratch.log_text(&letter.to_string()))
            );
            // Where the database is and who connects to it stay in the server's log.
            let parsed = url.trim_start_matches("postgres://");
            let (who, rest) = parsed.split_once('@').unwrap_or(("", parsed));
            let (host_port, database) = rest.split_once('/').unwrap_or((rest, ""));
            let database = database.split('?').next().unwrap_or(database);
            for secret in [who, host_port, database, "postgres://"] {
                assert!(
                    secret.is_empty() || !message.contains(secret),
                    "server {letter}: a client is told {secret:?}: {message}"
                );
            }
        }
        // After each outage, calls succeed again within seconds.
        for (i, &at) in back.iter().enumerate() {
            let next = w
                .successes
                .iter()
                .find(|&&s| s > at)
                .unwrap_or_else(|| panic!("server {letter}: no success after outage {i}"));
            let took = *next - at;
            report!("server {letter}: first success {took:.2?} after outage {i} ended");
            assert!(
                took < Duration::from_secs(5),
                "server {letter}, outage {i}: {took:?}"
            );
        }
    }

    // No acknowledged write is lost, whichever server is asked.
    let all: Vec<&String> = wa.acknowledged.iter().chain(&wb.acknowledged).collect();
    for s in [&a, &b] {
        // Ten at a time: a hundred memories are more than one result may carry.
        for chunk in all.chunks(10) {
            let got = s.ok("get", json!({ "ids": chunk })).await;
            let found = got["memories"].as_array().map_or(0, Vec::len);
            assert_eq!(found, chunk.len(), "{got}");
        }
        assert!(memories_count(s).await >= all.len() as u64);
    }
    a.stop().await;
    b.stop().await;
    c.stop().await;
}

/// One JSON-RPC request of the 2026-07-28 era over HTTP with no session, as a load balancer
/// passes it to whichever server: the answer's message.
async fn stateless(authority: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = modern_meta("balanced-agent");
    let name = params
        .get("name")
        .or(params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .expect("serialise");
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    let (status, answer) = http_request(authority, "POST", "/mcp", &headers, &body).await;
    assert_eq!(status, 200, "{method}: {answer}");
    let payload = answer
        .split_once("\r\n\r\n")
        .map_or(answer.as_str(), |(_, body)| body);
    // A JSON body, or an event stream whose last data line is the answer.
    let json_text = payload
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or(payload.trim());
    serde_json::from_str(json_text).unwrap_or_else(|e| panic!("{method}: {e}: {answer}"))
}

/// Over HTTP in the stateless 2026-07-28 era, requests for one task go to either of two servers
/// on the database, as a load balancer sends them: a walk created through A is polled through A
/// and B in turn to its end, with progress read through B; another is cancelled through B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_http_requests_for_a_task_go_to_either_server() {
    let Some(url) = graph_database("stateless_http_across_servers").await else {
        return;
    };
    let scratch = Scratch::new();
    let spawn = |name: &'static str| {
        let index = scratch.index_dir(name);
        let log = scratch.log(name);
        let url = url.clone();
        async move { HttpChild::spawn(&url, &["--index-dir", &index, "--embedder", "none"], &log).await }
    };
    let (a, b) = tokio::join!(spawn("a"), spawn("b"));
    let servers = [a.authority().to_owned(), b.authority().to_owned()];

    let create = |at: String| async move {
        let created = stateless(
            &at,
            "tools/call",
            json!({"name": "traverse", "arguments": deep_walk()}),
        )
        .await;
        assert_eq!(created["result"]["resultType"], "task", "{created}");
        created["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a deep walk becomes a task: {created}"))
            .to_owned()
    };
    let id = create(servers[0].clone()).await;
    let mut from_b = Vec::new();
    let mut turn = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    let done = loop {
        let at = &servers[turn % 2];
        let t = stateless(at, "tasks/get", json!({"taskId": id})).await;
        let status = t["result"]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("{t}"))
            .to_owned();
        if status != "working" {
            break t;
        }
        if turn % 2 == 1 {
            let p = &t["result"]["_meta"]["mnemograph/progress"];
            from_b.push(p["visited"].as_u64().unwrap_or(0) + p["done"].as_u64().unwrap_or(0));
        }
        assert!(Instant::now() < deadline, "still working after 120 s");
        turn += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done["result"]["status"], "completed", "{done}");
    let grown: Vec<u64> = from_b.iter().copied().filter(|&n| n > 0).collect();
    assert!(
        grown.len() >= 2 && grown.windows(2).all(|w| w[1] >= w[0]) && grown.last() > grown.first(),
        "progress of A's task read through B grows: {from_b:?}"
    );
    report!("progress of A's task read through B: {from_b:?}");

    // The handle comes after the task's row is committed, so the cancel may follow at once; a
    // wait here raced the walk (about half a second on a loaded box), which may end first.
    let id = create(servers[0].clone()).await;
    let cancelled = stateless(&servers[1], "tasks/cancel", json!({"taskId": id})).await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
    let asked = Instant::now();
    loop {
        let t = stateless(&servers[0], "tasks/get", json!({"taskId": id})).await;
        if t["result"]["status"] == "cancelled" {
            break;
        }
        assert_eq!(t["result"]["status"], "working", "{t}");
        assert!(asked.elapsed() < Duration::from_secs(10), "{t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.stop().await;
    b.stop().await;
}
