//! Recall quality on RealMem (long user–assistant histories with questions asked inside them):
//! each persona's sessions are replayed in file order, every turn stored as a memory named by its
//! turn id (`<session_uuid>:<i>`, content `speaker: text`, following the turn before it in its
//! session) in the persona's namespace; at each
//! question turn the question is recalled first (so only earlier turns can be found), then stored.
//! Scored against the evidence turns: recall@5, recall@10 and NDCG@10 over all questions, for
//! text and hybrid ranking, with recall latency p50/p99; then R@10 per question category.
//!
//! Evidence mapping as in the data set's reference loader: the answer turn after a question lists
//! the memories used; each equals an extracted memory of its session, whose source turn is the
//! turn with the same (whitespace-normalised) text nearest `source_turn − 1`, else that index.
//! Evidence at or after the question is dropped.
//!
//! The data (Apache-2.0, not shipped here) is the ten `*_dialogues_256k.json` files of RealMem
//! (github.com/AvatarMemory/RealMemBench). Run:
//! `cargo run --release --example realmem -- path/to/realmem/ [--weights TEXT:VECTOR]… [--expand HOPS]…`
//! Each `--weights` adds a hybrid row with those fusion weights, each `--expand` one with that
//! graph expansion; `--embedder` picks the embedding provider as the server's flag does (the
//! transformer, `minilm:DIR`, in builds with `--features minilm`). `data/realmem/` holds a made-up
//! persona in the same shape, which the example's test replays against floors.

#[path = "common/quality.rs"]
mod quality;
#[path = "common/weights.rs"]
mod weights;

use std::collections::{HashMap, HashSet};

use quality::{K, Score};
use std::process::ExitCode;
use std::time::Instant;

use mnemograph::config::EmbedderSpec;
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

/// Turns longer than this are cut (the server's content limit is 64 KiB).
const MAX_CONTENT: usize = 60_000;

/// A row of the table: its label, the ranking, the fusion weights (`None`: the default), the
/// graph expansion (`None`: the default).
type Row = (String, RecallMode, Option<(f32, f32)>, Option<u8>);

/// Extra rows asked for on the command line.
#[derive(Default)]
struct Extra {
    weights: Vec<(f32, f32)>,
    expand: Vec<u8>,
    /// The embedding provider (`None`: the built-in model).
    embedder: Option<EmbedderSpec>,
}

const USAGE: &str = "usage: realmem PATH/TO/realmem/ [--weights TEXT:VECTOR]... [--expand HOPS]... [--embedder builtin|static:DIR|minilm:DIR]";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        let _ = writeln_err(USAGE);
        return ExitCode::from(2);
    };
    let mut extra = Extra::default();
    while let Some(a) = args.next() {
        let parsed = match (a.as_str(), args.next()) {
            ("--weights", Some(v)) => weights::parse_weights(&v).map(|w| extra.weights.push(w)),
            ("--expand", Some(v)) => match v.parse::<u8>() {
                Ok(h @ 0..=2) => {
                    extra.expand.push(h);
                    Ok(())
                }
                _ => Err(format!("--expand {v:?}: give 0, 1 or 2 hops")),
            },
            ("--embedder", Some(v)) => EmbedderSpec::local(&v)
                .map(|e| extra.embedder = Some(e))
                .ok_or_else(|| format!("--embedder {v:?}: give builtin, static:DIR or minilm:DIR")),
            _ => Err(USAGE.to_owned()),
        };
        if let Err(e) = parsed {
            let _ = writeln_err(&e);
            return ExitCode::from(2);
        }
    }
    match run(&dir, &extra) {
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

fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The evidence turn index of an extracted memory within its session.
fn evidence_turn(session: &Value, memory: &Value) -> usize {
    let turns = session["dialogue_turns"].as_array().map_or(&[][..], |v| v);
    let last = turns.len().saturating_sub(1) as i64;
    let guess = (memory["source_turn"].as_i64().unwrap_or(1) - 1).clamp(0, last.max(0)) as usize;
    let snap = norm(memory["source_content_snapshot"].as_str().unwrap_or(""));
    if snap.is_empty() {
        return guess;
    }
    turns
        .iter()
        .enumerate()
        .filter(|(_, t)| norm(t["content"].as_str().unwrap_or("")) == snap)
        .map(|(i, _)| i)
        .min_by_key(|i| i.abs_diff(guess))
        .unwrap_or(guess)
}

/// Evidence turn ids of the question at `i` of `session` (listed on the next turn).
fn evidence(by_uuid: &HashMap<&str, &Value>, session: &Value, i: usize) -> Vec<String> {
    let answer = &session["dialogue_turns"][i + 1];
    let mut ev: Vec<String> = Vec::new();
    for m in answer["memory_used"].as_array().map_or(&[][..], |v| v) {
        let Some(src) = m["session_uuid"].as_str().and_then(|u| by_uuid.get(u)) else {
            continue;
        };
        let found = src["extracted_memory"]
            .as_array()
            .and_then(|ms| ms.iter().find(|e| e["content"] == m["content"]));
        if let Some(e) = found {
            let id = format!(
                "{}:{}",
                src["session_uuid"].as_str().unwrap_or(""),
                evidence_turn(src, e)
            );
            if !ev.contains(&id) {
                ev.push(id);
            }
        }
    }
    ev
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_CONTENT {
        return s.to_owned();
    }
    let mut end = MAX_CONTENT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// Every ranking's scores over one replay of the histories in a folder.
struct Evaluation {
    /// The embedding model's id.
    embedder: String,
    modes: Vec<Row>,
    scores: Vec<Score>,
    personas: usize,
    turns: usize,
    questions: usize,
    seconds: f64,
}

fn run(dir: &str, extra: &Extra) -> anyhow::Result<()> {
    report(evaluate(dir, extra)?);
    Ok(())
}

/// Replays every persona of `dir` and scores the text, default hybrid and `extra` rankings.
fn evaluate(dir: &str, extra: &Extra) -> anyhow::Result<Evaluation> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("_dialogues_256k.json"))
        })
        .collect();
    files.sort();
    anyhow::ensure!(!files.is_empty(), "no *_dialogues_256k.json in {dir}");
    let tmp = tempfile::tempdir()?;
    let mut config = Config::for_db(tmp.path().join("realmem.db"));
    if let Some(e) = &extra.embedder {
        config.embedder = e.clone();
    }
    let engine = Engine::open(config)?;
    let embedder = engine
        .embedder()
        .map_or("none".to_owned(), |e| e.model_id().to_owned());
    let mut modes: Vec<Row> = vec![
        ("text (BM25)".into(), RecallMode::Text, None, None),
        ("hybrid (default)".into(), RecallMode::Hybrid, None, None),
    ];
    modes.extend(extra.weights.iter().map(|&(t, v)| {
        (
            format!("hybrid, weights {t} : {v}"),
            RecallMode::Hybrid,
            Some((t, v)),
            None,
        )
    }));
    modes.extend(extra.expand.iter().map(|&h| {
        (
            format!("hybrid, expand {h}"),
            RecallMode::Hybrid,
            None,
            Some(h),
        )
    }));
    let mut scores: Vec<Score> = modes.iter().map(|_| Score::default()).collect();
    let (mut n_turns, mut n_questions) = (0usize, 0usize);
    let started = Instant::now();
    for (p, path) in files.iter().enumerate() {
        let data: Value = serde_json::from_slice(&std::fs::read(path)?)?;
        let sessions = data["dialogues"].as_array().map_or(&[][..], |v| v);
        let by_uuid: HashMap<&str, &Value> = sessions
            .iter()
            .filter_map(|s| Some((s["session_uuid"].as_str()?, s)))
            .collect();
        let namespace = format!("persona{p}");
        // Turn id → replay position, to drop evidence at or after its question.
        let mut position: HashMap<String, usize> = HashMap::new();
        let mut pending: Vec<RememberItem> = Vec::new();
        let mut questions: Vec<(String, usize, Vec<String>, String)> = Vec::new();
        for s in sessions {
            let uuid = s["session_uuid"].as_str().unwrap_or("");
            for (i, t) in s["dialogue_turns"]
                .as_array()
                .map_or(&[][..], |v| v)
                .iter()
                .enumerate()
            {
                let id = format!("{uuid}:{i}");
                if t["is_query"].as_bool() == Some(true) {
                    questions.push((
                        t["content"].as_str().unwrap_or("").to_owned(),
                        position.len(),
                        evidence(&by_uuid, s, i),
                        t["category_name"].as_str().unwrap_or("(none)").to_owned(),
                    ));
                }
                position.insert(id.clone(), position.len());
                // Each turn follows the one before it in its session, as LoCoMo's reader links them.
                let links = match i {
                    0 => Vec::new(),
                    _ => vec![Link {
                        to: format!("{uuid}:{}", i - 1),
                        kind: "follows".into(),
                        weight: None,
                    }],
                };
                pending.push(RememberItem {
                    content: cut(&format!(
                        "{}: {}",
                        t["speaker"].as_str().unwrap_or(""),
                        t["content"].as_str().unwrap_or("")
                    )),
                    name: Some(id),
                    kind: Some("turn".into()),
                    namespace: Some(namespace.clone()),
                    links,
                    ..RememberItem::default()
                });
            }
        }
        // Replay: store the turns before each question, ask it, go on.
        let mut stored = 0usize;
        for (text, at, ev, category) in &questions {
            if *at > stored {
                for r in engine.remember(&pending[stored..*at])? {
                    r?;
                }
                stored = *at;
            }
            let ev: HashSet<&String> = ev
                .iter()
                .filter(|e| position.get(*e).is_some_and(|p| p < at))
                .collect();
            if ev.is_empty() {
                continue;
            }
            n_questions += 1;
            for ((_, mode, weights, expand), score) in modes.iter().zip(&mut scores) {
                let t = Instant::now();
                let defaults = RecallQuery::default();
                let page = engine.recall(&RecallQuery {
                    text: text.clone(),
                    namespaces: NamespaceScope::Only(vec![namespace.clone()]),
                    limit: K,
                    mode: *mode,
                    weights: *weights,
                    expand: expand.unwrap_or(defaults.expand),
                    ..defaults
                });
                let ms = t.elapsed().as_secs_f64() * 1e3;
                let ranked: Vec<String> = match page {
                    Ok(p) => p.hits.into_iter().filter_map(|h| h.memory.name).collect(),
                    Err(_) => Vec::new(),
                };
                score.add(
                    &ranked,
                    |r| ev.iter().any(|e| e.as_str() == r),
                    ev.len(),
                    category,
                    ms,
                );
            }
        }
        for r in engine.remember(&pending[stored..])? {
            r?;
        }
        n_turns += pending.len();
    }
    Ok(Evaluation {
        embedder,
        modes,
        scores,
        personas: files.len(),
        turns: n_turns,
        questions: n_questions,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Prints the tables of an evaluation.
fn report(ev: Evaluation) {
    let Evaluation {
        embedder,
        modes,
        mut scores,
        personas,
        turns,
        questions,
        seconds,
    } = ev;
    say!("# Recall quality on RealMem\n");
    say!(
        "{personas} personas, {turns} turns, {questions} questions with evidence before them; replayed in {seconds:.0} s; embedder {embedder}.\n"
    );
    let names: Vec<&str> = modes.iter().map(|m| m.0.as_str()).collect();
    quality::print_tables(&names, &mut scores, "category", "questions", |l| {
        say!("{l}")
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed sample (`data/realmem/`, one made-up persona in RealMem's shape) replays,
    /// maps every question's evidence, and ranks it above a floor, so a ranking regression fails
    /// the tests. The floors sit a little below what the sample scored when they were set
    /// (2026-11-26, five questions, default expansion of 2 hops: R@10 text 0.900, hybrid 0.900,
    /// vector alone 0.900, hybrid R@5 0.733; without expansion hybrid R@5 0.900: on a page of
    /// five, a hit's neighbours take places the next matches held).
    #[test]
    fn the_sample_replays_and_ranks_its_evidence() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/realmem");
        let extra = Extra {
            weights: vec![(0.0, 1.0)],
            expand: vec![0],
            embedder: None,
        };
        let ev = evaluate(dir, &extra).expect("the sample replays");
        assert_eq!((ev.personas, ev.turns, ev.questions), (1, 32, 5));
        let r10 = |i: usize| ev.scores[i].r10 / ev.scores[i].n.max(1) as f64;
        let r5 = |i: usize| ev.scores[i].r5 / ev.scores[i].n.max(1) as f64;
        let (text, hybrid, meaning) = (r10(0), r10(1), r10(2));
        assert!(text >= 0.85, "text R@10 {text}");
        assert!(hybrid >= 0.85, "hybrid R@10 {hybrid}");
        assert!(r5(1) >= 0.7, "hybrid R@5 {}", r5(1));
        assert!(r5(3) >= 0.85, "hybrid R@5 without expansion {}", r5(3));
        // Meaning alone finds evidence too (the vectors reach recall).
        assert!(meaning >= 0.5, "vector R@10 {meaning}");
        assert_eq!(ev.scores[1].by_category.len(), 4);
    }
}
