//! Keeping the vector index in step with the change log: embeddings computed once and stored in
//! SQLite, the HNSW loaded from its dump (or rebuilt from the stored vectors), caught up before
//! reads, dumped again by the background job.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use rayon::prelude::*;

use crate::embed::{Embedder, check_output};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::index::vector::{LoadState, Scope, VectorIndex, unit_similarity};
use crate::model::MemoryKey;
use crate::store::vectors::{self, Unembedded};
use crate::store::{changes, memories};

/// Change-log entries applied per step of a catch-up (each step ends with a new position).
const WINDOW: i64 = 20_000;
/// Most memories a read embeds and indexes itself before it answers; a longer backlog is left
/// to the background job and the read uses the index as it is (with a warning).
pub(crate) const READ_CATCH_UP: i64 = 4_000;
/// How long a read waits for the background job to finish loading the vector index before it
/// answers by text alone.
const LOAD_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
/// Texts per embedding call (and per parallel chunk).
const EMBED_CHUNK: usize = 256;
/// Staged vectors put into the graph at a time: writes to the index wait for one chunk
/// (≈ 60 ms on 2 cores), searches never do.
const GRAPH_CHUNK: usize = 128;
/// Staged vectors the engine puts into the graph when it closes, so that the dump has them
/// (about a second); with more, closing keeps the previous dump and the next start replays.
const DRAIN_AT_CLOSE: usize = 2_000;
/// Vectors written per transaction.
const STORE_CHUNK: usize = 2_000;

/// The loaded vector index and the change-log position of its dump on disk.
pub(crate) struct VectorState {
    pub(crate) index: VectorIndex,
    pub(crate) dumped_seq: i64,
    pub(crate) dumped_at: Instant,
}

/// Memories changed after what the vector index applied, as reads see them: each with the position
/// of its newest change and its vector (`None`: forgotten, or not to be found by vector).
#[derive(Default)]
pub(crate) struct VectorOverlay {
    /// The change-log position the overlay is complete up to (with the index beneath it).
    head: i64,
    items: HashMap<u64, (i64, Option<Vec<f32>>)>,
}

/// Whether a key is in a search's scope, for candidates scored outside the index.
enum ScopeTest<'a> {
    All,
    Keys(HashSet<u64>),
    Few(&'a [u64]),
    Predicate(&'a (dyn Fn(u64) -> bool + Sync)),
}

impl<'a> ScopeTest<'a> {
    fn new(scope: &Scope<'a>, n_tested: usize) -> ScopeTest<'a> {
        match *scope {
            Scope::All => ScopeTest::All,
            Scope::Keys(keys) if keys.len().saturating_mul(n_tested) <= 100_000 => {
                ScopeTest::Few(keys)
            }
            Scope::Keys(keys) => ScopeTest::Keys(keys.iter().copied().collect()),
            Scope::Predicate(accept) => ScopeTest::Predicate(accept),
        }
    }

    fn accepts(&self, key: u64) -> bool {
        match self {
            ScopeTest::All => true,
            ScopeTest::Keys(set) => set.contains(&key),
            ScopeTest::Few(keys) => keys.contains(&key),
            ScopeTest::Predicate(accept) => accept(key),
        }
    }
}

/// How far the vector index is behind after a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VectorSync {
    Current,
    /// Change-log entries still to apply (left to the background job).
    Behind(i64),
    /// The background job is still loading the index.
    Loading,
}

/// The text a memory is embedded from: its name (entity-style memories) and content.
pub(crate) fn embed_text(name: Option<&str>, content: &str) -> String {
    match name {
        Some(n) if !n.is_empty() => format!("{n}: {content}"),
        _ => content.to_owned(),
    }
}

/// Embeds `texts` on the rayon pool in chunks; one failing chunk fails the whole call.
pub(crate) fn embed_parallel(e: &dyn Embedder, texts: &[String]) -> Result<Vec<Vec<f32>>> {
    let chunks: Vec<Result<Vec<Vec<f32>>>> = texts
        .par_chunks(EMBED_CHUNK)
        .map(|chunk| {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            let out = e.embed(&refs)?;
            check_output(e.model_id(), e.dim(), refs.len(), &out)?;
            Ok(out)
        })
        .collect();
    let mut all = Vec::with_capacity(texts.len());
    for c in chunks {
        all.extend(c?);
    }
    Ok(all)
}

impl Engine {
    /// The embedding provider, when vectors are configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    pub(crate) fn vectors_loaded(&self) -> bool {
        self.vectors.read().is_ok_and(|g| g.is_some())
    }

    /// Loads the vector index from its dump (or an empty one to be rebuilt) when not loaded yet.
    /// With `wait` false, returns false instead of waiting while the background job loads it.
    pub(crate) fn ensure_vectors(&self, wait: bool) -> Result<bool> {
        let Some(e) = &self.embedder else {
            return Ok(true);
        };
        if self.vectors_loaded() {
            return Ok(true);
        }
        if !wait && self.vectors_loading.load(Ordering::Acquire) {
            // A small dump loads in milliseconds: worth a short wait; a big one is not.
            let deadline = Instant::now() + LOAD_WAIT;
            while self.vectors_loading.load(Ordering::Acquire) && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            if !self.vectors_loaded() {
                return Ok(false);
            }
            return Ok(true);
        }
        // Loading can take a second at 100k vectors: hold only the sync lock meanwhile, so
        // readers that do not wait see "not loaded" at once instead of blocking on the RwLock.
        let _one_loader = self.vector_sync.lock().map_err(poisoned)?;
        if self.vectors_loaded() {
            return Ok(true);
        }
        let started = Instant::now();
        let (index, state) = VectorIndex::load(&self.cfg.vector_index_dir(), e.model_id(), e.dim());
        match &state {
            LoadState::Loaded => tracing::info!(
                vectors = index.len(),
                ms = started.elapsed().as_secs_f64() * 1e3,
                "vector index loaded"
            ),
            LoadState::Missing => {
                tracing::info!("no vector index yet; building it from the database")
            }
            LoadState::Rebuilt(why) => {
                tracing::warn!(reason = %why, "vector index dump unusable; rebuilding it from the database")
            }
        }
        let dumped_seq = index.seq();
        *self.vectors.write().map_err(poisoned)? = Some(VectorState {
            index,
            dumped_seq,
            dumped_at: Instant::now(),
        });
        Ok(true)
    }

    /// Change-log entries the vector index has not applied yet (0 without an embedder).
    pub fn vector_lag(&self) -> Result<i64> {
        if self.embedder.is_none() {
            return Ok(0);
        }
        self.ensure_vectors(true)?;
        let seq = self.vector_seq()?;
        let target = self.store.read(changes::max_seq)?;
        Ok((target - seq).max(0))
    }

    /// True when the index moved since its last dump or lags the change log's `head` (cheap
    /// check for the background loop, which reads the head once for every index).
    pub(crate) fn vectors_behind(&self, head: Option<i64>) -> bool {
        let Ok(guard) = self.vectors.read() else {
            return false;
        };
        let Some(state) = guard.as_ref() else {
            return false;
        };
        let seq = state.index.seq();
        seq > state.dumped_seq || head.is_some_and(|t| t > seq)
    }

    fn vector_seq(&self) -> Result<i64> {
        Ok(self
            .vectors
            .read()
            .map_err(poisoned)?
            .as_ref()
            .map_or(0, |s| s.index.seq()))
    }

    /// Applies the change log to the vector index: embeds (and stores) what has no current
    /// vector, indexes it, drops forgotten memories. With `limit`, gives up (returning
    /// `Behind`) when more than `limit` entries are pending, leaving them to the background.
    pub(crate) fn sync_vectors(&self, limit: Option<i64>) -> Result<VectorSync> {
        let Some(embedder) = self.embedder.clone() else {
            return Ok(VectorSync::Current);
        };
        if !self.ensure_vectors(limit.is_none())? {
            return Ok(VectorSync::Loading);
        }
        let _one_at_a_time = match self.vector_sync.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => {
                // Someone else is catching up; a read waits only when the backlog is short
                // (so is the wait), and otherwise uses the index as it is.
                if let Some(limit) = limit {
                    let lag = self.store.read(changes::max_seq)? - self.vector_seq()?;
                    if lag > limit {
                        return Ok(VectorSync::Behind(lag));
                    }
                }
                self.vector_sync.lock().map_err(poisoned)?
            }
            Err(std::sync::TryLockError::Poisoned(_)) => return Err(poisoned(())),
        };
        let target = self.store.read(changes::max_seq)?;
        let mut seq = self.vector_seq()?;
        if seq >= target {
            return Ok(VectorSync::Current);
        }
        if let Some(limit) = limit
            && target - seq > limit
        {
            return Ok(VectorSync::Behind(target - seq));
        }
        let started = Instant::now();
        let mut n_indexed = 0usize;
        while seq < target {
            let end = (seq + WINDOW).min(target);
            n_indexed += self.apply_vector_window(embedder.as_ref(), seq, end)?;
            self.with_vector_index(|ix| ix.set_seq(end))?;
            seq = end;
        }
        if n_indexed > 1_000 {
            tracing::info!(
                vectors = n_indexed,
                ms = started.elapsed().as_secs_f64() * 1e3,
                "vector index caught up"
            );
        }
        Ok(VectorSync::Current)
    }

    /// Puts staged vectors into the HNSW graph, in chunks, for up to `budget`; returns how
    /// many stay staged (searchable by exact scan meanwhile).
    pub(crate) fn index_staged_vectors(&self, budget: std::time::Duration) -> Result<usize> {
        let started = Instant::now();
        loop {
            let left = self.with_vector_index(|ix| ix.index_staged(GRAPH_CHUNK))?;
            if left == 0 || started.elapsed() >= budget {
                return Ok(left);
            }
        }
    }

    /// Vectors searchable by exact scan that the HNSW graph does not hold yet.
    pub fn vectors_staged(&self) -> usize {
        self.with_vector_index(|ix| ix.staged()).unwrap_or(0)
    }

    /// Indexes the memories changed in `(after, up_to]`; returns how many vectors were indexed.
    fn apply_vector_window(&self, e: &dyn Embedder, after: i64, up_to: i64) -> Result<usize> {
        let model = e.model_id();
        let (live, gone, mut have) = self.store.read(|c| {
            let keys = changes::memories_changed(c, after, up_to)?;
            let found = memories::by_keys(c, &keys)?;
            let live_keys: Vec<MemoryKey> = found
                .iter()
                .filter(|m| m.deleted_at.is_none())
                .map(|m| m.key)
                .collect();
            let have = vectors::current(c, model, &live_keys)?;
            let live: Vec<Unembedded> = found
                .into_iter()
                .filter(|m| m.deleted_at.is_none())
                .map(|m| Unembedded {
                    key: m.key,
                    version: m.version,
                    name: m.name,
                    content: m.content,
                })
                .collect();
            let live_set: std::collections::HashSet<MemoryKey> =
                live_keys.iter().copied().collect();
            let gone: Vec<u64> = keys
                .iter()
                .filter(|k| !live_set.contains(k))
                .map(|k| k.0 as u64)
                .collect();
            Ok((live, gone, have))
        })?;
        let todo: Vec<&Unembedded> = live.iter().filter(|m| !have.contains_key(&m.key)).collect();
        let fresh = self.embed_and_store(e, &todo)?;
        let mut items: Vec<(u64, Vec<f32>)> = Vec::with_capacity(live.len());
        for m in &live {
            if let Some(v) = have.remove(&m.key) {
                items.push((m.key.0 as u64, v.vec));
            }
        }
        items.extend(fresh);
        let n = items.len();
        self.with_vector_index(|ix| {
            ix.remove(&gone);
            ix.stage(&items)
        })??;
        Ok(n)
    }

    /// Embeds `todo` (in parallel) and stores the vectors; returns them keyed for the index.
    fn embed_and_store(
        &self,
        e: &dyn Embedder,
        todo: &[&Unembedded],
    ) -> Result<Vec<(u64, Vec<f32>)>> {
        if todo.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = todo
            .iter()
            .map(|m| embed_text(m.name.as_deref(), &m.content))
            .collect();
        let vecs = embed_parallel(e, &texts)?;
        let model = e.model_id();
        for (ms, vs) in todo.chunks(STORE_CHUNK).zip(vecs.chunks(STORE_CHUNK)) {
            self.store.write(|tx| {
                for (m, v) in ms.iter().zip(vs) {
                    vectors::put(tx, m.key, model, m.version, v)?;
                }
                Ok(())
            })?;
        }
        Ok(todo.iter().map(|m| m.key.0 as u64).zip(vecs).collect())
    }

    fn with_vector_index<T>(&self, f: impl FnOnce(&VectorIndex) -> T) -> Result<T> {
        let guard = self.vectors.read().map_err(poisoned)?;
        let state = guard
            .as_ref()
            .ok_or_else(|| Error::Internal("vector index not loaded".into()))?;
        Ok(f(&state.index))
    }

    /// The query's vector and the `k` nearest memories in `scope` (unit-vector dot product).
    /// Memories changed after what the index applied are scored from the overlay (see
    /// [`Engine::prepare_vector_read`]), so the read waits neither for the background job nor
    /// for another process.
    pub(crate) fn vector_search(
        &self,
        query: &str,
        k: usize,
        scope: Scope<'_>,
    ) -> Result<(Vec<(MemoryKey, f32)>, VectorSync)> {
        let Some(e) = self.embedder.clone() else {
            return Err(Error::Embed {
                provider: "none".into(),
                reason: "no embedder is configured".into(),
            });
        };
        if !self.ensure_vectors(false)? {
            return Ok((Vec::new(), VectorSync::Loading));
        }
        let q = e.embed(&[query])?;
        check_output(e.model_id(), e.dim(), 1, &q)?;
        let sync = self.prepare_vector_read(e.as_ref())?;
        if let VectorSync::Behind(_) = sync {
            self.mark_dirty();
        }
        let overlay = self
            .vector_overlay
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let n_over = overlay.items.len();
        let found = self.with_vector_index(|ix| ix.search(&q[0], k + n_over, scope))?;
        let mut hits: Vec<(MemoryKey, f32)> = found
            .into_iter()
            .filter(|(key, _)| !overlay.items.contains_key(key))
            .map(|(key, s)| (MemoryKey(key as i64), s))
            .collect();
        if n_over > 0 {
            let wanted = ScopeTest::new(&scope, n_over);
            hits.extend(overlay.items.iter().filter_map(|(&key, (_, v))| {
                let v = v.as_ref()?;
                wanted
                    .accepts(key)
                    .then(|| (MemoryKey(key as i64), unit_similarity(&q[0], v)))
            }));
            hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        hits.truncate(k);
        Ok((hits, sync))
    }

    /// Makes the memories changed after what the vector index applied searchable for a read. In a
    /// process with a background job, without touching the index (whose graph insertions the background job runs) and without
    /// writing: their stored vectors, or vectors computed now for those not embedded yet, go
    /// into the overlay. A backlog over [`READ_CATCH_UP`] entries is left to the background
    /// job (`Behind`).
    fn prepare_vector_read(&self, e: &dyn Embedder) -> Result<VectorSync> {
        if !self.has_background() {
            // Nobody else keeps the index current in this process (a command, a library user):
            // the read applies the change log to it, as the background job would.
            return self.sync_vectors(Some(READ_CATCH_UP));
        }
        let head = self.store.read(changes::max_seq)?;
        let applied = self.vector_seq()?;
        let from = {
            let mut overlay = self
                .vector_overlay
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            overlay.items.retain(|_, (seq, _)| *seq > applied);
            if overlay.head < applied {
                overlay.head = applied;
            }
            overlay.head
        };
        if head <= from {
            return Ok(VectorSync::Current);
        }
        if head - from > READ_CATCH_UP {
            return Ok(VectorSync::Behind(head - from));
        }
        let model = e.model_id();
        let (changed, rows, mut have) = self.store.read(|c| {
            let changed = changes::memories_changed_at(c, from, head)?;
            let keys: Vec<MemoryKey> = changed.iter().map(|(k, _)| *k).collect();
            let rows = memories::by_keys(c, &keys)?;
            let live: Vec<MemoryKey> = rows
                .iter()
                .filter(|m| m.deleted_at.is_none())
                .map(|m| m.key)
                .collect();
            let have = vectors::current(c, model, &live)?;
            Ok((changed, rows, have))
        })?;
        let live: std::collections::HashMap<MemoryKey, crate::model::Memory> = rows
            .into_iter()
            .filter(|m| m.deleted_at.is_none())
            .map(|m| (m.key, m))
            .collect();
        let todo: Vec<&crate::model::Memory> = live
            .values()
            .filter(|m| !have.contains_key(&m.key))
            .collect();
        let texts: Vec<String> = todo
            .iter()
            .map(|m| embed_text(m.name.as_deref(), &m.content))
            .collect();
        let fresh = embed_parallel(e, &texts)?;
        let mut computed: std::collections::HashMap<MemoryKey, Vec<f32>> =
            todo.iter().map(|m| m.key).zip(fresh).collect();
        let mut overlay = self
            .vector_overlay
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for (key, seq) in changed {
            let vector = if live.contains_key(&key) {
                have.remove(&key)
                    .map(|v| v.vec)
                    .or_else(|| computed.remove(&key))
            } else {
                None
            };
            let slot = overlay.items.entry(key.0 as u64).or_insert((seq, None));
            // Two reads may race to fill the overlay: the newer change wins.
            if seq >= slot.0 {
                *slot = (seq, vector);
            }
        }
        overlay.head = overlay.head.max(head);
        Ok(VectorSync::Current)
    }

    /// Writes the index to disk when it moved since the last dump and `force` or enough time
    /// has passed; compacts it first when replacements left many dead slots.
    pub(crate) fn dump_vectors_if_due(&self, force: bool) -> Result<()> {
        // Under the read lock, so searches go on while the files are written; only the
        // bookkeeping takes the write lock.
        let (seq, started) = {
            let guard = self.vectors.read().map_err(poisoned)?;
            let Some(state) = guard.as_ref() else {
                return Ok(());
            };
            let due = state.index.seq() > state.dumped_seq
                && (force || state.dumped_at.elapsed() >= DUMP_EVERY);
            let staged = state.index.staged();
            if due && force && staged > 0 && staged <= DRAIN_AT_CLOSE {
                state.index.index_staged(staged);
            }
            if !due || state.index.staged() > 0 {
                // With staged vectors the dump waits until the graph has them; closing
                // meanwhile keeps the previous dump, and the next start replays the change log
                // from there.
                return Ok(());
            }
            if state.index.needs_compaction() {
                state.index.compact();
            }
            let started = Instant::now();
            match state.index.dump(&self.cfg.vector_index_dir())? {
                Some(seq) => (seq, started),
                None => return Ok(()), // vectors were staged meanwhile
            }
        };
        let mut guard = self.vectors.write().map_err(poisoned)?;
        if let Some(state) = guard.as_mut() {
            state.dumped_seq = state.dumped_seq.max(seq);
            state.dumped_at = Instant::now();
            tracing::debug!(
                vectors = state.index.len(),
                ms = started.elapsed().as_secs_f64() * 1e3,
                "vector index dumped"
            );
        }
        Ok(())
    }

    /// Drops the vector index and builds it again from the stored vectors (embedding what has
    /// none); returns the number of vectors indexed.
    pub fn reindex_vectors(&self) -> Result<u64> {
        let Some(e) = self.embedder.clone() else {
            return Ok(0);
        };
        {
            let mut guard = self.vectors.write().map_err(poisoned)?;
            *guard = Some(VectorState {
                index: VectorIndex::new(e.model_id(), e.dim()),
                dumped_seq: -1,
                dumped_at: Instant::now(),
            });
        }
        self.sync_vectors(None)?;
        self.with_vector_index(|ix| ix.index_staged(usize::MAX))?;
        self.dump_vectors_if_due(true)?;
        self.with_vector_index(|ix| ix.len() as u64)
    }
}

/// How often a changing vector index is written to disk.
const DUMP_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

fn poisoned<T>(_: T) -> Error {
    Error::Internal("vector index lock poisoned".into())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::config::Config;
    use crate::engine::{Engine, RememberItem};
    use crate::model::{MemoryRef, RecallMode, RecallQuery};

    fn vector_ids(e: &Engine, q: &str) -> Vec<String> {
        e.recall(&RecallQuery {
            text: q.into(),
            limit: 5,
            mode: RecallMode::Vector,
            ..RecallQuery::default()
        })
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.memory.id)
        .collect()
    }

    // A read of a serving process used to catch the vector index up itself, waiting for the
    // background job's catch-up (which waits on other processes' writes) and for its graph
    // insertions. Now it scores what the index lacks beside it and waits for neither.
    #[test]
    fn a_read_never_waits_for_the_vector_index_catching_up() {
        let dir = tempfile::tempdir().unwrap();
        let e = Arc::new(Engine::open(Config::for_db(dir.path().join("memory.db"))).unwrap());
        let _jobs = e.start_background().unwrap();
        let first = e
            .remember(&[RememberItem {
                content: "The cat sleeps on the warm windowsill".into(),
                ..RememberItem::default()
            }])
            .unwrap()
            .remove(0)
            .unwrap()
            .id;
        assert_eq!(
            vector_ids(&e, "kitten napping"),
            std::slice::from_ref(&first)
        );
        // The background job is busy catching up (it holds the catch-up lock) from now on.
        let busy = e.vector_sync.lock().unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let reader = Arc::clone(&e);
        std::thread::spawn(move || {
            let fresh = reader
                .remember(&[RememberItem {
                    content: "Quarterly revenue grew by eight percent".into(),
                    ..RememberItem::default()
                }])
                .unwrap()
                .remove(0)
                .unwrap()
                .id;
            reader.forget(&[MemoryRef::Id(first)], &[], "test").unwrap();
            let found = vector_ids(&reader, "revenue growth this quarter");
            let gone = vector_ids(&reader, "kitten napping");
            let _ = done.send((fresh, found, gone));
        });
        let (fresh, found, gone) = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the read answered while the vector index was busy");
        drop(busy);
        assert_eq!(found.first(), Some(&fresh));
        assert!(!gone.iter().any(|id| *id != fresh), "{gone:?}");
    }
}
