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

pub(super) async fn run() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mnemograph-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("demo.db");
    let exe = std::env::current_exe().context("cannot find the mnemograph binary")?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("serve").arg("--db").arg(&db);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("cannot start `mnemograph serve`")?;
    let result = talk(transport).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
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
                "  {:.2}  {}",
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
