//! Reads: recall (ranked text search with filters and paging), get (with relations and history),
//! stats and doctor.

use std::collections::HashMap;

use crate::engine::write::lookup;
use crate::engine::{Engine, snippet};
use crate::error::{Error, Result};
use crate::model::{
    HistoryEntry, Hit, Memory, MemoryRef, RecallPage, RecallQuery, Relation, Stats, now_millis,
};
use crate::store::history::{self, Entity};
use crate::store::{changes, memories, relations};

/// Most relations `get` returns around one memory.
const MAX_RELATIONS_PER_MEMORY: usize = 100;
/// Most history entries `get` returns for one memory.
const MAX_HISTORY: usize = 50;
/// Most memories one `get` returns.
const MAX_GET: usize = 100;
/// Deepest page recall serves (offset + limit).
const MAX_RECALL_DEPTH: usize = 1_000;

/// A memory with what surrounds it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryDetail {
    pub memory: Memory,
    pub relations: Vec<Relation>,
    pub history: Option<Vec<HistoryEntry>>,
}

/// What `doctor` found.
#[derive(Debug, Clone, PartialEq)]
pub struct DoctorReport {
    pub schema_version: i64,
    pub change_log_seq: i64,
    pub text_index_seq: i64,
    pub text_index_docs: u64,
    pub live_memories: i64,
    pub integrity_problems: Vec<String>,
}

impl DoctorReport {
    /// True when nothing needs attention.
    pub fn healthy(&self) -> bool {
        self.integrity_problems.is_empty()
            && self.text_index_seq >= self.change_log_seq
            && self.text_index_docs as i64 == self.live_memories
    }
}

impl Engine {
    /// Ranked memories matching `q`: any of its words, every filter. Sees every write committed
    /// before the call.
    pub fn recall(&self, q: &RecallQuery) -> Result<RecallPage> {
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
        if q.offset + q.limit > MAX_RECALL_DEPTH {
            return Err(Error::invalid(
                "cursor",
                "goes past the deepest page served",
                "narrow the query with filters instead of paging further",
            ));
        }
        let max_label = self.cfg.limits.max_name_bytes;
        if let crate::model::NamespaceScope::Only(namespaces) = &q.namespaces {
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
        self.sync_text()?;
        let mut page_q = q.clone();
        page_q.limit = q.limit + 1;
        let mut found = match self.text.search(&page_q) {
            Ok(found) => found,
            // The index is derived state: when it cannot be read, it is rebuilt, never fatal.
            Err(e) => {
                tracing::warn!(error = %e, "text index unreadable; rebuilding it from the database");
                self.reindex_text()?;
                self.text.search(&page_q)?
            }
        };
        let more = found.len() > q.limit;
        found.truncate(q.limit);
        let keys: Vec<_> = found.iter().map(|(k, _)| *k).collect();
        let (rows, counts) = self.store.read(|c| {
            Ok((
                memories::by_keys(c, &keys)?,
                memories::relation_counts(c, &keys)?,
            ))
        })?;
        let mut by_key: HashMap<_, _> = rows.into_iter().map(|m| (m.key, m)).collect();
        let now = now_millis();
        let mut hits = Vec::with_capacity(found.len());
        for (key, score) in found {
            let Some(memory) = by_key.remove(&key) else {
                continue;
            };
            if memory.deleted_at.is_some() {
                continue;
            }
            hits.push(Hit {
                snippet: snippet::snippet(&memory.content, &q.text),
                n_relations: counts.get(&key).copied().unwrap_or(0),
                memory,
                score,
            });
        }
        self.note_touched(hits.iter().map(|h| h.memory.key), now);
        Ok(RecallPage {
            hits,
            next_offset: more.then_some(q.offset + q.limit),
        })
    }

    /// Memories by id or name, each with its live relations and, when asked, its history.
    /// Unknown references fail the call with the reference named.
    pub fn get(&self, refs: &[MemoryRef], with_history: bool) -> Result<Vec<MemoryDetail>> {
        if refs.is_empty() {
            return Err(Error::invalid(
                "ids",
                "names nothing",
                "give `ids` or `names`",
            ));
        }
        if refs.len() > MAX_GET {
            return Err(Error::invalid(
                "ids",
                format!("has {} entries", refs.len()),
                format!("ask for at most {MAX_GET}"),
            ));
        }
        let details = self.store.read(|c| {
            let mut out = Vec::with_capacity(refs.len());
            for (i, r) in refs.iter().enumerate() {
                let memory = lookup(c, r, true)?.ok_or_else(|| {
                    let id = match r {
                        MemoryRef::Id(id) => id.clone(),
                        MemoryRef::Name { namespace, name } => format!("{name:?} in namespace {namespace:?}"),
                    };
                    Error::not_found("memory", id, format!("check entry {i}: use an id from remember/recall, or a name with its namespace"))
                })?;
                let relations = relations::around(c, memory.key, MAX_RELATIONS_PER_MEMORY)?;
                let history = if with_history {
                    Some(history::of(c, Entity::Memory, memory.key.0, MAX_HISTORY)?)
                } else {
                    None
                };
                out.push(MemoryDetail { memory, relations, history });
            }
            Ok(out)
        })?;
        self.note_touched(details.iter().map(|d| d.memory.key), now_millis());
        Ok(details)
    }

    /// Counts per namespace and kind, index lag and database size.
    pub fn stats(&self) -> Result<Stats> {
        let mut stats = self.store.read(memories::stats)?;
        stats.text_index_lag = self.text_lag()?;
        stats.database_bytes = self.store.size_bytes();
        Ok(stats)
    }

    /// Checks schema, change-log lag, text index and SQLite integrity.
    pub fn doctor(&self) -> Result<DoctorReport> {
        self.text.refresh()?;
        let stats = self.store.read(memories::stats)?;
        Ok(DoctorReport {
            schema_version: self.store.schema_version()?,
            change_log_seq: self.store.read(changes::max_seq)?,
            text_index_seq: self.text.reader_seq(),
            text_index_docs: self.text.num_docs(),
            live_memories: stats.memories,
            integrity_problems: self.store.integrity_check()?,
        })
    }
}
