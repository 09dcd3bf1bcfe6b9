//! Identities of imported records: which memory a source's id (`memorygraph:<uuid>`, a LoCoMo
//! turn, an exported memory's id) became, per namespace.

use super::{Db, args};
use crate::error::Result;
use crate::model::MemoryKey;

/// The memory that `ext` became in `namespace`, if it was imported there before.
pub fn get(db: &Db, namespace: &str, ext: &str) -> Result<Option<MemoryKey>> {
    db.query_opt(
        "SELECT memory_key FROM import_keys WHERE namespace = ?1 AND ext = ?2",
        args![namespace, ext],
        |r| Ok(MemoryKey(r.get(0)?)),
    )
}

/// Records that `ext` became memory `key` in `namespace` (a repeat keeps the first).
pub fn put(db: &Db, namespace: &str, ext: &str, key: MemoryKey) -> Result<()> {
    db.execute(
        "INSERT INTO import_keys (namespace, ext, memory_key) VALUES (?1, ?2, ?3) \
         ON CONFLICT DO NOTHING",
        args![namespace, ext, key.0],
    )?;
    Ok(())
}
