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
    /// Condense groups of old episodes (the parts of one memory) into a linked summary.
    Summarise,
    /// Find memories and relations that cannot both hold now; link them, or close the older.
    Contradictions,
    /// Close self-loops, re-point relations left on merged memories, fold duplicate relations.
    Hygiene,
}

impl Step {
    /// Summaries come before archiving, so episodes about to be archived are condensed first;
    /// contradictions after merging, so a repeated fact is not its own contradiction.
    pub const ALL: [Step; 6] = [
        Step::Merge,
        Step::Summarise,
        Step::Contradictions,
        Step::Decay,
        Step::Archive,
        Step::Hygiene,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Step::Merge => "merge",
            Step::Decay => "decay",
            Step::Archive => "archive",
            Step::Summarise => "summarise",
            Step::Contradictions => "contradictions",
            Step::Hygiene => "hygiene",
        }
    }

    /// The step called `name` (American spelling accepted).
    fn named(name: &str) -> Option<Step> {
        let name = if name == "summarize" {
            "summarise"
        } else {
            name
        };
        Step::ALL.into_iter().find(|s| s.name() == name)
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
        if Step::named(s).is_none() {
            return Err(Error::invalid(
                format!("steps[{i}]"),
                format!("{s:?} is not a step"),
                format!("use one of {}", known()),
            ));
        }
    }
    Ok(Step::ALL
        .into_iter()
        .filter(|k| asked.iter().any(|s| Step::named(s) == Some(*k)))
        .collect())
}

/// Settings of a run. Every field has a default; a caller gives only what it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Smallest cosine similarity of two memories' vectors for a merge (0.5–1).
    pub merge_similarity: f64,
    /// Smallest share of words two memories must have in common for a merge (0.2–1).
    pub merge_overlap: f64,
    /// Days after which unused salience halves (> 0, at most 3650).
    pub half_life_days: f64,
    /// Salience below which a memory may be archived (0–1).
    pub archive_below: f64,
    /// Days a memory must have gone unused before it may be archived (≥ 0).
    pub archive_unused_days: f64,
    /// Days since its newest part after which a group of episodes is summarised (≥ 0).
    pub summarise_after_days: f64,
    /// Fewest episodes a group needs to be summarised (2–10,000).
    pub summarise_min_sources: usize,
    /// Longest summary, in characters (100–10,000).
    pub summary_max_chars: usize,
    /// Relation kinds, and fact attributes (metadata `attribute`), that hold one value at a time.
    pub single_valued: Vec<String>,
    /// What to do with a contradiction: `"link"` (link and report) or `"newest"` (also end the
    /// older one's validity where the newer one starts).
    pub resolve: Resolve,
    /// Most memories a run may merge and archive before it asks the client that started it to
    /// confirm (only a client that can answer, through a task; 0 asks before any change).
    pub confirm_above: u64,
    /// Seconds a run waits for the client's answer before it takes the stated default: not
    /// confirmed (nothing changes), or extractive summaries (1–86,400).
    pub answer_wait_s: f64,
    /// Days a closed job's memories are kept from archiving; after them the job's context is
    /// archived (its summary stays) (0–36,500).
    pub job_retention_days: f64,
}

/// Least `merge_overlap`: near-duplicates share words (below this the word index that finds them
/// would compare nearly all pairs, and memories that share a fifth of their words are not one).
const MIN_OVERLAP: f64 = 0.2;

/// How the contradictions step resolves what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolve {
    /// Link the two and report them; both stay valid.
    Link,
    /// Also end the older one's validity where the newer one's starts (nothing is deleted).
    Newest,
}

/// Single-valued relation kinds and attributes when the policy names none.
pub(super) const SINGLE_VALUED: [&str; 12] = [
    "works_at",
    "lives_in",
    "status",
    "located_in",
    "employer",
    "role",
    "title",
    "married_to",
    "age",
    "email",
    "phone",
    "address",
];

impl Default for Policy {
    fn default() -> Self {
        Policy {
            merge_similarity: 0.92,
            merge_overlap: 0.5,
            half_life_days: DEFAULT_HALF_LIFE_DAYS,
            archive_below: 0.05,
            archive_unused_days: 90.0,
            summarise_after_days: 30.0,
            summarise_min_sources: 5,
            summary_max_chars: 600,
            single_valued: SINGLE_VALUED.iter().map(|s| (*s).to_owned()).collect(),
            resolve: Resolve::Link,
            confirm_above: 100,
            answer_wait_s: 300.0,
            job_retention_days: 30.0,
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
                    "give an object with any of merge_similarity, merge_overlap, half_life_days, archive_below, archive_unused_days, summarise_after_days, summarise_min_sources, summary_max_chars, single_valued, resolve (\"link\" or \"newest\"), confirm_above, answer_wait_s, job_retention_days",
                )
            })?,
        };
        range("merge_similarity", p.merge_similarity, 0.5, 1.0, false)?;
        range("merge_overlap", p.merge_overlap, MIN_OVERLAP, 1.0, false)?;
        range("half_life_days", p.half_life_days, 0.0, 3650.0, true)?;
        range("archive_below", p.archive_below, 0.0, 1.0, false)?;
        range(
            "archive_unused_days",
            p.archive_unused_days,
            0.0,
            36_500.0,
            false,
        )?;
        range(
            "summarise_after_days",
            p.summarise_after_days,
            0.0,
            36_500.0,
            false,
        )?;
        range(
            "summarise_min_sources",
            p.summarise_min_sources as f64,
            2.0,
            10_000.0,
            false,
        )?;
        range(
            "summary_max_chars",
            p.summary_max_chars as f64,
            100.0,
            10_000.0,
            false,
        )?;
        range("answer_wait_s", p.answer_wait_s, 1.0, 86_400.0, false)?;
        range(
            "job_retention_days",
            p.job_retention_days,
            0.0,
            36_500.0,
            false,
        )?;
        if p.single_valued.len() > 1_000 {
            return Err(Error::invalid(
                "policy.single_valued",
                format!("lists {} kinds", p.single_valued.len()),
                "list at most 1000 relation kinds or attributes",
            ));
        }
        for (i, k) in p.single_valued.iter().enumerate() {
            if k.trim().is_empty() || k.len() > 200 {
                return Err(Error::invalid(
                    format!("policy.single_valued[{i}]"),
                    "is empty or longer than 200 bytes",
                    "give relation kinds or attributes such as \"works_at\"",
                ));
            }
        }
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
            e.to_string()
                .contains("merge, summarise, contradictions, decay, archive, hygiene"),
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
            (json!({"merge_overlap": 0.1}), "policy.merge_overlap"),
            (json!({"half_life": 3}), "policy.half_life"),
            (json!({"archive_below": "low"}), "policy.archive_below"),
            (json!({"summary_max_chars": 10}), "policy.summary_max_chars"),
            (
                json!({"summarise_min_sources": 1}),
                "policy.summarise_min_sources",
            ),
            (json!({"resolve": "oldest"}), "policy.resolve"),
            (json!({"answer_wait_s": 0}), "policy.answer_wait_s"),
            (
                json!({"job_retention_days": -1}),
                "policy.job_retention_days",
            ),
            (json!({"confirm_above": -1}), "policy.confirm_above"),
            (json!({"single_valued": [""]}), "policy.single_valued[0]"),
        ] {
            assert_eq!(field_of(Policy::parse(Some(&v)).unwrap_err()), field, "{v}");
        }
    }
}
