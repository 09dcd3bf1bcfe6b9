//! `mnemograph demo`: starts `mnemograph serve` on a scratch database as a child process, speaks
//! MCP to it like a host would, and prints each step.

use std::io::Write;

use anyhow::Context;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

fn args(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    a: Value,
) -> anyhow::Result<Value> {
    let res = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args(a)))
        .await
        .with_context(|| format!("calling {tool}"))?;
    Ok(res.structured_content.unwrap_or(Value::Null))
}

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

/// `mnemograph serve --db <db>` as a child process, its log discarded.
fn spawn_server(db: &std::path::Path) -> anyhow::Result<TokioChildProcess> {
    let exe = std::env::current_exe().context("cannot find the mnemograph binary")?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("serve").arg("--db").arg(db);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("cannot start `mnemograph serve`")?;
    Ok(transport)
}

pub(super) async fn run() -> anyhow::Result<()> {
    let scratch = Scratch::new()?;
    talk(spawn_server(&scratch.db())?).await
}

/// A host's view of MCP tasks: call, get a task handle, poll at the advertised interval printing
/// the progress, print the result.
pub(super) async fn run_tasks() -> anyhow::Result<()> {
    use rmcp::model::{
        ClientCapabilities, ClientConfig, GetTaskParams, Implementation, ProtocolVersion,
        TaskStatus,
    };
    use rmcp::{ClientLifecycleMode, ClientServiceExt};

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

    // A 2026-07-28 client that declares the tasks extension on every request.
    let client = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("mnemograph-demo", env!("CARGO_PKG_VERSION")),
    )
    .serve_with_lifecycle(
        spawn_server(&scratch.db())?,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .context("MCP discovery failed")?;

    let shallow = json!({"names": ["hub"], "namespace": "demo", "depth": 1, "limit": 3});
    let asked = std::time::Instant::now();
    let answer = client
        .call_tool_once(CallToolRequestParams::new("traverse").with_arguments(args(shallow)))
        .await?;
    if let rmcp::model::CallToolResponse::Complete(r) = answer {
        let reason = decision_reason(r.meta.as_ref());
        writeln!(
            out,
            "\ntraverse depth 1: answered inline in {:.1} ms ({})",
            asked.elapsed().as_secs_f64() * 1e3,
            reason
        )?;
    }

    let deep = json!({"names": ["hub"], "namespace": "demo", "depth": 8, "max_nodes": 1_000_000, "focus": "invoice overdue", "limit": 5});
    writeln!(
        out,
        "\ntraverse depth 8, ranking every reached memory by \"invoice overdue\" …"
    )?;
    let asked = std::time::Instant::now();
    let answer = client
        .call_tool_once(CallToolRequestParams::new("traverse").with_arguments(args(deep)))
        .await?;
    let task = match answer {
        rmcp::model::CallToolResponse::Task(t) => t,
        other => anyhow::bail!("expected a task handle, got {other:?}"),
    };
    let reason = decision_reason(task.meta.as_ref());
    writeln!(
        out,
        "task {}… handed back in {:.1} ms ({})",
        &task.task.task_id[..8],
        asked.elapsed().as_secs_f64() * 1e3,
        reason
    )?;
    let done = loop {
        let t = client
            .get_task(GetTaskParams::new(task.task.task_id.clone()))
            .await?;
        writeln!(
            out,
            "  {:>7.0} ms  {:<10} {}",
            asked.elapsed().as_secs_f64() * 1e3,
            format!("{:?}", t.task.task.status).to_lowercase(),
            t.task.task.status_message.clone().unwrap_or_default()
        )?;
        if t.task.task.status != TaskStatus::Working {
            break t;
        }
        let wait = t.task.task.poll_interval_ms.unwrap_or(250);
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    };
    let result = serde_json::to_value(&done)?;
    let content = &result["result"]["structuredContent"];
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
    client.cancel().await.ok();
    Ok(())
}

/// Why the server answered as it did (the `_meta` the server puts on results and task handles).
fn decision_reason(meta: Option<&rmcp::model::MetaObject>) -> Value {
    meta.and_then(|m| m.0.get("mnemograph/decision"))
        .map(|d| d["reason"].clone())
        .unwrap_or_default()
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

async fn talk(transport: TokioChildProcess) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let client = ().serve(transport).await.context("MCP handshake failed")?;
    let info = client.peer_info().and_then(|i| i.server_info.clone());
    if let Some(info) = info {
        writeln!(
            out,
            "connected to {} {} over stdio",
            info.name, info.version
        )?;
    }
    let tools = client.list_all_tools().await?;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    writeln!(out, "tools: {}", names.join(", "))?;

    let stored = call(
        &client,
        "remember",
        json!({"memories": [
            {"content": "Alice is the tech lead of the Atlas project", "kind": "fact", "name": "alice", "namespace": "demo", "tags": ["people"]},
            {"content": "The Atlas project ships its first release in March", "kind": "fact", "name": "atlas", "namespace": "demo"},
            {"content": "Alice prefers green tea over coffee in the morning", "kind": "fact", "namespace": "demo", "tags": ["people", "preferences"]},
            {"content": "Deploys of Atlas go through the staging cluster first", "kind": "note", "namespace": "demo",
             "links": [{"to": "atlas", "kind": "about"}]}
        ]}),
    )
    .await?;
    writeln!(out, "\nremember 4 memories -> {}", stored["ok"])?;
    call(
        &client,
        "relate",
        json!({"relations": [{"from": "alice", "to": "atlas", "kind": "leads", "namespace": "demo"}]}),
    )
    .await?;
    writeln!(out, "relate alice -[leads]-> atlas")?;

    for query in [
        "Who leads the Atlas project?",
        "what does Alice drink?",
        "how are deploys done",
    ] {
        let found = call(
            &client,
            "recall",
            json!({"query": query, "namespace": "demo", "limit": 2}),
        )
        .await?;
        writeln!(out, "\nrecall {query:?}")?;
        for hit in found["hits"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "  {:.3}  {}",
                hit["score"].as_f64().unwrap_or(0.0),
                hit["snippet"].as_str().unwrap_or("")
            )?;
        }
    }
    let got = call(
        &client,
        "get",
        json!({"names": ["atlas"], "namespace": "demo"}),
    )
    .await?;
    let atlas = &got["memories"][0];
    writeln!(
        out,
        "\nget atlas: {:?} with {} relations",
        atlas["content"].as_str().unwrap_or(""),
        atlas["relations"].as_array().map_or(0, Vec::len)
    )?;
    let again = call(&client, "remember", json!({"memories": [{"content": "Alice prefers green tea over coffee in the morning", "namespace": "demo"}]})).await?;
    writeln!(
        out,
        "remember the tea fact again -> duplicate: {}",
        again["results"][0]["duplicate"]
    )?;
    let stats = call(&client, "stats", json!({})).await?;
    writeln!(
        out,
        "stats: {} memories, {} relations",
        stats["memories"], stats["relations"]
    )?;
    client.cancel().await.ok();
    Ok(())
}
