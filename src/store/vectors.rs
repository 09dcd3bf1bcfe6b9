//! Embedding rows: one vector per memory, tagged with the model and the memory version it was
//! computed from. The source the vector index is rebuilt from, so rebuilds never re-embed.

use std::collections::HashMap;

use super::{Arg, Db, Row, args};
use crate::error::Result;
use crate::model::{Memory, MemoryKey};

/// A stored vector and the memory version it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVector {
    pub key: MemoryKey,
    pub version: i64,
    pub vec: Vec<f32>,
}

/// A live memory that has no vector of the current model for its current version.
#[derive(Debug, Clone, PartialEq)]
pub struct Unembedded {
    pub key: MemoryKey,
    pub version: i64,
    pub name: Option<String>,
    pub content: String,
}

fn encode(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Stores the vector of memory `key` at `version`, unless the memory has moved on to another
/// version meanwhile (then the row would be stale the moment it lands). True when stored.
pub fn put(db: &Db, key: MemoryKey, model: &str, version: i64, v: &[f32]) -> Result<bool> {
    let current = db
        .query_opt(
            "SELECT 1 FROM memories WHERE key = ?1 AND version = ?2",
            args![key.0, version],
            |_| Ok(()),
        )?
        .is_some();
    if !current {
        return Ok(false);
    }
    db.execute(
        "INSERT INTO vectors (memory_key, model, version, dim, vec) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (memory_key) DO UPDATE SET model = excluded.model, \
         version = excluded.version, dim = excluded.dim, vec = excluded.vec",
        args![key.0, model, version, v.len(), encode(v)],
    )?;
    Ok(true)
}

/// Stores many vectors as [`put`] does (each only while its memory is still at that version);
/// returns how many were stored. On PostgreSQL a few hundred rows go in one statement: a
/// statement per vector would hold the write lock, which every process's writers share, for a
/// round trip each.
pub fn put_many(db: &Db, model: &str, rows: &[(MemoryKey, i64, &[f32])]) -> Result<usize> {
    if !db.is_postgres() {
        let mut n = 0;
        for (key, version, v) in rows {
            n += usize::from(put(db, *key, model, *version, v)?);
        }
        return Ok(n);
    }
    const ROWS: usize = 250;
    let mut n = 0;
    for chunk in rows.chunks(ROWS) {
        let blobs: Vec<Vec<u8>> = chunk.iter().map(|(_, _, v)| encode(v)).collect();
        let values = vec![
            "(CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BYTEA))";
            chunk.len()
        ]
        .join(", ");
        let sql = format!(
            "INSERT INTO vectors (memory_key, model, version, dim, vec) \
             SELECT v.k, CAST(? AS TEXT), v.ver, v.dim, v.vec FROM (VALUES {values}) AS v(k, ver, dim, vec) \
             JOIN memories m ON m.key = v.k AND m.version = v.ver \
             ON CONFLICT (memory_key) DO UPDATE SET model = excluded.model, \
             version = excluded.version, dim = excluded.dim, vec = excluded.vec"
        );
        // Placeholders are numbered in the order they stand in the text: the model's first.
        let mut list = Vec::with_capacity(chunk.len() * 4 + 1);
        list.push(Arg::Text(model));
        for ((key, version, v), blob) in chunk.iter().zip(&blobs) {
            list.extend([
                Arg::Int(key.0),
                Arg::Int(*version),
                Arg::Int(v.len() as i64),
                Arg::Blob(blob),
            ]);
        }
        n += db.execute(&sql, &list)?;
    }
    Ok(n)
}

/// The current vectors (model `model`, the memory's live version) of `keys`; others are skipped.
pub fn current(
    db: &Db,
    model: &str,
    keys: &[MemoryKey],
) -> Result<HashMap<MemoryKey, StoredVector>> {
    const CURRENT: &str = "SELECT v.memory_key, v.version, v.vec FROM vectors v \
        JOIN memories m ON m.key = v.memory_key \
        WHERE v.model = ? AND v.version = m.version AND m.deleted_at IS NULL";
    let mut out = HashMap::with_capacity(keys.len());
    let mut add = |r: &Row<'_>| {
        let key = MemoryKey(r.get(0)?);
        let version = r.get(1)?;
        let vec = decode(r.get_blob(2)?);
        out.insert(key, StoredVector { key, version, vec });
        Ok(())
    };
    if db.is_postgres() {
        // One round trip per chunk of keys, not per key (a catch-up reads thousands).
        let raw: Vec<i64> = keys.iter().map(|k| k.0).collect();
        super::in_chunks(&raw, |marks, list| {
            let sql = format!("{CURRENT} AND v.memory_key IN ({marks})");
            let mut all = Vec::with_capacity(list.len() + 1);
            all.push(Arg::Text(model));
            all.extend_from_slice(list);
            db.for_each(&sql, &all, &mut add)
        })?;
        return Ok(out);
    }
    let sql = format!("{CURRENT} AND v.memory_key = ?");
    for &key in keys {
        db.for_each(&sql, args![model, key.0], &mut add)?;
    }
    Ok(out)
}

/// The live memories among `rows` (their keys) and their current vectors.
pub fn current_of_live(
    db: &Db,
    model: &str,
    rows: &[Memory],
) -> Result<(Vec<MemoryKey>, HashMap<MemoryKey, StoredVector>)> {
    let live: Vec<MemoryKey> = rows
        .iter()
        .filter(|m| m.deleted_at.is_none())
        .map(|m| m.key)
        .collect();
    let have = current(db, model, &live)?;
    Ok((live, have))
}

/// Up to `n` current vectors of live memories with keys above `after`, in key order, each with
/// its memory's namespace (read in the same join: an index filled from these pages knows where
/// each vector belongs without reading the memories again).
pub fn current_page(
    db: &Db,
    model: &str,
    after: MemoryKey,
    n: usize,
) -> Result<Vec<(StoredVector, String)>> {
    db.query_all(
        "SELECT v.memory_key, v.version, v.vec, m.namespace FROM vectors v \
         JOIN memories m ON m.key = v.memory_key \
         WHERE v.memory_key > ?1 AND v.model = ?2 AND v.version = m.version AND m.deleted_at IS NULL \
         ORDER BY v.memory_key LIMIT ?3",
        args![after.0, model, n],
        |r| {
            Ok((
                StoredVector {
                    key: MemoryKey(r.get(0)?),
                    version: r.get(1)?,
                    vec: decode(r.get_blob(2)?),
                },
                r.get(3)?,
            ))
        },
    )
}

/// Up to `n` live memories above `after` (in key order) lacking a current vector of `model`.
pub fn unembedded_page(
    db: &Db,
    model: &str,
    after: MemoryKey,
    n: usize,
) -> Result<Vec<Unembedded>> {
    db.query_all(
        "SELECT m.key, m.version, m.name, m.content FROM memories m \
         LEFT JOIN vectors v ON v.memory_key = m.key AND v.model = ?2 AND v.version = m.version \
         WHERE m.key > ?1 AND m.deleted_at IS NULL AND v.memory_key IS NULL ORDER BY m.key LIMIT ?3",
        args![after.0, model, n],
        |r| {
            Ok(Unembedded {
                key: MemoryKey(r.get(0)?),
                version: r.get(1)?,
                name: r.get(2)?,
                content: r.get(3)?,
            })
        },
    )
}

/// The keys of the live memories lacking a current vector of `model`, in key order.
pub fn unembedded_keys(db: &Db, model: &str) -> Result<Vec<MemoryKey>> {
    db.query_all(
        "SELECT m.key FROM memories m \
         LEFT JOIN vectors v ON v.memory_key = m.key AND v.model = ?1 AND v.version = m.version \
         WHERE m.deleted_at IS NULL AND v.memory_key IS NULL ORDER BY m.key",
        args![model],
        |r| Ok(MemoryKey(r.get(0)?)),
    )
}

/// Live memories, and how many of them have a current vector of `model`.
pub fn coverage(db: &Db, model: &str) -> Result<(i64, i64)> {
    db.query_one(
        "SELECT count(*), count(v.memory_key) FROM memories m \
         LEFT JOIN vectors v ON v.memory_key = m.key AND v.model = ?1 AND v.version = m.version \
         WHERE m.deleted_at IS NULL",
        args![model],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// [`coverage`] of the memories in `namespaces`.
pub fn coverage_in(db: &Db, model: &str, namespaces: &[String]) -> Result<(i64, i64)> {
    let (mut live, mut covered) = (0, 0);
    for ns in namespaces {
        let (l, c): (i64, i64) = db.query_one(
            "SELECT count(*), count(v.memory_key) FROM memories m \
             LEFT JOIN vectors v ON v.memory_key = m.key AND v.model = ?1 AND v.version = m.version \
             WHERE m.deleted_at IS NULL AND m.namespace = ?2",
            args![model, ns],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        live += l;
        covered += c;
    }
    Ok((live, covered))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NewMemory;
    use crate::store::memories;

    #[test]
    fn stale_versions_and_other_models_are_not_current() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::store::schema::migrate(&mut conn).unwrap();
        let db = Db {
            conn: crate::store::sql::Conn::Lite(conn),
        };
        let m = memories::insert(&db, "m1", &NewMemory::note("hello"), 1).unwrap();
        let other = memories::insert(&db, "m2", &NewMemory::note("world"), 1).unwrap();
        assert!(put(&db, m.key, "a", m.version, &[1.0, 0.0]).unwrap());
        assert!(!put(&db, m.key, "a", m.version + 1, &[1.0, 0.0]).unwrap());
        let cur = current(&db, "a", &[m.key, other.key]).unwrap();
        assert_eq!(cur[&m.key].vec, vec![1.0, 0.0]);
        assert!(!cur.contains_key(&other.key));
        assert!(current(&db, "b", &[m.key]).unwrap().is_empty());
        let todo = unembedded_page(&db, "a", MemoryKey(0), 10).unwrap();
        assert_eq!(
            todo.iter().map(|u| u.key).collect::<Vec<_>>(),
            vec![other.key]
        );
        assert_eq!(coverage(&db, "a").unwrap(), (2, 1));
        assert_eq!(current_page(&db, "a", MemoryKey(0), 10).unwrap().len(), 1);
    }
}
