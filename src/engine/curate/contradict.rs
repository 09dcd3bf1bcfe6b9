//! The contradictions step: what cannot hold at once, for the kinds and attributes the policy
//! calls single-valued (`works_at`, `lives_in`, `status`, …).
//!
//! - Relations: one memory with two live relations of such a kind to different memories (Alice
//!   `works_at` Acme, and later Globex). The older relation is marked `contradicted_by` the newer.
//! - Facts: two live memories stating the same slot — metadata `subject` and `attribute` — with
//!   different values (metadata `value`, else the content). The newer is linked `contradicts` to
//!   the older.
//!
//! With `resolve: "newest"` the older one's validity also ends where the newer one's starts
//! (temporal invalidation: it stays, as history of what held before). Nothing is deleted; a
//! contradiction already marked is not marked again.

use crate::engine::curate::policy::Resolve;
use crate::engine::curate::{Batch, Example, Run, truncate};
use crate::error::Result;
use crate::model::{Memory, MemoryKey, Millis};
use crate::store::relations::{self, RelationRow};
use crate::store::{Db, memories, new_id};

/// The relation kind that links a newer fact to the older one it contradicts.
pub(super) const CONTRADICTS: &str = "contradicts";
/// Contradictions handled per transaction.
const PER_BATCH: usize = 200;

/// One contradiction: the older statement and the newer one.
#[derive(Debug, Clone)]
enum Found {
    Relation {
        older: Box<RelationRow>,
        newer: Box<RelationRow>,
    },
    Fact {
        older: (MemoryKey, i64),
        newer: (MemoryKey, i64),
    },
}

pub(super) fn run(run: &mut Run<'_>, ns: &str) -> Result<()> {
    let kinds = run.policy.single_valued.clone();
    let engine = run.engine;
    let mut found = Vec::new();
    let rels = engine
        .store
        .read(|c| relations::multi_valued(c, ns, &kinds, run.now))?;
    for group in rels.chunk_by(|a, b| a.src == b.src && a.kind == b.kind) {
        let Some((newer, older)) = group.split_last() else {
            continue;
        };
        found.extend(
            older
                .iter()
                .filter(|o| o.dst != newer.dst)
                .map(|o| Found::Relation {
                    older: Box::new(o.clone()),
                    newer: Box::new(newer.clone()),
                }),
        );
    }
    let facts = engine
        .store
        .read(|c| memories::shared_slots(c, ns, &kinds, run.now))?;
    run.saw(facts.len());
    for group in facts.chunk_by(|a, b| slot(a) == slot(b)) {
        let Some((newer, older)) = group.split_last() else {
            continue;
        };
        found.extend(
            older
                .iter()
                .filter(|o| value(o) != value(newer))
                .map(|o| Found::Fact {
                    older: (o.key, o.version),
                    newer: (newer.key, newer.version),
                }),
        );
    }
    for chunk in found.chunks(PER_BATCH) {
        if run.dry_run {
            let batch = engine.store.read(|c| apply(run, c, chunk))?;
            run.add(batch);
        } else {
            run.commit(|run, tx| apply(run, tx, chunk))?;
        }
        run.tick()?;
    }
    Ok(())
}

/// The slot a fact states: its subject and attribute (lower-cased).
fn slot(m: &Memory) -> (Option<&str>, Option<String>) {
    (
        m.metadata.get("subject").and_then(|s| s.as_str()),
        m.metadata
            .get("attribute")
            .and_then(|s| s.as_str())
            .map(str::to_lowercase),
    )
}

/// The value a fact gives its slot: metadata `value`, else the content (compared without case
/// or surrounding space).
fn value(m: &Memory) -> String {
    match m.metadata.get("value") {
        Some(serde_json::Value::String(s)) => s.trim().to_lowercase(),
        Some(v) => v.to_string(),
        None => m.content.trim().to_lowercase(),
    }
}

/// When a statement starts to hold.
fn start(valid_from: Option<Millis>, created_at: Millis) -> Millis {
    valid_from.unwrap_or(created_at)
}

fn apply(run: &Run<'_>, db: &Db, found: &[Found]) -> Result<Batch> {
    let mut batch = Batch::default();
    for f in found {
        match f {
            Found::Relation { older, newer } => relation(run, db, older, newer, &mut batch)?,
            Found::Fact { older, newer } => fact(run, db, *older, *newer, &mut batch)?,
        }
    }
    Ok(batch)
}

/// Whether the newest should end the older now: asked for, and it starts strictly later.
fn resolving(run: &Run<'_>, older: Millis, newer: Millis) -> bool {
    run.policy.resolve == Resolve::Newest && newer > older
}

fn relation(
    run: &Run<'_>,
    db: &Db,
    planned: &RelationRow,
    newer: &RelationRow,
    batch: &mut Batch,
) -> Result<()> {
    let (Some(old), Some(now_newer)) = (
        relations::row(db, planned.key)?,
        relations::row(db, newer.key)?,
    ) else {
        return Ok(());
    };
    if &old != planned || &now_newer != newer {
        return Ok(());
    }
    let marked = old.metadata.get("contradicted_by").and_then(|v| v.as_str()) == Some(&newer.id);
    let ends = start(newer.valid_from, newer.created_at);
    let resolve = resolving(run, start(old.valid_from, old.created_at), ends);
    if marked && !resolve {
        return Ok(());
    }
    if !marked {
        batch.counts.contradictions += 1;
    }
    let mut changed = old.clone();
    if !changed.metadata.is_object() {
        changed.metadata = serde_json::json!({});
    }
    if let Some(o) = changed.metadata.as_object_mut() {
        o.insert("contradicted_by".into(), newer.id.clone().into());
    }
    if resolve {
        changed.valid_until = Some(ends);
        batch.counts.resolved += 1;
    }
    let names = memories::by_keys(
        db,
        &[MemoryKey(old.src), MemoryKey(old.dst), MemoryKey(newer.dst)],
    )?;
    let name = |k: i64| {
        names
            .iter()
            .find(|m| m.key.0 == k)
            .map(|m| m.name.clone().unwrap_or_else(|| truncate(&m.content, 60)))
            .unwrap_or_default()
    };
    batch.examples.push(Example {
        step: "contradictions".into(),
        ids: vec![old.id.clone(), newer.id.clone()],
        into: None,
        text: format!(
            "{} {}: {} → {}{}",
            name(old.src),
            old.kind,
            name(old.dst),
            name(newer.dst),
            if resolve { " (older ended)" } else { "" }
        ),
    });
    if !run.dry_run {
        run.save_relation(db, &old, &changed, "contradiction")?;
    }
    Ok(())
}

fn fact(
    run: &Run<'_>,
    db: &Db,
    older: (MemoryKey, i64),
    newer: (MemoryKey, i64),
    batch: &mut Batch,
) -> Result<()> {
    let (Some(old), Some(new)) = (
        memories::by_key(db, older.0)?,
        memories::by_key(db, newer.0)?,
    ) else {
        return Ok(());
    };
    if old.version != older.1 || new.version != newer.1 {
        return Ok(());
    }
    let link = relations::row_between(db, new.key.0, old.key.0, CONTRADICTS)?;
    let linked = link.as_ref().is_some_and(|l| l.deleted_at.is_none());
    let ends = start(new.valid_from, new.created_at);
    let resolve = resolving(run, start(old.valid_from, old.created_at), ends);
    if linked && !resolve {
        return Ok(());
    }
    if !linked {
        batch.counts.contradictions += 1;
    }
    if resolve {
        batch.counts.resolved += 1;
    }
    let (subject, attribute) = slot(&new);
    batch.examples.push(Example {
        step: "contradictions".into(),
        ids: vec![old.id.clone(), new.id.clone()],
        into: None,
        text: format!(
            "{} {}: {} → {}{}",
            subject.unwrap_or_default(),
            attribute.clone().unwrap_or_default(),
            truncate(&old.content, 80),
            truncate(&new.content, 80),
            if resolve { " (older ended)" } else { "" }
        ),
    });
    if run.dry_run {
        return Ok(());
    }
    if !linked {
        let row = RelationRow {
            key: 0,
            id: new_id("r_"),
            src: new.key.0,
            dst: old.key.0,
            kind: CONTRADICTS.into(),
            weight: 1.0,
            metadata: serde_json::json!({"subject": subject, "attribute": attribute}),
            created_at: run.now,
            reinforced_at: run.now,
            valid_from: None,
            valid_until: None,
            deleted_at: None,
        };
        match link {
            // The unique (from, to, kind) row exists, forgotten: it comes back.
            Some(gone) => {
                let revived = RelationRow {
                    key: gone.key,
                    id: gone.id.clone(),
                    ..row
                };
                run.save_relation(db, &gone, &revived, "contradiction")?;
            }
            None => {
                run.insert_relation(db, &row, "contradiction")?;
            }
        }
    }
    if resolve {
        let mut ended = old.clone();
        ended.valid_until = Some(ends);
        ended.version += 1;
        ended.updated_at = run.now;
        run.save_memory(db, &old, &ended, "contradiction")?;
    }
    Ok(())
}
