//! The vector index of memory embeddings: an HNSW graph (usearch, in [`graph`]) over unit
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
//! Each vector is held once, in the graph, as half-precision floats (512 bytes at dim 256): its
//! direction from the index's centre, its distance from the centre in the slot table (see
//! `State::centre`); vectors staged for insertion wait beside it in full precision. Every
//! score is computed here, as the dot product of the query with the stored vector, so graph hits
//! and exact hits of one vector carry the very same number.
//!
//! Locking: searches take the read side of one `RwLock` and never block each other. Writers
//! (upsert, remove, compact, dump) are serialised by a mutex of their own and take the write side
//! only for short bookkeeping steps; the graph insertions themselves run under the read side
//! (usearch inserts concurrently with searches), so searches go on meanwhile.

mod graph;
mod sketch;
mod staged;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::model::LogPosition;
use graph::Graph;
use staged::Staged;

/// Smallest candidate list of a search; a search for k asks `max(2k, EF_SEARCH_MIN)`. The
/// built-in model's vectors crowd into a narrow cone (their mean has length 0.84–0.90), where a
/// graph search needs a long list: on 18,495 real conversation turns searched by 3,401 real
/// questions, recall@10 was 0.84 with 64, 0.91 with 128, 0.95 with 256 and 0.966 with 384
/// (0.36 ms a search), counting a hit that ties the exact 10th as found.
const EF_SEARCH_MIN: usize = 384;

/// Graph searches of this process that failed and were answered by an exact scan instead.
static GRAPH_FAILURES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Why the search running on this thread fell back to an exact scan, if it did.
    static FELL_BACK: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// Graph searches of this process that failed and were answered by an exact scan (for metrics:
/// each one is a search that cost a scan of every vector in scope).
pub fn graph_failures() -> u64 {
    GRAPH_FAILURES.load(AtomicOrdering::Relaxed)
}
/// Vectors an index holds before it fixes its centre (see [`State::centre`]).
const CENTRE_AFTER: usize = 1_024;
/// The graph is searched toward `q − α·c` for this α (see [`State::centre`]). A stored vector
/// is `x = c + r·t` with `|x| = 1`, which ties its distance from the centre to its direction
/// (`2r·(c·t) = 1 − |c|² − r²`): the farther from the centre, the lower `c·t`. Near the top of a
/// ranking by `q·x = q·c + r·(q·t)`, then, `(q − α·c)·t = q·t − α·(c·t)` with α about 0.6
/// follows the same order, where the query's own direction from the centre (α = 1) overrates
/// vectors near the centre and `q` alone (α = 0) those far from it. Over the real turns grown
/// to a million, the exact top 10 of 200 questions were all among the first 128 directions by
/// `(q − 0.6·c)·t` (α 0.5–0.7 alike), against 90 % with α = 1 and 71 % with α = 0.
const QUERY_CENTRE_SHARE: f32 = 0.6;
/// Graph capacity reserved by an empty index (the graph grows past it).
const INITIAL_CAPACITY: usize = 1_024;
/// What one member of a search's candidate list costs, in vectors a scan reads meanwhile (a scan
/// reads each vector out of the graph, converting it from half precision). A scope cheaper to
/// scan than `candidates × SCAN_VECTORS_PER_CANDIDATE` vectors is scanned.
const SCAN_VECTORS_PER_CANDIDATE: usize = 4;
/// A scan calls the predicate on every live key: one call counted as this share of a vector.
const PREDICATE_CALL_COST: f64 = 1.0 / 16.0;
/// Longest candidate list asked of the graph; a scope that would need more is scanned.
const EF_MAX: usize = 2_048;
/// A batch of at least this many new vectors is inserted by rayon's threads.
const PARALLEL_INSERT_MIN: usize = 32;
/// Slots sampled to estimate the share of the graph a predicate keeps in scope.
const PREDICATE_SAMPLE: usize = 256;
/// Tombstones beyond this share of all slots call for [`VectorIndex::compact`].
const COMPACT_DEAD_SHARE: f64 = 0.25;
/// Vectors [`VectorIndex::stage`] adds under one hold of the write lock.
const STAGE_CHUNK: usize = 1_024;
/// Vectors whose length is off 1 by more than this are rescaled to unit length.
const UNIT_TOLERANCE: f32 = 1e-4;

/// Every file of a dump starts with this, so the cleanup after a dump touches nothing else.
const FILE_PREFIX: &str = "vectors.";
/// The metadata of the current dump; renaming it into place is what commits a dump.
const META_FILE: &str = "vectors.meta.json";
const META_TEMP: &str = "vectors.meta.json.tmp";
/// Bumped whenever anything written by [`VectorIndex::dump`] changes meaning.
const DUMP_FORMAT: u32 = 3;
/// The graph file is usearch's own format; a dump from another version of it is rebuilt.
const GRAPH_ENGINE: &str = "usearch 2.26.6 f16";
const SLOTS_MAGIC: &[u8; 8] = b"MGVSLOT2";

/// Dot product of two vectors of one length, the hot loop of every search and insertion. Where
/// the CPU has AVX2 the same code runs with 256-bit registers: the operations and their order are
/// the same either way (no fused multiply-add), so every machine computes the very same number.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU was just found to support AVX2.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

/// 32 independent sums, so the loop vectorises (a single running sum cannot be reordered) and
/// keeps several additions in flight instead of waiting on one register.
#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 32;
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0f32; LANES];
    for (x, y) in ca.zip(cb) {
        for ((s, x), y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    // Pairwise, so the sum stays independent of how wide the registers were.
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    acc[0] + tail
}

/// `1 − dot` within [0, 2]; total (a NaN, which validated input cannot produce, maps to 0).
fn distance(dot: f32) -> f32 {
    let d = 1.0 - dot;
    if d >= 0.0 { d.min(2.0) } else { 0.0 }
}

/// The similarity callers see: higher is closer, 1 for the same direction. Computed from the
/// distance so that graph hits and exact hits of one vector carry the very same number.
fn similarity(distance: f32) -> f32 {
    1.0 - distance
}

/// The similarity the index gives two unit vectors (for candidates scored outside it).
pub fn unit_similarity(a: &[f32], b: &[f32]) -> f32 {
    similarity(distance(dot(a, b)))
}

/// The `k` best of `(key, dot product)` pairs, best first (ties by key), scored as searches
/// score them (for candidates scored outside the index).
pub(crate) fn best_of(k: usize, dots: impl Iterator<Item = (u64, f32)>) -> Vec<(u64, f32)> {
    let mut top = TopK::new(k);
    for (key, dot) in dots {
        top.push(Hit {
            score: similarity(distance(dot)),
            key,
        });
    }
    top.into_sorted()
        .into_iter()
        .map(|h| (h.key, h.score))
        .collect()
}

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

/// Which keys a search may return.
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    /// Every live key.
    All,
    /// Only these keys (duplicates and unknown keys are fine); always answered by an exact scan.
    Keys(&'a [u64]),
    /// Only keys the function accepts. It is called many times per search, from the searching
    /// thread, and should be cheap.
    Predicate(&'a (dyn Fn(u64) -> bool + Sync)),
}

impl fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::All => f.write_str("All"),
            Scope::Keys(keys) => write!(f, "Keys({} keys)", keys.len()),
            Scope::Predicate(_) => f.write_str("Predicate"),
        }
    }
}

/// Whether a key is in a search's scope, for candidates scored outside the index.
pub(crate) enum ScopeFilter<'a> {
    All,
    Keys(HashSet<u64>),
    Few(&'a [u64]),
    Predicate(&'a (dyn Fn(u64) -> bool + Sync)),
}

impl<'a> ScopeFilter<'a> {
    /// A filter for `n_tested` keys to come (a short key list is searched, a long one hashed).
    pub(crate) fn new(scope: &Scope<'a>, n_tested: usize) -> ScopeFilter<'a> {
        match *scope {
            Scope::All => ScopeFilter::All,
            Scope::Keys(keys) if keys.len().saturating_mul(n_tested) <= 100_000 => {
                ScopeFilter::Few(keys)
            }
            Scope::Keys(keys) => ScopeFilter::Keys(keys.iter().copied().collect()),
            Scope::Predicate(accept) => ScopeFilter::Predicate(accept),
        }
    }

    pub(crate) fn accepts(&self, key: u64) -> bool {
        match self {
            ScopeFilter::All => true,
            ScopeFilter::Keys(set) => set.contains(&key),
            ScopeFilter::Few(keys) => keys.contains(&key),
            ScopeFilter::Predicate(accept) => accept(key),
        }
    }
}

/// One result while ranking.
#[derive(Debug, Clone, Copy)]
struct Hit {
    score: f32,
    key: u64,
}

/// Best first: higher score, then lower key (so equal scores rank the same way every time).
fn rank(a: &Hit, b: &Hit) -> Ordering {
    b.score.total_cmp(&a.score).then(a.key.cmp(&b.key))
}

/// Heap entry whose maximum is the worst hit kept.
struct Worst(Hit);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        rank(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        rank(&self.0, &other.0)
    }
}

/// The k best hits seen so far.
struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    fn new(k: usize) -> TopK {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(1_024) + 1),
        }
    }

    fn push(&mut self, hit: Hit) {
        if self.heap.len() < self.k {
            self.heap.push(Worst(hit));
        } else if let Some(worst) = self.heap.peek()
            && rank(&hit, &worst.0) == Ordering::Less
        {
            self.heap.pop();
            self.heap.push(Worst(hit));
        }
    }

    fn into_sorted(self) -> Vec<Hit> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|w| w.0)
            .collect()
    }
}

/// Everything behind the lock. Slot `s` is graph point `s` once inserted.
struct State {
    graph: Graph,
    dim: usize,
    /// Key of each slot.
    keys: Vec<u64>,
    /// Whether each slot is its key's current vector.
    live: Vec<bool>,
    /// A hash of each slot's vector, so re-sending the same vector adds nothing.
    prints: Vec<u64>,
    /// The live slot of each key.
    slot_of: HashMap<u64, u32>,
    /// Slots staged but not in the graph yet, oldest first: searches read them beside the graph,
    /// so a staged vector is found at once while the (slower) graph insertion catches up.
    staged: Staged,
    /// Full vectors of the slots not in the graph yet (staged, or being inserted).
    pending: HashMap<u32, Vec<f32>, SlotHash>,
    /// The mean of the vectors, fixed once the index first holds [`CENTRE_AFTER`] of them
    /// (zero until then). The graph holds each vector `x` as the unit direction `t` of `x − c`
    /// and `norms` its length `r`, so `x = c + r·t` and `q·x = q·c + r·(q·t)`: scores are those
    /// of the vectors themselves, while the graph is built and searched among the directions
    /// away from the mean. The built-in model's vectors share one dominant direction (the mean
    /// has length 0.84–0.90), which crowds them into a narrow cone a graph search navigates
    /// badly: searching the centred directions and scoring the candidates by `q·x` raised
    /// recall@10 from 0.966 to 0.981 on 18,495 real turns and from 0.865 to 0.907 on a
    /// million memories grown from them (list 384, `examples/vector_scale.rs`); searching
    /// toward `q − 0.6·c` instead of the query's own direction from the centre (see
    /// [`QUERY_CENTRE_SHARE`]) raised the million's to 0.956.
    centre: Vec<f32>,
    centred: bool,
    /// `r = |x − centre|` of each slot.
    norms: Vec<f32>,
}

/// Hashes slot numbers for the pending vectors' map: a multiply spreads them over the table
/// (they are small consecutive integers), several times cheaper than the default SipHash on the
/// scan of staged vectors, and nothing outside the index chooses them.
#[derive(Default, Clone, Copy)]
struct SlotHasher(u64);

impl std::hash::Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, slot: u32) {
        self.0 = u64::from(slot).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type SlotHash = std::hash::BuildHasherDefault<SlotHasher>;

/// A query as the state scores it: the unit vector, its direction away from the centre (what
/// staged sketches are compared with), the direction the graph is searched toward (see
/// [`QUERY_CENTRE_SHARE`]) and its dot product with the centre.
struct Query {
    v: Vec<f32>,
    direction: Vec<f32>,
    toward: Vec<f32>,
    at_centre: f32,
}

impl State {
    fn empty(dim: usize) -> Result<State> {
        Ok(State::with_graph(
            Graph::new(dim, INITIAL_CAPACITY).map_err(Error::Internal)?,
            dim,
        ))
    }

    fn with_graph(graph: Graph, dim: usize) -> State {
        State {
            graph,
            dim,
            keys: Vec::new(),
            live: Vec::new(),
            prints: Vec::new(),
            slot_of: HashMap::new(),
            staged: Staged::new(dim),
            pending: HashMap::default(),
            centre: vec![0.0; dim],
            centred: false,
            norms: Vec::new(),
        }
    }

    fn query(&self, v: Vec<f32>) -> Query {
        let (direction, _) = self.direction(&v);
        let mut toward: Vec<f32> = v
            .iter()
            .zip(&self.centre)
            .map(|(q, c)| q - QUERY_CENTRE_SHARE * c)
            .collect();
        let norm = dot(&toward, &toward).sqrt();
        if norm > 0.0 {
            toward.iter_mut().for_each(|x| *x /= norm);
        }
        Query {
            toward,
            at_centre: dot(&v, &self.centre),
            direction,
            v,
        }
    }

    /// The unit direction of `x − centre` and its length (a zero direction when `x` is the
    /// centre).
    fn direction(&self, x: &[f32]) -> (Vec<f32>, f32) {
        let mut t: Vec<f32> = x.iter().zip(&self.centre).map(|(x, c)| x - c).collect();
        let r = dot(&t, &t).sqrt();
        if r > 0.0 {
            t.iter_mut().for_each(|v| *v /= r);
        }
        (t, r)
    }

    /// The vector of `slot` as stored (the graph's rounded to half precision), into `buf`;
    /// `None` for a retired slot.
    fn vector<'a>(&'a self, slot: u32, buf: &'a mut [f32]) -> Option<&'a [f32]> {
        if let Some(v) = self.pending.get(&slot) {
            return Some(v);
        }
        if !self.graph.vector(slot, buf) {
            return None;
        }
        let r = self.norms[slot as usize];
        for (v, c) in buf.iter_mut().zip(&self.centre) {
            *v = c + r * *v;
        }
        Some(buf)
    }

    /// Fixes the centre once the index holds [`CENTRE_AFTER`] vectors: the mean of them all.
    /// The few already in the graph leave it and wait as pending vectors again (scanned until
    /// inserted anew); returns their slots, for the caller to insert or stage.
    fn fix_centre(&mut self) -> Vec<u32> {
        if self.centred || self.live_count() + self.pending.len() < CENTRE_AFTER {
            return Vec::new();
        }
        let mut buf = vec![0.0; self.dim];
        let mut sum = vec![0.0f64; self.dim];
        let mut n = 0usize;
        let mut in_graph: Vec<(u32, Vec<f32>)> = Vec::new();
        for slot in 0..self.keys.len() as u32 {
            let pending = self.pending.contains_key(&slot);
            if !pending && !self.live[slot as usize] {
                continue;
            }
            let Some(v) = self.vector(slot, &mut buf) else {
                continue;
            };
            sum.iter_mut().zip(v).for_each(|(s, x)| *s += f64::from(*x));
            n += 1;
            if !pending {
                in_graph.push((slot, v.to_vec()));
            }
        }
        self.centre = sum.iter().map(|s| (s / n.max(1) as f64) as f32).collect();
        self.centred = true;
        for slot in 0..self.keys.len() {
            if let Some(v) = self.pending.get(&(slot as u32)) {
                self.norms[slot] = self.direction(v).1;
            }
        }
        let mut moved = Vec::with_capacity(in_graph.len());
        for (slot, v) in in_graph {
            self.graph.remove(slot);
            self.norms[slot as usize] = self.direction(&v).1;
            self.pending.insert(slot, v);
            moved.push(slot);
        }
        let mut staged = std::mem::replace(&mut self.staged, Staged::new(self.dim));
        staged.resketch(|slot| {
            self.pending
                .get(&slot)
                .map_or_else(|| vec![0.0; self.dim], |v| self.direction(v).0)
        });
        self.staged = staged;
        moved
    }

    /// Stages pending slots whose sketches were not computed beforehand.
    fn stage_slots(&mut self, slots: &[u32]) {
        for &slot in slots {
            let sketch = self
                .pending
                .get(&slot)
                .map_or_else(Vec::new, |v| self.staged.sketch(&self.direction(v).0));
            if sketch.is_empty() {
                continue;
            }
            self.staged.push(slot, &sketch);
        }
    }

    /// Sketches of the directions of these unit vectors (`dim` each, flat), as they would be
    /// staged now; computed on rayon's threads, without the write lock.
    fn sketches(&self, flat: &[f32]) -> Vec<Vec<u64>> {
        flat.par_chunks(self.dim)
            .map(|v| self.staged.sketch(&self.direction(v).0))
            .collect()
    }

    /// `hits` from the graph merged with the best staged slots in scope (a slot being inserted
    /// may be in both: kept once). Up to [`staged::EXACT_UP_TO`] staged slots are all scored;
    /// beyond, a shortlist of those whose sketches are nearest the query's.
    fn with_staged(
        &self,
        query: &Query,
        k: usize,
        accept: Option<&(dyn Fn(u64) -> bool + Sync)>,
        hits: Vec<Hit>,
    ) -> Vec<Hit> {
        if self.staged.is_empty() {
            return hits;
        }
        // A slot being inserted may be among the graph's hits too: counted once.
        let from_graph: Vec<u64> = hits.iter().map(|h| h.key).collect();
        let mut top = TopK::new(k);
        for h in hits {
            top.push(h);
        }
        let in_scope = |slot: u32| {
            self.live[slot as usize] && accept.is_none_or(|a| a(self.keys[slot as usize]))
        };
        let mut buf = vec![0.0; self.dim];
        let mut push = |slot: u32, top: &mut TopK| {
            if !from_graph.contains(&self.keys[slot as usize])
                && let Some(hit) = self.score(query, slot, &mut buf)
            {
                top.push(hit);
            }
        };
        let n = self.staged.len();
        // A scope keeping a share of the slots lengthens the shortlist by as much (the sketches
        // are ranked among all staged slots, then the scope filters).
        let share = accept.map_or(1.0, |a| self.sampled_share(a).max(1e-6));
        let shortlist = (staged::SHORTLIST.max(2 * k) as f64 / share).ceil();
        if n <= staged::EXACT_UP_TO || shortlist >= n as f64 / 4.0 {
            for &slot in self.staged.slots() {
                if in_scope(slot) {
                    push(slot, &mut top);
                }
            }
        } else {
            let sketch = self.staged.sketch(&query.direction);
            for slot in self.staged.shortlist(&sketch, shortlist as usize) {
                if in_scope(slot) {
                    push(slot, &mut top);
                }
            }
        }
        top.into_sorted()
    }

    fn is_live(&self, slot: usize) -> bool {
        self.live.get(slot).copied().unwrap_or(false)
    }

    fn live_count(&self) -> usize {
        self.slot_of.len()
    }

    fn dead_count(&self) -> usize {
        self.keys.len() - self.live_count()
    }

    fn score(&self, query: &Query, slot: u32, buf: &mut [f32]) -> Option<Hit> {
        let dot = match self.pending.get(&slot) {
            Some(v) => dot(&query.v, v),
            None if self.graph.vector(slot, buf) => {
                query.at_centre + self.norms[slot as usize] * dot(&query.v, buf)
            }
            None => return None,
        };
        Some(Hit {
            score: similarity(distance(dot)),
            key: self.keys[slot as usize],
        })
    }

    /// Appends a slot that is not live yet, its vector pending.
    fn push_slot(&mut self, key: u64, vector: &[f32]) -> Result<u32> {
        let slot = u32::try_from(self.keys.len())
            .map_err(|_| Error::Internal("vector index: more than 2^32 slots".to_owned()))?;
        self.keys.push(key);
        self.live.push(false);
        self.prints.push(fingerprint(vector));
        self.norms.push(self.direction(vector).1);
        self.pending.insert(slot, vector.to_vec());
        Ok(slot)
    }

    /// Whether `key`'s live vector is `vector` already.
    fn holds(&self, key: u64, vector: &[f32]) -> bool {
        self.slot_of
            .get(&key)
            .is_some_and(|&slot| self.prints[slot as usize] == fingerprint(vector))
    }

    /// Room in the graph for `more` points beyond those in it and pending.
    fn reserve(&mut self, more: usize) -> Result<()> {
        let points = self.graph.len() + self.pending.len() + more;
        self.graph.reserve(points).map_err(Error::Internal)
    }

    /// Inserts these pending slots' vectors into the graph (through `&self`: usearch inserts
    /// concurrently), on rayon's threads for a large batch. Room was reserved when they were
    /// pushed.
    fn insert_into_graph(&self, slots: &[u32]) -> Result<()> {
        let insert = |&slot: &u32| match self.pending.get(&slot) {
            Some(v) => self.graph.add(slot, &self.direction(v).0),
            None => Ok(()),
        };
        let done: std::result::Result<(), String> = if slots.len() >= PARALLEL_INSERT_MIN {
            slots.par_iter().try_for_each(insert)
        } else {
            slots.iter().try_for_each(insert)
        };
        done.map_err(Error::Internal)
    }

    /// Drops these inserted slots' full vectors (the graph holds them now).
    fn settle(&mut self, slots: &[u32]) {
        for slot in slots {
            self.pending.remove(slot);
        }
    }

    /// Retires a slot that is no longer its key's vector: out of the graph and not live.
    fn retire(&mut self, slot: u32) {
        self.live[slot as usize] = false;
        self.pending.remove(&slot);
        // Also when pending: a failed batch may have put it in the graph already.
        self.graph.remove(slot);
    }

    /// Renumbers the live slots `0..n` in slot order, dropping the tombstones (the graph's
    /// points are renamed; nothing is re-inserted). A rename the graph refuses undoes the ones
    /// before it and leaves the index as it was.
    fn compact(&mut self) -> Result<()> {
        let live: Vec<u32> = (0..self.keys.len() as u32)
            .filter(|&s| self.live[s as usize])
            .collect();
        // Slot `live[i]` becomes `i`: never above it, so a target is free once the renames
        // before it are done.
        let mut done: Vec<(u32, u32)> = Vec::new();
        for (to, &from) in live.iter().enumerate() {
            let to = to as u32;
            if from == to || self.pending.contains_key(&from) {
                continue;
            }
            if let Err(e) = self.graph.rename(from, to) {
                for &(from, to) in done.iter().rev() {
                    let _ = self.graph.rename(to, from);
                }
                return Err(Error::Internal(e));
            }
            done.push((from, to));
        }
        let mut renamed = vec![u32::MAX; self.keys.len()];
        let mut pending =
            HashMap::with_capacity_and_hasher(self.pending.len(), SlotHash::default());
        for (to, &from) in live.iter().enumerate() {
            renamed[from as usize] = to as u32;
            if let Some(v) = self.pending.remove(&from) {
                pending.insert(to as u32, v);
            }
        }
        self.staged.renumber(&renamed);
        self.keys = live.iter().map(|&s| self.keys[s as usize]).collect();
        self.prints = live.iter().map(|&s| self.prints[s as usize]).collect();
        self.norms = live.iter().map(|&s| self.norms[s as usize]).collect();
        self.live = vec![true; live.len()];
        self.slot_of = self
            .keys
            .iter()
            .enumerate()
            .map(|(slot, &key)| (key, slot as u32))
            .collect();
        self.pending = pending;
        Ok(())
    }

    /// Brute force over the live vectors in scope.
    fn exact(&self, query: &Query, k: usize, scope: Scope<'_>) -> Vec<Hit> {
        let mut top = TopK::new(k);
        let mut buf = vec![0.0; self.dim];
        let live = || (0..self.keys.len()).filter(|&s| self.live[s]);
        let mut push = |slot: usize, top: &mut TopK| {
            if let Some(hit) = self.score(query, slot as u32, &mut buf) {
                top.push(hit);
            }
        };
        match scope {
            Scope::All => live().for_each(|slot| push(slot, &mut top)),
            Scope::Predicate(accept) => live()
                .filter(|&slot| accept(self.keys[slot]))
                .for_each(|slot| push(slot, &mut top)),
            Scope::Keys(keys) => {
                let mut keys = keys.to_vec();
                keys.sort_unstable();
                keys.dedup();
                for key in keys {
                    if let Some(&slot) = self.slot_of.get(&key) {
                        push(slot as usize, &mut top);
                    }
                }
            }
        }
        top.into_sorted()
    }

    /// Top k of the live vectors in scope (`All` when `accept` is `None`), by the graph or, where
    /// cheaper, by a scan. The graph is searched unfiltered with a candidate list long enough that
    /// about 2k of its members should be in scope (live and accepted), and the candidates are
    /// then filtered and scored.
    fn search_scope(
        &self,
        query: &Query,
        k: usize,
        accept: Option<&(dyn Fn(u64) -> bool + Sync)>,
    ) -> Vec<Hit> {
        let scope = accept.map_or(Scope::All, Scope::Predicate);
        let scan = || {
            if self.staged.len() <= staged::EXACT_UP_TO {
                self.exact(query, k, scope)
            } else {
                // Many staged: the scan reads the graph's points, the staged slots their
                // shortlist.
                let hits = self.exact_in_graph(query, k, accept);
                self.with_staged(query, k, accept, hits)
            }
        };
        let Some(ef) = self.graph_plan(k, accept) else {
            return scan();
        };
        let hits = match self.graph_search(query, k, ef, accept) {
            Ok(hits) => hits,
            Err(e) => {
                // Never "nothing near": the exact scan answers, and the caller hears of it.
                tracing::warn!(error = %e, "vector graph search failed; answering by an exact scan");
                GRAPH_FAILURES.fetch_add(1, AtomicOrdering::Relaxed);
                FELL_BACK.with(|f| f.set(Some(e)));
                return scan();
            }
        };
        if hits.len() >= k {
            return self.with_staged(query, k, accept, hits);
        }
        // Fewer than k in scope among the candidates: the share was overestimated, or fewer
        // than k keys are in scope at all. The scan settles it.
        scan()
    }

    /// Brute force over the live vectors in scope that are not staged.
    fn exact_in_graph(
        &self,
        query: &Query,
        k: usize,
        accept: Option<&(dyn Fn(u64) -> bool + Sync)>,
    ) -> Vec<Hit> {
        let mut top = TopK::new(k);
        if self.graph.len() == 0 {
            return Vec::new();
        }
        let mut buf = vec![0.0; self.dim];
        for slot in 0..self.keys.len() {
            if self.live[slot]
                && !self.staged.holds(slot as u32)
                && accept.is_none_or(|a| a(self.keys[slot]))
                && let Some(hit) = self.score(query, slot as u32, &mut buf)
            {
                top.push(hit);
            }
        }
        top.into_sorted()
    }

    /// The candidate list to ask of the graph for this scope, or `None` when a scan is cheaper.
    fn graph_plan(&self, k: usize, accept: Option<&(dyn Fn(u64) -> bool + Sync)>) -> Option<usize> {
        // Graph points only: staged slots are scanned anyway.
        let points = self.graph.len();
        let (share, scan_cost) = match accept {
            None => (1.0, points as f64),
            Some(accept) => {
                let share = self.sampled_share(accept);
                let calls = self.live_count() as f64 * PREDICATE_CALL_COST;
                (share, share * points as f64 + calls)
            }
        };
        // A share of 0 asks for an infinite list, which saturates: scanned.
        let ef = ef_for(k).max((2.0 * k as f64 / share).ceil() as usize);
        let scan = ef > EF_MAX.min(points) || scan_cost <= (ef * SCAN_VECTORS_PER_CANDIDATE) as f64;
        (!scan).then_some(ef)
    }

    /// The best k of the graph's `ef` candidates that are live and accepted.
    fn graph_search(
        &self,
        query: &Query,
        k: usize,
        ef: usize,
        accept: Option<&(dyn Fn(u64) -> bool + Sync)>,
    ) -> std::result::Result<Vec<Hit>, String> {
        let mut top = TopK::new(k);
        let mut buf = vec![0.0; self.dim];
        for slot in self.graph.search(&query.toward, ef)? {
            if self.is_live(slot as usize)
                && accept.is_none_or(|accept| accept(self.keys[slot as usize]))
                && let Some(hit) = self.score(query, slot, &mut buf)
            {
                top.push(hit);
            }
        }
        Ok(top.into_sorted())
    }

    /// Share of all slots (dead ones included) that are live and accepted, estimated from
    /// slots at pseudo-random positions (a fixed stride could fall in step with a pattern of the
    /// keys); the same positions every time, so a search is repeatable.
    fn sampled_share(&self, accept: &(dyn Fn(u64) -> bool + Sync)) -> f64 {
        let n = self.keys.len();
        let in_scope = |slot: usize| self.live[slot] && accept(self.keys[slot]);
        if n <= PREDICATE_SAMPLE {
            return (0..n).filter(|&s| in_scope(s)).count() as f64 / n.max(1) as f64;
        }
        let passed = (1..=PREDICATE_SAMPLE as u64)
            .filter(|&i| {
                let r = mix(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                in_scope(((u128::from(r) * n as u128) >> 64) as usize)
            })
            .count();
        let share = passed as f64 / PREDICATE_SAMPLE as f64;
        // Tombstones are not in the graph: the share of its points in scope is higher.
        share * n as f64 / self.live_count().max(1) as f64
    }
}

/// A 64-bit hash of a vector's bits: equal vectors, equal prints.
fn fingerprint(v: &[f32]) -> u64 {
    v.iter()
        .fold(v.len() as u64, |h, x| mix(h ^ u64::from(x.to_bits())))
}

/// SplitMix64's finaliser: a well-mixed 64-bit value from a counter.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn ef_for(k: usize) -> usize {
    k.saturating_mul(2).max(EF_SEARCH_MIN)
}

/// `v` as a unit vector of `dim` floats; a zero vector stays zero (it is equally far from all).
fn unit_vector(v: &[f32], dim: usize) -> std::result::Result<Vec<f32>, String> {
    if v.len() != dim {
        return Err(format!("{} dimensions, the index holds {dim}", v.len()));
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err("a non-finite value".to_owned());
    }
    let mut v = v.to_vec();
    let norm = dot(&v, &v).sqrt();
    if norm > 0.0 && (norm - 1.0).abs() > UNIT_TOLERANCE {
        for x in &mut v {
            *x /= norm;
        }
    }
    Ok(v)
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
    pub fn flat(&self, position: LogPosition) -> crate::index::flat::FlatVectors {
        let st = self.read();
        let mut flat = crate::index::flat::FlatVectors::empty(&self.model, self.dim, position);
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
            st.live[slot as usize] = true;
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
                st.live[slot as usize] = true;
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
    /// list of `max(2k, 64)`, lengthened to about 2k/share when a sample of the keys says only a
    /// share of them is in scope (liveness ANDed with the predicate), then filter it; when the
    /// keys in scope are few enough (a few thousand) that reading them all is cheaper, they are
    /// scanned instead, exactly. `Keys` always scans those keys' vectors. A query of the wrong
    /// length, non-finite or zero finds nothing.
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
        let hits = match scope {
            _ if st.live_count() == 0 => Vec::new(),
            Scope::Keys(_) => st.exact(&query, k, scope),
            Scope::All => st.search_scope(&query, k, None),
            Scope::Predicate(accept) => st.search_scope(&query, k, Some(accept)),
        };
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

#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    format: u32,
    engine: String,
    model: String,
    dim: usize,
    seq: i64,
    generation: String,
    slots: usize,
    live: usize,
    connectivity: usize,
    expansion_add: usize,
    files: Vec<FileMeta>,
    /// The change-log position of `seq` (absent in dumps of older versions).
    #[serde(default)]
    position: Option<LogPosition>,
    /// The centre the graph's directions are taken from, once fixed.
    centre: Option<Vec<f32>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileMeta {
    name: String,
    len: u64,
    sha256: String,
}

/// File names of one generation.
struct DumpNames {
    /// `vectors.<generation>.`: what every file of the generation starts with.
    prefix: String,
    slots: String,
    graph: String,
}

impl DumpNames {
    fn new(generation: &str) -> DumpNames {
        let prefix = format!("{FILE_PREFIX}{generation}.");
        DumpNames {
            slots: format!("{prefix}slots"),
            graph: format!("{prefix}usearch"),
            prefix,
        }
    }

    fn all(&self) -> [&str; 2] {
        [&self.slots, &self.graph]
    }

    /// The files a dump of `slots` slots consists of.
    fn expected(&self, slots: usize) -> Vec<&str> {
        if slots == 0 {
            vec![&self.slots]
        } else {
            self.all().to_vec()
        }
    }
}

/// A generation name no file in `dir` uses yet (time-based, in hex).
fn fresh_generation(dir: &Path) -> String {
    let mut n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    loop {
        let generation = format!("{n:016x}");
        let names = DumpNames::new(&generation);
        if names.all().iter().all(|name| !dir.join(name).exists()) {
            return generation;
        }
        n = n.wrapping_add(1);
    }
}

/// Writes and syncs this generation's files; returns their lengths and digests.
fn write_files(dir: &Path, names: &DumpNames, st: &State) -> Result<Vec<FileMeta>> {
    write_slots(&dir.join(&names.slots), st)?;
    if !st.keys.is_empty() {
        let path = dir.join(&names.graph);
        let path = path.to_str().ok_or_else(|| {
            Error::Internal(format!(
                "vector dump: the folder {} is not a UTF-8 path, which the graph library needs",
                dir.display()
            ))
        })?;
        st.graph.save(path).map_err(Error::Internal)?;
        File::open(path)?.sync_all()?;
    }
    names
        .expected(st.keys.len())
        .par_iter()
        .map(|name| {
            let path = dir.join(name);
            Ok(FileMeta {
                name: (*name).to_owned(),
                len: fs::metadata(&path)?.len(),
                sha256: file_sha256(&path)?,
            })
        })
        .collect()
}

/// Slot table: magic, slot count (u64 LE), each slot's key (u64 LE), live flag (one byte),
/// vector print (u64 LE) and distance from the centre (f32 LE).
fn write_slots(path: &Path, st: &State) -> io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    out.write_all(SLOTS_MAGIC)?;
    out.write_all(&(st.keys.len() as u64).to_le_bytes())?;
    for key in &st.keys {
        out.write_all(&key.to_le_bytes())?;
    }
    for &l in &st.live {
        out.write_all(&[u8::from(l)])?;
    }
    for print in &st.prints {
        out.write_all(&print.to_le_bytes())?;
    }
    for norm in &st.norms {
        out.write_all(&norm.to_le_bytes())?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// The keys, live flags, prints and norms of a slot table of `slots` slots.
type SlotTable = (Vec<u64>, Vec<bool>, Vec<u64>, Vec<f32>);

fn read_slots(path: &Path, slots: usize) -> std::result::Result<SlotTable, String> {
    let bytes = fs::read(path).map_err(|e| format!("slot table unreadable: {e}"))?;
    let header = SLOTS_MAGIC.len() + 8;
    if bytes.len() != header + 21 * slots || !bytes.starts_with(SLOTS_MAGIC) {
        return Err("slot table malformed".to_owned());
    }
    let count = u64::from_le_bytes(
        bytes[SLOTS_MAGIC.len()..header]
            .try_into()
            .unwrap_or([0; 8]),
    );
    if count != slots as u64 {
        return Err(format!(
            "slot table holds {count} slots, metadata says {slots}"
        ));
    }
    let words = |b: &[u8]| -> Vec<u64> {
        b.chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .collect()
    };
    let (key_bytes, rest) = bytes[header..].split_at(8 * slots);
    let (live_bytes, rest) = rest.split_at(slots);
    let (print_bytes, norm_bytes) = rest.split_at(8 * slots);
    let norms: Vec<f32> = norm_bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
        .collect();
    if norms.iter().any(|r| !r.is_finite() || *r < 0.0) {
        return Err("slot table has a bad norm".to_owned());
    }
    let live = live_bytes
        .iter()
        .map(|&b| match b {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err("slot table has a bad live flag".to_owned()),
        })
        .collect::<std::result::Result<_, _>>()?;
    Ok((words(key_bytes), live, words(print_bytes), norms))
}

fn file_sha256(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Deletes dump files of other generations and a leftover temporary metadata file.
fn remove_stale_files(dir: &Path, current: &DumpNames) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(FILE_PREFIX) && name != META_FILE && !name.starts_with(&current.prefix)
        {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The dump in `dir`: `Ok(None)` when there is none, `Err(why)` when it cannot be used.
fn read_dump(
    dir: &Path,
    model: &str,
    dim: usize,
) -> std::result::Result<Option<(State, i64, Option<LogPosition>)>, String> {
    let bytes = match fs::read(dir.join(META_FILE)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("metadata unreadable: {e}")),
    };
    let meta: Meta =
        serde_json::from_slice(&bytes).map_err(|e| format!("metadata unreadable: {e}"))?;
    if meta.format != DUMP_FORMAT || meta.engine != GRAPH_ENGINE {
        return Err(format!(
            "dump format {} of {}, expected {DUMP_FORMAT} of {GRAPH_ENGINE}",
            meta.format, meta.engine
        ));
    }
    if meta.model != model {
        return Err(format!(
            "dump is of model {:?}, the embedder is {model:?}",
            meta.model
        ));
    }
    if meta.dim != dim {
        return Err(format!(
            "dump has {} dimensions, the embedder {dim}",
            meta.dim
        ));
    }
    if meta.generation.is_empty() || !meta.generation.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err("metadata names a bad generation".to_owned());
    }
    let names = DumpNames::new(&meta.generation);
    let expected = names.expected(meta.slots);
    if meta.files.len() != expected.len()
        || expected
            .iter()
            .any(|name| !meta.files.iter().any(|f| f.name == *name))
    {
        return Err("metadata lists other files than the dump has".to_owned());
    }
    // The graph's loader trusts its file (offsets and counts in it are followed as written), so
    // it only ever sees files that are byte for byte what the dump wrote: present, regular, of
    // the recorded length and SHA-256.
    meta.files.par_iter().try_for_each(|f| check_file(dir, f))?;
    let (keys, live, prints, norms) = read_slots(&dir.join(&names.slots), meta.slots)?;
    let centre = match meta.centre {
        Some(c) if c.len() != dim || c.iter().any(|x| !x.is_finite()) => {
            return Err("metadata has a bad centre".to_owned());
        }
        Some(c) => Some(c),
        None => None,
    };
    let graph = if meta.slots == 0 {
        Graph::new(dim, INITIAL_CAPACITY)?
    } else {
        let path = dir.join(&names.graph);
        let path = path
            .to_str()
            .ok_or("the folder is not a UTF-8 path, which the graph library needs")?;
        Graph::load(path, dim)?
    };
    let mut slot_of = HashMap::with_capacity(meta.live);
    for (slot, _) in live.iter().enumerate().filter(|(_, l)| **l) {
        if slot_of.insert(keys[slot], slot as u32).is_some() {
            return Err(format!("key {} has two live slots", keys[slot]));
        }
    }
    if slot_of.len() != meta.live {
        return Err(format!(
            "{} live slots, metadata says {}",
            slot_of.len(),
            meta.live
        ));
    }
    if graph.len() != meta.live {
        return Err(format!(
            "graph holds {} points, metadata says {} live slots",
            graph.len(),
            meta.live
        ));
    }
    let state = State {
        keys,
        live,
        prints,
        norms,
        slot_of,
        centred: centre.is_some(),
        centre: centre.unwrap_or_else(|| vec![0.0; dim]),
        ..State::with_graph(graph, dim)
    };
    Ok(Some((state, meta.seq, meta.position)))
}

fn check_file(dir: &Path, f: &FileMeta) -> std::result::Result<(), String> {
    let path = dir.join(&f.name);
    let md = fs::metadata(&path).map_err(|e| format!("{} unreadable: {e}", f.name))?;
    if !md.is_file() {
        return Err(format!("{} is not a regular file", f.name));
    }
    if md.len() != f.len {
        return Err(format!(
            "{} is {} bytes, the dump wrote {}",
            f.name,
            md.len(),
            f.len
        ));
    }
    let digest = file_sha256(&path).map_err(|e| format!("{} unreadable: {e}", f.name))?;
    if digest != f.sha256 {
        return Err(format!("{} does not match its checksum", f.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    const MODEL: &str = "test-model";

    /// SplitMix64, for seeded data.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn unit(&mut self) -> f64 {
            (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
        }

        /// Standard normal (Box–Muller).
        fn gauss(&mut self) -> f32 {
            let u = self.unit().max(1e-12);
            let v = self.unit();
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        }

        fn below(&mut self, n: usize) -> usize {
            ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
        }
    }

    fn normalized(mut v: Vec<f32>) -> Vec<f32> {
        let norm = dot(&v, &v).sqrt();
        for x in &mut v {
            *x /= norm;
        }
        v
    }

    #[test]
    fn dot_products_match_a_plain_sum_and_do_not_depend_on_the_cpu() {
        let mut rng = Rng(5);
        for len in [0, 1, 7, 8, 31, 32, 33, 64, 255, 256, 384, 1000] {
            let a: Vec<f32> = (0..len).map(|_| rng.gauss()).collect();
            let b: Vec<f32> = (0..len).map(|_| rng.gauss()).collect();
            let plain: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let got = dot(&a, &b);
            assert!(
                (f64::from(got) - plain).abs() <= 1e-4 * (1.0 + plain.abs()),
                "length {len}: {got} against {plain}"
            );
            assert_eq!(got.to_bits(), dot_lanes(&a, &b).to_bits(), "length {len}");
        }
    }

    fn random_unit(rng: &mut Rng, dim: usize) -> Vec<f32> {
        normalized((0..dim).map(|_| rng.gauss()).collect())
    }

    /// Unit vectors around `clusters` random centres: cosine to the centre about 0.75, to
    /// points of another cluster about 0 — the hard case of near ties inside each cluster.
    struct Clusters {
        centres: Vec<Vec<f32>>,
        dim: usize,
    }

    impl Clusters {
        fn new(seed: u64, clusters: usize, dim: usize) -> Clusters {
            let mut rng = Rng(seed);
            Clusters {
                centres: (0..clusters).map(|_| random_unit(&mut rng, dim)).collect(),
                dim,
            }
        }

        fn points(&self, seed: u64, n: usize) -> Vec<Vec<f32>> {
            let mut rng = Rng(seed);
            let sigma = 0.9 / (self.dim as f32).sqrt();
            (0..n)
                .map(|_| {
                    let c = &self.centres[rng.below(self.centres.len())];
                    normalized(c.iter().map(|x| x + sigma * rng.gauss()).collect())
                })
                .collect()
        }
    }

    /// Keys are not slots: key of point i.
    fn key(i: usize) -> u64 {
        (i as u64) * 7 + 1_000
    }

    fn build(points: &[Vec<f32>], dim: usize) -> VectorIndex {
        let index = VectorIndex::new(MODEL, dim).unwrap();
        let items: Vec<(u64, Vec<f32>)> = points
            .iter()
            .enumerate()
            .map(|(i, v)| (key(i), v.clone()))
            .collect();
        for batch in items.chunks(5_000) {
            index.upsert(batch).unwrap();
        }
        index
    }

    fn keys_of(hits: &[(u64, f32)]) -> Vec<u64> {
        hits.iter().map(|h| h.0).collect()
    }

    fn recall(index: &VectorIndex, queries: &[Vec<f32>], k: usize, scope: Scope<'_>) -> f64 {
        let mut found = 0usize;
        let mut total = 0usize;
        for q in queries {
            let truth: HashSet<u64> = keys_of(&index.exact(q, k, scope)).into_iter().collect();
            let got = index.search(q, k, scope);
            assert!(got.windows(2).all(|w| rank(
                &Hit {
                    score: w[0].1,
                    key: w[0].0
                },
                &Hit {
                    score: w[1].1,
                    key: w[1].0
                }
            ) == Ordering::Less));
            found += got.iter().filter(|h| truth.contains(&h.0)).count();
            total += truth.len();
        }
        found as f64 / total.max(1) as f64
    }

    fn report(msg: std::fmt::Arguments<'_>) {
        let _ = writeln!(io::stderr().lock(), "{msg}");
    }

    #[test]
    fn index_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<VectorIndex>();
    }

    #[test]
    fn recall_at_10_of_graph_search_is_at_least_095() {
        let dim = 128;
        let clusters = Clusters::new(1, 100, dim);
        let points = clusters.points(2, 20_000);
        let queries = clusters.points(3, 200);
        let started = std::time::Instant::now();
        let index = build(&points, dim);
        let built = started.elapsed();
        assert_eq!(index.len(), 20_000);
        let r = recall(&index, &queries, 10, Scope::All);
        report(format_args!(
            "recall@10 over 20,000 clustered vectors (dim {dim}): {r:.4}; built in {built:.1?}"
        ));
        assert!(r >= 0.95, "recall@10 = {r:.4}");
        // A query that is a stored vector finds its key first, with similarity ~1 (the graph
        // keeps vectors in half precision).
        let hits = index.search(&points[123], 10, Scope::All);
        assert_eq!(hits[0].0, key(123));
        assert!((hits[0].1 - 1.0).abs() < 1e-3, "{}", hits[0].1);
    }

    /// Unit vectors in a narrow cone: ranked by `(q − 0.6·c)·t`, the directions from the centre
    /// put the exact top 10 by `q·x` near the top, closer than the query's own direction from
    /// the centre does.
    #[test]
    fn the_graph_is_searched_toward_a_direction_that_ranks_like_the_scores() {
        let dim = 64;
        let mut rng = Rng(91);
        let common = random_unit(&mut rng, dim);
        let cone = |rng: &mut Rng| -> Vec<f32> {
            let noise = random_unit(rng, dim);
            let spread = 0.5 + rng.unit() as f32;
            normalized(
                common
                    .iter()
                    .zip(&noise)
                    .map(|(c, n)| 2.0 * c + spread * n)
                    .collect(),
            )
        };
        let points: Vec<Vec<f32>> = (0..4_000).map(|_| cone(&mut rng)).collect();
        let index = build(&points, dim);
        let st = index.read();
        assert!(st.centred);
        // Among how many directions, ranked by `toward`, the exact top 10 lie.
        let depth = |q: &Query, toward: &[f32]| -> usize {
            let mut exact: Vec<(f32, usize)> = points
                .iter()
                .enumerate()
                .map(|(i, x)| (dot(&q.v, x), i))
                .collect();
            exact.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut proxy: Vec<(f32, usize)> = points
                .iter()
                .enumerate()
                .map(|(i, x)| (dot(toward, &st.direction(x).0), i))
                .collect();
            proxy.sort_by(|a, b| b.0.total_cmp(&a.0));
            exact[..10]
                .iter()
                .map(|(_, i)| proxy.iter().position(|(_, j)| j == i).unwrap_or(usize::MAX))
                .max()
                .unwrap_or(0)
                + 1
        };
        let (mut toward, mut own) = (0, 0);
        for _ in 0..50 {
            let q = st.query(cone(&mut rng));
            let expected: Vec<f32> = {
                let t: Vec<f32> =
                    q.v.iter()
                        .zip(&st.centre)
                        .map(|(v, c)| v - QUERY_CENTRE_SHARE * c)
                        .collect();
                normalized(t)
            };
            assert!(dot(&expected, &q.toward) > 0.9999);
            toward += depth(&q, &q.toward);
            own += depth(&q, &q.direction);
        }
        report(format_args!(
            "exact top 10 within the first {toward} (toward) against {own} (own direction) over 50 queries"
        ));
        assert!(toward < own, "{toward} against {own}");
    }

    /// Vectors sharing one dominant direction, as a static model's are: the index centres them
    /// once it holds enough, and scores stay the dot products of the vectors themselves,
    /// whether they came by upsert (some already in the graph) or by staging.
    #[test]
    fn vectors_in_a_narrow_cone_are_centred_and_scored_as_given() {
        let dim = 64;
        let mut rng = Rng(77);
        let common = random_unit(&mut rng, dim);
        let cone = |rng: &mut Rng| -> Vec<f32> {
            let noise = random_unit(rng, dim);
            normalized(
                common
                    .iter()
                    .zip(&noise)
                    .map(|(c, n)| 2.0 * c + n)
                    .collect(),
            )
        };
        let points: Vec<Vec<f32>> = (0..3_000).map(|_| cone(&mut rng)).collect();
        let queries: Vec<Vec<f32>> = (0..50).map(|_| cone(&mut rng)).collect();
        let by_upsert = VectorIndex::new(MODEL, dim).unwrap();
        for (b, chunk) in points.chunks(500).enumerate() {
            let items: Vec<(u64, Vec<f32>)> = chunk
                .iter()
                .enumerate()
                .map(|(i, v)| (key(b * 500 + i), v.clone()))
                .collect();
            by_upsert.upsert(&items).unwrap();
        }
        let by_stage = VectorIndex::new(MODEL, dim).unwrap();
        let items: Vec<(u64, Vec<f32>)> = points
            .iter()
            .enumerate()
            .map(|(i, v)| (key(i), v.clone()))
            .collect();
        by_stage.stage(&items[..800]).unwrap();
        by_stage.index_staged(usize::MAX).unwrap();
        by_stage.stage(&items[800..]).unwrap();
        while by_stage.index_staged(1_000).unwrap() > 0 {}
        for index in [&by_upsert, &by_stage] {
            let st = index.read();
            assert!(st.centred);
            assert!(
                dot(&st.centre, &st.centre).sqrt() > 0.8,
                "the common direction"
            );
            drop(st);
            assert!(recall(index, &queries, 10, Scope::All) >= 0.95);
            for q in &queries[..10] {
                for (k, score) in index.search(q, 10, Scope::All) {
                    let i = points
                        .iter()
                        .enumerate()
                        .find(|(i, _)| key(*i) == k)
                        .unwrap()
                        .0;
                    assert!((score - dot(q, &points[i])).abs() < 2e-3, "{score}");
                }
            }
        }
    }

    #[test]
    fn replaced_and_removed_keys_are_respected() {
        let dim = 64;
        let clusters = Clusters::new(10, 50, dim);
        let points = clusters.points(11, 12_000);
        let index = build(&points, dim);
        // Remove 500 keys; replace 500 others, half by new vectors like the rest (inliers), half
        // by random directions far from every cluster (outliers).
        let removed: Vec<u64> = (0..500).map(key).collect();
        index.remove(&removed);
        let mut rng = Rng(12);
        let inliers = clusters.points(14, 250);
        let replaced: Vec<(u64, Vec<f32>)> = (500..1_000)
            .map(|i| match i {
                ..750 => (key(i), inliers[i - 500].clone()),
                _ => (key(i), random_unit(&mut rng, dim)),
            })
            .collect();
        index.upsert(&replaced).unwrap();
        assert_eq!(index.len(), 11_500);
        assert!(!index.contains(key(0)));
        assert!(index.contains(key(600)));
        for (i, point) in points.iter().enumerate().take(1_000) {
            let hits = index.search(point, 10, Scope::All);
            assert_eq!(hits.len(), 10);
            let ks = keys_of(&hits);
            assert!(
                !ks.contains(&key(i)),
                "key {} found by its old vector",
                key(i)
            );
            assert!(ks.iter().all(|k| !removed.contains(k)));
            assert!(
                keys_of(&index.exact(point, 10, Scope::All))
                    .iter()
                    .all(|k| *k != key(i))
            );
        }
        let mut outliers_missed = 0;
        for (j, (k, v)) in replaced.iter().enumerate() {
            let hits = index.search(v, 10, Scope::All);
            if j < 250 {
                assert_eq!(hits[0].0, *k, "replaced key not found by its new vector");
            } else if hits[0].0 != *k {
                outliers_missed += 1;
            }
        }
        // Approximate search on outliers: none missed in practice, a few would be tolerable.
        report(format_args!(
            "outliers not found first by their own vector: {outliers_missed} of 250"
        ));
        assert!(outliers_missed <= 2, "{outliers_missed} outliers missed");
        // Re-upserting identical vectors adds no slot.
        let slots = index.read().keys.len();
        index.upsert(&replaced[..10]).unwrap();
        assert_eq!(index.read().keys.len(), slots);
        // Within one batch the last vector of a key wins.
        let twice = vec![(1, points[1].clone()), (1, points[2].clone())];
        index.upsert(&twice).unwrap();
        assert_eq!(index.search(&points[2], 1, Scope::All)[0].0, 1);

        // 1,000 dead of 12,501 slots: not yet; 3,500 more removals pass a quarter.
        assert!(!index.needs_compaction());
        index.remove(&(1_000..4_500).map(key).collect::<Vec<_>>());
        assert!(index.needs_compaction());
        let queries = clusters.points(13, 50);
        let before: Vec<_> = queries
            .iter()
            .map(|q| index.exact(q, 10, Scope::All))
            .collect();
        index.compact().unwrap();
        assert!(!index.needs_compaction());
        assert_eq!(index.read().keys.len(), 8_001);
        assert_eq!(index.len(), 8_001);
        let after: Vec<_> = queries
            .iter()
            .map(|q| index.exact(q, 10, Scope::All))
            .collect();
        assert_eq!(before, after);
        assert!(recall(&index, &queries, 10, Scope::All) >= 0.95);
        for (i, point) in points.iter().enumerate().take(4_500) {
            let ks = keys_of(&index.search(point, 10, Scope::All));
            assert!(!ks.contains(&key(i)) || (500..1_000).contains(&i));
        }
    }

    #[test]
    fn scopes_only_return_keys_in_scope() {
        let dim = 64;
        let clusters = Clusters::new(20, 50, dim);
        let points = clusters.points(21, 20_000);
        let index = build(&points, dim);
        index.remove(&(0..300).map(|i| key(i * 3)).collect::<Vec<_>>());
        let queries = clusters.points(22, 100);

        // Keys: duplicates, unknown and removed keys welcome; exact.
        let mut rng = Rng(23);
        let mut subset: Vec<u64> = (0..60).map(|_| key(rng.below(6_000))).collect();
        subset.extend([key(0), key(3), 1, 2, subset[0]]);
        let allowed: HashSet<u64> = subset
            .iter()
            .copied()
            .filter(|k| index.contains(*k))
            .collect();
        for q in &queries {
            let hits = index.search(q, 10, Scope::Keys(&subset));
            assert_eq!(hits.len(), 10);
            assert!(hits.iter().all(|h| allowed.contains(&h.0)));
            assert_eq!(hits, index.exact(q, 10, Scope::Keys(&subset)));
        }
        assert_eq!(
            index.search(&queries[0], 100, Scope::Keys(&subset)).len(),
            allowed.len()
        );

        // Predicate through the graph: a third of the keys.
        let third = |k: u64| k.is_multiple_of(3);
        assert!(index.read().graph_plan(10, Some(&third)).is_some());
        assert_eq!(index.read().graph_plan(10, None), Some(EF_SEARCH_MIN));
        for q in &queries {
            let hits = index.search(q, 10, Scope::Predicate(&third));
            assert_eq!(hits.len(), 10);
            assert!(hits.iter().all(|h| third(h.0) && index.contains(h.0)));
        }
        let r = recall(&index, &queries, 10, Scope::Predicate(&third));
        report(format_args!("recall@10 with a 1/3 predicate: {r:.4}"));
        assert!(r >= 0.95, "predicate recall@10 = {r:.4}");

        // A selective predicate (1%) is scanned: exact.
        let rare = |k: u64| k.is_multiple_of(100);
        assert_eq!(index.read().graph_plan(10, Some(&rare)), None);
        for q in &queries {
            let hits = index.search(q, 10, Scope::Predicate(&rare));
            assert!(hits.iter().all(|h| rare(h.0)));
            assert_eq!(hits, index.exact(q, 10, Scope::Predicate(&rare)));
        }
        // A predicate nothing passes.
        let none = |_: u64| false;
        assert!(
            index
                .search(&queries[0], 10, Scope::Predicate(&none))
                .is_empty()
        );
    }

    #[test]
    fn staged_vectors_are_found_at_once_and_after_the_graph_takes_them() {
        let dim = 64;
        let clusters = Clusters::new(40, 50, dim);
        let points = clusters.points(41, 12_000);
        let queries = clusters.points(42, 100);
        // 8,000 in the graph, 4,000 staged: searches must see all 12,000.
        let index = build(&points[..8_000], dim);
        let staged: Vec<(u64, Vec<f32>)> = (8_000..12_000)
            .map(|i| (key(i), points[i].clone()))
            .collect();
        index.stage(&staged).unwrap();
        assert_eq!((index.len(), index.staged()), (12_000, 4_000));
        let r = recall(&index, &queries, 10, Scope::All);
        assert!(r >= 0.95, "recall@10 with 4,000 staged: {r}");
        // A staged vector is its own nearest neighbour right away, also in a predicate scope.
        let even = |k: u64| k.is_multiple_of(2);
        for i in [8_000usize, 9_999, 11_999] {
            let hit = index.search(&points[i], 1, Scope::All);
            assert_eq!(hit[0].0, key(i));
            if even(key(i)) {
                assert_eq!(
                    index.search(&points[i], 1, Scope::Predicate(&even))[0].0,
                    key(i)
                );
            }
        }
        // Nothing is dumped while staged.
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(index.dump(dir.path()).unwrap(), None);
        // Removing or replacing a staged key is respected.
        index.remove(&[key(8_000)]);
        index.upsert(&[(key(8_001), points[0].clone())]).unwrap();
        assert!(!keys_of(&index.search(&points[8_000], 10, Scope::All)).contains(&key(8_000)));
        assert_eq!(
            index.search(&points[0], 2, Scope::Keys(&[key(8_001)]))[0].0,
            key(8_001)
        );
        // Into the graph in chunks; every search in between still sees everything.
        while index.index_staged(1_000).unwrap() > 0 {
            assert_eq!(
                index.search(&points[11_999], 1, Scope::All)[0].0,
                key(11_999)
            );
        }
        assert_eq!(index.staged(), 0);
        let r = recall(&index, &queries, 10, Scope::All);
        assert!(r >= 0.95, "recall@10 after indexing: {r}");
        index.set_seq(7);
        assert_eq!(index.dump(dir.path()).unwrap(), Some(7));
    }

    #[test]
    fn many_staged_vectors_are_searched_by_sketch() {
        let dim = 64;
        let clusters = Clusters::new(60, 80, dim);
        let n = 2_000 + 3 * staged::EXACT_UP_TO;
        let points = clusters.points(51, n);
        let queries = clusters.points(52, 100);
        // 2,000 in the graph, the rest staged (past the exact scan's limit).
        let index = build(&points[..2_000], dim);
        let staged: Vec<(u64, Vec<f32>)> =
            (2_000..n).map(|i| (key(i), points[i].clone())).collect();
        index.stage(&staged).unwrap();
        assert_eq!(index.staged(), n - 2_000);
        let r = recall(&index, &queries, 10, Scope::All);
        report(format_args!(
            "recall@10 with {} staged, by sketch: {r:.3}",
            n - 2_000
        ));
        assert!(r >= 0.9, "recall@10 by sketch: {r}");
        let even = |k: u64| k.is_multiple_of(2);
        let r = recall(&index, &queries, 10, Scope::Predicate(&even));
        assert!(r >= 0.9, "recall@10 by sketch in a predicate scope: {r}");
        // A staged vector (its own sketch) and a graph point are their own nearest neighbours.
        for i in [0, 1_999, 2_000, n / 2, n - 1] {
            assert_eq!(index.search(&points[i], 1, Scope::All)[0].0, key(i));
        }
        // Removed and replaced staged keys are respected; compaction keeps the sketches in step.
        index.remove(&[key(n - 1)]);
        index.upsert(&[(key(n - 2), points[0].clone())]).unwrap();
        assert!(!keys_of(&index.search(&points[n - 1], 10, Scope::All)).contains(&key(n - 1)));
        assert_eq!(index.search(&points[0], 1, Scope::All).len(), 1);
        let gone: Vec<u64> = (2_000..2_000 + staged::EXACT_UP_TO).map(key).collect();
        index.remove(&gone);
        assert!(index.needs_compaction());
        index.compact().unwrap();
        let i = n / 2;
        assert_eq!(index.search(&points[i], 1, Scope::All)[0].0, key(i));
        let r = recall(&index, &queries, 10, Scope::All);
        assert!(r >= 0.9, "recall@10 after compaction: {r}");
        while index.index_staged(4_096).unwrap() > 0 {}
        let r = recall(&index, &queries, 10, Scope::All);
        assert!(r >= 0.95, "recall@10 once in the graph: {r}");
    }

    /// A loaded index served as many concurrent searches as its graph admits: usearch had
    /// contexts for the core count only, the searches beyond failed, and each failure was
    /// answered by scanning every vector.
    #[test]
    fn a_loaded_index_serves_more_concurrent_searches_than_cores_from_its_graph() {
        let dim = 48;
        let clusters = Clusters::new(70, 40, dim);
        let points = clusters.points(71, 4_000);
        let dir = tempfile::tempdir().unwrap();
        build(&points, dim).dump(dir.path()).unwrap();
        let (loaded, state) = VectorIndex::load(dir.path(), MODEL, dim).unwrap();
        assert_eq!(state, LoadState::Loaded);
        let loaded = Arc::new(loaded);
        let queries = Arc::new(clusters.points(72, 64));
        let threads = 64;
        let start = Arc::new(std::sync::Barrier::new(threads));
        let searchers: Vec<_> = (0..threads)
            .map(|t| {
                let (index, queries, start) = (loaded.clone(), queries.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let mut fell_back = Vec::new();
                    for n in 0..40 {
                        let (hits, why) =
                            index.search_noting(&queries[(t + n) % queries.len()], 10, Scope::All);
                        assert_eq!(hits.len(), 10);
                        fell_back.extend(why);
                    }
                    fell_back
                })
            })
            .collect();
        let fell_back: Vec<String> = searchers
            .into_iter()
            .flat_map(|s| s.join().unwrap())
            .collect();
        assert!(
            fell_back.is_empty(),
            "{} of {} searches fell back to a scan: {:?}",
            fell_back.len(),
            threads * 40,
            fell_back.first()
        );
        assert!(recall(&loaded, &queries, 10, Scope::All) >= 0.95);
    }

    #[test]
    fn dump_then_load_gives_the_same_index() {
        let dim = 48;
        let clusters = Clusters::new(30, 40, dim);
        let points = clusters.points(31, 4_000);
        let index = build(&points, dim);
        index.remove(&[key(1), key(2), key(3)]);
        index.upsert(&[(key(4), points[5].clone())]).unwrap();
        index.set_seq(42);
        let dir = tempfile::tempdir().unwrap();
        index.dump(dir.path()).unwrap();

        let (loaded, state) = VectorIndex::load(dir.path(), MODEL, dim).unwrap();
        assert_eq!(state, LoadState::Loaded);
        assert_eq!(loaded.seq(), 42);
        assert_eq!(loaded.len(), index.len());
        assert_eq!(loaded.model(), MODEL);
        assert_eq!(loaded.dim(), dim);
        assert!(!loaded.contains(key(1)));
        let queries = clusters.points(32, 100);
        let third = |k: u64| k.is_multiple_of(3);
        for q in &queries {
            assert_eq!(
                index.search(q, 10, Scope::All),
                loaded.search(q, 10, Scope::All)
            );
            assert_eq!(
                index.exact(q, 10, Scope::All),
                loaded.exact(q, 10, Scope::All)
            );
            assert_eq!(
                index.search(q, 10, Scope::Predicate(&third)),
                loaded.search(q, 10, Scope::Predicate(&third))
            );
        }

        // The loaded index keeps working, and a second dump replaces the first one's files.
        loaded.upsert(&[(key(9_999), points[7].clone())]).unwrap();
        loaded.set_seq(43);
        loaded.dump(dir.path()).unwrap();
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        let (again, state) = VectorIndex::load(dir.path(), MODEL, dim).unwrap();
        assert_eq!(state, LoadState::Loaded);
        assert_eq!(again.seq(), 43);
        assert!(again.contains(key(9_999)));
        assert_eq!(
            again.search(&points[7], 2, Scope::All),
            loaded.search(&points[7], 2, Scope::All)
        );
    }

    #[test]
    fn empty_and_small_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let (index, state) = VectorIndex::load(dir.path(), MODEL, 8).unwrap();
        assert_eq!(state, LoadState::Missing);
        assert!(index.is_empty());
        let q = vec![0.5f32; 8];
        assert!(index.search(&q, 10, Scope::All).is_empty());
        index.dump(dir.path()).unwrap();
        let (index, state) = VectorIndex::load(dir.path(), MODEL, 8).unwrap();
        assert_eq!(state, LoadState::Loaded);
        assert!(index.is_empty());

        // A few hundred vectors are scanned, so exact; vectors are normalised on the way in.
        let mut rng = Rng(40);
        let items: Vec<(u64, Vec<f32>)> = (0..300)
            .map(|i| (i, (0..8).map(|_| rng.gauss() * 3.0).collect()))
            .collect();
        index.upsert(&items).unwrap();
        let hits = index.search(&items[17].1, 5, Scope::All);
        assert_eq!(hits[0].0, 17);
        assert!((hits[0].1 - 1.0).abs() < 1e-5);
        assert_eq!(hits, index.exact(&items[17].1, 5, Scope::All));
        // Everything removed: empty results, then a dump of only tombstones round-trips.
        index.remove(&(0..300).collect::<Vec<_>>());
        assert!(index.search(&q, 10, Scope::All).is_empty());
        index.dump(dir.path()).unwrap();
        let (index, state) = VectorIndex::load(dir.path(), MODEL, 8).unwrap();
        assert_eq!(state, LoadState::Loaded);
        assert!(index.is_empty());
        assert!(index.needs_compaction());
        index.compact().unwrap();
        assert!(!index.needs_compaction());
    }

    #[test]
    fn bad_vectors_and_queries() {
        let index = VectorIndex::new(MODEL, 4).unwrap();
        let good = (1u64, vec![1.0, 0.0, 0.0, 0.0]);
        assert!(index.upsert(&[good.clone(), (2, vec![1.0; 3])]).is_err());
        assert!(
            index
                .upsert(&[good.clone(), (2, vec![f32::NAN, 0.0, 0.0, 0.0])])
                .is_err()
        );
        assert!(index.is_empty(), "a failed batch changes nothing");
        index.upsert(&[good, (2, vec![0.0; 4])]).unwrap();
        assert_eq!(index.len(), 2);
        assert!(index.search(&[1.0, 0.0, 0.0], 5, Scope::All).is_empty());
        assert!(index.search(&[0.0; 4], 5, Scope::All).is_empty());
        assert!(
            index
                .search(&[f32::INFINITY, 0.0, 0.0, 0.0], 5, Scope::All)
                .is_empty()
        );
        assert!(
            index
                .search(&[1.0, 0.0, 0.0, 0.0], 0, Scope::All)
                .is_empty()
        );
        let hits = index.search(&[2.0, 0.0, 0.0, 0.0], 5, Scope::All);
        assert_eq!(hits, vec![(1, 1.0), (2, 0.0)]);
    }

    /// Dumps 3,000 vectors of dim 16 into a fresh directory; returns it and the file names.
    fn dumped() -> (tempfile::TempDir, DumpNames) {
        let dim = 16;
        let points = Clusters::new(50, 10, dim).points(51, 3_000);
        let index = build(&points, dim);
        let dir = tempfile::tempdir().unwrap();
        index.dump(dir.path()).unwrap();
        let meta: Meta =
            serde_json::from_slice(&fs::read(dir.path().join(META_FILE)).unwrap()).unwrap();
        (dir, DumpNames::new(&meta.generation))
    }

    fn assert_rebuilt(dir: &Path, model: &str, dim: usize, why: &str) {
        let (index, state) = VectorIndex::load(dir, model, dim).unwrap();
        match state {
            LoadState::Rebuilt(reason) => assert!(reason.contains(why), "{reason:?} lacks {why:?}"),
            other => panic!("expected Rebuilt({why}), got {other:?}"),
        }
        assert!(index.is_empty());
        assert_eq!(index.model(), model);
        assert_eq!(index.dim(), dim);
        assert_eq!(index.seq(), 0);
    }

    // None of these cases may reach the graph's loader with a bad file (it trusts the offsets
    // in it): every damage below is caught by the length and checksum checks before it runs.
    #[test]
    fn damaged_or_foreign_dumps_load_empty() {
        let (dir, names) = dumped();
        let (_, state) = VectorIndex::load(dir.path(), MODEL, 16).unwrap();
        assert_eq!(state, LoadState::Loaded);
        assert_rebuilt(dir.path(), "other-model", 16, "model");
        assert_rebuilt(dir.path(), MODEL, 32, "dimensions");

        // Truncated graph file.
        let (dir, names2) = dumped();
        let data = dir.path().join(&names2.graph);
        let len = fs::metadata(&data).unwrap().len();
        File::options()
            .write(true)
            .open(&data)
            .unwrap()
            .set_len(len - 100)
            .unwrap();
        assert_rebuilt(dir.path(), MODEL, 16, "bytes");

        // Garbled graph file, same length.
        let (dir, names3) = dumped();
        let graph = dir.path().join(&names3.graph);
        let mut bytes = fs::read(&graph).unwrap();
        let mid = bytes.len() / 2;
        for b in &mut bytes[mid..mid + 64] {
            *b ^= 0x5a;
        }
        fs::write(&graph, bytes).unwrap();
        assert_rebuilt(dir.path(), MODEL, 16, "checksum");

        // Missing file; a directory in a file's place.
        let (dir, names4) = dumped();
        fs::remove_file(dir.path().join(&names4.slots)).unwrap();
        assert_rebuilt(dir.path(), MODEL, 16, "unreadable");
        fs::create_dir(dir.path().join(&names4.slots)).unwrap();
        assert_rebuilt(dir.path(), MODEL, 16, "not a regular file");

        // Garbled metadata; metadata of another format.
        let meta = dir.path().join(META_FILE);
        fs::write(&meta, b"{\"format\": 1, \"engi").unwrap();
        assert_rebuilt(dir.path(), MODEL, 16, "metadata");
        let (dir5, _) = dumped();
        let text = fs::read_to_string(dir5.path().join(META_FILE)).unwrap();
        fs::write(
            dir5.path().join(META_FILE),
            text.replace("\"format\": 3", "\"format\": 99"),
        )
        .unwrap();
        assert_rebuilt(dir5.path(), MODEL, 16, "format");

        // No metadata at all: missing, whatever else lies there.
        fs::remove_file(dir5.path().join(META_FILE)).unwrap();
        let (index, state) = VectorIndex::load(dir5.path(), MODEL, 16).unwrap();
        assert_eq!(state, LoadState::Missing);
        assert!(index.is_empty());

        // A dump over a damaged one works and cleans up the other generation's files.
        let fresh = VectorIndex::new(MODEL, 16).unwrap();
        fresh.upsert(&[(5, vec![1.0; 16])]).unwrap();
        fresh.dump(dir.path()).unwrap();
        let (index, state) = VectorIndex::load(dir.path(), MODEL, 16).unwrap();
        assert_eq!(state, LoadState::Loaded);
        assert_eq!(index.len(), 1);
        assert!(!dir.path().join(&names4.graph).exists());
        drop(names);
    }

    #[test]
    fn concurrent_searches_while_upserting() {
        let dim = 32;
        let clusters = Clusters::new(60, 20, dim);
        let points = clusters.points(61, 8_000);
        let index = Arc::new(build(&points[..3_000], dim));
        let queries = Arc::new(clusters.points(62, 64));
        let done = Arc::new(AtomicBool::new(false));
        let searchers: Vec<_> = (0..4)
            .map(|t| {
                let (index, queries, done) = (index.clone(), queries.clone(), done.clone());
                std::thread::spawn(move || {
                    let odd = |k: u64| k % 2 == 1;
                    let mut n = 0usize;
                    while !done.load(AtomicOrdering::Relaxed) || n < 20 {
                        let q = &queries[(n + t) % queries.len()];
                        let scope = match n % 3 {
                            0 => Scope::All,
                            1 => Scope::Predicate(&odd),
                            _ => Scope::Keys(&[1_000, 1_007, 1_014]),
                        };
                        let hits = index.search(q, 10, scope);
                        assert!(hits.len() <= 10);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        for (b, chunk) in points[3_000..].chunks(250).enumerate() {
            let items: Vec<(u64, Vec<f32>)> = chunk
                .iter()
                .enumerate()
                .map(|(i, v)| (key(3_000 + b * 250 + i), v.clone()))
                .collect();
            index.upsert(&items).unwrap();
            index.upsert(&items[..3]).unwrap();
            index
                .upsert(&[(key(b), points[7_999 - b].clone())])
                .unwrap();
            index.remove(&[key(100 + b)]);
            if b == 10 {
                index.compact().unwrap();
            }
        }
        done.store(true, AtomicOrdering::Relaxed);
        for s in searchers {
            assert!(s.join().unwrap() >= 20);
        }
        assert_eq!(index.len(), 8_000 - 20);
        let queries = clusters.points(63, 50);
        assert!(recall(&index, &queries, 10, Scope::All) >= 0.95);
    }
}
