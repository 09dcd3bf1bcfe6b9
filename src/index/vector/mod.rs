//! The vector index of memory embeddings: an HNSW graph (usearch, in `graph`) over unit
//! vectors for approximate top-k search, an exact scan beside it, and a dump to disk reloaded at
//! start. Derived state: SQLite holds every vector and the engine feeds them here; a dump that is
//! missing, damaged, or made for another model or dimension loads as an empty index (with the
//! reason) that the engine refills.
//!
//! Keys are the engine's `u64`s. Inside, every inserted vector gets a *slot*, which is its point
//! key in the graph. Replacing a key's vector inserts a new slot and retires the old one only once
//! the new one is in, so a search never misses the key meanwhile; retired slots leave the graph
//! (which reuses their room) and leave a tombstone in the slot table, which
//! [`VectorIndex::compact`] renumbers away once tombstones pass a quarter of the slots.
//!
//! Each vector is held once, in the graph, as bfloat16 numbers (512 bytes at dim 256): its
//! direction from the index's centre, its distance from the centre in the slot table (see
//! `State::centre`); vectors staged for insertion wait beside it in that very form. Every
//! score is computed here from the stored direction and the query's direction rounded as the
//! graph rounds it: an exact scan reads the direction, a graph hit is scored from the distance
//! the graph measured to it (its lean toward the centre kept in the slot table), and a vector
//! the index does not hold yet is placed and rounded first ([`VectorIndex::similarities`]). So a
//! vector has one score wherever it is — outside, staged, in the graph — to the order of a float
//! sum (10⁻⁶), and near ties keep their order while vectors move into the graph.
//!
//! Locking: searches take the read side of one `RwLock` and never block each other. Writers
//! (upsert, remove, compact, dump) are serialised by a mutex of their own and take the write side
//! only for short bookkeeping steps; the graph insertions themselves run under the read side
//! (usearch inserts concurrently with searches), so searches go on meanwhile.

mod distance;
mod dump;
pub mod flat;
mod graph;
mod sketch;
mod staged;
mod state;
mod topk;

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering as AtomicOrdering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};
use crate::model::LogPosition;
use distance::*;
use dump::*;
use state::*;

pub use distance::unit_similarity;
pub use state::graph_failures;
pub use topk::Scope;
pub(crate) use topk::{ScopeFilter, best_of};

/// What [`VectorIndex::load`] found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadState {
    /// The dump was whole and of this model and dimension; the index holds it.
    Loaded,
    /// No dump: the index starts empty.
    Missing,
    /// A dump was there but unusable (damaged, another model, another dimension, another format);
    /// the index starts empty. The text says why.
    Rebuilt(String),
}

/// The ANN index of one embedding model: see the module documentation.
pub struct VectorIndex {
    model: String,
    dim: usize,
    /// Change-log position applied, as set by the engine.
    seq: AtomicI64,
    /// Serialises upsert, remove, compact and dump.
    writer: Mutex<()>,
    state: RwLock<State>,
    /// The position recorded in the dump it was loaded from.
    origin: Option<LogPosition>,
}

impl fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.read();
        f.debug_struct("VectorIndex")
            .field("model", &self.model)
            .field("dim", &self.dim)
            .field("seq", &self.seq())
            .field("live", &st.live_count())
            .field("slots", &st.keys.len())
            .finish()
    }
}

impl VectorIndex {
    /// An empty index for vectors of `dim` floats made by `model`. Fails only when the graph
    /// cannot allocate its first points.
    pub fn new(model: &str, dim: usize) -> Result<VectorIndex> {
        Ok(VectorIndex::with_state(model, dim, 0, State::empty(dim)?))
    }

    fn with_state(model: &str, dim: usize, seq: i64, state: State) -> VectorIndex {
        VectorIndex {
            model: model.to_owned(),
            dim,
            seq: AtomicI64::new(seq),
            writer: Mutex::new(()),
            state: RwLock::new(state),
            origin: None,
        }
    }

    /// The change-log position recorded in the dump this index was loaded from (`None`: not
    /// loaded from a dump, or from one that did not record it).
    pub fn origin(&self) -> Option<&LogPosition> {
        self.origin.as_ref()
    }

    /// Loads the dump in `dir` when it is there, whole, and of this model and dimension;
    /// otherwise an empty index and the reason. Fails only as [`VectorIndex::new`] does.
    pub fn load(dir: &Path, model: &str, dim: usize) -> Result<(VectorIndex, LoadState)> {
        Ok(match read_dump(dir, model, dim) {
            Ok(Some((state, seq, origin))) => {
                // Before any search reads the graph (see `huge_pages`).
                if state.graph.len() >= crate::huge_pages::MIN_POINTS {
                    crate::huge_pages::collapse();
                }
                let mut index = VectorIndex::with_state(model, dim, seq, state);
                index.origin = origin;
                (index, LoadState::Loaded)
            }
            Ok(None) => (VectorIndex::new(model, dim)?, LoadState::Missing),
            Err(why) => (VectorIndex::new(model, dim)?, LoadState::Rebuilt(why)),
        })
    }

    /// Writes the dump into `dir` (created if needed). New files get a fresh generation name;
    /// the metadata file, written to a temporary name and renamed over the old one, commits them;
    /// the previous generation's files are deleted afterwards. A crash at any point leaves the old
    /// dump or the new one (plus stray files the next dump deletes), never a mix: the metadata
    /// records each file's length and SHA-256.
    ///
    /// Searches go on meanwhile; upserts and removals wait for the dump to finish.
    ///
    /// Returns the change-log position written, or `None` (writing nothing) while vectors are
    /// staged: they are not in the graph, so a dump would lose them from graph searches.
    pub fn dump(&self, dir: &Path) -> Result<Option<i64>> {
        self.dump_with(dir, |_| Ok(None))
    }

    /// [`VectorIndex::dump`], recording the change-log position `position_of` gives for the
    /// sequence dumped (the database and history the dump belongs to; see [`VectorIndex::origin`]).
    pub fn dump_with(
        &self,
        dir: &Path,
        position_of: impl FnOnce(i64) -> Result<Option<LogPosition>>,
    ) -> Result<Option<i64>> {
        let _writer = self.writer();
        let st = self.read();
        if !st.staged.is_empty() {
            return Ok(None);
        }
        let seq = self.seq();
        let position = position_of(seq)?;
        fs::create_dir_all(dir)?;
        let generation = fresh_generation(dir);
        let names = DumpNames::new(&generation);
        let files = match write_files(dir, &names, &st) {
            Ok(files) => files,
            Err(e) => {
                for name in names.all() {
                    let _ = fs::remove_file(dir.join(name));
                }
                return Err(e);
            }
        };
        let meta = Meta {
            format: DUMP_FORMAT,
            engine: GRAPH_ENGINE.to_owned(),
            model: self.model.clone(),
            dim: self.dim,
            seq,
            generation,
            slots: st.keys.len(),
            live: st.live_count(),
            connectivity: graph::CONNECTIVITY,
            expansion_add: graph::EXPANSION_ADD,
            files,
            position,
            centre: st.centred.then(|| st.centre.clone()),
        };
        drop(st);
        let temp = dir.join(META_TEMP);
        {
            let mut out = File::create(&temp)?;
            out.write_all(&serde_json::to_vec_pretty(&meta)?)?;
            out.sync_all()?;
        }
        fs::rename(&temp, dir.join(META_FILE))?;
        // Make the rename durable; not every platform can open a directory, hence best effort.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        remove_stale_files(dir, &names);
        Ok(Some(seq))
    }

    /// A compact copy of every live vector (graph and staged), recorded as of `position`.
    pub fn flat(&self, position: LogPosition) -> crate::index::vector::flat::FlatVectors {
        let st = self.read();
        let mut flat =
            crate::index::vector::flat::FlatVectors::empty(&self.model, self.dim, position);
        let mut buf = vec![0.0; self.dim];
        for slot in (0..st.keys.len()).filter(|&s| st.live[s]) {
            if let Some(v) = st.vector(slot as u32, &mut buf) {
                flat.push(st.keys[slot], v);
            }
        }
        flat
    }

    /// Identifier of the model whose vectors this index holds.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Length of every vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Change-log position the index reflects (stored in the dump).
    pub fn seq(&self) -> i64 {
        self.seq.load(AtomicOrdering::Acquire)
    }

    /// Records the change-log position applied; call it after the upserts and removals up to it.
    pub fn set_seq(&self, seq: i64) {
        self.seq.store(seq, AtomicOrdering::Release);
    }

    /// Adds or replaces the vector of each key (the last one wins when a key repeats). A vector
    /// identical to the key's current one is left alone; another one is inserted as a new slot
    /// and the old slot tombstoned. The new vectors become visible to searches together, once
    /// all are in the graph; until then searches see the old ones. Batches of
    /// `PARALLEL_INSERT_MIN` (32) or more are inserted by rayon's threads.
    ///
    /// Vectors are rescaled to unit length when they are not (a zero vector is kept). A vector of
    /// another length or with a non-finite value fails the whole batch, before anything changes.
    pub fn upsert(&self, items: &[(u64, Vec<f32>)]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let dim = self.dim;
        let (keys, flat) = self.normalized(items)?;
        let _writer = self.writer();
        // 1. New slots, not live yet, their vectors pending; room in the graph for them.
        let (fresh, moved): (Vec<(u64, u32)>, Vec<u32>) = {
            let mut st = self.write();
            st.reserve(keys.len())?;
            let mut fresh = Vec::with_capacity(keys.len());
            for (i, &key) in keys.iter().enumerate() {
                let v = &flat[i * dim..(i + 1) * dim];
                if !st.holds(key, v) {
                    fresh.push((key, st.push_slot(key, v)?));
                }
            }
            let moved = st.fix_centre();
            (fresh, moved)
        };
        if fresh.is_empty() && moved.is_empty() {
            return Ok(());
        }
        let slots: Vec<u32> = fresh
            .iter()
            .map(|&(_, s)| s)
            .chain(moved.iter().copied())
            .collect();
        // 2. Into the graph, searches going on (they skip the new slots: not live).
        let inserted = self.read().insert_into_graph(&slots);
        // 3. Swap: the new slots live, the replaced ones retired. A failed insertion (the graph
        // could not allocate) retires the new slots instead and stages the moved ones.
        let mut st = self.write();
        if let Err(e) = inserted {
            for &(_, slot) in &fresh {
                st.retire(slot);
            }
            st.stage_slots(&moved);
            return Err(e);
        }
        st.settle(&slots);
        for (key, slot) in fresh {
            if let Some(old) = st.slot_of.insert(key, slot) {
                st.retire(old);
            }
            st.make_live(slot);
        }
        Ok(())
    }

    /// Unit vectors of `items`, one per key (the last wins), flat; fails on a bad vector.
    fn normalized(&self, items: &[(u64, Vec<f32>)]) -> Result<(Vec<u64>, Vec<f32>)> {
        let dim = self.dim;
        let mut position: HashMap<u64, usize> = HashMap::with_capacity(items.len());
        let mut keys: Vec<u64> = Vec::with_capacity(items.len());
        let mut flat: Vec<f32> = Vec::with_capacity(items.len() * dim);
        for (key, v) in items {
            let v = unit_vector(v, dim)
                .map_err(|why| Error::Internal(format!("vector of key {key}: {why}")))?;
            match position.get(key) {
                Some(&i) => flat[i * dim..(i + 1) * dim].copy_from_slice(&v),
                None => {
                    position.insert(*key, keys.len());
                    keys.push(*key);
                    flat.extend_from_slice(&v);
                }
            }
        }
        Ok((keys, flat))
    }

    /// Like [`upsert`], but without the graph insertion: the vectors are live at once and found
    /// by an exact scan beside the graph search until [`index_staged`] has put them in the
    /// graph. Costs a copy per vector, so a large backlog becomes searchable in milliseconds.
    ///
    /// [`upsert`]: VectorIndex::upsert
    /// [`index_staged`]: VectorIndex::index_staged
    pub fn stage(&self, items: &[(u64, Vec<f32>)]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let dim = self.dim;
        let (keys, flat) = self.normalized(items)?;
        let _writer = self.writer();
        // The centre moves only under the writer lock: these are the sketches the slots get
        // (unless this very batch fixes the centre, which sketches every staged slot anew).
        let sketches = self.read().sketches(&flat);
        self.write().reserve(keys.len())?;
        // The write lock is taken per chunk, so searches wait at most for one.
        for (chunk, at) in keys.chunks(STAGE_CHUNK).zip((0..).step_by(STAGE_CHUNK)) {
            let mut st = self.write();
            for (i, &key) in chunk.iter().enumerate().map(|(i, k)| (at + i, k)) {
                let v = &flat[i * dim..(i + 1) * dim];
                if st.holds(key, v) {
                    continue;
                }
                let slot = st.push_slot(key, v)?;
                if let Some(old) = st.slot_of.insert(key, slot) {
                    st.retire(old);
                }
                st.make_live(slot);
                st.staged.push(slot, &sketches[i]);
            }
        }
        let mut st = self.write();
        let moved = st.fix_centre();
        st.stage_slots(&moved);
        Ok(())
    }

    /// Puts up to `max` staged vectors into the graph (searches go on meanwhile; writes wait);
    /// returns how many stay staged. On failure (the graph could not allocate) they stay staged,
    /// still found by the scan.
    pub fn index_staged(&self, max: usize) -> Result<usize> {
        let _writer = self.writer();
        let (taken, slots): (usize, Vec<u32>) = {
            let st = self.read();
            let n = st.staged.len().min(max);
            let live = st.staged.slots()[..n]
                .iter()
                .copied()
                .filter(|&s| st.live[s as usize])
                .collect();
            (n, live)
        };
        if taken == 0 {
            return Ok(0);
        }
        self.read().insert_into_graph(&slots)?;
        let mut st = self.write();
        st.settle(&slots);
        st.staged.take_front(taken);
        Ok(st.staged.len())
    }

    /// Records the namespace of each key's memory, which [`Scope::Namespaces`] searches by
    /// (keys without a vector are skipped). A key's later vectors keep its namespace; a memory
    /// that moves is placed again. Nothing on disk keeps them: after [`VectorIndex::load`],
    /// every vector's namespace is unknown until placed again.
    pub fn place(&self, items: &[(u64, &str)]) {
        let _writer = self.writer();
        // The write lock is taken per chunk, so searches wait at most for one.
        for chunk in items.chunks(STAGE_CHUNK) {
            let mut st = self.write();
            for &(key, namespace) in chunk {
                st.place(key, namespace);
            }
        }
    }

    /// Vectors whose namespace is not known (see [`VectorIndex::place`]): a search by
    /// namespace counts them in every namespace's scope.
    pub fn unplaced(&self) -> usize {
        self.read().unplaced
    }

    /// Vectors searchable but not in the graph yet.
    pub fn staged(&self) -> usize {
        self.read().staged.len()
    }

    /// Removes these keys' vectors (unknown keys are ignored).
    pub fn remove(&self, keys: &[u64]) {
        let _writer = self.writer();
        let mut st = self.write();
        for key in keys {
            if let Some(slot) = st.slot_of.remove(key) {
                st.retire(slot);
            }
        }
    }

    /// Number of keys with a vector.
    pub fn len(&self) -> usize {
        self.read().live_count()
    }

    /// True when no key has a vector.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` has a vector.
    pub fn contains(&self, key: u64) -> bool {
        self.read().slot_of.contains_key(&key)
    }

    /// Top k keys by similarity to `query` (dot product of unit vectors, higher is closer), best
    /// first, only live keys in scope. `All` and `Predicate` search the graph with a candidate
    /// list of `max(1.5k, 0.5 √points)` (within 128–384), lengthened to about that ÷ share when a
    /// sample of the keys says only a share of them is in scope (liveness ANDed with the
    /// predicate), then filter it; when the keys in scope are few enough (a few thousand) that
    /// reading them all is cheaper, they are scanned instead, exactly. `Keys` always scans
    /// those keys' vectors. A query of the wrong length, non-finite or zero finds nothing.
    pub fn search(&self, query: &[f32], k: usize, scope: Scope<'_>) -> Vec<(u64, f32)> {
        self.search_noting(query, k, scope).0
    }

    /// [`VectorIndex::search`], and why it answered by an exact scan instead of the graph it
    /// should have used (the graph failed: logged and counted in [`graph_failures`]).
    pub fn search_noting(
        &self,
        query: &[f32],
        k: usize,
        scope: Scope<'_>,
    ) -> (Vec<(u64, f32)>, Option<String>) {
        FELL_BACK.with(|f| f.set(None));
        let hits = self.search_hits(query, k, scope);
        (hits, FELL_BACK.with(std::cell::Cell::take))
    }

    fn search_hits(&self, query: &[f32], k: usize, scope: Scope<'_>) -> Vec<(u64, f32)> {
        let Some(query) = self.query_vector(query) else {
            return Vec::new();
        };
        if k == 0 {
            return Vec::new();
        }
        let st = self.read();
        let query = st.query(query);
        let mut numbers = Vec::new();
        let hits = match scope {
            _ if st.live_count() == 0 => Vec::new(),
            Scope::Keys(_) => st.exact(&query, k, scope),
            Scope::All => st.search_scope(&query, k, Within::All, None),
            Scope::Predicate(accept) => st.search_scope(&query, k, Within::Keys(accept), None),
            Scope::Namespaces(names) => match st.spaces(names, &mut numbers) {
                Some(within) => st.search_scope(&query, k, within, None),
                // No vector is in these namespaces.
                None => Vec::new(),
            },
        };
        hits.into_iter().map(|h| (h.key, h.score)).collect()
    }

    /// [`VectorIndex::search`] over every key, the graph searched with a candidate list of
    /// `list` instead of the one the index would choose: for benchmarks that choose the list's
    /// length by recall against [`VectorIndex::exact`]. Staged vectors, and a graph that fails,
    /// are handled as by `search`.
    pub fn search_with_list(&self, query: &[f32], k: usize, list: usize) -> Vec<(u64, f32)> {
        let Some(query) = self.query_vector(query) else {
            return Vec::new();
        };
        let st = self.read();
        if k == 0 || st.live_count() == 0 {
            return Vec::new();
        }
        let hits = st.search_scope(&st.query(query), k, Within::All, Some(list));
        hits.into_iter().map(|h| (h.key, h.score)).collect()
    }

    /// Exact top k over all live vectors in scope (brute force): the ground truth of [`search`],
    /// with the same scores.
    ///
    /// [`search`]: VectorIndex::search
    pub fn exact(&self, query: &[f32], k: usize, scope: Scope<'_>) -> Vec<(u64, f32)> {
        let Some(query) = self.query_vector(query) else {
            return Vec::new();
        };
        if k == 0 {
            return Vec::new();
        }
        let st = self.read();
        let hits = st.exact(&st.query(query), k, scope);
        hits.into_iter().map(|h| (h.key, h.score)).collect()
    }

    /// The similarities of `query` to vectors the index does not hold (a change it has not
    /// applied yet), in order: the very numbers it will give them once it holds them (each
    /// vector placed around its centre and rounded as it stores vectors), so hits scored outside
    /// it rank with its own. `None` for a vector it could not hold (another length, non-finite);
    /// nothing for a bad query.
    pub fn similarities(&self, query: &[f32], vectors: &[&[f32]]) -> Vec<Option<f32>> {
        let Some(query) = self.query_vector(query) else {
            return vec![None; vectors.len()];
        };
        let st = self.read();
        let query = st.query(query);
        vectors
            .iter()
            .map(|v| {
                let x = unit_vector(v, self.dim).ok()?;
                Some(st.score_outside(&query, &x))
            })
            .collect()
    }

    /// True when tombstoned slots exceed a quarter of all slots: [`compact`] then pays off.
    ///
    /// [`compact`]: VectorIndex::compact
    pub fn needs_compaction(&self) -> bool {
        let st = self.read();
        st.dead_count() as f64 > COMPACT_DEAD_SHARE * st.keys.len() as f64
    }

    /// Renumbers the slots, dropping every tombstone. Holds the lock throughout (searches wait;
    /// it renames each live point of the graph once, about a second per million).
    pub fn compact(&self) -> Result<()> {
        let _writer = self.writer();
        self.write().compact()
    }

    fn query_vector(&self, query: &[f32]) -> Option<Vec<f32>> {
        let q = unit_vector(query, self.dim).ok()?;
        q.iter().any(|x| *x != 0.0).then_some(q)
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

// ---------------------------------------------------------------------------------------------
// Dump format: `vectors.meta.json` (below) names one generation of files:
//   vectors.<gen>.slots    the slot table (see `write_slots`)
//   vectors.<gen>.usearch  usearch's file of the graph and its vectors (point key = slot), only
//                          when there are slots

#[cfg(test)]
mod tests;
