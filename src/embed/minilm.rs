//! The all-MiniLM-L6-v2 sentence transformer on the CPU (feature `minilm`): candle's BERT encoder,
//! the project's WordPiece tokenizer, mean pooling over the attention mask and L2 normalisation,
//! as sentence-transformers runs it. Also the encoder behind `mnemograph model distill`.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};

use crate::embed::wordpiece::WordPiece;
use crate::embed::{Embedder, check_output, normalize};
use crate::error::{Error, Result};

/// The model id stored with every vector this embedder makes.
pub const MODEL_ID: &str = "all-MiniLM-L6-v2";
/// Longest input in tokens, `[CLS]` and `[SEP]` included (sentence-transformers' `max_seq_length`).
pub const MAX_TOKENS: usize = 256;
/// Texts encoded together (padded to the longest of them).
const BATCH: usize = 32;
/// Provider name in errors.
const PROVIDER: &str = "minilm";

/// all-MiniLM-L6-v2 loaded from a folder made by `data/model/fetch-minilm.sh`.
pub struct MiniLmEmbedder {
    model: BertModel,
    tokenizer: WordPiece,
    cls: u32,
    sep: u32,
    pad: u32,
    dim: usize,
    vocab_size: usize,
}

impl std::fmt::Debug for MiniLmEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLmEmbedder")
            .field("dim", &self.dim)
            .field("vocab_size", &self.vocab_size)
            .finish_non_exhaustive()
    }
}

/// An [`Error::Embed`] of this provider.
fn fail(reason: impl Into<String>) -> Error {
    Error::Embed {
        provider: PROVIDER.to_owned(),
        reason: reason.into(),
    }
}

/// Maps a candle error to an [`Error::Embed`] that says what was being done.
fn candle(what: &'static str) -> impl Fn(candle_core::Error) -> Error {
    move |e| fail(format!("{what}: {e}"))
}

/// `dir/name`, or an error naming the missing file and the script that fetches it.
fn required(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(fail(format!(
            "model file {} is missing; run `data/model/fetch-minilm.sh {}` to fetch the model",
            path.display(),
            dir.display()
        )))
    }
}

impl MiniLmEmbedder {
    /// Loads `config.json`, `model.safetensors` and `tokenizer.json` from `dir`.
    pub fn open(dir: &Path) -> Result<MiniLmEmbedder> {
        let config_path = required(dir, "config.json")?;
        let weights_path = required(dir, "model.safetensors")?;
        let tokenizer_path = required(dir, "tokenizer.json")?;

        let config: Config =
            serde_json::from_slice(&std::fs::read(&config_path)?).map_err(|e| {
                fail(format!(
                    "{} is not a BERT config: {e}",
                    config_path.display()
                ))
            })?;
        let tokenizer = WordPiece::from_tokenizer_json(&std::fs::read(&tokenizer_path)?)?;
        let special = |name: &str, id: Option<u32>| {
            id.ok_or_else(|| fail(format!("the vocabulary has no {name} token")))
        };
        let cls = special("[CLS]", tokenizer.cls_id())?;
        let sep = special("[SEP]", tokenizer.sep_id())?;
        let pad = special("[PAD]", tokenizer.pad_id())?;
        if tokenizer.vocab_size() > config.vocab_size {
            return Err(fail(format!(
                "the tokenizer has {} ids but the model only {}",
                tokenizer.vocab_size(),
                config.vocab_size
            )));
        }
        if config.max_position_embeddings < MAX_TOKENS {
            return Err(fail(format!(
                "the model takes at most {} positions, fewer than {MAX_TOKENS}",
                config.max_position_embeddings
            )));
        }

        let weights = std::fs::read(&weights_path)?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(candle("cannot read model.safetensors"))?;
        let model = BertModel::load(vb, &config).map_err(candle("cannot load the BERT weights"))?;
        Ok(MiniLmEmbedder {
            model,
            dim: config.hidden_size,
            vocab_size: tokenizer.vocab_size(),
            tokenizer,
            cls,
            sep,
            pad,
        })
    }

    /// The vocabulary the model was loaded with.
    pub fn tokenizer(&self) -> &WordPiece {
        &self.tokenizer
    }

    /// Number of token ids (the tokenizer's).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn cls_id(&self) -> u32 {
        self.cls
    }

    pub fn sep_id(&self) -> u32 {
        self.sep
    }

    pub fn pad_id(&self) -> u32 {
        self.pad
    }

    /// `[CLS] ids… [SEP]` of one text, cut to [`MAX_TOKENS`].
    pub fn input_ids(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(16);
        ids.push(self.cls);
        self.tokenizer.encode_into(text, &mut ids);
        ids.truncate(MAX_TOKENS - 1);
        ids.push(self.sep);
        ids
    }

    /// Runs the encoder on `rows` equally long sequences (`ids` and `mask` are `rows × len`,
    /// row-major; token type 0 everywhere) and mean-pools each row's outputs over its mask.
    /// Returns `rows × dim` values, not normalised.
    pub fn mean_pooled(&self, ids: &[u32], mask: &[u32], rows: usize) -> Result<Vec<f32>> {
        if rows == 0 {
            return Ok(Vec::new());
        }
        if ids.len() != mask.len() || !ids.len().is_multiple_of(rows) {
            return Err(fail("ids and mask do not form rows of one length"));
        }
        let len = ids.len() / rows;
        let dev = &Device::Cpu;
        let run = || -> candle_core::Result<Vec<f32>> {
            let input = Tensor::from_slice(ids, (rows, len), dev)?;
            let types = input.zeros_like()?;
            let mask = Tensor::from_slice(mask, (rows, len), dev)?;
            let hidden = self.model.forward(&input, &types, Some(&mask))?; // rows × len × dim
            let maskf = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // rows × len × 1
            let summed = hidden.broadcast_mul(&maskf)?.sum(1)?; // rows × dim
            let counts = maskf.sum(1)?.clamp(1e-9f32, f32::MAX)?; // rows × 1
            summed
                .broadcast_div(&counts)?
                .flatten_all()?
                .to_vec1::<f32>()
        };
        run().map_err(candle("the encoder failed"))
    }
}

impl Embedder for MiniLmEmbedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let inputs: Vec<Vec<u32>> = texts.iter().map(|t| self.input_ids(t)).collect();
        // Similar lengths together, so batches carry little padding.
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| inputs[i].len());
        let mut out = vec![Vec::new(); inputs.len()];
        for chunk in order.chunks(BATCH) {
            let len = chunk.iter().map(|&i| inputs[i].len()).max().unwrap_or(0);
            let mut ids = Vec::with_capacity(chunk.len() * len);
            let mut mask = Vec::with_capacity(chunk.len() * len);
            for &i in chunk {
                let row = &inputs[i];
                ids.extend_from_slice(row);
                ids.resize(ids.len() + len - row.len(), self.pad);
                mask.resize(mask.len() + row.len(), 1);
                mask.resize(mask.len() + len - row.len(), 0);
            }
            let pooled = self.mean_pooled(&ids, &mask, chunk.len())?;
            for (&i, v) in chunk.iter().zip(pooled.chunks_exact(self.dim)) {
                let mut v = v.to_vec();
                normalize(&mut v);
                out[i] = v;
            }
        }
        check_output(PROVIDER, self.dim, texts.len(), &out)?;
        Ok(out)
    }
}

/// Tests that need the real weights; they run when `MNEMOGRAPH_MINILM_DIR` names a folder made by
/// `data/model/fetch-minilm.sh`, and pass without checking anything otherwise.
#[cfg(test)]
mod tests {
    use super::*;

    #[allow(
        clippy::disallowed_methods,
        reason = "tests pick up the optional weights"
    )]
    fn model(test: &str) -> Option<MiniLmEmbedder> {
        let Some(dir) = std::env::var_os("MNEMOGRAPH_MINILM_DIR") else {
            // Straight to stderr, which the test harness does not capture: the skip shows.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: embed::minilm::{test}: MNEMOGRAPH_MINILM_DIR is not set (fetch the \
                 weights with data/model/fetch-minilm.sh and point it at them)"
            );
            return None;
        };
        Some(MiniLmEmbedder::open(Path::new(&dir)).unwrap())
    }

    fn cos(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn missing_files_name_the_fetch_script() {
        let dir = tempfile::tempdir().unwrap();
        let e = MiniLmEmbedder::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("config.json"), "{e}");
        assert!(e.contains("data/model/fetch-minilm.sh"), "{e}");
    }

    #[test]
    fn similar_sentences_are_close() {
        let Some(m) = model("similar_sentences_are_close") else {
            return;
        };
        let v = m
            .embed(&[
                "A man is eating food.",
                "A man is eating a piece of bread.",
                "A man is riding a horse.",
            ])
            .unwrap();
        let (near, far) = (cos(&v[0], &v[1]), cos(&v[0], &v[2]));
        assert!(near > 0.7 && far < near - 0.2, "near {near}, far {far}");
    }

    #[test]
    fn batches_and_padding_do_not_change_vectors() {
        let Some(m) = model("batches_and_padding_do_not_change_vectors") else {
            return;
        };
        let texts = ["short", "a much longer sentence with many more words in it"];
        let together = m.embed(&texts).unwrap();
        for (t, v) in texts.iter().zip(&together) {
            let alone = m.embed(&[t]).unwrap();
            assert!(cos(&alone[0], v) > 0.9999);
        }
    }
}
