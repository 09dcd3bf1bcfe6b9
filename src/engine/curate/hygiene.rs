//! The hygiene step: closes self-loops and moves relations still attached to merged memories to
//! their survivors (folding them into a relation already there). Relations to forgotten memories
//! stay as they are: restoring the memory brings them back. Exact duplicates cannot exist (a
//! relation is unique on its ends and kind); moving one onto another folds them.

use std::collections::HashMap;

use crate::engine::curate::merge::repoint;
use crate::engine::curate::{Batch, Run};
use crate::error::Result;
use crate::model::{Memory, MemoryKey};
use crate::store::relations::{self, RelationRow};
use crate::store::{Db, memories};

/// Relations read per page (and changed per transaction at most).
const PAGE: usize = 1_000;
/// Longest chain of merges followed to a survivor.
const MAX_HOPS: usize = 16;

pub(super) fn run(run: &mut Run<'_>, ns: &str) -> Result<()> {
    let mut after = 0i64;
    loop {
        let page = run
            .engine
            .store
            .read(|c| relations::rows_page_in(c, ns, after, PAGE))?;
        let Some(last) = page.last() else { break };
        after = last.key;
        let todo = run.engine.store.read(|c| plan(c, &page))?;
        if !todo.is_empty() {
            if run.dry_run {
                let mut batch = Batch::default();
                for (r, to) in &todo {
                    if to.0 == to.1 {
                        batch.counts.relations_closed += 1;
                    } else if (to.0, to.1) != (r.src, r.dst) {
                        batch.counts.relations_moved += 1;
                    }
                }
                run.add(batch);
            } else {
                run.commit(|run, tx| apply(run, tx, &todo))?;
            }
        }
        run.tick()?;
    }
    Ok(())
}

/// The survivor a merged memory ended in (itself when it was not merged).
fn survivor(db: &Db, m: &Memory) -> Result<MemoryKey> {
    let mut at = m.clone();
    for _ in 0..MAX_HOPS {
        let Some(into) = at.merged_into.clone() else {
            return Ok(at.key);
        };
        match memories::by_id(db, &into)? {
            Some(next) => at = next,
            None => return Ok(at.key),
        }
    }
    Ok(at.key)
}

/// The relations of `page` to change, each with the ends it should have.
fn plan(db: &Db, page: &[RelationRow]) -> Result<Vec<(RelationRow, (i64, i64))>> {
    let mut ends: Vec<MemoryKey> = page
        .iter()
        .flat_map(|r| [MemoryKey(r.src), MemoryKey(r.dst)])
        .collect();
    ends.sort();
    ends.dedup();
    let rows: HashMap<MemoryKey, Memory> = memories::by_keys(db, &ends)?
        .into_iter()
        .map(|m| (m.key, m))
        .collect();
    let end_of = |k: i64| -> Result<i64> {
        match rows.get(&MemoryKey(k)) {
            Some(m) if m.merged_into.is_some() => Ok(survivor(db, m)?.0),
            _ => Ok(k),
        }
    };
    let mut out = Vec::new();
    for r in page {
        let to = (end_of(r.src)?, end_of(r.dst)?);
        if to.0 == to.1 || to != (r.src, r.dst) {
            out.push((r.clone(), to));
        }
    }
    Ok(out)
}

fn apply(run: &Run<'_>, db: &Db, todo: &[(RelationRow, (i64, i64))]) -> Result<Batch> {
    let mut batch = Batch::default();
    for (planned, (src, dst)) in todo {
        // Changed since planned: left for the next run.
        if relations::row(db, planned.key)?.as_ref() != Some(planned) {
            continue;
        }
        if src == dst && planned.src == planned.dst {
            let mut closed = planned.clone();
            closed.deleted_at = Some(run.now);
            run.save_relation(db, planned, &closed, "close")?;
            batch.counts.relations_closed += 1;
            continue;
        }
        let to = |k: i64| {
            if k == planned.src {
                *src
            } else if k == planned.dst {
                *dst
            } else {
                k
            }
        };
        repoint(run, db, planned, to, &mut batch.counts)?;
    }
    Ok(batch)
}
