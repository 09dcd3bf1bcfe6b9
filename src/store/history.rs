//! History rows: the previous version of a memory or relation before each change.

use rusqlite::params;

use super::Db;
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
    let conn = &db.conn;
    conn.prepare_cached(
        "INSERT INTO history (entity, entity_key, op, actor, at, previous) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        entity.as_str(),
        key,
        op,
        actor,
        at,
        serde_json::to_string(previous)?
    ])?;
    Ok(())
}

/// Every kept version of one entity, newest first.
pub fn of(db: &Db, entity: Entity, key: i64, limit: usize) -> Result<Vec<HistoryEntry>> {
    let conn = &db.conn;
    let mut stmt = conn.prepare_cached(
        "SELECT op, actor, at, previous FROM history WHERE entity = ?1 AND entity_key = ?2 \
         ORDER BY seq DESC LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![entity.as_str(), key, limit as i64], |r| {
        let previous: String = r.get(3)?;
        Ok(HistoryEntry {
            op: r.get(0)?,
            actor: r.get(1)?,
            at: r.get(2)?,
            previous: serde_json::from_str(&previous).unwrap_or(serde_json::Value::Null),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
