//! The steps of a run and the policy that tunes them: defaults nobody has to touch, every
//! setting checked with an error that names the field and the range.

use serde::{Deserialize, Serialize};

use crate::engine::curate::salience::DEFAULT_HALF_LIFE_DAYS;
use crate::error::{Error, Result};

/// One step of a run, in the order runs take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Merge near-duplicates (same content, or close vectors and strong word overlap).
    Merge,
    /// Decay salience with time unused (read lazily; the archive step uses it).
    Decay,
    /// Archive memories of low salience, unused for long, not pinned, not named.
    Archive,
    /// Close self-loops, re-point relations left on merged memories, fold duplicate relations.
    Hygiene,
}

impl Step {
    pub const ALL: [Step; 4] = [Step::Merge, Step::Decay, Step::Archive, Step::Hygiene];

    pub fn name(self) -> &'static str {
        match self {
            Step::Merge => "merge",
            Step::Decay => "decay",
            Step::Archive => "archive",
            Step::Hygiene => "hygiene",
        }
    }
}

/// The steps asked for, in run order (all when `None`).
pub(crate) fn parse_steps(asked: Option<&[String]>) -> Result<Vec<Step>> {
    let Some(asked) = asked else {
        return Ok(Step::ALL.to_vec());
    };
    let known = || {
        Step::ALL
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if asked.is_empty() {
        return Err(Error::invalid(
            "steps",
            "is empty",
            format!(
                "name at least one of {}, or leave `steps` out to run them all",
                known()
            ),
        ));
    }
    for (i, s) in asked.iter().enumerate() {
        if !Step::ALL.iter().any(|k| k.name() == s) {
            return Err(Error::invalid(
                format!("steps[{i}]"),
                format!("{s:?} is not a step"),
                format!("use one of {}", known()),
            ));
        }
    }
    Ok(Step::ALL
        .into_iter()
        .filter(|k| asked.iter().any(|s| s == k.name()))
        .collect())
}

/// Settings of a run. Every field has a default; a caller gives only what it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Smallest cosine similarity of two memories' vectors for a merge (0.5–1).
    pub merge_similarity: f64,
    /// Smallest share of words two memories must have in common for a merge (0–1).
    pub merge_overlap: f64,
    /// Nearest neighbours looked at per memory when finding duplicates (1–50).
    pub merge_neighbours: usize,
    /// Days after which unused salience halves (> 0, at most 3650).
    pub half_life_days: f64,
    /// Salience below which a memory may be archived (0–1).
    pub archive_below: f64,
    /// Days a memory must have gone unused before it may be archived (≥ 0).
    pub archive_unused_days: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            merge_similarity: 0.92,
            merge_overlap: 0.5,
            merge_neighbours: 8,
            half_life_days: DEFAULT_HALF_LIFE_DAYS,
            archive_below: 0.05,
            archive_unused_days: 90.0,
        }
    }
}

fn range(field: &str, v: f64, lo: f64, hi: f64, lo_open: bool) -> Result<()> {
    let below = if lo_open { v <= lo } else { v < lo };
    if !v.is_finite() || below || v > hi {
        let from = if lo_open { "above" } else { "from" };
        return Err(Error::invalid(
            format!("policy.{field}"),
            format!("is {v}"),
            format!("give a number {from} {lo} up to {hi}"),
        ));
    }
    Ok(())
}

impl Policy {
    /// The defaults with the caller's settings over them, each checked.
    pub fn parse(given: Option<&serde_json::Value>) -> Result<Policy> {
        let p: Policy = match given {
            None | Some(serde_json::Value::Null) => Policy::default(),
            Some(v) => serde_path_to_error::deserialize(v.clone()).map_err(|e| {
                let path = e.path().to_string();
                let field = if path == "." {
                    "policy".to_owned()
                } else {
                    format!("policy.{path}")
                };
                Error::invalid(
                    field,
                    e.inner().to_string(),
                    "give an object with any of merge_similarity, merge_overlap, merge_neighbours, half_life_days, archive_below, archive_unused_days",
                )
            })?,
        };
        range("merge_similarity", p.merge_similarity, 0.5, 1.0, false)?;
        range("merge_overlap", p.merge_overlap, 0.0, 1.0, false)?;
        range(
            "merge_neighbours",
            p.merge_neighbours as f64,
            1.0,
            50.0,
            false,
        )?;
        range("half_life_days", p.half_life_days, 0.0, 3650.0, true)?;
        range("archive_below", p.archive_below, 0.0, 1.0, false)?;
        range(
            "archive_unused_days",
            p.archive_unused_days,
            0.0,
            36_500.0,
            false,
        )?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field_of(e: Error) -> String {
        match e {
            Error::InvalidArgument { field, .. } => field,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn steps_run_in_their_order_and_unknown_ones_are_named() {
        let s = parse_steps(Some(&["hygiene".into(), "merge".into()])).unwrap();
        assert_eq!(s, vec![Step::Merge, Step::Hygiene]);
        assert_eq!(parse_steps(None).unwrap(), Step::ALL.to_vec());
        let e = parse_steps(Some(&["merge".into(), "vacuum".into()])).unwrap_err();
        assert!(
            e.to_string().contains("merge, decay, archive, hygiene"),
            "{e}"
        );
        assert_eq!(field_of(e), "steps[1]");
        assert_eq!(field_of(parse_steps(Some(&[])).unwrap_err()), "steps");
    }

    #[test]
    fn policy_fields_are_checked_by_name() {
        assert_eq!(Policy::parse(None).unwrap(), Policy::default());
        let p = Policy::parse(Some(&json!({"archive_below": 0.2}))).unwrap();
        assert_eq!(p.archive_below, 0.2);
        assert_eq!(p.merge_similarity, Policy::default().merge_similarity);
        for (v, field) in [
            (json!({"half_life_days": 0}), "policy.half_life_days"),
            (json!({"merge_similarity": 1.5}), "policy.merge_similarity"),
            (json!({"merge_overlap": -0.1}), "policy.merge_overlap"),
            (json!({"merge_neighbours": 0}), "policy.merge_neighbours"),
            (json!({"half_life": 3}), "policy.half_life"),
            (json!({"archive_below": "low"}), "policy.archive_below"),
        ] {
            assert_eq!(field_of(Policy::parse(Some(&v)).unwrap_err()), field, "{v}");
        }
    }
}
