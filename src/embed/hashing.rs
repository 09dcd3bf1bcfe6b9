//! A deterministic embedder for tests: words hashed into signed buckets. Texts that share words
//! get close vectors; nothing is downloaded or learned.

use crate::embed::{Embedder, normalize};
use crate::error::Result;

/// Feature-hashing embedder: each lower-cased word adds ±1 to one of `dim` buckets.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dim: usize,
    id: String,
}

impl HashingEmbedder {
    pub fn new(dim: usize) -> HashingEmbedder {
        HashingEmbedder {
            dim: dim.max(1),
            id: format!("hashing-{dim}"),
        }
    }

    fn one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dim];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let h = fnv1a(word.to_lowercase().as_bytes());
            let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
            v[(h % self.dim as u64) as usize] += sign;
        }
        normalize(&mut v);
        v
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Embedder for HashingEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_same_vector_and_shared_words_are_closer() {
        let e = HashingEmbedder::new(64);
        let v = e
            .embed(&[
                "red apple pie",
                "red apple pie",
                "apple pie",
                "quantum field",
            ])
            .unwrap();
        assert_eq!(v[0], v[1]);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!(dot(&v[0], &v[2]) > dot(&v[0], &v[3]));
        assert!((dot(&v[0], &v[0]) - 1.0).abs() < 1e-5);
    }
}
