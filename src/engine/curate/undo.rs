//! Undoing a run: its history, replayed backwards, puts every memory and relation it changed
//! back as it was (what it created is forgotten), in one transaction. A run that later changes
//! built on is refused, naming them — or, for later runs with `cascade`, they are undone first,
//! newest first.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use crate::engine::Engine;
use crate::engine::write::snapshot;
use crate::error::{Error, Result};
use crate::model::{Memory, MemoryKey, RunRow, now_millis};
use crate::store::history::{self, Entity, RunEntry};
use crate::store::relations::{self, RelationRow};
use crate::store::{Db, changes, memories, runs};

/// What an undo put back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UndoReport {
    /// The runs undone, in the order they were (later runs first when cascading).
    pub runs: Vec<String>,
    pub memories: u64,
    pub relations: u64,
}

/// Later changes to what a run changed: the later runs (by id) and other writers (by actor, with
/// the memory or relation they changed).
struct Later {
    runs: BTreeSet<String>,
    others: Vec<(String, String)>,
}

fn later_changes(db: &Db, entries: &[RunEntry]) -> Result<Later> {
    let mut last: HashMap<(bool, i64), i64> = HashMap::new();
    for e in entries {
        last.insert((e.entity == Entity::Memory, e.key), e.seq);
    }
    let mut later = Later {
        runs: BTreeSet::new(),
        others: Vec::new(),
    };
    for (&(is_memory, key), &seq) in &last {
        let entity = if is_memory {
            Entity::Memory
        } else {
            Entity::Relation
        };
        for (actor, run) in history::changed_after(db, entity, key, seq)? {
            match run {
                Some(r) => {
                    let undone = runs::get(db, &r)?.is_some_and(|r| r.state == "undone");
                    if !undone {
                        later.runs.insert(r);
                    }
                }
                // Undoing a later run writes history too; that run is undone already.
                None if actor.starts_with("undo:") => {}
                None => {
                    let what = if is_memory {
                        memories::by_key(db, MemoryKey(key))?.map(|m| m.id)
                    } else {
                        relations::row(db, key)?.map(|r| r.id)
                    };
                    later.others.push((actor, what.unwrap_or_default()));
                }
            }
        }
    }
    Ok(later)
}

impl Engine {
    /// Undoes consolidation run `id` (see the module docs); `actor` is recorded in history.
    pub fn undo_consolidation(&self, id: &str, cascade: bool, actor: &str) -> Result<UndoReport> {
        let mut report = UndoReport {
            runs: Vec::new(),
            memories: 0,
            relations: 0,
        };
        // Uses recorded before the undo (a recall a moment ago, not yet written by the background
        // job) happened after the run: written first, they are put back with the rest, instead
        // of landing on the restored rows afterwards.
        self.flush_touched();
        // A run whose process died is interrupted, not running: it can be undone at once.
        self.interrupt_dead_runs()?;
        self.store
            .write(|tx| undo_in(tx, id, cascade, actor, &mut report, 0))?;
        self.mark_dirty();
        Ok(report)
    }
}

fn check(db: &Db, id: &str) -> Result<RunRow> {
    let run = runs::get(db, id)?.ok_or_else(|| {
        Error::not_found(
            "consolidation run",
            id,
            "check `undo`: give a run id from a consolidate report or `consolidate --runs`",
        )
    })?;
    match run.state.as_str() {
        "undone" => Err(Error::Conflict {
            reason: format!("run {id} was undone already"),
            hint: "nothing to do; list runs to see their states".into(),
        }),
        "running" => Err(Error::Conflict {
            reason: format!("run {id} is still running"),
            hint: "cancel it (or wait for it to end), then undo it".into(),
        }),
        _ => Ok(run),
    }
}

fn undo_in(
    tx: &Db,
    id: &str,
    cascade: bool,
    actor: &str,
    report: &mut UndoReport,
    depth: usize,
) -> Result<()> {
    check(tx, id)?;
    let entries = history::of_run(tx, id)?;
    let later = later_changes(tx, &entries)?;
    if let Some((who, what)) = later.others.first() {
        return Err(Error::Conflict {
            reason: format!(
                "{} change(s) made after run {id} by others would be overwritten (first: {what} by {who})",
                later.others.len()
            ),
            hint: "undo or redo those changes by hand; the run's history keeps every version it replaced".into(),
        });
    }
    if !later.runs.is_empty() {
        if !cascade || depth > 64 {
            let names: Vec<&str> = later.runs.iter().map(String::as_str).collect();
            return Err(Error::Conflict {
                reason: format!("later runs built on run {id}: {}", names.join(", ")),
                hint: "undo those first (newest first), or pass cascade to undo them in order"
                    .into(),
            });
        }
        // Newest first: a later run's own later runs are undone by the recursion.
        let mut order: Vec<RunRow> = later
            .runs
            .iter()
            .filter_map(|r| runs::get(tx, r).transpose())
            .collect::<Result<_>>()?;
        order.sort_by_key(|r| std::cmp::Reverse(r.started_at));
        for r in order {
            if runs::get(tx, &r.id)?.is_some_and(|r| r.state != "undone") {
                undo_in(tx, &r.id, true, actor, report, depth + 1)?;
            }
        }
    }
    let who = format!("undo:{id}");
    let now = now_millis();
    for e in entries.iter().rev() {
        match e.entity {
            Entity::Memory => {
                let Some(current) = memories::by_key(tx, MemoryKey(e.key))? else {
                    continue;
                };
                let before = if e.previous.is_null() {
                    // Created by the run: forgotten again.
                    let mut gone = current.clone();
                    gone.deleted_at = Some(current.deleted_at.unwrap_or(now));
                    gone
                } else {
                    serde_json::from_value::<Memory>(e.previous.clone())?
                };
                history::record(
                    tx,
                    Entity::Memory,
                    e.key,
                    "undo",
                    &who,
                    now,
                    &snapshot(&current),
                )?;
                memories::save_all(tx, &before)?;
                let op = if before.deleted_at.is_some() {
                    changes::ChangeOp::Delete
                } else {
                    changes::ChangeOp::Upsert
                };
                changes::log_memory(tx, before.key, op)?;
                report.memories += 1;
            }
            Entity::Relation => {
                let Some(current) = relations::row(tx, e.key)? else {
                    continue;
                };
                let before = if e.previous.is_null() {
                    RelationRow {
                        deleted_at: Some(current.deleted_at.unwrap_or(now)),
                        ..current.clone()
                    }
                } else {
                    serde_json::from_value::<RelationRow>(e.previous.clone())?
                };
                history::record(
                    tx,
                    Entity::Relation,
                    e.key,
                    "undo",
                    &who,
                    now,
                    &serde_json::to_value(&current)?,
                )?;
                relations::write_row(tx, &before)?;
                changes::log_relation(tx, e.key)?;
                report.relations += 1;
            }
        }
    }
    runs::set_undone(tx, id, now, actor)?;
    report.runs.push(id.to_owned());
    Ok(())
}
