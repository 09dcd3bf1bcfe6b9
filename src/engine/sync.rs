//! Keeping the text index in step with the change log, across threads and processes.

use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::error::Result;
use crate::index::text::{TextDoc, TextOp};
use crate::model::{Memory, MemoryKey};
use crate::store::{changes, memories};

/// Memories read from the database per batch during a full rebuild.
const REBUILD_BATCH: usize = 5_000;
/// Pending change-log entries beyond which a read during an import leaves indexing to the
/// background job.
const BULK_READ_LAG: i64 = 256;
/// How long a read waits for another process that holds the index writer to catch up.
const WAIT_FOR_OTHER_WRITER: Duration = Duration::from_secs(2);

fn doc_of(m: Memory) -> TextDoc {
    TextDoc {
        key: m.key,
        namespace: m.namespace,
        kind: m.kind,
        name: m.name,
        content: m.content,
        tags: m.tags,
        created_at: m.created_at,
        importance: m.importance,
    }
}

impl Engine {
    /// Change-log entries the text index has not applied yet.
    pub fn text_lag(&self) -> Result<i64> {
        let target = self.store.read(changes::max_seq)?;
        Ok((target - self.text.reader_seq()).max(0))
    }

    /// What a read does before searching: [`Engine::sync_text`], except while an import runs
    /// and more than [`BULK_READ_LAG`] entries are pending. Then the read searches what the
    /// background job has indexed so far (it commits every tick) instead of indexing a whole
    /// import batch itself.
    pub(crate) fn sync_text_for_read(&self) -> Result<()> {
        if self.bulk.load(std::sync::atomic::Ordering::Acquire) > 0 {
            let target = self.store.read(changes::max_seq)?;
            if target - self.text.refresh()? > BULK_READ_LAG {
                return Ok(());
            }
        }
        self.sync_text()
    }

    /// Brings the text index up to the newest change-log entry, so that a read sees every write
    /// committed before it started. When another process holds the index writer, waits (briefly)
    /// for it to index instead; after that, reads what is there and logs the lag.
    pub fn sync_text(&self) -> Result<()> {
        let target = self.store.read(changes::max_seq)?;
        if self.text.reader_seq() >= target {
            return Ok(());
        }
        let deadline = Instant::now() + WAIT_FOR_OTHER_WRITER;
        loop {
            if self.text.refresh()? >= target {
                return Ok(());
            }
            match self.text.update(|base| self.text_ops(base, target))? {
                Some(seq) if seq >= target => return Ok(()),
                Some(_) => {}
                None => std::thread::sleep(Duration::from_millis(5)),
            }
            if Instant::now() > deadline {
                tracing::warn!(
                    lag = target - self.text.reader_seq(),
                    "another process holds the text index writer and has not caught up; reading a slightly stale index"
                );
                return Ok(());
            }
        }
    }

    /// The index changes that take it from `base` to `target`: a full rebuild from a fresh index,
    /// otherwise the memories the change log names since `base`.
    fn text_ops(&self, base: i64, target: i64) -> Result<(Vec<TextOp>, i64)> {
        self.store.read(|conn| {
            let mut ops = Vec::new();
            if base == 0 {
                let mut after = MemoryKey(0);
                loop {
                    let page = memories::live_page(conn, after, REBUILD_BATCH)?;
                    let Some(last) = page.last() else { break };
                    after = last.key;
                    ops.extend(page.into_iter().map(|m| TextOp::Upsert(doc_of(m))));
                }
                if !ops.is_empty() {
                    tracing::info!(
                        n_memories = ops.len(),
                        "text index rebuilt from the database"
                    );
                }
            } else {
                let keys = changes::memories_changed(conn, base, target)?;
                let found = memories::by_keys(conn, &keys)?;
                let mut live = std::collections::HashSet::new();
                for m in found {
                    if m.deleted_at.is_none() {
                        live.insert(m.key);
                        ops.push(TextOp::Upsert(doc_of(m)));
                    }
                }
                ops.extend(
                    keys.into_iter()
                        .filter(|k| !live.contains(k))
                        .map(TextOp::Delete),
                );
            }
            Ok((ops, target))
        })
    }

    /// Drops the text index's content and indexes every live memory again.
    pub fn reindex_text(&self) -> Result<u64> {
        let deadline = Instant::now() + WAIT_FOR_OTHER_WRITER;
        while !self.text.clear()? {
            if Instant::now() > deadline {
                return Err(crate::error::Error::Conflict {
                    reason: "another mnemograph process holds the text index writer".into(),
                    hint: "stop the other servers on this database, or retry in a moment".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.sync_text()?;
        Ok(self.text.num_docs())
    }
}
