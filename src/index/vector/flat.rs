//! A compact copy of every live vector in one file, read in one go and searched by an exact scan:
//! what a fresh process searches by meaning during the second or so the HNSW graph takes to load
//! (hosts that start a server per call never wait for it).
//!
//! Each vector is stored as bytes (int8, scaled by its largest component): a quarter of the
//! floats' size, so 100,000 vectors of 256 dimensions are a 27 MB file, read and scanned in tens
//! of milliseconds. Scores are the dot product of the query with the decoded vector: within about
//! 1 % of the float score, which is enough to rank while the graph loads.
//!
//! The file records the change-log position it holds (database identity, sequence, stamp); the
//! engine uses it only when that position belongs to the open database's history.
//!
//! Layout (little-endian): magic `MGFLAT01`; header length (u32) and JSON header (model, dim,
//! count, position); `count` keys (u64); `count` scales (f32); `count × dim` codes (i8).

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Scope, ScopeFilter, best_of};
use crate::error::{Error, Result};
use crate::model::LogPosition;

const MAGIC: &[u8; 8] = b"MGFLAT01";

/// File name inside the vector index folder (outside the names the dump owns: `vectors.*`).
pub const FILE_NAME: &str = "compact.vectors";

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    model: String,
    dim: usize,
    count: usize,
    position: LogPosition,
}

/// Every live vector of one model at one change-log position, quantised to bytes.
#[derive(Debug)]
pub struct FlatVectors {
    model: String,
    dim: usize,
    position: LogPosition,
    keys: Vec<u64>,
    scales: Vec<f32>,
    codes: Vec<i8>,
}

impl FlatVectors {
    /// Quantises `vectors` (each of `dim` floats).
    pub fn new<'a>(
        model: &str,
        dim: usize,
        position: LogPosition,
        vectors: impl IntoIterator<Item = (u64, &'a [f32])>,
    ) -> FlatVectors {
        let mut flat = FlatVectors::empty(model, dim, position);
        for (key, v) in vectors {
            flat.push(key, v);
        }
        flat
    }

    /// No vectors yet: [`FlatVectors::push`] adds them.
    pub fn empty(model: &str, dim: usize, position: LogPosition) -> FlatVectors {
        FlatVectors {
            model: model.to_owned(),
            dim,
            position,
            keys: Vec::new(),
            scales: Vec::new(),
            codes: Vec::new(),
        }
    }

    /// Quantises and appends one vector (one of another length is skipped).
    pub fn push(&mut self, key: u64, v: &[f32]) {
        if v.len() != self.dim {
            return;
        }
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        self.keys.push(key);
        self.scales.push(scale);
        self.codes.extend(
            v.iter()
                .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8),
        );
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when it holds no vector.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The change-log position whose vectors it holds.
    pub fn position(&self) -> &LogPosition {
        &self.position
    }

    /// Writes the file atomically (a temporary file renamed over the old one).
    pub fn write(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir)?;
        let header = serde_json::to_vec(&Header {
            model: self.model.clone(),
            dim: self.dim,
            count: self.keys.len(),
            position: self.position.clone(),
        })?;
        let mut buf =
            Vec::with_capacity(12 + header.len() + self.keys.len() * 12 + self.codes.len());
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&(header.len() as u32).to_le_bytes());
        buf.extend_from_slice(&header);
        for k in &self.keys {
            buf.extend_from_slice(&k.to_le_bytes());
        }
        for s in &self.scales {
            buf.extend_from_slice(&s.to_le_bytes());
        }
        buf.extend(self.codes.iter().map(|c| *c as u8));
        Ok(crate::index::write_atomically(dir, FILE_NAME, &[&buf])?)
    }

    /// The position of the file in `dir` when it holds vectors of `model` and `dim`, read from
    /// its header alone; `None` when there is none or it is not one of theirs.
    pub fn position_in(dir: &Path, model: &str, dim: usize) -> Option<LogPosition> {
        use std::io::Read;
        let mut f = fs::File::open(dir.join(FILE_NAME)).ok()?;
        let mut head = [0u8; 12];
        f.read_exact(&mut head).ok()?;
        if &head[..8] != MAGIC {
            return None;
        }
        let hlen = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
        let mut header = vec![0u8; hlen.min(1 << 20)];
        f.read_exact(&mut header).ok()?;
        let header: Header = serde_json::from_slice(&header).ok()?;
        (header.model == model && header.dim == dim).then_some(header.position)
    }

    /// Reads the file of `model` and `dim` from `dir`: `None` when there is none, an error when
    /// it is damaged or made for another model or dimension.
    pub fn read(dir: &Path, model: &str, dim: usize) -> Result<Option<FlatVectors>> {
        let bytes = match fs::read(dir.join(FILE_NAME)) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let damaged = |what: &str| Error::Internal(format!("{FILE_NAME} is damaged: {what}"));
        if bytes.len() < 12 || &bytes[..8] != MAGIC {
            return Err(damaged("not a vector file"));
        }
        let hlen = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
        let body = bytes
            .get(12 + hlen..)
            .ok_or_else(|| damaged("short header"))?;
        let header: Header = serde_json::from_slice(&bytes[12..12 + hlen])
            .map_err(|e| damaged(&format!("header: {e}")))?;
        if header.model != model || header.dim != dim {
            return Err(Error::Internal(format!(
                "{FILE_NAME} holds vectors of {} ({} dimensions), not {model} ({dim})",
                header.model, header.dim
            )));
        }
        let n = header.count;
        let expected = n
            .checked_mul(12 + dim)
            .ok_or_else(|| damaged("count overflows"))?;
        if body.len() != expected {
            return Err(damaged("length does not match its count"));
        }
        let (keys, rest) = body.split_at(n * 8);
        let (scales, codes) = rest.split_at(n * 4);
        Ok(Some(FlatVectors {
            model: header.model,
            dim,
            position: header.position,
            keys: keys
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
            scales: scales
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            codes: codes.iter().map(|b| *b as i8).collect(),
        }))
    }

    /// The `k` best keys in `scope` by dot product with the unit vector `query`, best first
    /// (ties by key), scored like the vector index scores (1 for the same direction).
    pub fn search(&self, query: &[f32], k: usize, scope: Scope<'_>) -> Vec<(u64, f32)> {
        if query.len() != self.dim {
            return Vec::new();
        }
        let wanted = ScopeFilter::new(&scope, self.keys.len());
        let dots = self
            .keys
            .iter()
            .zip(&self.scales)
            .zip(self.codes.chunks_exact(self.dim))
            .filter(|((key, _), _)| wanted.accepts(**key))
            .map(|((key, scale), code)| (*key, dot_i8(query, code) * scale));
        best_of(k, dots)
    }
}

/// Dot product of floats with bytes, in eight independent sums so the loop vectorises.
fn dot_i8(q: &[f32], code: &[i8]) -> f32 {
    let (qa, ca) = (q.chunks_exact(8), code.chunks_exact(8));
    let tail: f32 = qa
        .remainder()
        .iter()
        .zip(ca.remainder())
        .map(|(q, c)| q * f32::from(*c))
        .sum();
    let mut acc = [0.0f32; 8];
    for (q, c) in qa.zip(ca) {
        for ((s, q), c) in acc.iter_mut().zip(q).zip(c) {
            *s += q * f32::from(*c);
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u64, dim: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let v: Vec<f32> = (0..dim)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2001) as f32 / 1000.0 - 1.0
            })
            .collect();
        let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.into_iter().map(|a| a / n).collect()
    }

    fn position() -> LogPosition {
        LogPosition {
            database: "db_test".into(),
            seq: 42,
            stamp: 7,
        }
    }

    #[test]
    fn written_and_read_back_it_ranks_like_exact_float_search() {
        let dim = 64;
        let vectors: Vec<(u64, Vec<f32>)> = (1..=500).map(|k| (k, unit(k, dim))).collect();
        let flat = FlatVectors::new(
            "m",
            dim,
            position(),
            vectors.iter().map(|(k, v)| (*k, v.as_slice())),
        );
        let dir = tempfile::tempdir().unwrap();
        flat.write(dir.path()).unwrap();
        let back = FlatVectors::read(dir.path(), "m", dim).unwrap().unwrap();
        assert_eq!(back.len(), 500);
        assert_eq!(back.position(), &position());
        for probe in [3u64, 250, 499] {
            let q = unit(probe, dim);
            let hits = back.search(&q, 5, Scope::All);
            assert_eq!(hits[0].0, probe, "a vector is its own nearest neighbour");
            assert!((hits[0].1 - 1.0).abs() < 0.02, "{hits:?}");
            let mut exact: Vec<(u64, f32)> = vectors
                .iter()
                .map(|(k, v)| (*k, v.iter().zip(&q).map(|(a, b)| a * b).sum()))
                .collect();
            exact.sort_by(|a, b| b.1.total_cmp(&a.1));
            assert_eq!(hits[0].0, exact[0].0);
            for (h, e) in hits.iter().zip(&exact) {
                assert!((h.1 - e.1).abs() < 0.02, "{h:?} vs {e:?}");
            }
        }
        let only = [10u64, 20];
        let hits = back.search(&unit(10, dim), 5, Scope::Keys(&only));
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [10, 20]);
    }

    #[test]
    fn a_missing_damaged_or_foreign_file_is_said_so() {
        let dir = tempfile::tempdir().unwrap();
        assert!(FlatVectors::read(dir.path(), "m", 8).unwrap().is_none());
        let flat = FlatVectors::new("m", 8, position(), [(1u64, &[0.5f32; 8][..])]);
        flat.write(dir.path()).unwrap();
        let err = FlatVectors::read(dir.path(), "other", 8).unwrap_err();
        assert!(err.to_string().contains("not other"), "{err}");
        let path = dir.path().join(FILE_NAME);
        let mut bytes = fs::read(&path).unwrap();
        bytes.pop();
        fs::write(&path, &bytes).unwrap();
        let err = FlatVectors::read(dir.path(), "m", 8).unwrap_err();
        assert!(err.to_string().contains("damaged"), "{err}");
    }
}
