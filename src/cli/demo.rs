//! `mnemograph demo`: starts `mnemograph serve` on a scratch database as a child process, speaks
//! MCP to it over its stdin and stdout like a host would, and prints each step.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The tasks extension a 2026-07-28 client declares.
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A scratch folder for the demo's database, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("mnemograph-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }

    fn db(&self) -> std::path::PathBuf {
        self.0.join("demo.db")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A minimal MCP client over a child's pipes: one JSON-RPC request line out, lines in until the
/// answer with its id (notifications in between are skipped).
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    /// `_meta` sent with every request of a 2026-07-28 client; `None` in a 2025-11-25 session.
    meta: Option<Value>,
}

impl Client {
    /// `mnemograph serve --db <db>` as a child process, its log discarded.
    fn spawn(db: &std::path::Path) -> anyhow::Result<Client> {
        Client::spawn_with(db, &[])
    }

    /// Like [`Client::spawn`], with more arguments of `serve`.
    fn spawn_with(db: &std::path::Path, extra: &[&std::ffi::OsStr]) -> anyhow::Result<Client> {
        let exe = std::env::current_exe().context("cannot find the mnemograph binary")?;
        let mut child = std::process::Command::new(exe)
            .arg("serve")
            .arg("--db")
            .arg(db)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start `mnemograph serve`")?;
        let stdin = child.stdin.take().context("no stdin for the server")?;
        let stdout = child.stdout.take().context("no stdout from the server")?;
        Ok(Client {
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            next_id: 0,
            meta: None,
        })
    }

    fn send(&mut self, message: &Value) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("the session is closed")?;
        writeln!(stdin, "{message}")?;
        stdin.flush().context("the server stopped reading")
    }

    /// Sends `method` and returns its result; a JSON-RPC error is an error. `_meta` keys the
    /// params carry are kept beside the session's.
    fn request(&mut self, method: &str, mut params: Value) -> anyhow::Result<Value> {
        if let Some(Value::Object(meta)) = &self.meta {
            let mut all = meta.clone();
            if let Some(Value::Object(own)) = params.get("_meta") {
                all.extend(own.clone());
            }
            params["_meta"] = Value::Object(all);
        }
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("the server closed its output before answering {method}");
            }
            let message: Value = serde_json::from_str(&line)
                .with_context(|| format!("the server wrote a line that is not JSON: {line}"))?;
            if message["id"] != json!(id) {
                continue;
            }
            if let Some(error) = message.get("error") {
                bail!("{method} failed: {error}");
            }
            return Ok(message["result"].clone());
        }
    }

    /// A 2025-11-25 session: `initialize`, then `notifications/initialized`.
    fn initialize(&mut self) -> anyhow::Result<Value> {
        let info = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "mnemograph-demo", "version": env!("CARGO_PKG_VERSION")}
            }),
        )?;
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(info)
    }

    /// A 2026-07-28 client that declares the tasks extension on every request.
    fn discover(&mut self) -> anyhow::Result<Value> {
        self.meta = Some(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
            "io.modelcontextprotocol/clientInfo":
                {"name": "mnemograph-demo", "version": env!("CARGO_PKG_VERSION")}
        }));
        let found = self.request("server/discover", json!({}))?;
        if found["capabilities"]["extensions"].get(TASKS).is_none() {
            bail!("the server does not offer MCP tasks: {found}");
        }
        Ok(found)
    }

    /// `tools/call`; the whole result (structured content, or a task handle).
    fn call(&mut self, tool: &str, arguments: Value) -> anyhow::Result<Value> {
        let result = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .with_context(|| format!("calling {tool}"))?;
        if result["isError"] == json!(true) {
            bail!("{tool} answered an error: {}", result["content"]);
        }
        Ok(result)
    }

    /// Closes the server's input (it ends its session and exits) and waits for it.
    fn close(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(super) fn run() -> anyhow::Result<()> {
    let scratch = Scratch::new()?;
    let mut client = Client::spawn(&scratch.db())?;
    talk(&mut client)?;
    client.close()
}

/// A host's view of MCP tasks: call, get a task handle, poll at the advertised interval printing
/// the progress, print the result.
pub(super) fn run_tasks() -> anyhow::Result<()> {
    const MEMORIES: usize = 100_000;
    const LINKS_PER_MEMORY: usize = 5;
    let scratch = Scratch::new()?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "building a graph of {MEMORIES} memories and {} relations …",
        MEMORIES * LINKS_PER_MEMORY
    )?;
    out.flush()?;
    let started = std::time::Instant::now();
    build_graph(&scratch.db(), MEMORIES, LINKS_PER_MEMORY)?;
    writeln!(out, "built in {:.1} s", started.elapsed().as_secs_f64())?;

    let mut client = Client::spawn(&scratch.db())?;
    client.discover().context("MCP discovery failed")?;

    let deep = json!({"names": ["hub"], "namespace": "demo", "depth": 8, "max_nodes": 1_000_000, "focus": "invoice overdue", "limit": 5});
    writeln!(
        out,
        "\ntraverse depth 8, ranking every reached memory by \"invoice overdue\" …"
    )?;
    let asked = std::time::Instant::now();
    let task = client.call("traverse", deep)?;
    if task["resultType"] != json!("task") {
        bail!("expected a task handle, got {task}");
    }
    let id = task["taskId"]
        .as_str()
        .context("a task handle without taskId")?;
    writeln!(
        out,
        "task {}… handed back in {:.1} ms ({})",
        id.get(..8).unwrap_or(id),
        asked.elapsed().as_secs_f64() * 1e3,
        decision_reason(&task)
    )?;
    let done = loop {
        let t = client.request("tasks/get", json!({"taskId": id}))?;
        let status = t["status"].as_str().unwrap_or("").to_owned();
        writeln!(
            out,
            "  {:>7.0} ms  {:<10} {}",
            asked.elapsed().as_secs_f64() * 1e3,
            status,
            t["statusMessage"].as_str().unwrap_or("")
        )?;
        if status != "working" {
            break t;
        }
        let wait = t["pollIntervalMs"].as_u64().unwrap_or(250);
        std::thread::sleep(std::time::Duration::from_millis(wait));
    };
    if done["status"] != json!("completed") {
        bail!("the task ended {}: {}", done["status"], done["error"]);
    }
    let content = &done["result"]["structuredContent"];
    writeln!(
        out,
        "\nreached {} memories; the top 5 by relevance:",
        content["reached"]
    )?;
    for n in content["nodes"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "  depth {}  relevance {:>5.2}  {}",
            n["depth"],
            n["relevance"].as_f64().unwrap_or(0.0),
            n["snippet"].as_str().unwrap_or("")
        )?;
    }

    let shallow = json!({"names": ["hub"], "namespace": "demo", "depth": 1, "limit": 3});
    let asked = std::time::Instant::now();
    let answer = client.call("traverse", shallow)?;
    let how = if answer["resultType"] == json!("task") {
        "handed back as a task"
    } else {
        "answered inline"
    };
    writeln!(
        out,
        "\ntraverse depth 1, the graph now loaded: {how} in {:.1} ms ({})",
        asked.elapsed().as_secs_f64() * 1e3,
        decision_reason(&answer)
    )?;
    client.close()
}

/// A job's memory outliving its server: server A checkpoints job J three times while an import
/// runs as a task under J; A is killed; server B, on the same database, finishes the import and
/// a client on B resumes J — every checkpoint, what the import learned and its result — and a
/// write from a stale version is refused.
pub(super) fn run_job() -> anyhow::Result<()> {
    const NOTES: usize = 30_000;
    let scratch = Scratch::new()?;
    let mut out = std::io::stdout().lock();
    let corpus = scratch.0.join("notes.jsonl");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&corpus)?);
        for i in 0..NOTES {
            let topic = ["tea", "rust", "kyoto"][i % 3];
            writeln!(
                w,
                "{}",
                json!({"type": "memory", "id": format!("m_note{i}"), "content": format!("field note {i} about {topic}")})
            )?;
        }
        w.flush()?;
    }
    let root = [std::ffi::OsStr::new("--import-root"), scratch.0.as_os_str()];
    let mut a = Client::spawn_with(&scratch.db(), &root)?;
    a.discover().context("MCP discovery with server A failed")?;
    let mut b = Client::spawn_with(&scratch.db(), &root)?;
    b.discover().context("MCP discovery with server B failed")?;
    let job = json!({"name": "field-notes", "namespace": "demo"});
    let with = |extra: Value| {
        let mut args = job.clone();
        if let (Value::Object(o), Value::Object(x)) = (&mut args, extra) {
            o.extend(x);
        }
        args
    };
    writeln!(
        out,
        "two servers on one database; job {:?}\n",
        job["name"].as_str().unwrap_or("")
    )?;

    let v1 = a.call(
        "job",
        with(json!({"action": "checkpoint", "base": 0, "note": "plan: import the field notes"})),
    )?;
    writeln!(
        out,
        "A  checkpoint v{}  plan: import the field notes",
        v1["structuredContent"]["version"]
    )?;
    let task = a.request(
        "tools/call",
        json!({"name": "import",
               "arguments": {"source": {"path": corpus.display().to_string()}, "namespace": "demo"},
               "_meta": {"mnemograph/job": job}}),
    )?;
    let id = task["taskId"]
        .as_str()
        .context("the import was not a task")?
        .to_owned();
    writeln!(
        out,
        "A  import of {NOTES} notes under the job: task {}…",
        id.get(..8).unwrap_or(&id)
    )?;
    for (base, note) in [(1, "import started"), (2, "half of the notes are in")] {
        let v = a.call(
            "job",
            with(json!({"action": "checkpoint", "base": base, "note": note,
            "open_questions": ["are the kyoto notes duplicates?"]})),
        )?;
        writeln!(
            out,
            "A  checkpoint v{}  {note}",
            v["structuredContent"]["version"]
        )?;
    }
    loop {
        let t = a.request("tasks/get", json!({"taskId": id}))?;
        let done = t["_meta"]["mnemograph/progress"]["done"]
            .as_u64()
            .unwrap_or(0);
        if t["status"] != json!("working") || done >= NOTES as u64 / 5 {
            writeln!(out, "A  {}", t["statusMessage"].as_str().unwrap_or(""))?;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = a.child.kill();
    let _ = a.child.wait();
    drop(a);
    writeln!(out, "A  killed (SIGKILL)\n")?;

    writeln!(out, "B  resumes the job while it takes the import over:")?;
    let resumed = loop {
        let r = b.call("job", with(json!({})))?;
        let r = r["structuredContent"].clone();
        let t = &r["results"]["tasks"][0];
        writeln!(
            out,
            "B    import {}  {}",
            t["status"].as_str().unwrap_or(""),
            t["summary"].as_str().unwrap_or("")
        )?;
        if t["status"] != json!("working") {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    writeln!(
        out,
        "\nB  head v{}: {}  (open questions: {})",
        resumed["head"]["version"],
        resumed["head"]["note"].as_str().unwrap_or(""),
        resumed["head"]["open_questions"]
    )?;
    let history = b.call("job", with(json!({"action": "history"})))?;
    for v in history["structuredContent"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        writeln!(
            out,
            "B    v{} (parent {})  {}",
            v["version"],
            v["parent"],
            v["note"].as_str().unwrap_or("")
        )?;
    }
    let learned = &resumed["learned_since"];
    writeln!(
        out,
        "B  learned since v{}: {} memories, e.g.",
        resumed["head"]["version"], learned["total"]
    )?;
    for m in learned["memories"].as_array().into_iter().flatten().take(3) {
        writeln!(out, "B    {}", m["content"].as_str().unwrap_or(""))?;
    }
    let task = &resumed["results"]["tasks"][0];
    writeln!(
        out,
        "B  the import's result ({}): {}",
        task["uri"].as_str().unwrap_or(""),
        task["result"]
    )?;
    let stale = b.request(
        "tools/call",
        json!({"name": "job", "arguments": with(json!({"action": "checkpoint", "base": 2, "note": "an older view"}))}),
    )?;
    writeln!(
        out,
        "\na client writing from v2: {}",
        stale["content"][0]["text"].as_str().unwrap_or("")
    )?;
    b.close()
}

/// Why the server answered as it did (the `_meta` the server puts on results and task handles).
fn decision_reason(answer: &Value) -> Value {
    answer["_meta"]["mnemograph/decision"]["reason"].clone()
}

/// A hub memory and a ring of memories, each linked to its neighbours and a few random others.
fn build_graph(db: &std::path::Path, n: usize, links: usize) -> anyhow::Result<()> {
    use crate::engine::{RelateItem, RememberItem};
    const TOPICS: [&str; 8] = [
        "invoice overdue",
        "deploy staging",
        "tea garden",
        "billing dispute",
        "kyoto trip",
        "sqlite tuning",
        "graph memory",
        "team offsite",
    ];
    let engine = crate::Engine::open(crate::Config::for_db(db))?;
    let mut ids = Vec::with_capacity(n);
    for start in (0..n).step_by(5_000) {
        let items: Vec<RememberItem> = (start..(start + 5_000).min(n))
            .map(|i| RememberItem {
                content: format!("note {i}: {} with {}", TOPICS[i % 8], TOPICS[(i / 8) % 8]),
                name: (i == 0).then(|| "hub".to_owned()),
                namespace: Some("demo".into()),
                ..RememberItem::default()
            })
            .collect();
        for r in engine.remember(&items)? {
            ids.push(r?.id);
        }
    }
    let mut state = 7u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut batch = Vec::with_capacity(10_000);
    for i in 0..n {
        for j in 0..links {
            let to = if j == 0 {
                (i + 1) % n
            } else {
                (next() % n as u64) as usize
            };
            batch.push(RelateItem {
                from: ids[i].clone(),
                to: ids[to].clone(),
                kind: if j == 0 {
                    "next".into()
                } else {
                    "about".into()
                },
                weight: Some(0.5 + (next() % 50) as f64 / 100.0),
                metadata: None,
                namespace: Some("demo".into()),
            });
            if batch.len() == 10_000 {
                engine.relate(&batch)?;
                batch.clear();
            }
        }
    }
    if !batch.is_empty() {
        engine.relate(&batch)?;
    }
    engine.sync_text()?;
    Ok(())
}

fn talk(client: &mut Client) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let info = client.initialize().context("MCP handshake failed")?;
    writeln!(
        out,
        "connected to {} {} over stdio",
        info["serverInfo"]["name"].as_str().unwrap_or("?"),
        info["serverInfo"]["version"].as_str().unwrap_or("?")
    )?;
    let tools = client.request("tools/list", json!({}))?;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    writeln!(out, "tools: {}", names.join(", "))?;

    let stored = client.call(
        "remember",
        json!({"memories": [
            {"content": "Alice is the tech lead of the Atlas project", "kind": "fact", "name": "alice", "namespace": "demo", "tags": ["people"]},
            {"content": "The Atlas project ships its first release in March", "kind": "fact", "name": "atlas", "namespace": "demo"},
            {"content": "Alice prefers green tea over coffee in the morning", "kind": "fact", "namespace": "demo", "tags": ["people", "preferences"]},
            {"content": "Deploys of Atlas go through the staging cluster first", "kind": "note", "namespace": "demo",
             "links": [{"to": "atlas", "kind": "about"}]}
        ]}),
    )?;
    writeln!(
        out,
        "\nremember 4 memories -> {}",
        stored["structuredContent"]["ok"]
    )?;
    client.call(
        "relate",
        json!({"relations": [{"from": "alice", "to": "atlas", "kind": "leads", "namespace": "demo"}]}),
    )?;
    writeln!(out, "relate alice -[leads]-> atlas")?;

    for query in [
        "Who leads the Atlas project?",
        "what does Alice drink?",
        "how are deploys done",
    ] {
        let found = client.call(
            "recall",
            json!({"query": query, "namespace": "demo", "limit": 2, "explain": true}),
        )?;
        writeln!(out, "\nrecall {query:?}")?;
        for hit in found["structuredContent"]["hits"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let rank = |key: &str| hit["explain"][key].as_u64().map(|r| r as usize);
            writeln!(
                out,
                "  {:.2}  {:<26}  {}",
                hit["score"].as_f64().unwrap_or(0.0),
                super::why(
                    rank("text_rank"),
                    rank("vector_rank"),
                    hit["via"]["relation"].as_str()
                ),
                hit["snippet"].as_str().unwrap_or("")
            )?;
        }
    }
    let got = client.call("get", json!({"names": ["atlas"], "namespace": "demo"}))?;
    let atlas = &got["structuredContent"]["memories"][0];
    writeln!(
        out,
        "\nget atlas: {:?} with {} relations",
        atlas["content"].as_str().unwrap_or(""),
        atlas["relations"].as_array().map_or(0, Vec::len)
    )?;
    let again = client.call(
        "remember",
        json!({"memories": [{"content": "Alice prefers green tea over coffee in the morning", "kind": "fact", "namespace": "demo"}]}),
    )?;
    writeln!(
        out,
        "remember the tea fact again -> duplicate: {}",
        again["structuredContent"]["results"][0]["duplicate"]
    )?;
    let stats = client.call("stats", json!({}))?;
    writeln!(
        out,
        "stats: {} memories, {} relations",
        stats["structuredContent"]["memories"], stats["structuredContent"]["relations"]
    )?;
    Ok(())
}
