//! Sanity check of the distilled static model against the MiniLM transformer it came from: embeds
//! sentence pairs with both and prints their cosines, so a broken distillation is obvious (the
//! static model should rank related pairs above unrelated ones, as MiniLM does).
//! Run: `bash data/model/fetch-minilm.sh target/models/all-MiniLM-L6-v2 &&
//! cargo run --release --features minilm --example minilm_sanity -- [MINILM_DIR] [STATIC_DIR]`.

use std::io::Write;
use std::path::{Path, PathBuf};

use mnemograph::embed::minilm::MiniLmEmbedder;
use mnemograph::embed::wordpiece::WordPiece;
use mnemograph::embed::{Embedder, normalize};

/// (a, b, related?): each related pair is followed by an unrelated one with the same first text.
const PAIRS: &[(&str, &str, bool)] = &[
    (
        "A man is eating food.",
        "A man is eating a piece of bread.",
        true,
    ),
    ("A man is eating food.", "A man is riding a horse.", false),
    (
        "The cat sits on the mat.",
        "A kitten is lying on a rug.",
        true,
    ),
    (
        "The cat sits on the mat.",
        "Stock markets fell sharply today.",
        false,
    ),
    (
        "How do I reset my password?",
        "I forgot my login credentials.",
        true,
    ),
    (
        "How do I reset my password?",
        "The weather is sunny in Paris.",
        false,
    ),
    (
        "The meeting was moved to Thursday afternoon.",
        "We rescheduled the call for later this week.",
        true,
    ),
    (
        "The meeting was moved to Thursday afternoon.",
        "Photosynthesis turns light into chemical energy.",
        false,
    ),
    (
        "Alice manages the database migration project.",
        "Alice leads the work on moving the database.",
        true,
    ),
    (
        "Alice manages the database migration project.",
        "Bob enjoys hiking in the mountains.",
        false,
    ),
];

/// A model2vec table: `embeddings` (F16, `[vocab, dim]`) and its tokenizer.
struct StaticTable {
    rows: Vec<f32>,
    dim: usize,
    tokenizer: WordPiece,
}

impl StaticTable {
    fn open(dir: &Path) -> Result<StaticTable, Box<dyn std::error::Error>> {
        let bytes = std::fs::read(dir.join("model.safetensors"))?;
        let len = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len])?;
        let t = &header["embeddings"];
        if t["dtype"] != "F16" {
            return Err(format!("embeddings are {}, not F16", t["dtype"]).into());
        }
        let dim = t["shape"][1].as_u64().ok_or("no shape")? as usize;
        let start = 8 + len + t["data_offsets"][0].as_u64().ok_or("no offsets")? as usize;
        let end = 8 + len + t["data_offsets"][1].as_u64().ok_or("no offsets")? as usize;
        let rows = bytes[start..end]
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        let tokenizer =
            WordPiece::from_tokenizer_json(&std::fs::read(dir.join("tokenizer.json"))?)?;
        Ok(StaticTable {
            rows,
            dim,
            tokenizer,
        })
    }

    /// Mean of the rows of the text's token ids ([UNK] dropped), normalised.
    fn embed(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dim];
        let unk = self.tokenizer.unk_id();
        let ids: Vec<u32> = self
            .tokenizer
            .encode(text)
            .into_iter()
            .filter(|&i| i != unk)
            .collect();
        for &id in &ids {
            let row = &self.rows[id as usize * self.dim..(id as usize + 1) * self.dim];
            for (a, b) in v.iter_mut().zip(row) {
                *a += b;
            }
        }
        if !ids.is_empty() {
            v.iter_mut().for_each(|a| *a /= ids.len() as f32);
        }
        normalize(&mut v);
        v
    }
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn pearson(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len() as f32;
    let (ma, mb) = (a.iter().sum::<f32>() / n, b.iter().sum::<f32>() / n);
    let cov: f32 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f32 = a.iter().map(|x| (x - ma) * (x - ma)).sum();
    let vb: f32 = b.iter().map(|y| (y - mb) * (y - mb)).sum();
    cov / (va * vb).sqrt()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let minilm_dir = PathBuf::from(
        args.first()
            .map_or("target/models/all-MiniLM-L6-v2", String::as_str),
    );
    let static_dir = PathBuf::from(
        args.get(1)
            .map_or("data/model/minilm-static-256-v2", String::as_str),
    );
    let minilm = MiniLmEmbedder::open(&minilm_dir)?;
    let table = StaticTable::open(&static_dir)?;

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:>7}  {:>7}  pair (MiniLM {}d, static {}d)",
        "minilm",
        "static",
        minilm.dim(),
        table.dim
    )?;
    let (mut full, mut stat) = (Vec::new(), Vec::new());
    for &(a, b, _) in PAIRS {
        let v = minilm.embed(&[a, b])?;
        let c_full = cos(&v[0], &v[1]);
        let c_static = cos(&table.embed(a), &table.embed(b));
        writeln!(out, "{c_full:>7.3}  {c_static:>7.3}  {a} | {b}")?;
        full.push(c_full);
        stat.push(c_static);
    }
    let ordered = |c: &[f32]| {
        c.chunks_exact(2)
            .zip(PAIRS.chunks_exact(2))
            .filter(|(c, p)| p[0].2 && !p[1].2 && c[0] > c[1])
            .count()
    };
    let groups = PAIRS.len() / 2;
    writeln!(
        out,
        "related above unrelated: MiniLM {}/{groups}, static {}/{groups}",
        ordered(&full),
        ordered(&stat)
    )?;
    writeln!(
        out,
        "Pearson correlation of the two models' cosines: {:.3}",
        pearson(&full, &stat)
    )?;
    let head = minilm.embed(&[PAIRS[0].0])?;
    writeln!(
        out,
        "MiniLM vector of {:?}, first 5 of {}: {:?}",
        PAIRS[0].0,
        head[0].len(),
        &head[0][..5]
    )?;
    Ok(())
}
