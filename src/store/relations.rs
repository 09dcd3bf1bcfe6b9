//! Relation rows: create or update on (src, dst, kind), list around a memory, soft delete.

use super::{Arg, Db, Row, ToArg, args};
use crate::error::Result;
use crate::model::{EdgeRow, MemoryKey, Millis, Relation};

/// A relation's own columns (as [`ROW_COLS`], decoded by [`relation_row`]) and then the external
/// ids of its ends.
const COLS: &str = "r.key, r.id, r.src, r.dst, r.kind, r.weight, r.metadata, r.created_at, \
    r.reinforced_at, r.valid_from, r.valid_until, r.deleted_at, s.id, d.id";
const FROM: &str = "relations r JOIN memories s ON s.key = r.src JOIN memories d ON d.key = r.dst";

fn from_row(r: &Row<'_>) -> Result<(i64, Relation)> {
    let row = relation_row(r)?;
    Ok((row.key, row.with_ends(r.get(12)?, r.get(13)?)))
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
    let sql = format!("SELECT {COLS} FROM {FROM} WHERE r.src = ?1 AND r.dst = ?2 AND r.kind = ?3");
    db.query_opt(&sql, args![src.0, dst.0, kind], from_row)
}

/// A relation by external id, with its key.
pub fn by_id(db: &Db, id: &str) -> Result<Option<(i64, Relation)>> {
    let sql = format!("SELECT {COLS} FROM {FROM} WHERE r.id = ?1");
    db.query_opt(&sql, args![id], from_row)
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
    let metadata = r.metadata.map(serde_json::to_string).transpose()?;
    db.query_one(
        "INSERT INTO relations (id, src, dst, kind, weight, metadata, created_at, reinforced_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, coalesce(?6, '{}'), ?7, ?7) \
         ON CONFLICT (src, dst, kind) DO UPDATE SET weight = excluded.weight, \
           metadata = coalesce(?6, relations.metadata), reinforced_at = excluded.reinforced_at, \
           deleted_at = NULL \
         RETURNING key, id, metadata, created_at, valid_from, valid_until",
        args![id, r.src.0, r.dst.0, r.kind, r.weight, metadata, now],
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
    )
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
    let metadata = r.metadata.map(serde_json::to_string).transpose()?;
    db.query_opt(
        "INSERT INTO relations (id, src, dst, kind, weight, metadata, created_at, reinforced_at, \
         valid_from, valid_until) VALUES (?1, ?2, ?3, ?4, ?5, coalesce(?6, '{}'), ?7, ?8, ?9, ?10) \
         ON CONFLICT DO NOTHING RETURNING key",
        args![
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
}

/// Up to `n` live relations with keys above `after` whose ends are both live, in key order,
/// with their key and the internal keys of both ends (for exports).
pub fn live_page(
    db: &Db,
    after: i64,
    n: usize,
) -> Result<Vec<(i64, MemoryKey, MemoryKey, Relation)>> {
    let sql = format!(
        "SELECT {COLS} FROM {FROM} WHERE r.key > ?1 AND r.deleted_at IS NULL \
         AND s.deleted_at IS NULL AND d.deleted_at IS NULL ORDER BY r.key LIMIT ?2"
    );
    db.query_all(&sql, args![after, n], |r| {
        let row = relation_row(r)?;
        let (key, src, dst) = (row.key, MemoryKey(row.src), MemoryKey(row.dst));
        Ok((key, src, dst, row.with_ends(r.get(12)?, r.get(13)?)))
    })
}

/// The live relations leaving one of `srcs` whose ends are both live, with their key and the
/// internal keys of both ends, in key order (for exports of part of the graph: read by the
/// source index, in proportion to what is exported).
pub fn live_from(
    db: &Db,
    srcs: &[MemoryKey],
) -> Result<Vec<(i64, MemoryKey, MemoryKey, Relation)>> {
    let raw: Vec<i64> = srcs.iter().map(|k| k.0).collect();
    let mut out = Vec::new();
    super::in_chunks(&raw, |marks, list| {
        let sql = format!(
            "SELECT {COLS} FROM {FROM} WHERE r.src IN ({marks}) AND r.deleted_at IS NULL \
             AND s.deleted_at IS NULL AND d.deleted_at IS NULL"
        );
        db.for_each(&sql, list, |r| {
            let row = relation_row(r)?;
            let (key, src, dst) = (row.key, MemoryKey(row.src), MemoryKey(row.dst));
            out.push((key, src, dst, row.with_ends(r.get(12)?, r.get(13)?)));
            Ok(())
        })
    })?;
    out.sort_by_key(|r| r.0);
    out.dedup_by_key(|r| r.0);
    Ok(out)
}

/// Sets or clears the soft-delete mark of a relation.
pub fn set_deleted(db: &Db, key: i64, deleted_at: Option<Millis>) -> Result<()> {
    db.execute(
        "UPDATE relations SET deleted_at = ?2 WHERE key = ?1",
        args![key, deleted_at],
    )?;
    Ok(())
}

/// Live relations from or to `key` (both ends live), newest first, at most `limit`.
pub fn around(db: &Db, key: MemoryKey, limit: usize) -> Result<Vec<Relation>> {
    let sql = format!(
        "SELECT {COLS} FROM {FROM} WHERE (r.src = ?1 OR r.dst = ?1) AND r.deleted_at IS NULL \
         AND s.deleted_at IS NULL AND d.deleted_at IS NULL ORDER BY r.key DESC LIMIT ?2"
    );
    db.query_all(&sql, args![key.0, limit], |r| Ok(from_row(r)?.1))
}

fn edge_from_row(r: &Row<'_>) -> Result<EdgeRow> {
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
    let sql = format!("SELECT {EDGE_COLS} FROM relations r WHERE r.deleted_at IS NULL");
    db.for_each(&sql, &[], |r| {
        f(EdgeRef {
            relation: r.get(0)?,
            src: r.get(1)?,
            dst: r.get(2)?,
            kind: r.get_str(3)?,
            weight: r.get(4)?,
            reinforced_at: r.get(7)?,
            valid_from: r.get(5)?,
            valid_until: r.get(6)?,
        });
        Ok(())
    })
}

/// Number of relation rows (live or not), to size the graph before loading it.
pub fn count(db: &Db) -> Result<usize> {
    Ok(db.query_one("SELECT count(*) FROM relations", &[], |r| r.get::<i64>(0))? as usize)
}

/// An upper bound of the number of relations, read in O(log n) (the largest key).
pub fn approximate_count(db: &Db) -> Result<usize> {
    let max: Option<i64> = db.query_one("SELECT max(key) FROM relations", &[], |r| r.get(0))?;
    Ok(max.unwrap_or(0).max(0) as usize)
}

/// Keys of forgotten memories.
pub fn forgotten_memory_keys(db: &Db) -> Result<Vec<i64>> {
    db.query_all(
        "SELECT key FROM memories WHERE deleted_at IS NOT NULL",
        &[],
        |r| r.get(0),
    )
}

/// One relation by key as an edge, and whether it is live (it and both ends not forgotten).
pub fn edge(db: &Db, relation_key: i64) -> Result<Option<(EdgeRow, bool)>> {
    let sql = format!(
        "SELECT {EDGE_COLS}, r.deleted_at IS NULL AND s.deleted_at IS NULL AND d.deleted_at IS NULL \
         FROM {FROM} WHERE r.key = ?1"
    );
    db.query_opt(&sql, args![relation_key], |r| {
        Ok((edge_from_row(r)?, r.get::<bool>(8)?))
    })
}

/// Marks relations as used at `now` (walks went through them): `reinforced_at` moves to `now`
/// for those live and last reinforced at least a day before (a relation's strength counts days
/// of use, not walks), each with a change-log entry so every process's graph follows.
pub fn reinforce(db: &Db, keys: &[i64], now: Millis) -> Result<usize> {
    const DAY_MS: i64 = 86_400_000;
    let mut n = 0;
    for &key in keys {
        let changed = db.execute(
            "UPDATE relations SET reinforced_at = ?2 WHERE key = ?1 AND deleted_at IS NULL \
             AND reinforced_at <= ?3",
            args![key, now, now - DAY_MS],
        )?;
        if changed > 0 {
            crate::store::changes::log_relation(db, key)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Live edges touching a memory (both ends live).
pub fn live_edges_around(db: &Db, key: MemoryKey) -> Result<Vec<EdgeRow>> {
    let sql = format!(
        "SELECT {EDGE_COLS} FROM {FROM} WHERE (r.src = ?1 OR r.dst = ?1) AND r.deleted_at IS NULL \
         AND s.deleted_at IS NULL AND d.deleted_at IS NULL"
    );
    db.query_all(&sql, args![key.0], edge_from_row)
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

impl RelationRow {
    /// The relation as callers see it, its ends named by their external ids.
    fn with_ends(self, from: String, to: String) -> Relation {
        Relation {
            id: self.id,
            from,
            to,
            kind: self.kind,
            weight: self.weight,
            metadata: self.metadata,
            created_at: self.created_at,
            reinforced_at: self.reinforced_at,
            valid_from: self.valid_from,
            valid_until: self.valid_until,
            deleted_at: self.deleted_at,
        }
    }
}

const ROW_COLS: &str = "key, id, src, dst, kind, weight, metadata, created_at, reinforced_at, \
    valid_from, valid_until, deleted_at";

fn relation_row(r: &Row<'_>) -> Result<RelationRow> {
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
    db.query_opt(&sql, args![key], relation_row)
}

/// The relation (src, dst, kind) as a row, forgotten or not.
pub fn row_between(db: &Db, src: i64, dst: i64, kind: &str) -> Result<Option<RelationRow>> {
    let sql = format!("SELECT {ROW_COLS} FROM relations WHERE src = ?1 AND dst = ?2 AND kind = ?3");
    db.query_opt(&sql, args![src, dst, kind], relation_row)
}

/// Relations from or to `key` that are not forgotten, whatever the state of their other end, in
/// key order.
pub fn rows_around(db: &Db, key: MemoryKey) -> Result<Vec<RelationRow>> {
    let sql = format!(
        "SELECT {ROW_COLS} FROM relations WHERE src = ?1 AND deleted_at IS NULL \
         UNION SELECT {ROW_COLS} FROM relations WHERE dst = ?1 AND deleted_at IS NULL ORDER BY key"
    );
    db.query_all(&sql, args![key.0], relation_row)
}

/// Relations of `namespace` (by their source) that are not forgotten, with keys above `after`, in
/// key order, at most `n`.
pub fn rows_page_in(db: &Db, namespace: &str, after: i64, n: usize) -> Result<Vec<RelationRow>> {
    let sql = format!(
        "SELECT {ROW_COLS} FROM relations WHERE key > ?2 AND deleted_at IS NULL \
         AND src IN (SELECT key FROM memories WHERE namespace = ?1) ORDER BY key LIMIT ?3"
    );
    db.query_all(&sql, args![namespace, after, n], relation_row)
}

/// Every column of `r` but its key, in [`ROW_COLS`] order (`metadata`: its JSON text).
fn row_args<'a>(r: &'a RelationRow, metadata: &'a str) -> [Arg<'a>; 11] {
    [
        r.id.to_arg(),
        r.src.to_arg(),
        r.dst.to_arg(),
        r.kind.to_arg(),
        r.weight.to_arg(),
        metadata.to_arg(),
        r.created_at.to_arg(),
        r.reinforced_at.to_arg(),
        r.valid_from.to_arg(),
        r.valid_until.to_arg(),
        r.deleted_at.to_arg(),
    ]
}

/// Writes every column of `r` to the row with its key.
pub fn write_row(db: &Db, r: &RelationRow) -> Result<()> {
    let metadata = serde_json::to_string(&r.metadata)?;
    let mut args = row_args(r, &metadata).to_vec();
    args.push(r.key.to_arg());
    db.execute(
        "UPDATE relations SET id = ?1, src = ?2, dst = ?3, kind = ?4, weight = ?5, metadata = ?6, \
         created_at = ?7, reinforced_at = ?8, valid_from = ?9, valid_until = ?10, \
         deleted_at = ?11 WHERE key = ?12",
        &args,
    )?;
    Ok(())
}

/// Inserts `r` (its `key` is ignored); returns the new key.
pub fn insert_row(db: &Db, r: &RelationRow) -> Result<i64> {
    let metadata = serde_json::to_string(&r.metadata)?;
    db.query_one(
        "INSERT INTO relations (id, src, dst, kind, weight, metadata, created_at, reinforced_at, \
         valid_from, valid_until, deleted_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
         RETURNING key",
        &row_args(r, &metadata),
        |row| row.get(0),
    )
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
    let rows = db.query_all(
        "SELECT r.dst, s.key FROM relations r JOIN memories s ON s.key = r.src \
         WHERE r.kind = 'part_of' AND r.deleted_at IS NULL AND s.namespace = ?1 AND s.kind = ?2 \
         AND s.deleted_at IS NULL ORDER BY r.dst, s.created_at, s.key",
        args![namespace, kind],
        |r| Ok((MemoryKey(r.get(0)?), MemoryKey(r.get(1)?))),
    )?;
    let mut out: Vec<(MemoryKey, Vec<MemoryKey>)> = Vec::new();
    for (dst, src) in rows {
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
        .query_opt(
            "SELECT 1 FROM relations r JOIN memories s ON s.key = r.src WHERE r.dst = ?1 \
             AND r.kind = 'summarizes' AND r.deleted_at IS NULL AND s.deleted_at IS NULL \
             AND s.kind = 'summary' LIMIT 1",
            args![key.0],
            |_| Ok(()),
        )?
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
    let mut list = vec![Arg::Text(namespace), Arg::Int(now)];
    for _ in 0..2 {
        list.extend(kinds.iter().map(|k| Arg::Text(k)));
    }
    db.query_all(&sql, &list, relation_row)
}
