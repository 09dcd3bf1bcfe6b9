//! `--weights TEXT:VECTOR` of the evaluation examples: fusion weights as recall's `weights`
//! accepts them.

/// `TEXT:VECTOR`, two non-negative numbers, not both 0.
pub(crate) fn parse_weights(s: &str) -> Result<(f32, f32), String> {
    let bad = || format!("--weights {s:?}: give TEXT:VECTOR, two non-negative numbers such as 1:1");
    let (t, v) = s.split_once(':').ok_or_else(bad)?;
    let t: f32 = t.trim().parse().map_err(|_| bad())?;
    let v: f32 = v.trim().parse().map_err(|_| bad())?;
    if !(t.is_finite() && v.is_finite() && t >= 0.0 && v >= 0.0 && t + v > 0.0) {
        return Err(bad());
    }
    Ok((t, v))
}
