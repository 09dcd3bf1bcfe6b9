//! Graph expansion: the neighbours of the hits that can reach the page join the ranking with a
//! share of their source's score, and in hybrid mode a neighbour of a short hit earns the rest
//! of it by its own closeness to the query in meaning.

use std::collections::HashMap;

use super::{
    Candidate, EXPAND_DECAY, EXPAND_FANOUT, HUB_DEGREE, MIN_VECTOR_SIMILARITY, RecallGraph,
    Scoring, matches,
};
use crate::engine::Engine;
use crate::error::Result;
use crate::model::{Explain, KeyHashing, KeyMap, Memory, MemoryKey, RecallMode, RecallQuery, Via};

/// In hybrid mode a neighbour reached (in one hop or two) from a short hit keeps this share of what it inherits
/// whatever its meaning; the rest in proportion to how close it is to the query by meaning (its
/// similarity above [`MIN_VECTOR_SIMILARITY`] as a share of the best vector candidate's). A
/// short turn that matches says only itself: the turn beside it must show its own relevance,
/// or it takes a place from a direct match (see docs/design/recall.md, "Expansion by default").
pub const NEIGHBOUR_KEPT_SHARE: f32 = 0.5;
/// A hit of this many words or more passes its score on whole: a long memory that matches (an
/// answer of many sentences) speaks for the exchange it belongs to, and its neighbour is usually
/// what it answers. Shorter hits gate their neighbours in proportion.
pub const LONG_SOURCE_WORDS: f32 = 60.0;

/// How a neighbour's inheritance is gated by its own meaning, per recall.
struct Gate<'a> {
    /// Similarity to the query per reached neighbour that has a vector.
    similarity: KeyMap<f32>,
    best: f32,
    /// Words of each hit expanded from, counted once.
    words: KeyMap<usize>,
    rows: &'a KeyMap<Memory>,
}

impl Gate<'_> {
    /// The share of what a neighbour inherits that it keeps when reached from the hit `seed`.
    fn share(&mut self, neighbour: MemoryKey, seed: MemoryKey) -> f32 {
        let rows = self.rows;
        let words = *self.words.entry(seed).or_insert_with(|| {
            rows.get(&seed)
                .map_or(0, |m| m.content.split_whitespace().count())
        });
        let shortness = 1.0 - (words as f32 / LONG_SOURCE_WORDS).min(1.0);
        let span = self.best - MIN_VECTOR_SIMILARITY;
        let meaning = match self.similarity.get(&neighbour) {
            Some(s) if span > 0.0 => ((s - MIN_VECTOR_SIMILARITY) / span).clamp(0.0, 1.0),
            _ => 0.0,
        };
        1.0 - shortness * (1.0 - NEIGHBOUR_KEPT_SHARE) * (1.0 - meaning)
    }
}

impl Engine {
    /// Adds the graph neighbours (up to `q.expand` hops) of the hits that can reach the page,
    /// each with its source's score decayed per hop and by the relation's weight (gated by its
    /// own meaning in hybrid mode, see [`NEIGHBOUR_KEPT_SHARE`]). A neighbour already ranked
    /// keeps the higher of its own and the inherited score.
    pub(super) fn expand(
        &self,
        q: &RecallQuery,
        ranked: &mut Vec<(MemoryKey, Candidate, Vec<String>)>,
        rows: &mut KeyMap<Memory>,
        graph: &mut RecallGraph,
        scoring: &Scoring,
    ) -> Result<()> {
        let seeds: Vec<(MemoryKey, f32)> = ranked
            .iter()
            .take(q.depth())
            .map(|(k, c, _)| (*k, c.score))
            .collect();
        // (neighbour) -> (inherited score, the hit whose relations reached it, via)
        let mut reached = KeyMap::<(f32, MemoryKey, Via)>::default();
        // Relations per memory, each counted once per recall (a hub may neighbour many hits).
        let mut degrees: HashMap<i64, f32, KeyHashing> = HashMap::default();
        let view = match graph.view.take() {
            Some(v) => v,
            None => match graph.head {
                Some(head) => self.synced_graph_at(head)?,
                None => self.synced_graph()?,
            },
        };
        {
            let g: &crate::graph::MemoryGraph = &view;
            // (memory, its score, the hit it was reached from, that hit's id)
            let mut frontier: Vec<(MemoryKey, f32, MemoryKey, String)> = seeds
                .iter()
                .filter_map(|(k, s)| rows.get(k).map(|m| (*k, *s, *k, m.id.clone())))
                .collect();
            for hop in 1..=q.expand {
                let mut next = Vec::new();
                for (key, s, seed, from_id) in &frontier {
                    let mut nbrs: Vec<(i64, f32, String, bool)> = Vec::new();
                    g.adjacent(key.0, |nbr, kind, weight, forward| {
                        nbrs.push((nbr, weight, kind.to_owned(), forward));
                    });
                    let own = nbrs.len() as f32;
                    nbrs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                    for (nbr, w, kind, forward) in nbrs.into_iter().take(EXPAND_FANOUT) {
                        let theirs = *degrees.entry(nbr).or_insert_with(|| {
                            let mut n = 0usize;
                            g.adjacent(nbr, |_, _, _, _| n += 1);
                            n as f32
                        });
                        let hub = (HUB_DEGREE / (own * theirs).sqrt()).min(1.0);
                        let inherited = s * EXPAND_DECAY * w.clamp(0.0, 1.0) * hub;
                        let nk = MemoryKey(nbr);
                        let better = reached.get(&nk).is_none_or(|(old, _, _)| inherited > *old);
                        if better && inherited > 0.0 {
                            let via = Via {
                                from: from_id.clone(),
                                relation: kind,
                                forward,
                                hops: hop,
                            };
                            reached.insert(nk, (inherited, *seed, via));
                            next.push((nk, inherited, *seed, from_id.clone()));
                        }
                    }
                }
                frontier = next;
            }
        }
        graph.view = Some(view);
        let missing: Vec<MemoryKey> = reached
            .keys()
            .filter(|k| !rows.contains_key(k))
            .copied()
            .collect();
        rows.extend(self.load_rows(&missing, q.include_archived)?);
        let gated = scoring.mode == RecallMode::Hybrid && !scoring.query_vector.is_empty();
        let similarity = if gated {
            let mut keys: Vec<MemoryKey> = reached.keys().copied().collect();
            keys.sort_unstable();
            self.similarities_to(&scoring.query_vector, &keys)?
        } else {
            KeyMap::default()
        };
        let mut gate = Gate {
            similarity,
            best: scoring.scale.vector_best,
            words: KeyMap::default(),
            rows,
        };
        let mut index: KeyMap<usize> = ranked
            .iter()
            .enumerate()
            .map(|(i, (k, _, _))| (*k, i))
            .collect();
        for (key, (inherited, seed, via)) in reached {
            let Some(m) = gate.rows.get(&key) else {
                continue;
            };
            if !matches(q, m) {
                continue;
            }
            let inherited = if gated {
                inherited * gate.share(key, seed)
            } else {
                inherited
            };
            match index.get(&key) {
                Some(&i) => {
                    let c = &mut ranked[i].1;
                    if inherited > c.score {
                        c.score = inherited;
                        c.explain.expanded = Some(inherited);
                        c.explain.score = inherited;
                        c.via = Some(via);
                    }
                }
                None => {
                    let c = Candidate {
                        via: Some(via),
                        score: inherited,
                        explain: Explain {
                            expanded: Some(inherited),
                            importance_boost: 1.0,
                            recency_boost: 1.0,
                            salience_boost: 1.0,
                            score: inherited,
                            ..Explain::default()
                        },
                        ..Candidate::default()
                    };
                    index.insert(key, ranked.len());
                    ranked.push((key, c, Vec::new()));
                }
            }
        }
        ranked.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
        Ok(())
    }
}
