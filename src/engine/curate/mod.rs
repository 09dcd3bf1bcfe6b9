//! Consolidation: runs that keep the graph healthy — merge near-duplicates, decay salience,
//! archive what nobody uses, keep relations tidy — without deleting anything. Each run is a row;
//! every change it makes goes through the recorded write path (history row with the run's id,
//! change-log entry), in small transactions, so agents' writes interleave, indexes follow, and
//! `undo` puts back exactly what was there. Steps plan from reads first (a dry run stops there)
//! and apply each planned change only when its rows are still as planned.

mod archive;
mod confirm;
mod contradict;
mod hygiene;
mod identity;
mod jobs;
mod merge;
mod owner;
mod pairs;
mod policy;
mod record;
pub mod salience;
mod summarise;
mod undo;

use std::time::Instant;

use serde::Serialize;

use crate::engine::Engine;
use crate::engine::control::{Answering, Control, WorkKind, WorkProgress};
use crate::error::{Error, Result};
use crate::model::{Memory, MemoryKey, Millis, RunRow, now_millis};
use crate::store::{self, memories, runs};

pub use policy::{Policy, Resolve, Step};
pub use undo::UndoReport;

/// Name of the lease that keeps consolidation to one run at a time per database.
pub const LEASE: &str = "consolidate";
/// A lease whose holder has not renewed it for this long is free.
pub const LEASE_STALE_MS: i64 = 30_000;
/// A run renews its lease at least this often, also while a step plans and commits nothing.
const LEASE_RENEW_MS: i64 = 2_000;
/// Pause after a batch, in multiples of the time the batch took (see [`Run::commit`]).
const PAUSE_FACTOR: u32 = 2;
/// Longest pause after a batch.
const MAX_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);
/// Most examples a report lists per step.
const MAX_EXAMPLES: usize = 10;
/// Memories read per page while planning.
const PAGE: usize = 2_000;

/// What to consolidate and how.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct ConsolidateRequest {
    /// Namespaces to consolidate (`None`: every namespace).
    pub namespaces: Option<Vec<String>>,
    /// Steps to run (`None`: all of them, in their order).
    pub steps: Option<Vec<String>>,
    /// Settings that differ from the defaults (see [`Policy`]).
    pub policy: Option<serde_json::Value>,
    /// Report what would change and write nothing.
    pub dry_run: bool,
    /// Who starts it: `tool:<caller>`, `cli` or `scheduler`.
    pub started_by: String,
    /// What its client can answer while it runs: a form asks it to confirm a run that would
    /// merge and archive more than the policy's `confirm_above`; its model writes summaries.
    #[serde(default)]
    pub answers: Answering,
}

/// Counters of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
pub struct Counts {
    /// Memories looked at (per step that reads memories, the largest).
    pub examined: u64,
    /// Memories merged into a survivor, and the survivors that took them.
    pub merged: u64,
    pub survivors: u64,
    /// Memories archived.
    pub archived: u64,
    /// Relations moved to a survivor, folded into an existing one, or closed (self-loops).
    pub relations_moved: u64,
    pub relations_folded: u64,
    pub relations_closed: u64,
    /// Memories whose salience is below the archive threshold (whether archived or not).
    pub low_salience: u64,
    /// Summaries written.
    #[serde(default)]
    pub summaries: u64,
    /// Contradictions found, and those resolved (the older one's validity ended).
    #[serde(default)]
    pub contradictions: u64,
    #[serde(default)]
    pub resolved: u64,
    /// Pairs of near-duplicates kept apart because they differ in a number, date, version, id,
    /// amount, name or negation (they say different things).
    #[serde(default)]
    pub kept_apart: u64,
}

/// One example of what a step changed (or would change).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Example {
    pub step: String,
    /// The memories concerned.
    pub ids: Vec<String>,
    /// Where they went (a merge's survivor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
    /// What a person reads: the survivor's content, the archived memory's content.
    pub text: String,
}

/// What a run did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The run's id (`None` for a dry run, which keeps no record).
    pub run_id: Option<String>,
    pub dry_run: bool,
    /// `completed`, `cancelled`, or `skipped` (another run holds the lease).
    pub state: String,
    pub namespaces: Vec<String>,
    pub steps: Vec<String>,
    pub counts: Counts,
    pub examples: Vec<Example>,
    pub warnings: Vec<String>,
    pub millis: u64,
    /// Milliseconds each step took, in the order they ran (a resumed run lists only the steps
    /// it ran).
    pub step_millis: Vec<(String, u64)>,
    /// When skipped: the run that holds the lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
}

/// The shared state of one run while it goes on.
pub(crate) struct Run<'a> {
    pub engine: &'a Engine,
    pub id: String,
    pub dry_run: bool,
    pub policy: Policy,
    pub actor: String,
    pub now: Millis,
    pub ctl: &'a dyn Control,
    /// What the run's client can answer (see [`ConsolidateRequest::answers`]).
    pub answers: Answering,
    pub counts: Counts,
    pub total: u64,
    pub examples: Vec<Example>,
    pub warnings: Vec<String>,
    /// Steps finished (a resumed run skips them).
    pub done_steps: Vec<String>,
    /// Milliseconds each step took in this process.
    step_millis: Vec<(String, u64)>,
    /// Memories the current step has looked at.
    seen: u64,
    holder: String,
    /// When the lease was last renewed.
    renewed: std::sync::atomic::AtomicI64,
}

/// What one batch changed (or would change).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub counts: Counts,
    pub examples: Vec<Example>,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.examined = self.examined.max(o.examined);
        self.merged += o.merged;
        self.survivors += o.survivors;
        self.archived += o.archived;
        self.relations_moved += o.relations_moved;
        self.relations_folded += o.relations_folded;
        self.relations_closed += o.relations_closed;
        self.low_salience += o.low_salience;
        self.summaries += o.summaries;
        self.contradictions += o.contradictions;
        self.resolved += o.resolved;
        self.kept_apart += o.kept_apart;
    }
}

impl Run<'_> {
    /// Reports progress and answers whether to stop.
    pub(crate) fn tick(&self) -> Result<()> {
        self.ctl.report(&WorkProgress {
            kind: WorkKind::Consolidate,
            done: self.counts.examined,
            total: self.total,
            merged: self.counts.merged,
            archived: self.counts.archived,
            summaries: self.counts.summaries,
            ..WorkProgress::default()
        });
        if self.ctl.is_cancelled() {
            return Err(Error::Cancelled);
        }
        self.keep_lease()
    }

    /// Renews the lease when a while has passed (a step that plans for minutes commits nothing
    /// that would), so that no other process takes it as stale and runs beside this one.
    fn keep_lease(&self) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = now_millis();
        if self.dry_run || now - self.renewed.load(Relaxed) < LEASE_RENEW_MS {
            return Ok(());
        }
        let held = self
            .engine
            .store
            .write(|tx| runs::renew_lease(tx, LEASE, &self.holder, now))?;
        if !held {
            return Err(lease_lost());
        }
        self.renewed.store(now, Relaxed);
        Ok(())
    }

    /// Counts `n` more memories looked at by the current step.
    pub(crate) fn saw(&mut self, n: usize) {
        self.seen += n as u64;
        self.counts.examined = self.counts.examined.max(self.seen);
    }

    /// Adds what a batch did to the run's counts and examples.
    pub(crate) fn add(&mut self, batch: Batch) {
        self.counts.add(&batch.counts);
        for ex in batch.examples {
            if self.examples.iter().filter(|e| e.step == ex.step).count() < MAX_EXAMPLES {
                self.examples.push(ex);
            }
        }
    }

    fn checkpoint(&self) -> serde_json::Value {
        serde_json::json!({"run": self.id, "done_steps": self.done_steps})
    }

    /// Commits `f` (one batch of changes) with the run's counts and checkpoint and renews the
    /// lease, in one transaction; then adds the batch to the run.
    pub(crate) fn commit(
        &mut self,
        f: impl FnOnce(&Run<'_>, &store::Db) -> Result<Batch>,
    ) -> Result<()> {
        let now = now_millis();
        let checkpoint = self.checkpoint();
        let task = self.ctl.task_id();
        let this = &*self;
        let began = Instant::now();
        let batch = self.engine.store.write(|tx| {
            let batch = f(this, tx)?;
            let mut counts = this.counts;
            counts.add(&batch.counts);
            runs::save_progress(
                tx,
                &this.id,
                &serde_json::to_value(counts)?,
                Some(&checkpoint),
            )?;
            if let Some(task) = &task {
                store::tasks::set_checkpoint(tx, task, &checkpoint)?;
            }
            if !runs::renew_lease(tx, LEASE, &this.holder, now)? {
                return Err(lease_lost());
            }
            Ok(batch)
        })?;
        self.renewed
            .store(now, std::sync::atomic::Ordering::Relaxed);
        self.ctl.checkpointed(&checkpoint);
        self.engine.mark_dirty();
        self.add(batch);
        // Yield twice as long as the batch took, like a database's vacuum cost delay: the
        // indexes follow and agents' calls go on between batches (a run's writes take at most a
        // third of a core).
        std::thread::sleep((began.elapsed() * PAUSE_FACTOR).min(MAX_PAUSE));
        Ok(())
    }
}

/// Calls `f` with each page of the live, unarchived memories of `ns`, then reports progress.
pub(super) fn for_each_page(
    run: &mut Run<'_>,
    ns: &str,
    mut f: impl FnMut(&mut Run<'_>, &[Memory]) -> Result<()>,
) -> Result<()> {
    let mut after = MemoryKey(0);
    loop {
        let page = run
            .engine
            .store
            .read(|c| memories::scan_page(c, ns, after, PAGE, false))?;
        let Some(last) = page.last() else { break };
        after = last.key;
        run.saw(page.len());
        f(run, &page)?;
        run.tick()?;
    }
    Ok(())
}

/// Another run took the lease over: this one stops rather than write beside it.
fn lease_lost() -> Error {
    Error::Conflict {
        reason: format!(
            "another run took the database over while this one had not renewed its lease for {} s",
            LEASE_STALE_MS / 1000
        ),
        hint: "what this run committed stays and can be undone; run again once the other ends"
            .into(),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl Engine {
    /// Runs consolidation (see the module docs). Only one run at a time holds a database: when
    /// another holds it, the report says `skipped` and names it. Cancellation stops between
    /// batches: what was committed stays consistent and can be undone.
    pub fn consolidate(&self, req: &ConsolidateRequest, ctl: &dyn Control) -> Result<RunReport> {
        let started = Instant::now();
        let steps = policy::parse_steps(req.steps.as_deref())?;
        let policy = Policy::parse(req.policy.as_ref())?;
        let namespaces = self.consolidation_scope(req.namespaces.as_deref())?;
        let resumed = ctl
            .resume_from()
            .and_then(|c| c.get("run").and_then(|r| r.as_str()).map(str::to_owned));
        let resumed = match resumed {
            Some(id) => self.store.read(|c| runs::get(c, &id))?,
            None => None,
        };
        if !req.dry_run
            && resumed.is_none()
            && req.answers.elicitation
            && ctl.can_ask()
            && let Some(declined) = self.confirm(req, &policy, ctl, started)?
        {
            return Ok(declined);
        }
        let now = now_millis();
        let id = match &resumed {
            Some(r) => r.id.clone(),
            None if req.dry_run => "dry-run".to_owned(),
            None => store::new_id("run_"),
        };
        let holder = owner::holder(&format!("run:{id}"));
        let mut run = Run {
            engine: self,
            id: id.clone(),
            dry_run: req.dry_run,
            policy,
            actor: format!("consolidate:{}", req.started_by),
            now,
            ctl,
            answers: req.answers,
            counts: resumed
                .as_ref()
                .and_then(|r| serde_json::from_value(r.counts.clone()).ok())
                .unwrap_or_default(),
            total: self.store.read(|c| memories::count_in(c, &namespaces))? as u64,
            examples: Vec::new(),
            warnings: Vec::new(),
            done_steps: resumed
                .as_ref()
                .and_then(|r| r.checkpoint.as_ref())
                .and_then(|c| serde_json::from_value(c["done_steps"].clone()).ok())
                .unwrap_or_default(),
            step_millis: Vec::new(),
            seen: 0,
            holder,
            renewed: std::sync::atomic::AtomicI64::new(now),
        };
        let names: Vec<String> = steps.iter().map(|s| s.name().to_owned()).collect();
        let mut report = RunReport {
            run_id: (!req.dry_run).then(|| id.clone()),
            dry_run: req.dry_run,
            state: "completed".into(),
            namespaces: namespaces.clone(),
            steps: names.clone(),
            counts: Counts::default(),
            examples: Vec::new(),
            warnings: Vec::new(),
            millis: 0,
            step_millis: Vec::new(),
            held_by: None,
        };
        if !req.dry_run {
            self.interrupt_dead_runs()?;
            let row = RunRow {
                id: id.clone(),
                started_by: req.started_by.clone(),
                namespaces: namespaces.clone(),
                steps: names,
                policy: serde_json::to_value(&run.policy)?,
                state: "running".into(),
                counts: serde_json::to_value(run.counts)?,
                checkpoint: None,
                task_id: ctl.task_id(),
                started_at: now,
                ended_at: None,
                undone_at: None,
                undone_by: None,
            };
            let taken = self.store.write(|tx| {
                if resumed.is_some()
                    && let Some(lease) = runs::lease(tx, LEASE)?
                    && lease.run_id.as_deref() == Some(id.as_str())
                {
                    // This run's own lease, from the process it was adopted from (the task
                    // runner decided that one is gone).
                    runs::release_lease(tx, LEASE, &lease.holder)?;
                }
                let taken =
                    runs::take_lease(tx, LEASE, &run.holder, Some(&id), now, LEASE_STALE_MS)?;
                if taken.is_ok() {
                    // Runs left `running` by a holder that is gone were interrupted (what they
                    // committed stays, and can be undone).
                    for r in runs::in_state(tx, "running")? {
                        if r.id != id {
                            runs::finish(tx, &r.id, "interrupted", &r.counts, now)?;
                        }
                    }
                    if resumed.is_some() && !runs::reopen(tx, &id)? {
                        return Err(Error::Conflict {
                            reason: format!(
                                "run {id} was undone after it was interrupted, so it is not resumed"
                            ),
                            hint: "start a new run".into(),
                        });
                    }
                    if resumed.is_none() {
                        runs::insert(tx, &row)?;
                        // A task stopped before its first batch resumes under this run too.
                        if let Some(task) = &row.task_id {
                            store::tasks::set_checkpoint(tx, task, &run.checkpoint())?;
                        }
                    }
                }
                Ok(taken)
            })?;
            if let Err(lease) = taken {
                report.state = "skipped".into();
                report.held_by = Some(lease.run_id.unwrap_or(lease.holder));
                report.millis = started.elapsed().as_millis() as u64;
                return Ok(report);
            }
        }
        let outcome = self.run_steps(&mut run, &steps, &namespaces);
        let state = match &outcome {
            Ok(()) => "completed",
            Err(Error::Cancelled) => "cancelled",
            Err(_) => "failed",
        };
        if !req.dry_run {
            let counts = serde_json::to_value(run.counts)?;
            let end = now_millis();
            let finished = self.store.write(|tx| {
                let finished = runs::finish(tx, &id, state, &counts, end)?;
                runs::release_lease(tx, LEASE, &run.holder)?;
                Ok(finished)
            })?;
            if !finished {
                tracing::warn!(run = %id, state, "the run was marked interrupted by another process before it ended; its state stays");
            }
            self.mark_dirty();
        }
        outcome?;
        report.counts = run.counts;
        report.examples = run.examples;
        report.warnings = run.warnings;
        report.step_millis = run.step_millis;
        report.millis = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    fn run_steps(&self, run: &mut Run<'_>, steps: &[Step], namespaces: &[String]) -> Result<()> {
        let decay = steps.contains(&Step::Decay);
        for step in steps {
            if run.done_steps.iter().any(|s| s == step.name()) {
                continue;
            }
            run.seen = 0;
            let started = Instant::now();
            for ns in namespaces {
                match step {
                    Step::Merge => merge::run(run, ns)?,
                    Step::Decay => archive::measure(run, ns)?,
                    Step::Archive => {
                        jobs::archive(run, ns)?;
                        archive::run(run, ns, decay)?;
                    }
                    Step::Summarise => {
                        summarise::run(run, ns)?;
                        jobs::summarise(run, ns)?;
                    }
                    Step::Contradictions => contradict::run(run, ns)?,
                    Step::Hygiene => hygiene::run(run, ns)?,
                }
                run.tick()?;
            }
            run.done_steps.push(step.name().to_owned());
            if !run.dry_run {
                run.commit(|_, _| Ok(Batch::default()))?;
            }
            run.step_millis
                .push((step.name().to_owned(), started.elapsed().as_millis() as u64));
        }
        Ok(())
    }

    /// The namespaces a run covers: those named (each must hold memories), or all.
    fn consolidation_scope(&self, asked: Option<&[String]>) -> Result<Vec<String>> {
        let known = self.store.read(memories::namespaces)?;
        let Some(asked) = asked else {
            return Ok(known);
        };
        if asked.is_empty() {
            return Err(Error::invalid(
                "namespaces",
                "is empty",
                "name at least one namespace, or leave `namespaces` out to consolidate all",
            ));
        }
        let mut out = Vec::with_capacity(asked.len());
        for (i, ns) in asked.iter().enumerate() {
            if !known.contains(ns) {
                let some: Vec<&str> = known.iter().take(10).map(String::as_str).collect();
                return Err(Error::invalid(
                    format!("namespaces[{i}]"),
                    format!("{ns:?} holds no memories"),
                    format!("name one of the namespaces that exist: {}", some.join(", ")),
                ));
            }
            if !out.contains(ns) {
                out.push(ns.clone());
            }
        }
        Ok(out)
    }

    /// Checks a request as [`Engine::consolidate`] would and counts the memories it covers.
    pub fn consolidation_size(&self, req: &ConsolidateRequest) -> Result<i64> {
        policy::parse_steps(req.steps.as_deref())?;
        Policy::parse(req.policy.as_ref())?;
        let namespaces = self.consolidation_scope(req.namespaces.as_deref())?;
        self.store.read(|c| memories::count_in(c, &namespaces))
    }

    /// The chat endpoint that writes abstractive summaries, when one is configured.
    pub(crate) fn summarizer(&self) -> Option<&std::sync::Arc<dyn crate::embed::chat::Summarizer>> {
        self.summarizer.as_ref()
    }

    /// Marks `interrupted` the runs left `running` by a holder that is gone — its lease lost,
    /// silent for [`LEASE_STALE_MS`], or its process (on this machine) ended — and frees a lease
    /// whose holder is gone, so that `undo` works at once and the next run need not wait for
    /// the heartbeat to go stale. What such a run committed stays, whole batches only. Called
    /// when the engine opens, and before a run or an undo starts; returns the runs marked.
    pub fn interrupt_dead_runs(&self) -> Result<Vec<String>> {
        let now = now_millis();
        let lease_dead = |l: &runs::Lease| {
            now - l.heartbeat_at >= LEASE_STALE_MS || owner::holder_gone(&l.holder)
        };
        let dead = |r: &RunRow, lease: &Option<runs::Lease>| match lease {
            Some(l) if l.run_id.as_deref() == Some(r.id.as_str()) => lease_dead(l),
            _ => true,
        };
        let (running, lease) = self
            .store
            .read(|c| Ok((runs::in_state(c, "running")?, runs::lease(c, LEASE)?)))?;
        if !running.iter().any(|r| dead(r, &lease)) && !lease.as_ref().is_some_and(lease_dead) {
            return Ok(Vec::new());
        }
        // Again in the write transaction: a run may have renewed or ended meanwhile.
        let marked = self.store.write(|tx| {
            let lease = runs::lease(tx, LEASE)?;
            let mut marked = Vec::new();
            for r in runs::in_state(tx, "running")? {
                if dead(&r, &lease) && runs::finish(tx, &r.id, "interrupted", &r.counts, now)? {
                    marked.push(r.id);
                }
            }
            if let Some(l) = &lease
                && lease_dead(l)
            {
                runs::release_lease(tx, LEASE, &l.holder)?;
            }
            Ok(marked)
        })?;
        for id in &marked {
            tracing::info!(run = %id, "a consolidation run whose process is gone was marked interrupted; what it committed stays and can be undone");
        }
        Ok(marked)
    }

    /// The newest consolidation runs, newest first.
    pub fn consolidation_runs(&self, limit: usize) -> Result<Vec<RunRow>> {
        self.store.read(|c| runs::list(c, limit))
    }
}

#[cfg(test)]
mod tests;
