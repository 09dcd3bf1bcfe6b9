//! Recall: text (BM25, weighed by the share of the query each hit covers) and vector candidates,
//! fused by their scaled scores, boosted by importance and recency, widened by graph neighbours,
//! near-duplicates collapsed, then paged.

use std::collections::HashSet;

use crate::engine::graph::GraphView;
use crate::engine::overlap::{jaccard, may_reach, word_hashes};
use crate::engine::vectors::{Nearest, VectorSync};
use crate::engine::{Engine, cursor, halves, snippet};
use crate::error::{Error, Result};
use crate::index::vector::Scope;
use crate::model::{
    Explain, Hit, KeyMap, KeySet, Memory, MemoryKey, Millis, NamespaceScope, RecallMode,
    RecallPage, RecallQuery, Via, now_millis,
};
use crate::store::memories;

mod expand;
pub use expand::{LONG_SOURCE_WORDS, NEIGHBOUR_KEPT_SHARE};

/// Deepest page recall serves (offset + limit).
const MAX_RECALL_DEPTH: usize = 1_000;

/// Default fusion weights (text, vector): a static model's neighbours are a weaker signal than
/// exact words, so they count about a third (measured on LoCoMo, RealMem and MADial-Bench with
/// the built-in model fitted to sentences, see docs/figures.md).
pub const DEFAULT_WEIGHTS: (f32, f32) = (1.0, 0.35);
/// Fewest candidates taken from the vector list (more for deep pages); the similarity scale is
/// anchored at that depth.
const MIN_CANDIDATES: usize = 100;
/// Fewest candidates taken from the text list (more for deep pages). Half the vector list's:
/// the text half's 51st to 100th hits never reached a default page of LoCoMo, RealMem or
/// MADial-Bench (the default's figures identical, every category), and finding and reading them
/// was a fifth of a hybrid recall's instructions (docs/design/recall.md, "Text top-k").
const TEXT_CANDIDATES: usize = 50;
/// Importance 1 multiplies the fused score by 1 + IMPORTANCE_BOOST / 2, importance 0 by
/// 1 − IMPORTANCE_BOOST / 2 (0.5 leaves it).
pub const IMPORTANCE_BOOST: f32 = 0.2;
/// A memory created just now is boosted by 1 + RECENCY_BOOST, one half-life ago by half that.
pub const RECENCY_BOOST: f32 = 0.1;
/// Salience 1 multiplies the fused score by 1 + SALIENCE_BOOST / 2, salience 0 by
/// 1 − SALIENCE_BOOST / 2: what is used often ranks a little higher than what went unused.
pub const SALIENCE_BOOST: f32 = 0.1;
/// Half-life of the recency boost.
pub const RECENCY_HALF_LIFE_MS: f64 = 30.0 * 24.0 * 3_600_000.0;
/// A neighbour reached through graph expansion inherits this share of its source's score per
/// hop, times the relation's weight.
pub const EXPAND_DECAY: f32 = 0.9;
/// Expansion through a relation passes on the share `min(1, HUB_DEGREE / √(d₁ · d₂))`, d₁ and
/// d₂ being how many relations its two ends have: full along a chain of turns (3 each), less
/// through a hub, so a session holding fifty turns neither crowds the page nor floods it with
/// its members.
pub const HUB_DEGREE: f32 = 4.0;
/// Most neighbours one hit contributes per hop.
const EXPAND_FANOUT: usize = 32;
/// Hits sharing at least this share of their words (Jaccard) are the same memory said twice:
/// only the best-ranked is kept.
pub const DUPLICATE_WORD_OVERLAP: f32 = 0.9;
/// In hybrid mode a memory found by the vector signal alone must be at least this similar to
/// the query; below it, nearest neighbours are noise (every query has some).
pub const MIN_VECTOR_SIMILARITY: f32 = 0.35;
/// [`MIN_VECTOR_SIMILARITY`] when no memory holds any of the query's words: meaning is then all
/// the evidence there is ("drink" finds "Alice prefers green tea" at 0.34 with the built-in
/// model; words nothing relates to, "xyzzy plugh", reach 0.15).
pub const MIN_VECTOR_SIMILARITY_ALONE: f32 = 0.25;
/// Namespaces this small are searched exactly (every vector compared) instead of through HNSW.
const EXACT_SCOPE: usize = 20_000;
/// How many more vector candidates are fetched when filters will drop some.
const FILTER_OVERFETCH: usize = 4;

/// A candidate while ranking.
#[derive(Debug, Clone, Default)]
struct Candidate {
    text: Option<(usize, f32)>,
    vector: Option<(usize, f32)>,
    via: Option<Via>,
    explain: Explain,
    score: f32,
}

/// The text half of a recall: its hits, how many recent changes it could not see yet, and the
/// rows of its hits (live ones; archived ones only when asked for).
#[derive(Default)]
struct TextSide {
    hits: Vec<(MemoryKey, f32)>,
    unseen: i64,
    rows: KeyMap<Memory>,
    /// The change-log head the search was made at (`None`: no search by words).
    head: Option<i64>,
}

/// What the vector half of a recall found, with its hits' rows when it read them (their keys:
/// a key without a row is not live).
struct VectorSide {
    hits: Vec<(MemoryKey, f32)>,
    /// Candidates asked of the index per candidate of depth (over-fetched for filters).
    per_depth: usize,
    sync: VectorSync,
    fell_back: Option<String>,
    read: Option<(Vec<MemoryKey>, KeyMap<Memory>)>,
    query: Vec<f32>,
}

/// The relation graph of one recall: synced once, when first needed, to the change-log head
/// the text search was made at (or to the head read then, without one).
struct RecallGraph {
    head: Option<i64>,
    view: Option<GraphView>,
}

/// How the candidates of one recall are scored.
struct Scoring {
    mode: RecallMode,
    weights: (f32, f32),
    scale: Scale,
    now: Millis,
    /// The query's vector (empty without a vector half).
    query_vector: Vec<f32>,
}

impl Scoring {
    fn score(&self, c: &mut Candidate, m: &Memory) {
        score(c, m, self.mode, self.weights, &self.scale, self.now);
    }

    /// The most a hybrid candidate found by meaning alone can score, whatever its row: its
    /// share of the fusion with every boost at its largest.
    fn ceiling(&self, c: &Candidate) -> f32 {
        let (wt, wv) = self.weights;
        let fused = c.vector.map_or(0.0, |(_, s)| wv * self.scale.vector(s))
            / (wt + wv).max(f32::MIN_POSITIVE);
        fused * importance_boost(1.0) * (1.0 + RECENCY_BOOST) * salience_boost(1.0)
    }
}

/// A score that hybrid candidates found by meaning alone must be able to reach for their rows
/// to be read: the `2 × need`-th best score of the text hits (whose rows the text half read),
/// so at least that many candidates rank at or above it. Duplicates are looked for among the
/// first `2 × need`, and the page with the one after it are the first `need` that remain; a
/// candidate that cannot reach the bar changes neither, unless relations bring it in or
/// duplicates leave fewer than `need` at or above the bar ([`Bar::settles`]).
struct Bar(Option<f32>);

impl Bar {
    fn of(
        cands: &KeyMap<Candidate>,
        rows: &KeyMap<Memory>,
        q: &RecallQuery,
        scoring: &Scoring,
        need: usize,
    ) -> Bar {
        if scoring.mode != RecallMode::Hybrid {
            return Bar(None);
        }
        let mut scores: Vec<f32> = cands
            .iter()
            .filter_map(|(k, c)| {
                let m = rows.get(k).filter(|m| matches(q, m))?;
                let mut c = c.clone();
                scoring.score(&mut c, m);
                Some(c.score)
            })
            .collect();
        let n = 2 * need;
        if scores.len() < n {
            return Bar(None);
        }
        scores.select_nth_unstable_by(n - 1, |a, b| b.total_cmp(a));
        Bar(Some(scores[n - 1]))
    }

    fn may_reach(&self, c: &Candidate, scoring: &Scoring) -> bool {
        self.0.is_none_or(|bar| scoring.ceiling(c) >= bar)
    }

    /// True when `ranked` is what it would be with the `skipped` (sorted) candidates' rows
    /// read: none of them came in through a relation, and at least `need` hits stay at or
    /// above the bar.
    fn settles(
        &self,
        ranked: &[(MemoryKey, Candidate, Vec<String>)],
        skipped: &[MemoryKey],
        need: usize,
    ) -> bool {
        let Some(bar) = self.0 else {
            return true;
        };
        ranked.iter().filter(|h| h.1.score >= bar).count() >= need
            && !ranked.iter().any(|h| skipped.binary_search(&h.0).is_ok())
    }
}

impl Engine {
    /// Ranked memories for `q` (see the module doc); sees every write committed before the call.
    /// The hits returned count as used (their access counts and salience, written later by
    /// the background job).
    pub fn recall(&self, q: &RecallQuery) -> Result<RecallPage> {
        Ok(self.recall_with(q, true)?.0)
    }

    /// [`Engine::recall`] that records no use: for what only looks (a cost estimate, the seeds
    /// of a walk, whose answer records its own), so that looking changes no row.
    pub fn recall_unrecorded(&self, q: &RecallQuery) -> Result<RecallPage> {
        Ok(self.recall_inner(q, true, false)?.0)
    }

    /// [`Engine::recall`], reading the rows of candidates that cannot reach the page only when
    /// `prune` is false; also tells whether the pruned ranking had to be done again.
    pub(crate) fn recall_with(&self, q: &RecallQuery, prune: bool) -> Result<(RecallPage, bool)> {
        self.recall_inner(q, prune, true)
    }

    /// [`Engine::recall_with`]; the hits count as used only when `record_use`.
    fn recall_inner(
        &self,
        q: &RecallQuery,
        prune: bool,
        record_use: bool,
    ) -> Result<(RecallPage, bool)> {
        self.check_recall(q)?;
        // Fusion, coverage and duplicate collapse need candidates beyond the page.
        let depth = (2 * (q.depth() + 1)).max(MIN_CANDIDATES);
        let text_depth = (2 * (q.depth() + 1)).max(TEXT_CANDIDATES);
        let mut warnings = Vec::new();
        let mut want_vector = q.mode != RecallMode::Text && self.embedder.is_some();
        if q.mode == RecallMode::Vector && self.embedder.is_none() {
            warnings.push("no embedder is configured; answered with text search".to_owned());
        }
        // Hybrid: the text search runs here while a recall thread searches the vectors (each
        // half takes milliseconds at a million memories). The threads are recall's own (see
        // `halves`), so the vector half never queues behind an import's embedding work on
        // rayon's global pool, and no recall pays for starting a thread.
        let text_now = q.mode == RecallMode::Hybrid || !want_vector;
        // On a database server, a recall that expands also reads the vector hits' rows beside
        // the vector search, rather than after both halves: expanding reads the page's rows
        // anyway, and one round trip less on the calling thread is what counts. Without
        // expanding, most of those rows are never needed (see `Bar`).
        let prefetch = self.store.is_postgres() && q.expand > 0;
        let search = || -> Result<VectorSide> {
            let (
                Nearest {
                    hits,
                    sync,
                    fell_back,
                    query,
                },
                per_depth,
            ) = self.vector_candidates(q, depth)?;
            let mut read = None;
            if prefetch && !hits.is_empty() {
                let mut keys: Vec<MemoryKey> = hits.iter().map(|h| h.0).collect();
                keys.sort_unstable();
                let rows = self.load_rows(&keys, q.include_archived)?;
                read = Some((keys, rows));
            }
            Ok(VectorSide {
                hits,
                per_depth,
                sync,
                fell_back,
                read,
                query,
            })
        };
        let text_side = || text_now.then(|| self.text_side(q, text_depth));
        let (vector_found, text_found) = if want_vector && text_now {
            // The text half also reads its rows while the vector search may still run.
            let (vector, text) = halves::join(search, text_side);
            let vector = vector
                .unwrap_or_else(|_| Err(Error::Internal("the vector search panicked".into())));
            (Some(vector), text)
        } else {
            // One half only: searched here.
            (want_vector.then(search), text_side())
        };
        let mut vector_hits = Vec::new();
        let mut vector_per_depth = 1;
        let mut vector_read = None;
        let mut query_vector = Vec::new();
        if let Some(found) = vector_found {
            match found {
                Ok(VectorSide {
                    hits,
                    per_depth,
                    sync,
                    fell_back,
                    read,
                    query,
                }) => {
                    query_vector = query;
                    vector_hits = hits;
                    vector_per_depth = per_depth;
                    vector_read = read;
                    if let Some(why) = fell_back {
                        warnings.push(format!(
                            "the vector index's graph failed ({why}); vector hits came from an exact scan"
                        ));
                    }
                    match sync {
                        // Vector mode searches no words: say what it misses, and what finds it.
                        VectorSync::Behind(n) if q.mode == RecallMode::Vector => warnings.push(format!(
                            "the vector index is catching up ({n} changes behind): the newest memories are not searchable by meaning yet; mode \"hybrid\" finds them by words meanwhile"
                        )),
                        VectorSync::Behind(n) => warnings.push(format!(
                            "the vector index is catching up ({n} changes behind); newer memories are found by text only for now"
                        )),
                        VectorSync::Loading => {
                            warnings.push("the vector index is still loading; answered with text search".to_owned());
                            want_vector = false;
                        }
                        VectorSync::Current => {}
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "vector search failed; answering with text search");
                    warnings.push(format!(
                        "vector search unavailable ({e}); answered with text search"
                    ));
                    want_vector = false;
                }
            }
        }
        // Vector mode without a usable vector signal falls back to text.
        let mode = match (q.mode, want_vector) {
            (RecallMode::Vector, false) => RecallMode::Text,
            (m, _) => m,
        };
        // Vector mode that fell back to text searches it now.
        let text_found = text_found
            .or_else(|| (mode != RecallMode::Vector).then(|| self.text_side(q, text_depth)));
        let TextSide {
            hits: text_hits,
            unseen,
            mut rows,
            head,
        } = text_found.transpose()?.unwrap_or_default();
        if unseen > 0 {
            warnings.push(format!(
                "the text index is catching up ({unseen} recent changes not searchable by words yet)"
            ));
        }
        let mut vector_keys = KeySet::default();
        if let Some((keys, read)) = vector_read {
            vector_keys.extend(keys);
            for (k, m) in read {
                rows.entry(k).or_insert(m);
            }
        }

        let mut cands = KeyMap::<Candidate>::default();
        for (i, (k, s)) in text_hits.iter().enumerate() {
            cands.entry(*k).or_default().text = Some((i + 1, *s));
        }
        // Where no memory holds any of the query's words, meaning is the only evidence there
        // is: it counts from a lower similarity.
        let min_similarity = if text_hits.is_empty() {
            MIN_VECTOR_SIMILARITY_ALONE
        } else {
            MIN_VECTOR_SIMILARITY
        };
        if mode != RecallMode::Text {
            for (i, (k, s)) in vector_hits.iter().enumerate() {
                if mode == RecallMode::Hybrid && *s < min_similarity && !cands.contains_key(k) {
                    continue;
                }
                cands.entry(*k).or_default().vector = Some((i + 1, *s));
            }
        }
        let scoring = Scoring {
            mode,
            weights: q.weights.unwrap_or(DEFAULT_WEIGHTS),
            scale: Scale::of(
                &text_hits,
                &vector_hits,
                min_similarity,
                MIN_CANDIDATES * vector_per_depth,
            ),
            now: now_millis(),
            query_vector,
        };
        let need = q.depth() + 1;

        // Rows of the candidates the text half did not bring, but for those that cannot reach
        // the page (see `Bar`); when the ranking shows they might, they are read and it is done
        // again, so the answer is always the one every row read would give.
        let bar = if prune {
            Bar::of(&cands, &rows, q, &scoring, need)
        } else {
            Bar(None)
        };
        let text_keys: KeySet = text_hits.iter().map(|h| h.0).collect();
        let (mut missing, mut skipped) = (Vec::new(), Vec::new());
        for (k, c) in &cands {
            if text_keys.contains(k) || vector_keys.contains(k) {
                // Read by the text or the vector half (absent: not live).
            } else if bar.may_reach(c, &scoring) {
                missing.push(*k);
            } else {
                skipped.push(*k);
            }
        }
        missing.sort_unstable();
        skipped.sort_unstable();
        if !missing.is_empty() {
            rows.extend(self.load_rows(&missing, q.include_archived)?);
        }
        // Kept for a second ranking only when some rows were skipped.
        let again = (!skipped.is_empty()).then(|| cands.clone());
        // Synced once, by the first expansion, to the head the text search was made at.
        let mut graph = RecallGraph { head, view: None };
        let mut ranked = self.rank(q, cands, &mut rows, &scoring, &mut graph)?;
        let again = again.filter(|_| !bar.settles(&ranked, &skipped, need));
        let redone = again.is_some();
        if let Some(cands) = again {
            rows.extend(self.load_rows(&skipped, q.include_archived)?);
            ranked = self.rank(q, cands, &mut rows, &scoring, &mut graph)?;
        }

        // The best of what earlier pages did not show (see `engine::cursor`).
        let seen: HashSet<u64> = q.seen.iter().copied().collect();
        let mut rest = ranked.into_iter().skip(q.offset).filter(|(k, _, _)| {
            seen.is_empty()
                || !rows
                    .get(k)
                    .is_some_and(|m| seen.contains(&cursor::mark(&m.id)))
        });
        let page: Vec<_> = rest.by_ref().take(q.limit).collect();
        let more = rest.next().is_some();
        let page_keys: Vec<MemoryKey> = page.iter().map(|(k, _, _)| *k).collect();
        // The graph, when the expansion synced it, counts the relations without a round trip.
        let counts = match &graph.view {
            Some(g) => page_keys
                .iter()
                .map(|k| {
                    let mut n = 0;
                    g.adjacent(k.0, |_, _, _, _| n += 1);
                    (*k, n)
                })
                .collect(),
            None => self
                .store
                .read(|c| memories::relation_counts(c, &page_keys))?,
        };
        let mut hits = Vec::with_capacity(page.len());
        for (key, c, dups) in page {
            let Some(memory) = rows.remove(&key) else {
                continue;
            };
            hits.push(Hit {
                snippet: snippet::snippet(&memory.content, &q.text),
                n_relations: counts.get(&key).copied().unwrap_or(0),
                memory,
                score: c.score,
                via: c.via,
                duplicates: dups,
                explain: q.explain.then_some(c.explain),
            });
        }
        if record_use {
            self.note_touched(hits.iter().map(|h| h.memory.key), scoring.now);
        }
        let page = RecallPage {
            hits,
            more,
            warnings,
        };
        Ok((page, redone))
    }

    fn check_recall(&self, q: &RecallQuery) -> Result<()> {
        if q.text.trim().is_empty() {
            return Err(Error::invalid(
                "query",
                "is empty",
                "give the words or question to search for",
            ));
        }
        let max = self.cfg.limits.max_limit;
        if q.limit == 0 || q.limit > max {
            return Err(Error::invalid(
                "limit",
                format!("is {}", q.limit),
                format!("give 1 to {max}"),
            ));
        }
        if q.depth() > MAX_RECALL_DEPTH {
            return Err(Error::invalid(
                "cursor",
                "goes past the deepest page served",
                "narrow the query with filters instead of paging further",
            ));
        }
        if q.expand > 2 {
            return Err(Error::invalid(
                "expand",
                format!("is {}", q.expand),
                "give 0 to 2 hops",
            ));
        }
        if let Some((t, v)) = q.weights
            && !(t.is_finite() && v.is_finite() && t >= 0.0 && v >= 0.0 && t + v > 0.0)
        {
            return Err(Error::invalid(
                "weights",
                format!("are {t} and {v}"),
                "give two non-negative numbers, not both 0",
            ));
        }
        let max_label = self.cfg.limits.max_name_bytes;
        if let NamespaceScope::Only(namespaces) = &q.namespaces {
            for (i, ns) in namespaces.iter().enumerate() {
                let field = if namespaces.len() == 1 {
                    "namespace".to_owned()
                } else {
                    format!("namespaces[{i}]")
                };
                crate::engine::validate::label(&field, ns, max_label)?;
            }
        }
        for (i, kind) in q.kinds.iter().enumerate() {
            crate::engine::validate::label(&format!("kinds[{i}]"), kind, max_label)?;
        }
        crate::engine::validate::tags("tags", &q.tags, &self.cfg.limits)?;
        if let Some(m) = q.min_importance {
            crate::engine::validate::unit("min_importance", m)?;
        }
        if self.text.query_terms(&q.text).is_empty() {
            return Err(Error::invalid(
                "query",
                "has no searchable words (only punctuation or symbols)",
                "include at least one word or number",
            ));
        }
        Ok(())
    }

    /// The best `depth` text matches, filters applied by the index (no rows yet), each score
    /// weighed by the memory's coverage of the query, and how many
    /// recent change-log entries the search could not see (see [`Engine::prepare_text_read`]).
    fn text_candidates(&self, q: &RecallQuery, depth: usize) -> Result<TextSide> {
        if self.text.query_terms(&q.text).is_empty() {
            return Ok(TextSide::default());
        }
        let (unseen, head) = self.prepare_text_read_with_head()?;
        let (found, unseen) = match self.text.search(q, depth) {
            Ok(found) => (found, unseen),
            // The index is derived state: when it cannot be read, it is rebuilt, never fatal.
            Err(e) => {
                tracing::warn!(error = %e, "text index unreadable; rebuilding it from the database");
                self.reindex_text()?;
                (self.text.search(q, depth)?, 0)
            }
        };
        // Each score weighed by the share of the query's weight the memory holds (see
        // [`COVERAGE_POWER`]), best first.
        let mut hits: Vec<(MemoryKey, f32)> = found
            .into_iter()
            .map(|h| (h.key, h.score * (h.coverage as f32).powf(COVERAGE_POWER)))
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(TextSide {
            hits,
            unseen,
            rows: KeyMap::default(),
            head: Some(head),
        })
    }

    /// `cands` filtered, scored, sorted, expanded and with duplicates collapsed; `rows` holds
    /// the rows of the candidates (those without one are not live) and gains the neighbours'.
    fn rank(
        &self,
        q: &RecallQuery,
        mut cands: KeyMap<Candidate>,
        rows: &mut KeyMap<Memory>,
        scoring: &Scoring,
        graph: &mut RecallGraph,
    ) -> Result<Vec<(MemoryKey, Candidate, Vec<String>)>> {
        // Vector candidates have not been filtered yet; text ones have (by the index).
        cands.retain(|k, _| rows.get(k).is_some_and(|m| matches(q, m)));
        for (k, c) in cands.iter_mut() {
            scoring.score(c, &rows[k]);
        }
        let mut ranked = sorted(cands);
        if q.expand > 0 && !ranked.is_empty() {
            self.expand(q, &mut ranked, rows, graph, scoring)?;
        }
        if scoring.mode != RecallMode::Text {
            ranked = Engine::collapse_duplicates(ranked, q.depth() + 1, rows);
        }
        Ok(ranked)
    }

    /// The best `depth` text matches (see [`Engine::text_candidates`]) with their rows.
    fn text_side(&self, q: &RecallQuery, depth: usize) -> Result<TextSide> {
        let mut side = self.text_candidates(q, depth)?;
        let mut keys: Vec<MemoryKey> = side.hits.iter().map(|h| h.0).collect();
        keys.sort_unstable();
        side.rows = self.load_rows(&keys, q.include_archived)?;
        Ok(side)
    }

    /// The `depth` nearest memories by vector, scoped to the query's namespaces (by the index's
    /// record of each vector's namespace; by their keys while it lacks some); other filters are
    /// applied by the caller, so a filtered query asks for more: how many more per candidate of
    /// depth is returned beside them.
    fn vector_candidates(&self, q: &RecallQuery, depth: usize) -> Result<(Nearest, usize)> {
        let filtered = !q.kinds.is_empty()
            || !q.tags.is_empty()
            || q.since.is_some()
            || q.until.is_some()
            || q.min_importance.is_some();
        let per_depth = if filtered { FILTER_OVERFETCH } else { 1 };
        let k = depth * per_depth;
        if let NamespaceScope::Only(ns) = &q.namespaces
            && let Some(unplaced) = self.vectors_unplaced()
            && unplaced <= k
        {
            // The index knows each vector's namespace and searches the scope itself (by its
            // graph or a scan, as the scope's share says), no key read from the database. A
            // vector staged a moment ago may not be placed yet: it counts as in scope, so as
            // many more are asked for (the rows are checked against the scope either way).
            let nearest = self.vector_search(&q.text, k + unplaced, Scope::Namespaces(ns))?;
            return Ok((nearest, per_depth));
        }
        let scoped: Option<Vec<u64>> = match &q.namespaces {
            NamespaceScope::Only(ns) => self
                .store
                .read(|c| memories::keys_in_at_most(c, ns, EXACT_SCOPE))?
                .map(|keys| keys.into_iter().map(|k| k.0 as u64).collect()),
            NamespaceScope::All => None,
        };
        match &scoped {
            Some(keys) => Ok((
                self.vector_search(&q.text, k, Scope::Keys(keys))?,
                per_depth,
            )),
            None if matches!(q.namespaces, NamespaceScope::Only(_)) => {
                // A large namespace: over-fetch from the whole index and filter.
                let nearest = self.vector_search(&q.text, k * FILTER_OVERFETCH, Scope::All)?;
                Ok((nearest, per_depth * FILTER_OVERFETCH))
            }
            None => Ok((self.vector_search(&q.text, k, Scope::All)?, per_depth)),
        }
    }

    /// Live rows of `keys` (archived ones only when asked for).
    fn load_rows(&self, keys: &[MemoryKey], archived: bool) -> Result<KeyMap<Memory>> {
        if keys.is_empty() {
            return Ok(KeyMap::default());
        }
        let rows = self.store.read(|c| memories::by_keys(c, keys))?;
        Ok(rows
            .into_iter()
            .filter(|m| m.deleted_at.is_none() && (archived || m.archived_at.is_none()))
            .map(|m| (m.key, m))
            .collect())
    }

    /// Drops, among the first `window` hits, those that say the same as a better-ranked hit
    /// (the same words, give or take case, punctuation and a few words); the kept hit lists
    /// their ids.
    fn collapse_duplicates(
        ranked: Vec<(MemoryKey, Candidate, Vec<String>)>,
        window: usize,
        rows: &KeyMap<Memory>,
    ) -> Vec<(MemoryKey, Candidate, Vec<String>)> {
        let mut kept: Vec<(MemoryKey, Candidate, Vec<String>)> = Vec::with_capacity(ranked.len());
        let mut kept_words: Vec<(usize, Vec<u64>)> = Vec::new();
        for (i, (key, c, dups)) in ranked.into_iter().enumerate() {
            let words = match rows.get(&key) {
                Some(m) if i < window * 2 => word_hashes(&m.content),
                _ => {
                    kept.push((key, c, dups));
                    continue;
                }
            };
            let dup_of = kept_words
                .iter()
                .find(|(_, w)| {
                    may_reach(w.len(), words.len(), DUPLICATE_WORD_OVERLAP)
                        && jaccard(w, &words) >= DUPLICATE_WORD_OVERLAP
                })
                .map(|(j, _)| *j);
            match (dup_of, rows.get(&key)) {
                (Some(j), Some(m)) => kept[j].2.push(m.id.clone()),
                _ => {
                    kept_words.push((kept.len(), words));
                    kept.push((key, c, dups));
                }
            }
        }
        kept
    }
}

/// Candidates best first (ties by key, so equal scores rank the same every time).
fn sorted(cands: KeyMap<Candidate>) -> Vec<(MemoryKey, Candidate, Vec<String>)> {
    let mut v: Vec<_> = cands.into_iter().map(|(k, c)| (k, c, Vec::new())).collect();
    v.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
    v
}

/// A text hit's BM25 score is multiplied by the share of the query's weight (the idf of its
/// terms) the memory holds, to this power. BM25 lets a short memory that holds only the common
/// words of a question ("Caroline: what do you think?") outrank one that holds its rare words;
/// the share puts those back in order. Measured (R@10, default hybrid, 2026-11-26): LoCoMo 0.584
/// → 0.606 (power 1: 0.612), RealMem 0.206 → 0.208 (power 1: 0.201).
pub const COVERAGE_POWER: f32 = 0.5;

/// How one query's text and vector scores are scaled to 0..1 for the fusion: the text score by
/// the best one, the similarity between the last (at least [`MIN_VECTOR_SIMILARITY`]) and the
/// best vector candidate of the list a first page reads ([`MIN_CANDIDATES`], over-fetched as the
/// filters ask). The floor stays there when a deep page reads longer lists, so a candidate's
/// score does not depend on how deep the lists were read, and the pages of one recall cut one
/// ranking. Fusing the scaled scores, rather than the ranks (reciprocal-rank
/// fusion, k 60, before), keeps how far apart two hits are on each signal: a near tie by words
/// is then decided by meaning. Measured (R@10, default weights, 2026-11-26): LoCoMo 0.583 →
/// 0.584, RealMem 0.188 → 0.202.
struct Scale {
    text_best: f32,
    vector_best: f32,
    vector_floor: f32,
    /// The least similarity that counts at all.
    vector_min: f32,
}

impl Scale {
    /// `anchor`: how many of the best vector candidates a first page reads.
    fn of(
        text: &[(MemoryKey, f32)],
        vector: &[(MemoryKey, f32)],
        min: f32,
        anchor: usize,
    ) -> Scale {
        let best = |l: &[(MemoryKey, f32)]| l.iter().map(|h| h.1).fold(f32::MIN, f32::max);
        // The anchor-th best similarity (the worst when fewer), selected rather than sorted.
        let mut similarities: Vec<f32> = vector.iter().map(|h| h.1).collect();
        let floor = match anchor.min(similarities.len()) {
            0 => f32::MAX,
            n => {
                *similarities
                    .select_nth_unstable_by(n - 1, |a, b| b.total_cmp(a))
                    .1
            }
        };
        Scale {
            text_best: best(text),
            vector_best: best(vector),
            vector_floor: floor.max(min),
            vector_min: min,
        }
    }

    fn text(&self, s: f32) -> f32 {
        if self.text_best > 0.0 {
            (s / self.text_best).clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    fn vector(&self, s: f32) -> f32 {
        let span = self.vector_best - self.vector_floor;
        if span > 0.0 {
            ((s - self.vector_floor) / span).clamp(0.0, 1.0)
        } else {
            // One candidate, or all alike: full credit where the similarity counts at all.
            f32::from(s >= self.vector_best && s >= self.vector_min)
        }
    }
}

/// Sets the candidate's score for `mode` and records how it was made.
fn score(
    c: &mut Candidate,
    m: &Memory,
    mode: RecallMode,
    (wt, wv): (f32, f32),
    scale: &Scale,
    now: Millis,
) {
    let e = &mut c.explain;
    e.text_rank = c.text.map(|(r, _)| r);
    e.text_score = c.text.map(|(_, s)| s);
    e.vector_rank = c.vector.map(|(r, _)| r);
    e.vector_similarity = c.vector.map(|(_, s)| s);
    e.importance_boost = 1.0;
    e.recency_boost = 1.0;
    e.salience_boost = 1.0;
    match mode {
        RecallMode::Text => e.fused = c.text.map_or(0.0, |(_, s)| s),
        RecallMode::Vector => e.fused = c.vector.map_or(0.0, |(_, s)| s),
        RecallMode::Hybrid => {
            // A weighted mean of scaled scores: 1 when first in both lists, the text weight's
            // share (0.74 at the defaults) when first by words and not found by meaning.
            e.fused = (c.text.map_or(0.0, |(_, s)| wt * scale.text(s))
                + c.vector.map_or(0.0, |(_, s)| wv * scale.vector(s)))
                / (wt + wv).max(f32::MIN_POSITIVE);
            e.importance_boost = importance_boost(m.importance);
            e.recency_boost = recency_boost(m.created_at, now);
            e.salience_boost = salience_boost(crate::engine::curate::salience::of(m, now));
        }
    }
    e.score = e.fused * e.importance_boost * e.recency_boost * e.salience_boost;
    c.score = e.score;
}

/// The importance multiplier (1 at the default importance 0.5).
pub fn importance_boost(importance: f64) -> f32 {
    1.0 + IMPORTANCE_BOOST * (importance as f32 - 0.5)
}

/// The salience multiplier (1 at salience 0.5).
pub fn salience_boost(salience: f64) -> f32 {
    1.0 + SALIENCE_BOOST * (salience as f32 - 0.5)
}

/// The recency multiplier: 1 + RECENCY_BOOST halved every half-life of age.
pub fn recency_boost(created_at: Millis, now: Millis) -> f32 {
    let age = (now - created_at).max(0) as f64;
    1.0 + RECENCY_BOOST * (0.5f64.powf(age / RECENCY_HALF_LIFE_MS)) as f32
}

/// True when memory `m` passes every filter of `q`.
fn matches(q: &RecallQuery, m: &Memory) -> bool {
    if let NamespaceScope::Only(ns) = &q.namespaces
        && !ns.contains(&m.namespace)
    {
        return false;
    }
    (q.kinds.is_empty() || q.kinds.contains(&m.kind))
        && q.tags.iter().all(|t| m.tags.contains(t))
        && q.since.is_none_or(|s| m.created_at >= s)
        && q.until.is_none_or(|u| m.created_at <= u)
        && q.min_importance.is_none_or(|i| m.importance >= i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_scaled_to_the_best_of_each_list() {
        let k = MemoryKey;
        let text = [(k(1), 8.0), (k(2), 2.0)];
        let vector = [(k(2), 0.9), (k(3), 0.6), (k(1), 0.5)];
        let s = Scale::of(&text, &vector, MIN_VECTOR_SIMILARITY, MIN_CANDIDATES);
        assert_eq!((s.text(8.0), s.text(2.0)), (1.0, 0.25));
        assert_eq!((s.vector(0.9), s.vector(0.5)), (1.0, 0.0));
        assert!((s.vector(0.6) - 0.25).abs() < 1e-6);
        // The floor is at least the similarity that counts at all.
        let s = Scale::of(
            &text,
            &[(k(2), 0.9), (k(1), 0.1)],
            MIN_VECTOR_SIMILARITY,
            MIN_CANDIDATES,
        );
        assert_eq!(s.vector(0.35), 0.0);
        // One vector candidate: full credit only when it counts at all.
        let m = MIN_VECTOR_SIMILARITY;
        assert_eq!(
            Scale::of(&text, &[(k(2), 0.9)], m, MIN_CANDIDATES).vector(0.9),
            1.0
        );
        assert_eq!(
            Scale::of(&text, &[(k(2), 0.2)], m, MIN_CANDIDATES).vector(0.2),
            0.0
        );
        assert_eq!(Scale::of(&[], &[], m, MIN_CANDIDATES).text(3.0), 0.0);
        // Without a text hit, less similarity counts.
        let alone = MIN_VECTOR_SIMILARITY_ALONE;
        assert_eq!(
            Scale::of(&[], &[(k(2), 0.3)], alone, MIN_CANDIDATES).vector(0.3),
            1.0
        );
        // A deeper list (a later page) keeps the floor of the first MIN_CANDIDATES: every
        // candidate scores as on the first page.
        let list = |n: usize| -> Vec<(MemoryKey, f32)> {
            (0..n)
                .map(|i| (k(i as i64), 0.9 - 0.5 * i as f32 / 300.0))
                .collect()
        };
        let (first, deeper) = (
            Scale::of(&text, &list(MIN_CANDIDATES), m, MIN_CANDIDATES),
            Scale::of(&text, &list(260), m, MIN_CANDIDATES),
        );
        for (_, sim) in list(MIN_CANDIDATES) {
            assert_eq!(first.vector(sim).to_bits(), deeper.vector(sim).to_bits());
        }
        assert_eq!(deeper.vector(list(260)[200].1), 0.0);
    }

    #[test]
    fn boosts_are_neutral_at_defaults_and_bounded() {
        assert_eq!(importance_boost(0.5), 1.0);
        assert_eq!(salience_boost(0.5), 1.0);
        assert!((salience_boost(1.0) - 1.05).abs() < 1e-6);
        assert!((importance_boost(1.0) - 1.1).abs() < 1e-6);
        assert!((recency_boost(0, 0) - 1.1).abs() < 1e-6);
        let half = RECENCY_HALF_LIFE_MS as i64;
        assert!((recency_boost(0, half) - 1.05).abs() < 1e-6);
        assert!(recency_boost(0, 100 * half) < 1.0001);
    }
}
