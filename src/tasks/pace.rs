//! How a task's progress reads while it runs in this process: the `progress`/`progressTotal`
//! pair a host draws as a bar (never backwards, also after another process adopted the task),
//! the note that it was resumed, and the poll interval that follows the work — from the
//! estimate at first, then from the rate the work actually goes at.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::policy::poll_interval;
use crate::engine::control::{WorkProgress, progress_json, status_message, work_done, work_total};
use crate::lock::lock;

/// Share of the rest of the work that must be done here before its rate is trusted over the
/// estimate.
const TRUST_RATE_AFTER: f64 = 0.05;
/// How long the status message of an adopted task says it was resumed, at least.
const SAY_RESUMED_FOR: Duration = Duration::from_secs(3);

/// The pace of one run of a task's work in this process.
#[derive(Debug)]
pub(crate) struct Pace {
    started: Instant,
    /// What the work was expected to take when it started here (zero: not known).
    estimate: Duration,
    /// The progress the task had reached before this process took it over: reported progress
    /// never goes below it.
    floor: u64,
    resumed: bool,
    /// The first progress seen here, and when: the rate of the work is measured from it.
    first: Mutex<Option<(Instant, u64)>>,
}

/// The task as it reads now.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub status_message: String,
    pub progress: Value,
    pub poll_interval: Duration,
}

impl Pace {
    /// Work starting now, expected to take `estimate`.
    pub(crate) fn fresh(estimate: Duration) -> Pace {
        Pace {
            started: Instant::now(),
            estimate,
            floor: 0,
            resumed: false,
            first: Mutex::new(None),
        }
    }

    /// Work taken over from another process, whose row last read `progress`.
    pub(crate) fn resumed(progress: &Value) -> Pace {
        Pace {
            floor: progress["progress"].as_u64().unwrap_or(0),
            resumed: true,
            ..Pace::fresh(Duration::ZERO)
        }
    }

    /// How the work reads at `p`.
    pub(crate) fn read(&self, p: &WorkProgress) -> Reading {
        let (done, total) = (work_done(p), work_total(p));
        let shown = done.max(self.floor);
        let mut progress = progress_json(p);
        let mut status_message = status_message(p);
        if let Value::Object(o) = &mut progress {
            o.insert("progress".into(), json!(shown));
            o.insert("progressTotal".into(), json!(total.max(shown)));
            if self.resumed {
                o.insert("resumedFrom".into(), json!(self.floor));
            }
        }
        if self.resumed && (done <= self.floor || self.started.elapsed() < SAY_RESUMED_FOR) {
            status_message.push_str(" · resumed on another server");
        }
        Reading {
            status_message,
            progress,
            poll_interval: self.poll_interval(done, total),
        }
    }

    /// The poll interval at `done` of `total`: from the rate since the first progress seen here
    /// once a share of the rest is done, else from the estimate.
    fn poll_interval(&self, done: u64, total: u64) -> Duration {
        let elapsed = self.started.elapsed();
        let (t0, d0) = *lock(&self.first).get_or_insert((Instant::now(), done));
        let mut expected = self.estimate;
        if done > d0 && total > done {
            let share = (done - d0) as f64 / (total - d0) as f64;
            if share >= TRUST_RATE_AFTER {
                let per_unit = t0.elapsed().as_secs_f64() / (done - d0) as f64;
                expected = elapsed + Duration::from_secs_f64(per_unit * (total - done) as f64);
            }
        }
        poll_interval(expected, elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::control::WorkKind;

    fn import(done: u64, total: u64) -> WorkProgress {
        WorkProgress {
            kind: WorkKind::Import,
            done,
            total,
            ..WorkProgress::default()
        }
    }

    #[test]
    fn an_adopted_task_never_reads_below_where_it_was() {
        let pace = Pace::resumed(&json!({"progress": 40_000, "progressTotal": 100_000}));
        let r = pace.read(&import(0, 100_000));
        assert_eq!(r.progress["progress"], 40_000);
        assert_eq!(r.progress["progressTotal"], 100_000);
        assert_eq!(r.progress["resumedFrom"], 40_000);
        assert!(
            r.status_message.ends_with(" · resumed on another server"),
            "{}",
            r.status_message
        );
        let r = pace.read(&import(41_000, 100_000));
        assert_eq!(r.progress["progress"], 41_000);
    }

    #[test]
    fn the_interval_follows_the_estimate_then_the_rate() {
        let pace = Pace::fresh(Duration::from_secs(30));
        assert_eq!(
            pace.read(&import(0, 100)).poll_interval,
            Duration::from_secs(6)
        );
        // Half done at once: the rest looks quick, so the next look comes soon.
        let r = pace.read(&import(50, 100));
        assert!(r.poll_interval < Duration::from_secs(1), "{r:?}");
        let fresh = Pace::fresh(Duration::ZERO).read(&import(0, 0));
        assert!(!fresh.status_message.contains("resumed"));
        assert!(fresh.progress.get("resumedFrom").is_none());
    }
}
