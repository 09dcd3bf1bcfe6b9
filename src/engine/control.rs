//! Control of long work: the counters it reports ([`WorkProgress`], read by the kind of work),
//! the [`Control`] a call obeys (progress, cancellation, checkpoints, questions to the client),
//! the plain [`Progressing`] control of inline calls, and how progress reads to a person and to a
//! program. Walks, path searches, imports, exports and consolidation take a `&dyn Control`; the
//! task runner supplies one that heartbeats to the task row.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// Work counters of a long call, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkProgress {
    pub visited: u64,
    pub frontier: u64,
    pub depth: u8,
    pub max_depth: u8,
    /// Items done and expected in a phase that counts items (scoring, importing); 0 when unknown.
    pub done: u64,
    pub total: u64,
    /// Most units of work a walk may take (nodes it may settle, plus memories it will score
    /// against a focus); 0 when not known. Only shrinks, to the truth once the walk has ended.
    pub bound: u64,
    /// What the counters count.
    pub kind: WorkKind,
    /// Records that failed (imports).
    pub errors: u64,
    /// Memories merged and archived, summaries written (consolidation).
    pub merged: u64,
    pub archived: u64,
    pub summaries: u64,
}

/// The kind of long work, which decides how its progress reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkKind {
    /// A graph walk: nodes visited, depth, frontier.
    #[default]
    Walk,
    /// An import: items read of items expected, errors.
    Import,
    /// An export: memories and relations written.
    Export,
    /// A consolidation run: memories examined, merged, archived, summaries written.
    Consolidate,
}

/// What the client behind a call can answer when its work asks ([`Control::ask`]): forms
/// (`elicitation/create`) and its own model (`sampling/createMessage`), as it declared them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Answering {
    pub elicitation: bool,
    pub sampling: bool,
}

/// How a long call reports progress and learns it should stop.
pub trait Control: Sync {
    fn report(&self, p: &WorkProgress);
    fn is_cancelled(&self) -> bool;
    /// Id of the task row the work belongs to, once it is a task: resumable work saves its
    /// checkpoints there, in the transactions that commit the work.
    fn task_id(&self) -> Option<String> {
        None
    }
    /// Where resumed work goes on from: the row's last checkpoint after a restart.
    fn resume_from(&self) -> Option<serde_json::Value> {
        None
    }
    /// The latest checkpoint, so a task row created after the work started begins with it.
    fn checkpointed(&self, _checkpoint: &serde_json::Value) {}
    /// Whether [`Control::ask`] can reach the client: the work runs (or may become) a task.
    fn can_ask(&self) -> bool {
        false
    }
    /// Asks the client for input and waits for its answers (MCP `input_required`): `requests`
    /// maps keys the work chooses to requests (`{"method": "elicitation/create", "params": …}`).
    /// Keys name the question, not the moment, so that work re-run after a restart finds the
    /// answers already given and asks only for the rest. Waits at most `wait`: a request still
    /// unanswered then is answered `null` (recorded so, so a re-run does not ask again), and
    /// the work takes its stated default. Returns every answer by key; `Error::Cancelled` when
    /// the work is stopped while it waits. Only work that runs as a task can ask; elsewhere
    /// this is an error that says so.
    fn ask(
        &self,
        _requests: &serde_json::Map<String, serde_json::Value>,
        _wait: std::time::Duration,
    ) -> Result<serde_json::Map<String, serde_json::Value>> {
        Err(Error::invalid(
            "input",
            "this call needs answers from the client, and only a task can wait for them",
            "call it from a client that declares the MCP tasks extension (io.modelcontextprotocol/tasks)",
        ))
    }
}

/// A control that records the last progress and is cancelled by a flag; also the one used inline.
#[derive(Debug, Default)]
pub struct Progressing {
    pub visited: AtomicU64,
    pub frontier: AtomicU64,
    pub depth: AtomicU64,
    pub max_depth: AtomicU64,
    pub bound: AtomicU64,
    pub cancelled: AtomicBool,
}

impl Progressing {
    pub fn snapshot(&self) -> WorkProgress {
        WorkProgress {
            visited: self.visited.load(Ordering::Relaxed),
            frontier: self.frontier.load(Ordering::Relaxed),
            depth: self.depth.load(Ordering::Relaxed) as u8,
            max_depth: self.max_depth.load(Ordering::Relaxed) as u8,
            bound: self.bound.load(Ordering::Relaxed),
            ..WorkProgress::default()
        }
    }
}

impl Control for Progressing {
    fn report(&self, p: &WorkProgress) {
        self.visited.fetch_max(p.visited, Ordering::Relaxed);
        self.frontier.store(p.frontier, Ordering::Relaxed);
        self.depth.store(u64::from(p.depth), Ordering::Relaxed);
        self.max_depth
            .store(u64::from(p.max_depth), Ordering::Relaxed);
        self.bound.store(p.bound, Ordering::Relaxed);
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// One-line human summary of progress: "visited 48,211 nodes · depth 3/5 · frontier 9,804",
/// "imported 41,200 / 100,000 items · 3 errors",
/// "examined 41,200 / 100,000 memories · 812 merged · 40 archived · 12 summaries".
pub fn status_message(p: &WorkProgress) -> String {
    match p.kind {
        WorkKind::Walk => {}
        WorkKind::Consolidate => {
            let mut s = format!("examined {}", group(p.done));
            if p.total > 0 {
                s.push_str(&format!(" / {}", group(p.total)));
            }
            let plural = if p.summaries == 1 { "y" } else { "ies" };
            s.push_str(&format!(
                " memories · {} merged · {} archived · {} summar{plural}",
                group(p.merged),
                group(p.archived),
                group(p.summaries)
            ));
            return s;
        }
        WorkKind::Import | WorkKind::Export => {
            let verb = if p.kind == WorkKind::Import {
                "imported"
            } else {
                "exported"
            };
            let mut s = format!("{verb} {}", group(p.done));
            if p.total > 0 {
                s.push_str(&format!(" / {}", group(p.total)));
            }
            s.push_str(" items");
            if p.kind == WorkKind::Import {
                let plural = if p.errors == 1 { "" } else { "s" };
                s.push_str(&format!(" · {} error{plural}", group(p.errors)));
            }
            return s;
        }
    }
    let mut s = format!("visited {} nodes", group(p.visited));
    if p.max_depth > 0 {
        s.push_str(&format!(" · depth {}/{}", p.depth, p.max_depth));
    }
    s.push_str(&format!(" · frontier {}", group(p.frontier)));
    if p.total > 0 {
        s.push_str(&format!(" · scored {} / {}", group(p.done), group(p.total)));
    }
    if p.bound > 0 {
        s.push_str(&format!(
            " · {}%",
            work_done(p) * 100 / work_total(p).max(1)
        ));
    }
    s
}

/// How much work is done, as one number that only grows (the `progress` of notifications): a
/// walk's nodes visited plus the memories scored against its focus; an import's or export's items.
pub fn work_done(p: &WorkProgress) -> u64 {
    match p.kind {
        WorkKind::Walk => p.visited + p.done,
        WorkKind::Import | WorkKind::Export | WorkKind::Consolidate => p.done,
    }
}

/// The most [`work_done`] will reach (the `total` of notifications), never below it: a walk's
/// bound (nodes it may settle, plus memories to score against a focus; exact once the walk has
/// ended); an import's records in its files; an export's memories in its scope; a consolidation's
/// memories in its plan. Unknown counts read as the work done so far.
pub fn work_total(p: &WorkProgress) -> u64 {
    let total = match p.kind {
        WorkKind::Walk if p.bound > 0 => p.bound,
        WorkKind::Walk => p.visited + p.total,
        WorkKind::Import | WorkKind::Export | WorkKind::Consolidate => p.total,
    };
    total.max(work_done(p))
}

/// Machine-readable counters of progress: those of its kind, and the pair a host draws as a bar
/// (`progress` of `progressTotal`: [`work_done`] of [`work_total`]).
pub fn progress_json(p: &WorkProgress) -> Value {
    let mut v = counters_json(p);
    if let Value::Object(o) = &mut v {
        o.insert("progress".into(), json!(work_done(p)));
        o.insert("progressTotal".into(), json!(work_total(p)));
    }
    v
}

/// The counters of `p`'s kind.
fn counters_json(p: &WorkProgress) -> Value {
    match p.kind {
        WorkKind::Walk => {
            json!({"visited": p.visited, "frontier": p.frontier, "depth": p.depth, "maxDepth": p.max_depth, "done": p.done, "total": p.total})
        }
        WorkKind::Import => json!({"done": p.done, "total": p.total, "errors": p.errors}),
        WorkKind::Export => json!({"done": p.done, "total": p.total}),
        WorkKind::Consolidate => {
            json!({"done": p.done, "total": p.total, "merged": p.merged, "archived": p.archived, "summaries": p.summaries})
        }
    }
}

/// A wait as a person says it: "45 s", "5 min", "2 h".
pub fn duration_words(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 3_600 && s.is_multiple_of(3_600) {
        format!("{} h", s / 3_600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else {
        format!("{s} s")
    }
}

/// `n` with a comma between each group of three digits (`12,345`).
pub(crate) fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pair_never_has_more_done_than_total() {
        let walk = WorkProgress {
            visited: 500,
            bound: 300,
            ..WorkProgress::default()
        };
        assert_eq!((work_done(&walk), work_total(&walk)), (500, 500));
        let focus = WorkProgress {
            visited: 1_000,
            done: 200,
            total: 1_000,
            bound: 2_000,
            ..WorkProgress::default()
        };
        assert_eq!((work_done(&focus), work_total(&focus)), (1_200, 2_000));
        let import = WorkProgress {
            kind: WorkKind::Import,
            done: 10,
            ..WorkProgress::default()
        };
        assert_eq!((work_done(&import), work_total(&import)), (10, 10));
        let v = progress_json(&focus);
        assert_eq!(
            (v["progress"].as_u64(), v["progressTotal"].as_u64()),
            (Some(1_200), Some(2_000))
        );
    }

    #[test]
    fn messages_read_well() {
        let p = WorkProgress {
            visited: 48_211,
            frontier: 9_804,
            depth: 3,
            max_depth: 5,
            ..WorkProgress::default()
        };
        assert_eq!(
            status_message(&p),
            "visited 48,211 nodes · depth 3/5 · frontier 9,804"
        );
        let import = WorkProgress {
            kind: WorkKind::Import,
            done: 41_200,
            total: 100_000,
            errors: 3,
            ..WorkProgress::default()
        };
        assert_eq!(
            status_message(&import),
            "imported 41,200 / 100,000 items · 3 errors"
        );
        let bounded = WorkProgress {
            bound: 200_000,
            ..p
        };
        assert_eq!(
            status_message(&bounded),
            "visited 48,211 nodes · depth 3/5 · frontier 9,804 · 24%"
        );
        assert_eq!(group(1_000_000), "1,000,000");
        assert_eq!(group(999), "999");
    }
}
