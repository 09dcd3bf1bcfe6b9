//! Recall throughput over Streamable HTTP: the real `mnemograph serve --http` binary on a copy
//! of the seeded 100,000-memory corpus, N concurrent rmcp clients (2026-07-28, stateless
//! requests) each calling `recall` back to back for a fixed time; the same with bearer tokens,
//! with one client, and over stdio with one client; then the cost of checking a token. Prints a
//! markdown table with the machine, each row against its floor: one client, the server's CPU per
//! recall; many clients, that CPU within 20 % of one client's, throughput at least 70 % of what
//! the cores give at that CPU, p99 within 1.5 × p50, and no client starved (the fewest recalls
//! of one client at least half the mean).
//!
//! Run: `cargo build --release && cargo run --release --example http_load [-- --clients 64
//! --seconds 10]` (the corpus is built once and cached, as for the latency example).

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;
#[allow(dead_code, unused_macros)]
#[macro_use]
#[path = "common/report.rs"]
mod report;

use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::json;

use fixture::{BIG_CORPUS, Corpus};

/// Floors at 100,000 memories. One client: the server's CPU per recall.
const FLOOR_ONE_CLIENT_CPU_MS: f64 = 2.0;
/// Many clients: CPU per recall at most this times one client's…
const FLOOR_CPU_GROWTH: f64 = 1.2;
/// …recalls per second at least this share of what the cores give at that CPU per recall…
const FLOOR_CORE_SHARE: f64 = 0.7;
/// …p99 at most this times p50…
const FLOOR_TAIL: f64 = 1.5;
/// …and no client starved: the fewest recalls of one client at least this share of the mean.
const FLOOR_FEWEST_SHARE: f64 = 0.5;
const FLOOR_AUTH_MS: f64 = 0.1;

type Client = RunningService<RoleClient, ()>;

/// A client session, and over stdio the server process it started.
async fn open(
    transport_url: Option<&str>,
    token: Option<&str>,
    stdio: Option<&Path>,
) -> (Client, Option<u32>) {
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    if let Some(db) = stdio {
        let bin = fixture::server_binary().expect("build the server first: cargo build --release");
        let mut cmd = tokio::process::Command::new(bin);
        cmd.arg("serve").arg("--db").arg(db).kill_on_drop(true);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the server");
        let pid = transport.id();
        let client = ().serve_with_lifecycle(transport, lifecycle).await.expect("session");
        return (client, pid);
    }
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(transport_url.expect("a URL").to_owned());
    if let Some(t) = token {
        config = config.auth_header(t.to_owned());
    }
    let client = ()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            lifecycle,
        )
        .await
        .expect("session");
    (client, None)
}

async fn recall(c: &Client, corpus: &Corpus, i: u64) -> Duration {
    let serde_json::Value::Object(args) = json!({"query": corpus.query(i), "limit": 10}) else {
        unreachable!("an object literal")
    };
    let started = Instant::now();
    let r = c
        .call_tool(CallToolRequestParams::new("recall").with_arguments(args))
        .await
        .expect("recall");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    started.elapsed()
}

struct Load {
    per_s: f64,
    p50: f64,
    p99: f64,
    n: usize,
    /// The fewest and the most recalls one client made.
    per_client: (usize, usize),
    /// CPU time of the server process per recall, when known.
    server_cpu_ms: Option<f64>,
}

/// `clients` clients calling recall back to back for `seconds`.
async fn load(
    url: Option<&str>,
    token: Option<&str>,
    stdio: Option<&Path>,
    clients: usize,
    seconds: u64,
    server: Option<u32>,
) -> Load {
    let corpus = Arc::new(Corpus::new());
    let mut sessions = Vec::new();
    let mut server = server;
    for _ in 0..clients {
        let (client, pid) = open(url, token, stdio).await;
        // Over stdio the session's own server process is the one measured.
        server = server.or(pid);
        sessions.push(client);
    }
    // Warm-up: the first answers of a fresh server load indexes.
    for i in 0..200 {
        recall(&sessions[0], &corpus, 2_000_000 + i).await;
    }
    let cpu_before = server.and_then(report::cpu_seconds);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for (w, c) in sessions.into_iter().enumerate() {
        let corpus = Arc::clone(&corpus);
        workers.push(tokio::spawn(async move {
            let mut times = Vec::new();
            let mut i = w as u64 * 1_000_000;
            while Instant::now() < deadline {
                times.push(recall(&c, &corpus, i).await);
                i += 1;
            }
            (times, c)
        }));
    }
    let mut all = Vec::new();
    let mut done = Vec::new();
    let mut per_client = (usize::MAX, 0);
    for w in workers {
        let (times, c) = w.await.expect("worker");
        per_client = (per_client.0.min(times.len()), per_client.1.max(times.len()));
        all.extend(times);
        done.push(c);
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Read before the sessions end: a stdio server exits with its session.
    let server_cpu_ms = match (cpu_before, server.and_then(report::cpu_seconds)) {
        (Some(a), Some(b)) => Some((b - a) * 1e3 / all.len().max(1) as f64),
        _ => None,
    };
    for c in done {
        let _ = c.cancel().await;
    }
    all.sort();
    let q = |f: f64| all[((all.len() as f64 * f).ceil() as usize).clamp(1, all.len()) - 1];
    Load {
        per_s: all.len() as f64 / elapsed,
        p50: q(0.5).as_secs_f64() * 1e3,
        p99: q(0.99).as_secs_f64() * 1e3,
        n: all.len(),
        per_client,
        server_cpu_ms,
    }
}

/// A row's verdict against its floor.
fn verdict(met: bool) -> &'static str {
    if met { "yes" } else { "no" }
}

fn args() -> Result<(usize, u64), String> {
    let mut clients = 64;
    let mut seconds = 10;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "--clients" => clients = v.parse().map_err(|_| format!("--clients {v}"))?,
            "--seconds" => seconds = v.parse().map_err(|_| format!("--seconds {v}"))?,
            _ => return Err(format!("unknown option {a}")),
        }
    }
    Ok((clients.max(1), seconds.max(1)))
}

/// The time to verify one JWT access token (EdDSA) as the OAuth mode does: checks and ms each.
async fn jwt_cost(dir: &Path) -> (u32, f64) {
    use base64::Engine as _;
    use ring::signature::KeyPair as _;
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng).expect("a key");
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("the key");
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
    let jwks = dir.join("jwks.json");
    let set =
        json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "k", "alg": "EdDSA"}]});
    std::fs::write(&jwks, set.to_string()).expect("write the key set");
    let (issuer, audience) = (
        "https://auth.example.test",
        "https://memory.example.test/mcp",
    );
    let oauth = mnemograph::mcp::oauth::OAuth::load(mnemograph::mcp::oauth::OAuthConfig {
        issuer: issuer.into(),
        audience: audience.into(),
        jwks: mnemograph::mcp::oauth::KeySource::File(jwks),
    })
    .expect("the key set loads");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("k".into());
    let token = jsonwebtoken::encode(
        &header,
        &json!({"iss": issuer, "aud": audience, "sub": "load", "scope": "read", "exp": now + 3600}),
        &jsonwebtoken::EncodingKey::from_ed_der(pkcs8.as_ref()),
    )
    .expect("sign");
    let checks = 20_000u32;
    let started = Instant::now();
    for _ in 0..checks {
        std::hint::black_box(oauth.verify(std::hint::black_box(&token)).await.is_ok());
    }
    (
        checks,
        started.elapsed().as_secs_f64() * 1e3 / f64::from(checks),
    )
}

fn main() -> ExitCode {
    let (clients, seconds) = match args() {
        Ok(a) => a,
        Err(e) => {
            note!("{e}\nusage: http_load [--clients N] [--seconds S]");
            return ExitCode::from(2);
        }
    };
    let (dir, db) = fixture::scratch_copy(BIG_CORPUS);
    let tokens = dir.path().join("tokens");
    let (token, line) =
        mnemograph::mcp::auth::new_token("load", &["read".into()], None).expect("a token");
    std::fs::write(&tokens, format!("{line}\n")).expect("write the tokens file");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    for (label, with_tokens, n) in [
        (format!("HTTP, {clients} clients"), false, clients),
        (
            format!("HTTP with bearer tokens, {clients} clients"),
            true,
            clients,
        ),
        ("HTTP, 1 client".to_owned(), false, 1),
        ("HTTP with bearer tokens, 1 client".to_owned(), true, 1),
    ] {
        let extra: Vec<&str> = if with_tokens {
            vec!["--tokens", tokens.to_str().expect("a UTF-8 path")]
        } else {
            Vec::new()
        };
        let bin = fixture::server_binary().expect("build the server first: cargo build --release");
        let (mut child, url) = report::serve_http(&bin, &db, &extra, None, Duration::from_secs(60));
        note!("{label}…");
        let l = runtime.block_on(load(
            Some(&url),
            with_tokens.then_some(token.as_str()),
            None,
            n,
            seconds,
            Some(child.id()),
        ));
        let _ = child.kill();
        let _ = child.wait();
        rows.push((label, l));
    }
    note!("stdio, 1 client…");
    let l = runtime.block_on(load(None, None, Some(&db), 1, seconds, None));
    rows.push(("stdio, 1 client".to_owned(), l));

    // The work a token adds to a request: parse the header, hash the token, look it up.
    let admitted = mnemograph::mcp::auth::Tokens::parse(&format!("{line}\n")).expect("tokens");
    let header = format!("Bearer {token}");
    let checks = 200_000u32;
    let started = Instant::now();
    for _ in 0..checks {
        std::hint::black_box(admitted.check(Some(std::hint::black_box(&header))).is_ok());
    }
    let auth_ms = started.elapsed().as_secs_f64() * 1e3 / f64::from(checks);
    let (jwt_checks, jwt_ms) = runtime.block_on(jwt_cost(dir.path()));

    out!("## mnemograph over HTTP\n");
    out!("- machine: {}", fixture::machine());
    out!(
        "- corpus: the seeded 100,000 memories; recall limit 10, the default hybrid; {seconds} s per row\n"
    );
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    out!(
        "| transport | recalls | per client, fewest–most | recalls/s | p50 | p99 | server CPU per recall | floor | meets |"
    );
    out!("|---|---:|---:|---:|---:|---:|---:|---|---|");
    for (i, (label, l)) in rows.iter().enumerate() {
        // The rows of many clients are held to the one-client row of their kind, two below.
        let (floor, ok) = match (l.server_cpu_ms, rows.get(i + 2).map(|r| r.1.server_cpu_ms)) {
            (Some(cpu), Some(Some(one))) if i < 2 && clients > 1 => {
                let mean = l.n as f64 / clients as f64;
                let ok = cpu <= FLOOR_CPU_GROWTH * one
                    && l.per_s >= FLOOR_CORE_SHARE * cores * 1e3 / cpu
                    && l.p99 <= FLOOR_TAIL * l.p50
                    && l.per_client.0 as f64 >= FLOOR_FEWEST_SHARE * mean;
                (
                    format!(
                        "CPU ≤ {FLOOR_CPU_GROWTH} × one client's, ≥ {:.0} % of cores ÷ CPU, p99 ≤ {FLOOR_TAIL} × p50, fewest ≥ {FLOOR_FEWEST_SHARE} × mean",
                        FLOOR_CORE_SHARE * 100.0
                    ),
                    Some(ok),
                )
            }
            (Some(cpu), _) if i >= 2 || clients == 1 => (
                format!("CPU ≤ {FLOOR_ONE_CLIENT_CPU_MS} ms"),
                Some(cpu <= FLOOR_ONE_CLIENT_CPU_MS),
            ),
            _ => (String::new(), None),
        };
        let meets = ok.map_or("", verdict);
        let cpu = l
            .server_cpu_ms
            .map_or(String::new(), |c| format!("{c:.2} ms"));
        out!(
            "| {label} | {} | {}–{} | {:.0} | {:.2} ms | {:.2} ms | {cpu} | {floor} | {meets} |",
            l.n,
            l.per_client.0,
            l.per_client.1,
            l.per_s,
            l.p50,
            l.p99
        );
    }
    let meets = |ms: f64| verdict(ms <= FLOOR_AUTH_MS);
    out!(
        "| checking a bearer token (header, SHA-256, lookup) | {checks} | | | {auth_ms:.5} ms | | | ≤ {FLOOR_AUTH_MS} ms | {} |",
        meets(auth_ms)
    );
    out!(
        "| checking an OAuth access token (JWT, Ed25519 signature, claims) | {jwt_checks} | | | {jwt_ms:.5} ms | | | ≤ {FLOOR_AUTH_MS} ms | {} |",
        meets(jwt_ms)
    );
    drop(dir);
    ExitCode::SUCCESS
}
