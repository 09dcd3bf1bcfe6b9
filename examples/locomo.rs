//! Recall quality on LoCoMo (long multi-session dialogues): each conversation is imported through
//! the shipped LoCoMo reader (`formats::locomo`, what `mnemograph import` uses) into a namespace
//! of its own — a memory per session and one per turn, each turn part of its session and
//! following the turn before it — then each question of categories 1–4 is recalled within its
//! conversation and scored against the evidence turns: recall@5, recall@10 and NDCG@10, for text,
//! vector and hybrid ranking (the default weights and equal weights), with and without graph
//! expansion; then R@10 per question category.
//!
//! The data (CC BY-NC 4.0, not shipped here) is `locomo10.json` of the LoCoMo release
//! (github.com/snap-research/locomo). Run:
//! `cargo run --release --example locomo -- path/to/locomo10.json [--weights TEXT:VECTOR]…`
//! (`--db postgres://…` stores the memories in that empty PostgreSQL database instead of a
//! scratch SQLite file: the same ranking, read over the network)
//! Each `--weights` adds a hybrid row with those fusion weights; `--embedder` picks the embedding
//! provider as the server's flag does (the transformer, `minilm:DIR`, in builds with
//! `--features minilm`). `data/locomo/sample.json` is a
//! tiny made-up file in the same shape; the tests here run on it.
//!
//! `--mess` adds a realistic mess: every turn re-stated once in other words by a deterministic
//! script (synonym swaps, sentences reordered, "X said:"), as an agent re-remembering it would
//! (metadata `restates` names the turn, for scoring only); every seventh turn's record stored
//! again near-exactly (its final punctuation changed, its metadata kept), and every eleventh
//! exactly, as a client sending a record twice would. `--consolidate` then scores text and hybrid recall before and after a consolidation
//! run with the default policy, and reports memories before and after, the run time, and the
//! merges that were wrong (a memory merged into another turn's survivor). A hit counts for the
//! turn it states: its own turn id, or the turn a re-statement re-states.

#[path = "common/weights.rs"]
mod weights;
use weights::parse_weights;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use mnemograph::config::EmbedderSpec;
use mnemograph::engine::control::Progressing;
use mnemograph::engine::recall::DEFAULT_WEIGHTS;
use mnemograph::engine::{ImportRequest, Source};
use mnemograph::formats::InFormat;
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

const USAGE: &str = "usage: locomo PATH/TO/locomo10.json [--weights TEXT:VECTOR]... [--mess] [--consolidate] [--embedder builtin|static:DIR|minilm:DIR] [--db postgres://…]";
/// Question categories scored (5, adversarial, has no evidence to find).
const CATEGORIES: [u64; 4] = [1, 2, 3, 4];
const K: usize = 10;

/// What the command line asks for.
#[derive(Debug, PartialEq)]
struct Args {
    path: PathBuf,
    /// Extra hybrid rows, one per `--weights TEXT:VECTOR`.
    weights: Vec<(f32, f32)>,
    /// Add re-statements and repeats of the turns.
    mess: bool,
    /// Score before and after a consolidation run.
    consolidate: bool,
    /// The embedding provider (`None`: the built-in model).
    embedder: Option<EmbedderSpec>,
    /// An empty PostgreSQL database to store the memories in (`None`: a scratch SQLite file).
    db: Option<String>,
}

/// One question to score: its conversation's namespace, its text, its evidence turn ids.
struct Question {
    namespace: String,
    text: String,
    evidence: HashSet<String>,
    /// LoCoMo's question category (1–4).
    category: u64,
}

/// One row of the table: how recall ranks.
#[derive(Debug, Clone, PartialEq)]
struct Setup {
    label: String,
    mode: RecallMode,
    expand: u8,
    /// Fusion weights (text, vector); `None`: the engine's default.
    weights: Option<(f32, f32)>,
}

/// The conversations imported, and the questions about them.
struct Corpus {
    engine: Engine,
    /// Holds the database until the corpus is dropped.
    _dir: tempfile::TempDir,
    conversations: usize,
    sessions: i64,
    turns: i64,
    import_s: f64,
    questions: Vec<Question>,
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            writeln_err(&format!("{e}\n{USAGE}"));
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            writeln_err(&format!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

fn writeln_err(s: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{s}");
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut path = None;
    let mut weights = Vec::new();
    let (mut mess, mut consolidate) = (false, false);
    let mut embedder = None;
    let mut db = None;
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if a == "--mess" {
            mess = true;
        } else if a == "--consolidate" {
            consolidate = true;
        } else if a == "--weights" {
            let v = args.next().ok_or("--weights needs a value such as 1:1")?;
            weights.push(parse_weights(&v)?);
        } else if let Some(v) = a.strip_prefix("--weights=") {
            weights.push(parse_weights(v)?);
        } else if a == "--embedder" {
            let v = args
                .next()
                .ok_or("--embedder needs a value such as minilm:DIR")?;
            embedder = Some(EmbedderSpec::local(&v).ok_or_else(|| {
                format!("--embedder {v:?}: give builtin, static:DIR or minilm:DIR")
            })?);
        } else if a == "--db" {
            let v = args
                .next()
                .filter(|v| v.starts_with("postgres://") || v.starts_with("postgresql://"))
                .ok_or("--db needs an empty PostgreSQL database's URL (postgres://…)")?;
            db = Some(v);
        } else if a.starts_with('-') {
            return Err(format!("unknown option {a}"));
        } else if path.replace(PathBuf::from(&a)).is_some() {
            return Err(format!("one data file only (also got {a})"));
        }
    }
    let path = path.ok_or("no data file given")?;
    Ok(Args {
        path,
        weights,
        mess,
        consolidate,
        embedder,
        db,
    })
}

/// The table's rows: each ranking at expansion 0, hybrid with the default and with equal
/// weights, text and hybrid at expansion 1 and 2 (recall's default), then a hybrid row per extra
/// weights.
fn setups(extra: &[(f32, f32)]) -> Vec<Setup> {
    let row = |label: &str, mode, expand, weights| Setup {
        label: label.to_owned(),
        mode,
        expand,
        weights,
    };
    let hybrid = |(t, v): (f32, f32)| format!("hybrid, weights {t} : {v}");
    let default = format!("{} (default)", hybrid(DEFAULT_WEIGHTS));
    let mut rows = vec![
        row("text (BM25)", RecallMode::Text, 0, None),
        row("vector", RecallMode::Vector, 0, None),
        row(&default, RecallMode::Hybrid, 0, None),
        row(&hybrid((1.0, 1.0)), RecallMode::Hybrid, 0, Some((1.0, 1.0))),
        row("text (BM25)", RecallMode::Text, 1, None),
        row(&default, RecallMode::Hybrid, 1, None),
        row("text (BM25)", RecallMode::Text, 2, None),
        row(&default, RecallMode::Hybrid, 2, None),
    ];
    for &w in extra {
        rows.push(row(&hybrid(w), RecallMode::Hybrid, 0, Some(w)));
    }
    rows
}

fn run(args: &Args) -> anyhow::Result<()> {
    let corpus = load(&args.path, args.embedder.as_ref(), args.db.as_deref())?;
    let embedder = corpus
        .engine
        .embedder()
        .map_or("none".to_owned(), |e| e.model_id().to_owned());
    say!(
        "LoCoMo: {} conversations, {} sessions and {} turns imported in {:.1} s; {} questions (categories 1–4); embedder {embedder}\n",
        corpus.conversations,
        corpus.sessions,
        corpus.turns,
        corpus.import_s,
        corpus.questions.len()
    );
    let mess = if args.mess {
        let m = add_mess(&corpus)?;
        say!(
            "mess: {} re-statements and {} near-exact repeats stored; {} exact repeats were the stored memory again (remember's identity)\n",
            m.restated.len(),
            m.near.len(),
            m.exact
        );
        Some(m)
    } else {
        None
    };
    if args.consolidate {
        return before_and_after(&corpus, mess.as_ref());
    }
    say!("| ranking | expand | R@5 | R@10 | NDCG@10 | p50 ms |");
    say!("|---|---|---|---|---|---|");
    for setup in setups(&args.weights) {
        let (r5, r10, ndcg, p50) = evaluate(&corpus, &setup)?;
        say!(
            "| {} | {} | {r5:.3} | {r10:.3} | {ndcg:.3} | {p50:.2} |",
            setup.label,
            setup.expand
        );
    }
    let mut counts: std::collections::BTreeMap<u64, usize> = Default::default();
    for q in &corpus.questions {
        *counts.entry(q.category).or_default() += 1;
    }
    let header: Vec<String> = counts
        .iter()
        .map(|(c, n)| format!("category {c} ({n})"))
        .collect();
    say!("\nR@10 by question category:\n");
    say!("| ranking | expand | {} |", header.join(" | "));
    say!("|---|---|{}", "---|".repeat(counts.len()));
    for setup in setups(&args.weights) {
        let by = r10_by_category(&corpus, &setup)?;
        let cells: Vec<String> = counts
            .keys()
            .map(|c| {
                by.get(c).map_or("–".to_owned(), |(sum, n)| {
                    format!("{:.3}", sum / *n as f64)
                })
            })
            .collect();
        say!(
            "| {} | {} | {} |",
            setup.label,
            setup.expand,
            cells.join(" | ")
        );
    }
    Ok(())
}

/// R@10 per question category: summed over its questions, and their number.
fn r10_by_category(
    corpus: &Corpus,
    setup: &Setup,
) -> anyhow::Result<std::collections::BTreeMap<u64, (f64, usize)>> {
    let mut out: std::collections::BTreeMap<u64, (f64, usize)> = Default::default();
    for q in &corpus.questions {
        let ranked = ranked(&corpus.engine, q, setup)?;
        let found = ranked
            .iter()
            .take(K)
            .filter(|d| q.evidence.contains(*d))
            .count();
        let c = out.entry(q.category).or_default();
        c.0 += found as f64 / q.evidence.len() as f64;
        c.1 += 1;
    }
    Ok(out)
}

/// Imports every conversation of a LoCoMo file into a fresh database, one namespace each
/// (`locomo-<sample_id>`), through the engine's import of format `locomo`; collects the
/// questions; embeds everything before any query is timed.
fn load(path: &Path, embedder: Option<&EmbedderSpec>, db: Option<&str>) -> anyhow::Result<Corpus> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let data: Vec<Value> = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a JSON array of LoCoMo samples", path.display()))?;
    let dir = tempfile::tempdir()?;
    let mut config = match db {
        Some(url) => {
            let mut c = Config::for_postgres(url.to_owned(), dir.path().join("index"));
            c.index_dir_per_database = false;
            c
        }
        None => Config::for_db(dir.path().join("locomo.db")),
    };
    if let Some(e) = embedder {
        config.embedder = e.clone();
    }
    let engine = Engine::open(config)?;
    let started = Instant::now();
    let mut questions = Vec::new();
    for (i, conv) in data.iter().enumerate() {
        let sid = match &conv["sample_id"] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => anyhow::bail!("sample {} has no sample_id", i + 1),
        };
        let namespace = format!("locomo-{sid}");
        let report = engine.import(
            &ImportRequest {
                source: Source::Inline(serde_json::to_string(conv)?),
                format: Some(InFormat::Locomo),
                namespace: Some(namespace.clone()),
                dry_run: false,
                actor: "example:locomo".into(),
                max_records: None,
                access: mnemograph::engine::Access::All,
                job: None,
            },
            &Progressing::default(),
        )?;
        if report.errors > 0 {
            anyhow::bail!(
                "{sid}: {} records not imported: {:?}",
                report.errors,
                report.first_errors
            );
        }
        questions.extend(questions_of(&namespace, conv));
    }
    // Embed and index everything before timing queries.
    engine.reindex_vectors()?;
    let import_s = started.elapsed().as_secs_f64();
    let stats = engine.stats()?;
    let of_kind = |kind: &str| {
        stats
            .by_kind
            .iter()
            .find(|(k, _)| k == kind)
            .map_or(0, |(_, n)| *n)
    };
    Ok(Corpus {
        sessions: of_kind("session"),
        turns: of_kind("episode"),
        conversations: data.len(),
        engine,
        _dir: dir,
        import_s,
        questions,
    })
}

/// A conversation's questions of the scored categories that name evidence turns. LoCoMo
/// sometimes puts several turn ids in one string ("D8:6; D9:17").
fn questions_of(namespace: &str, conv: &Value) -> Vec<Question> {
    let mut out = Vec::new();
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
        out.push(Question {
            namespace: namespace.to_owned(),
            text: qa["question"].as_str().unwrap_or_default().to_owned(),
            evidence,
            category: qa["category"].as_u64().unwrap_or(0),
        });
    }
    out
}

/// The turn ids (`dia_id`, kept in each turn's metadata by the reader) of a question's top K
/// hits, best first.
fn ranked(engine: &Engine, q: &Question, setup: &Setup) -> anyhow::Result<Vec<String>> {
    let page = engine.recall(&RecallQuery {
        text: q.text.clone(),
        namespaces: NamespaceScope::Only(vec![q.namespace.clone()]),
        kinds: vec!["episode".into()],
        limit: K,
        mode: setup.mode,
        expand: setup.expand,
        weights: setup.weights,
        ..RecallQuery::default()
    });
    match page {
        // A turn stated twice (a re-statement beside its turn) counts once, where it ranks first.
        Ok(p) => {
            let mut seen = HashSet::new();
            Ok(p.hits
                .into_iter()
                .filter_map(|h| turn_of(&h.memory.metadata))
                .filter(|t| seen.insert(t.clone()))
                .collect())
        }
        // A question with no searchable words finds nothing.
        Err(e) if e.is_user_error() => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// The turn a memory states: its own turn id, or the one it re-states.
fn turn_of(metadata: &Value) -> Option<String> {
    metadata["dia_id"]
        .as_str()
        .or_else(|| metadata["restates"].as_str())
        .map(str::to_owned)
}

/// Word swaps of the re-statements (both ways).
const SYNONYMS: [(&str, &str); 24] = [
    ("went", "headed"),
    ("great", "wonderful"),
    ("really", "truly"),
    ("happy", "glad"),
    ("think", "believe"),
    ("big", "large"),
    ("love", "adore"),
    ("started", "began"),
    ("help", "assist"),
    ("friends", "pals"),
    ("amazing", "incredible"),
    ("recently", "lately"),
    ("awesome", "fantastic"),
    ("beautiful", "lovely"),
    ("hard", "tough"),
    ("kids", "children"),
    ("job", "work"),
    ("trip", "journey"),
    ("photo", "picture"),
    ("glad", "pleased"),
    ("excited", "thrilled"),
    ("important", "significant"),
    ("nice", "pleasant"),
    ("so", "very"),
];

/// A turn said again in other words: "Speaker said:", synonyms swapped, sentences in another
/// order.
fn restate(content: &str) -> String {
    let (speaker, text) = match content.split_once(": ") {
        Some((s, t)) if !s.contains(' ') || s.len() < 24 => (Some(s), t),
        _ => (None, content),
    };
    let swapped: Vec<String> = text
        .split(' ')
        .map(|w| {
            let core = w.trim_end_matches(|c: char| !c.is_alphanumeric());
            let tail = &w[core.len()..];
            let lower = core.to_lowercase();
            let other = SYNONYMS.iter().find_map(|&(a, b)| {
                if lower == a {
                    Some(b)
                } else if lower == b {
                    Some(a)
                } else {
                    None
                }
            });
            match other {
                Some(o) => format!("{o}{tail}"),
                None => w.to_owned(),
            }
        })
        .collect();
    let joined = swapped.join(" ");
    let mut sentences: Vec<&str> = joined
        .split_inclusive(['.', '!', '?'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if sentences.len() > 1 {
        sentences.rotate_left(1);
    }
    let body = sentences.join(" ");
    match speaker {
        Some(s) => format!("{s} said: {body}"),
        None => body,
    }
}

/// What [`add_mess`] stored: (memory id, the turn it states).
struct Mess {
    restated: Vec<(String, String)>,
    near: Vec<(String, String)>,
    exact: usize,
}

/// Adds the re-statements and repeats of every turn (see the module docs), through `remember`.
fn add_mess(corpus: &Corpus) -> anyhow::Result<Mess> {
    use mnemograph::engine::RememberItem;
    let mut mess = Mess {
        restated: Vec::new(),
        near: Vec::new(),
        exact: 0,
    };
    for (namespace, turns) in turns_by_namespace(corpus)? {
        let mut items = Vec::new();
        let mut what = Vec::new();
        for (i, (_, turn, content, metadata)) in turns.iter().enumerate() {
            let item = |content: String, metadata: Value| RememberItem {
                content,
                kind: Some("episode".into()),
                namespace: Some(namespace.clone()),
                metadata: Some(metadata),
                ..RememberItem::default()
            };
            items.push(item(
                restate(content),
                serde_json::json!({ "restates": turn }),
            ));
            what.push((0, turn.clone()));
            if i % 7 == 3 {
                let near = match content.strip_suffix(['.', '!', '?']) {
                    Some(c) => format!("{c}!!"),
                    None => format!("{content}!"),
                };
                items.push(item(near, metadata.clone()));
                what.push((1, turn.clone()));
            }
            if i % 11 == 5 {
                items.push(item(content.clone(), metadata.clone()));
                what.push((2, turn.clone()));
            }
        }
        for chunk in items.chunks(500).zip(what.chunks(500)) {
            for (r, (sort, turn)) in corpus.engine.remember(chunk.0)?.into_iter().zip(chunk.1) {
                let r = r?;
                match (sort, r.duplicate) {
                    (_, true) => mess.exact += 1,
                    (0, false) => mess.restated.push((r.id, turn.clone())),
                    (_, false) => mess.near.push((r.id, turn.clone())),
                }
            }
        }
    }
    corpus.engine.reindex_vectors()?;
    Ok(mess)
}

/// A turn as exported: id, turn id, content, metadata.
type Turn = (String, String, String, Value);

/// Every live turn of the corpus by namespace, from an export.
fn turns_by_namespace(
    corpus: &Corpus,
) -> anyhow::Result<std::collections::BTreeMap<String, Vec<Turn>>> {
    use mnemograph::engine::{ExportRequest, OutFormat};
    let mut out = Vec::new();
    let req = ExportRequest {
        namespaces: None,
        format: OutFormat::Jsonl,
        subgraph: None,
        vectors: false,
        history: false,
    };
    corpus
        .engine
        .export(&req, &mut out, &Progressing::default())?;
    let mut by_ns = std::collections::BTreeMap::<String, Vec<_>>::new();
    for line in String::from_utf8(out)?.lines() {
        let v: Value = serde_json::from_str(line)?;
        if v["type"] != "memory" {
            continue;
        }
        if let (Some(id), Some(ns), Some(turn), Some(content)) = (
            v["id"].as_str(),
            v["namespace"].as_str(),
            v["metadata"]["dia_id"].as_str(),
            v["content"].as_str(),
        ) {
            by_ns.entry(ns.to_owned()).or_default().push((
                id.to_owned(),
                turn.to_owned(),
                content.to_owned(),
                v["metadata"].clone(),
            ));
        }
    }
    Ok(by_ns)
}

/// Merged memories and how many of them went into another turn's survivor.
fn wrong_merges(engine: &Engine, memories: &[(String, String)]) -> anyhow::Result<(usize, usize)> {
    use mnemograph::model::MemoryRef;
    let (mut merged, mut wrong) = (0, 0);
    for chunk in memories.chunks(100) {
        let refs: Vec<MemoryRef> = chunk
            .iter()
            .map(|(id, _)| MemoryRef::Id(id.clone()))
            .collect();
        for (d, (_, turn)) in engine.get(&refs, false)?.into_iter().zip(chunk) {
            if d.merged.is_some() {
                merged += 1;
                if turn_of(&d.memory.metadata).as_deref() != Some(turn.as_str()) {
                    wrong += 1;
                }
            }
        }
    }
    Ok((merged, wrong))
}

/// Scores text and default hybrid recall, consolidates with the default policy, scores again.
fn before_and_after(corpus: &Corpus, mess: Option<&Mess>) -> anyhow::Result<()> {
    use mnemograph::engine::curate::ConsolidateRequest;
    let rows = [&setups(&[])[0], &setups(&[])[2]];
    let memories_before = corpus.engine.stats()?.memories;
    let repeats: HashSet<&str> = mess
        .map(|m| m.near.iter().map(|(id, _)| id.as_str()).collect())
        .unwrap_or_default();
    let originals: Vec<(String, String)> = turns_by_namespace(corpus)?
        .into_values()
        .flatten()
        .filter(|(id, ..)| !repeats.contains(id.as_str()))
        .map(|(id, turn, _, _)| (id, turn))
        .collect();
    let mut before = Vec::new();
    for setup in rows {
        before.push(evaluate(corpus, setup)?);
    }
    let started = Instant::now();
    let report = corpus.engine.consolidate(
        &ConsolidateRequest {
            started_by: "example:locomo".into(),
            ..ConsolidateRequest::default()
        },
        &Progressing::default(),
    )?;
    let run_s = started.elapsed().as_secs_f64();
    corpus.engine.reindex_vectors()?;
    let memories_after = corpus.engine.stats()?.memories;
    say!(
        "consolidation: {} merged into {} survivors, {} archived, {} near-duplicate pairs kept apart (a number, id, name or negation differs), in {run_s:.1} s; memories {memories_before} → {memories_after}",
        report.counts.merged,
        report.counts.survivors,
        report.counts.archived,
        report.counts.kept_apart
    );
    for (label, list) in [
        ("turns of the conversations", Some(&originals)),
        ("re-statements", mess.map(|m| &m.restated)),
        ("near-exact repeats", mess.map(|m| &m.near)),
    ] {
        if let Some(list) = list {
            let (merged, wrong) = wrong_merges(&corpus.engine, list)?;
            say!(
                "{label}: {} stored, {merged} merged, {wrong} into another turn's survivor ({:.1} % of merged)",
                list.len(),
                100.0 * wrong as f64 / merged.max(1) as f64
            );
        }
    }
    say!("\n| ranking | R@10 before | R@10 after | NDCG@10 before | NDCG@10 after |");
    say!("|---|---|---|---|---|");
    for (setup, b) in rows.iter().zip(&before) {
        let a = evaluate(corpus, setup)?;
        say!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            setup.label,
            b.1,
            a.1,
            b.2,
            a.2
        );
    }
    Ok(())
}

/// Mean recall@5, recall@10 and NDCG@10 over the questions, and the median recall time.
fn evaluate(corpus: &Corpus, setup: &Setup) -> anyhow::Result<(f64, f64, f64, f64)> {
    let (mut r5, mut r10, mut ndcg) = (0.0, 0.0, 0.0);
    let mut times = Vec::with_capacity(corpus.questions.len());
    for q in &corpus.questions {
        let t = Instant::now();
        let ranked = ranked(&corpus.engine, q, setup)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
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
    let n = corpus.questions.len().max(1) as f64;
    times.sort_by(f64::total_cmp);
    let p50 = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok((r5 / n, r10 / n, ndcg / n, p50))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/locomo/sample.json")
    }

    fn args(a: &[&str]) -> Result<Args, String> {
        parse_args(a.iter().map(|s| s.to_string()))
    }

    #[test]
    fn restatements_swap_words_and_reorder_sentences() {
        assert_eq!(
            restate("Melanie: I went to the beach. It was so great!"),
            "Melanie said: It was very wonderful! I headed to the beach."
        );
        assert_eq!(restate("no speaker here"), "no speaker here");
        let m = args(&["f.json", "--mess", "--consolidate"]).unwrap();
        assert!(m.mess && m.consolidate);
    }

    #[test]
    fn weights_flags_add_hybrid_rows() {
        assert_eq!(parse_weights("1:1"), Ok((1.0, 1.0)));
        assert_eq!(parse_weights(" 1 : 0.25 "), Ok((1.0, 0.25)));
        assert_eq!(parse_weights("0:1"), Ok((0.0, 1.0)));
        for bad in [
            "", "1", "1:", ":1", "a:b", "0:0", "-1:1", "1:NaN", "inf:1", "1:1:1",
        ] {
            assert!(parse_weights(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            args(&["f.json", "--weights", "1:1", "--weights=2:1"]),
            Ok(Args {
                path: "f.json".into(),
                weights: vec![(1.0, 1.0), (2.0, 1.0)],
                mess: false,
                consolidate: false,
                embedder: None,
                db: None,
            })
        );
        let p = args(&["f.json", "--db", "postgres://u@h/m"]).unwrap();
        assert_eq!(p.db.as_deref(), Some("postgres://u@h/m"));
        assert!(args(&["f.json", "--db", "m.db"]).is_err());
        let m = args(&["f.json", "--embedder", "minilm:models/x"]).unwrap();
        assert_eq!(m.embedder, Some(EmbedderSpec::MiniLm("models/x".into())));
        assert!(args(&["f.json", "--embedder", "gpt"]).is_err());
        assert!(args(&[]).is_err());
        assert!(args(&["a.json", "b.json"]).is_err());
        assert!(args(&["a.json", "--weights"]).is_err());
        assert!(args(&["a.json", "--weight", "1:1"]).is_err());

        let rows = setups(&[(1.0, 0.5)]);
        let labels: Vec<(&str, u8)> = rows.iter().map(|r| (r.label.as_str(), r.expand)).collect();
        assert_eq!(
            labels,
            [
                ("text (BM25)", 0),
                ("vector", 0),
                ("hybrid, weights 1 : 0.35 (default)", 0),
                ("hybrid, weights 1 : 1", 0),
                ("text (BM25)", 1),
                ("hybrid, weights 1 : 0.35 (default)", 1),
                ("text (BM25)", 2),
                ("hybrid, weights 1 : 0.35 (default)", 2),
                ("hybrid, weights 1 : 0.5", 0),
            ]
        );
        assert_eq!(rows[2].weights, None, "the engine's default, not a copy");
        assert_eq!(rows[3].weights, Some((1.0, 1.0)));
        assert_eq!(rows[8].weights, Some((1.0, 0.5)));
    }

    #[test]
    fn the_sample_is_imported_by_the_reader_and_scored() {
        let corpus = load(&sample(), None, None).expect("load the sample");
        assert_eq!(
            (corpus.conversations, corpus.sessions, corpus.turns),
            (2, 3, 15)
        );
        // Categories 1–4 with evidence; the adversarial one is left out.
        assert_eq!(corpus.questions.len(), 7);
        let bicycle = corpus
            .questions
            .iter()
            .find(|q| q.text.contains("blue bicycle"))
            .expect("the bicycle question");
        let split: HashSet<String> = ["D1:4", "D1:6"].map(String::from).into();
        assert_eq!(bicycle.evidence, split);

        // Turns are the reader's: its content (the photo's caption as "[image: …]"), and its
        // metadata naming the turn; each conversation in its own namespace.
        let text = |q: &str, ns: &str| Question {
            namespace: ns.into(),
            text: q.into(),
            evidence: HashSet::new(),
            category: 4,
        };
        let rows = setups(&[]);
        let photo = corpus
            .engine
            .recall(&RecallQuery {
                text: "garage door".into(),
                namespaces: NamespaceScope::Only(vec!["locomo-sample-1".into()]),
                mode: RecallMode::Text,
                limit: 1,
                ..RecallQuery::default()
            })
            .expect("recall");
        assert_eq!(
            photo.hits[0].memory.content,
            "Ben: I spent the weekend fixing my old bicycle, look. [image: a photo of a blue \
             bicycle leaning against a garage door]"
        );
        assert_eq!(photo.hits[0].memory.metadata["dia_id"], "D1:4");
        let kitten = ranked(
            &corpus.engine,
            &text("What is the name of Ben's kitten?", "locomo-sample-1"),
            &rows[0],
        )
        .expect("recall");
        assert_eq!(kitten.first().map(String::as_str), Some("D2:3"));
        let other = corpus
            .engine
            .recall(&RecallQuery {
                text: "kitten Pepper".into(),
                namespaces: NamespaceScope::Only(vec!["locomo-sample-2".into()]),
                mode: RecallMode::Text,
                limit: K,
                ..RecallQuery::default()
            })
            .expect("recall");
        assert!(
            other.hits.is_empty(),
            "the other conversation has no kitten: {:?}",
            other.hits
        );

        let mut scores = Vec::new();
        for setup in &rows {
            let (r5, r10, ndcg, p50) = evaluate(&corpus, setup).expect("evaluate");
            for v in [r5, r10, ndcg] {
                assert!((0.0..=1.0).contains(&v), "{setup:?}: {v}");
            }
            assert!(r5 <= r10 && p50 >= 0.0, "{setup:?}");
            // Every question shares words with its evidence and a conversation has 11 turns at
            // most: the top ten hold nearly all the evidence in every setup.
            assert!(r10 >= 0.85, "{setup:?}: R@10 {r10}");
            scores.push((r5, ndcg));
        }
        // The weights reach recall: meaning alone ranks the sample differently from the default.
        let by_meaning = Setup {
            weights: Some((0.0, 1.0)),
            ..rows[2].clone()
        };
        let (r5, _, ndcg, _) = evaluate(&corpus, &by_meaning).expect("evaluate");
        assert_ne!(scores[2], (r5, ndcg), "{:?} vs {by_meaning:?}", rows[2]);
    }
}
