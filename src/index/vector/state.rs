//! The slot table behind the index's lock and its search plan: every vector's slot, liveness,
//! fingerprint and distance from the centre; vectors staged beside the graph; and for each
//! search, whether the graph (with how long a candidate list) or an exact scan answers it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use rayon::prelude::*;

use super::distance::*;
use super::graph::Graph;
use super::staged::{self, Staged};
use super::topk::*;
use crate::error::{Error, Result};

/// Shortest candidate list of a graph search (see [`LIST_PER_ROOT`]).
pub(super) const LIST_MIN: usize = 128;
/// Longest candidate list a search for up to 192 hits gets by the graph's size alone.
pub(super) const LIST_MAX_BY_SIZE: usize = 384;
/// A graph search's candidate list grows with the square root of the graph's points. The
/// list that found the exact top 10 at recall 0.95 on the built-in model's vectors of real
/// conversation turns asked their questions (centred, searched toward `q − 0.6·c`, see
/// [`State::centre`]) was 64 for the 18,489 turns (0.952; 0.997 at 384), 128 for the turns
/// grown to 100,000 (0.958; 0.991 at 384) and 384 grown to a million (0.956): about 0.4 √n.
/// Memories grown from this project's documentation, asked sentences none of them holds, are
/// harder: 160 at 100,000 (0.955). So 0.5 √n, between [`LIST_MIN`] (small graphs, whose
/// searches cost little, and vectors less structured than real text's: 0.99 on 3,000 random
/// points in a cone) and [`LIST_MAX_BY_SIZE`] (from about 600,000 points; a million real turns
/// then reach 0.956 at the latency they had), and at least 1.5k: the points the walk meets
/// beyond the k-th, and room for slots no longer live. A recall's vector half asks for 100, so
/// at 100,000 its list is 158 (recall@10 of its first ten 0.973, of all 100 0.929; 2k, a list
/// of 200, found 0.977 and 0.951 for a quarter more time). `examples/vector_scale.rs --lists`
/// measures recall and time by list. Before, every search had a list of 384 whatever the size.
pub(super) const LIST_PER_ROOT: f64 = 0.5;

/// Graph searches of this process that failed and were answered by an exact scan instead.
pub(super) static GRAPH_FAILURES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Why the search running on this thread fell back to an exact scan, if it did.
    pub(super) static FELL_BACK: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// Graph searches of this process that failed and were answered by an exact scan (for metrics:
/// each one is a search that cost a scan of every vector in scope).
pub fn graph_failures() -> u64 {
    GRAPH_FAILURES.load(AtomicOrdering::Relaxed)
}
/// Vectors an index holds before it fixes its centre (see [`State::centre`]).
pub(super) const CENTRE_AFTER: usize = 1_024;
/// The graph is searched toward `q − α·c` for this α (see [`State::centre`]). A stored vector
/// is `x = c + r·t` with `|x| = 1`, which ties its distance from the centre to its direction
/// (`2r·(c·t) = 1 − |c|² − r²`): the farther from the centre, the lower `c·t`. Near the top of a
/// ranking by `q·x = q·c + r·(q·t)`, then, `(q − α·c)·t = q·t − α·(c·t)` with α about 0.6
/// follows the same order, where the query's own direction from the centre (α = 1) overrates
/// vectors near the centre and `q` alone (α = 0) those far from it. Over the real turns grown
/// to a million, the exact top 10 of 200 questions were all among the first 128 directions by
/// `(q − 0.6·c)·t` (α 0.5–0.7 alike), against 90 % with α = 1 and 71 % with α = 0.
pub(super) const QUERY_CENTRE_SHARE: f32 = 0.6;
/// Graph capacity reserved by an empty index (the graph grows past it).
pub(super) const INITIAL_CAPACITY: usize = 1_024;
/// What one member of a search's candidate list costs, in vectors a scan reads meanwhile (a scan
/// reads each vector out of the graph, widening it from bfloat16). A scope cheaper to
/// scan than `candidates × SCAN_VECTORS_PER_CANDIDATE` vectors is scanned.
pub(super) const SCAN_VECTORS_PER_CANDIDATE: usize = 4;
/// A scan calls the predicate on every live key: one call counted as this share of a vector.
pub(super) const PREDICATE_CALL_COST: f64 = 1.0 / 16.0;
/// Longest candidate list asked of the graph; a scope that would need more is scanned.
pub(super) const EF_MAX: usize = 2_048;
/// A batch of at least this many new vectors is inserted by rayon's threads.
pub(super) const PARALLEL_INSERT_MIN: usize = 32;
/// Slots sampled to estimate the share of the graph a predicate keeps in scope.
pub(super) const PREDICATE_SAMPLE: usize = 256;
/// Tombstones beyond this share of all slots call for [`VectorIndex::compact`].
pub(super) const COMPACT_DEAD_SHARE: f64 = 0.25;
/// Vectors [`VectorIndex::stage`] adds under one hold of the write lock.
pub(super) const STAGE_CHUNK: usize = 1_024;

/// Everything behind the lock. Slot `s` is graph point `s` once inserted.
pub(super) struct State {
    pub(super) graph: Graph,
    pub(super) dim: usize,
    /// Key of each slot.
    pub(super) keys: Vec<u64>,
    /// Whether each slot is its key's current vector.
    pub(super) live: Vec<bool>,
    /// A hash of each slot's vector, so re-sending the same vector adds nothing.
    pub(super) prints: Vec<u64>,
    /// The live slot of each key.
    pub(super) slot_of: HashMap<u64, u32>,
    /// Slots staged but not in the graph yet, oldest first: searches read them beside the graph,
    /// so a staged vector is found at once while the (slower) graph insertion catches up.
    pub(super) staged: Staged,
    /// The slots not in the graph yet (staged, or being inserted): each one's direction from the
    /// centre as the graph will hold it (rounded to bfloat16), its `r` and lean in the slot
    /// table as for a graph point, so a pending slot is scored exactly as once it is in the graph.
    pub(super) pending: HashMap<u32, Vec<f32>, SlotHash>,
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
    pub(super) centre: Vec<f32>,
    pub(super) centred: bool,
    /// `r = |x − centre|` of each slot.
    pub(super) norms: Vec<f32>,
    /// `c·t` of each slot: how far its direction leans toward the centre. With it a graph
    /// hit is scored from the distance the graph measured, without reading its vector back
    /// (see [`State::score_from_graph`]).
    pub(super) leans: Vec<f32>,
    /// The namespace of each slot's memory, as its number in `namespace_ids` ([`UNPLACED`]
    /// until the engine names it with [`VectorIndex::place`]; a new slot of a key keeps its
    /// key's). A dump does not hold them: the engine names them again after a load.
    ///
    /// [`VectorIndex::place`]: super::VectorIndex::place
    pub(super) spaces: Vec<u32>,
    /// The number of each namespace named so far.
    pub(super) namespace_ids: HashMap<String, u32>,
    /// Live slots whose namespace is not known.
    pub(super) unplaced: usize,
}

/// The namespace of a slot nobody has named yet: in every namespace's scope (see [`Within`]).
pub(super) const UNPLACED: u32 = u32::MAX;

/// Which slots a search inside the index may return: the key-level [`Scope`] as a test of a
/// slot.
#[derive(Clone, Copy)]
pub(super) enum Within<'a> {
    /// Every live slot.
    All,
    /// Slots whose key the function accepts.
    Keys(&'a (dyn Fn(u64) -> bool + Sync)),
    /// Slots in one of these namespaces (by number), and those whose namespace is not known:
    /// the caller checks the memories it gets, so a slot not named yet is searched rather than
    /// missed.
    Spaces(&'a [u32]),
}

impl Within<'_> {
    fn is_all(&self) -> bool {
        matches!(self, Within::All)
    }
}

/// Hashes slot numbers for the pending vectors' map: a multiply spreads them over the table
/// (they are small consecutive integers), several times cheaper than the default SipHash on the
/// scan of staged vectors, and nothing outside the index chooses them.
#[derive(Default, Clone, Copy)]
pub(super) struct SlotHasher(u64);

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

pub(super) type SlotHash = std::hash::BuildHasherDefault<SlotHasher>;

/// A query as the state scores it: its direction away from the centre (what staged sketches are
/// compared with), the direction the graph is searched toward (see [`QUERY_CENTRE_SHARE`]),
/// rounded to bfloat16 as the graph would round it, and its dot product with the centre.
pub(super) struct Query {
    pub(super) direction: Vec<f32>,
    /// `(q − α·c) / |q − α·c|`, each number rounded to bfloat16: every score is computed from
    /// its dot product with a stored direction (see [`State::score`]).
    pub(super) toward: Vec<f32>,
    /// `|q − α·c|`, the length `toward` was divided by (0 when it was the zero vector).
    pub(super) toward_norm: f32,
    pub(super) at_centre: f32,
}

impl State {
    pub(super) fn empty(dim: usize) -> Result<State> {
        Ok(State::with_graph(
            Graph::new(dim, INITIAL_CAPACITY).map_err(Error::Internal)?,
            dim,
        ))
    }

    pub(super) fn with_graph(graph: Graph, dim: usize) -> State {
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
            leans: Vec::new(),
            spaces: Vec::new(),
            namespace_ids: HashMap::new(),
            unplaced: 0,
        }
    }

    /// Whether live slot `slot` is in scope.
    pub(super) fn within(&self, within: Within<'_>, slot: usize) -> bool {
        match within {
            Within::All => true,
            Within::Keys(accept) => accept(self.keys[slot]),
            Within::Spaces(ids) => {
                let space = self.spaces[slot];
                space == UNPLACED || ids.contains(&space)
            }
        }
    }

    /// Makes `slot` its key's live slot (counting it unplaced while its namespace is unknown).
    pub(super) fn make_live(&mut self, slot: u32) {
        let s = slot as usize;
        if !self.live[s] && self.spaces[s] == UNPLACED {
            self.unplaced += 1;
        }
        self.live[s] = true;
    }

    /// Records that `key`'s memory is in `namespace` (nothing when the key has no vector).
    pub(super) fn place(&mut self, key: u64, namespace: &str) {
        let Some(&slot) = self.slot_of.get(&key) else {
            return;
        };
        let next = self.namespace_ids.len() as u32;
        let id = match self.namespace_ids.get(namespace) {
            Some(&id) => id,
            // Numbers stop short of `UNPLACED`: past 2^32 − 1 namespaces, the last one is
            // shared (its slots are searched for either, and the caller filters).
            None if next < UNPLACED - 1 => {
                self.namespace_ids.insert(namespace.to_owned(), next);
                next
            }
            None => UNPLACED - 1,
        };
        let s = slot as usize;
        if self.spaces[s] == UNPLACED && self.live[s] {
            self.unplaced -= 1;
        }
        self.spaces[s] = id;
    }

    pub(super) fn query(&self, v: Vec<f32>) -> Query {
        let (direction, _) = self.direction(&v);
        let mut toward: Vec<f32> = v
            .iter()
            .zip(&self.centre)
            .map(|(q, c)| q - QUERY_CENTRE_SHARE * c)
            .collect();
        let norm = dot(&toward, &toward).sqrt();
        if norm > 0.0 {
            toward.iter_mut().for_each(|x| *x = bf16_round(*x / norm));
        }
        Query {
            toward,
            toward_norm: norm,
            at_centre: dot(&v, &self.centre),
            direction,
        }
    }

    /// The unit direction of `x − centre` and its length (a zero direction when `x` is the
    /// centre).
    pub(super) fn direction(&self, x: &[f32]) -> (Vec<f32>, f32) {
        let mut t: Vec<f32> = x.iter().zip(&self.centre).map(|(x, c)| x - c).collect();
        let r = dot(&t, &t).sqrt();
        if r > 0.0 {
            t.iter_mut().for_each(|v| *v /= r);
        }
        (t, r)
    }

    /// How `x` is held: its direction from the centre `t` rounded to bfloat16 (as the graph
    /// stores it), `r = |x − centre|` and `centre · t` (see [`State::norms`], [`State::leans`]).
    pub(super) fn placement(&self, x: &[f32]) -> (Vec<f32>, f32, f32) {
        let (mut t, r) = self.direction(x);
        t.iter_mut().for_each(|v| *v = bf16_round(*v));
        let lean = dot(&self.centre, &t);
        (t, r, lean)
    }

    /// The stored direction of `slot` (pending or in the graph), into `buf`; `None` for a
    /// retired slot.
    fn stored<'a>(&'a self, slot: u32, buf: &'a mut [f32]) -> Option<&'a [f32]> {
        if let Some(t) = self.pending.get(&slot) {
            Some(t)
        } else if self.graph.vector(slot, buf) {
            Some(buf)
        } else {
            None
        }
    }

    /// The vector of `slot` as stored (`c + r·t`, its direction rounded to bfloat16), into
    /// `buf`; `None` for a retired slot.
    pub(super) fn vector<'a>(&'a self, slot: u32, buf: &'a mut [f32]) -> Option<&'a [f32]> {
        if let Some(t) = self.pending.get(&slot) {
            buf.copy_from_slice(t);
        } else if !self.graph.vector(slot, buf) {
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
    pub(super) fn fix_centre(&mut self) -> Vec<u32> {
        if self.centred || self.live_count() + self.pending.len() < CENTRE_AFTER {
            return Vec::new();
        }
        let mut buf = vec![0.0; self.dim];
        let mut sum = vec![0.0f64; self.dim];
        let mut held: Vec<(u32, bool, Vec<f32>)> = Vec::new();
        for slot in 0..self.keys.len() as u32 {
            let pending = self.pending.contains_key(&slot);
            if !pending && !self.live[slot as usize] {
                continue;
            }
            let Some(v) = self.vector(slot, &mut buf) else {
                continue;
            };
            sum.iter_mut().zip(v).for_each(|(s, x)| *s += f64::from(*x));
            held.push((slot, pending, v.to_vec()));
        }
        let n = held.len().max(1) as f64;
        self.centre = sum.iter().map(|s| (s / n) as f32).collect();
        self.centred = true;
        // Every vector is placed anew around the centre; those in the graph leave it.
        let mut moved = Vec::new();
        for (slot, pending, v) in held {
            let (t, r, lean) = self.placement(&v);
            (self.norms[slot as usize], self.leans[slot as usize]) = (r, lean);
            self.pending.insert(slot, t);
            if !pending {
                self.graph.remove(slot);
                moved.push(slot);
            }
        }
        let mut staged = std::mem::replace(&mut self.staged, Staged::new(self.dim));
        staged.resketch(|slot| {
            self.pending
                .get(&slot)
                .map_or_else(|| vec![0.0; self.dim], Vec::clone)
        });
        self.staged = staged;
        moved
    }

    /// Stages pending slots whose sketches were not computed beforehand.
    pub(super) fn stage_slots(&mut self, slots: &[u32]) {
        for &slot in slots {
            let sketch = self
                .pending
                .get(&slot)
                .map_or_else(Vec::new, |t| self.staged.sketch(t));
            if sketch.is_empty() {
                continue;
            }
            self.staged.push(slot, &sketch);
        }
    }

    /// Sketches of the directions of these unit vectors (`dim` each, flat), as they would be
    /// staged now; computed on rayon's threads, without the write lock.
    pub(super) fn sketches(&self, flat: &[f32]) -> Vec<Vec<u64>> {
        flat.par_chunks(self.dim)
            .map(|v| self.staged.sketch(&self.direction(v).0))
            .collect()
    }

    /// `hits` from the graph merged with the best staged slots in scope (a slot being inserted
    /// may be in both: kept once). Up to [`staged::EXACT_UP_TO`] staged slots are all scored;
    /// beyond, a shortlist of those whose sketches are nearest the query's.
    pub(super) fn with_staged(
        &self,
        query: &Query,
        k: usize,
        within: Within<'_>,
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
        let in_scope = |slot: u32| self.live[slot as usize] && self.within(within, slot as usize);
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
        let share = if within.is_all() {
            1.0
        } else {
            self.sampled_share(within).max(1e-6)
        };
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

    pub(super) fn is_live(&self, slot: usize) -> bool {
        self.live.get(slot).copied().unwrap_or(false)
    }

    pub(super) fn live_count(&self) -> usize {
        self.slot_of.len()
    }

    pub(super) fn dead_count(&self) -> usize {
        self.keys.len() - self.live_count()
    }

    /// The hit of `slot` scored from its stored direction `t` (pending, or read out of the graph).
    /// With `w = q − α·c` and `toward = w / |w|`, `q · t = |w|·(toward · t) + α·(c · t)` and
    /// `q · x = q · c + r·(q · t)`; `toward` is rounded to bfloat16 as the graph rounds a
    /// query, so this is the number [`State::score_from_graph`] gets from the distance the graph
    /// measured (to the order of a float sum, about 10⁻⁷), and a vector keeps its score when it
    /// moves from the staged list into the graph.
    pub(super) fn score(&self, query: &Query, slot: u32, buf: &mut [f32]) -> Option<Hit> {
        let t = self.stored(slot, buf)?;
        Some(self.hit(query, slot, dot(&query.toward, t)))
    }

    /// The hit of a slot the graph found at inner-product distance `d = 1 − toward · t`,
    /// scored without reading its vector back (see [`State::score`]).
    pub(super) fn score_from_graph(&self, query: &Query, slot: u32, d: f32) -> Hit {
        self.hit(query, slot, 1.0 - d)
    }

    fn hit(&self, query: &Query, slot: u32, toward_dot: f32) -> Hit {
        let s = slot as usize;
        Hit {
            score: held_score(query, self.norms[s], self.leans[s], toward_dot),
            key: self.keys[s],
        }
    }

    /// The score of a vector outside the index (`x`, unit length), as the index would score
    /// it once it held `x` (see [`State::score`]).
    pub(super) fn score_outside(&self, query: &Query, x: &[f32]) -> f32 {
        let (t, r, lean) = self.placement(x);
        held_score(query, r, lean, dot(&query.toward, &t))
    }

    /// Appends a slot that is not live yet, its vector pending.
    pub(super) fn push_slot(&mut self, key: u64, vector: &[f32]) -> Result<u32> {
        let slot = u32::try_from(self.keys.len())
            .map_err(|_| Error::Internal("vector index: more than 2^32 slots".to_owned()))?;
        self.keys.push(key);
        self.live.push(false);
        let space = self
            .slot_of
            .get(&key)
            .map_or(UNPLACED, |&old| self.spaces[old as usize]);
        self.spaces.push(space);
        self.prints.push(fingerprint(vector));
        let (t, r, lean) = self.placement(vector);
        self.norms.push(r);
        self.leans.push(lean);
        self.pending.insert(slot, t);
        Ok(slot)
    }

    /// Whether `key`'s live vector is `vector` already.
    pub(super) fn holds(&self, key: u64, vector: &[f32]) -> bool {
        self.slot_of
            .get(&key)
            .is_some_and(|&slot| self.prints[slot as usize] == fingerprint(vector))
    }

    /// Room in the graph for `more` points beyond those in it and pending.
    pub(super) fn reserve(&mut self, more: usize) -> Result<()> {
        let points = self.graph.len() + self.pending.len() + more;
        self.graph.reserve(points).map_err(Error::Internal)
    }

    /// Inserts these pending slots' vectors into the graph (through `&self`: usearch inserts
    /// concurrently), on rayon's threads for a large batch. Room was reserved when they were
    /// pushed.
    pub(super) fn insert_into_graph(&self, slots: &[u32]) -> Result<()> {
        let insert = |&slot: &u32| match self.pending.get(&slot) {
            Some(t) => self.graph.add(slot, t),
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
    pub(super) fn settle(&mut self, slots: &[u32]) {
        for slot in slots {
            self.pending.remove(slot);
        }
    }

    /// Retires a slot that is no longer its key's vector: out of the graph and not live.
    pub(super) fn retire(&mut self, slot: u32) {
        if self.live[slot as usize] && self.spaces[slot as usize] == UNPLACED {
            self.unplaced -= 1;
        }
        self.live[slot as usize] = false;
        self.pending.remove(&slot);
        // Also when pending: a failed batch may have put it in the graph already.
        self.graph.remove(slot);
    }

    /// Renumbers the live slots `0..n` in slot order, dropping the tombstones (the graph's
    /// points are renamed; nothing is re-inserted). A rename the graph refuses undoes the ones
    /// before it and leaves the index as it was.
    pub(super) fn compact(&mut self) -> Result<()> {
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
        self.leans = live.iter().map(|&s| self.leans[s as usize]).collect();
        self.spaces = live.iter().map(|&s| self.spaces[s as usize]).collect();
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
    pub(super) fn exact(&self, query: &Query, k: usize, scope: Scope<'_>) -> Vec<Hit> {
        let mut numbers = Vec::new();
        let within = match scope {
            Scope::All => Within::All,
            Scope::Predicate(accept) => Within::Keys(accept),
            Scope::Namespaces(names) => match self.spaces(names, &mut numbers) {
                Some(within) => within,
                None => return Vec::new(),
            },
            Scope::Keys(keys) => {
                let mut top = TopK::new(k);
                let mut buf = vec![0.0; self.dim];
                let mut keys = keys.to_vec();
                keys.sort_unstable();
                keys.dedup();
                for key in keys {
                    if let Some(&slot) = self.slot_of.get(&key)
                        && let Some(hit) = self.score(query, slot, &mut buf)
                    {
                        top.push(hit);
                    }
                }
                return top.into_sorted();
            }
        };
        self.exact_within(query, k, within)
    }

    /// Brute force over the live slots `within`.
    pub(super) fn exact_within(&self, query: &Query, k: usize, within: Within<'_>) -> Vec<Hit> {
        let mut top = TopK::new(k);
        let mut buf = vec![0.0; self.dim];
        for slot in 0..self.keys.len() {
            if self.live[slot]
                && self.within(within, slot)
                && let Some(hit) = self.score(query, slot as u32, &mut buf)
            {
                top.push(hit);
            }
        }
        top.into_sorted()
    }

    /// The test of a scope of these namespaces, their numbers written into `numbers` (those
    /// never named are left out: no slot is in them); `None` when no live slot can pass it (no
    /// name known and every vector placed).
    pub(super) fn spaces<'n>(
        &self,
        names: &[String],
        numbers: &'n mut Vec<u32>,
    ) -> Option<Within<'n>> {
        numbers.clear();
        numbers.extend(
            names
                .iter()
                .filter_map(|n| self.namespace_ids.get(n).copied()),
        );
        (!numbers.is_empty() || self.unplaced > 0).then_some(Within::Spaces(numbers))
    }

    /// Top k of the live vectors in scope, by the graph or, where cheaper, by a scan. A scope is
    /// tested inside the graph's walk, whose candidate list then holds only slots in scope (live
    /// and accepted), as many as an unscoped search's list; the plan prices that walk as an
    /// unscoped one with a list that much longer ÷ the share (see [`State::graph_plan`]).
    /// `list`, when given, is the candidate list instead (benchmarks choosing its length).
    pub(super) fn search_scope(
        &self,
        query: &Query,
        k: usize,
        within: Within<'_>,
        list: Option<usize>,
    ) -> Vec<Hit> {
        let scan = || {
            if self.staged.len() <= staged::EXACT_UP_TO {
                self.exact_within(query, k, within)
            } else {
                // Many staged: the scan reads the graph's points, the staged slots their
                // shortlist.
                let hits = self.exact_in_graph(query, k, within);
                self.with_staged(query, k, within, hits)
            }
        };
        let plan = match list {
            Some(list) if self.graph.len() > 0 => Some(list.max(k)),
            _ => self.graph_plan(k, within),
        };
        let Some(ef) = plan else {
            return scan();
        };
        let hits = match self.graph_search(query, k, ef, within) {
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
            return self.with_staged(query, k, within, hits);
        }
        // Fewer than k in scope among the candidates: the share was overestimated, or fewer
        // than k keys are in scope at all. The scan settles it.
        scan()
    }

    /// Brute force over the live vectors in scope that are not staged.
    pub(super) fn exact_in_graph(&self, query: &Query, k: usize, within: Within<'_>) -> Vec<Hit> {
        let mut top = TopK::new(k);
        if self.graph.len() == 0 {
            return Vec::new();
        }
        let mut buf = vec![0.0; self.dim];
        for slot in 0..self.keys.len() {
            if self.live[slot]
                && !self.staged.holds(slot as u32)
                && self.within(within, slot)
                && let Some(hit) = self.score(query, slot as u32, &mut buf)
            {
                top.push(hit);
            }
        }
        top.into_sorted()
    }

    /// The candidate list to ask of the graph for this scope, or `None` when a scan is cheaper.
    pub(super) fn graph_plan(&self, k: usize, within: Within<'_>) -> Option<usize> {
        // Graph points only: staged slots are scanned anyway.
        let points = self.graph.len();
        let (share, scan_cost) = match within {
            Within::All => (1.0, points as f64),
            _ => {
                let share = self.sampled_share(within);
                let calls = self.live_count() as f64 * PREDICATE_CALL_COST;
                (share, share * points as f64 + calls)
            }
        };
        // As many members in scope as an unscoped search's whole list (at least 1.5k): a
        // list of 2k/share found a scope's top 10 at 0.76 of the exact scan's where the
        // whole graph's was found at 0.87 (an eighth of 100,000 seeded memories). A share of
        // 0 asks for an infinite list, which saturates: scanned.
        let ef = (list_for(k, points) as f64 / share).ceil() as usize;
        let scan = ef > EF_MAX.min(points) || scan_cost <= (ef * SCAN_VECTORS_PER_CANDIDATE) as f64;
        (!scan).then_some(ef)
    }

    /// The best k of the graph's `ef` candidates that are live and accepted.
    pub(super) fn graph_search(
        &self,
        query: &Query,
        k: usize,
        ef: usize,
        within: Within<'_>,
    ) -> std::result::Result<Vec<Hit>, String> {
        let mut top = TopK::new(k);
        let found = if within.is_all() {
            let mut found = self.graph.search(&query.toward, ef)?;
            found.retain(|&(slot, _)| self.is_live(slot as usize));
            found
        } else {
            // The scope inside the walk: its list holds only slots in scope (live and
            // accepted), as long as an unscoped search's, where a list of `ef` (that length ÷
            // the share) would be kept sorted with every point met.
            let list = list_for(k, self.graph.len()).min(ef);
            self.graph.filtered_search(&query.toward, list, |slot| {
                self.is_live(slot as usize) && self.within(within, slot as usize)
            })?
        };
        for (slot, d) in found {
            top.push(self.score_from_graph(query, slot, d));
        }
        Ok(top.into_sorted())
    }

    /// Share of all slots (dead ones included) that are live and accepted, estimated from
    /// slots at pseudo-random positions (a fixed stride could fall in step with a pattern of the
    /// keys); the same positions every time, so a search is repeatable.
    pub(super) fn sampled_share(&self, within: Within<'_>) -> f64 {
        let n = self.keys.len();
        let in_scope = |slot: usize| self.live[slot] && self.within(within, slot);
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

/// `q · x` as a similarity, for a vector held as `r`, its lean `c · t` and `toward · t`.
fn held_score(query: &Query, r: f32, lean: f32, toward_dot: f32) -> f32 {
    let qt = query.toward_norm * toward_dot + QUERY_CENTRE_SHARE * lean;
    similarity(distance(query.at_centre + r * qt))
}

/// A 64-bit hash of a vector's bits: equal vectors, equal prints.
pub(super) fn fingerprint(v: &[f32]) -> u64 {
    v.iter()
        .fold(v.len() as u64, |h, x| mix(h ^ u64::from(x.to_bits())))
}

/// SplitMix64's finaliser: a well-mixed 64-bit value from a counter.
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The candidate list of a search for `k` among `points` graph points (see [`LIST_PER_ROOT`]).
pub(super) fn list_for(k: usize, points: usize) -> usize {
    let by_size = (LIST_PER_ROOT * (points as f64).sqrt()).ceil() as usize;
    (k + k / 2).max(by_size.clamp(LIST_MIN, LIST_MAX_BY_SIZE))
}
