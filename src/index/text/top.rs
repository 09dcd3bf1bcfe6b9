//! The best matches of a query in one searcher, by score and then by memory key.
//!
//! Two steps. First the candidates: every segment is searched with one bar for all — a segment
//! starts from the score the ones before it set (the search skips what cannot pass it), largest
//! segment first, where tantivy's collector starts each segment from zero; the search is
//! [`maxscore`](super::maxscore)'s, filters checked as it goes. Then each
//! candidate's score is summed anew, clause by clause in the query's order: block-max WAND adds
//! a document's term scores in an order that depends on its path through the postings, so the
//! same memory could score a bit differently in another split of the index, and equal scores
//! would not always be ordered by key. The summed-anew score depends only on the memory and the
//! query, so a rebuilt or merged index pages exactly like the old one. The bar keeps a margin
//! ([`NEAR`]) below the last score kept, so nothing that could tie after the sum is skipped.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;

use tantivy::columnar::ColumnValues;
use tantivy::query::{Bm25StatisticsProvider, Bm25Weight, EnableScoring, Query};
use tantivy::{DocAddress, DocSet, Score, Searcher, SegmentReader, Term};

use super::maxscore;
use crate::error::Result;
use crate::model::MemoryKey;

/// Relative margin below the last score kept within which candidates are kept too: far wider
/// than the rounding of a sum of up to 65 term scores in two orders (about 4e-6), far narrower
/// than the gap between two memories that differ in any word.
const NEAR: Score = 1e-4;

/// The word clauses of a query in its order (its terms in the content field, then the whole-name
/// term when there is one), each with the BM25 weight tantivy scores it with.
pub(super) struct Clauses(Vec<(Term, Bm25Weight)>);

impl Clauses {
    pub(super) fn new(terms: Vec<Term>, stats: &dyn Bm25StatisticsProvider) -> Result<Clauses> {
        let weighted = terms
            .into_iter()
            .map(|term| {
                let weight = Bm25Weight::for_terms(stats, std::slice::from_ref(&term))?;
                Ok((term, weight))
            })
            .collect::<tantivy::Result<Vec<_>>>()?;
        Ok(Clauses(weighted))
    }
}

/// One of the best matches: its memory, its score, which clauses it holds (bit `i` for clause
/// `i`) and where it is in the searcher.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Match {
    pub key: MemoryKey,
    pub score: Score,
    pub held: u128,
    pub address: DocAddress,
}

/// The best `limit` live matches after `offset`, by score (summed clause by clause as
/// [`Clauses`] lists them) and then by key. The matches are the memories holding one of
/// `clauses`' terms and, with `within`, matching that query too (it scores nothing). The key
/// comes from its fast field, so no stored document is read.
pub(super) fn top_matches(
    searcher: &Searcher,
    within: Option<&dyn Query>,
    clauses: &Clauses,
    offset: usize,
    limit: usize,
) -> Result<Vec<Match>> {
    let want = offset + limit;
    if want == 0 {
        return Ok(Vec::new());
    }
    let found = candidates(searcher, within, clauses, want)?;
    let mut matches = rescored(searcher, clauses, found)?;
    matches.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
    matches.truncate(want);
    matches.drain(..offset.min(matches.len()));
    Ok(matches)
}

/// Every live match (of any of `clauses`' terms, and of `within`) whose score is within
/// [`NEAR`] of the `n`-th best or above it (all matches when there are at most `n`). Anything
/// left out scores below that.
fn candidates(
    searcher: &Searcher,
    within: Option<&dyn Query>,
    clauses: &Clauses,
    n: usize,
) -> Result<Vec<DocAddress>> {
    let within = within
        .map(|q| q.weight(EnableScoring::disabled_from_searcher(searcher)))
        .transpose()?;
    let readers = searcher.segment_readers();
    // The largest segment first: it holds most of the best matches, so the bar it leaves is
    // the highest the smaller ones can start from.
    let mut order: Vec<usize> = (0..readers.len()).collect();
    order.sort_by_key(|&i| Reverse(readers[i].num_docs()));
    let mut best = Best::new(n);
    for ord in order {
        let reader = &readers[ord];
        let alive = reader.alive_bitset();
        let bar = best.bar;
        let mut within = within.as_ref().map(|w| w.scorer(reader, 1.0)).transpose()?;
        let within = within.as_deref_mut().map(|s| s as &mut dyn DocSet);
        maxscore::for_each_above(reader, &clauses.0, within, bar, &mut |doc, score| {
            if alive.is_some_and(|a| a.is_deleted(doc)) {
                return best.bar;
            }
            best.offer(score, DocAddress::new(ord as u32, doc))
        })?;
    }
    Ok(best.candidates())
}

/// The best `n` scores offered so far (the lowest on top), and every match offered: searches
/// offer only those above the bar, so few more than `n` once the bar rises.
struct Best {
    n: usize,
    scores: BinaryHeap<Reverse<Ranked>>,
    seen: Vec<(Score, DocAddress)>,
    /// Within [`NEAR`] below the `n`-th best score once there are `n`.
    bar: Score,
}

impl Best {
    fn new(n: usize) -> Best {
        Best {
            n,
            scores: BinaryHeap::with_capacity(n),
            seen: Vec::with_capacity(2 * n),
            bar: Score::MIN,
        }
    }

    /// Takes a match in; answers the bar from now on.
    fn offer(&mut self, score: Score, address: DocAddress) -> Score {
        self.seen.push((score, address));
        if self.scores.len() < self.n {
            self.scores.push(Reverse(Ranked(score)));
        } else if let Some(mut low) = self.scores.peek_mut()
            && score > low.0.0
        {
            // One sift down, where popping and pushing would sift twice.
            *low = Reverse(Ranked(score));
        }
        if self.scores.len() == self.n {
            self.bar = near(self.scores.peek().map_or(Score::MIN, |low| low.0.0));
            if self.seen.len() >= 4 * self.n + 64 {
                let bar = self.bar;
                self.seen.retain(|(s, _)| *s > bar);
            }
        }
        self.bar
    }

    fn candidates(self) -> Vec<DocAddress> {
        let bar = self.bar;
        self.seen
            .into_iter()
            .filter(|(s, _)| *s > bar)
            .map(|(_, address)| address)
            .collect()
    }
}

/// The bar for candidates when the `n`-th best scores `kth`.
fn near(kth: Score) -> Score {
    kth - kth.abs() * NEAR
}

/// `found` with their keys, their scores summed clause by clause in `clauses`' order, and the
/// clauses they hold: a seek per candidate and clause, candidates taken in document order.
fn rescored(
    searcher: &Searcher,
    clauses: &Clauses,
    mut found: Vec<DocAddress>,
) -> Result<Vec<Match>> {
    found.sort_unstable_by_key(|a| (a.segment_ord, a.doc_id));
    let mut matches: Vec<Match> = Vec::with_capacity(found.len());
    for segment in found.chunk_by(|a, b| a.segment_ord == b.segment_ord) {
        let reader = searcher.segment_reader(segment[0].segment_ord);
        let keys = key_column(reader);
        let first = matches.len();
        matches.extend(segment.iter().map(|&address| Match {
            key: MemoryKey(keys.as_ref().map_or(0, |k| k.get_val(address.doc_id)) as i64),
            score: 0.0,
            held: 0,
            address,
        }));
        let matches = &mut matches[first..];
        for (c, (term, weight)) in clauses.0.iter().enumerate() {
            let Some(mut cursor) = maxscore::Cursor::open(reader, term, weight)? else {
                continue;
            };
            for m in matches.iter_mut() {
                if cursor.seek(m.address.doc_id) == m.address.doc_id {
                    m.score += cursor.score();
                    // A query has at most 65 clauses (64 terms and a name).
                    m.held |= 1u128.checked_shl(c as u32).unwrap_or(0);
                }
            }
        }
    }
    Ok(matches)
}

/// A score in the heap of the best (scores are never NaN).
struct Ranked(Score);

impl Ord for Ranked {
    fn cmp(&self, other: &Ranked) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Ranked) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Ranked) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

/// The memory key column of a segment (`None` when it cannot be read: keys then read as 0).
fn key_column(segment: &SegmentReader) -> Option<Arc<dyn ColumnValues<u64>>> {
    segment
        .fast_fields()
        .u64("key")
        .ok()
        .map(|c| c.first_or_default_col(0))
}

#[cfg(test)]
pub(super) fn every_match(
    searcher: &Searcher,
    query: &dyn Query,
    clauses: &Clauses,
) -> Result<Vec<Match>> {
    let all = searcher.search(query, &tantivy::collector::DocSetCollector)?;
    let mut matches = rescored(searcher, clauses, all.into_iter().collect())?;
    matches.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
    Ok(matches)
}
