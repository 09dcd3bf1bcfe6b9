//! The matches of a union of words that can pass a bar, in one segment: MaxScore (Turtle and
//! Flood, 1995).
//!
//! Each word has a most it can add to a score (its BM25 weight at an unbounded term frequency).
//! Taken from the smallest up, the words whose mosts sum to no more than the bar cannot lift a
//! memory over it on their own; they are *non-essential*. Only the other words' postings are
//! walked, memory by memory; a non-essential word is looked up (a seek into its postings) for a
//! memory only while that memory's score so far plus what the words left could add still passes
//! the bar. As the bar rises, more words become non-essential and the walk thins.
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
        if self.postings.doc() < doc {
            self.postings.seek(doc)
        } else {
            self.postings.doc()
        }
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
    while first < count {
        let doc = cursors[first..]
            .iter()
            .map(Cursor::doc)
            .min()
            .unwrap_or(TERMINATED);
        if doc == TERMINATED {
            break;
        }
        // Leapfrog with the filters: the words' cursors jump to the next memory they let in.
        if let Some(within) = within.as_mut() {
            let mut next = within.doc();
            if next < doc {
                next = within.seek(doc);
            }
            if next == TERMINATED {
                break;
            }
            if next != doc {
                for c in &mut cursors[first..] {
                    c.seek(next);
                }
                continue;
            }
        }
        let mut score: Score = 0.0;
        for c in &mut cursors[first..] {
            if c.doc() == doc {
                score += c.score();
                c.postings.advance();
            }
        }
        // The non-essential words, the largest first, while they can still lift it over the bar.
        let mut left = first;
        while left > 0 && score + below[left] > bar {
            left -= 1;
            let c = &mut cursors[left];
            if c.seek(doc) == doc {
                score += c.score();
            }
        }
        if left == 0 && score > bar {
            bar = found(doc, score);
            first = essential_from(bar);
        }
    }
    Ok(())
}
