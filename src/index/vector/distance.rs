//! Distances between unit vectors: the dot product every search and insertion runs (AVX2
//! where the CPU has it, the very same number either way), its conversion to a distance and a
//! similarity, and making a vector unit length.

/// Dot product of two vectors of one length, the hot loop of every search and insertion. Where
/// the CPU has AVX2 the same code runs with 256-bit registers: the operations and their order are
/// the same either way (no fused multiply-add), so every machine computes the very same number.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU was just found to support AVX2.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

/// 32 independent sums, so the loop vectorises (a single running sum cannot be reordered) and
/// keeps several additions in flight instead of waiting on one register.
#[inline(always)]
pub(super) fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 32;
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0f32; LANES];
    for (x, y) in ca.zip(cb) {
        for ((s, x), y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    // Pairwise, so the sum stays independent of how wide the registers were.
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    acc[0] + tail
}

/// `1 − dot` within [0, 2]; total (a NaN, which validated input cannot produce, maps to 0).
pub(super) fn distance(dot: f32) -> f32 {
    let d = 1.0 - dot;
    if d >= 0.0 { d.min(2.0) } else { 0.0 }
}

/// The similarity callers see: higher is closer, 1 for the same direction. Computed from the
/// distance so that graph hits and exact hits of one vector carry the very same number.
pub(super) fn similarity(distance: f32) -> f32 {
    1.0 - distance
}

/// The similarity the index gives two unit vectors (for candidates scored outside it).
pub fn unit_similarity(a: &[f32], b: &[f32]) -> f32 {
    similarity(distance(dot(a, b)))
}

/// `x` rounded to the nearest bfloat16 (ties to even), as a float: what the graph stores of a
/// number. A rounded number passes through the graph's own conversion unchanged, so every path
/// (graph, staged, scan) scores the very same numbers.
pub(super) fn bf16_round(x: f32) -> f32 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    f32::from_bits(rounded & 0xffff_0000)
}

/// Vectors whose length is off 1 by more than this are rescaled to unit length.
pub(super) const UNIT_TOLERANCE: f32 = 1e-4;

/// `v` as a unit vector of `dim` floats; a zero vector stays zero (it is equally far from all).
pub(super) fn unit_vector(v: &[f32], dim: usize) -> std::result::Result<Vec<f32>, String> {
    if v.len() != dim {
        return Err(format!("{} dimensions, the index holds {dim}", v.len()));
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err("a non-finite value".to_owned());
    }
    let mut v = v.to_vec();
    let norm = dot(&v, &v).sqrt();
    if norm > 0.0 && (norm - 1.0).abs() > UNIT_TOLERANCE {
        for x in &mut v {
            *x /= norm;
        }
    }
    Ok(v)
}
