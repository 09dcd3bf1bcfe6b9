//! Binary sketches: one bit per dimension of a vector after a fixed pseudo-random rotation, so
//! that the share of bits two sketches differ in estimates the angle between the vectors
//! (SimHash). The rotation is a randomised Hadamard transform applied twice (sign flips, then
//! the fast Walsh–Hadamard transform): `O(d log d)` per vector instead of a `d × d` product, and
//! it spreads the few dimensions that carry most of an embedding's variance over all bits.
//!
//! The vectors staged for the graph are searched through their sketches once they are many: the
//! Hamming distance to the query's sketch picks a shortlist, which is then scored exactly. A
//! sketch costs `d / 8` bytes (32 at dimension 256), and comparing one is a few instructions.

/// Sketches vectors of one dimension.
pub(super) struct Sketcher {
    dim: usize,
    /// The dimension rounded up to a power of two, at least 64.
    width: usize,
    /// The sign flips of the two rounds, `width` each.
    flips: [Vec<f32>; 2],
}

impl Sketcher {
    pub(super) fn new(dim: usize) -> Sketcher {
        let width = dim.next_power_of_two().max(64);
        let mut state = 0x6a09_e667_f3bc_c908u64;
        let mut flips = || -> Vec<f32> {
            (0..width)
                .map(|_| {
                    state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    if super::mix(state) & 1 == 0 {
                        1.0
                    } else {
                        -1.0
                    }
                })
                .collect()
        };
        Sketcher {
            dim,
            width,
            flips: [flips(), flips()],
        }
    }

    /// Words of one sketch.
    pub(super) fn words(&self) -> usize {
        self.width / 64
    }

    /// Appends the sketch of `v` (of the sketcher's dimension) to `out`.
    pub(super) fn sketch(&self, v: &[f32], out: &mut Vec<u64>) {
        let mut x = vec![0.0f32; self.width];
        x[..self.dim.min(v.len())].copy_from_slice(&v[..self.dim.min(v.len())]);
        for flips in &self.flips {
            x.iter_mut().zip(flips).for_each(|(x, f)| *x *= f);
            walsh_hadamard(&mut x);
        }
        out.extend(x.chunks(64).map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u64, |word, (i, &x)| word | (u64::from(x > 0.0) << i))
        }));
    }
}

/// The unnormalised fast Walsh–Hadamard transform, in place (`x.len()` a power of two).
fn walsh_hadamard(x: &mut [f32]) {
    let mut h = 1;
    while h < x.len() {
        for block in x.chunks_mut(2 * h) {
            let (a, b) = block.split_at_mut(h);
            for (a, b) in a.iter_mut().zip(b) {
                let (s, d) = (*a + *b, *a - *b);
                *a = s;
                *b = d;
            }
        }
        h *= 2;
    }
}

/// Positions (into `codes`, `words` per sketch) of the `n` sketches nearest to `query` in
/// Hamming distance, nearest first; ties in the order of `codes`.
pub(super) fn nearest(query: &[u64], codes: &[u64], words: usize, n: usize) -> Vec<usize> {
    let distances: Vec<u16> = match <[u64; 4]>::try_from(query) {
        // The width of 256-dimensional vectors, unrolled.
        Ok(q) => codes
            .chunks_exact(4)
            .map(|c| {
                ((c[0] ^ q[0]).count_ones()
                    + (c[1] ^ q[1]).count_ones()
                    + (c[2] ^ q[2]).count_ones()
                    + (c[3] ^ q[3]).count_ones()) as u16
            })
            .collect(),
        Err(_) => codes
            .chunks_exact(words)
            .map(|c| {
                c.iter()
                    .zip(query)
                    .map(|(a, b)| (a ^ b).count_ones() as u16)
                    .sum()
            })
            .collect(),
    };
    // A counting sort: distances are at most 64 × words.
    let mut start = vec![0usize; words * 64 + 2];
    for &d in &distances {
        start[usize::from(d) + 1] += 1;
    }
    for d in 1..start.len() {
        start[d] += start[d - 1];
    }
    let n = n.min(distances.len());
    let mut out = vec![0usize; n];
    for (i, &d) in distances.iter().enumerate() {
        let at = &mut start[usize::from(d)];
        if *at < n {
            out[*at] = i;
        }
        *at += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u64, dim: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dim as u64)
            .map(|i| {
                (super::super::mix(seed.wrapping_mul(31).wrapping_add(i)) % 2001) as f32 - 1000.0
            })
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    fn hamming(a: &[u64], b: &[u64]) -> u32 {
        a.iter().zip(b).map(|(a, b)| (a ^ b).count_ones()).sum()
    }

    #[test]
    fn the_transform_is_a_scaled_rotation() {
        let v = unit(1, 256);
        let mut x = v.clone();
        walsh_hadamard(&mut x);
        let norm = x.iter().map(|x| x * x).sum::<f32>();
        assert!((norm / 256.0 - 1.0).abs() < 1e-4, "|Hx|² = {norm}");
        walsh_hadamard(&mut x);
        for (a, b) in x.iter().zip(&v) {
            assert!((a / 256.0 - b).abs() < 1e-5);
        }
    }

    #[test]
    fn hamming_distance_follows_the_angle() {
        let s = Sketcher::new(256);
        assert_eq!(s.words(), 4);
        let sketch = |v: &[f32]| {
            let mut out = Vec::new();
            s.sketch(v, &mut out);
            out
        };
        let a = unit(7, 256);
        let b = unit(8, 256);
        // Points on the arc from a towards b: the sketch drifts away from a's as they go.
        let along = |t: f32| -> Vec<f32> {
            a.iter()
                .zip(&b)
                .map(|(a, b)| a * (1.0 - t) + b * t)
                .collect()
        };
        let d: Vec<u32> = [0.0, 0.1, 0.3, 0.6, 1.0]
            .iter()
            .map(|&t| hamming(&sketch(&a), &sketch(&along(t))))
            .collect();
        assert_eq!(d[0], 0);
        assert!(d.windows(2).all(|w| w[0] <= w[1]), "{d:?}");
        // Near-orthogonal random vectors differ in about half the bits.
        assert!((100..=156).contains(&d[4]), "{d:?}");
        // A vector and its opposite differ in every bit.
        let minus: Vec<f32> = a.iter().map(|x| -x).collect();
        assert_eq!(hamming(&sketch(&a), &sketch(&minus)), 256);
        // A vector shorter than the width is padded (dimension 100 → 128 bits).
        let s = Sketcher::new(100);
        let mut out = Vec::new();
        s.sketch(&unit(3, 100), &mut out);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn nearest_keeps_the_closest_sketches_in_order() {
        let codes: Vec<u64> = vec![0b1111, 0b0000, 0b0001, 0b0111, 0b0011, 0b0001];
        assert_eq!(nearest(&[0], &codes, 1, 3), [1, 2, 5]);
        assert_eq!(nearest(&[0b0011], &codes, 1, 3), [4, 2, 3]);
        assert_eq!(nearest(&[0], &codes, 1, 99), [1, 2, 5, 4, 3, 0]);
        assert!(nearest(&[0], &codes, 1, 0).is_empty());
        // Four words at a time, as for 256 dimensions.
        let wide: Vec<u64> = vec![u64::MAX, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1];
        assert_eq!(nearest(&[0; 4], &wide, 4, 3), [1, 2, 0]);
    }
}
