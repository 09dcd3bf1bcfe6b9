//! The decay and archive steps. Decay writes nothing: salience is a stored value and the time it
//! was computed, decayed where it is read; the step measures it with the run's half-life. Archive
//! moves memories of low salience, unused for long, not pinned (importance ≥ 0.9 or a `pinned`
//! tag), not named and not kept by their job (see `jobs`), to the archived state: out of recall
//! and traversal until asked for or restored. Nothing is deleted.

use crate::engine::curate::salience::decayed;
use crate::engine::curate::{Batch, Example, Run, truncate};
use crate::error::Result;
use crate::model::{Memory, MemoryKey};
use crate::store::{Db, memories};

/// Importance from which a memory is pinned.
pub(super) const PINNED_IMPORTANCE: f64 = 0.9;
/// The tag that pins a memory.
pub(super) const PINNED_TAG: &str = "pinned";
/// Memories archived per transaction.
const PER_BATCH: usize = 500;
const DAY_MS: f64 = 86_400_000.0;

/// Salience of `m` now, decayed with the run's half-life unless decay is off.
fn salience(run: &Run<'_>, m: &Memory, decay: bool) -> f64 {
    if decay {
        decayed(
            m.salience,
            m.salience_at,
            run.now,
            run.policy.half_life_days,
        )
    } else {
        m.salience
    }
}

fn archivable(run: &Run<'_>, m: &Memory, decay: bool) -> bool {
    m.deleted_at.is_none()
        && m.archived_at.is_none()
        && m.name.is_none()
        && m.importance < PINNED_IMPORTANCE
        && !m.tags.iter().any(|t| t == PINNED_TAG)
        && (run.now - m.salience_at) as f64 >= run.policy.archive_unused_days * DAY_MS
        && salience(run, m, decay) < run.policy.archive_below
}

/// The decay step: counts the memories of `ns` whose salience fell below the archive threshold.
pub(super) fn measure(run: &mut Run<'_>, ns: &str) -> Result<()> {
    super::for_each_page(run, ns, |run, page| {
        let low = page
            .iter()
            .filter(|m| salience(run, m, true) < run.policy.archive_below)
            .count();
        run.counts.low_salience += low as u64;
        Ok(())
    })
}

/// The archive step over `ns`.
pub(super) fn run(run: &mut Run<'_>, ns: &str, decay: bool) -> Result<()> {
    super::for_each_page(run, ns, |run, page| {
        let chosen: Vec<(MemoryKey, i64)> = page
            .iter()
            .filter(|m| archivable(run, m, decay))
            .map(|m| (m.key, m.version))
            .collect();
        for chunk in chosen.chunks(PER_BATCH) {
            if run.dry_run {
                let batch = run.engine.store.read(|c| archive(run, c, chunk, decay))?;
                run.add(batch);
            } else {
                run.commit(|run, tx| archive(run, tx, chunk, decay))?;
            }
        }
        Ok(())
    })
}

/// Archives the memories of `chosen` that are still as planned and still archivable.
fn archive(run: &Run<'_>, db: &Db, chosen: &[(MemoryKey, i64)], decay: bool) -> Result<Batch> {
    let mut batch = Batch::default();
    let keys: Vec<MemoryKey> = chosen.iter().map(|&(k, _)| k).collect();
    let kept = super::jobs::kept(run, db, &keys)?;
    for &(key, version) in chosen {
        if kept.contains(&key) {
            continue;
        }
        let Some(m) = memories::by_key(db, key)? else {
            continue;
        };
        if m.version != version || !archivable(run, &m, decay) {
            continue;
        }
        batch.counts.archived += 1;
        batch.examples.push(Example {
            step: "archive".into(),
            ids: vec![m.id.clone()],
            into: None,
            text: truncate(&m.content, 200),
        });
        if !run.dry_run {
            let mut archived = m.clone();
            archived.archived_at = Some(run.now);
            run.save_memory(db, &m, &archived, "archive")?;
        }
    }
    Ok(batch)
}
