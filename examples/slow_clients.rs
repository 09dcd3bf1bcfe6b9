//! Slow clients against `mnemograph serve --http --tokens`: the recall latency of one steady
//! client (its own read token, back to back) on a copy of the seeded corpus, first alone, then
//! while 300 connections send a request head a byte every 500 ms without a token and 256
//! requests of another read token send their bodies a byte every 500 ms (each asks again a
//! second after it is refused or cut, as `Retry-After` says), with `/healthz` probed every
//! 250 ms. Prints a markdown table: recall p50/p99 without and with the slow clients, their
//! ratio, failed recalls, the slowest `/healthz`, and what the slow clients were answered.
//!
//! Run: `cargo build --release && cargo run --release --example slow_clients [-- --memories
//! 10000 --seconds 15 --server PATH]` (`--server` runs another build of the server, e.g. an
//! older one, for comparison).

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;
#[allow(dead_code, unused_macros)]
#[macro_use]
#[path = "common/report.rs"]
mod report;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use fixture::Corpus;

type Client = RunningService<RoleClient, ()>;

/// Connections sending a request head a byte at a time.
const SLOW_HEADS: usize = 300;
/// Requests of one token sending their body a byte at a time.
const SLOW_BODIES: usize = 256;
/// Between two bytes of a slow client.
const TRICKLE: Duration = Duration::from_millis(500);

struct Options {
    memories: usize,
    seconds: u64,
    server: Option<PathBuf>,
}

fn args() -> Result<Options, String> {
    let mut o = Options {
        memories: 10_000,
        seconds: 15,
        server: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "--memories" => o.memories = v.parse().map_err(|_| format!("--memories {v}"))?,
            "--seconds" => o.seconds = v.parse().map_err(|_| format!("--seconds {v}"))?,
            "--server" => o.server = Some(PathBuf::from(v)),
            _ => return Err(format!("unknown option {a}")),
        }
    }
    o.seconds = o.seconds.max(1);
    Ok(o)
}

async fn open(url: &str, token: &str) -> Result<Client, String> {
    let config =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned());
    ().serve_with_lifecycle(
        StreamableHttpClientTransport::from_config(config),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .map_err(|e| e.to_string())
}

/// Recall latencies of one client calling back to back for `seconds`, and the failed calls.
async fn recalls(url: &str, token: &str, corpus: &Corpus, seconds: u64) -> (Vec<Duration>, usize) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut times = Vec::new();
    let mut failed = 0;
    let mut client = None;
    let mut i = 0u64;
    while Instant::now() < deadline {
        if client.is_none() {
            match open(url, token).await {
                Ok(c) => client = Some(c),
                Err(_) => {
                    failed += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(c) = &client else { continue };
        let serde_json::Value::Object(args) = json!({"query": corpus.query(i), "limit": 10}) else {
            unreachable!("an object literal")
        };
        i += 1;
        let started = Instant::now();
        let call = c.call_tool(CallToolRequestParams::new("recall").with_arguments(args));
        match tokio::time::timeout(Duration::from_secs(30), call).await {
            Ok(Ok(r)) if r.is_error != Some(true) => times.push(started.elapsed()),
            _ => {
                failed += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    if let Some(c) = client {
        let _ = c.cancel().await;
    }
    (times, failed)
}

/// The `q` quantile of sorted latencies, in milliseconds.
fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// What the slow clients were answered.
#[derive(Default)]
struct Answers {
    /// Slow bodies refused for their token's share (429).
    share: AtomicUsize,
    /// Slow bodies answered 408 (the body deadline).
    body_deadline: AtomicUsize,
    /// Other answers to slow bodies (503 and the like).
    other: AtomicUsize,
    /// Slow heads whose connection the server closed.
    heads_cut: AtomicUsize,
}

/// Starts the slow clients; they run until aborted.
fn slow_clients(
    authority: &str,
    token: &str,
    answers: &Arc<Answers>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for i in 0..SLOW_HEADS {
        let (at, answers) = (authority.to_owned(), Arc::clone(answers));
        tasks.push(tokio::spawn(async move {
            loop {
                let Ok(mut s) = TcpStream::connect(&at).await else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                let head = format!("GET /healthz HTTP/1.1\r\nHost: {at}\r\nX-Slow-{i}: ");
                for b in head.bytes().chain(std::iter::repeat(b'a')) {
                    if s.write_all(&[b]).await.is_err() {
                        answers.heads_cut.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    tokio::time::sleep(TRICKLE).await;
                }
            }
        }));
    }
    for _ in 0..SLOW_BODIES {
        let (at, token, answers) = (authority.to_owned(), token.to_owned(), Arc::clone(answers));
        tasks.push(tokio::spawn(async move {
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: {at}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nAuthorization: Bearer {token}\r\nContent-Length: 100000\r\n\r\n"
            );
            loop {
                let Ok(s) = TcpStream::connect(&at).await else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                let (mut read, mut write) = s.into_split();
                if write.write_all(head.as_bytes()).await.is_err() {
                    continue;
                }
                let trickle = async move {
                    while write.write_all(b" ").await.is_ok() {
                        tokio::time::sleep(TRICKLE).await;
                    }
                };
                let answer = async move {
                    let mut buf = [0u8; 64];
                    match read.read(&mut buf).await {
                        Ok(n) if n >= 12 => buf[9..12].to_vec(),
                        _ => Vec::new(),
                    }
                };
                tokio::select! {
                    () = trickle => {}
                    status = answer => {
                        let counter = match status.as_slice() {
                            b"429" => &answers.share,
                            b"408" => &answers.body_deadline,
                            _ => &answers.other,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }
    tasks
}

/// `/healthz` every 250 ms until `stop`: the probes, the failed ones and the slowest answer.
async fn probe_health(
    authority: String,
    stop: Arc<tokio::sync::Notify>,
) -> (usize, usize, Duration) {
    let (mut probes, mut failed, mut worst) = (0, 0, Duration::ZERO);
    loop {
        let started = Instant::now();
        let ok = tokio::time::timeout(Duration::from_secs(10), async {
            let mut s = TcpStream::connect(&authority).await.ok()?;
            s.write_all(
                format!("GET /healthz HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .ok()?;
            let mut answer = Vec::new();
            s.read_to_end(&mut answer).await.ok()?;
            answer.starts_with(b"HTTP/1.1 200").then_some(())
        })
        .await
        .ok()
        .flatten()
        .is_some();
        probes += 1;
        if !ok {
            failed += 1;
        }
        worst = worst.max(started.elapsed());
        tokio::select! {
            () = stop.notified() => return (probes, failed, worst),
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
}

fn main() -> ExitCode {
    let o = match args() {
        Ok(o) => o,
        Err(e) => {
            note!("{e}\nusage: slow_clients [--memories N] [--seconds S] [--server PATH]");
            return ExitCode::from(2);
        }
    };
    let bin = match o.server.clone().or_else(fixture::server_binary) {
        Some(b) => b,
        None => {
            note!("build the server first: cargo build --release");
            return ExitCode::from(2);
        }
    };
    let (dir, db) = fixture::scratch_copy(o.memories);
    let tokens = dir.path().join("tokens");
    let (slow, slow_line) =
        mnemograph::mcp::auth::new_token("slow", &["read".into()], None).expect("a token");
    let (steady, steady_line) =
        mnemograph::mcp::auth::new_token("steady", &["read".into()], None).expect("a token");
    std::fs::write(&tokens, format!("{slow_line}\n{steady_line}\n")).expect("the tokens file");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (mut child, url) = report::serve_http(
        &bin,
        &db,
        &["--tokens", tokens.to_str().expect("UTF-8")],
        Some("warn,mnemograph::mcp::http=info"),
        Duration::from_secs(120),
    );
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let corpus = Corpus::new();
    let answers = Arc::new(Answers::default());
    let (alone, with, health) = runtime.block_on(async {
        // Warm-up: the first answers of a fresh server load indexes.
        let _ = recalls(&url, &steady, &corpus, 3).await;
        note!("recalls alone…");
        let alone = recalls(&url, &steady, &corpus, o.seconds).await;
        note!("starting {SLOW_HEADS} slow heads and {SLOW_BODIES} slow bodies…");
        let attackers = slow_clients(&authority, &slow, &answers);
        let stop = Arc::new(tokio::sync::Notify::new());
        let probe = tokio::spawn(probe_health(authority.clone(), Arc::clone(&stop)));
        // Every slow client connected and sending.
        tokio::time::sleep(Duration::from_secs(3)).await;
        note!("recalls beside the slow clients…");
        let with = recalls(&url, &steady, &corpus, o.seconds).await;
        stop.notify_one();
        let health = probe.await.expect("the probe");
        for a in attackers {
            a.abort();
        }
        (alone, with, health)
    });
    let _ = child.kill();
    let _ = child.wait();

    let (mut a, a_failed) = alone;
    let (mut w, w_failed) = with;
    a.sort();
    w.sort();
    let (a50, a99, w50, w99) = (
        quantile(&a, 0.5),
        quantile(&a, 0.99),
        quantile(&w, 0.5),
        quantile(&w, 0.99),
    );
    out!("## Slow clients against one HTTP server\n");
    out!("- machine: {}", fixture::machine());
    out!("- server: {}", bin.display());
    out!(
        "- corpus: the seeded {} memories; one steady client (its own read token) calls `recall` (limit 10, hybrid) back to back for {} s per row",
        o.memories,
        o.seconds
    );
    out!(
        "- slow clients: {SLOW_HEADS} connections sending a request head a byte every {} ms without a token, {SLOW_BODIES} requests of another read token sending their bodies a byte every {} ms; each asks again 1 s after it is answered or cut\n",
        TRICKLE.as_millis(),
        TRICKLE.as_millis()
    );
    out!("| steady client's recalls | recalls | failed | p50 | p99 |");
    out!("|---|---:|---:|---:|---:|");
    out!(
        "| alone | {} | {a_failed} | {a50:.2} ms | {a99:.2} ms |",
        a.len()
    );
    out!(
        "| beside the slow clients | {} | {w_failed} | {w50:.2} ms | {w99:.2} ms |",
        w.len()
    );
    out!(
        "| ratio (beside / alone) | | | {:.2} | {:.2} |\n",
        w50 / a50,
        w99 / a99
    );
    let (probes, probes_failed, worst) = health;
    out!(
        "- `/healthz`: {probes} probes, {probes_failed} failed, slowest {:.1} ms",
        worst.as_secs_f64() * 1e3
    );
    out!(
        "- slow bodies: {} refused for their token's share (429), {} cut at the body deadline (408), {} other answers; slow heads cut: {}",
        answers.share.load(Ordering::Relaxed),
        answers.body_deadline.load(Ordering::Relaxed),
        answers.other.load(Ordering::Relaxed),
        answers.heads_cut.load(Ordering::Relaxed)
    );
    drop(dir);
    ExitCode::SUCCESS
}
