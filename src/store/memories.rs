//! Memory rows: insert, look up by key, id, name or content hash, save a new version, soft delete.
//!
//! Size: every statement on the `memories` table lives here, so the columns, the live-row rule
//! (`deleted_at IS NULL`) and the indexes each query leans on are read in one place, with their
//! tests.

use std::collections::HashMap;

use super::{Arg, Db, Row, args};
use crate::error::Result;
use crate::model::{Memory, MemoryKey, Millis, NewMemory, Stats};

const COLS: &str = "key, id, namespace, kind, name, content, tags, importance, metadata, \
    created_at, updated_at, accessed_at, access_count, valid_from, valid_until, superseded_by, \
    version, deleted_at, merged_into, archived_at, salience, salience_at";

fn from_row(r: &Row<'_>) -> Result<Memory> {
    let tags: String = r.get(6)?;
    let metadata: String = r.get(8)?;
    Ok(Memory {
        key: MemoryKey(r.get(0)?),
        id: r.get(1)?,
        namespace: r.get(2)?,
        kind: r.get(3)?,
        name: r.get(4)?,
        content: r.get(5)?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        importance: r.get(7)?,
        metadata: serde_json::from_str(&metadata).unwrap_or(serde_json::Value::Null),
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
        accessed_at: r.get(11)?,
        access_count: r.get(12)?,
        valid_from: r.get(13)?,
        valid_until: r.get(14)?,
        superseded_by: r.get(15)?,
        version: r.get(16)?,
        deleted_at: r.get(17)?,
        merged_into: r.get(18)?,
        archived_at: r.get(19)?,
        salience: r.get(20)?,
        salience_at: r.get(21)?,
    })
}

/// SHA-256 of the content as stored (the idempotency key within a namespace).
pub fn content_hash(content: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(content.as_bytes()).to_vec()
}

/// Timestamps and usage of a memory being inserted (imports carry their originals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps {
    pub created_at: Millis,
    pub updated_at: Millis,
    pub accessed_at: Option<Millis>,
    pub access_count: i64,
    /// When the memory enters this database (its salience decays from then).
    pub stored_at: Millis,
    /// When consolidation archived it (an export of an archived memory keeps the mark).
    pub archived_at: Option<Millis>,
}

impl Stamps {
    /// A memory made now, never read.
    pub fn now(now: Millis) -> Stamps {
        Stamps {
            created_at: now,
            updated_at: now,
            accessed_at: None,
            access_count: 0,
            stored_at: now,
            archived_at: None,
        }
    }
}

/// Inserts a new memory with id `id`; returns it as stored.
pub fn insert(db: &Db, id: &str, m: &NewMemory, now: Millis) -> Result<Memory> {
    insert_with(db, id, m, Stamps::now(now))
}

/// Inserts a new memory with id `id` and the given timestamps; returns it as stored.
pub fn insert_with(db: &Db, id: &str, m: &NewMemory, at: Stamps) -> Result<Memory> {
    let key = db.query_one(
        "INSERT INTO memories (id, namespace, kind, name, content, tags, importance, metadata, \
         content_hash, created_at, updated_at, valid_from, valid_until, accessed_at, access_count, \
         salience, salience_at, archived_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?7, ?16, ?17) \
         RETURNING key",
        args![
            id,
            m.namespace,
            m.kind,
            m.name,
            m.content,
            serde_json::to_string(&m.tags)?,
            m.importance,
            serde_json::to_string(&m.metadata)?,
            content_hash(&m.content),
            at.created_at,
            at.updated_at,
            m.valid_from,
            m.valid_until,
            at.accessed_at,
            at.access_count,
            at.stored_at,
            at.archived_at,
        ],
        |r| Ok(MemoryKey(r.get(0)?)),
    )?;
    Ok(stored(key, id, m, at))
}

/// The row `insert_with` writes, as a [`Memory`].
fn stored(key: MemoryKey, id: &str, m: &NewMemory, at: Stamps) -> Memory {
    Memory {
        key,
        id: id.to_owned(),
        namespace: m.namespace.clone(),
        kind: m.kind.clone(),
        name: m.name.clone(),
        content: m.content.clone(),
        tags: m.tags.clone(),
        importance: m.importance,
        metadata: m.metadata.clone(),
        created_at: at.created_at,
        updated_at: at.updated_at,
        accessed_at: at.accessed_at,
        access_count: at.access_count,
        valid_from: m.valid_from,
        valid_until: m.valid_until,
        superseded_by: None,
        version: 1,
        deleted_at: None,
        merged_into: None,
        archived_at: at.archived_at,
        salience: m.importance,
        salience_at: at.stored_at,
    }
}

/// Most memories one `INSERT` of [`insert_many`] carries (18 arguments each, well under both
/// databases' limits on arguments per statement).
const INSERT_ROWS: usize = 250;

/// Inserts new memories, made now, with the ids given; returns them as stored, in order. A
/// statement carries many rows: against a server that is one round trip for hundreds of
/// memories instead of one each.
pub fn insert_many(db: &Db, new: &[(String, &NewMemory)], now: Millis) -> Result<Vec<Memory>> {
    let mut out = Vec::with_capacity(new.len());
    for chunk in new.chunks(INSERT_ROWS) {
        let rows = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()];
        let sql = format!(
            "INSERT INTO memories (id, namespace, kind, name, content, tags, importance, metadata, \
             content_hash, created_at, updated_at, valid_from, valid_until, accessed_at, \
             access_count, salience, salience_at, archived_at) VALUES {} RETURNING key, id",
            rows.join(", ")
        );
        let texts: Vec<(String, String, Vec<u8>)> = chunk
            .iter()
            .map(|(_, m)| {
                Ok((
                    serde_json::to_string(&m.tags)?,
                    serde_json::to_string(&m.metadata)?,
                    content_hash(&m.content),
                ))
            })
            .collect::<Result<_>>()?;
        let mut list = Vec::with_capacity(chunk.len() * 18);
        for ((id, m), (tags, metadata, hash)) in chunk.iter().zip(&texts) {
            let int_or_null = |v: Option<i64>| v.map_or(Arg::Null, Arg::Int);
            list.extend([
                Arg::Text(id),
                Arg::Text(&m.namespace),
                Arg::Text(&m.kind),
                m.name.as_deref().map_or(Arg::Null, Arg::Text),
                Arg::Text(&m.content),
                Arg::Text(tags),
                Arg::Real(m.importance),
                Arg::Text(metadata),
                Arg::Blob(hash),
                Arg::Int(now),
                Arg::Int(now),
                int_or_null(m.valid_from),
                int_or_null(m.valid_until),
                Arg::Null,
                Arg::Int(0),
                Arg::Real(m.importance),
                Arg::Int(now),
                Arg::Null,
            ]);
        }
        let mut keys: HashMap<String, MemoryKey> = HashMap::with_capacity(chunk.len());
        db.for_each(&sql, &list, |r| {
            keys.insert(r.get(1)?, MemoryKey(r.get(0)?));
            Ok(())
        })?;
        for (id, m) in chunk {
            let key = keys.get(id).copied().ok_or_else(|| {
                crate::error::Error::Internal(format!("the insert of {id} returned no key"))
            })?;
            out.push(stored(key, id, m, Stamps::now(now)));
        }
    }
    Ok(out)
}

/// Live memories of `namespace` named one of `names`.
pub fn live_named(db: &Db, namespace: &str, names: &[&str]) -> Result<Vec<Memory>> {
    let mut out = Vec::new();
    for chunk in names.chunks(INSERT_ROWS) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let sql = format!(
            "SELECT {COLS} FROM memories WHERE namespace = ? AND name IN ({marks}) \
             AND deleted_at IS NULL"
        );
        let mut list = vec![Arg::Text(namespace)];
        list.extend(chunk.iter().map(|n| Arg::Text(n)));
        db.for_each(&sql, &list, |r| {
            out.push(from_row(r)?);
            Ok(())
        })?;
    }
    Ok(out)
}

/// Live unnamed memories of `namespace` whose content hash is one of `hashes` (the candidates
/// of [`unnamed_twin`] for many memories at once; the caller compares kind and validity).
pub fn unnamed_with_hashes(db: &Db, namespace: &str, hashes: &[Vec<u8>]) -> Result<Vec<Memory>> {
    let mut out = Vec::new();
    for chunk in hashes.chunks(INSERT_ROWS) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let sql = format!(
            "SELECT {COLS} FROM memories WHERE namespace = ? AND content_hash IN ({marks}) \
             AND deleted_at IS NULL AND name IS NULL ORDER BY key"
        );
        let mut list = vec![Arg::Text(namespace)];
        list.extend(chunk.iter().map(|h| Arg::Blob(h)));
        db.for_each(&sql, &list, |r| {
            out.push(from_row(r)?);
            Ok(())
        })?;
    }
    Ok(out)
}

/// Writes every mutable field of `m` back (content, tags, validity, …) and bumps nothing itself:
/// the caller sets `version` and `updated_at`. A new version that keeps the name and content
/// keeps the stored vector (moved to the new version): the text embedded is the same, so no
/// process embeds it again after a change of tags, validity, a forget or a restore.
pub fn save(db: &Db, m: &Memory) -> Result<()> {
    let hash = content_hash(&m.content);
    db.execute(
        "UPDATE vectors SET version = ?2 WHERE memory_key = ?1 AND version = \
         (SELECT version FROM memories WHERE key = ?1 AND content_hash = ?3 \
         AND COALESCE(name, '') = COALESCE(?4, ''))",
        args![m.key.0, m.version, hash, m.name],
    )?;
    db.execute(
        "UPDATE memories SET kind = ?2, name = ?3, content = ?4, tags = ?5, importance = ?6, \
         metadata = ?7, content_hash = ?8, updated_at = ?9, valid_from = ?10, valid_until = ?11, \
         superseded_by = ?12, version = ?13, deleted_at = ?14, merged_into = ?15, archived_at = ?16 \
         WHERE key = ?1",
        args![
        m.key.0,
        m.kind,
        m.name,
        m.content,
        serde_json::to_string(&m.tags)?,
        m.importance,
        serde_json::to_string(&m.metadata)?,
        hash,
        m.updated_at,
        m.valid_from,
        m.valid_until,
        m.superseded_by,
        m.version,
        m.deleted_at,
        m.merged_into,
        m.archived_at,
        ],
    )?;
    Ok(())
}

/// Writes every column of `m` back, timestamps, usage and salience included (what consolidation
/// changes on a survivor, and what undoing it puts back).
pub fn save_all(db: &Db, m: &Memory) -> Result<()> {
    save(db, m)?;
    db.execute(
        "UPDATE memories SET created_at = ?2, accessed_at = ?3, access_count = ?4, \
         salience = ?5, salience_at = ?6 WHERE key = ?1",
        args![
            m.key.0,
            m.created_at,
            m.accessed_at,
            m.access_count,
            m.salience,
            m.salience_at
        ],
    )?;
    Ok(())
}

/// The condition of [`unnamed_twin`]. Served by the (namespace, content_hash) index; the other
/// columns only filter its few rows (SQLite's `+kind` keeps its planner off the (namespace,
/// kind) index, which would scan every memory of that kind).
const TWIN_WHERE: &str = "namespace = ?1 AND content_hash = ?2 AND deleted_at IS NULL \
    AND name IS NULL AND +kind = ?3 AND valid_from IS ?4 AND valid_until IS ?5 LIMIT 1";
/// [`TWIN_WHERE`] in PostgreSQL's words.
const TWIN_WHERE_PG: &str = "namespace = ?1 AND content_hash = ?2 AND deleted_at IS NULL \
    AND name IS NULL AND kind = ?3 AND valid_from IS NOT DISTINCT FROM ?4 \
    AND valid_until IS NOT DISTINCT FROM ?5 LIMIT 1";

/// The live unnamed memory of `namespace` that a new unnamed one with this content hash, kind
/// and validity would repeat (the identity of unnamed memories). Named memories are never
/// returned: a name is an identity of its own.
pub fn unnamed_twin(
    db: &Db,
    namespace: &str,
    hash: &[u8],
    kind: &str,
    valid_from: Option<Millis>,
    valid_until: Option<Millis>,
) -> Result<Option<Memory>> {
    let twin = if db.is_postgres() {
        TWIN_WHERE_PG
    } else {
        TWIN_WHERE
    };
    let sql = format!("SELECT {COLS} FROM memories WHERE {twin}");
    db.query_opt(
        &sql,
        args![namespace, hash, kind, valid_from, valid_until],
        from_row,
    )
}

/// A memory by external id, forgotten or not.
pub fn by_id(db: &Db, id: &str) -> Result<Option<Memory>> {
    let sql = format!("SELECT {COLS} FROM memories WHERE id = ?1");
    db.query_opt(&sql, args![id], from_row)
}

/// A memory by internal key, forgotten or not.
pub fn by_key(db: &Db, key: MemoryKey) -> Result<Option<Memory>> {
    let sql = format!("SELECT {COLS} FROM memories WHERE key = ?1");
    db.query_opt(&sql, args![key.0], from_row)
}

/// The live memory named `name` in `namespace`; when none is live, the most recently forgotten one
/// if `include_forgotten`.
pub fn by_name(
    db: &Db,
    namespace: &str,
    name: &str,
    include_forgotten: bool,
) -> Result<Option<Memory>> {
    // Two plain statements, so each can use its index (a `deleted_at IS NULL OR ?` condition
    // would defeat the partial index and scan the table).
    let live = format!(
        "SELECT {COLS} FROM memories WHERE namespace = ?1 AND name = ?2 AND deleted_at IS NULL LIMIT 1"
    );
    let found = db.query_opt(&live, args![namespace, name], from_row)?;
    if found.is_some() || !include_forgotten {
        return Ok(found);
    }
    let forgotten = format!(
        "SELECT {COLS} FROM memories WHERE namespace = ?1 AND name = ?2 AND deleted_at IS NOT NULL \
         ORDER BY deleted_at DESC LIMIT 1"
    );
    db.query_opt(&forgotten, args![namespace, name], from_row)
}

/// The memories with these keys, in the order of `keys` (each once); unknown keys are skipped.
pub fn by_keys(db: &Db, keys: &[MemoryKey]) -> Result<Vec<Memory>> {
    let mut out = Vec::with_capacity(keys.len());
    // One statement per chunk instead of one per key: a round trip less per key on a database
    // server, and on SQLite one prepared statement's step over the list instead of a reset,
    // bind and step per key.
    let raw: Vec<i64> = keys.iter().map(|k| k.0).collect();
    super::in_chunks(&raw, |marks, list| {
        let sql = format!("SELECT {COLS} FROM memories WHERE key IN ({marks})");
        db.for_each(&sql, list, |r| {
            out.push(from_row(r)?);
            Ok(())
        })
    })?;
    if !keys.is_sorted() {
        let at: HashMap<MemoryKey, usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
        out.sort_by_key(|m| at.get(&m.key).copied());
    } else if !out.is_sorted_by_key(|m| m.key) {
        out.sort_by_key(|m| m.key);
    }
    Ok(out)
}

/// Up to `n` live memories with keys above `after`, in key order (for index rebuilds).
pub fn live_page(db: &Db, after: MemoryKey, n: usize) -> Result<Vec<Memory>> {
    let sql = format!(
        "SELECT {COLS} FROM memories WHERE key > ?1 AND deleted_at IS NULL ORDER BY key LIMIT ?2"
    );
    db.query_all(&sql, args![after.0, n], from_row)
}

/// Up to `n` live memories with keys above `after` in `namespaces` (all for `None`), in key
/// order (for exports).
pub fn live_page_in(
    db: &Db,
    namespaces: Option<&[String]>,
    after: MemoryKey,
    n: usize,
) -> Result<Vec<Memory>> {
    let Some(namespaces) = namespaces else {
        return live_page(db, after, n);
    };
    let marks = vec!["?"; namespaces.len()].join(", ");
    let sql = format!(
        "SELECT {COLS} FROM memories WHERE key > ? AND deleted_at IS NULL \
         AND namespace IN ({marks}) ORDER BY key LIMIT ?"
    );
    let mut list = vec![Arg::Int(after.0)];
    list.extend(namespaces.iter().map(|s| Arg::Text(s)));
    list.push(Arg::Int(n as i64));
    db.query_all(&sql, &list, from_row)
}

/// Number of live memories in `namespaces` (all for `None`).
pub fn count_live(db: &Db, namespaces: Option<&[String]>) -> Result<i64> {
    match namespaces {
        Some(nss) => count_in(db, nss),
        None => db.query_one(
            "SELECT count(*) FROM memories WHERE deleted_at IS NULL",
            &[],
            |r| r.get(0),
        ),
    }
}

/// An upper bound of the number of memories, read in O(log n) (the largest key).
pub fn approximate_count(db: &Db) -> Result<i64> {
    let max: Option<i64> = db.query_one("SELECT max(key) FROM memories", &[], |r| r.get(0))?;
    Ok(max.unwrap_or(0).max(0))
}

/// Number of live memories in `namespaces`.
pub fn count_in(db: &Db, namespaces: &[String]) -> Result<i64> {
    let mut n = 0;
    for ns in namespaces {
        n += db.query_one(
            "SELECT count(*) FROM memories WHERE namespace = ?1 AND deleted_at IS NULL",
            args![ns],
            |r| r.get::<i64>(0),
        )?;
    }
    Ok(n)
}

/// Keys of the live memories in `namespaces`.
pub fn keys_in(db: &Db, namespaces: &[String]) -> Result<Vec<MemoryKey>> {
    Ok(keys_in_at_most(db, namespaces, usize::MAX)?.unwrap_or_default())
}

/// Keys of the live memories in `namespaces` when there are at most `most` of them, else `None`:
/// one pass that stops at the first key too many, where a count and then the keys read each
/// row twice (every row is a table lookup: no index covers `deleted_at`).
pub fn keys_in_at_most(
    db: &Db,
    namespaces: &[String],
    most: usize,
) -> Result<Option<Vec<MemoryKey>>> {
    let mut out = Vec::new();
    for ns in namespaces {
        let room = most
            .saturating_add(1)
            .saturating_sub(out.len())
            .min(i64::MAX as usize) as i64;
        db.for_each(
            "SELECT key FROM memories WHERE namespace = ?1 AND deleted_at IS NULL LIMIT ?2",
            args![ns, room],
            |r| {
                out.push(MemoryKey(r.get(0)?));
                Ok(())
            },
        )?;
        if out.len() > most {
            return Ok(None);
        }
    }
    Ok(Some(out))
}

/// Up to `n` live memories above `after` (in key order), each with its namespace.
pub fn namespaces_page(db: &Db, after: MemoryKey, n: usize) -> Result<Vec<(MemoryKey, String)>> {
    db.query_all(
        "SELECT key, namespace FROM memories WHERE key > ?1 AND deleted_at IS NULL \
         ORDER BY key LIMIT ?2",
        args![after.0, n],
        |r| Ok((MemoryKey(r.get(0)?), r.get(1)?)),
    )
}

/// Number of live relations between each of `keys` and a memory not forgotten.
pub fn relation_counts(db: &Db, keys: &[MemoryKey]) -> Result<HashMap<MemoryKey, i64>> {
    // Relations to forgotten memories are not counted (nor listed, nor walked).
    const COUNT: &str = "(SELECT count(*) FROM relations r JOIN memories d ON d.key = r.dst \
         WHERE r.src = {k} AND r.deleted_at IS NULL AND d.deleted_at IS NULL) + \
         (SELECT count(*) FROM relations r JOIN memories s ON s.key = r.src \
         WHERE r.dst = {k} AND r.deleted_at IS NULL AND s.deleted_at IS NULL)";
    let mut out = HashMap::with_capacity(keys.len());
    if db.is_postgres() {
        for k in keys {
            out.insert(*k, 0);
        }
        let raw: Vec<i64> = keys.iter().map(|k| k.0).collect();
        let count = COUNT.replace("{k}", "m.key");
        super::in_chunks(&raw, |marks, list| {
            let sql = format!("SELECT m.key, {count} FROM memories m WHERE m.key IN ({marks})");
            db.for_each(&sql, list, |r| {
                out.insert(MemoryKey(r.get(0)?), r.get(1)?);
                Ok(())
            })
        })?;
        return Ok(out);
    }
    let sql = format!("SELECT {}", COUNT.replace("{k}", "?1"));
    for k in keys {
        let n = db.query_one(&sql, args![k.0], |r| r.get(0))?;
        out.insert(*k, n);
    }
    Ok(out)
}

/// Records that these memories were returned to a caller; `reinforce` gives the new salience
/// from the stored one and the time it was computed at, or `None` to leave both as they are.
/// A key listed n times counts n uses and is reinforced once (a use reinforces at most once a
/// day). One statement reads the memories and one writes them, per few hundred keys: a flush
/// carries every access since the last one, and a statement per key and column read held the
/// write lock for the whole list.
pub fn touch(
    db: &Db,
    keys: &[MemoryKey],
    now: Millis,
    reinforce: impl Fn(f64, Millis) -> Option<f64>,
) -> Result<()> {
    let mut uses: HashMap<i64, i64> = HashMap::with_capacity(keys.len());
    for k in keys {
        *uses.entry(k.0).or_default() += 1;
    }
    let mut raw: Vec<i64> = uses.keys().copied().collect();
    raw.sort_unstable();
    let mut rows: Vec<(i64, i64, Option<f64>)> = Vec::with_capacity(raw.len());
    super::in_chunks(&raw, |marks, list| {
        let sql = format!("SELECT key, salience, salience_at FROM memories WHERE key IN ({marks})");
        db.for_each(&sql, list, |r| {
            let key: i64 = r.get(0)?;
            rows.push((key, uses[&key], reinforce(r.get(1)?, r.get(2)?)));
            Ok(())
        })
    })?;
    const ROWS: usize = 300;
    let row = if db.is_postgres() {
        "(CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS DOUBLE PRECISION))"
    } else {
        "(?, ?, ?)"
    };
    for chunk in rows.chunks(ROWS) {
        let sql = format!(
            "UPDATE memories SET accessed_at = ?1, access_count = access_count + v.column2, \
             salience = COALESCE(v.column3, salience), \
             salience_at = CASE WHEN v.column3 IS NULL THEN salience_at ELSE ?1 END \
             FROM (VALUES {}) AS v WHERE memories.key = v.column1",
            vec![row; chunk.len()].join(", ")
        );
        let mut list = Vec::with_capacity(1 + 3 * chunk.len());
        list.push(Arg::Int(now));
        for (key, n, s) in chunk {
            list.extend([Arg::Int(*key), Arg::Int(*n), s.map_or(Arg::Null, Arg::Real)]);
        }
        db.execute(&sql, &list)?;
    }
    Ok(())
}

/// Up to `n` memories of `namespace` with keys above `after`, in key order, that are neither
/// forgotten nor (unless `archived`) archived: what a consolidation run examines.
pub fn scan_page(
    db: &Db,
    namespace: &str,
    after: MemoryKey,
    n: usize,
    archived: bool,
) -> Result<Vec<Memory>> {
    let sql = format!(
        "SELECT {COLS} FROM memories WHERE namespace = ?1 AND key > ?2 AND deleted_at IS NULL \
         AND (?4 OR archived_at IS NULL) ORDER BY key LIMIT ?3"
    );
    db.query_all(&sql, args![namespace, after.0, n, archived], from_row)
}

/// Groups of two or more live, unarchived memories of `namespace` that share kind, content and
/// validity, as keys in key order (exact repeats, for consolidation).
pub fn exact_repeats(db: &Db, namespace: &str) -> Result<Vec<Vec<MemoryKey>>> {
    let sql = if db.is_postgres() {
        "SELECT string_agg(CAST(key AS TEXT), ',' ORDER BY key) FROM memories \
         WHERE namespace = ?1 AND deleted_at IS NULL AND archived_at IS NULL \
         GROUP BY kind, content_hash, valid_from, valid_until HAVING count(*) > 1"
    } else {
        "SELECT group_concat(key) FROM (SELECT key, kind, content_hash, valid_from, valid_until \
         FROM memories WHERE namespace = ?1 AND deleted_at IS NULL AND archived_at IS NULL \
         ORDER BY key) GROUP BY kind, content_hash, valid_from, valid_until HAVING count(*) > 1"
    };
    db.query_all(sql, args![namespace], |r| {
        Ok(r.get_str(0)?
            .split(',')
            .filter_map(|k| k.parse().ok().map(MemoryKey))
            .collect())
    })
}

/// The namespaces that hold at least one memory, forgotten or not, in name order: one index
/// probe per namespace (a skip scan of the `(namespace, kind)` index), not a pass over every
/// memory.
pub fn namespaces(db: &Db) -> Result<Vec<String>> {
    db.query_all(
        "WITH RECURSIVE ns(name) AS (\
             SELECT min(namespace) FROM memories \
             UNION ALL \
             SELECT (SELECT min(namespace) FROM memories WHERE namespace > ns.name) \
             FROM ns WHERE ns.name IS NOT NULL) \
         SELECT name FROM ns WHERE name IS NOT NULL",
        &[],
        |r| r.get(0),
    )
}

/// A memory as a listing shows it: who it is and the start of its content.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    pub key: MemoryKey,
    pub id: String,
    pub namespace: String,
    pub name: Option<String>,
    pub kind: String,
    /// The first 200 characters of its content.
    pub head: String,
}

/// Up to `n` live memories, newest first (by key), below `before` when given, in `namespaces`
/// (all for `None`; none for an empty list).
pub fn newest(
    db: &Db,
    namespaces: Option<&[String]>,
    before: Option<MemoryKey>,
    n: usize,
) -> Result<Vec<Listing>> {
    let mut sql = "SELECT key, id, namespace, name, kind, substr(content, 1, 200) FROM memories \
                   WHERE deleted_at IS NULL AND key < ?"
        .to_owned();
    let mut list = vec![Arg::Int(before.map_or(i64::MAX, |k| k.0))];
    if !super::namespace_in(&mut sql, &mut list, "AND", namespaces) {
        return Ok(Vec::new());
    }
    sql.push_str(" ORDER BY key DESC LIMIT ?");
    list.push(Arg::Int(n as i64));
    db.query_all(&sql, &list, |r| {
        Ok(Listing {
            key: MemoryKey(r.get(0)?),
            id: r.get(1)?,
            namespace: r.get(2)?,
            name: r.get(3)?,
            kind: r.get(4)?,
            head: r.get(5)?,
        })
    })
}

/// Up to `n` ids of live memories of `namespace` that start with `prefix`, in id order (the
/// newest first when `prefix` is empty).
pub fn ids_with_prefix(db: &Db, namespace: &str, prefix: &str, n: usize) -> Result<Vec<String>> {
    if prefix.is_empty() {
        return db.query_all(
            "SELECT id FROM memories WHERE namespace = ?1 AND deleted_at IS NULL \
             ORDER BY key DESC LIMIT ?2",
            args![namespace, n as i64],
            |r| r.get(0),
        );
    }
    if db.is_postgres() {
        // A database's collation may order ids other than byte-wise: no range on them there.
        return db.query_all(
            "SELECT id FROM memories WHERE namespace = ?1 AND starts_with(id, ?2) \
             AND deleted_at IS NULL ORDER BY id LIMIT ?3",
            args![namespace, prefix, n as i64],
            |r| r.get(0),
        );
    }
    // A range on the unique index of ids (SQLite compares text byte-wise).
    let mut end = prefix.to_owned();
    end.push(char::MAX);
    db.query_all(
        "SELECT id FROM memories WHERE id >= ?1 AND id < ?2 AND namespace = ?3 \
         AND deleted_at IS NULL ORDER BY id LIMIT ?4",
        args![prefix, end.as_str(), namespace, n as i64],
        |r| r.get(0),
    )
}

/// Counts per namespace and kind of live memories, and totals; of `namespaces` only when given
/// (a relation counts when both its ends are in them).
pub fn stats(db: &Db, namespaces: Option<&[String]>) -> Result<Stats> {
    stats_by(db, namespaces, !db.is_postgres())
}

/// [`stats`] counted over one scan of the memories (`scan`, SQLite's way, see
/// [`counted_by_scan`]) or by grouped queries (PostgreSQL's, which groups by hashing).
fn stats_by(db: &Db, namespaces: Option<&[String]>, scan: bool) -> Result<Stats> {
    // `?1, ?2, …` for the namespaces, and the condition on a memory's namespace (the empty
    // list matches nothing).
    let list = namespaces.map(|nss| {
        (1..=nss.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let within = |column: &str| match &list {
        None => String::new(),
        Some(l) if l.is_empty() => " AND 1 = 0".to_owned(),
        Some(l) => format!(" AND {column} IN ({l})"),
    };
    let list: Vec<Arg<'_>> = namespaces
        .unwrap_or(&[])
        .iter()
        .map(|s| Arg::Text(s))
        .collect();
    let group = |sql: &str| -> Result<Vec<(String, i64)>> {
        db.query_all(sql, &list, |r| Ok((r.get(0)?, r.get(1)?)))
    };
    let one = |sql: &str| -> Result<i64> { db.query_one(sql, &list, |r| r.get(0)) };
    let ns = within("namespace");
    let relations = match namespaces {
        None => one("SELECT count(*) FROM relations WHERE deleted_at IS NULL")?,
        Some(_) => one(&format!(
            "SELECT count(*) FROM relations r JOIN memories a ON a.key = r.src \
             JOIN memories b ON b.key = r.dst WHERE r.deleted_at IS NULL{}{}",
            within("a.namespace"),
            within("b.namespace")
        ))?,
    };
    if scan {
        return counted_by_scan(db, &ns, &list, relations);
    }
    let by_namespace = group(&format!(
        "SELECT namespace, count(*) FROM memories WHERE deleted_at IS NULL{ns} \
         GROUP BY namespace ORDER BY count(*) DESC, namespace"
    ))?;
    let by_kind = group(&format!(
        "SELECT kind, count(*) FROM memories WHERE deleted_at IS NULL{ns} \
         GROUP BY kind ORDER BY count(*) DESC, kind"
    ))?;
    Ok(Stats {
        memories: one(&format!(
            "SELECT count(*) FROM memories WHERE deleted_at IS NULL{ns}"
        ))?,
        relations,
        forgotten_memories: one(&format!(
            "SELECT count(*) FROM memories WHERE deleted_at IS NOT NULL{ns}"
        ))?,
        by_namespace,
        by_kind,
        text_index_lag: 0,
        database_bytes: 0,
        ..Stats::default()
    })
}

/// [`stats`] on SQLite: one scan of the memories counted here. SQLite groups by sorting every
/// row into a temporary B-tree, and its `(namespace, kind)` index does not say which memories
/// are forgotten, so the four grouped counts took 175 ms at 100,000 memories where the scan and
/// the counting take a fraction of that (see docs/figures.md, "Counting for stats").
fn counted_by_scan(db: &Db, within: &str, list: &[Arg<'_>], relations: i64) -> Result<Stats> {
    // Live memories per name, looked up by the row's borrowed text: a row allocates nothing.
    fn add(counts: &mut HashMap<String, i64>, name: &str) {
        match counts.get_mut(name) {
            Some(c) => *c += 1,
            None => {
                counts.insert(name.to_owned(), 1);
            }
        }
    }
    let (mut live, mut forgotten) = (0, 0);
    let (mut namespaces, mut kinds) = (HashMap::new(), HashMap::new());
    db.for_each(
        &format!("SELECT namespace, kind, deleted_at IS NULL FROM memories WHERE 1 = 1{within}"),
        list,
        |r| {
            if r.get::<i64>(2)? == 0 {
                forgotten += 1;
                return Ok(());
            }
            live += 1;
            add(&mut namespaces, r.get_str(0)?);
            add(&mut kinds, r.get_str(1)?);
            Ok(())
        },
    )?;
    // As the grouped queries order them: most first, then by name (SQLite compares bytes).
    let ordered = |counts: HashMap<String, i64>| {
        let mut counts: Vec<(String, i64)> = counts.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        counts
    };
    let (by_namespace, by_kind) = (ordered(namespaces), ordered(kinds));
    Ok(Stats {
        memories: live,
        relations,
        forgotten_memories: forgotten,
        by_namespace,
        by_kind,
        ..Stats::default()
    })
}

/// Live, unarchived memories of `namespace` that hold at `now` and state a slot of a subject —
/// metadata `subject` and `attribute` (one of `attributes`, compared without case) — where
/// one slot has two or more such memories: candidates of contradictions, ordered by subject,
/// attribute, then start (`valid_from`, else creation).
pub fn shared_slots(
    db: &Db,
    namespace: &str,
    attributes: &[String],
    now: Millis,
) -> Result<Vec<Memory>> {
    if attributes.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; attributes.len()].join(", ");
    let (slot, attr, is_json) = if db.is_postgres() {
        // Metadata is always written as a JSON object, so the cast cannot fail.
        (
            "(CAST(metadata AS JSONB) ->> 'subject')",
            "lower(CAST(metadata AS JSONB) ->> 'attribute')",
            "jsonb_typeof(CAST(metadata AS JSONB) -> 'subject') = 'string'",
        )
    } else {
        (
            "json_extract(metadata, '$.subject')",
            "lower(json_extract(metadata, '$.attribute'))",
            "json_valid(metadata) AND json_type(metadata, '$.subject') = 'text'",
        )
    };
    let live = format!(
        "namespace = ?1 AND deleted_at IS NULL AND archived_at IS NULL \
         AND (valid_until IS NULL OR valid_until > ?2) AND {is_json} AND {attr} IN ({marks})"
    );
    let sql = format!(
        "SELECT {COLS} FROM memories WHERE {live} AND ({slot}, {attr}) IN ( \
           SELECT {slot}, {attr} FROM memories WHERE {live} GROUP BY 1, 2 HAVING count(*) > 1) \
         ORDER BY {slot}, {attr}, coalesce(valid_from, created_at), key"
    );
    let lowered: Vec<String> = attributes.iter().map(|a| a.to_lowercase()).collect();
    let mut list = vec![Arg::Text(namespace), Arg::Int(now)];
    for _ in 0..2 {
        list.extend(lowered.iter().map(|a| Arg::Text(a)));
    }
    db.query_all(&sql, &list, from_row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::store::Store;

    fn new(name: Option<&str>, kind: &str, valid_from: Option<Millis>) -> NewMemory {
        NewMemory {
            kind: kind.into(),
            name: name.map(str::to_owned),
            valid_from,
            ..NewMemory::note("ok")
        }
    }

    #[test]
    fn the_unnamed_twin_matches_content_kind_and_validity_through_the_hash_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Config::for_db(dir.path().join("m.db"))).unwrap();
        let hash = content_hash("ok");
        store
            .write(|tx| {
                insert(tx, "m_named", &new(Some("n"), "note", None), 1)?;
                let twin = |kind: &str, from| unnamed_twin(tx, "default", &hash, kind, from, None);
                assert!(twin("note", None)?.is_none(), "a named memory is no twin");
                insert(tx, "m_plain", &new(None, "note", None), 1)?;
                assert_eq!(twin("note", None)?.map(|m| m.id), Some("m_plain".into()));
                assert!(twin("episode", None)?.is_none());
                assert!(twin("note", Some(5))?.is_none());
                insert(tx, "m_dated", &new(None, "note", Some(5)), 1)?;
                assert_eq!(twin("note", Some(5))?.map(|m| m.id), Some("m_dated".into()));
                let plan: Vec<String> = tx.query_all(
                    &format!("EXPLAIN QUERY PLAN SELECT key FROM memories WHERE {TWIN_WHERE}"),
                    args!["default", hash, "note", 5, None::<i64>],
                    |r| r.get(3),
                )?;
                assert!(plan.iter().any(|p| p.contains("memories_hash")), "{plan:?}");
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn keys_of_a_scope_are_read_only_while_there_are_few_enough() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Config::for_db(dir.path().join("m.db"))).unwrap();
        let keys = store
            .write(|tx| {
                let mut keys = Vec::new();
                for (i, ns) in ["a", "a", "a", "b", "b", "c"].iter().enumerate() {
                    let m = NewMemory {
                        namespace: (*ns).into(),
                        ..NewMemory::note(&format!("n {i}"))
                    };
                    keys.push(insert(tx, &format!("m_{i}"), &m, 1)?.key);
                }
                // A forgotten memory is not in its namespace any more.
                tx.execute(
                    "UPDATE memories SET deleted_at = 2 WHERE key = ?1",
                    args![keys[1].0],
                )?;
                Ok(keys)
            })
            .unwrap();
        let scope = |ns: &[&str], most: usize| {
            let ns: Vec<String> = ns.iter().map(|n| (*n).to_owned()).collect();
            store.read(|c| keys_in_at_most(c, &ns, most)).unwrap()
        };
        assert_eq!(scope(&["a"], 2), Some(vec![keys[0], keys[2]]));
        assert_eq!(scope(&["a"], 1), None);
        assert_eq!(
            scope(&["a", "b"], 4),
            Some(vec![keys[0], keys[2], keys[3], keys[4]])
        );
        assert_eq!(scope(&["a", "b"], 3), None);
        assert_eq!(scope(&["b", "c"], 3), Some(vec![keys[3], keys[4], keys[5]]));
        assert_eq!(scope(&["none"], 0), Some(vec![]));
        assert_eq!(scope(&["c"], 0), None);
    }

    #[test]
    fn rows_by_keys_come_in_the_order_asked_without_the_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Config::for_db(dir.path().join("m.db"))).unwrap();
        let keys: Vec<MemoryKey> = store
            .write(|tx| {
                (0..600)
                    .map(|i| {
                        insert(
                            tx,
                            &format!("m_{i}"),
                            &NewMemory::note(&format!("n {i}")),
                            1,
                        )
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        let found = |asked: &[MemoryKey]| -> Vec<MemoryKey> {
            let rows = store.read(|c| by_keys(c, asked)).unwrap();
            rows.into_iter().map(|m| m.key).collect()
        };
        let unknown = MemoryKey(1_000_000);
        // Unsorted, over more than one statement's list, with an unknown key among them.
        let mut asked: Vec<MemoryKey> = keys.iter().rev().step_by(2).copied().collect();
        asked.insert(7, unknown);
        let got = found(&asked);
        asked.retain(|k| *k != unknown);
        assert_eq!(got, asked);
        assert_eq!(found(&keys[10..20]), keys[10..20]);
    }

    /// Text another writer stored as invalid UTF-8 (SQLite does not check) reads as the text
    /// with U+FFFD in place of the bad bytes; the valid text around it is kept.
    #[test]
    fn invalid_utf8_stored_by_another_writer_reads_with_replacement_characters() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Config::for_db(dir.path().join("m.db"))).unwrap();
        let m = store
            .write(|tx| insert(tx, "m_bad", &NewMemory::note("tea"), 1))
            .unwrap();
        store
            .write(|tx| {
                tx.lite()
                    .execute(
                        "UPDATE memories SET content = CAST(X'7465612CFF2067726565E9' AS TEXT) WHERE key = ?1",
                        [m.key.0],
                    )
                    .unwrap();
                Ok(())
            })
            .unwrap();
        let rows = store.read(|c| by_keys(c, &[m.key])).unwrap();
        assert_eq!(rows[0].content, "tea,\u{fffd} gree\u{fffd}");
    }

    /// The scan SQLite counts with gives what the grouped queries give: live and forgotten
    /// memories, ties ordered by name, within no namespace, one, or several.
    #[test]
    fn stats_by_one_scan_agree_with_the_grouped_queries() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Config::for_db(dir.path().join("m.db"))).unwrap();
        store
            .write(|tx| {
                let spread = [("b", "note"), ("a", "fact"), ("b", "fact"), ("c", "note")];
                for i in 0..40 {
                    let (ns, kind) = spread[i % spread.len()];
                    let m = NewMemory {
                        namespace: ns.into(),
                        kind: kind.into(),
                        ..NewMemory::note(&format!("memory {i}"))
                    };
                    let mut m = insert(tx, &format!("m_{i}"), &m, 1)?;
                    if i % 10 == 0 {
                        m.deleted_at = Some(2);
                        save(tx, &m)?;
                    }
                }
                Ok(())
            })
            .unwrap();
        store
            .read(|db| {
                let lists: [Option<Vec<String>>; 4] = [
                    None,
                    Some(vec![]),
                    Some(vec!["b".into()]),
                    Some(vec!["a".into(), "c".into(), "zz".into()]),
                ];
                for list in &lists {
                    let scanned = stats_by(db, list.as_deref(), true)?;
                    let grouped = stats_by(db, list.as_deref(), false)?;
                    assert_eq!(scanned, grouped, "{list:?}");
                }
                let all = stats_by(db, None, true)?;
                assert_eq!((all.memories, all.forgotten_memories), (36, 4));
                // Ties go by name.
                assert_eq!(all.by_kind, [("fact".into(), 18), ("note".into(), 18)]);
                let by_namespace = [("b".into(), 16), ("a".into(), 10), ("c".into(), 10)];
                assert_eq!(all.by_namespace, by_namespace);
                Ok(())
            })
            .unwrap();
    }
}
