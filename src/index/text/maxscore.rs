//! The matches of a union of words that can pass a bar, in one segment: MaxScore (Turtle and
//! Flood, 1995).
//!
//! Each word has a most it can add to a score (its BM25 weight at an unbounded term frequency).
//! Taken from the smallest up, the words whose mosts sum to no more than the bar cannot lift a
//! memory over it on their own; they are *non-essential*. Only the other words' postings are
//! walked; a non-essential word is looked up (a seek into its postings) for a memory only while
//! that memory's score so far plus what the words left could add still passes the bar. As the
//! bar rises, more words become non-essential and the walk thins.
//!
//! The essential words are walked over a window of [`WINDOW`] documents at a time, one word
//! after the other, their scores summed into an array by document (as Lucene's MaxScore bulk
//! scorer does); then the window's documents are taken in order. Walked memory by memory,
//! every step found the least document among the essential words' cursors and checked each of
//! them against it: at 100,000 memories the text search took 2.4 M of a text recall's 3.6 M
//! instructions, by windows 1.6 M of 2.8 M (windows of 256–2,048 documents alike; 16,384: 3.3 M
//! a recall, as the essential words are chosen anew only between windows). A window's sums may
//! differ in the last bits from a walk memory by memory (its essential words are those of the
//! window's start); [`top`](super::top) keeps a margin and sums the matches anew in the
//! query's order, so the pages are the same.
//!
//! tantivy's block-max WAND, which this replaces, chooses a pivot and
//! reorders its cursors at every step, and recomputes block bounds as it goes; on a memory
//! store's queries (a few to a few dozen words over short texts) those steps cost more than the
//! blocks it skips (text search 3.7 → 2.3 M instructions per recall at 100,000 memories). The
//! walk reads only tantivy's public postings, so it cannot skip whole blocks unread.

use tantivy::fieldnorm::FieldNormReader;
use tantivy::postings::{Postings, SegmentPostings};
use tantivy::query::Bm25Weight;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocId, DocSet, Score, SegmentReader, TERMINATED, Term};

use crate::error::Result;

/// How many documents the essential words are summed over at a time: 4 KB of scores, the
/// documents holding one of them kept in a bit set, in order.
pub(super) const WINDOW: DocId = 1_024;

/// One word's postings in a segment, scored as tantivy's term scorer scores them.
pub(super) struct Cursor {
    postings: SegmentPostings,
    norms: FieldNormReader,
    weight: Bm25Weight,
    /// The most this word adds to a score.
    most: Score,
}

impl Cursor {
    /// The postings of `term` in `reader`, on their first document; `None` when it has none.
    pub(super) fn open(
        reader: &SegmentReader,
        term: &Term,
        weight: &Bm25Weight,
    ) -> Result<Option<Cursor>> {
        let inverted = reader.inverted_index(term.field())?;
        let Some(postings) = inverted.read_postings(term, IndexRecordOption::WithFreqs)? else {
            return Ok(None);
        };
        if postings.doc() == TERMINATED {
            return Ok(None);
        }
        // As tantivy's term scorer: a field without norms scores as if one token long.
        let norms = reader
            .fieldnorms_readers()
            .get_field(term.field())?
            .unwrap_or_else(|| FieldNormReader::constant(reader.max_doc(), 1));
        Ok(Some(Cursor {
            postings,
            norms,
            weight: weight.clone(),
            most: weight.max_score(),
        }))
    }

    pub(super) fn doc(&self) -> DocId {
        self.postings.doc()
    }

    /// Moves to the first document at or after `doc` (never back).
    pub(super) fn seek(&mut self, doc: DocId) -> DocId {
        at_or_after(&mut self.postings, doc)
    }

    /// This word's score in the document it is on.
    pub(super) fn score(&self) -> Score {
        let doc = self.postings.doc();
        self.weight
            .score(self.norms.fieldnorm_id(doc), self.postings.term_freq())
    }
}

/// Calls `found` with every document of `reader` holding one of `clauses`' terms (and in
/// `within`, when given: the filters) whose score (the sum of its terms' BM25 scores) is above
/// `bar`, in document order; `found` answers the bar from then on, which only rises. May leave
/// out a document scoring above the bar by a rounding error (sums in another order): callers
/// keep a margin below the score they need.
pub(super) fn for_each_above(
    reader: &SegmentReader,
    clauses: &[(Term, Bm25Weight)],
    mut within: Option<&mut dyn DocSet>,
    mut bar: Score,
    found: &mut dyn FnMut(DocId, Score) -> Score,
) -> Result<()> {
    let mut cursors = Vec::with_capacity(clauses.len());
    for (term, weight) in clauses {
        cursors.extend(Cursor::open(reader, term, weight)?);
    }
    cursors.sort_by(|a, b| a.most.total_cmp(&b.most));
    // `below[i]`: the most the first `i` cursors add together.
    let below: Vec<Score> = std::iter::once(0.0)
        .chain(cursors.iter().scan(0.0, |sum, c| {
            *sum += c.most;
            Some(*sum)
        }))
        .collect();
    // The first essential cursor: those before it cannot pass the bar together.
    let count = cursors.len();
    let essential_from = |bar: Score| (0..count).find(|&i| below[i + 1] > bar).unwrap_or(count);
    let mut first = essential_from(bar);
    // A window's essential scores by document (less its start), and which documents hold one.
    let mut scores = vec![0.0 as Score; WINDOW as usize];
    let mut held = [0u64; WINDOW as usize / 64];
    while first < count {
        let mut start = cursors[first..]
            .iter()
            .map(Cursor::doc)
            .min()
            .unwrap_or(TERMINATED);
        if start == TERMINATED {
            break;
        }
        // Leapfrog with the filters: the words' cursors jump to the next memory they let in.
        if let Some(within) = within.as_mut() {
            let next = at_or_after(*within, start);
            if next == TERMINATED {
                break;
            }
            if next != start {
                for c in &mut cursors[first..] {
                    c.seek(next);
                }
                start = next;
            }
        }
        // The essential words' postings in the window, one word at a time.
        // Never past the last document, so the end of the postings is never a window's slot.
        let end = start.saturating_add(WINDOW).min(TERMINATED);
        for c in &mut cursors[first..] {
            let mut doc = c.doc();
            while doc < end {
                let i = (doc - start) as usize;
                scores[i] += c.score();
                held[i / 64] |= 1 << (i % 64);
                doc = c.postings.advance();
            }
        }
        // Its documents in order: the non-essential words, the largest first, while they can
        // still lift one over the bar.
        let window_first = first;
        for (w, word) in held.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let mut score = std::mem::take(&mut scores[i]);
                let doc = start + i as DocId;
                if within.as_mut().is_some_and(|w| at_or_after(*w, doc) != doc) {
                    continue;
                }
                let mut left = window_first;
                while left > 0 && score + below[left] > bar {
                    left -= 1;
                    let c = &mut cursors[left];
                    if c.seek(doc) == doc {
                        score += c.score();
                    }
                }
                if left == 0 && score > bar {
                    bar = found(doc, score);
                }
            }
        }
        first = essential_from(bar);
    }
    Ok(())
}

/// Moves `set` to its first document at or after `doc`, never back (tantivy's `seek` asks for a
/// target not behind the set).
fn at_or_after<D: DocSet + ?Sized>(set: &mut D, doc: DocId) -> DocId {
    if set.doc() < doc {
        set.seek(doc)
    } else {
        set.doc()
    }
}
