//! Distils a static embedding table from the MiniLM transformer, as model2vec does (feature
//! `minilm`): every vocabulary id is run as `[CLS] id [SEP]` and mean-pooled, the rows are reduced
//! by PCA, weighted by a Zipf-estimated SIF weight and stored as f16 in model2vec's folder layout
//! (`model.safetensors` with one `embeddings` tensor, `tokenizer.json`, `config.json`).
//! Deterministic: the same model folder gives byte-identical files on one machine.

use std::path::Path;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::embed::minilm::MiniLmEmbedder;
use crate::error::{Error, Result};

/// What `distill` is asked to do.
#[derive(Debug, Clone)]
pub struct DistillOptions {
    /// Output dimensions (PCA components); at most the transformer's hidden size.
    pub dims: usize,
    /// Sequences per encoder call.
    pub batch: usize,
    /// SIF coefficient `a` of the weight `a / (a + p)`.
    pub sif_coefficient: f64,
}

impl Default for DistillOptions {
    fn default() -> Self {
        DistillOptions {
            dims: 256,
            batch: 512,
            sif_coefficient: 1e-4,
        }
    }
}

/// What `distill` did.
#[derive(Debug, Clone)]
pub struct DistillReport {
    pub vocab_size: usize,
    pub dims: usize,
    /// Share of the rows' variance the kept components explain.
    pub explained_variance: f64,
    /// Running every token through the transformer.
    pub encode_time: Duration,
    /// Covariance, eigen-decomposition, projection, weighting.
    pub reduce_time: Duration,
    /// Everything, file writing included.
    pub total_time: Duration,
    /// Bytes of the written `model.safetensors`.
    pub model_bytes: u64,
}

fn fail(reason: impl Into<String>) -> Error {
    Error::Embed {
        provider: "distill".to_owned(),
        reason: reason.into(),
    }
}

/// Reads the transformer from `from` (a folder made by `data/model/fetch-minilm.sh`) and writes
/// the static model to `out`. `progress(done, total)` is called after every encoder batch.
pub fn distill(
    from: &Path,
    out: &Path,
    opts: &DistillOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<DistillReport> {
    let started = Instant::now();
    let model = MiniLmEmbedder::open(from)?;
    let hidden = crate::embed::Embedder::dim(&model);
    if opts.dims == 0 || opts.dims > hidden {
        return Err(Error::invalid(
            "dims",
            format!("{} is not between 1 and {hidden}", opts.dims),
            "pick at most the transformer's hidden size",
        ));
    }
    let n = model.vocab_size();
    let rows = encode_vocabulary(&model, opts.batch.max(1), progress)?;
    let encode_time = started.elapsed();

    let reducing = Instant::now();
    let pca = Pca::fit(&rows, n, hidden, opts.dims);
    let mut table = pca.project(&rows, n, hidden);
    zipf_sif(&mut table, opts.dims, opts.sif_coefficient);
    let reduce_time = reducing.elapsed();

    std::fs::create_dir_all(out)?;
    let model_bytes = write_safetensors_f16(&out.join("model.safetensors"), &table, n, opts.dims)?;
    std::fs::copy(from.join("tokenizer.json"), out.join("tokenizer.json"))?;
    std::fs::write(
        out.join("config.json"),
        config_json(opts.dims, opts.sif_coefficient),
    )?;
    Ok(DistillReport {
        vocab_size: n,
        dims: opts.dims,
        explained_variance: pca.explained,
        encode_time,
        reduce_time,
        total_time: started.elapsed(),
        model_bytes,
    })
}

/// One mean-pooled `[CLS] id [SEP]` output per vocabulary id (full attention, token type 0, the
/// mean over all three positions): `vocab × hidden`, f64.
fn encode_vocabulary(
    model: &MiniLmEmbedder,
    batch: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<f64>> {
    let n = model.vocab_size();
    let hidden = crate::embed::Embedder::dim(model);
    let (cls, sep) = (model.cls_id(), model.sep_id());
    let mut rows = Vec::with_capacity(n * hidden);
    let all: Vec<u32> = (0..n as u32).collect();
    for chunk in all.chunks(batch) {
        let ids: Vec<u32> = chunk.iter().flat_map(|&t| [cls, t, sep]).collect();
        let mask = vec![1u32; ids.len()];
        let pooled = model.mean_pooled(&ids, &mask, chunk.len())?;
        if let Some(bad) = pooled.iter().position(|x| !x.is_finite()) {
            return Err(fail(format!(
                "the encoder gave a non-finite value for token {}",
                chunk[bad / hidden]
            )));
        }
        rows.extend(pooled.iter().map(|&x| f64::from(x)));
        progress(rows.len() / hidden, n);
    }
    Ok(rows)
}

/// Principal components of a row-major `n × d` matrix.
struct Pca {
    mean: Vec<f64>,
    /// `k × d`, row `c` is component `c` (unit length; its sign is fixed by [`Pca::project`]).
    components: Vec<f64>,
    k: usize,
    /// Share of the total variance explained by the `k` components.
    explained: f64,
}

impl Pca {
    fn fit(x: &[f64], n: usize, d: usize, k: usize) -> Pca {
        let mut mean = vec![0.0f64; d];
        for row in x.chunks_exact(d) {
            for (m, v) in mean.iter_mut().zip(row) {
                *m += v;
            }
        }
        for m in &mut mean {
            *m /= n as f64;
        }
        // Centred columns, so each covariance entry is one contiguous dot product.
        let mut cols = vec![0.0f64; d * n];
        for (r, row) in x.chunks_exact(d).enumerate() {
            for (c, v) in row.iter().enumerate() {
                cols[c * n + r] = v - mean[c];
            }
        }
        let denom = (n.max(2) - 1) as f64;
        let upper: Vec<Vec<f64>> = (0..d)
            .into_par_iter()
            .map(|i| {
                let a = &cols[i * n..(i + 1) * n];
                (i..d)
                    .map(|j| dot(a, &cols[j * n..(j + 1) * n]) / denom)
                    .collect()
            })
            .collect();
        let mut cov = vec![0.0f64; d * d];
        for (i, row) in upper.iter().enumerate() {
            for (off, &v) in row.iter().enumerate() {
                cov[i * d + i + off] = v;
                cov[(i + off) * d + i] = v;
            }
        }
        let (values, vectors) = symmetric_eigen(cov, d);
        let mut order: Vec<usize> = (0..d).collect();
        order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
        let total: f64 = values.iter().map(|v| v.max(0.0)).sum();
        let kept: f64 = order[..k].iter().map(|&i| values[i].max(0.0)).sum();
        let mut components = Vec::with_capacity(k * d);
        for &c in &order[..k] {
            // Column c of the eigenvector matrix.
            components.extend((0..d).map(|r| vectors[r * d + c]));
        }
        Pca {
            mean,
            components,
            k,
            explained: if total > 0.0 { kept / total } else { 0.0 },
        }
    }

    /// `(x - mean) · componentsᵀ`: row-major `n × k`. Each output column's sign is chosen as
    /// model2vec does: its entry of largest magnitude (the first of equals) is positive.
    fn project(&self, x: &[f64], n: usize, d: usize) -> Vec<f64> {
        let k = self.k;
        let mut out = vec![0.0f64; n * k];
        out.par_chunks_mut(k)
            .zip(x.par_chunks(d))
            .for_each(|(o, row)| {
                let centred: Vec<f64> = row.iter().zip(&self.mean).map(|(v, m)| v - m).collect();
                for (c, slot) in o.iter_mut().enumerate() {
                    *slot = dot(&centred, &self.components[c * d..(c + 1) * d]);
                }
            });
        let mut biggest = vec![0.0f64; k];
        for row in out.chunks_exact(k) {
            for (b, &v) in biggest.iter_mut().zip(row) {
                if v.abs() > b.abs() {
                    *b = v;
                }
            }
        }
        let flip: Vec<bool> = biggest.iter().map(|&b| b < 0.0).collect();
        for row in out.chunks_exact_mut(k) {
            for (v, &f) in row.iter_mut().zip(&flip) {
                if f {
                    *v = -*v;
                }
            }
        }
        out
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Eigenvalues and eigenvectors (the columns of the returned row-major `d × d` matrix) of a
/// symmetric matrix, by cyclic Jacobi rotations. Fine for a few hundred dimensions; accurate to
/// rounding, and the same input always gives the same output.
fn symmetric_eigen(mut a: Vec<f64>, d: usize) -> (Vec<f64>, Vec<f64>) {
    let mut v = vec![0.0f64; d * d];
    for i in 0..d {
        v[i * d + i] = 1.0;
    }
    let scale: f64 = a
        .iter()
        .map(|x| x * x)
        .sum::<f64>()
        .sqrt()
        .max(f64::MIN_POSITIVE);
    for _sweep in 0..100 {
        let off: f64 = (0..d)
            .flat_map(|p| ((p + 1)..d).map(move |q| (p, q)))
            .map(|(p, q)| a[p * d + q] * a[p * d + q])
            .sum::<f64>()
            .sqrt();
        if off <= 1e-12 * scale {
            break;
        }
        for p in 0..d {
            for q in (p + 1)..d {
                let apq = a[p * d + q];
                if apq == 0.0 {
                    continue;
                }
                let (app, aqq) = (a[p * d + p], a[q * d + q]);
                // Rotation angle that zeroes a[p][q] (Numerical Recipes' stable form).
                let theta = (aqq - app) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                // A ← Jᵀ A J on rows/columns p and q.
                for k in 0..d {
                    let (akp, akq) = (a[k * d + p], a[k * d + q]);
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let (apk, aqk) = (a[p * d + k], a[q * d + k]);
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
                a[p * d + q] = 0.0;
                a[q * d + p] = 0.0;
                for k in 0..d {
                    let (vkp, vkq) = (v[k * d + p], v[k * d + q]);
                    v[k * d + p] = c * vkp - s * vkq;
                    v[k * d + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let values = (0..d).map(|i| a[i * d + i]).collect();
    (values, v)
}

/// model2vec's SIF weighting with Zipf-estimated frequencies: the token of id `r` is taken to be
/// the `r`-th most frequent, `p ∝ 1 / (r + 2)`, and its row is scaled by `a / (a + p)`.
fn zipf_sif(table: &mut [f64], dims: usize, a: f64) {
    let n = table.len() / dims;
    let inv_rank: Vec<f64> = (0..n).map(|r| 1.0 / (r as f64 + 2.0)).collect();
    let sum: f64 = inv_rank.iter().sum();
    for (row, ir) in table.chunks_exact_mut(dims).zip(&inv_rank) {
        let w = a / (a + ir / sum);
        row.iter_mut().for_each(|x| *x *= w);
    }
}

/// Writes one F16 tensor `embeddings` of shape `[n, dims]` as a safetensors file; returns its size.
fn write_safetensors_f16(path: &Path, table: &[f64], n: usize, dims: usize) -> Result<u64> {
    let bytes = n * dims * 2;
    let mut header = serde_json::json!({
        "embeddings": {"dtype": "F16", "shape": [n, dims], "data_offsets": [0, bytes]}
    })
    .to_string();
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut file = Vec::with_capacity(8 + header.len() + bytes);
    file.extend_from_slice(&(header.len() as u64).to_le_bytes());
    file.extend_from_slice(header.as_bytes());
    for &x in table {
        file.extend_from_slice(&half::f16::from_f64(x).to_le_bytes());
    }
    std::fs::write(path, &file)?;
    Ok(file.len() as u64)
}

/// model2vec's `config.json` for the table.
fn config_json(dims: usize, sif: f64) -> String {
    let config = serde_json::json!({
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "hidden_dim": dims,
        "normalize": true,
        "apply_pca": dims,
        "apply_zipf": true,
        "sif_coefficient": sif,
        "base_model": "sentence-transformers/all-MiniLM-L6-v2",
        "tokenizer_name": "sentence-transformers/all-MiniLM-L6-v2",
        "seq_length": 1_000_000,
    });
    let mut s = serde_json::to_string_pretty(&config).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jacobi_diagonalises_a_symmetric_matrix() {
        let d = 4;
        let a = vec![
            4.0, 1.0, 0.5, 0.0, //
            1.0, 3.0, 0.2, 0.1, //
            0.5, 0.2, 2.0, 0.3, //
            0.0, 0.1, 0.3, 1.0,
        ];
        let (values, v) = symmetric_eigen(a.clone(), d);
        for c in 0..d {
            for r in 0..d {
                // (A v_c)[r] = λ_c v_c[r]
                let av: f64 = (0..d).map(|k| a[r * d + k] * v[k * d + c]).sum();
                assert!((av - values[c] * v[r * d + c]).abs() < 1e-12);
            }
        }
        let trace: f64 = values.iter().sum();
        assert!((trace - 10.0).abs() < 1e-12);
    }

    #[test]
    fn pca_finds_the_main_direction() {
        // Points along (1, 1), spread unevenly so that the farthest one is on the positive side,
        // with a little spread along (1, -1) that does not correlate with the position on (1, 1).
        let ts: Vec<f64> = (0..100).map(|i| f64::from(i * i) / 100.0 - 10.0).collect();
        let mut x = Vec::new();
        for (i, t) in ts.iter().enumerate() {
            let s = if i % 4 == 0 || i % 4 == 3 { 0.5 } else { -0.5 };
            x.extend([t + s + 3.0, t - s - 1.0]);
        }
        let pca = Pca::fit(&x, 100, 2, 1);
        let h = std::f64::consts::FRAC_1_SQRT_2;
        assert!((pca.components[0].abs() - h).abs() < 1e-3);
        assert!((pca.components[0] - pca.components[1]).abs() < 1e-3);
        assert!(pca.explained > 0.99);
        // The score of largest magnitude (the last point) comes out positive.
        let y = pca.project(&x, 100, 2);
        let mean = ts.iter().sum::<f64>() / 100.0;
        for (yi, t) in y.iter().zip(&ts) {
            assert!((yi - (t - mean) * 2.0 * h).abs() < 1e-2, "{yi} vs {t}");
        }
        assert!(y[99] > 0.0 && y[0] < 0.0);
    }

    #[test]
    fn safetensors_header_is_aligned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let size = write_safetensors_f16(&path, &[1.0, -2.0, 0.5], 1, 3).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, size);
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(len % 8, 0);
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
        assert_eq!(header["embeddings"]["shape"], serde_json::json!([1, 3]));
        assert_eq!(bytes.len(), 8 + len + 6);
        assert_eq!(
            &bytes[8 + len..8 + len + 2],
            &half::f16::from_f32(1.0).to_le_bytes()
        );
    }

    #[test]
    fn zipf_weights_shrink_frequent_tokens() {
        let mut t = vec![1.0; 6];
        zipf_sif(&mut t, 2, 1e-4);
        assert!(t[0] < t[2] && t[2] < t[4] && t[4] < 1.0);
    }
}
