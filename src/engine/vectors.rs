//! Keeping the vector index in step with the change log: embeddings computed once and stored in
//! SQLite, the HNSW loaded from its dump (or rebuilt from the stored vectors), caught up before
//! reads, dumped again by the background job.
//!
//! Size: embedding what has no current vector, keeping the index in step, the read overlay and the
//! dump share the engine's vector fields and their lock order.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rayon::prelude::*;

use crate::embed::{Embedder, check_output};
use crate::engine::Engine;
use crate::engine::flat::FlatState;
use crate::error::{Error, Result};
use crate::index::vector::flat::FlatVectors;
use crate::index::vector::{LoadState, Scope, ScopeFilter, VectorIndex, unit_similarity};
use crate::lock;
use crate::model::{KeyMap, LogPosition, MemoryKey};
use crate::store::vectors::{self, Unembedded};
use crate::store::{Db, changes, memories};

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
/// Stored vectors read per statement when an empty index is filled from the database.
const FILL_PAGE: usize = 5_000;

/// The engine's vector side, one component: the index, the lock that lets one caller catch it
/// up, the overlay reads search beside it, the compact file searched while it loads.
///
/// Lock order, outer first (a thread holding one takes only those after it): `sync` →
/// `index` → the `VectorIndex` writer → its state. `overlay` and `flat` are taken alone, never
/// while holding another of these. No lock of the relation graph is held with any of them.
#[derive(Default)]
pub(crate) struct Vectors {
    /// The vector index, loaded on first use (or by the background job at start).
    index: std::sync::RwLock<Option<VectorState>>,
    /// Held while the vector index catches up, so two readers do not embed the same memories.
    sync: std::sync::Mutex<()>,
    /// Memories changed after what the vector index applied, searched beside it by reads.
    overlay: std::sync::RwLock<VectorOverlay>,
    /// The compact vector file searched while the index loads, and when it was last written.
    flat: std::sync::Mutex<FlatState>,
    /// Set while the background job loads the vector index; reads then answer by text instead
    /// of waiting.
    loading: std::sync::atomic::AtomicBool,
}

impl Vectors {
    /// True when the index is in memory.
    pub(crate) fn loaded(&self) -> bool {
        lock::read_or_reset(&self.index, unload).is_some()
    }

    /// The change-log position the loaded index applied (`None`: not loaded).
    pub(crate) fn loaded_seq(&self) -> Option<i64> {
        lock::read_or_reset(&self.index, unload)
            .as_ref()
            .map(|s| s.index.seq())
    }

    /// The change-log position the index applied (0 when not loaded).
    fn seq(&self) -> i64 {
        self.loaded_seq().unwrap_or(0)
    }

    /// True when the index moved since its last dump or lags the change log's `head`.
    pub(crate) fn behind(&self, head: Option<i64>) -> bool {
        let guard = lock::read_or_reset(&self.index, unload);
        let Some(state) = guard.as_ref() else {
            return false;
        };
        let seq = state.index.seq();
        seq > state.dumped_seq || head.is_some_and(|t| t > seq)
    }

    /// `f` on the loaded index (`None`: not loaded).
    pub(crate) fn with_loaded<T>(&self, f: impl FnOnce(&VectorIndex) -> T) -> Option<T> {
        lock::read_or_reset(&self.index, unload)
            .as_ref()
            .map(|s| f(&s.index))
    }

    /// `f` on the loaded index; an internal error when it is not loaded.
    fn with_index<T>(&self, f: impl FnOnce(&VectorIndex) -> T) -> Result<T> {
        self.with_loaded(f)
            .ok_or_else(|| Error::Internal("vector index not loaded".into()))
    }

    /// Puts `index` in place of the loaded one, as dumped at `dumped_seq`.
    fn install(&self, index: VectorIndex, dumped_seq: i64) {
        *lock::write_or_reset(&self.index, unload) = Some(VectorState {
            index,
            dumped_seq,
            dumped_at: Instant::now(),
        });
    }

    /// Says that the background job is loading the index (reads then answer by text).
    pub(crate) fn set_loading(&self, loading: bool) {
        self.loading.store(loading, Ordering::Release);
    }

    fn is_loading(&self) -> bool {
        self.loading.load(Ordering::Acquire)
    }

    /// The compact file's state (taken alone, never with another vector lock).
    pub(crate) fn flat(&self) -> std::sync::MutexGuard<'_, FlatState> {
        lock::lock_or_reset(&self.flat, |s| *s = FlatState::default())
    }

    /// The right to catch the index up (or load it), waiting for whoever holds it.
    fn catching_up(&self) -> std::sync::MutexGuard<'_, ()> {
        lock::lock(&self.sync)
    }

    /// The right to catch the index up when nobody else is doing it (`None`: somebody is).
    fn try_catching_up(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        match self.sync.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::WouldBlock) => None,
            Err(std::sync::TryLockError::Poisoned(_)) => Some(self.catching_up()),
        }
    }

    /// The overlay as reads see it.
    fn overlay(&self) -> std::sync::RwLockReadGuard<'_, VectorOverlay> {
        lock::read_or_reset(&self.overlay, reset_overlay)
    }

    /// Lays the overlay on what the index (or the compact file) applied, dropping what that
    /// covers; returns the position the overlay is complete up to.
    fn rebase_overlay(&self, applied: i64) -> i64 {
        let mut overlay = lock::write_or_reset(&self.overlay, reset_overlay);
        if applied < overlay.base {
            // Lies on an older base than before (the index loaded behind the compact file).
            *overlay = VectorOverlay::default();
        }
        overlay.items.retain(|_, (seq, _)| *seq > applied);
        overlay.base = applied;
        if overlay.head < applied {
            overlay.head = applied;
        }
        overlay.head
    }

    /// Puts changed memories into the overlay (each with its change's position and its vector
    /// and namespace, `None` when it is not to be found by vector); complete up to `head`
    /// afterwards.
    fn extend_overlay(
        &self,
        changed: impl IntoIterator<Item = (i64, MemoryKey, Option<Overlaid>)>,
        head: i64,
    ) {
        let mut overlay = lock::write_or_reset(&self.overlay, reset_overlay);
        for (seq, key, vector) in changed {
            let slot = overlay.items.entry(key.0 as u64).or_insert((seq, None));
            // Two reads may race to fill the overlay: the newer change wins.
            if seq >= slot.0 {
                *slot = (seq, vector);
            }
        }
        overlay.head = overlay.head.max(head);
    }

    /// Writes the index to `dir` when it moved since the last dump and `force` or enough time
    /// has passed; compacts it first when replacements left many dead slots. `position_of`
    /// reads the change-log position the dump records.
    fn dump_if_due(
        &self,
        force: bool,
        dir: &std::path::Path,
        position_of: impl FnOnce(i64) -> Result<Option<LogPosition>>,
    ) -> Result<()> {
        // Under the read lock, so searches go on while the files are written; only the
        // bookkeeping takes the write lock.
        let (seq, started) = {
            let guard = lock::read_or_reset(&self.index, unload);
            let Some(state) = guard.as_ref() else {
                return Ok(());
            };
            let due = state.index.seq() > state.dumped_seq
                && (force || state.dumped_at.elapsed() >= DUMP_EVERY);
            let staged = state.index.staged();
            if due && force && staged > 0 && staged <= DRAIN_AT_CLOSE {
                state.index.index_staged(staged)?;
            }
            if !due || state.index.staged() > 0 {
                // With staged vectors the dump waits until the graph has them; closing
                // meanwhile keeps the previous dump, and the next start replays the change log
                // from there.
                return Ok(());
            }
            if state.index.needs_compaction() {
                state.index.compact()?;
            }
            let started = Instant::now();
            match state.index.dump_with(dir, position_of)? {
                Some(seq) => (seq, started),
                None => return Ok(()), // vectors were staged meanwhile
            }
        };
        let mut guard = lock::write_or_reset(&self.index, unload);
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

    /// Panics while holding the index's write lock (tests of lock recovery).
    #[cfg(test)]
    pub(crate) fn panic_holding_index(&self) {
        let _v = self.index.write();
        panic!("forced");
    }
}

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
    /// The change-log position of what the overlay lies on (the index, or the compact file).
    base: i64,
    /// The change-log position the overlay is complete up to (with the index beneath it).
    head: i64,
    items: HashMap<u64, (i64, Option<Overlaid>)>,
}

/// A memory of the overlay found by vector: its vector and its namespace.
type Overlaid = (Vec<f32>, String);

/// What a vector search found: the nearest memories, how current the index was, and why the
/// search scanned instead of using the graph when it had to.
pub(crate) struct Nearest {
    pub hits: Vec<(MemoryKey, f32)>,
    pub sync: VectorSync,
    pub fell_back: Option<String>,
    /// The query's vector (empty when nothing was searched).
    pub query: Vec<f32>,
}

/// The hits of a search of the prepared overlay and the index, and why the graph was not used.
type Found = (Vec<(MemoryKey, f32)>, Option<String>);

/// How far the vector index is behind after a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VectorSync {
    Current,
    /// Change-log entries still to apply (left to the background job).
    Behind(i64),
    /// The background job is still loading the index.
    Loading,
}

/// The text a memory is embedded from: its content, after its name when the name reads as words
/// and says something the content does not (an entity's name such as `project-atlas` says what
/// the content is about; an identifier such as `3f2a9c1e-…:12` or `D1:3` says nothing, and its
/// rare pieces would pull the vector away from the content's meaning). A name the content
/// already says (`alice` for "Alice is the tech lead…") adds nothing: said twice, it would pull
/// the memory toward every query that names her, whatever the query asks about her.
pub(crate) fn embed_text(name: Option<&str>, content: &str) -> String {
    let Some(name) = name.filter(|n| crate::index::tokenize::reads_as_words(n)) else {
        return content.to_owned();
    };
    let held: std::collections::HashSet<String> = crate::index::tokenize::word_spans(content)
        .map(|(from, to)| content[from..to].to_lowercase())
        .collect();
    let says_more = crate::index::tokenize::word_spans(name)
        .any(|(from, to)| !held.contains(&name[from..to].to_lowercase()));
    if says_more {
        format!("{name}: {content}")
    } else {
        content.to_owned()
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

/// Vectors a write computed before its transaction, by item: the writer stores each with its
/// memory, so the processes sharing the store find it there and embed nothing themselves.
pub(crate) struct WriteVectors {
    model: String,
    vecs: Vec<Option<Vec<f32>>>,
}

impl WriteVectors {
    /// Stores item `i`'s vector for memory `key` at `version` (when there is one for it).
    pub(crate) fn store(&self, tx: &Db, i: usize, key: MemoryKey, version: i64) -> Result<()> {
        if let Some(v) = self.vecs.get(i).and_then(Option::as_ref) {
            vectors::put(tx, key, &self.model, version, v)?;
        }
        Ok(())
    }
}

impl Engine {
    /// Embeds the memories of a write, each its name and content (`None`: nothing to embed for
    /// that item), before its transaction takes the write lock. `None` without an embedder; a
    /// failing embedder is a warning, and the catch-up embeds what the write did not store.
    pub(crate) fn embed_for_write(
        &self,
        items: &[Option<(Option<&str>, &str)>],
    ) -> Option<WriteVectors> {
        let e = self.embedder.as_ref()?;
        let wanted: Vec<String> = items
            .iter()
            .flatten()
            .map(|(name, content)| embed_text(*name, content))
            .collect();
        if wanted.is_empty() {
            return None;
        }
        let mut computed = match embed_parallel(e.as_ref(), &wanted) {
            Ok(v) => v.into_iter(),
            Err(err) => {
                tracing::warn!(error = %err, "could not embed what is written; the index embeds it later");
                return None;
            }
        };
        let vecs = items
            .iter()
            .map(|t| t.as_ref().and_then(|_| computed.next()))
            .collect();
        Some(WriteVectors {
            model: e.model_id().to_owned(),
            vecs,
        })
    }

    /// The embedding provider, when vectors are configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    pub(crate) fn vectors_loaded(&self) -> bool {
        self.vectors.loaded()
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
        if !wait && self.vectors.is_loading() {
            // The compact file answers exactly at once: no wait for the dump.
            if self.flat_for_read()?.is_some() {
                return Ok(false);
            }
            // A small dump loads in milliseconds: worth a short wait; a big one is not.
            let deadline = Instant::now() + LOAD_WAIT;
            while self.vectors.is_loading() && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            if !self.vectors_loaded() {
                return Ok(false);
            }
            return Ok(true);
        }
        // Loading can take a second at 100k vectors: hold only the sync lock meanwhile, so
        // readers that do not wait see "not loaded" at once instead of blocking on the RwLock.
        let _one_loader = self.vectors.catching_up();
        if self.vectors_loaded() {
            return Ok(true);
        }
        let started = Instant::now();
        let dir = self.cfg.vector_index_dir();
        let (mut index, state) = VectorIndex::load(&dir, e.model_id(), e.dim())?;
        let state = match state {
            LoadState::Loaded => {
                // A dump must prove it belongs to this database and this history (a restored
                // backup, or another database put in its place, has other memories under the
                // same keys).
                let follows = match index.origin() {
                    Some(origin) => self.store.read(|c| changes::follows(c, origin))?,
                    None => false,
                };
                if follows {
                    LoadState::Loaded
                } else {
                    index = VectorIndex::new(e.model_id(), e.dim())?;
                    LoadState::Rebuilt("the dump does not belong to this database's history".into())
                }
            }
            other => other,
        };
        if matches!(state, LoadState::Loaded) {
            // Before the index is installed: no search meets it without its namespaces.
            self.place_all(&index)?;
        }
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
        self.vectors.install(index, dumped_seq);
        // After a command-line import the compact file is ahead of the dump (or there is no
        // dump): it answers until the index has passed it.
        self.settle_flat(dumped_seq)?;
        Ok(true)
    }

    /// Vector searches of this process whose graph failed and that were answered by an exact
    /// scan instead.
    pub fn vector_graph_failures(&self) -> u64 {
        crate::index::vector::graph_failures()
    }

    /// Change-log entries the vector index has not applied yet (0 without an embedder).
    pub fn vector_lag(&self) -> Result<i64> {
        if self.embedder.is_none() {
            return Ok(0);
        }
        self.ensure_vectors(true)?;
        let seq = self.vectors.seq();
        let target = self.store.read(changes::max_seq)?;
        Ok((target - seq).max(0))
    }

    /// True when the index moved since its last dump or lags the change log's `head` (cheap
    /// check for the background loop, which reads the head once for every index).
    pub(crate) fn vectors_behind(&self, head: Option<i64>) -> bool {
        self.vectors.behind(head)
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
        let _one_at_a_time = match self.vectors.try_catching_up() {
            Some(g) => g,
            None => {
                // Someone else is catching up; a read waits only when the backlog is short
                // (so is the wait), and otherwise uses the index as it is.
                if let Some(limit) = limit {
                    let lag = self.store.read(changes::max_seq)? - self.vectors.seq();
                    if lag > limit {
                        return Ok(VectorSync::Behind(lag));
                    }
                }
                self.vectors.catching_up()
            }
        };
        let target = self.store.read(changes::max_seq)?;
        let mut seq = self.vectors.seq();
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
        if seq == 0 && self.vectors.with_index(|ix| ix.is_empty())? {
            seq = self.fill_vectors(embedder.as_ref())?;
            self.vectors.with_index(|ix| ix.set_seq(seq))?;
        }
        while seq < target {
            let end = (seq + WINDOW).min(target);
            n_indexed += self.apply_vector_window(embedder.as_ref(), seq, end)?;
            self.vectors.with_index(|ix| ix.set_seq(end))?;
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
            let left = self
                .vectors
                .with_index(|ix| ix.index_staged(GRAPH_CHUNK))??;
            if left == 0 || started.elapsed() >= budget {
                return Ok(left);
            }
        }
    }

    /// Vectors of the loaded index whose namespace it does not know (see
    /// [`VectorIndex::place`]); `None` while it is not loaded.
    pub(crate) fn vectors_unplaced(&self) -> Option<usize> {
        self.vectors.with_loaded(|ix| ix.unplaced())
    }

    /// Vectors searchable by exact scan that the HNSW graph does not hold yet.
    pub fn vectors_staged(&self) -> usize {
        self.vectors.with_index(|ix| ix.staged()).unwrap_or(0)
    }

    /// Indexes the memories changed in `(after, up_to]`; returns how many vectors were indexed.
    fn apply_vector_window(&self, e: &dyn Embedder, after: i64, up_to: i64) -> Result<usize> {
        let keys = self
            .store
            .read(|c| changes::memories_changed(c, after, up_to))?;
        self.apply_vector_keys(e, &keys)
    }

    /// Indexes these memories as they are now: their stored vectors, or vectors computed and
    /// stored now; forgotten ones leave the index. Returns how many vectors were indexed.
    fn apply_vector_keys(&self, e: &dyn Embedder, keys: &[MemoryKey]) -> Result<usize> {
        let model = e.model_id();
        let (live, gone, mut have, placed) = self.store.read(|c| {
            let found = memories::by_keys(c, keys)?;
            let (live_keys, have) = vectors::current_of_live(c, model, &found)?;
            let placed: Vec<(u64, String)> = found
                .iter()
                .filter(|m| m.deleted_at.is_none())
                .map(|m| (m.key.0 as u64, m.namespace.clone()))
                .collect();
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
            let live_set: HashSet<MemoryKey> = live_keys.iter().copied().collect();
            let gone: Vec<u64> = keys
                .iter()
                .filter(|k| !live_set.contains(k))
                .map(|k| k.0 as u64)
                .collect();
            Ok((live, gone, have, placed))
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
        let placed: Vec<(u64, &str)> = placed.iter().map(|(k, ns)| (*k, ns.as_str())).collect();
        self.vectors.with_index(|ix| {
            ix.remove(&gone);
            ix.stage(&items)?;
            ix.place(&placed);
            Ok::<_, Error>(())
        })??;
        Ok(n)
    }

    /// Tells `index` the namespace of every live memory, a page per statement (a loaded dump
    /// knows none). Rows read after the index's
    /// change-log position: what changes later is placed again as the log is applied.
    fn place_all(&self, index: &VectorIndex) -> Result<()> {
        let mut after = MemoryKey(0);
        loop {
            let page = self
                .store
                .read(|c| memories::namespaces_page(c, after, FILL_PAGE))?;
            let Some(&(last, _)) = page.last() else {
                return Ok(());
            };
            after = last;
            let items: Vec<(u64, &str)> = page
                .iter()
                .map(|(k, ns)| (k.0 as u64, ns.as_str()))
                .collect();
            index.place(&items);
        }
    }

    /// Fills an empty index from the database rather than by replaying the change log from its
    /// start (which reads every memory the log names, window by window): in one snapshot, the
    /// stored vectors of the live memories, a page per statement, and the keys of live memories
    /// that have none. Those are then indexed as a catch-up would (their vectors read again, as
    /// another process may have stored them since, or computed here). Returns the change-log
    /// position of the snapshot, after which the log is applied as usual.
    fn fill_vectors(&self, e: &dyn Embedder) -> Result<i64> {
        let started = Instant::now();
        let model = e.model_id();
        let (head, stored, bare) = self.store.snapshot(|c| {
            let head = changes::max_seq(c)?;
            let mut stored = 0usize;
            let mut after = MemoryKey(0);
            loop {
                let page = vectors::current_page(c, model, after, FILL_PAGE)?;
                let Some((last, _)) = page.last() else { break };
                after = last.key;
                let (items, spaces): (Vec<(u64, Vec<f32>)>, Vec<String>) = page
                    .into_iter()
                    .map(|(v, ns)| ((v.key.0 as u64, v.vec), ns))
                    .unzip();
                let placed: Vec<(u64, &str)> = items
                    .iter()
                    .zip(&spaces)
                    .map(|((key, _), ns)| (*key, ns.as_str()))
                    .collect();
                stored += items.len();
                self.vectors.with_index(|ix| {
                    ix.stage(&items)?;
                    ix.place(&placed);
                    Ok::<_, Error>(())
                })??;
            }
            Ok((head, stored, vectors::unembedded_keys(c, model)?))
        })?;
        // Each memory embedded here is placed as its vector is staged.
        let mut embedded = 0usize;
        for keys in bare.chunks(WINDOW as usize) {
            embedded += self.apply_vector_keys(e, keys)?;
        }
        tracing::info!(
            stored,
            embedded,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "vector index filled from the database"
        );
        Ok(head)
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
            let rows: Vec<(MemoryKey, i64, &[f32])> = ms
                .iter()
                .zip(vs)
                .map(|(m, v)| (m.key, m.version, v.as_slice()))
                .collect();
            self.store.write(|tx| vectors::put_many(tx, model, &rows))?;
        }
        Ok(todo.iter().map(|m| m.key.0 as u64).zip(vecs).collect())
    }

    /// The query's vector and the `k` nearest memories in `scope` (unit-vector dot product).
    /// Memories changed after what the index applied are scored from the overlay (see
    /// [`Engine::prepare_vector_read`]), so the read waits neither for the background job nor
    /// for another process.
    pub(crate) fn vector_search(&self, query: &str, k: usize, scope: Scope<'_>) -> Result<Nearest> {
        let Some(e) = self.embedder.clone() else {
            return Err(Error::Embed {
                provider: "none".into(),
                reason: "no embedder is configured".into(),
            });
        };
        let Some(flat) = self.vector_reader()? else {
            return Ok(Nearest {
                hits: Vec::new(),
                sync: VectorSync::Loading,
                fell_back: None,
                query: Vec::new(),
            });
        };
        let mut q = e.embed(&[query])?;
        check_output(e.model_id(), e.dim(), 1, &q)?;
        self.nearest(e.as_ref(), flat, q.swap_remove(0), k, scope)
    }

    /// The similarity to `query` (a vector [`Engine::vector_search`] returned) of each of `keys`
    /// that has a vector, scored as that search scored its hits and from what it read: the
    /// overlay it prepared is not prepared again. Empty while the index loads.
    pub(crate) fn similarities_to(&self, query: &[f32], keys: &[MemoryKey]) -> Result<KeyMap<f32>> {
        if query.is_empty() || keys.is_empty() {
            return Ok(KeyMap::default());
        }
        let Some(flat) = self.vector_reader()? else {
            return Ok(KeyMap::default());
        };
        let raw: Vec<u64> = keys.iter().map(|k| k.0 as u64).collect();
        let (hits, _) =
            self.search_prepared(flat.as_deref(), query, raw.len(), Scope::Keys(&raw))?;
        Ok(hits.into_iter().collect())
    }

    /// What a vector read is answered from: `Some(None)` the index, `Some(Some(file))` the
    /// compact file (exactly, by a scan) while the index loads or is built from the database
    /// behind it, `None` neither yet.
    fn vector_reader(&self) -> Result<Option<Option<Arc<FlatVectors>>>> {
        if self.ensure_vectors(false)? {
            Ok(Some(self.flat_ahead_of_index()?))
        } else {
            Ok(self.flat_for_read()?.map(Some))
        }
    }

    /// The `k` nearest memories in `scope` to the query's vector `q`, from the index or `flat`.
    fn nearest(
        &self,
        e: &dyn Embedder,
        flat: Option<Arc<FlatVectors>>,
        q: Vec<f32>,
        k: usize,
        scope: Scope<'_>,
    ) -> Result<Nearest> {
        // Without a background job the read catches the index up itself (`None`).
        let applied = match &flat {
            Some(f) => Some(f.position().seq),
            None if self.has_background() => Some(self.vectors.seq()),
            None => None,
        };
        let sync = self.prepare_vector_read(e, applied)?;
        if let VectorSync::Behind(_) = sync {
            self.mark_dirty();
        }
        let (hits, fell_back) = self.search_prepared(flat.as_deref(), &q, k, scope)?;
        Ok(Nearest {
            hits,
            sync,
            fell_back,
            query: q,
        })
    }

    /// The `k` nearest memories in `scope` to `q` from the index or `flat`, and the overlay as a
    /// read prepared it ([`Engine::prepare_vector_read`]); why the graph was not used, if so.
    fn search_prepared(
        &self,
        flat: Option<&FlatVectors>,
        q: &[f32],
        k: usize,
        scope: Scope<'_>,
    ) -> Result<Found> {
        // The compact file knows no namespaces: their keys scope its scan.
        let keys;
        let scope = match scope {
            Scope::Namespaces(names) if flat.is_some() => {
                keys = self
                    .store
                    .read(|c| memories::keys_in(c, names))?
                    .into_iter()
                    .map(|k| k.0 as u64)
                    .collect::<Vec<u64>>();
                Scope::Keys(&keys)
            }
            other => other,
        };
        let overlay = self.vectors.overlay();
        let n_over = overlay.items.len();
        // The overlaid memories in scope, with their vectors.
        let over: Vec<(u64, &[f32])> = if n_over > 0 {
            let wanted = ScopeFilter::new(&scope, n_over);
            let in_namespaces = |ns: &String| match scope {
                Scope::Namespaces(names) => names.contains(ns),
                _ => true,
            };
            overlay
                .items
                .iter()
                .filter_map(|(&key, (_, v))| v.as_ref().map(|(v, ns)| (key, v, ns)))
                .filter(|&(key, _, ns)| wanted.accepts(key) && in_namespaces(ns))
                .map(|(key, v, _)| (key, v.as_slice()))
                .collect()
        } else {
            Vec::new()
        };
        let vectors: Vec<&[f32]> = over.iter().map(|&(_, v)| v).collect();
        // Overlaid memories the index also holds are dropped from its answer: ask for that many
        // more. Only those: a new memory is not in the index, and asking for more than needed
        // can turn a graph search into a scan of every vector. The overlay's vectors are scored
        // as the index will score them once it holds them, so a hit keeps its score when the
        // index catches up (the compact file's bytes score within about 1 % of either).
        let (found, fell_back, over_scores) = match &flat {
            Some(f) => {
                let scores = vectors
                    .iter()
                    .map(|v| Some(unit_similarity(q, v)))
                    .collect();
                (f.search(q, k + n_over, scope), None, scores)
            }
            None => self.vectors.with_index(|ix| {
                let shadowed = overlay
                    .items
                    .keys()
                    .filter(|&&key| ix.contains(key))
                    .count();
                let (found, fell_back) = ix.search_noting(q, k + shadowed, scope);
                (found, fell_back, ix.similarities(q, &vectors))
            })?,
        };
        let mut hits: Vec<(MemoryKey, f32)> = found
            .into_iter()
            .filter(|(key, _)| !overlay.items.contains_key(key))
            .map(|(key, s)| (MemoryKey(key as i64), s))
            .collect();
        if !over.is_empty() {
            hits.extend(
                over.iter()
                    .zip(over_scores)
                    .filter_map(|(&(key, _), s)| Some((MemoryKey(key as i64), s?))),
            );
            hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        hits.truncate(k);
        Ok((hits, fell_back))
    }

    /// Makes the memories changed after what the vector index applied searchable for a read. In a
    /// process with a background job, without touching the index (whose graph insertions the background job runs) and without
    /// writing: their stored vectors, or vectors computed now for those not embedded yet, go
    /// into the overlay. A backlog over [`READ_CATCH_UP`] entries is left to the background
    /// job (`Behind`).
    fn prepare_vector_read(&self, e: &dyn Embedder, applied: Option<i64>) -> Result<VectorSync> {
        let Some(applied) = applied else {
            // Nobody else keeps the index current in this process (a command, a library user):
            // the read applies the change log to it, as the background job would.
            return self.sync_vectors(Some(READ_CATCH_UP));
        };
        let head = self.store.read(changes::max_seq)?;
        let from = self.vectors.rebase_overlay(applied);
        if head <= from {
            return Ok(VectorSync::Current);
        }
        if head - from > READ_CATCH_UP {
            return Ok(VectorSync::Behind(head - from));
        }
        let model = e.model_id();
        let (changed, mut have) = self.store.read(|c| {
            let changed = changes::memories_changed_with_rows(c, from, head)?;
            let live: Vec<MemoryKey> = changed
                .iter()
                .filter(|(_, _, m)| m.as_ref().is_some_and(|m| m.deleted_at.is_none()))
                .map(|(_, k, _)| *k)
                .collect();
            let have = vectors::current(c, model, &live)?;
            Ok((changed, have))
        })?;
        let is_live =
            |m: &Option<crate::model::Memory>| m.as_ref().is_some_and(|m| m.deleted_at.is_none());
        let todo: Vec<&crate::model::Memory> = changed
            .iter()
            .filter(|(_, _, m)| is_live(m))
            .filter_map(|(_, _, m)| m.as_ref())
            .filter(|m| !have.contains_key(&m.key))
            .collect();
        let texts: Vec<String> = todo
            .iter()
            .map(|m| embed_text(m.name.as_deref(), &m.content))
            .collect();
        let fresh = embed_parallel(e, &texts)?;
        let mut computed: HashMap<MemoryKey, Vec<f32>> =
            todo.iter().map(|m| m.key).zip(fresh).collect();
        let vectors = changed.iter().map(|(seq, key, m)| {
            let vector = match m {
                Some(m) if m.deleted_at.is_none() => have
                    .remove(key)
                    .map(|v| v.vec)
                    .or_else(|| computed.remove(key))
                    .map(|v| (v, m.namespace.clone())),
                _ => None,
            };
            (*seq, *key, vector)
        });
        self.vectors.extend_overlay(vectors, head);
        Ok(VectorSync::Current)
    }

    /// At close: vectors written just before (a burst the background job had not reached yet)
    /// go into the index when they are few (up to [`DRAIN_AT_CLOSE`] changes), so the dump
    /// covers them; a longer backlog is left to the next start, which replays the change log
    /// from the previous dump, so closing stays quick.
    pub(crate) fn close_vectors(&self) -> Result<()> {
        if self.vectors_loaded() {
            self.sync_vectors(Some(DRAIN_AT_CLOSE as i64))?;
        }
        self.dump_vectors_if_due(true)
    }

    /// Writes the index to disk when it moved since the last dump and `force` or enough time
    /// has passed; compacts it first when replacements left many dead slots.
    pub(crate) fn dump_vectors_if_due(&self, force: bool) -> Result<()> {
        // The compact file first: it does not wait for staged vectors to reach the graph.
        if let Err(e) = self.write_flat_if_due(force) {
            tracing::warn!(error = %e, "could not write the compact vector file");
        }
        let position_of = |seq| self.store.read(|c| changes::position_at(c, seq));
        self.vectors
            .dump_if_due(force, &self.cfg.vector_index_dir(), position_of)
    }

    /// Drops the vector index and builds it again from the stored vectors (embedding what has
    /// none); returns the number of vectors indexed.
    pub fn reindex_vectors(&self) -> Result<u64> {
        let Some(e) = self.embedder.clone() else {
            return Ok(0);
        };
        self.vectors
            .install(VectorIndex::new(e.model_id(), e.dim())?, -1);
        self.sync_vectors(None)?;
        self.vectors
            .with_index(|ix| ix.index_staged(usize::MAX))??;
        self.dump_vectors_if_due(true)?;
        self.vectors.with_index(|ix| ix.len() as u64)
    }
}

/// How often a changing vector index is written to disk.
const DUMP_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// A vector state a panic may have left half-changed is dropped and loaded again.
fn unload(state: &mut Option<VectorState>) {
    *state = None;
}

/// An overlay a panic may have left half-changed is emptied; reads then fill it again.
fn reset_overlay(overlay: &mut VectorOverlay) {
    *overlay = VectorOverlay::default();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::config::Config;
    use crate::engine::tests::{recall_ids_in, remember_text as remember};
    use crate::engine::{Engine, RememberItem};
    use crate::model::{MemoryRef, RecallMode, RecallQuery};

    #[test]
    fn names_are_embedded_only_when_they_read_as_words_the_content_lacks() {
        use super::embed_text;
        assert_eq!(embed_text(Some("alice"), "likes tea"), "alice: likes tea");
        assert_eq!(embed_text(Some("project-atlas"), "x"), "project-atlas: x");
        assert_eq!(
            embed_text(Some("conv-26 session 1"), "x"),
            "conv-26 session 1: x"
        );
        // Words the content says already are not said again.
        assert_eq!(
            embed_text(Some("alice"), "Alice is the tech lead"),
            "Alice is the tech lead"
        );
        assert_eq!(
            embed_text(Some("atlas-deploys"), "Deploys of Atlas go through staging"),
            "Deploys of Atlas go through staging"
        );
        assert_eq!(
            embed_text(Some("atlas runbook"), "Atlas deploys go through staging"),
            "atlas runbook: Atlas deploys go through staging"
        );
        for id in [
            "D1:3",
            "3f2a9c1e-8b7d-4c1a-9e2f-1a2b3c4d5e6f:12",
            "2024-05-01",
            "--",
        ] {
            assert_eq!(embed_text(Some(id), "x"), "x", "{id}");
        }
        assert_eq!(embed_text(None, "x"), "x");
    }

    fn vector_ids(e: &Engine, q: &str) -> Vec<String> {
        recall_ids_in(e, q, RecallMode::Vector)
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
        // Until the background job has loaded the index, reads answer by text (with a
        // warning); that is not what this test is about.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !e.vectors_loaded() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(vector_ids(&e, "kitten napping"), [first.as_str()]);
        // The background job is busy catching up (it holds the catch-up lock) from now on.
        let busy = e.vectors.sync.lock().unwrap();
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

    fn vector_hits(e: &Engine, q: &str) -> (Vec<(String, f32)>, Vec<String>) {
        let page = e
            .recall(&RecallQuery {
                text: q.into(),
                limit: 5,
                mode: RecallMode::Vector,
                ..RecallQuery::default()
            })
            .unwrap();
        let hits = page
            .hits
            .into_iter()
            .map(|h| (h.memory.id, h.score))
            .collect();
        (hits, page.warnings)
    }

    // After a command-line import (vectors stored, the compact file written, the dump left as
    // it was), a new process loaded the older dump (or built its index from the database) and,
    // until it had caught up, answered "catching up (N changes behind)" by text only, although
    // the file held every vector.
    #[test]
    fn after_an_import_the_compact_file_answers_while_the_index_catches_up() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::for_db(dir.path().join("memory.db"));
        let n = super::READ_CATCH_UP as usize + 500;
        {
            // A server's dump from before the import.
            let e = Engine::open(cfg.clone()).unwrap();
            remember(&e, "The harbour ferry leaves at seven");
            assert!(vector_hits(&e, "boat departure").1.is_empty());
        }
        {
            let e = Engine::open(cfg.clone()).unwrap();
            let mut data = String::from(
                "{\"type\":\"memory\",\"content\":\"A kitten napping in a sunny window\"}\n",
            );
            for i in 0..n {
                data.push_str(&format!(
                    "{{\"type\":\"memory\",\"content\":\"ledger entry {i} for the quarterly tax filing\"}}\n"
                ));
            }
            crate::engine::tests::import_text(&e, &data);
            assert_eq!(e.write_flat_from_store().unwrap(), Some(n + 2));
        }
        let e = Engine::open(cfg).unwrap();
        let (hits, warnings) = vector_hits(&e, "sleepy cat");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            hits.first().map(|h| h.0.as_str()),
            recall_ids_in(&e, "kitten napping", RecallMode::Text)
                .first()
                .map(String::as_str),
            "{hits:?}"
        );
        // A memory written after the file is found beside it.
        let puppy = remember(&e, "A puppy chewing on an old shoe");
        let (hits, warnings) = vector_hits(&e, "dog biting footwear");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(hits[0].0, puppy, "{hits:?}");
    }

    // Vector mode behind a large burst of writes used to say the newest memories were "found by
    // text only", though it searches no words: it found nothing of them, and said otherwise.
    #[test]
    fn vector_mode_behind_a_burst_says_what_it_misses_and_hybrid_finds_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(Config::for_db(dir.path().join("memory.db"))).unwrap();
        remember(&e, "A kitten napping in a sunny window");
        assert!(vector_hits(&e, "sleepy cat").1.is_empty());
        let burst: Vec<RememberItem> = (0..=super::READ_CATCH_UP)
            .map(|i| RememberItem {
                content: format!("burst memory {i} about the zebra crossing"),
                ..RememberItem::default()
            })
            .collect();
        for r in e.remember(&burst).unwrap() {
            r.unwrap();
        }
        let (_, warnings) = vector_hits(&e, "zebra crossing");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("not searchable by meaning yet") && w.contains("\"hybrid\"")),
            "{warnings:?}"
        );
        assert!(!warnings.iter().any(|w| w.contains("found by text only")));
        let page = e
            .recall(&RecallQuery {
                text: "zebra crossing".into(),
                limit: 5,
                ..RecallQuery::default()
            })
            .unwrap();
        assert_eq!(page.hits.len(), 5, "hybrid finds the burst by words");
    }

    // A fresh process used to answer by text only (with a warning) until its HNSW graph was
    // loaded from the dump, which takes about a second at 100,000 vectors: hosts that start a
    // server per call never got a search by meaning.
    #[test]
    fn a_fresh_process_searches_the_compact_file_while_the_index_loads() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::for_db(dir.path().join("memory.db"));
        let kitten = {
            let e = Engine::open(cfg.clone()).unwrap();
            let kitten = remember(&e, "A kitten napping in a sunny window");
            remember(&e, "The quarterly tax filing is due in April");
            remember(&e, "A rocket launch was postponed by the wind");
            assert_eq!(vector_ids(&e, "sleepy cat")[0], kitten);
            kitten
        }; // closing writes the dump and the compact file
        let files: Vec<String> = std::fs::read_dir(cfg.vector_index_dir())
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            files
                .iter()
                .any(|f| f == crate::index::vector::flat::FILE_NAME),
            "{files:?}"
        );
        let e = Engine::open(cfg).unwrap();
        // As while the background job loads the index from its dump.
        e.vectors
            .loading
            .store(true, std::sync::atomic::Ordering::Release);
        // The file answers at once: a read does not wait for the dump first (it waited
        // `LOAD_WAIT` here, as nothing loads it in this test).
        let asked = std::time::Instant::now();
        assert!(!e.ensure_vectors(false).unwrap());
        assert!(asked.elapsed() < super::LOAD_WAIT, "{:?}", asked.elapsed());
        let (hits, warnings) = vector_hits(&e, "sleepy cat");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(hits[0].0, kitten, "{hits:?}");
        assert!(!e.vectors_loaded(), "answered without the index");
        // A memory written after the file is found too (scored beside the file).
        let puppy = remember(&e, "A puppy chewing on an old shoe");
        let (hits, _) = vector_hits(&e, "dog biting footwear");
        assert_eq!(hits[0].0, puppy, "{hits:?}");
    }

    // A server closed right after a burst of writes, before its background job had put the new
    // vectors into the index, left no dump: the next start built the index again from every
    // stored vector.
    #[test]
    fn closing_right_after_a_burst_leaves_a_dump_with_every_vector() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::for_db(dir.path().join("memory.db"));
        let head = {
            let e = Arc::new(Engine::open(cfg.clone()).unwrap());
            let _jobs = e.start_background().unwrap();
            for b in 0..3 {
                let batch: Vec<RememberItem> = (0..500)
                    .map(|i| RememberItem {
                        content: format!("burst {b} memory {i} about topic {}", i % 37),
                        ..RememberItem::default()
                    })
                    .collect();
                for r in e.remember(&batch).unwrap() {
                    r.unwrap();
                }
            }
            e.store.read(crate::store::changes::max_seq).unwrap()
        }; // closed at once: the background job stops, the engine is dropped
        let meta = cfg.vector_index_dir().join("vectors.meta.json");
        // The background job may hold the engine through the end of its tick: then the engine
        // closes in that thread, a little later (longer on a busy machine).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !meta.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&meta).expect("a vector dump")).unwrap();
        assert_eq!(meta["position"]["seq"], head, "{meta}");
        // The next start loads it as it is: nothing to replay, nothing to rebuild.
        let e = Engine::open(cfg).unwrap();
        assert!(e.ensure_vectors(true).unwrap());
        assert_eq!(e.vectors.seq(), head);
        assert_eq!(e.vectors.with_index(|ix| ix.len()).unwrap(), 1_500);
    }

    /// The default embedder, recording every text it is asked to embed.
    struct Recording {
        inner: Arc<dyn crate::embed::Embedder>,
        texts: std::sync::Mutex<Vec<String>>,
    }

    impl crate::embed::Embedder for Recording {
        fn model_id(&self) -> &str {
            self.inner.model_id()
        }
        fn dim(&self) -> usize {
            self.inner.dim()
        }
        fn embed(&self, texts: &[&str]) -> crate::error::Result<Vec<Vec<f32>>> {
            let mut seen = self.texts.lock().unwrap();
            seen.extend(texts.iter().map(|t| (*t).to_owned()));
            self.inner.embed(texts)
        }
    }

    // A new index on a database that has its vectors (a new server on a shared database, or an
    // index folder deleted) replayed the change log from its start, reading every memory it
    // names: minutes at a million memories on a database server. It is now filled from the
    // stored vectors, and only the memories without a current one are embedded.
    #[test]
    fn an_empty_index_is_filled_from_the_stored_vectors_of_live_memories() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::for_db(dir.path().join("memory.db"));
        let (kitten, launch, gone) = {
            let e = Engine::open(cfg.clone()).unwrap();
            let kitten = remember(&e, "A kitten napping in a sunny window");
            let launch = remember(&e, "The quarterly tax filing is due in April");
            let gone = remember(&e, "A rocket launch was postponed by the wind");
            vector_ids(&e, "cat"); // every vector stored
            (kitten, launch, gone)
        };
        // Then a process without an embedder writes: one memory without a vector, one that says
        // something else now (its stored vector is stale), one forgotten (its vector stays).
        let puppy = {
            let e = Engine::open_with(cfg.clone(), None).unwrap();
            let patch = crate::model::MemoryPatch {
                content: Some("The spacecraft lift-off was delayed by storms".into()),
                ..crate::model::MemoryPatch::default()
            };
            e.update(&MemoryRef::Id(launch.clone()), &patch, "test")
                .unwrap();
            e.forget(&[MemoryRef::Id(gone.clone())], &[], "test")
                .unwrap();
            remember(&e, "A puppy chewing on an old shoe")
        };
        let embedder = Arc::new(Recording {
            inner: crate::embed::open(&cfg.embedder).unwrap().unwrap(),
            texts: std::sync::Mutex::new(Vec::new()),
        });
        let mut fresh = cfg.clone();
        fresh.index_dir = dir.path().join("another-index");
        let e = Engine::open_with(fresh, Some(embedder.clone())).unwrap();
        assert_eq!(vector_ids(&e, "dog biting footwear")[0], puppy);
        assert_eq!(vector_ids(&e, "sleepy cat")[0], kitten);
        assert_eq!(vector_ids(&e, "rocket takeoff postponed")[0], launch);
        let head = e.store.read(crate::store::changes::max_seq).unwrap();
        assert_eq!(e.vectors.seq(), head);
        assert_eq!(e.vectors.with_index(|ix| ix.len()).unwrap(), 3);
        // Embedded here: the queries, the memory without a vector and the changed one.
        let texts = embedder.texts.lock().unwrap().clone();
        let queries = [
            "dog biting footwear",
            "sleepy cat",
            "rocket takeoff postponed",
        ];
        let mut memories: Vec<&str> = texts
            .iter()
            .map(String::as_str)
            .filter(|t| !queries.contains(t))
            .collect();
        memories.sort_unstable();
        assert_eq!(
            memories,
            [
                "A puppy chewing on an old shoe",
                "The spacecraft lift-off was delayed by storms"
            ]
        );
        assert!(!vector_ids(&e, "rocket launch postponed by the wind").contains(&gone));
    }

    // A new build can bring a new built-in model (its id changes with its table). A database
    // whose vectors are of the old model is then embedded anew by the new one, every memory,
    // and searched by the new vectors only: the old ones are of another space.
    #[test]
    fn memories_embedded_by_another_model_are_embedded_anew_by_the_current_one() {
        let dir = tempfile::tempdir().unwrap();
        let old_model = dir.path().join("old-model");
        let builtin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(crate::embed::static_model::BUILTIN_DIR);
        std::fs::create_dir(&old_model).unwrap();
        for f in ["model.safetensors", "tokenizer.json", "config.json"] {
            std::fs::copy(builtin.join(f), old_model.join(f)).unwrap();
        }
        let mut cfg = Config::for_db(dir.path().join("memory.db"));
        cfg.embedder = crate::config::EmbedderSpec::StaticDir(old_model);
        let texts = [
            "A kitten napping in a sunny window",
            "The quarterly tax filing is due in April",
            "A rocket launch was postponed by the wind",
        ];
        let ids: Vec<String> = {
            let e = Engine::open(cfg.clone()).unwrap();
            let ids = texts.iter().map(|t| remember(&e, t)).collect();
            assert_eq!(vector_ids(&e, "sleepy cat").len(), 3);
            ids
        };
        let cfg = Config::for_db(dir.path().join("memory.db"));
        let embedder = Arc::new(Recording {
            inner: crate::embed::open(&cfg.embedder).unwrap().unwrap(),
            texts: std::sync::Mutex::new(Vec::new()),
        });
        let e = Engine::open_with(cfg, Some(embedder.clone())).unwrap();
        assert_eq!(vector_ids(&e, "sleepy cat")[0], ids[0]);
        assert_eq!(vector_ids(&e, "rocket takeoff delayed")[0], ids[2]);
        let asked = ["sleepy cat", "rocket takeoff delayed"];
        let mut all: Vec<String> = texts.map(str::to_owned).to_vec();
        all.sort_unstable();
        assert_eq!(embedded(&embedder, &asked), all);
        let model = embedder.inner.model_id().to_owned();
        let covered = e
            .store
            .read(|c| crate::store::vectors::coverage(c, &model))
            .unwrap();
        assert_eq!(covered, (3, 3), "every memory has a vector of {model}");
    }

    /// What `e` was asked to embed, less the queries in `asked`, sorted.
    fn embedded(e: &Recording, asked: &[&str]) -> Vec<String> {
        let mut texts: Vec<String> = e
            .texts
            .lock()
            .unwrap()
            .iter()
            .filter(|t| !asked.contains(&t.as_str()))
            .cloned()
            .collect();
        texts.sort_unstable();
        texts
    }

    // Servers sharing a store each embedded every memory another one wrote (each catch-up found
    // no vector and computed one): with an embedder paid per call, N servers paid N times. The
    // writer now embeds what it writes and stores the vector in the same transaction; a new
    // version that keeps the text keeps the vector; the others only read.
    #[test]
    fn the_writer_stores_the_vectors_and_the_others_embed_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::for_db(dir.path().join("memory.db"));
        let recording = || {
            Arc::new(Recording {
                inner: crate::embed::open(&cfg.embedder).unwrap().unwrap(),
                texts: std::sync::Mutex::new(Vec::new()),
            })
        };
        let in_folder = |name: &str| {
            let mut c = cfg.clone();
            c.index_dir = dir.path().join(name);
            c
        };
        let (we, they) = (recording(), recording());
        let writer = Engine::open_with(in_folder("writer"), Some(we.clone())).unwrap();
        let reader = Engine::open_with(in_folder("reader"), Some(they.clone())).unwrap();
        let batch = |contents: &[&str]| -> Vec<String> {
            let items: Vec<RememberItem> = contents
                .iter()
                .map(|c| RememberItem {
                    content: (*c).into(),
                    ..RememberItem::default()
                })
                .collect();
            writer
                .remember(&items)
                .unwrap()
                .into_iter()
                .map(|r| r.unwrap().id)
                .collect()
        };
        let ids = batch(&[
            "A kitten napping in a sunny window",
            "The quarterly tax filing is due in April",
            "A rocket launch was postponed by the wind",
        ]);
        let (kitten, tax, rocket) = (&ids[0], &ids[1], &ids[2]);
        // One with a link takes the item-by-item path.
        let puppy = writer
            .remember(&[RememberItem {
                content: "A puppy chewing on an old shoe".into(),
                links: vec![crate::engine::Link {
                    to: kitten.clone(),
                    kind: "like".into(),
                    weight: None,
                }],
                ..RememberItem::default()
            }])
            .unwrap()
            .remove(0)
            .unwrap()
            .id;
        assert_eq!(vector_ids(&reader, "sleepy cat")[0], *kitten);
        // New content is embedded by the writer; new tags, a forget and a restore keep the text.
        let patch = |content: Option<&str>, tags: Option<Vec<String>>| crate::model::MemoryPatch {
            content: content.map(Into::into),
            tags,
            ..crate::model::MemoryPatch::default()
        };
        let storms = "The spacecraft lift-off was delayed by storms";
        writer
            .update(
                &MemoryRef::Id(rocket.clone()),
                &patch(Some(storms), None),
                "test",
            )
            .unwrap();
        writer
            .update(
                &MemoryRef::Id(tax.clone()),
                &patch(None, Some(vec!["money".into()])),
                "test",
            )
            .unwrap();
        writer
            .forget(&[MemoryRef::Id(puppy.clone())], &[], "test")
            .unwrap();
        writer
            .restore(&[MemoryRef::Id(puppy.clone())], &[], "test")
            .unwrap();
        let queries = [
            "sleepy cat",
            "rocket takeoff postponed",
            "taxes due in spring",
            "dog biting footwear",
        ];
        assert_eq!(vector_ids(&reader, queries[1])[0], *rocket);
        assert_eq!(vector_ids(&reader, queries[2])[0], *tax);
        assert_eq!(vector_ids(&reader, queries[3])[0], puppy);
        assert_eq!(vector_ids(&writer, queries[3])[0], puppy);
        assert!(
            embedded(&they, &queries).is_empty(),
            "{:?}",
            embedded(&they, &queries)
        );
        assert_eq!(
            embedded(&we, &queries),
            [
                "A kitten napping in a sunny window",
                "A puppy chewing on an old shoe",
                "A rocket launch was postponed by the wind",
                "The quarterly tax filing is due in April",
                storms,
            ],
            "the writer embeds each text once, when it writes it"
        );
        // A new server's index is filled from the stored vectors alone.
        let late = recording();
        let fresh = Engine::open_with(in_folder("late"), Some(late.clone())).unwrap();
        assert_eq!(vector_ids(&fresh, queries[0])[0], *kitten);
        assert_eq!(fresh.vectors.with_index(|ix| ix.len()).unwrap(), 4);
        assert!(embedded(&late, &queries).is_empty());
    }

    // A vector dump made by a newer history than the restored database's named other memories'
    // vectors under the same keys: a search found a memory by what another one said.
    #[test]
    fn a_vector_dump_of_another_history_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.db");
        let backup = dir.path().join("backup.db");
        let cfg = Config::for_db(db.clone());
        let alpha = {
            let e = Engine::open(cfg.clone()).unwrap();
            let alpha = remember(&e, "A kitten napping in a sunny window");
            remember(&e, "The quarterly tax filing is due in April");
            vector_ids(&e, "cat");
            alpha
        };
        crate::engine::tests::copy_db(&db, &backup);
        {
            let e = Engine::open(cfg.clone()).unwrap();
            let patch = crate::model::MemoryPatch {
                content: Some("A rocket launch was postponed by the wind".into()),
                ..crate::model::MemoryPatch::default()
            };
            e.update(&MemoryRef::Id(alpha.clone()), &patch, "test")
                .unwrap();
            let (hits, _) = vector_hits(&e, "rocket launch postponed");
            assert_eq!(hits[0].0, alpha);
        }
        crate::engine::tests::copy_db(&backup, &db);
        for loading in [false, true] {
            let e = Engine::open(cfg.clone()).unwrap();
            e.vectors
                .loading
                .store(loading, std::sync::atomic::Ordering::Release);
            let (hits, _) = vector_hits(&e, "rocket launch postponed by the wind");
            let alpha_score = hits.iter().find(|h| h.0 == alpha).map_or(0.0, |h| h.1);
            assert!(
                alpha_score < 0.8,
                "the restored kitten memory is not found by the rocket text: {hits:?}"
            );
        }
    }
}
