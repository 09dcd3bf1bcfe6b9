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

/// A plan with the estimate it was made from (zero when there was none): the pace of polling
/// starts from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub plan: Plan,
    pub estimate: Duration,
}

impl From<Plan> for Decision {
    fn from(plan: Plan) -> Decision {
        Decision {
            plan,
            estimate: Duration::ZERO,
        }
    }
}

/// Below this share of the budget, work is answered inline without racing.
const CHEAP_SHARE: f64 = 0.25;
/// Above this multiple of the budget, work becomes a task at once.
const EXPENSIVE_MULTIPLE: f64 = 4.0;

/// Why the client can or cannot receive a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// The client declared the tasks extension (on the request, or in a 2025-11-25 `initialize`).
    Tasks,
    /// A 2025-11-25 session whose client did not declare the tasks extension.
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
                "2025-11-25 session without the tasks extension: answered inline with a work limit"
                    .into(),
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

/// The shortest poll interval advised: a task is not worth looking at more often (its row is
/// written every 100 ms).
pub const POLL_FLOOR: Duration = Duration::from_millis(100);
/// The longest poll interval advised, so a host's progress bar still moves.
pub const POLL_CEILING: Duration = Duration::from_secs(10);
/// Polls advised per expected duration (when neither floor nor ceiling applies).
const POLLS_PER_DURATION: u32 = 5;

/// How long a poller should wait before looking again at work expected to take `expected` in
/// all, of which `elapsed` has passed: a fifth of the expected duration, but not past its
/// expected end (so the poll after the end finds the result), and never less than a fifth of
/// the time taken so far (work that overruns its estimate is not polled ever faster); between
/// [`POLL_FLOOR`] and [`POLL_CEILING`]. So a poller that follows the advice looks about five
/// times in a run that goes as expected, and once per ten seconds beyond 50 seconds.
pub fn poll_interval(expected: Duration, elapsed: Duration) -> Duration {
    let remaining = expected.saturating_sub(elapsed);
    let step = (expected / POLLS_PER_DURATION)
        .min(remaining)
        .max(elapsed / POLLS_PER_DURATION);
    step.clamp(POLL_FLOOR, POLL_CEILING)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls made by a poller that follows the advice from the start of work that takes
    /// `actual`, expected to take `expected`.
    fn polls(expected: Duration, actual: Duration) -> u32 {
        let (mut t, mut n) = (Duration::ZERO, 0);
        while t < actual {
            t += poll_interval(expected, t);
            n += 1;
        }
        n
    }

    #[test]
    fn polls_follow_the_expected_duration() {
        let s = Duration::from_secs;
        for (expected, actual, most) in [
            (s(1), s(1), 5),
            (s(30), s(30), 5),
            (s(150), s(150), 15),
            // Estimates off by half either way cost a few polls more, never hundreds.
            (s(1), s(2), 12),
            (s(30), s(15), 3),
            (s(150), s(300), 30),
        ] {
            let n = polls(expected, actual);
            assert!(
                n <= most,
                "{expected:?} expected, {actual:?} taken: {n} polls"
            );
        }
        assert_eq!(poll_interval(Duration::ZERO, Duration::ZERO), POLL_FLOOR);
        assert_eq!(poll_interval(s(3_600), s(10)), POLL_CEILING);
    }

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
