//! History rows: the previous version of a memory or relation before each change.

use super::{Db, args};
use crate::error::Result;
use crate::model::{HistoryEntry, Millis};

/// Which table a history row is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    Memory,
    Relation,
}

impl Entity {
    fn as_str(self) -> &'static str {
        match self {
            Entity::Memory => "memory",
            Entity::Relation => "relation",
        }
    }

    fn parse(s: &str) -> Entity {
        if s == "relation" {
            Entity::Relation
        } else {
            Entity::Memory
        }
    }
}

/// Keeps `previous` of one entity changed by consolidation run `run` (`null` when the run
/// created it), so the run can be undone.
#[allow(clippy::too_many_arguments)]
pub fn record_in_run(
    db: &Db,
    entity: Entity,
    key: i64,
    op: &str,
    actor: &str,
    at: Millis,
    previous: &serde_json::Value,
    run: &str,
) -> Result<()> {
    insert(db, entity, key, (op, actor, at), previous, Some(run))
}

/// One history row; `run` names the consolidation run that wrote it, if any.
fn insert(
    db: &Db,
    entity: Entity,
    key: i64,
    (op, actor, at): (&str, &str, Millis),
    previous: &serde_json::Value,
    run: Option<&str>,
) -> Result<()> {
    db.execute(
        "INSERT INTO history (entity, entity_key, op, actor, at, previous, run) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        args![
            entity.as_str(),
            key,
            op,
            actor,
            at,
            serde_json::to_string(previous)?,
            run
        ],
    )?;
    Ok(())
}

/// One change a run made.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEntry {
    pub seq: i64,
    pub entity: Entity,
    pub key: i64,
    pub op: String,
    /// The version before the change (`null`: the run created the entity).
    pub previous: serde_json::Value,
}

/// Every change run `run` made, in the order it made them.
pub fn of_run(db: &Db, run: &str) -> Result<Vec<RunEntry>> {
    db.query_all(
        "SELECT seq, entity, entity_key, op, previous FROM history WHERE run = ?1 ORDER BY seq",
        args![run],
        |r| {
            let entity: String = r.get(1)?;
            let previous: String = r.get(4)?;
            Ok(RunEntry {
                seq: r.get(0)?,
                entity: Entity::parse(&entity),
                key: r.get(2)?,
                op: r.get(3)?,
                previous: serde_json::from_str(&previous).unwrap_or(serde_json::Value::Null),
            })
        },
    )
}

/// Changes of one entity recorded after history position `after`: (actor, run) of each.
pub fn changed_after(
    db: &Db,
    entity: Entity,
    key: i64,
    after: i64,
) -> Result<Vec<(String, Option<String>)>> {
    db.query_all(
        "SELECT actor, run FROM history WHERE entity = ?1 AND entity_key = ?2 AND seq > ?3 \
         ORDER BY seq",
        args![entity.as_str(), key, after],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// Keeps `previous` (the version before `op`) of one entity.
pub fn record(
    db: &Db,
    entity: Entity,
    key: i64,
    op: &str,
    actor: &str,
    at: Millis,
    previous: &serde_json::Value,
) -> Result<()> {
    insert(db, entity, key, (op, actor, at), previous, None)
}

/// Every kept version of one entity, newest first.
pub fn of(db: &Db, entity: Entity, key: i64, limit: usize) -> Result<Vec<HistoryEntry>> {
    db.query_all(
        "SELECT op, actor, at, previous FROM history WHERE entity = ?1 AND entity_key = ?2 \
         ORDER BY seq DESC LIMIT ?3",
        args![entity.as_str(), key, limit],
        |r| {
            let previous: String = r.get(3)?;
            Ok(HistoryEntry {
                op: r.get(0)?,
                actor: r.get(1)?,
                at: r.get(2)?,
                previous: serde_json::from_str(&previous).unwrap_or(serde_json::Value::Null),
            })
        },
    )
}
