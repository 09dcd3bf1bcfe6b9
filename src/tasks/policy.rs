//! The per-call decision: answer inline, hand back a task at once, or start and wait up to the
//! inline budget. Pure: it sees only the client's ability, the estimate and the budget.

use std::time::Duration;

/// How a call will be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Run it and answer with the result.
    Inline,
    /// Persist a task and answer with its handle at once.
    Task,
    /// Start it; answer inline if it ends within the budget, else with a task handle.
    Race,
}

/// Below this share of the budget, work is answered inline without racing.
const CHEAP_SHARE: f64 = 0.25;
/// Above this multiple of the budget, work becomes a task at once.
const EXPENSIVE_MULTIPLE: f64 = 4.0;

/// Why the client can or cannot receive a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Protocol 2026-07-28 or later and the request declares the tasks extension.
    Tasks,
    /// The request's protocol version is older than 2026-07-28.
    OldProtocol,
    /// The request does not declare the tasks extension.
    NotDeclared,
}

/// Decides how to answer; returns the plan and the reason (for `_meta` and logs).
pub fn decide(cap: Capability, estimate_ms: f64, budget: Duration) -> (Plan, String) {
    match cap {
        Capability::OldProtocol => {
            return (
                Plan::Inline,
                "protocol before 2026-07-28: answered inline with a work limit".into(),
            );
        }
        Capability::NotDeclared => {
            return (
                Plan::Inline,
                "client did not declare the tasks extension: answered inline with a work limit"
                    .into(),
            );
        }
        Capability::Tasks => {}
    }
    let budget_ms = budget.as_secs_f64() * 1e3;
    if budget.is_zero() {
        return (
            Plan::Task,
            "inline budget is 0: every eligible call is a task".into(),
        );
    }
    if estimate_ms <= budget_ms * CHEAP_SHARE {
        (
            Plan::Inline,
            format!("estimated {estimate_ms:.1} ms, within the {budget_ms:.0} ms inline budget"),
        )
    } else if estimate_ms >= budget_ms * EXPENSIVE_MULTIPLE {
        (
            Plan::Task,
            format!("estimated {estimate_ms:.0} ms, far over the {budget_ms:.0} ms inline budget"),
        )
    } else {
        (
            Plan::Race,
            format!(
                "estimated {estimate_ms:.0} ms, near the {budget_ms:.0} ms inline budget: started, task if not done in time"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        let b = Duration::from_millis(200);
        assert_eq!(decide(Capability::Tasks, 5.0, b).0, Plan::Inline);
        assert_eq!(decide(Capability::Tasks, 150.0, b).0, Plan::Race);
        assert_eq!(decide(Capability::Tasks, 5_000.0, b).0, Plan::Task);
        assert_eq!(decide(Capability::Tasks, 0.1, Duration::ZERO).0, Plan::Task);
        assert_eq!(decide(Capability::OldProtocol, 5_000.0, b).0, Plan::Inline);
        assert_eq!(decide(Capability::NotDeclared, 5_000.0, b).0, Plan::Inline);
    }
}
