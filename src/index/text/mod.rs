//! The tantivy full-text index: BM25 over a memory's words (its content, and the words of its name
//! the content lacks: a word counts once, wherever it is), filters on namespace, kind, tags, time
//! and importance. Derived state: it records the change-log position it applied (database id,
//! `seq`, the entry's stamp) in its commit payload and is rebuilt from SQLite when missing, stale,
//! corrupt or built from another history. It never reads SQLite itself.
//!
//! Beside the committed index lies an *overlay*: a small in-memory index of the memories changed
//! after the committed position, fed by the engine from the change log. Searches answer from both
//! (committed hits of overlaid memories are left out, so the overlay's newer version wins), so a
//! read sees every committed write without waiting for whichever process holds the index writer.
//!
//! Size: the tantivy façade — schema, writer, reader, the search with its filters — shares one
//! index handle and its commit position; the analyzer lives beside it.

mod analyzer;
mod maxscore;
mod top;

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};

use tantivy::directory::MmapDirectory;
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, RangeQuery, TermQuery, TermSetQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::error::Result;
use crate::index::text::analyzer::analyzer;
use crate::lock;
use crate::model::{LogPosition, MemoryKey, Millis, NamespaceScope, RecallQuery};
use top::{Clauses, Match, top_matches};

/// Bumped whenever the schema, the analyzer or the payload changes; an index of another version
/// is rebuilt. (4: the payload names the database and the stamp of the entry it applied; 5: one
/// field of words, the name's joining the content's, instead of a boosted name field; the whole
/// name as one term.)
const TEXT_SCHEMA_VERSION: u32 = 5;
const ANALYZER: &str = "mnemo";
/// Up to this many committed entries replaced by the overlay are dropped from a search's hits
/// (which asks for as many more); beyond, the query excludes them, which forgoes pruning.
const HIDE_BY_DROPPING: usize = 1_024;
/// Longest query, in terms, that is searched; the rest of a very long query is ignored.
const MAX_QUERY_TERMS: usize = 64;

/// One match of [`TextIndex::search`]: the memory, its BM25 score, and the share of the
/// query's weight (inverse document frequency) its words hold, 1 when it holds every term
/// (see [`TextIndex::coverage`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextHit {
    pub key: MemoryKey,
    pub score: f32,
    pub coverage: f64,
}

/// What the text index holds of one memory.
#[derive(Debug, Clone, PartialEq)]
pub struct TextDoc {
    pub key: MemoryKey,
    pub namespace: String,
    pub kind: String,
    pub name: Option<String>,
    pub content: String,
    pub tags: Vec<String>,
    pub created_at: Millis,
    pub importance: f64,
}

/// One change to apply.
#[derive(Debug, Clone, PartialEq)]
pub enum TextOp {
    Upsert(TextDoc),
    Delete(MemoryKey),
}

#[derive(Clone, Copy)]
struct Fields {
    key: Field,
    namespace: Field,
    kind: Field,
    tags: Field,
    /// The whole name as one term (see [`name_key`]): a query that is a memory's name finds it.
    name: Field,
    /// The content, then the name's words the content does not hold (see [`words_of`]).
    content: Field,
    created: Field,
    importance: Field,
    /// Exact token counts of `content`, so statistics can leave deleted documents out.
    content_tokens: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        key: b.add_u64_field("key", INDEXED | FAST),
        namespace: b.add_text_field("namespace", STRING),
        kind: b.add_text_field("kind", STRING),
        tags: b.add_text_field("tags", STRING),
        name: b.add_text_field(
            "name",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("raw")
                    .set_index_option(IndexRecordOption::WithFreqs),
            ),
        ),
        content: b.add_text_field("content", text),
        created: b.add_i64_field("created", INDEXED | FAST),
        importance: b.add_f64_field("importance", INDEXED | FAST),
        content_tokens: b.add_u64_field("content_tokens", FAST),
    };
    (b.build(), fields)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Payload {
    version: u32,
    seq: i64,
    #[serde(default)]
    database: String,
    #[serde(default)]
    stamp: i64,
}

impl Payload {
    fn of(position: &LogPosition) -> Payload {
        Payload {
            version: TEXT_SCHEMA_VERSION,
            seq: position.seq,
            database: position.database.clone(),
            stamp: position.stamp,
        }
    }
}

fn parse_payload(payload: Option<&str>) -> Option<Payload> {
    payload
        .and_then(|p| serde_json::from_str::<Payload>(p).ok())
        .filter(|p| p.version == TEXT_SCHEMA_VERSION)
}

/// How the index came up when it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenState {
    /// It was there and of this version.
    Existing,
    /// It was missing; a new empty one was made.
    Created,
    /// It was unreadable or of another version; it was wiped and made anew.
    Recreated,
}

/// Full-text index over memories.
pub struct TextIndex {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    writer: Mutex<Option<IndexWriter>>,
    writer_bytes: usize,
    /// The change-log position the current reader reflects (a lower bound).
    reader_seq: AtomicI64,
    /// Memories changed after the committed position, searchable beside the index.
    overlay: RwLock<Option<Overlay>>,
    /// The committed metadata file of an index on disk (`None` in memory), and its bytes when
    /// the reader last reloaded (see [`TextIndex::refresh`]).
    meta_file: Option<std::path::PathBuf>,
    seen_meta: Mutex<Option<Vec<u8>>>,
}

/// An in-memory index of memories changed after what the committed index holds.
struct Overlay {
    writer: IndexWriter,
    reader: IndexReader,
    /// The change-log position the overlay is complete up to.
    head: i64,
    /// Each overlaid memory with the position of its newest change; its committed version (if
    /// any) is left out of searches.
    keys: HashMap<u64, i64>,
}

/// What the text index can answer right now, for a read deciding how to catch up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextPosition {
    /// What the committed index holds.
    pub committed: i64,
    /// What committed index and overlay hold together.
    pub searchable: i64,
    /// Memories in the overlay.
    pub overlaid: usize,
}

impl TextIndex {
    /// Opens the index in `dir`, making it when missing and remaking it when it cannot be used.
    pub fn open(dir: &Path, writer_bytes: usize) -> Result<(TextIndex, OpenState)> {
        std::fs::create_dir_all(dir)?;
        let (schema, _) = schema();
        let mut state;
        let index = match Self::open_existing(dir, &schema) {
            Ok(Some(index)) => {
                state = OpenState::Existing;
                index
            }
            Ok(None) => {
                state = OpenState::Created;
                match Index::create_in_dir(dir, schema.clone()) {
                    Ok(index) => index,
                    // Another process made it since the look (two servers started at once on a
                    // new database): that one is used.
                    Err(tantivy::TantivyError::IndexAlreadyExists) => {
                        state = OpenState::Existing;
                        Index::open_in_dir(dir)?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), %reason, "text index unusable; rebuilding it from the database");
                state = OpenState::Recreated;
                std::fs::remove_dir_all(dir)?;
                std::fs::create_dir_all(dir)?;
                Index::create_in_dir(dir, schema.clone())?
            }
        };
        let mut text = Self::from_index(index, writer_bytes)?;
        text.meta_file = Some(dir.join("meta.json"));
        Ok((text, state))
    }

    /// `Ok(None)` when there is no index in `dir`; `Err(reason)` when there is one that cannot be used.
    fn open_existing(dir: &Path, schema: &Schema) -> std::result::Result<Option<Index>, String> {
        let directory = MmapDirectory::open(dir).map_err(|e| e.to_string())?;
        match Index::exists(&directory) {
            Ok(false) => return Ok(None),
            Ok(true) => {}
            Err(e) => return Err(e.to_string()),
        }
        let index = Index::open(directory).map_err(|e| e.to_string())?;
        if index.schema() != *schema {
            return Err("schema differs from this version's".into());
        }
        let metas = index.load_metas().map_err(|e| e.to_string())?;
        if metas.payload.is_some() && parse_payload(metas.payload.as_deref()).is_none() {
            return Err("index was written by another version".into());
        }
        // Touch every segment so that a truncated or missing file is found now, not mid-search.
        let reader = index.reader().map_err(|e| e.to_string())?;
        for segment in reader.searcher().segment_readers() {
            segment
                .get_store_reader(0)
                .map_err(|e| format!("segment unreadable: {e}"))?;
        }
        Ok(Some(index))
    }

    /// A throw-away index in memory, for unit tests.
    pub fn open_in_ram() -> Result<TextIndex> {
        let (schema, _) = schema();
        Self::from_index(Index::create_in_ram(schema), 15_000_000)
    }

    fn from_index(index: Index, writer_bytes: usize) -> Result<TextIndex> {
        index.tokenizers().register(ANALYZER, analyzer());
        let (_, fields) = schema();
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let seq = committed_seq(&index)?;
        Ok(TextIndex {
            index,
            reader,
            fields,
            writer: Mutex::new(None),
            writer_bytes: writer_bytes.max(15_000_000),
            reader_seq: AtomicI64::new(seq),
            overlay: RwLock::new(None),
            meta_file: None,
            seen_meta: Mutex::new(None),
        })
    }

    /// Change-log position of what searches of the committed index currently see.
    pub fn reader_seq(&self) -> i64 {
        self.reader_seq.load(Ordering::Acquire)
    }

    /// The position the committed index says it applied, with the database and stamp it was
    /// built from; `None` when it holds nothing (new or cleared).
    pub fn applied(&self) -> Result<Option<LogPosition>> {
        let metas = self.index.load_metas()?;
        Ok(parse_payload(metas.payload.as_deref())
            .filter(|p| p.seq > 0)
            .map(|p| LogPosition {
                database: p.database,
                seq: p.seq,
                stamp: p.stamp,
            }))
    }

    /// Picks up commits made by other processes; returns the position the reader now reflects.
    ///
    /// Every read calls this, and parsing the metadata with the reader's reload costs about
    /// 0.1 ms: an index on disk parses and reloads only when its metadata file's bytes differ
    /// from those at the last reload. Every commit writes a new file (its operation stamp
    /// grows) and renames it into place, so the bytes tell commits apart where the file's
    /// inode and coarse modification time may not. They are read before parsing, so a commit
    /// landing meanwhile is read now or at the next call, never missed.
    pub fn refresh(&self) -> Result<i64> {
        let stamp = self
            .meta_file
            .as_deref()
            .and_then(|f| std::fs::read(f).ok());
        if stamp.is_some() && *lock::lock(&self.seen_meta) == stamp {
            return Ok(self.reader_seq());
        }
        let seq = committed_seq(&self.index)?;
        self.reader.reload()?;
        self.reader_seq.fetch_max(seq, Ordering::AcqRel);
        *lock::lock(&self.seen_meta) = stamp;
        Ok(self.reader_seq())
    }

    /// Holds the writer while `f` computes the changes to apply after the committed position it is
    /// given; commits them with the position `f` returns. `Ok(None)` when another process holds
    /// the writer right now (try again shortly, or read what it commits).
    pub fn update<F>(&self, f: F) -> Result<Option<i64>>
    where
        F: FnOnce(i64) -> Result<(Vec<TextOp>, LogPosition)>,
    {
        let Some(mut guard) = self.writer_guard()? else {
            return Ok(None);
        };
        let writer = guard.as_mut().expect("writer_guard holds a writer");
        let written = self.write_ops(writer, f);
        if written.is_err() {
            // A writer whose write failed (a full disk stops tantivy's writer for good) is
            // dropped with its uncommitted changes; the next update takes a new one and applies
            // them again from the change log.
            *guard = None;
        }
        drop(guard);
        let (seq, changed) = written?;
        if changed {
            self.reader.reload()?;
            self.reader_seq.fetch_max(seq, Ordering::AcqRel);
        } else {
            self.refresh()?;
        }
        Ok(Some(seq))
    }

    /// Applies and commits what `f` computes after the committed position; the position the
    /// index then holds, and whether anything was committed.
    fn write_ops<F>(&self, writer: &mut IndexWriter, f: F) -> Result<(i64, bool)>
    where
        F: FnOnce(i64) -> Result<(Vec<TextOp>, LogPosition)>,
    {
        let base = committed_seq(&self.index)?;
        let (ops, up_to) = f(base)?;
        if ops.is_empty() && up_to.seq <= base {
            return Ok((base, false));
        }
        let mut counter = TokenCounter::new();
        for op in &ops {
            match op {
                TextOp::Delete(key) => {
                    writer.delete_term(Term::from_field_u64(self.fields.key, key.0 as u64));
                }
                TextOp::Upsert(d) => {
                    writer.delete_term(Term::from_field_u64(self.fields.key, d.key.0 as u64));
                    writer.add_document(self.fields.document(d, &mut counter))?;
                }
            }
        }
        let seq = up_to.seq.max(base);
        let payload = serde_json::to_string(&Payload::of(&LogPosition { seq, ..up_to }))?;
        let mut prepared = writer.prepare_commit()?;
        prepared.set_payload(&payload);
        prepared.commit()?;
        Ok((seq, true))
    }

    /// The writer, taken when this process does not hold it yet; `None` while another process
    /// holds tantivy's writer lock. A writer left behind by a panic is dropped (its uncommitted
    /// changes with it) and taken anew: the committed index is intact either way.
    fn writer_guard(&self) -> Result<Option<MutexGuard<'_, Option<IndexWriter>>>> {
        let mut guard = lock::lock_or_reset(&self.writer, |w| *w = None);
        if guard.is_none() {
            match self.index.writer_with_num_threads(1, self.writer_bytes) {
                Ok(w) => *guard = Some(w),
                Err(tantivy::TantivyError::LockFailure(..)) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Some(guard))
    }

    /// Removes every document (the first step of a rebuild) and the overlay; needs the writer.
    /// The index then says it applied nothing of `database`.
    pub fn clear(&self, database: &str) -> Result<bool> {
        let Some(mut guard) = self.writer_guard()? else {
            return Ok(false);
        };
        let writer = guard.as_mut().expect("writer_guard holds a writer");
        let cleared = (|| -> Result<()> {
            writer.delete_all_documents()?;
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&serde_json::to_string(&Payload::of(&LogPosition {
                database: database.to_owned(),
                seq: 0,
                stamp: 0,
            }))?);
            prepared.commit()?;
            Ok(())
        })();
        if cleared.is_err() {
            // As in `update`: a failed writer is not used again.
            *guard = None;
        }
        drop(guard);
        cleared?;
        self.reader.reload()?;
        self.reader_seq.store(0, Ordering::Release);
        *lock::write_or_reset(&self.overlay, |o| *o = None) = None;
        Ok(true)
    }

    /// Lets go of the writer (and its lock file) so another process can index. Before that,
    /// segments holding deleted documents are merged, which purges them: BM25 statistics then
    /// count only live memories, exactly as in an index rebuilt from the database.
    pub fn release_writer(&self) {
        let taken = lock::lock_or_reset(&self.writer, |w| *w = None).take();
        let Some(mut writer) = taken else { return };
        match self.index.searchable_segment_metas() {
            Ok(metas) => {
                let with_deletes: Vec<_> = metas
                    .iter()
                    .filter(|m| m.has_deletes())
                    .map(|m| m.id())
                    .collect();
                if !with_deletes.is_empty()
                    && let Err(e) = writer.merge(&with_deletes).wait()
                {
                    tracing::warn!(error = %e, "could not purge deleted documents from the text index");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not list text index segments"),
        }
        if let Err(e) = writer.wait_merging_threads() {
            tracing::warn!(error = %e, "text index merge did not finish");
        }
        if let Err(e) = self.reader.reload() {
            tracing::warn!(error = %e, "text index reader did not reload");
        }
    }

    /// True while this process holds the writer.
    pub fn holds_writer(&self) -> bool {
        lock::lock_or_reset(&self.writer, |w| *w = None).is_some()
    }

    /// Number of indexed memories.
    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// What committed index and overlay hold. Before that, overlaid memories whose newest change
    /// the committed index now has are dropped from the overlay (the overlay empties itself as
    /// the index catches up).
    pub fn position(&self) -> Result<TextPosition> {
        let committed = self.reader_seq();
        let mut guard = lock::write_or_reset(&self.overlay, |o| *o = None);
        let Some(overlay) = guard.as_mut() else {
            return Ok(TextPosition {
                committed,
                searchable: committed,
                overlaid: 0,
            });
        };
        if overlay.head <= committed {
            *guard = None;
            return Ok(TextPosition {
                committed,
                searchable: committed,
                overlaid: 0,
            });
        }
        let caught_up: Vec<u64> = overlay
            .keys
            .iter()
            .filter(|&(_, &seq)| seq <= committed)
            .map(|(&k, _)| k)
            .collect();
        if !caught_up.is_empty() {
            for k in &caught_up {
                overlay.keys.remove(k);
                overlay
                    .writer
                    .delete_term(Term::from_field_u64(self.fields.key, *k));
            }
            if let Err(e) = overlay.commit() {
                // The overlay is only a cache of the change log: start it again.
                tracing::warn!(error = %e, "text overlay could not be updated; starting it again");
                *guard = None;
                return Ok(TextPosition {
                    committed,
                    searchable: committed,
                    overlaid: 0,
                });
            }
        }
        Ok(TextPosition {
            committed,
            searchable: overlay.head,
            overlaid: overlay.keys.len(),
        })
    }

    /// Puts memories changed up to `head` into the overlay: each op with the position of the
    /// memory's newest change. The overlay must already hold everything from the committed
    /// position to where these changes start (see [`TextIndex::position`]).
    pub fn extend_overlay(&self, ops: Vec<(i64, TextOp)>, head: i64) -> Result<()> {
        let mut guard = lock::write_or_reset(&self.overlay, |o| *o = None);
        let overlay = match guard.as_mut() {
            Some(o) => o,
            None => guard.insert(Overlay::new(self.index.schema())?),
        };
        let mut counter = TokenCounter::new();
        let res = (|| -> Result<()> {
            for (seq, op) in &ops {
                let key = match op {
                    TextOp::Delete(key) => key.0 as u64,
                    TextOp::Upsert(d) => d.key.0 as u64,
                };
                overlay
                    .writer
                    .delete_term(Term::from_field_u64(self.fields.key, key));
                if let TextOp::Upsert(d) = op {
                    overlay
                        .writer
                        .add_document(self.fields.document(d, &mut counter))?;
                }
                overlay.keys.insert(key, *seq);
            }
            overlay.head = overlay.head.max(head);
            overlay.commit()
        })();
        if res.is_err() {
            *guard = None;
        }
        res
    }

    /// The analysed (lower-cased, stemmed) terms of `text`, deduplicated, in order.
    pub fn query_terms(&self, text: &str) -> Vec<String> {
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(text);
        let mut terms: Vec<String> = Vec::new();
        while let Some(t) = stream.next() {
            if !terms.contains(&t.text) {
                terms.push(t.text.clone());
                if terms.len() == MAX_QUERY_TERMS {
                    break;
                }
            }
        }
        terms
    }

    /// The analysed terms of `text` with their inverse document frequency among the live
    /// memories (the statistics searches score with, overlay included), for
    /// [`TextIndex::relevance`] and [`TextIndex::coverage`].
    pub fn query_weights(&self, text: &str) -> Vec<(String, f64)> {
        let terms = self.query_terms(text);
        let weigh = |stats: &dyn tantivy::query::Bm25StatisticsProvider| {
            self.weigh(&terms, stats)
                .into_iter()
                .zip(&terms)
                .map(|((_, w), t)| (t.clone(), w))
                .collect::<Vec<_>>()
        };
        self.with_live_statistics(|_, _, stats| Ok(weigh(stats)))
            .unwrap_or_else(|_| weigh(&LiveStatistics::new(&self.reader.searcher(), self.fields)))
    }

    /// Each term of the content field with its inverse document frequency under `stats`.
    fn weigh(
        &self,
        terms: &[String],
        stats: &dyn tantivy::query::Bm25StatisticsProvider,
    ) -> Vec<(Term, f64)> {
        let n = stats.total_num_docs().unwrap_or(0).max(1) as f64;
        terms
            .iter()
            .map(|t| {
                let term = Term::from_field_text(self.fields.content, t);
                let df = stats.doc_freq(&term).unwrap_or(0) as f64;
                (term, (1.0 + (n - df + 0.5) / (df + 0.5)).ln())
            })
            .collect()
    }

    /// Runs `f` with the committed index's searcher, the overlay and its searcher (when it holds
    /// memories), and the statistics both are scored with: the committed index's live documents
    /// less the versions the overlay replaces, plus the overlay's — as one index holding the
    /// overlay's versions would count them.
    fn with_live_statistics<T>(
        &self,
        f: impl FnOnce(
            &tantivy::Searcher,
            Option<(&Overlay, &tantivy::Searcher)>,
            &dyn tantivy::query::Bm25StatisticsProvider,
        ) -> Result<T>,
    ) -> Result<T> {
        let searcher = self.reader.searcher();
        let guard = lock::read_or_reset(&self.overlay, |o| *o = None);
        let Some(overlay) = guard.as_ref().filter(|o| !o.keys.is_empty()) else {
            return f(
                &searcher,
                None,
                &LiveStatistics::new(&searcher, self.fields),
            );
        };
        let overlay_searcher = overlay.reader.searcher();
        let stats = Combined([
            LiveStatistics::new(&searcher, self.fields).hiding(overlay.keys.keys().copied())?,
            LiveStatistics::new(&overlay_searcher, self.fields),
        ]);
        f(&searcher, Some((overlay, &overlay_searcher)), &stats)
    }

    /// BM25-style relevance of one memory's text to weighted terms (no index lookup: used to
    /// score memories reached by a traversal).
    pub fn relevance(&self, weights: &[(String, f64)], content: &str, name: Option<&str>) -> f64 {
        if weights.is_empty() {
            return 0.0;
        }
        let (tf, len) = term_counts(weights, content, name);
        let (k1, b, avg_len) = (1.2, 0.75, 40.0);
        let norm = k1 * (1.0 - b + b * f64::from(len) / avg_len);
        weights
            .iter()
            .zip(tf)
            .map(|((_, idf), tf)| {
                let tf = f64::from(tf);
                idf * tf * (k1 + 1.0) / (tf + norm)
            })
            .sum()
    }

    /// The share of the weights' total that a memory's text holds (a term counts when it is in
    /// the content or the name): 1 when every query term is there, low when only common words
    /// of the query are.
    pub fn coverage(&self, weights: &[(String, f64)], content: &str, name: Option<&str>) -> f64 {
        let total: f64 = weights.iter().map(|(_, w)| w).sum();
        if total <= 0.0 {
            return 1.0;
        }
        let (tf, _) = term_counts(weights, content, name);
        weights
            .iter()
            .zip(tf)
            .filter(|(_, tf)| *tf > 0)
            .map(|((_, w), _)| w)
            .sum::<f64>()
            / total
    }

    /// The scoring terms of `q`'s words and the query of its filters (see
    /// [`TextIndex::query_of_terms`]); `None` when it has no word to search.
    #[cfg(test)]
    fn query_of(&self, q: &RecallQuery) -> Option<(Vec<Term>, Option<BooleanQuery>)> {
        self.query_of_terms(q, &self.query_terms(&q.text))
    }

    /// The terms of the word clauses of `q` (`terms`, analysed already) in their order (those
    /// that score), and when `q` has filters, the query of them (a memory must match it too; it
    /// scores nothing); `None` without a word.
    fn query_of_terms(
        &self,
        q: &RecallQuery,
        terms: &[String],
    ) -> Option<(Vec<Term>, Option<BooleanQuery>)> {
        let f = self.fields;
        if terms.is_empty() {
            return None;
        }
        let mut scoring: Vec<Term> = terms
            .iter()
            .map(|t| Term::from_field_text(f.content, t))
            .collect();
        // A query that is a memory's whole name (`atlas`, `Project-Atlas`) is a lookup: that
        // memory gains the name's term, rare by nature, over the others holding the word.
        let key = name_key(&q.text);
        if !key.is_empty() {
            scoring.push(Term::from_field_text(f.name, &key));
        }
        let mut filters: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        let mut filter = |q: Box<dyn Query>| filters.push((Occur::Must, q));
        if let NamespaceScope::Only(namespaces) = &q.namespaces {
            filter(any_of(f.namespace, namespaces));
        }
        if !q.kinds.is_empty() {
            filter(any_of(f.kind, &q.kinds));
        }
        for tag in &q.tags {
            filter(Box::new(TermQuery::new(
                Term::from_field_text(f.tags, tag),
                IndexRecordOption::Basic,
            )));
        }
        if q.since.is_some() || q.until.is_some() {
            let lo = q.since.map_or(Bound::Unbounded, |t| {
                Bound::Included(Term::from_field_i64(f.created, t))
            });
            let hi = q.until.map_or(Bound::Unbounded, |t| {
                Bound::Included(Term::from_field_i64(f.created, t))
            });
            filter(Box::new(RangeQuery::new(lo, hi)));
        }
        if let Some(min) = q.min_importance {
            filter(Box::new(RangeQuery::new(
                Bound::Included(Term::from_field_f64(f.importance, min)),
                Bound::Unbounded,
            )));
        }
        let filters = (!filters.is_empty()).then(|| BooleanQuery::new(filters));
        Some((scoring, filters))
    }

    /// The best `depth` matches of `q.text` (any of its words) and every filter of `q`, each
    /// with its coverage (see [`TextHit`]); `q`'s page (offset, limit, cursor) is not read: the
    /// caller ranks the matches with the vector half's and pages the result. Never fails on the
    /// query's words: there is no query syntax. Answers from the committed index and the overlay
    /// together.
    pub fn search(&self, q: &RecallQuery, depth: usize) -> Result<Vec<TextHit>> {
        if depth == 0 {
            return Ok(Vec::new());
        }
        let terms = self.query_terms(&q.text);
        let Some((scoring, filters)) = self.query_of_terms(q, &terms) else {
            return Ok(Vec::new());
        };
        let within = filters.as_ref().map(|q| q as &dyn Query);
        self.with_live_statistics(|searcher, overlay, stats| {
            let remembered = Remembered::new(stats);
            let stats = &remembered;
            let weights = self.weigh(&terms, stats);
            let clauses = Clauses::new(scoring, stats)?;
            let Some((overlay, overlay_searcher)) = overlay else {
                let hits = top_matches(searcher, within, &clauses, 0, depth)?;
                return Ok(covered(&weights, hits));
            };
            // Both halves are scored with the statistics of both. The committed index's entries
            // of keys the overlay replaces are hidden: a few by asking for as many more hits and
            // dropping them (the query stays one tantivy can prune), many by excluding them.
            let hidden = &overlay.keys;
            let committed = if hidden.len() <= HIDE_BY_DROPPING {
                let wider = depth + hidden.len();
                let mut hits = top_matches(searcher, within, &clauses, 0, wider)?;
                hits.retain(|m| !hidden.contains_key(&(m.key.0 as u64)));
                hits.truncate(depth);
                hits
            } else {
                let hidden: Vec<Term> = hidden
                    .keys()
                    .map(|&k| Term::from_field_u64(self.fields.key, k))
                    .collect();
                let shown: Box<dyn Query> = match &filters {
                    Some(filters) => Box::new(filters.clone()),
                    None => Box::new(AllQuery),
                };
                let shown = BooleanQuery::new(vec![
                    (Occur::Must, shown),
                    (Occur::MustNot, Box::new(TermSetQuery::new(hidden))),
                ]);
                top_matches(searcher, Some(&shown), &clauses, 0, depth)?
            };
            let mut hits = covered(&weights, committed);
            let recent = top_matches(overlay_searcher, within, &clauses, 0, depth)?;
            hits.extend(covered(&weights, recent));
            hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
            hits.truncate(depth);
            Ok(hits)
        })
    }
}

impl Fields {
    /// The tantivy document of one memory.
    fn document(&self, d: &TextDoc, counter: &mut TokenCounter) -> TantivyDocument {
        let mut doc = TantivyDocument::default();
        doc.add_u64(self.key, d.key.0 as u64);
        doc.add_text(self.namespace, &d.namespace);
        doc.add_text(self.kind, &d.kind);
        for tag in &d.tags {
            doc.add_text(self.tags, tag);
        }
        if let Some(key) = d.name.as_deref().map(name_key).filter(|k| !k.is_empty()) {
            doc.add_text(self.name, key);
        }
        let words = words_of(&mut counter.0, &d.content, d.name.as_deref());
        doc.add_u64(self.content_tokens, counter.count(&words));
        doc.add_text(self.content, words);
        doc.add_i64(self.created, d.created_at);
        doc.add_f64(self.importance, d.importance);
        doc
    }
}

/// Counts the tokens the analyzer makes of a text (stored per document for live statistics).
struct TokenCounter(TextAnalyzer);

impl TokenCounter {
    fn new() -> TokenCounter {
        TokenCounter(analyzer())
    }

    fn count(&mut self, text: &str) -> u64 {
        let mut stream = self.0.token_stream(text);
        let mut n = 0;
        while stream.advance() {
            n += 1;
        }
        n
    }
}

impl Overlay {
    fn new(schema: Schema) -> Result<Overlay> {
        let index = Index::create_in_ram(schema);
        index.tokenizers().register(ANALYZER, analyzer());
        let writer = index.writer_with_num_threads(1, 15_000_000)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Overlay {
            writer,
            reader,
            head: 0,
            keys: HashMap::new(),
        })
    }

    fn commit(&mut self) -> Result<()> {
        self.writer.commit()?;
        self.reader.reload()?;
        Ok(())
    }
}

/// `hits` with their coverage: the share of `weights` (the content terms, the first clauses of
/// the query) whose terms their documents hold, as read from the postings when they were scored
/// instead of analysing each memory's text again. The content field holds the words
/// [`TextIndex::coverage`] counts, so the two agree.
fn covered(weights: &[(Term, f64)], hits: Vec<Match>) -> Vec<TextHit> {
    let total: f64 = weights.iter().map(|(_, w)| w).sum();
    hits.into_iter()
        .map(|m| {
            let held: f64 = weights
                .iter()
                .enumerate()
                .filter(|&(c, _)| m.held & (1 << c) != 0)
                .map(|(_, (_, w))| w)
                .sum();
            TextHit {
                key: m.key,
                score: m.score,
                coverage: if total > 0.0 { held / total } else { 1.0 },
            }
        })
        .collect()
}

/// How often each weighted term occurs in a memory's content and name (as analysed), and how
/// many terms they hold in all.
fn term_counts(weights: &[(String, f64)], content: &str, name: Option<&str>) -> (Vec<u32>, u32) {
    let mut tf = vec![0u32; weights.len()];
    let mut len = 0u32;
    each_word(&mut analyzer(), content, name, |word, _| {
        len += 1;
        if let Some(i) = weights.iter().position(|(w, _)| w == word) {
            tf[i] += 1;
        }
    });
    (tf, len)
}

/// A name or a query as one term: its words, lower-cased, one space apart (`Project-Atlas` and
/// `project atlas` are the same).
fn name_key(text: &str) -> String {
    let mut key = String::with_capacity(text.len());
    for (from, to) in crate::index::tokenize::word_spans(text) {
        if !key.is_empty() {
            key.push(' ');
        }
        key.push_str(&text[from..to].to_lowercase());
    }
    key
}

/// The words a memory is searched by: its content, then the words of its name that the content
/// does not hold (as the analyzer makes them). A word counts once whether it is in the name, the
/// content or both, so a memory named `alice` that says "Alice is the tech lead" holds "alice"
/// as often as any other memory that names her once, not thrice; a name's own words (`deploy
/// runbook`) still find it. A name that is not mostly words (`mem:12`, `D1:3`, a UUID; see
/// [`is_mostly_words`](crate::index::tokenize::is_mostly_words)) adds nothing: `get` finds it.
fn words_of<'a>(
    analyzer: &mut TextAnalyzer,
    content: &'a str,
    name: Option<&str>,
) -> std::borrow::Cow<'a, str> {
    let mut extra: Vec<(usize, usize)> = Vec::new();
    each_word(analyzer, content, name, |_, span| extra.extend(span));
    let Some(name) = name.filter(|_| !extra.is_empty()) else {
        return content.into();
    };
    let mut words = String::with_capacity(content.len() + name.len() + 2);
    words.push_str(content);
    words.push('\n');
    for (i, (from, to)) in extra.into_iter().enumerate() {
        if i > 0 {
            words.push(' ');
        }
        words.push_str(&name[from..to]);
    }
    words.into()
}

/// Calls `f` with each token of [`words_of`], reading the content once: the content's tokens
/// (span `None`), then the name's the content lacks, each with its span in the name.
fn each_word(
    analyzer: &mut TextAnalyzer,
    content: &str,
    name: Option<&str>,
    mut f: impl FnMut(&str, Option<(usize, usize)>),
) {
    let name = name.filter(|n| crate::index::tokenize::is_mostly_words(n));
    let mut held = std::collections::HashSet::new();
    {
        let mut stream = analyzer.token_stream(content);
        while let Some(t) = stream.next() {
            f(&t.text, None);
            if name.is_some() {
                held.insert(t.text.clone());
            }
        }
    }
    if let Some(name) = name {
        let mut stream = analyzer.token_stream(name);
        while let Some(t) = stream.next() {
            if held.insert(t.text.clone()) {
                f(&t.text, Some((t.offset_from, t.offset_to)));
            }
        }
    }
}

/// Statistics asked for again within one search answered from what was asked before: a term's
/// frequency is wanted for its coverage weight, for tantivy's weight and for the clause weights
/// of the sum anew, each time once per segment, and counting the tokens of a segment with
/// deletions reads every document's length.
struct Remembered<'a> {
    stats: &'a dyn tantivy::query::Bm25StatisticsProvider,
    tokens: RefCell<Vec<(Field, u64)>>,
    freqs: RefCell<Vec<(Term, u64)>>,
}

impl<'a> Remembered<'a> {
    fn new(stats: &'a dyn tantivy::query::Bm25StatisticsProvider) -> Remembered<'a> {
        Remembered {
            stats,
            tokens: RefCell::new(Vec::new()),
            freqs: RefCell::new(Vec::new()),
        }
    }
}

impl tantivy::query::Bm25StatisticsProvider for Remembered<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        if let Some(&(_, n)) = self.tokens.borrow().iter().find(|(f, _)| *f == field) {
            return Ok(n);
        }
        let n = self.stats.total_num_tokens(field)?;
        self.tokens.borrow_mut().push((field, n));
        Ok(n)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        self.stats.total_num_docs()
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        if let Some((_, n)) = self.freqs.borrow().iter().find(|(t, _)| t == term) {
            return Ok(*n);
        }
        let n = self.stats.doc_freq(term)?;
        self.freqs.borrow_mut().push((term.clone(), n));
        Ok(n)
    }
}

/// Statistics of two searchers summed: the committed index and the overlay scored as one.
struct Combined<'a>([LiveStatistics<'a>; 2]);

impl tantivy::query::Bm25StatisticsProvider for Combined<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        Ok(self.0[0].total_num_tokens(field)? + self.0[1].total_num_tokens(field)?)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.0[0].total_num_docs()? + self.0[1].total_num_docs()?)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        Ok(self.0[0].doc_freq(term)? + self.0[1].doc_freq(term)?)
    }
}
/// BM25 statistics of live documents only. tantivy's own count documents that were deleted but
/// not merged away yet; leaving them out makes scores independent of the index's history, so an
/// index rebuilt from the database ranks exactly as the one it replaces. Documents `hidden` (per
/// segment, sorted: committed versions of memories the overlay holds) are left out as well.
struct LiveStatistics<'a> {
    searcher: &'a tantivy::Searcher,
    fields: Fields,
    hidden: Vec<Vec<tantivy::DocId>>,
}

impl<'a> LiveStatistics<'a> {
    fn new(searcher: &'a tantivy::Searcher, fields: Fields) -> LiveStatistics<'a> {
        LiveStatistics {
            searcher,
            fields,
            hidden: Vec::new(),
        }
    }

    /// Also leaves out the live documents of `keys`.
    fn hiding(mut self, keys: impl Iterator<Item = u64> + Clone) -> tantivy::Result<Self> {
        use tantivy::DocSet;
        for segment in self.searcher.segment_readers() {
            let inverted = segment.inverted_index(self.fields.key)?;
            let alive = segment.alive_bitset();
            let mut docs = Vec::new();
            for key in keys.clone() {
                let term = Term::from_field_u64(self.fields.key, key);
                if let Some(mut postings) =
                    inverted.read_postings(&term, IndexRecordOption::Basic)?
                {
                    let mut doc = postings.doc();
                    while doc != tantivy::TERMINATED {
                        if alive.is_none_or(|a| a.is_alive(doc)) {
                            docs.push(doc);
                        }
                        doc = postings.advance();
                    }
                }
            }
            docs.sort_unstable();
            self.hidden.push(docs);
        }
        Ok(self)
    }

    fn hidden_in(&self, segment: usize) -> &[tantivy::DocId] {
        self.hidden.get(segment).map_or(&[], Vec::as_slice)
    }
}

impl tantivy::query::Bm25StatisticsProvider for LiveStatistics<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let counts = if field == self.fields.content {
            "content_tokens"
        } else {
            return self.searcher.total_num_tokens(field);
        };
        let mut total = 0u64;
        for (i, segment) in self.searcher.segment_readers().iter().enumerate() {
            let mut tokens = segment.inverted_index(field)?.total_num_tokens();
            let hidden = self.hidden_in(i);
            let deletes = segment.alive_bitset().filter(|_| segment.has_deletes());
            if deletes.is_some() || !hidden.is_empty() {
                let col = segment.fast_fields().u64(counts)?.first_or_default_col(0);
                if let Some(alive) = deletes {
                    for doc in 0..segment.max_doc() {
                        if !alive.is_alive(doc) {
                            tokens = tokens.saturating_sub(col.get_val(doc));
                        }
                    }
                }
                for &doc in hidden {
                    tokens = tokens.saturating_sub(col.get_val(doc));
                }
            }
            total += tokens;
        }
        Ok(total)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        let hidden: usize = self.hidden.iter().map(Vec::len).sum();
        Ok(self.searcher.num_docs().saturating_sub(hidden as u64))
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        use tantivy::DocSet;
        let mut total = 0u64;
        for (i, segment) in self.searcher.segment_readers().iter().enumerate() {
            let inverted = segment.inverted_index(term.field())?;
            match segment.alive_bitset().filter(|_| segment.has_deletes()) {
                None => total += u64::from(inverted.doc_freq(term)?),
                Some(alive) => {
                    if let Some(mut postings) =
                        inverted.read_postings(term, IndexRecordOption::Basic)?
                    {
                        let mut doc = postings.doc();
                        while doc != tantivy::TERMINATED {
                            if alive.is_alive(doc) {
                                total += 1;
                            }
                            doc = postings.advance();
                        }
                    }
                }
            }
            let hidden = self.hidden_in(i);
            if !hidden.is_empty()
                && let Some(mut postings) =
                    inverted.read_postings(term, IndexRecordOption::Basic)?
            {
                for &doc in hidden {
                    if postings.doc() > doc {
                        continue;
                    }
                    if postings.seek(doc) == doc {
                        total = total.saturating_sub(1);
                    }
                    if postings.doc() == tantivy::TERMINATED {
                        break;
                    }
                }
            }
        }
        Ok(total)
    }
}

fn any_of(field: Field, values: &[String]) -> Box<dyn Query> {
    let clauses = values
        .iter()
        .map(|v| {
            let q: Box<dyn Query> = Box::new(TermQuery::new(
                Term::from_field_text(field, v),
                IndexRecordOption::Basic,
            ));
            (Occur::Should, q)
        })
        .collect();
    Box::new(BooleanQuery::new(clauses))
}

fn committed_seq(index: &Index) -> Result<i64> {
    let metas = index.load_metas()?;
    Ok(parse_payload(metas.payload.as_deref()).map_or(0, |p| p.seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: i64) -> LogPosition {
        LogPosition {
            database: String::new(),
            seq,
            stamp: 0,
        }
    }

    fn doc(key: i64, ns: &str, content: &str) -> TextDoc {
        TextDoc {
            key: MemoryKey(key),
            namespace: ns.into(),
            kind: "note".into(),
            name: None,
            content: content.into(),
            tags: vec!["t".into()],
            created_at: key * 1000,
            importance: key as f64 / 10.0,
        }
    }

    /// Numbers below `n` from a seeded xorshift, the same on every run.
    fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut state = seed;
        move |n| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        }
    }

    fn query(text: &str) -> RecallQuery {
        RecallQuery {
            text: text.into(),
            ..RecallQuery::default()
        }
    }

    fn keys(hits: Vec<TextHit>) -> Vec<i64> {
        hits.into_iter().map(|h| h.key.0).collect()
    }

    fn filled() -> TextIndex {
        let idx = TextIndex::open_in_ram().unwrap();
        let ops = vec![
            TextOp::Upsert(doc(1, "a", "Alice drinks green tea every morning")),
            TextOp::Upsert(doc(2, "a", "Bob prefers coffee, black")),
            TextOp::Upsert(doc(3, "b", "Tea ceremonies in Kyoto: 茶道")),
        ];
        assert_eq!(idx.update(|base| Ok((ops, at(base + 3)))).unwrap(), Some(3));
        idx
    }

    /// Checks the pages of `q` against every match scored and ordered, and the scores against
    /// tantivy's own (which may differ in the last bits: another order of adding).
    fn pages_match_the_full_ordering(idx: &TextIndex, q: &RecallQuery, pages: &[(usize, usize)]) {
        let searcher = idx.reader.searcher();
        let stats = LiveStatistics::new(&searcher, idx.fields);
        let (scoring, filters) = idx.query_of(q).unwrap();
        // tantivy's own query of the same matches: any of the words, under the filters.
        let words: Vec<(Occur, Box<dyn Query>)> = scoring
            .iter()
            .map(|term| {
                let term = TermQuery::new(term.clone(), IndexRecordOption::WithFreqs);
                (Occur::Should, Box::new(term) as Box<dyn Query>)
            })
            .collect();
        let mut query = vec![(
            Occur::Must,
            Box::new(BooleanQuery::new(words)) as Box<dyn Query>,
        )];
        if let Some(filters) = &filters {
            let filters = tantivy::query::ConstScoreQuery::new(Box::new(filters.clone()), 0.0);
            query.push((Occur::Must, Box::new(filters)));
        }
        let query = BooleanQuery::new(query);
        let within = filters.as_ref().map(|q| q as &dyn Query);
        let clauses = Clauses::new(scoring, &stats).unwrap();
        let every = super::top::every_match(&searcher, &query, &clauses).unwrap();
        let theirs = tantivy::collector::TopDocs::with_limit(every.len().max(1)).order_by_score();
        let theirs = searcher
            .search_with_statistics_provider(&query, &theirs, &stats)
            .unwrap();
        assert_eq!(theirs.len(), every.len(), "{:?}", q.text);
        for (score, address) in theirs {
            let ours = every.iter().find(|m| m.address == address).unwrap();
            assert!(
                (ours.score - score).abs() <= 1e-5 * score,
                "{ours:?}: {score}"
            );
        }
        for &(offset, limit) in pages {
            let page = top_matches(&searcher, within, &clauses, offset, limit).unwrap();
            let full: Vec<Match> = every.iter().skip(offset).take(limit).copied().collect();
            assert_eq!(page, full, "{:?}, offset {offset}, limit {limit}", q.text);
        }
    }

    #[test]
    fn pruned_top_hits_order_like_the_full_ordering_also_across_ties() {
        let idx = TextIndex::open_in_ram().unwrap();
        // Groups of identical memories (equal scores) of different lengths, keys interleaved so
        // that key order and document order differ.
        let ops: Vec<TextOp> = (0..200i64)
            .map(|i| {
                let key = (i * 37) % 200 + 1;
                let filler = "word ".repeat((i % 7) as usize);
                TextOp::Upsert(doc(key, "a", &format!("lake {filler}")))
            })
            .collect();
        idx.update(|base| Ok((ops, at(base + 200)))).unwrap();
        let pages = [
            (0, 1),
            (0, 10),
            (0, 28),
            (0, 29),
            (5, 30),
            (25, 10),
            (190, 20),
        ];
        pages_match_the_full_ordering(&idx, &query("lake"), &pages);
        pages_match_the_full_ordering(&idx, &query("lake word"), &pages);
        // Distinct scores (no tie at the cut).
        let ops: Vec<TextOp> = (0..50i64)
            .map(|i| {
                TextOp::Upsert(doc(
                    1_000 + i,
                    "b",
                    &format!("river {}", "river ".repeat(i as usize)),
                ))
            })
            .collect();
        idx.update(|base| Ok((ops, at(base + 50)))).unwrap();
        pages_match_the_full_ordering(&idx, &query("river"), &[(0, 10), (3, 40)]);
    }

    #[test]
    fn a_search_over_many_segments_finds_the_best_live_matches() {
        // Six commits make six segments; later ones rewrite and delete memories of earlier
        // ones, so most segments hold deleted documents, some of them good matches. Each
        // segment's search starts from the bar the larger ones before it set, and a memory
        // scores the same whichever segment holds it and whatever the bar.
        let idx = TextIndex::open_in_ram().unwrap();
        let words = [
            "lake", "river", "stone", "tea", "garden", "north", "bridge", "song",
        ];
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let text = |next: &mut dyn FnMut(u64) -> u64| {
            let len = 1 + next(12) as usize;
            (0..len)
                .map(|_| words[next(words.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut seq = 0;
        for commit in 0..6i64 {
            let mut ops: Vec<TextOp> = (0..150i64)
                .map(|i| {
                    let key = commit * 150 + i + 1;
                    let ns = if i % 3 == 0 { "b" } else { "a" };
                    TextOp::Upsert(doc(key, ns, &text(&mut next)))
                })
                .collect();
            for _ in 0..40 {
                let key = 1 + next((commit as u64 + 1) * 150) as i64;
                ops.push(if next(2) == 0 {
                    TextOp::Delete(MemoryKey(key))
                } else {
                    TextOp::Upsert(doc(key, "a", &text(&mut next)))
                });
            }
            seq += ops.len() as i64;
            idx.update(|_| Ok((ops, at(seq)))).unwrap();
        }
        let searcher = idx.reader.searcher();
        let segments = searcher.segment_readers();
        assert!(segments.len() >= 4, "{} segments", segments.len());
        assert!(segments.iter().filter(|r| r.has_deletes()).count() >= 3);
        for round in 0..60 {
            let mut q = query(&text(&mut next));
            if round % 4 == 1 {
                q.namespaces = NamespaceScope::Only(vec!["b".into()]);
            }
            pages_match_the_full_ordering(&idx, &q, &[(0, 1), (0, 10), (0, 40), (7, 20)]);
        }
    }

    #[test]
    fn a_search_over_many_windows_finds_the_best_matches() {
        // One segment of 6,000 memories: the walk sums its essential words over windows of
        // documents, so the best matches lie in many windows, some on their edges. Common and
        // rare words (the 1st of 30 words about half the time, the 30th about one time in
        // 900), a namespace filter letting in one memory in seven, and deleted memories.
        let idx = TextIndex::open_in_ram().unwrap();
        let words: Vec<String> = (0..30).map(|i| format!("w{i}x")).collect();
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let text = |next: &mut dyn FnMut(u64) -> u64| {
            let len = 1 + next(9) as usize;
            (0..len)
                .map(|_| {
                    let u = next(1 << 20) as f64 / f64::from(1 << 20);
                    words[(u * u * u * words.len() as f64) as usize].as_str()
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let ops: Vec<TextOp> = (1..=6_000i64)
            .map(|key| {
                let ns = if key % 7 == 0 { "b" } else { "a" };
                TextOp::Upsert(doc(key, ns, &text(&mut next)))
            })
            .collect();
        idx.update(|_| Ok((ops, at(6_000)))).unwrap();
        let gone: Vec<TextOp> = (0..300)
            .map(|_| TextOp::Delete(MemoryKey(1 + next(6_000) as i64)))
            .collect();
        idx.update(|_| Ok((gone, at(6_300)))).unwrap();
        let searcher = idx.reader.searcher();
        let largest = searcher.segment_readers().iter().map(|r| r.max_doc()).max();
        assert!(largest >= Some(4 * super::maxscore::WINDOW), "{largest:?}");
        for round in 0..40 {
            let mut q = query(&text(&mut next));
            if round % 3 == 1 {
                q.namespaces = NamespaceScope::Only(vec!["b".into()]);
            }
            pages_match_the_full_ordering(
                &idx,
                &q,
                &[(0, 1), (0, 10), (0, 50), (0, 100), (13, 40)],
            );
        }
    }

    #[test]
    fn finds_by_stemmed_words_and_filters() {
        let idx = filled();
        assert_eq!(keys(idx.search(&query("teas"), 10).unwrap()).len(), 2);
        let mut q = query("tea");
        q.namespaces = NamespaceScope::Only(vec!["b".into()]);
        assert_eq!(keys(idx.search(&q, 10).unwrap()), [3]);
        let mut q = query("tea");
        q.min_importance = Some(0.25);
        assert_eq!(keys(idx.search(&q, 10).unwrap()), [3]);
        let mut q = query("tea coffee");
        q.until = Some(2000);
        let mut found = keys(idx.search(&q, 10).unwrap());
        found.sort();
        assert_eq!(found, [1, 2]);
    }

    #[test]
    fn operator_words_and_punctuation_are_plain_words() {
        let idx = filled();
        let hits = idx
            .search(
                &query("What does \"Alice\" drink (AND/OR: NOT coffee)?"),
                10,
            )
            .unwrap();
        assert!(keys(hits).contains(&1));
        assert_eq!(keys(idx.search(&query("茶"), 10).unwrap()), [3]);
    }

    #[test]
    fn coverage_read_from_postings_equals_coverage_of_the_text() {
        // Memories in several segments (one commit each), some named, some replaced in the
        // overlay: each hit's coverage is what analysing its text gives.
        let idx = TextIndex::open_in_ram().unwrap();
        let texts: Vec<(i64, &str, Option<&str>)> = vec![
            (1, "Alice drinks green tea every morning", Some("alice")),
            (2, "Bob prefers coffee, black, and never tea", None),
            (
                3,
                "The deploy runbook lists every step",
                Some("Atlas deploy runbook"),
            ),
            (4, "Morning standup moved to Thursdays", Some("mem:12")),
            (5, "Green tea and coffee both keep Alice awake", None),
            (6, "Running every morning before the deploy", Some("habits")),
        ];
        let mut texts_by_key: HashMap<i64, (String, Option<String>)> = HashMap::new();
        for chunk in texts.chunks(2) {
            let ops: Vec<TextOp> = chunk
                .iter()
                .map(|(k, c, n)| {
                    texts_by_key.insert(*k, ((*c).to_owned(), n.map(str::to_owned)));
                    let mut d = doc(*k, "a", c);
                    d.name = n.map(str::to_owned);
                    TextOp::Upsert(d)
                })
                .collect();
            idx.update(|base| Ok((ops, at(base + 2)))).unwrap();
        }
        let check = |idx: &TextIndex, texts: &HashMap<i64, (String, Option<String>)>| {
            for q in [
                "what does Alice drink in the morning?",
                "deploy runbook steps",
                "tea coffee",
                "habits",
                "thursday standup",
                "nothing matches zzzz",
            ] {
                let weights = idx.query_weights(q);
                let hits = idx.search(&query(q), 10).unwrap();
                for h in &hits {
                    let (content, name) = &texts[&h.key.0];
                    let want = idx.coverage(&weights, content, name.as_deref());
                    assert!(
                        (h.coverage - want).abs() < 1e-9,
                        "{q:?}, memory {}: postings {} against text {want}",
                        h.key.0,
                        h.coverage
                    );
                }
            }
        };
        check(&idx, &texts_by_key);
        let head = idx.position().unwrap().committed;
        let ops = vec![
            (
                head + 1,
                TextOp::Upsert(doc(2, "a", "Bob switched to green tea")),
            ),
            (
                head + 2,
                TextOp::Upsert(doc(7, "a", "A runbook for Thursday deploys")),
            ),
        ];
        texts_by_key.insert(2, ("Bob switched to green tea".into(), None));
        texts_by_key.insert(7, ("A runbook for Thursday deploys".into(), None));
        idx.extend_overlay(ops, head + 2).unwrap();
        check(&idx, &texts_by_key);
    }

    #[test]
    fn the_overlay_hides_what_it_replaces_whether_few_or_many() {
        // Committed: 1,100 memories about tea; memory k's text grows with k, so lower keys rank
        // higher (shorter) and the replaced ones would fill the top of every page.
        let idx = TextIndex::open_in_ram().unwrap();
        let n = HIDE_BY_DROPPING as i64 + 76;
        let ops = (1..=n)
            .map(|k| TextOp::Upsert(doc(k, "a", &format!("tea {}", "x ".repeat(k as usize)))))
            .collect();
        assert_eq!(idx.update(|base| Ok((ops, at(base + n)))).unwrap(), Some(n));
        for replaced in [3, HIDE_BY_DROPPING as i64 + 50] {
            // The first `replaced` memories now speak of coffee, in the overlay only.
            let ops = (1..=replaced)
                .map(|k| (n + k, TextOp::Upsert(doc(k, "a", "coffee"))))
                .collect();
            idx.extend_overlay(ops, n + replaced).unwrap();
            let tea = keys(idx.search(&query("tea"), 10).unwrap());
            let want: Vec<i64> = (replaced + 1..=replaced + 10).collect();
            assert_eq!(tea, want, "{replaced} replaced");
            let want: Vec<i64> = (replaced + 1..=replaced + 15).collect();
            assert_eq!(keys(idx.search(&query("tea"), 15).unwrap()), want);
            let coffee = keys(idx.search(&query("coffee"), 10).unwrap());
            assert_eq!(coffee.len(), 10.min(replaced as usize));
            assert!(coffee.iter().all(|k| *k <= replaced));
        }
    }

    #[test]
    fn delete_and_upsert_replace_documents() {
        let idx = filled();
        idx.update(|base| {
            Ok((
                vec![
                    TextOp::Delete(MemoryKey(1)),
                    TextOp::Upsert(doc(2, "a", "Bob now drinks tea")),
                ],
                at(base + 2),
            ))
        })
        .unwrap();
        assert_eq!(keys(idx.search(&query("tea"), 10).unwrap()).len(), 2);
        assert!(keys(idx.search(&query("coffee"), 10).unwrap()).is_empty());
        assert_eq!(idx.num_docs(), 2);
        assert_eq!(idx.reader_seq(), 5);
    }

    /// Two handles on one index folder, as two processes sharing a database: a commit of
    /// either is seen by the other's next refresh, however soon it comes; a refresh with no
    /// commit between reads nothing new.
    #[test]
    fn a_refresh_sees_every_commit_of_another_handle() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = TextIndex::open(dir.path(), 20_000_000).unwrap();
        let (b, _) = TextIndex::open(dir.path(), 20_000_000).unwrap();
        for n in 1..=20i64 {
            a.update(|_| {
                Ok((
                    vec![TextOp::Upsert(doc(n, "a", &format!("word{n} shared")))],
                    at(n),
                ))
            })
            .unwrap();
            a.release_writer();
            assert_eq!(b.refresh().unwrap(), n, "commit {n} unseen");
            assert_eq!(b.refresh().unwrap(), n);
            assert_eq!(
                keys(b.search(&query(&format!("word{n}")), 10).unwrap()),
                vec![n]
            );
        }
        assert_eq!(b.num_docs(), 20);
    }

    #[test]
    fn reopening_keeps_position_and_wrong_files_are_recreated() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (idx, state) = TextIndex::open(dir.path(), 20_000_000).unwrap();
            assert_eq!(state, OpenState::Created);
            idx.update(|_| Ok((vec![TextOp::Upsert(doc(1, "a", "hello world"))], at(7))))
                .unwrap();
            idx.release_writer();
        }
        let (idx, state) = TextIndex::open(dir.path(), 20_000_000).unwrap();
        assert_eq!(state, OpenState::Existing);
        assert_eq!(idx.reader_seq(), 7);
        drop(idx);
        std::fs::write(dir.path().join("meta.json"), b"{ not json").unwrap();
        let (idx, state) = TextIndex::open(dir.path(), 20_000_000).unwrap();
        assert_eq!(state, OpenState::Recreated);
        assert_eq!(idx.num_docs(), 0);
    }
}
