//! Keeping the text index in step with the change log, across threads and processes. Reads never
//! wait for another process: what the committed index lacks goes into its in-memory overlay, and
//! the background job commits it to the index when this process can take the writer.

use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::index::text::{TextDoc, TextOp};
use crate::model::{LogPosition, Memory, MemoryKey};
use crate::store::{changes, memories};

/// Memories read from the database per batch during a full rebuild.
const REBUILD_BATCH: usize = 5_000;
/// Pending change-log entries beyond which a read during an import leaves indexing to the
/// background job.
const BULK_READ_LAG: i64 = 256;
/// Most pending change-log entries a read puts into the overlay itself; a longer backlog (an
/// index rebuilt from scratch, another process's bulk import) is indexed by the read when the
/// writer is free, and otherwise left to whichever process holds it (the read says so).
const OVERLAY_MAX: i64 = 4_000;
/// How long a blocking catch-up (command line, rebuilds) waits for another process that holds
/// the index writer.
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

/// The index operations for the memories changed in `(after, up_to]`, each with the position
/// of the memory's newest change: its document when live, a delete otherwise.
fn changed_ops(changed: Vec<(i64, MemoryKey, Option<Memory>)>) -> Vec<(i64, TextOp)> {
    changed
        .into_iter()
        .map(|(seq, k, m)| match m {
            Some(m) if m.deleted_at.is_none() => (seq, TextOp::Upsert(doc_of(m))),
            _ => (seq, TextOp::Delete(k)),
        })
        .collect()
}

impl Engine {
    /// Change-log entries the committed text index has not applied yet.
    pub fn text_lag(&self) -> Result<i64> {
        let target = self.store.read(changes::max_seq)?;
        Ok((target - self.text.reader_seq()).max(0))
    }

    /// Makes every write committed before the call searchable, without waiting for any other
    /// process: the memories the committed index lacks go into its overlay (a process without
    /// a background job commits them itself when the index writer is free). Returns how many
    /// change-log entries a search still cannot see (0 but for a long backlog that another
    /// process is indexing, or an import of this process that the background job indexes).
    pub(crate) fn prepare_text_read(&self) -> Result<i64> {
        Ok(self.prepare_text_read_with_head()?.0)
    }

    /// `Engine::prepare_text_read` for a change-log head the caller read (after its call
    /// began); the caller may make its other reads as of the same head.
    pub(crate) fn prepare_text_read_with_head(&self) -> Result<(i64, i64)> {
        let (head, _) = self.text_positions()?;
        Ok((self.prepare_text_read_at(head)?, head))
    }

    fn prepare_text_read_at(&self, head: i64) -> Result<i64> {
        let pos = self.text.position()?;
        if head <= pos.searchable {
            return Ok(0);
        }
        let pending = head - pos.searchable;
        if self.bulk.load(std::sync::atomic::Ordering::Acquire) > 0 && pending > BULK_READ_LAG {
            // The background job commits the import's batches every tick; a read searches
            // what it has so far rather than indexing a whole batch itself.
            return Ok(pending);
        }
        if pending > OVERLAY_MAX || !self.has_background() {
            // A long backlog, or no background job to commit what the overlay would hold: index
            // it now when the writer is free (nobody waits for it).
            if let Some(seq) = self.text.update(|base| self.text_ops(base, head))? {
                return Ok((head - seq).max(0));
            }
            if pending > OVERLAY_MAX {
                self.mark_dirty();
                return Ok(pending);
            }
        }
        let from = pos.searchable;
        let ops = changed_ops(
            self.store
                .read(|c| changes::memories_changed_with_rows(c, from, head))?,
        );
        self.text.extend_overlay(ops, head)?;
        Ok(0)
    }

    /// Commits what the change log has and the index lacks, when this process can take the index
    /// writer right now (background job); otherwise leaves it to the process that holds it.
    pub(crate) fn index_pending_text(&self) -> Result<()> {
        let (head, committed) = self.text_positions()?;
        if head == committed {
            return Ok(());
        }
        self.text.update(|base| self.text_ops(base, head))?;
        Ok(())
    }

    /// Brings the committed text index up to the newest change-log entry, so that a read sees
    /// every write committed before it started. When another process holds the index writer,
    /// waits (briefly) for it to index instead; after that, reads what is there and logs the lag.
    /// For one-shot commands and rebuilds; a serving process's reads use
    /// `Engine::prepare_text_read`, which never waits.
    pub fn sync_text(&self) -> Result<()> {
        let (target, committed) = self.text_positions()?;
        if committed >= target {
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

    /// Checks that the committed text index was built from this database and its history (not
    /// from a database that was since replaced by a backup, or from another one); clears it
    /// otherwise, so that it is rebuilt from the database.
    pub(crate) fn verify_text_history(&self) -> Result<()> {
        let Some(applied) = self.text.applied()? else {
            return Ok(());
        };
        if self.store.read(|c| changes::follows(c, &applied))? {
            return Ok(());
        }
        let head = self.store.read(changes::max_seq)?;
        tracing::warn!(
            index_seq = applied.seq,
            database_seq = head,
            "the text index was built from another history of this database (a restored backup?) or from another database; rebuilding it"
        );
        self.clear_text_waiting()
    }

    /// The change log's head and the committed index position, after rebuilding an index the
    /// head is behind (see [`Engine::text_history_changed`]).
    fn text_positions(&self) -> Result<(i64, i64)> {
        let head = self.store.read(changes::max_seq)?;
        // The reader already holds every change the log has: a commit by another process can
        // only hold changes up to the head, so the index's metadata file is not read (a file
        // opened and read on every recall). A head below the reader's position (an older copy
        // of the database) or above it (changes the reader lacks) still looks.
        let seen = self.text.reader_seq();
        if head == seen {
            return Ok((head, seen));
        }
        let committed = self.text.refresh()?;
        if head < committed {
            self.text_history_changed(head, committed)?;
            return Ok((head, self.text.reader_seq()));
        }
        Ok((head, committed))
    }

    /// The change log ends before what the index applied: the database was replaced by an older
    /// copy. The index is cleared and rebuilt.
    fn text_history_changed(&self, head: i64, committed: i64) -> Result<()> {
        tracing::warn!(
            index_seq = committed,
            database_seq = head,
            "the database's change log is behind its text index (a restored backup?); rebuilding the index"
        );
        self.clear_text_waiting()
    }

    fn clear_text_waiting(&self) -> Result<()> {
        let deadline = Instant::now() + WAIT_FOR_OTHER_WRITER;
        while !self.text.clear(&self.database_id)? {
            if Instant::now() > deadline {
                return Err(Error::Conflict {
                    reason: "another mnemograph process holds the text index writer".into(),
                    hint: "stop the other servers on this database, or retry in a moment".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The index changes that take it from `base` to `target`: a full rebuild from a fresh index,
    /// otherwise the memories the change log names since `base`.
    fn text_ops(&self, base: i64, target: i64) -> Result<(Vec<TextOp>, LogPosition)> {
        self.store.read(|conn| {
            let position = changes::position_at(conn, target)?.ok_or_else(|| {
                Error::Internal(format!("the change log has no entry {target} any more"))
            })?;
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
                let changed = changes::memories_changed_with_rows(conn, base, target)?;
                ops = changed_ops(changed).into_iter().map(|(_, op)| op).collect();
            }
            Ok((ops, position))
        })
    }

    /// Drops the text index's content and indexes every live memory again.
    pub fn reindex_text(&self) -> Result<u64> {
        self.clear_text_waiting()?;
        self.sync_text()?;
        Ok(self.text.num_docs())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::engine::Engine;
    use crate::engine::tests::copy_db;
    use crate::engine::tests::remember_text as remember;
    use crate::model::{MemoryPatch, MemoryRef, RecallMode, RecallQuery};

    fn open(path: &std::path::Path) -> Engine {
        Engine::open_with(Config::for_db(path), None).expect("open")
    }

    fn text(q: &str) -> RecallQuery {
        RecallQuery {
            text: q.into(),
            limit: 10,
            mode: RecallMode::Text,
            ..RecallQuery::default()
        }
    }

    fn hits(e: &Engine, q: &str) -> Vec<(String, f32)> {
        e.recall(&text(q))
            .unwrap()
            .hits
            .into_iter()
            .map(|h| (h.memory.id, h.score))
            .collect()
    }

    fn ids(e: &Engine, q: &str) -> Vec<String> {
        hits(e, q).into_iter().map(|(id, _)| id).collect()
    }

    // Restoring a backup of the database beside a newer text index used to go unnoticed: the
    // index claimed positions of the change log that the restored database reuses for other
    // entries, so new memories were never indexed and old hits named other memories.
    #[test]
    fn a_restored_backup_rebuilds_the_text_index() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.db");
        let backup = dir.path().join("backup.db");
        let a = {
            let e = open(&db);
            remember(&e, "alpha kept in the backup")
        };
        copy_db(&db, &backup);
        {
            let e = open(&db);
            remember(&e, "bravo written after the backup");
            assert_eq!(ids(&e, "bravo").len(), 1);
        }
        copy_db(&backup, &db);
        let e = open(&db);
        let c = remember(&e, "charlie written after the restore");
        assert_eq!(ids(&e, "charlie"), [c.as_str()]);
        assert!(
            ids(&e, "bravo").is_empty(),
            "bravo is not in the restored database"
        );
        assert_eq!(ids(&e, "alpha"), [a]);
        drop(e);
        // Written to again after the restore, the log is as long as the index's history was:
        // only the stamps tell the two histories apart.
        copy_db(&backup, &db);
        {
            let e = open(&db);
            e.sync_text().unwrap();
            remember(&e, "delta one");
        }
        copy_db(&backup, &db);
        let e = open(&db);
        let echo = remember(&e, "echo two");
        assert_eq!(ids(&e, "echo"), [echo]);
        assert!(ids(&e, "delta").is_empty());
    }

    /// Another database copied over this one (not a backup of it) is noticed by its identity.
    #[test]
    fn another_database_in_place_rebuilds_the_text_index() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one.db"), dir.path().join("two.db"));
        {
            let e = open(&one);
            remember(&e, "first database memory");
            e.sync_text().unwrap();
        }
        {
            let e = open(&two);
            remember(&e, "second database memory");
        }
        copy_db(&two, &one);
        let e = open(&one);
        assert!(ids(&e, "first").is_empty());
        assert_eq!(ids(&e, "second").len(), 1);
    }

    // A reading process used to wait up to 2 s per read for the process holding the index
    // writer to index its writes; now it searches them in its overlay at once.
    #[test]
    fn a_reader_sees_another_writers_changes_without_its_index() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.db");
        let writer = open(&db);
        let reader = open(&db);
        for i in 0..20 {
            remember(&writer, &format!("background note number {i} about lakes"));
        }
        // The writer process indexes and keeps the index writer, as a busy server does.
        writer.sync_text().unwrap();
        assert!(writer.text.holds_writer());
        let fresh = remember(&writer, "the ferry leaves at noon from pier seven");
        let old = remember(&writer, "the museum closes on mondays");
        writer.sync_text().unwrap();
        writer
            .update(
                &MemoryRef::Id(old.clone()),
                &MemoryPatch {
                    content: Some("the gallery opens on sundays".into()),
                    ..MemoryPatch::default()
                },
                "test",
            )
            .unwrap();
        let gone = remember(&writer, "a harbour note to be forgotten");
        writer.sync_text().unwrap();
        writer.forget(&[MemoryRef::Id(gone)], &[], "test").unwrap();

        assert_eq!(ids(&reader, "ferry pier"), [fresh]);
        assert_eq!(ids(&reader, "gallery sundays"), [old]);
        assert!(ids(&reader, "museum mondays").is_empty());
        assert!(ids(&reader, "harbour forgotten").is_empty());
        // The reader never indexed: the writer holds the index writer, and the reader did not
        // wait for it to commit the update and the forget.
        assert!(!reader.text.holds_writer());
        assert!(reader.text_lag().unwrap() > 0);
    }

    /// Memories searched in the overlay rank and score as they do once committed.
    #[test]
    fn the_overlay_ranks_like_the_committed_index() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.db");
        let e = open(&db);
        // Another engine holds the index writer, so `e` answers from its overlay.
        let holder = open(&db);
        let mut ids = Vec::new();
        for i in 0..40 {
            ids.push(remember(
                &e,
                &format!("entry {i}: rivers and lakes {}", "water ".repeat(i % 7)),
            ));
        }
        holder.sync_text().unwrap();
        assert!(holder.text.holds_writer());
        for i in 0..15 {
            remember(
                &e,
                &format!("late entry {i}: lakes {}", "stone ".repeat(i % 5)),
            );
        }
        // Updated and forgotten memories: their committed versions must not count any more.
        for id in ids.iter().step_by(6) {
            e.update(
                &MemoryRef::Id(id.clone()),
                &MemoryPatch {
                    content: Some(format!("revised {id}: stone lakes stone")),
                    ..MemoryPatch::default()
                },
                "test",
            )
            .unwrap();
        }
        let gone: Vec<MemoryRef> = ids
            .iter()
            .skip(1)
            .step_by(9)
            .cloned()
            .map(MemoryRef::Id)
            .collect();
        e.forget(&gone, &[], "test").unwrap();
        let before = hits(&e, "lakes water stone");
        assert!(
            e.text_lag().unwrap() > 0,
            "the late entries are in the overlay"
        );
        holder.sync_text().unwrap();
        let after = hits(&e, "lakes water stone");
        assert_eq!(before.len(), after.len());
        for ((a, sa), (b, sb)) in before.iter().zip(&after) {
            assert_eq!(a, b);
            assert!((sa - sb).abs() < 1e-4, "{sa} vs {sb}");
        }
    }
}
