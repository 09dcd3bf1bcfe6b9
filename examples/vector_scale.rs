//! The vector index at scale: builds it from N embeddings by the built-in model (default
//! N = 1,000,000) of the seeded corpus's memories or, with `--texts TEXTS,QUESTIONS`, of the
//! lines of a text file (grown to N by recombining its sentences), then reports build rate, resident memory
//! per vector, search latency, recall@10 against the exact scan (of all vectors, and within a
//! namespace of an eighth of them and of the rest), dump size and load time, as a markdown table
//! against the floors.
//! With `--staged`, the vectors are only staged (searchable at once, not in the graph yet, as
//! while an import runs) and the table is of searches among staged vectors.
//! With `--lists`, a second table gives recall and search time at candidate lists of 32 to 384
//! (how the index's list length was chosen).
//! Run: `cargo run --release --example vector_scale [-- --n 1000000 --queries 1000]
//! [--texts TEXTS,QUESTIONS] [--staged] [--lists]`.

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mnemograph::config::EmbedderSpec;
use mnemograph::index::vector::{LoadState, Scope, VectorIndex};
use rayon::prelude::*;

use fixture::Corpus;

/// Vectors per upsert call (an import's batch).
const BATCH: usize = 10_000;
/// Hits asked of each search.
const K: usize = 10;
/// Queries checked against the exact scan.
const RECALL_QUERIES: usize = 200;
/// Texts embedded per parallel chunk.
const EMBED_CHUNK: usize = 4_096;

const FLOOR_BUILD_PER_S: f64 = 10_000.0;
const FLOOR_BYTES_PER_VECTOR: f64 = 1_536.0;
const FLOOR_RECALL: f64 = 0.95;
const FLOOR_P50_MS: f64 = 5.0;
const FLOOR_P99_MS: f64 = 20.0;

fn log(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

struct Args {
    n: usize,
    queries: usize,
    /// One text per line to index instead of the seeded corpus, and the questions to ask of it.
    texts: Option<(PathBuf, PathBuf)>,
    /// Stage the vectors instead of inserting them into the graph.
    staged: bool,
    /// Also measure recall and search time at a range of candidate list lengths.
    lists: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        n: 1_000_000,
        queries: 1_000,
        texts: None,
        staged: false,
        lists: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--staged" {
            args.staged = true;
            continue;
        }
        if flag == "--lists" {
            args.lists = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        if flag == "--texts" {
            let (texts, questions) = value
                .split_once(',')
                .ok_or("--texts takes TEXTS,QUESTIONS (two files, one text per line)")?;
            args.texts = Some((texts.into(), questions.into()));
            continue;
        }
        let number: usize = value
            .replace('_', "")
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a count"))?;
        match flag.as_str() {
            "--n" => args.n = number.max(1),
            "--queries" => args.queries = number.max(RECALL_QUERIES),
            _ => {
                return Err(format!(
                    "unknown flag {flag} (try --n N, --queries Q, --texts TEXTS,QUESTIONS, --staged, --lists)"
                ));
            }
        }
    }
    Ok(args)
}

/// Candidate list lengths `--lists` measures.
const LISTS: [usize; 8] = [32, 64, 96, 128, 160, 200, 256, 384];
/// Hits asked of the searches `--lists` measures: the top 10 (as the recall row) and the 100
/// a recall asks of the vector half; the top-10 column of the latter counts its first ten.
const LIST_KS: [usize; 2] = [K, 100];

/// The vectors as embedded, before the index stores them (rounded): the ground truth recall is
/// measured against, so a coarser storage cannot grade itself.
struct Truth<'a> {
    flat: &'a [f32],
    dim: usize,
}

impl Truth<'_> {
    /// `q · x` for the vector of `key`.
    fn score(&self, q: &[f32], key: u64) -> f32 {
        let x = &self.flat[key as usize * self.dim..][..self.dim];
        q.iter().zip(x).map(|(a, b)| a * b).sum()
    }

    /// The `k`-th best `q · x` of all the vectors (an exact scan in full precision).
    fn kth(&self, q: &[f32], k: usize) -> f32 {
        let mut all: Vec<f32> = self
            .flat
            .par_chunks_exact(self.dim)
            .map(|x| q.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect();
        let k = k.min(all.len()).max(1);
        all.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        all[k - 1]
    }

    /// How many of `hits` are among the true top `k` (score at least the true k-th: a memory
    /// stored twice ties with its copy, and either is a right answer, as in ann-benchmarks).
    fn found(&self, q: &[f32], hits: &[(u64, f32)], kth: f32) -> usize {
        hits.iter()
            .filter(|h| self.score(q, h.0) >= kth - 1e-6)
            .count()
    }
}

/// Recall against the exact scan and search time at each length of [`LISTS`], as a markdown
/// table. Each query is searched once per list for the time (warm: the recall pass reads every
/// vector between two searches), and the `step`-spaced ones again against the exact scan.
fn list_table(index: &VectorIndex, truth: &Truth<'_>, queries: &[Vec<f32>], step: usize) -> String {
    let mut out = String::from(
        "| hits asked | candidate list | recall@k | recall@10 of the first 10 | search p50 |\n|---:|---:|---:|---:|---:|\n",
    );
    let sample: Vec<&Vec<f32>> = queries.iter().step_by(step).take(RECALL_QUERIES).collect();
    let truths: Vec<[f32; 2]> = sample
        .iter()
        .map(|q| LIST_KS.map(|k| truth.kth(q, k)))
        .collect();
    for (ki, &k) in LIST_KS.iter().enumerate() {
        for list in LISTS.into_iter().filter(|&l| l >= k) {
            let mut times: Vec<Duration> = queries
                .iter()
                .map(|q| {
                    let t = Instant::now();
                    std::hint::black_box(index.search_with_list(q, k, list));
                    t.elapsed()
                })
                .collect();
            times.sort();
            let (mut found, mut asked, mut found10, mut asked10) = (0, 0, 0, 0);
            for (q, kth) in sample.iter().zip(&truths) {
                let hits = index.search_with_list(q, k, list);
                asked += k;
                found += truth.found(q, &hits, kth[ki]);
                asked10 += K;
                found10 += truth.found(q, &hits[..hits.len().min(K)], kth[0]);
            }
            let share = |f: usize, a: usize| f as f64 / a.max(1) as f64;
            out += &format!(
                "| {k} | {list} | {:.3} | {:.3} | {:.3} ms |\n",
                share(found, asked),
                share(found10, asked10),
                percentile_ms(&times, 0.5)
            );
            log(format_args!("  list {list} for {k} measured"));
        }
    }
    out
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3
}

/// The vectors of memories `0..n` of the seeded corpus, cached as raw floats beside the other
/// bench data (embedding a million texts takes a few seconds, reading them back less).
fn corpus_vectors(
    embedder: &dyn mnemograph::embed::Embedder,
    corpus: &Corpus,
    n: usize,
) -> Vec<f32> {
    let dim = embedder.dim();
    let path: PathBuf = fixture::bench_data_dir().join(format!(
        "vectors-v{}-{}-{n}.f32",
        fixture::CORPUS_VERSION,
        embedder.model_id().replace(['/', ':'], "_")
    ));
    if let Ok(bytes) = fs::read(&path)
        && bytes.len() == n * dim * 4
    {
        return bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
    }
    let started = Instant::now();
    let flat: Vec<f32> = (0..n)
        .collect::<Vec<usize>>()
        .par_chunks(EMBED_CHUNK)
        .flat_map_iter(|chunk| {
            let texts: Vec<String> = chunk
                .iter()
                .map(|&i| corpus.memory(i as u64).content)
                .collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            embedder
                .embed(&refs)
                .expect("the built-in embedder embeds")
                .into_iter()
                .flatten()
        })
        .collect();
    log(format_args!(
        "embedded {n} memories in {:.1?}",
        started.elapsed()
    ));
    let _ = fs::create_dir_all(fixture::bench_data_dir());
    let bytes: Vec<u8> = flat.iter().flat_map(|x| x.to_le_bytes()).collect();
    let _ = fs::write(&path, bytes);
    flat
}

/// `n` memories from the lines of `path`: the lines themselves, and when `n` asks for more,
/// memories of one to three sentences drawn from all the lines' sentences (seeded), so a file of
/// real text grows into a corpus of any size with the spread of real text.
fn memories_from_lines(path: &PathBuf, n: usize) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut memories: Vec<String> = lines.iter().take(n).map(|l| (*l).to_owned()).collect();
    let sentences: Vec<&str> = lines
        .iter()
        .flat_map(|l| l.split_inclusive(['.', '!', '?']))
        .map(str::trim)
        .filter(|s| s.split_whitespace().count() >= 3)
        .collect();
    let mut rng = fixture::Rng::new(fixture::SEED);
    while memories.len() < n && !sentences.is_empty() {
        let parts = 1 + rng.below(3) as usize;
        let memory: Vec<&str> = (0..parts)
            .map(|_| sentences[rng.below(sentences.len() as u64) as usize])
            .collect();
        memories.push(memory.join(" "));
    }
    memories
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            log(format_args!("vector_scale: {e}"));
            return ExitCode::from(2);
        }
    };
    let Ok(Some(embedder)) = mnemograph::embed::open(&EmbedderSpec::Builtin) else {
        log(format_args!(
            "vector_scale: the built-in embedder did not open"
        ));
        return ExitCode::FAILURE;
    };
    let dim = embedder.dim();
    let embed_lines = |path: &PathBuf, max: usize| -> Vec<Vec<f32>> {
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(max)
            .collect();
        lines
            .par_chunks(EMBED_CHUNK)
            .flat_map_iter(|chunk| embedder.embed(chunk).expect("texts embed"))
            .collect()
    };
    let (flat, queries) = match &args.texts {
        Some((texts, questions)) => {
            let flat: Vec<f32> = memories_from_lines(texts, args.n)
                .par_chunks(EMBED_CHUNK)
                .flat_map_iter(|chunk| {
                    let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
                    embedder
                        .embed(&refs)
                        .expect("texts embed")
                        .into_iter()
                        .flatten()
                })
                .collect();
            (flat, embed_lines(questions, args.queries))
        }
        None => {
            let corpus = Corpus::new();
            let flat = corpus_vectors(embedder.as_ref(), &corpus, args.n);
            let texts: Vec<String> = (0..args.queries as u64).map(|i| corpus.query(i)).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            (flat, embedder.embed(&refs).expect("queries embed"))
        }
    };
    let n = flat.len() / dim;

    // Build, batch by batch as an import feeds it.
    let index = VectorIndex::new(embedder.model_id(), dim).expect("an empty index");
    let rss_before = fixture::resident_bytes();
    let started = Instant::now();
    let mut next_report = Instant::now() + Duration::from_secs(10);
    for (b, chunk) in flat.chunks(BATCH * dim).enumerate() {
        let items: Vec<(u64, Vec<f32>)> = chunk
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, v)| ((b * BATCH + i) as u64, v.to_vec()))
            .collect();
        if args.staged {
            index.stage(&items).expect("stage");
        } else {
            index.upsert(&items).expect("upsert");
        }
        if Instant::now() >= next_report {
            let done = (b + 1) * BATCH;
            log(format_args!(
                "  {done} vectors in {:.0?} ({:.0}/s)",
                started.elapsed(),
                done as f64 / started.elapsed().as_secs_f64()
            ));
            next_report = Instant::now() + Duration::from_secs(10);
        }
    }
    let build = started.elapsed();
    let rss_after = fixture::resident_bytes();
    // Kept (allocated before the first reading): the ground truth of the recall figures.
    let truth = Truth { flat: &flat, dim };
    let build_rate = n as f64 / build.as_secs_f64();
    let bytes_per_vector = match (rss_before, rss_after) {
        (Some(b), Some(a)) => a.saturating_sub(b) as f64 / n as f64,
        _ => f64::NAN,
    };

    // Search latency, one query at a time.
    let mut times = Vec::with_capacity(queries.len());
    for q in &queries {
        let t = Instant::now();
        std::hint::black_box(index.search(q, K, Scope::All));
        times.push(t.elapsed());
    }
    times.sort();
    let (p50, p99) = (percentile_ms(&times, 0.5), percentile_ms(&times, 0.99));

    // Recall@10 against an exact scan of the vectors as embedded, over queries spread through
    // the set (see [`Truth::found`]).
    let mut found = 0usize;
    let mut asked = 0usize;
    let step = (queries.len() / RECALL_QUERIES).max(1);
    for q in queries.iter().step_by(step).take(RECALL_QUERIES) {
        asked += K.min(n);
        found += truth.found(q, &index.search(q, K, Scope::All), truth.kth(q, K));
    }
    let recall = found as f64 / asked.max(1) as f64;
    // Recall@10 within a namespace holding every eighth vector, and within the rest, against
    // the index's exact scan of the same scope (a namespace-scoped recall's vector half).
    let names: Vec<(u64, &str)> = (0..n as u64)
        .map(|k| (k, if k % 8 == 0 { "eighth" } else { "rest" }))
        .collect();
    index.place(&names);
    let scoped_recall = |ns: &str| -> f64 {
        let scope = [ns.to_owned()];
        let (mut found, mut asked) = (0usize, 0usize);
        for q in queries.iter().step_by(step).take(RECALL_QUERIES) {
            let truth: Vec<u64> = index
                .exact(q, K, Scope::Namespaces(&scope))
                .iter()
                .map(|h| h.0)
                .collect();
            let hits = index.search(q, K, Scope::Namespaces(&scope));
            asked += truth.len();
            found += hits.iter().filter(|h| truth.contains(&h.0)).count();
        }
        found as f64 / asked.max(1) as f64
    };
    let (recall_eighth, recall_rest) = (scoped_recall("eighth"), scoped_recall("rest"));
    let lists = args
        .lists
        .then(|| list_table(&index, &truth, &queries, step));

    if args.staged {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "Vector index with {n} staged vectors of dim {dim} ({})\n",
            fixture::machine()
        );
        let _ = writeln!(out, "| figure | measured |\n|---|---|");
        let _ = writeln!(
            out,
            "| stage, batches of {BATCH} | {build_rate:.0} vectors/s ({:.1} s) |",
            build.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "| resident memory | {bytes_per_vector:.0} bytes/vector |"
        );
        let _ = writeln!(
            out,
            "| search top {K}, p50 / p99 ({} queries) | {p50:.3} / {p99:.3} ms |",
            times.len()
        );
        let _ = writeln!(
            out,
            "| recall@{K} against the exact scan ({RECALL_QUERIES} queries) | {recall:.3} |"
        );
        if let Some(table) = &lists {
            let _ = write!(out, "\n{table}");
        }
        return ExitCode::SUCCESS;
    }

    // Dump and load.
    let dir = tempfile::tempdir().expect("temporary folder");
    let t = Instant::now();
    index.dump(dir.path()).expect("dump");
    let dump_time = t.elapsed();
    let dump_bytes: u64 = fs::read_dir(dir.path())
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    drop(index);
    let t = Instant::now();
    let (loaded, state) =
        VectorIndex::load(dir.path(), embedder.model_id(), dim).expect("the index loads");
    let load_time = t.elapsed();
    assert!(
        matches!(state, LoadState::Loaded),
        "the dump loads: {state:?}"
    );
    assert_eq!(loaded.len(), n, "every vector comes back");

    let mut out = std::io::stdout().lock();
    let ok = |pass: bool| if pass { "yes" } else { "**no**" };
    let _ = writeln!(
        out,
        "Vector index at {n} vectors of dim {dim} ({})",
        fixture::machine()
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "| figure | measured | floor | met |");
    let _ = writeln!(out, "|---|---|---|---|");
    let _ = writeln!(
        out,
        "| build, batches of {BATCH} | {build_rate:.0} vectors/s ({:.1} s) | ≥ {FLOOR_BUILD_PER_S:.0}/s | {} |",
        build.as_secs_f64(),
        ok(build_rate >= FLOOR_BUILD_PER_S)
    );
    let _ = writeln!(
        out,
        "| resident memory of the index | {bytes_per_vector:.0} bytes/vector | ≤ {FLOOR_BYTES_PER_VECTOR:.0} | {} |",
        ok(bytes_per_vector <= FLOOR_BYTES_PER_VECTOR)
    );
    let _ = writeln!(
        out,
        "| search top {K}, p50 / p99 ({} queries) | {p50:.3} / {p99:.3} ms | ≤ {FLOOR_P50_MS} / {FLOOR_P99_MS} ms | {} |",
        times.len(),
        ok(p50 <= FLOOR_P50_MS && p99 <= FLOOR_P99_MS)
    );
    let _ = writeln!(
        out,
        "| recall@{K} against the exact scan ({RECALL_QUERIES} queries) | {recall:.3} | ≥ {FLOOR_RECALL} | {} |",
        ok(recall >= FLOOR_RECALL)
    );
    let _ = writeln!(
        out,
        "| the same within a namespace of 1/8, of 7/8 of the vectors | {recall_eighth:.3}, {recall_rest:.3} | ≥ {FLOOR_RECALL} | {} |",
        ok(recall_eighth >= FLOOR_RECALL && recall_rest >= FLOOR_RECALL)
    );
    let _ = writeln!(
        out,
        "| dump: time, size | {:.2} s, {:.0} bytes/vector | | |",
        dump_time.as_secs_f64(),
        dump_bytes as f64 / n as f64
    );
    let _ = writeln!(
        out,
        "| load the dump | {:.3} s | | |",
        load_time.as_secs_f64()
    );
    if let Some(table) = &lists {
        let _ = write!(out, "\n{table}");
    }
    ExitCode::SUCCESS
}
