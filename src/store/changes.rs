//! The change log: every write appends here; derived indexes replay it from the `seq` they applied.

use rusqlite::{Connection, params};

use crate::error::Result;
use crate::model::MemoryKey;

/// What happened to a memory, as the indexes need to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    /// Created: index it (its relations are logged on their own).
    Insert,
    /// Changed or restored: (re)index it.
    Upsert,
    /// Forgotten: drop it from the indexes.
    Delete,
    /// A relation touching it changed.
    Relation,
}

impl ChangeOp {
    fn as_str(self) -> &'static str {
        match self {
            ChangeOp::Insert => "insert",
            ChangeOp::Upsert => "upsert",
            ChangeOp::Delete => "delete",
            ChangeOp::Relation => "relation",
        }
    }
}

/// Appends one entry for a memory.
pub fn log_memory(conn: &Connection, key: MemoryKey, op: ChangeOp) -> Result<()> {
    conn.prepare_cached("INSERT INTO changes (memory_key, op) VALUES (?1, ?2)")?
        .execute(params![key.0, op.as_str()])?;
    Ok(())
}

/// Appends one entry for a relation.
pub fn log_relation(conn: &Connection, relation_key: i64) -> Result<()> {
    conn.prepare_cached("INSERT INTO changes (relation_key, op) VALUES (?1, 'relation')")?
        .execute([relation_key])?;
    Ok(())
}

/// The newest position of the log (0 when empty).
pub fn max_seq(conn: &Connection) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT coalesce(max(seq), 0) FROM changes")?
        .query_row([], |r| r.get(0))?)
}

/// Memories touched after `after` up to and including `up_to`, each once.
pub fn memories_changed(conn: &Connection, after: i64, up_to: i64) -> Result<Vec<MemoryKey>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT memory_key FROM changes \
         WHERE seq > ?1 AND seq <= ?2 AND memory_key IS NOT NULL AND op != 'relation'",
    )?;
    let rows = stmt.query_map(params![after, up_to], |r| Ok(MemoryKey(r.get(0)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// One change-log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub seq: i64,
    pub memory: Option<MemoryKey>,
    pub relation: Option<i64>,
    /// What happened (for a relation entry always [`ChangeOp::Relation`]).
    pub op: ChangeOp,
}

/// Entries after `after` up to and including `up_to`, in order.
pub fn since(conn: &Connection, after: i64, up_to: i64) -> Result<Vec<Change>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, memory_key, relation_key, op FROM changes WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
    )?;
    let rows = stmt.query_map(params![after, up_to], |r| {
        Ok(Change {
            seq: r.get(0)?,
            memory: r.get::<_, Option<i64>>(1)?.map(MemoryKey),
            relation: r.get(2)?,
            op: match r.get_ref(3)?.as_str()? {
                "insert" => ChangeOp::Insert,
                "delete" => ChangeOp::Delete,
                "relation" => ChangeOp::Relation,
                _ => ChangeOp::Upsert,
            },
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
