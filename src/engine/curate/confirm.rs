//! Asking before a big run: a run started by a client that can answer forms, and that would
//! merge and archive more memories than the policy's `confirm_above`, first runs dry and asks
//! the client to confirm what it would do (MCP `elicitation/create`, through the task's
//! `input_required`). No answer within the policy's `answer_wait_s` is a no: nothing changes.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::engine::Engine;
use crate::engine::control::{Answering, Control, WorkProgress, duration_words};
use crate::engine::curate::policy::Policy;
use crate::engine::curate::{ConsolidateRequest, Counts, RunReport};
use crate::error::Result;

/// The key of the question (the same for a re-run after a restart, which finds the answer).
const KEY: &str = "confirm-consolidation";
/// The state of a run the client did not confirm.
pub(crate) const DECLINED: &str = "declined";

/// A dry run's control: obeys the run's cancellation, reports nothing (the run's own progress
/// starts when it writes) and saves no checkpoint.
struct Preview<'a>(&'a dyn Control);

impl Control for Preview<'_> {
    fn report(&self, _: &WorkProgress) {}

    fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// What the dry run would do, as a person reads it.
fn would(c: &Counts) -> String {
    format!(
        "merge {} memories into {} and archive {}",
        c.merged, c.survivors, c.archived
    )
}

impl Engine {
    /// Asks the client to confirm `req` when it would merge and archive more than
    /// `policy.confirm_above` memories. `Ok(None)`: go on (small enough, or confirmed);
    /// `Ok(Some(report))`: the run ends there, having changed nothing.
    pub(super) fn confirm(
        &self,
        req: &ConsolidateRequest,
        policy: &Policy,
        ctl: &dyn Control,
        started: Instant,
    ) -> Result<Option<RunReport>> {
        let dry = ConsolidateRequest {
            dry_run: true,
            answers: Answering::default(),
            ..req.clone()
        };
        let preview = self.consolidate(&dry, &Preview(ctl))?;
        let c = preview.counts;
        if c.merged + c.archived <= policy.confirm_above {
            return Ok(None);
        }
        let wait = Duration::from_secs_f64(policy.answer_wait_s);
        let message = format!(
            "Consolidating {} would {} — more than the {} changes that need your confirmation \
             (a run can be undone). Go on? Without an answer within {}, nothing changes.",
            preview.namespaces.join(", "),
            would(&c),
            policy.confirm_above,
            duration_words(wait)
        );
        let question = json!({"method": "elicitation/create", "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {"confirm": {
                    "type": "boolean",
                    "title": "Go on",
                    "description": format!("{} as described", would(&c)),
                    "default": false,
                }},
                "required": ["confirm"],
            },
        }});
        let answers = ctl.ask(&Map::from_iter([(KEY.to_owned(), question)]), wait)?;
        let answer = answers.get(KEY).unwrap_or(&Value::Null);
        let action = answer.get("action").and_then(Value::as_str);
        if action == Some("accept") && answer["content"]["confirm"] == true {
            tracing::info!(
                changes = c.merged + c.archived,
                "the client confirmed a consolidation run"
            );
            return Ok(None);
        }
        let why = match action {
            _ if answer.is_null() => format!("no answer within {}", duration_words(wait)),
            Some("accept") => "the client did not confirm".to_owned(),
            Some(other) => format!("the client answered {other:?}"),
            None => "the client's answer was not a form's".to_owned(),
        };
        Ok(Some(RunReport {
            run_id: None,
            dry_run: false,
            state: DECLINED.into(),
            warnings: vec![format!(
                "{why}: nothing changed (the run would {}); run it again to be asked again, or \
                 with a larger policy.confirm_above",
                would(&c)
            )],
            counts: Counts::default(),
            millis: started.elapsed().as_millis() as u64,
            step_millis: Vec::new(),
            held_by: None,
            ..preview
        }))
    }
}
