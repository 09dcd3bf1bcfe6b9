//! Turning text into vectors: the `Embedder` trait and its providers — the built-in static model
//! (the default, offline), an OpenAI-compatible HTTP endpoint, the MiniLM transformer (feature
//! `minilm`) and a deterministic hashing embedder for tests.

pub mod chat;
#[cfg(feature = "minilm")]
pub mod distill;
pub mod hashing;
pub mod http;
#[cfg(feature = "minilm")]
pub mod minilm;
pub mod static_model;
pub mod wordpiece;

use std::sync::Arc;

use crate::config::EmbedderSpec;
use crate::error::{Error, Result};

/// The provider `spec` names, ready to use (`None` for a text-only configuration). Cheap for the
/// built-in model, which parses its table on first use; an HTTP endpoint is asked for its
/// dimension now.
pub fn open(spec: &EmbedderSpec) -> Result<Option<Arc<dyn Embedder>>> {
    Ok(match spec {
        EmbedderSpec::None => None,
        EmbedderSpec::Builtin => Some(Arc::new(static_model::StaticModel::builtin())),
        EmbedderSpec::StaticDir(dir) => Some(Arc::new(static_model::StaticModel::from_dir(dir)?)),
        EmbedderSpec::Hashing(dim) => Some(Arc::new(hashing::HashingEmbedder::new(*dim))),
        EmbedderSpec::MiniLm(_dir) => {
            #[cfg(feature = "minilm")]
            {
                Some(Arc::new(minilm::MiniLmEmbedder::open(_dir)?))
            }
            #[cfg(not(feature = "minilm"))]
            {
                return Err(Error::Embed {
                    provider: "minilm".into(),
                    reason: "this build has no transformer support; rebuild with `cargo build --release --features minilm`".into(),
                });
            }
        }
        EmbedderSpec::Http {
            base_url,
            model,
            api_key,
            timeout_ms,
        } => Some(Arc::new(http::HttpEmbedder::new(http::HttpConfig {
            base_url: base_url.clone(),
            model: model.clone(),
            api_key: api_key.clone(),
            dim: None,
            timeout: std::time::Duration::from_millis(*timeout_ms),
        })?)),
    })
}

/// A text embedding provider. Vectors are unit length (cosine = dot product), `dim()` long, and
/// the same text always gives the same vector for one `model_id()`.
pub trait Embedder: Send + Sync {
    /// Stable identifier of the model; stored with every vector so a switch is noticed.
    fn model_id(&self) -> &str;
    /// Length of every vector this embedder returns.
    fn dim(&self) -> usize;
    /// One unit vector per text, in order. Fails as a whole (callers fall back to text search).
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>>;
    /// Readies what the first `embed` would otherwise load (a model parsed on first use), so a
    /// serving process's first recall does not wait for it; never calls out of the process.
    fn warm(&self) {}
}

/// Scales `v` to unit length in place; a zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v {
            *x /= norm;
        }
    }
}

/// Checks what a provider returned: one vector per text, each `dim` long and finite.
pub fn check_output(provider: &str, dim: usize, n_texts: usize, out: &[Vec<f32>]) -> Result<()> {
    let fail = |reason: String| Error::Embed {
        provider: provider.to_owned(),
        reason,
    };
    if out.len() != n_texts {
        return Err(fail(format!(
            "returned {} vectors for {n_texts} texts",
            out.len()
        )));
    }
    for (i, v) in out.iter().enumerate() {
        if v.len() != dim {
            return Err(fail(format!(
                "vector {i} has {} dimensions, expected {dim}",
                v.len()
            )));
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(fail(format!("vector {i} has a non-finite value")));
        }
    }
    Ok(())
}
