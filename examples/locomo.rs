//! Recall quality on LoCoMo (long multi-session dialogues): every dialogue turn becomes a memory
//! in its conversation's namespace (speaker and session date kept, linked to its session and to
//! the turns around it), then each question of categories 1–4 is recalled within its
//! conversation and scored against the evidence turns: recall@5, recall@10 and NDCG@10, for text,
//! vector and hybrid ranking, with and without graph expansion.
//!
//! The data (CC BY-NC 4.0, not shipped here) is `locomo10.json` of the LoCoMo release
//! (github.com/snap-research/locomo). Run:
//! `cargo run --release --example locomo -- path/to/locomo10.json`

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Instant;

use mnemograph::engine::{Link, RememberItem};
use mnemograph::model::{NamespaceScope, RecallMode, RecallQuery};
use mnemograph::{Config, Engine};
use serde_json::Value;

/// Prints one line of the report on stdout.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// Question categories scored (5, adversarial, has no evidence to find).
const CATEGORIES: [u64; 4] = [1, 2, 3, 4];
const K: usize = 10;

struct Question {
    namespace: String,
    text: String,
    evidence: HashSet<String>,
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        let _ = writeln_err("usage: locomo PATH/TO/locomo10.json");
        return ExitCode::from(2);
    };
    match run(&path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln_err(&format!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

fn writeln_err(s: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(std::io::stderr(), "{s}")
}

fn run(path: &str) -> anyhow::Result<()> {
    let data: Vec<Value> = serde_json::from_slice(&std::fs::read(path)?)?;
    let dir = tempfile::tempdir()?;
    let engine = Engine::open(Config::for_db(dir.path().join("locomo.db")))?;
    let started = Instant::now();
    let mut questions = Vec::new();
    let mut n_turns = 0;
    for conv in &data {
        let ns = format!("locomo-{}", conv["sample_id"].as_str().unwrap_or("x"));
        n_turns += import(&engine, &ns, &conv["conversation"])?;
        for qa in conv["qa"].as_array().into_iter().flatten() {
            if !CATEGORIES.contains(&qa["category"].as_u64().unwrap_or(0)) {
                continue;
            }
            let evidence: HashSet<String> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .flat_map(|e| e.split(|c: char| c == ';' || c == ',' || c.is_whitespace()))
                .map(str::trim)
                .filter(|e| e.starts_with('D') && e.contains(':'))
                .map(str::to_owned)
                .collect();
            if evidence.is_empty() {
                continue;
            }
            questions.push(Question {
                namespace: ns.clone(),
                text: qa["question"].as_str().unwrap_or_default().to_owned(),
                evidence,
            });
        }
    }
    let import_s = started.elapsed().as_secs_f64();
    // Embed and index everything before timing queries.
    engine.reindex_vectors()?;
    let embedder = engine
        .embedder()
        .map_or("none".to_owned(), |e| e.model_id().to_owned());
    say!(
        "LoCoMo: {} conversations, {n_turns} turns imported in {import_s:.1} s; {} questions (categories 1–4); embedder {embedder}\n",
        data.len(),
        questions.len()
    );
    say!("| ranking | expand | R@5 | R@10 | NDCG@10 | p50 ms |");
    say!("|---|---|---|---|---|---|");
    let configs = [
        ("text (BM25)", RecallMode::Text, 0),
        ("vector", RecallMode::Vector, 0),
        ("hybrid (RRF)", RecallMode::Hybrid, 0),
        ("text (BM25)", RecallMode::Text, 1),
        ("hybrid (RRF)", RecallMode::Hybrid, 1),
        ("hybrid (RRF)", RecallMode::Hybrid, 2),
    ];
    for (label, mode, expand) in configs {
        let (r5, r10, ndcg, p50) = evaluate(&engine, &questions, mode, expand)?;
        say!("| {label} | {expand} | {r5:.3} | {r10:.3} | {ndcg:.3} | {p50:.2} |");
    }
    Ok(())
}

/// Imports one conversation: a memory per session, a memory per turn linked to its session and
/// to the turn before it. Returns the number of turns.
fn import(engine: &Engine, ns: &str, conv: &Value) -> anyhow::Result<usize> {
    let a = conv["speaker_a"].as_str().unwrap_or("A");
    let b = conv["speaker_b"].as_str().unwrap_or("B");
    let mut items = Vec::new();
    let mut n_turns = 0;
    for s in 1.. {
        let Some(turns) = conv.get(format!("session_{s}")).and_then(Value::as_array) else {
            break;
        };
        let date = conv[format!("session_{s}_date_time")]
            .as_str()
            .unwrap_or("");
        let session = format!("session_{s}");
        items.push(RememberItem {
            namespace: Some(ns.to_owned()),
            kind: Some("session".into()),
            name: Some(session.clone()),
            content: format!("Conversation between {a} and {b} on {date}"),
            metadata: Some(serde_json::json!({ "date": date })),
            ..RememberItem::default()
        });
        let mut prev: Option<String> = None;
        for t in turns {
            let dia = t["dia_id"].as_str().unwrap_or_default().to_owned();
            let speaker = t["speaker"].as_str().unwrap_or_default();
            let mut content = format!("{speaker}: {}", t["text"].as_str().unwrap_or_default());
            if let Some(c) = t.get("blip_caption").and_then(Value::as_str) {
                content.push_str(&format!(" [shares a photo of {c}]"));
            }
            let mut links = vec![Link {
                to: session.clone(),
                kind: "in_session".into(),
                weight: Some(0.5),
            }];
            if let Some(p) = prev.take() {
                links.push(Link {
                    to: p,
                    kind: "follows".into(),
                    weight: Some(1.0),
                });
            }
            items.push(RememberItem {
                namespace: Some(ns.to_owned()),
                kind: Some("episode".into()),
                name: Some(dia.clone()),
                content,
                metadata: Some(
                    serde_json::json!({ "speaker": speaker, "session": s, "date": date }),
                ),
                links,
                ..RememberItem::default()
            });
            prev = Some(dia);
            n_turns += 1;
        }
    }
    for (i, r) in engine.remember(&items)?.into_iter().enumerate() {
        if let Err(e) = r {
            anyhow::bail!("turn {i} of {ns}: {e}");
        }
    }
    Ok(n_turns)
}

/// Mean recall@5, recall@10 and NDCG@10 over the questions, and the median recall time.
fn evaluate(
    engine: &Engine,
    questions: &[Question],
    mode: RecallMode,
    expand: u8,
) -> anyhow::Result<(f64, f64, f64, f64)> {
    let (mut r5, mut r10, mut ndcg) = (0.0, 0.0, 0.0);
    let mut times = Vec::with_capacity(questions.len());
    for q in questions {
        let t = Instant::now();
        let page = engine.recall(&RecallQuery {
            text: q.text.clone(),
            namespaces: NamespaceScope::Only(vec![q.namespace.clone()]),
            kinds: vec!["episode".into()],
            limit: K,
            mode,
            expand,
            ..RecallQuery::default()
        });
        times.push(t.elapsed().as_secs_f64() * 1e3);
        let ranked: Vec<String> = match page {
            Ok(p) => p.hits.into_iter().filter_map(|h| h.memory.name).collect(),
            // A question with no searchable words finds nothing.
            Err(e) if e.is_user_error() => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let found = |k: usize| {
            ranked
                .iter()
                .take(k)
                .filter(|d| q.evidence.contains(*d))
                .count()
        };
        let n = q.evidence.len() as f64;
        r5 += found(5) as f64 / n;
        r10 += found(K) as f64 / n;
        let dcg: f64 = ranked
            .iter()
            .take(K)
            .enumerate()
            .filter(|(_, d)| q.evidence.contains(*d))
            .map(|(i, _)| 1.0 / (i as f64 + 2.0).log2())
            .sum();
        let ideal: f64 = (0..q.evidence.len().min(K))
            .map(|i| 1.0 / (i as f64 + 2.0).log2())
            .sum();
        ndcg += dcg / ideal;
    }
    let n = questions.len() as f64;
    times.sort_by(f64::total_cmp);
    let p50 = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok((r5 / n, r10 / n, ndcg / n, p50))
}
