//! The built-in static embedding model (model2vec format): one f16 row per WordPiece token, a
//! text's vector is the normalised mean of its tokens' rows. Parsed on first use, so opening a
//! database never pays for it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::embed::wordpiece::WordPiece;
use crate::embed::{Embedder, normalize};
use crate::error::{Error, Result};

/// Files of a model folder.
const EMBEDDINGS: &str = "model.safetensors";
const TOKENIZER: &str = "tokenizer.json";
const CONFIG: &str = "config.json";
/// Tokens of one text that count; the rest of a very long text is ignored (as model2vec does
/// with its `seq_length`), which keeps a 64 KiB memory at tens of microseconds.
const MAX_TOKENS: usize = 4_096;

/// Where the model's bytes come from.
enum Source {
    Builtin,
    Dir(PathBuf),
}

/// A static embedding model: a token table and the tokenizer that indexes it.
pub struct StaticModel {
    id: String,
    dim: usize,
    source: Source,
    loaded: OnceLock<std::result::Result<Table, String>>,
}

struct Table {
    wp: WordPiece,
    rows: Vec<f32>,
    dim: usize,
    n_rows: usize,
}

#[derive(serde::Deserialize)]
struct ModelConfig {
    hidden_dim: usize,
    #[serde(default)]
    base_model: Option<String>,
}

/// The folder of the model compiled into the binary, from the repository's root (the paths of
/// `builtin` name it too; a test checks they agree).
#[cfg(test)]
pub(crate) const BUILTIN_DIR: &str = "data/model/minilm-static-256-v2";

/// The model compiled into the binary ([`BUILTIN_DIR`]). Its id names the table: a new table
/// gets a new id, so vectors stored by an older one are embedded anew, not mixed with its own.
mod builtin {
    pub(super) const ID: &str = "minilm-static-256-v2";
    pub(super) const DIM: usize = 256;
    pub(super) const EMBEDDINGS: &[u8] =
        include_bytes!("../../data/model/minilm-static-256-v2/model.safetensors");
    pub(super) const TOKENIZER: &[u8] =
        include_bytes!("../../data/model/minilm-static-256-v2/tokenizer.json");
}

impl StaticModel {
    /// The model built into the binary. Nothing is parsed until the first text is embedded.
    pub fn builtin() -> StaticModel {
        StaticModel {
            id: builtin::ID.to_owned(),
            dim: builtin::DIM,
            source: Source::Builtin,
            loaded: OnceLock::new(),
        }
    }

    /// A model folder in model2vec's layout (`model.safetensors` with an `embeddings` tensor,
    /// `tokenizer.json`, `config.json`). Reads the small config now, the table on first use.
    pub fn from_dir(dir: &Path) -> Result<StaticModel> {
        let bytes = read_model_file(dir, CONFIG)?;
        let cfg: ModelConfig = serde_json::from_slice(&bytes).map_err(|e| Error::Embed {
            provider: "static".into(),
            reason: format!(
                "{} is not a model2vec config: {e}",
                dir.join(CONFIG).display()
            ),
        })?;
        let name = dir
            .file_name()
            .map_or_else(|| "static".to_owned(), |n| n.to_string_lossy().into_owned());
        let _ = cfg.base_model;
        Ok(StaticModel {
            id: format!("static:{name}-{}", cfg.hidden_dim),
            dim: cfg.hidden_dim,
            source: Source::Dir(dir.to_owned()),
            loaded: OnceLock::new(),
        })
    }

    /// Parses the table now (normally done by the first `embed`); errors name the bad file.
    pub fn load(&self) -> Result<()> {
        self.table().map(|_| ())
    }

    fn table(&self) -> Result<&Table> {
        let loaded = self.loaded.get_or_init(|| {
            let t = std::time::Instant::now();
            let table = match &self.source {
                Source::Builtin => Table::parse(builtin::EMBEDDINGS, builtin::TOKENIZER, "built-in model"),
                Source::Dir(dir) => read_model_file(dir, EMBEDDINGS)
                    .and_then(|e| Ok((e, read_model_file(dir, TOKENIZER)?)))
                    .and_then(|(e, t)| Table::parse(&e, &t, &dir.display().to_string())),
            };
            tracing::debug!(ms = t.elapsed().as_secs_f64() * 1e3, model = %self.id, "embedding model loaded");
            table.map_err(|e| e.to_string())
        });
        match loaded {
            Ok(t) if t.dim == self.dim => Ok(t),
            Ok(t) => Err(Error::Embed {
                provider: "static".into(),
                reason: format!("table has {} dimensions, config says {}", t.dim, self.dim),
            }),
            Err(reason) => Err(Error::Embed {
                provider: "static".into(),
                reason: reason.clone(),
            }),
        }
    }
}

fn read_model_file(dir: &Path, name: &str) -> Result<Vec<u8>> {
    let path = dir.join(name);
    std::fs::read(&path).map_err(|e| Error::Embed {
        provider: "static".into(),
        reason: format!(
            "cannot read model file {}: {e}; restore the model folder (a copy of data/model/minilm-static-256-v2, or rebuild it as its README says)",
            path.display()
        ),
    })
}

impl Table {
    fn parse(safetensors: &[u8], tokenizer: &[u8], origin: &str) -> Result<Table> {
        let corrupt = |reason: String| Error::Embed {
            provider: "static".into(),
            reason: format!("{origin}: {reason}"),
        };
        let wp = WordPiece::from_tokenizer_json(tokenizer).map_err(|e| corrupt(e.to_string()))?;
        let (shape, data) = f16_tensor(safetensors, "embeddings").map_err(corrupt)?;
        let [n_rows, dim] = shape;
        if n_rows < wp.vocab_size() {
            return Err(corrupt(format!(
                "{n_rows} embedding rows for a vocabulary of {}",
                wp.vocab_size()
            )));
        }
        let rows = data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        Ok(Table {
            wp,
            rows,
            dim,
            n_rows,
        })
    }

    fn embed_into(&self, text: &str, ids: &mut Vec<u32>, out: &mut [f32]) {
        ids.clear();
        self.wp.encode_into(text, ids);
        out.fill(0.0);
        let unk = self.wp.unk_id();
        let mut n = 0usize;
        for &id in ids.iter().filter(|&&id| id != unk).take(MAX_TOKENS) {
            let id = id as usize;
            if id >= self.n_rows {
                continue;
            }
            let row = &self.rows[id * self.dim..(id + 1) * self.dim];
            for (o, r) in out.iter_mut().zip(row) {
                *o += r;
            }
            n += 1;
        }
        if n > 0 {
            normalize(out);
        }
    }
}

/// The shape and raw bytes of a 2-D F16 tensor `name` in a safetensors file.
fn f16_tensor<'a>(
    file: &'a [u8],
    name: &str,
) -> std::result::Result<([usize; 2], &'a [u8]), String> {
    #[derive(serde::Deserialize)]
    struct Entry {
        dtype: String,
        shape: Vec<usize>,
        data_offsets: [usize; 2],
    }
    let len_bytes: [u8; 8] = file
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or("not a safetensors file (too short)")?;
    let header_len = u64::from_le_bytes(len_bytes) as usize;
    let header = file
        .get(8..8usize.saturating_add(header_len))
        .ok_or("safetensors header runs past the end of the file")?;
    let mut entries: std::collections::HashMap<String, serde_json::Value> =
        serde_json::from_slice(header)
            .map_err(|e| format!("unreadable safetensors header: {e}"))?;
    let entry = entries
        .remove(name)
        .ok_or_else(|| format!("no tensor named {name:?}"))?;
    let entry: Entry =
        serde_json::from_value(entry).map_err(|e| format!("bad entry for {name:?}: {e}"))?;
    if entry.dtype != "F16" {
        return Err(format!("tensor {name:?} is {}, expected F16", entry.dtype));
    }
    let &[rows, dim] = entry.shape.as_slice() else {
        return Err(format!(
            "tensor {name:?} has shape {:?}, expected 2-D",
            entry.shape
        ));
    };
    let start = 8 + header_len + entry.data_offsets[0];
    let end = 8 + header_len + entry.data_offsets[1];
    let data = file
        .get(start..end)
        .ok_or("tensor data runs past the end of the file")?;
    if data.len() != rows * dim * 2 || dim == 0 {
        return Err(format!(
            "tensor {name:?} has {} bytes for shape [{rows}, {dim}]",
            data.len()
        ));
    }
    Ok(([rows, dim], data))
}

impl Embedder for StaticModel {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn warm(&self) {
        // A bad table is reported by the first `embed`, as without the warm-up.
        let _ = self.table();
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let table = self.table()?;
        let mut ids = Vec::new();
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0; table.dim];
                table.embed_into(t, &mut ids, &mut v);
                v
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model folder with a 6-token vocabulary and 4-d rows.
    fn tiny_model(dir: &Path) {
        let vocab = ["[PAD]", "[UNK]", "red", "apple", "blue", "sky"];
        let vocab_json: serde_json::Map<_, _> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), serde_json::json!(i)))
            .collect();
        let tok = serde_json::json!({"model": {"type": "WordPiece", "vocab": vocab_json}});
        std::fs::write(dir.join(TOKENIZER), tok.to_string()).unwrap();
        let rows: [[f32; 4]; 6] = [
            [0.0; 4],
            [9.0, 9.0, 9.0, 9.0],
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let data: Vec<u8> = rows
            .iter()
            .flatten()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect();
        let mut header = serde_json::json!({"embeddings": {"dtype": "F16", "shape": [6, 4], "data_offsets": [0, data.len()]}}).to_string();
        while !header.len().is_multiple_of(8) {
            header.push(' ');
        }
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(&data);
        std::fs::write(dir.join(EMBEDDINGS), file).unwrap();
        std::fs::write(dir.join(CONFIG), r#"{"hidden_dim": 4, "normalize": true}"#).unwrap();
    }

    #[test]
    fn mean_of_known_tokens_normalised_unknown_dropped() {
        let dir = tempfile::tempdir().unwrap();
        tiny_model(dir.path());
        let m = StaticModel::from_dir(dir.path()).unwrap();
        assert_eq!(m.dim(), 4);
        let v = m.embed(&["Red apple zzz", "", "sky"]).unwrap();
        let h = std::f32::consts::FRAC_1_SQRT_2;
        assert!((v[0][0] - h).abs() < 1e-3 && (v[0][1] - h).abs() < 1e-3);
        assert_eq!(v[1], vec![0.0; 4]);
        assert_eq!(v[2], vec![0.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn warming_parses_the_table_and_a_bad_one_still_fails_at_embed() {
        let m = StaticModel::builtin();
        assert!(
            m.loaded.get().is_none(),
            "parsed on first use, not when made"
        );
        m.warm();
        assert!(m.loaded.get().is_some_and(Result::is_ok));
        let dir = tempfile::tempdir().unwrap();
        tiny_model(dir.path());
        std::fs::write(dir.path().join(EMBEDDINGS), b"not a table").unwrap();
        let bad = StaticModel::from_dir(dir.path()).unwrap();
        bad.warm();
        let err = bad.embed(&["red"]).unwrap_err().to_string();
        assert!(err.contains("safetensors"), "{err}");
    }

    #[test]
    fn the_builtin_bytes_are_the_files_of_the_builtin_folder() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(BUILTIN_DIR);
        assert!(std::fs::read(dir.join(EMBEDDINGS)).unwrap() == builtin::EMBEDDINGS);
        assert!(std::fs::read(dir.join(TOKENIZER)).unwrap() == builtin::TOKENIZER);
    }

    #[test]
    fn missing_or_corrupt_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = StaticModel::from_dir(dir.path()).err().unwrap().to_string();
        assert!(
            err.contains("config.json") && err.contains("restore"),
            "{err}"
        );
        tiny_model(dir.path());
        std::fs::remove_file(dir.path().join(EMBEDDINGS)).unwrap();
        let m = StaticModel::from_dir(dir.path()).unwrap();
        let err = m.embed(&["red"]).unwrap_err().to_string();
        assert!(err.contains("model.safetensors"), "{err}");
        std::fs::write(dir.path().join(EMBEDDINGS), b"\x10\0\0\0\0\0\0\0{garbage").unwrap();
        let m = StaticModel::from_dir(dir.path()).unwrap();
        assert!(m.embed(&["red"]).is_err());
    }
}
