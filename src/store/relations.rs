//! Relation rows: create or update on (src, dst, kind), list around a memory, soft delete.

use rusqlite::{OptionalExtension, Row, params};

use super::Db;
use crate::error::Result;
use crate::model::{EdgeRow, MemoryKey, Millis, Relation};

const COLS: &str = "r.key, r.id, s.id, d.id, r.kind, r.weight, r.metadata, r.created_at, \
    r.reinforced_at, r.valid_from, r.valid_until, r.deleted_at";
const FROM: &str = "relations r JOIN memories s ON s.key = r.src JOIN memories d ON d.key = r.dst";

fn from_row(r: &Row<'_>) -> rusqlite::Result<(i64, Relation)> {
    let metadata: String = r.get(6)?;
    Ok((
        r.get(0)?,
        Relation {
            id: r.get(1)?,
            from: r.get(2)?,
            to: r.get(3)?,
            kind: r.get(4)?,
            weight: r.get(5)?,
            metadata: serde_json::from_str(&metadata).unwrap_or(serde_json::Value::Null),
            created_at: r.get(7)?,
            reinforced_at: r.get(8)?,
            valid_from: r.get(9)?,
            valid_until: r.get(10)?,
            deleted_at: r.get(11)?,
        },
    ))
}

/// A relation to create or reinforce.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRelation<'a> {
    pub src: MemoryKey,
    pub dst: MemoryKey,
    pub kind: &'a str,
    pub weight: f64,
    pub metadata: Option<&'a serde_json::Value>,
}

/// The relation (src, dst, kind), live or forgotten, with its key.
pub fn find(
    db: &Db,
    src: MemoryKey,
    dst: MemoryKey,
    kind: &str,
) -> Result<Option<(i64, Relation)>> {
    let conn = &db.conn;
    let sql = format!("SELECT {COLS} FROM {FROM} WHERE r.src = ?1 AND r.dst = ?2 AND r.kind = ?3");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![src.0, dst.0, kind], from_row)
        .optional()?)
}

/// A relation by external id, with its key.
pub fn by_id(db: &Db, id: &str) -> Result<Option<(i64, Relation)>> {
    let conn = &db.conn;
    let sql = format!("SELECT {COLS} FROM {FROM} WHERE r.id = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([id], from_row)
        .optional()?)
}

/// What [`upsert`] stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Upserted {
    pub key: i64,
    /// The new id when inserted, the existing one otherwise.
    pub id: String,
    pub metadata: serde_json::Value,
    pub created_at: Millis,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
}

/// Inserts the relation with id `id`, or (unique on src, dst, kind) sets its weight and metadata
/// when given, revives it and marks it reinforced. One statement either way.
pub fn upsert(db: &Db, id: &str, r: &NewRelation<'_>, now: Millis) -> Result<Upserted> {
    let conn = &db.conn;
    let metadata = r.metadata.map(serde_json::to_string).transpose()?;
    let mut stmt = conn.prepare_cached(
        "INSERT INTO relations (id, src, dst, kind, weight, metadata, created_at, reinforced_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, coalesce(?6, '{}'), ?7, ?7) \
         ON CONFLICT (src, dst, kind) DO UPDATE SET weight = excluded.weight, \
           metadata = coalesce(?6, metadata), reinforced_at = excluded.reinforced_at, deleted_at = NULL \
         RETURNING key, id, metadata, created_at, valid_from, valid_until",
    )?;
    Ok(stmt.query_row(
        params![id, r.src.0, r.dst.0, r.kind, r.weight, metadata, now],
        |row| {
            let metadata: String = row.get(2)?;
            Ok(Upserted {
                key: row.get(0)?,
                id: row.get(1)?,
                metadata: serde_json::from_str(&metadata).unwrap_or(serde_json::Value::Null),
                created_at: row.get(3)?,
                valid_from: row.get(4)?,
                valid_until: row.get(5)?,
            })
        },
    )?)
}

/// Timestamps and validity of a relation being imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelationStamps {
    pub created_at: Millis,
    pub reinforced_at: Millis,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
}

/// Inserts the relation unless (src, dst, kind) exists, live or forgotten; the new key, or
/// `None` when it existed (and was left as it is).
pub fn insert_if_absent(
    db: &Db,
    id: &str,
    r: &NewRelation<'_>,
    at: RelationStamps,
) -> Result<Option<i64>> {
    let conn = &db.conn;
    let metadata = r.metadata.map(serde_json::to_string).transpose()?;
    let mut stmt = conn.prepare_cached(
        "INSERT INTO relations (id, src, dst, kind, weight, metadata, created_at, reinforced_at, \
         valid_from, valid_until) VALUES (?1, ?2, ?3, ?4, ?5, coalesce(?6, '{}'), ?7, ?8, ?9, ?10) \
         ON CONFLICT DO NOTHING RETURNING key",
    )?;
    Ok(stmt
        .query_row(
            params![
                id,
                r.src.0,
                r.dst.0,
                r.kind,
                r.weight,
                metadata,
                at.created_at,
                at.reinforced_at,
                at.valid_from,
                at.valid_until
            ],
            |row| row.get(0),
        )
        .optional()?)
}

/// Up to `n` live relations with keys above `after` whose ends are both live, in key order,
/// with their key and the internal keys of both ends (for exports).
pub fn live_page(
    db: &Db,
    after: i64,
    n: usize,
) -> Result<Vec<(i64, MemoryKey, MemoryKey, Relation)>> {
    let conn = &db.conn;
    let sql = format!(
        "SELECT {COLS}, r.src, r.dst FROM {FROM} WHERE r.key > ?1 AND r.deleted_at IS NULL \
         AND s.deleted_at IS NULL AND d.deleted_at IS NULL ORDER BY r.key LIMIT ?2"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![after, n as i64], |row| {
        let (key, rel) = from_row(row)?;
        Ok((key, MemoryKey(row.get(12)?), MemoryKey(row.get(13)?), rel))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Sets or clears the soft-delete mark of a relation.
pub fn set_deleted(db: &Db, key: i64, deleted_at: Option<Millis>) -> Result<()> {
    let conn = &db.conn;
    conn.prepare_cached("UPDATE relations SET deleted_at = ?2 WHERE key = ?1")?
        .execute(params![key, deleted_at])?;
    Ok(())
}

/// Live relations from or to `key` (both ends live), newest first, at most `limit`.
pub fn around(db: &Db, key: MemoryKey, limit: usize) -> Result<Vec<Relation>> {
    let conn = &db.conn;
    let sql = format!(
        "SELECT {COLS} FROM {FROM} WHERE (r.src = ?1 OR r.dst = ?1) AND r.deleted_at IS NULL \
         AND s.deleted_at IS NULL AND d.deleted_at IS NULL ORDER BY r.key DESC LIMIT ?2"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![key.0, limit as i64], from_row)?;
    rows.map(|r| r.map(|(_, rel)| rel).map_err(Into::into))
        .collect()
}

fn edge_from_row(r: &Row<'_>) -> rusqlite::Result<EdgeRow> {
    Ok(EdgeRow {
        relation: r.get(0)?,
        src: r.get(1)?,
        dst: r.get(2)?,
        kind: r.get(3)?,
        weight: r.get(4)?,
        reinforced_at: r.get(7)?,
        valid_from: r.get(5)?,
        valid_until: r.get(6)?,
    })
}

const EDGE_COLS: &str =
    "r.key, r.src, r.dst, r.kind, r.weight, r.valid_from, r.valid_until, r.reinforced_at";

/// One relation as [`for_each_live_edge`] lends it (the kind is borrowed from the row).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EdgeRef<'a> {
    pub relation: i64,
    pub src: i64,
    pub dst: i64,
    pub kind: &'a str,
    pub weight: f64,
    pub reinforced_at: Millis,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
}

/// Calls `f` with every relation that is not forgotten, in table order (one sequential scan).
/// Relations whose ends are forgotten are included: pair with [`forgotten_memory_keys`].
pub fn for_each_live_edge(db: &Db, mut f: impl FnMut(EdgeRef<'_>)) -> Result<()> {
    let conn = &db.conn;
    let sql = format!("SELECT {EDGE_COLS} FROM relations r WHERE r.deleted_at IS NULL");
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        f(EdgeRef {
            relation: r.get(0)?,
            src: r.get(1)?,
            dst: r.get(2)?,
            kind: r.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?,
            weight: r.get(4)?,
            reinforced_at: r.get(7)?,
            valid_from: r.get(5)?,
            valid_until: r.get(6)?,
        });
    }
    Ok(())
}

/// Number of relation rows (live or not), to size the graph before loading it.
pub fn count(db: &Db) -> Result<usize> {
    let conn = &db.conn;
    Ok(conn.query_row("SELECT count(*) FROM relations", [], |r| r.get::<_, i64>(0))? as usize)
}

/// An upper bound of the number of relations, read in O(log n) (the largest key).
pub fn approximate_count(db: &Db) -> Result<usize> {
    let conn = &db.conn;
    let max: Option<i64> = conn.query_row("SELECT max(key) FROM relations", [], |r| r.get(0))?;
    Ok(max.unwrap_or(0).max(0) as usize)
}

/// Keys of forgotten memories.
pub fn forgotten_memory_keys(db: &Db) -> Result<Vec<i64>> {
    let conn = &db.conn;
    let mut stmt = conn.prepare("SELECT key FROM memories WHERE deleted_at IS NOT NULL")?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// One relation by key as an edge, and whether it is live (it and both ends not forgotten).
pub fn edge(db: &Db, relation_key: i64) -> Result<Option<(EdgeRow, bool)>> {
    let conn = &db.conn;
    let sql = format!(
        "SELECT {EDGE_COLS}, r.deleted_at IS NULL AND s.deleted_at IS NULL AND d.deleted_at IS NULL \
         FROM {FROM} WHERE r.key = ?1"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([relation_key], |r| {
            Ok((edge_from_row(r)?, r.get::<_, bool>(8)?))
        })
        .optional()?)
}

/// Marks relations as used at `now` (walks went through them): `reinforced_at` moves to `now`
/// for those live and last reinforced at least a day before (a relation's strength counts days
/// of use, not walks), each with a change-log entry so every process's graph follows.
pub fn reinforce(db: &Db, keys: &[i64], now: Millis) -> Result<usize> {
    const DAY_MS: i64 = 86_400_000;
    let conn = &db.conn;
    let mut stmt = conn.prepare_cached(
        "UPDATE relations SET reinforced_at = ?2 WHERE key = ?1 AND deleted_at IS NULL \
         AND reinforced_at <= ?3",
    )?;
    let mut n = 0;
    for &key in keys {
        if stmt.execute(params![key, now, now - DAY_MS])? > 0 {
            crate::store::changes::log_relation(db, key)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Live edges touching a memory (both ends live).
pub fn live_edges_around(db: &Db, key: MemoryKey) -> Result<Vec<EdgeRow>> {
    let conn = &db.conn;
    let sql = format!(
        "SELECT {EDGE_COLS} FROM {FROM} WHERE (r.src = ?1 OR r.dst = ?1) AND r.deleted_at IS NULL \
         AND s.deleted_at IS NULL AND d.deleted_at IS NULL"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([key.0], edge_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Every column of one relation, with the internal keys of its ends: what consolidation keeps in
/// history before it changes a relation, and what undoing it writes back.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RelationRow {
    pub key: i64,
    pub id: String,
    pub src: i64,
    pub dst: i64,
    pub kind: String,
    pub weight: f64,
    pub metadata: serde_json::Value,
    pub created_at: Millis,
    pub reinforced_at: Millis,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
    pub deleted_at: Option<Millis>,
}

const ROW_COLS: &str = "key, id, src, dst, kind, weight, metadata, created_at, reinforced_at, \
    valid_from, valid_until, deleted_at";

fn relation_row(r: &Row<'_>) -> rusqlite::Result<RelationRow> {
    let metadata: String = r.get(6)?;
    Ok(RelationRow {
        key: r.get(0)?,
        id: r.get(1)?,
        src: r.get(2)?,
        dst: r.get(3)?,
        kind: r.get(4)?,
        weight: r.get(5)?,
        metadata: serde_json::from_str(&metadata).unwrap_or(serde_json::Value::Null),
        created_at: r.get(7)?,
        reinforced_at: r.get(8)?,
        valid_from: r.get(9)?,
        valid_until: r.get(10)?,
        deleted_at: r.get(11)?,
    })
}

/// One relation row by key, forgotten or not.
pub fn row(db: &Db, key: i64) -> Result<Option<RelationRow>> {
    let sql = format!("SELECT {ROW_COLS} FROM relations WHERE key = ?1");
    Ok(db
        .conn
        .prepare_cached(&sql)?
        .query_row([key], relation_row)
        .optional()?)
}

/// The relation (src, dst, kind) as a row, forgotten or not.
pub fn row_between(db: &Db, src: i64, dst: i64, kind: &str) -> Result<Option<RelationRow>> {
    let sql = format!("SELECT {ROW_COLS} FROM relations WHERE src = ?1 AND dst = ?2 AND kind = ?3");
    Ok(db
        .conn
        .prepare_cached(&sql)?
        .query_row(params![src, dst, kind], relation_row)
        .optional()?)
}

/// Relations from or to `key` that are not forgotten, whatever the state of their other end, in
/// key order.
pub fn rows_around(db: &Db, key: MemoryKey) -> Result<Vec<RelationRow>> {
    let sql = format!(
        "SELECT {ROW_COLS} FROM relations WHERE src = ?1 AND deleted_at IS NULL \
         UNION SELECT {ROW_COLS} FROM relations WHERE dst = ?1 AND deleted_at IS NULL ORDER BY key"
    );
    let mut stmt = db.conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([key.0], relation_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Relations of `namespace` (by their source) that are not forgotten, with keys above `after`, in
/// key order, at most `n`.
pub fn rows_page_in(db: &Db, namespace: &str, after: i64, n: usize) -> Result<Vec<RelationRow>> {
    let sql = format!(
        "SELECT {ROW_COLS} FROM relations WHERE key > ?2 AND deleted_at IS NULL \
         AND src IN (SELECT key FROM memories WHERE namespace = ?1) ORDER BY key LIMIT ?3"
    );
    let mut stmt = db.conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![namespace, after, n as i64], relation_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Writes every column of `r` to the row with its key.
pub fn write_row(db: &Db, r: &RelationRow) -> Result<()> {
    db.conn
        .prepare_cached(
            "UPDATE relations SET id = ?2, src = ?3, dst = ?4, kind = ?5, weight = ?6, metadata = ?7, \
             created_at = ?8, reinforced_at = ?9, valid_from = ?10, valid_until = ?11, \
             deleted_at = ?12 WHERE key = ?1",
        )?
        .execute(params![
            r.key,
            r.id,
            r.src,
            r.dst,
            r.kind,
            r.weight,
            serde_json::to_string(&r.metadata)?,
            r.created_at,
            r.reinforced_at,
            r.valid_from,
            r.valid_until,
            r.deleted_at
        ])?;
    Ok(())
}

/// Inserts `r` (its `key` is ignored); returns the new key.
pub fn insert_row(db: &Db, r: &RelationRow) -> Result<i64> {
    db.conn
        .prepare_cached(
            "INSERT INTO relations (id, src, dst, kind, weight, metadata, created_at, reinforced_at, \
             valid_from, valid_until, deleted_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?
        .execute(params![
            r.id,
            r.src,
            r.dst,
            r.kind,
            r.weight,
            serde_json::to_string(&r.metadata)?,
            r.created_at,
            r.reinforced_at,
            r.valid_from,
            r.valid_until,
            r.deleted_at
        ])?;
    Ok(db.conn.last_insert_rowid())
}

/// Groups of memories `part_of` one memory: for each target in `namespace`, the live memories
/// of kind `kind` (archived ones too) that point to it with a live `part_of` relation, in
/// creation order; only groups of at least `min` members (what the summarise step condenses).
pub fn part_of_groups(
    db: &Db,
    namespace: &str,
    kind: &str,
    min: usize,
) -> Result<Vec<(MemoryKey, Vec<MemoryKey>)>> {
    let mut stmt = db.conn.prepare_cached(
        "SELECT r.dst, s.key FROM relations r JOIN memories s ON s.key = r.src \
         WHERE r.kind = 'part_of' AND r.deleted_at IS NULL AND s.namespace = ?1 AND s.kind = ?2 \
         AND s.deleted_at IS NULL ORDER BY r.dst, s.created_at, s.key",
    )?;
    let rows = stmt.query_map(params![namespace, kind], |r| {
        Ok((MemoryKey(r.get(0)?), MemoryKey(r.get(1)?)))
    })?;
    let mut out: Vec<(MemoryKey, Vec<MemoryKey>)> = Vec::new();
    for row in rows {
        let (dst, src) = row?;
        match out.last_mut() {
            Some((d, members)) if *d == dst => members.push(src),
            _ => out.push((dst, vec![src])),
        }
    }
    out.retain(|(_, members)| members.len() >= min);
    Ok(out)
}

/// Whether a live memory of kind `summary` points to `key` with a live `summarizes` relation.
pub fn is_summarised(db: &Db, key: MemoryKey) -> Result<bool> {
    Ok(db
        .conn
        .prepare_cached(
            "SELECT 1 FROM relations r JOIN memories s ON s.key = r.src WHERE r.dst = ?1 \
             AND r.kind = 'summarizes' AND r.deleted_at IS NULL AND s.deleted_at IS NULL \
             AND s.kind = 'summary' LIMIT 1",
        )?
        .query_row([key.0], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Live relations of `namespace` (by source) of the given kinds, between live memories, that
/// hold at `now`, where the source has at least two such relations of one kind to different
/// targets: the candidates of single-valued contradictions, ordered by source, kind, then start
/// (`valid_from`, else creation).
pub fn multi_valued(
    db: &Db,
    namespace: &str,
    kinds: &[String],
    now: Millis,
) -> Result<Vec<RelationRow>> {
    if kinds.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; kinds.len()].join(", ");
    let live = "r.deleted_at IS NULL AND (r.valid_until IS NULL OR r.valid_until > ?2) \
        AND s.deleted_at IS NULL AND d.deleted_at IS NULL AND s.namespace = ?1";
    let sql = format!(
        "SELECT r.key, r.id, r.src, r.dst, r.kind, r.weight, r.metadata, r.created_at, \
         r.reinforced_at, r.valid_from, r.valid_until, r.deleted_at \
         FROM relations r JOIN memories s ON s.key = r.src JOIN memories d ON d.key = r.dst \
         WHERE {live} AND r.kind IN ({marks}) AND (r.src, r.kind) IN ( \
           SELECT r.src, r.kind FROM relations r JOIN memories s ON s.key = r.src \
           JOIN memories d ON d.key = r.dst WHERE {live} AND r.kind IN ({marks}) \
           GROUP BY r.src, r.kind HAVING count(DISTINCT r.dst) > 1) \
         ORDER BY r.src, r.kind, coalesce(r.valid_from, r.created_at), r.key"
    );
    let mut args: Vec<rusqlite::types::Value> = vec![namespace.to_owned().into(), now.into()];
    for _ in 0..2 {
        args.extend(kinds.iter().map(|k| k.clone().into()));
    }
    let mut stmt = db.conn.prepare(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), relation_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
