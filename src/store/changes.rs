//! The change log: every write appends here; derived indexes replay it from the `seq` they applied.
//! Each entry carries a random stamp, so a derived index that records the position it applied
//! (`seq` and that entry's stamp, with the database's id) can tell whether the database it
//! meets is still the history it followed: a restored backup reuses positions with other entries.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Arg, Db, args};
use crate::error::Result;
use crate::model::{LogPosition, MemoryKey};

/// A stamp for a new entry: unpredictable across processes (seeded by the OS), distinct within one.
fn next_stamp() -> i64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).expect("the operating system provides randomness");
        u64::from_le_bytes(b)
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // splitmix64 of seed + n: a bijection of n, so no two entries of a process share a stamp.
    let mut z = seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // Positive and non-zero (0 is what entries written before stamps existed carry).
    ((z >> 1) | 1) as i64
}

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

/// Appends one entry: on SQLite at the next position of its `AUTOINCREMENT` key (one writer at a
/// time, so positions are taken and committed in the same order); on PostgreSQL at the position
/// after `log_head`'s, which moves with it. A sequence would not do there: a transaction that
/// took position 9 can commit after the one that took 10, and a reader that applied 10 would
/// never see 9. The head row is locked from the start of every write transaction
/// ([`lock_head`]) to its commit, so positions are gap-free and commit in order (a rolled-back
/// write gives its positions back).
fn append(db: &Db, memory: Option<i64>, relation: Option<i64>, op: ChangeOp) -> Result<()> {
    if db.is_postgres() {
        db.execute(
            "WITH head AS (UPDATE log_head SET seq = seq + 1 WHERE id = 1 RETURNING seq) \
             INSERT INTO changes (seq, memory_key, relation_key, op, stamp) \
             SELECT seq, CAST(?1 AS BIGINT), CAST(?2 AS BIGINT), CAST(?3 AS TEXT), \
             CAST(?4 AS BIGINT) FROM head",
            args![memory, relation, op.as_str(), next_stamp()],
        )?;
        db.mark_logged();
    } else {
        db.execute(
            "INSERT INTO changes (memory_key, relation_key, op, stamp) VALUES (?1, ?2, ?3, ?4)",
            args![memory, relation, op.as_str(), next_stamp()],
        )?;
    }
    Ok(())
}

/// Appends one entry for a memory.
pub fn log_memory(db: &Db, key: MemoryKey, op: ChangeOp) -> Result<()> {
    append(db, Some(key.0), None, op)
}

/// Appends one entry per memory, with `op`, in order. On PostgreSQL the positions are taken
/// together (the head moves once) and the entries written a few hundred per statement.
pub fn log_memories(db: &Db, keys: &[MemoryKey], op: ChangeOp) -> Result<()> {
    if !db.is_postgres() || keys.len() < 2 {
        for k in keys {
            log_memory(db, *k, op)?;
        }
        return Ok(());
    }
    let last: i64 = db.query_one(
        "UPDATE log_head SET seq = seq + ?1 WHERE id = 1 RETURNING seq",
        args![keys.len()],
        |r| r.get(0),
    )?;
    let first = last - keys.len() as i64 + 1;
    const ROWS: usize = 500;
    for (c, chunk) in keys.chunks(ROWS).enumerate() {
        let rows = vec!["(?, ?, ?, ?)"; chunk.len()].join(", ");
        let sql = format!("INSERT INTO changes (seq, memory_key, op, stamp) VALUES {rows}");
        let mut list = Vec::with_capacity(chunk.len() * 4);
        for (i, k) in chunk.iter().enumerate() {
            let seq = first + (c * ROWS + i) as i64;
            list.extend([
                Arg::Int(seq),
                Arg::Int(k.0),
                Arg::Text(op.as_str()),
                Arg::Int(next_stamp()),
            ]);
        }
        db.execute(&sql, &list)?;
    }
    db.mark_logged();
    Ok(())
}

/// Appends one entry for a relation.
pub fn log_relation(db: &Db, relation_key: i64) -> Result<()> {
    append(db, None, Some(relation_key), ChangeOp::Relation)
}

/// What a PostgreSQL write transaction that appended to the log sends at its commit: other
/// processes listening on the channel catch up at once instead of at their next poll.
pub(crate) const NOTIFY: &str = "NOTIFY mnemograph_changes";
/// The channel of [`NOTIFY`].
pub(crate) const CHANNEL: &str = "mnemograph_changes";

/// Locks the head of the log for the rest of the open write transaction (PostgreSQL): every
/// write transaction takes it first, so writers of all processes take turns as SQLite's do, and
/// a read-then-write inside one (a lease, a unique name) sees every earlier commit.
pub(crate) fn lock_head(db: &Db) -> Result<()> {
    db.query_one(
        "SELECT seq FROM log_head WHERE id = 1 FOR UPDATE",
        &[],
        |_| Ok(()),
    )
}

/// The newest position of the log (0 when empty).
pub fn max_seq(db: &Db) -> Result<i64> {
    db.query_one(
        "SELECT CAST(coalesce(max(seq), 0) AS BIGINT) FROM changes",
        &[],
        |r| r.get(0),
    )
}

/// The database's identity, made when it was created (or first opened by a version that keeps one).
pub fn database_id(db: &Db) -> Result<String> {
    db.query_one(
        "SELECT value FROM meta WHERE key = 'database_id'",
        &[],
        |r| r.get(0),
    )
}

/// The newest position of the log with its stamp, and the database's id.
pub fn head(db: &Db) -> Result<LogPosition> {
    let (seq, stamp) = db
        .query_opt(
            "SELECT seq, stamp FROM changes ORDER BY seq DESC LIMIT 1",
            &[],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .unwrap_or((0, 0));
    Ok(LogPosition {
        database: database_id(db)?,
        seq,
        stamp,
    })
}

/// The position `seq` of this database's log, with its stamp; `None` when the log has no entry
/// there (it ends before `seq`).
pub fn position_at(db: &Db, seq: i64) -> Result<Option<LogPosition>> {
    let stamp = if seq == 0 {
        Some(0)
    } else {
        db.query_opt(
            "SELECT stamp FROM changes WHERE seq = ?1",
            args![seq],
            |r| r.get(0),
        )?
    };
    Ok(match stamp {
        Some(stamp) => Some(LogPosition {
            database: database_id(db)?,
            seq,
            stamp,
        }),
        None => None,
    })
}

/// True when `applied` is a position of this database's history: same database, and the log
/// holds the very entry it names. False after a restore (the log is shorter, or holds other
/// entries at that position) or when the position comes from another database.
pub fn follows(db: &Db, applied: &LogPosition) -> Result<bool> {
    Ok(position_at(db, applied.seq)?.is_some_and(|p| p == *applied))
}

/// Memories touched after `after` up to and including `up_to`, each once.
pub fn memories_changed(db: &Db, after: i64, up_to: i64) -> Result<Vec<MemoryKey>> {
    db.query_all(
        "SELECT DISTINCT memory_key FROM changes \
         WHERE seq > ?1 AND seq <= ?2 AND memory_key IS NOT NULL AND op != 'relation'",
        args![after, up_to],
        |r| Ok(MemoryKey(r.get(0)?)),
    )
}

/// The memories changed in `(after, up_to]`, each with the position of its newest change and
/// its row (`None` when the row is gone).
pub fn memories_changed_with_rows(
    db: &Db,
    after: i64,
    up_to: i64,
) -> Result<Vec<(i64, MemoryKey, Option<crate::model::Memory>)>> {
    let changed = memories_changed_at(db, after, up_to)?;
    let keys: Vec<MemoryKey> = changed.iter().map(|(k, _)| *k).collect();
    let mut rows: std::collections::HashMap<MemoryKey, crate::model::Memory> =
        crate::store::memories::by_keys(db, &keys)?
            .into_iter()
            .map(|m| (m.key, m))
            .collect();
    Ok(changed
        .into_iter()
        .map(|(k, seq)| (seq, k, rows.remove(&k)))
        .collect())
}

/// Memories touched after `after` up to and including `up_to`, each once with the position of its
/// newest entry there.
pub fn memories_changed_at(db: &Db, after: i64, up_to: i64) -> Result<Vec<(MemoryKey, i64)>> {
    db.query_all(
        "SELECT memory_key, max(seq) FROM changes \
         WHERE seq > ?1 AND seq <= ?2 AND memory_key IS NOT NULL AND op != 'relation' \
         GROUP BY memory_key",
        args![after, up_to],
        |r| Ok((MemoryKey(r.get(0)?), r.get(1)?)),
    )
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
pub fn since(db: &Db, after: i64, up_to: i64) -> Result<Vec<Change>> {
    db.query_all(
        "SELECT seq, memory_key, relation_key, op FROM changes WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
        args![after, up_to],
        |r| {
            Ok(Change {
                seq: r.get(0)?,
                memory: r.get::<Option<i64>>(1)?.map(MemoryKey),
                relation: r.get(2)?,
                op: match r.get_str(3)? {
                    "insert" => ChangeOp::Insert,
                    "delete" => ChangeOp::Delete,
                    "relation" => ChangeOp::Relation,
                    _ => ChangeOp::Upsert,
                },
            })
        },
    )
}
