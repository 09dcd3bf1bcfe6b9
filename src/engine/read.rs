//! Reads: recall (ranked text search with filters and paging), get (with relations and history),
//! stats and doctor.

use crate::engine::write::lookup_in;
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::model::{HistoryEntry, Memory, MemoryKey, MemoryRef, Relation, Stats, now_millis};
use crate::store::history::{self, Entity};
use crate::store::{changes, memories, relations};

/// Most relations `get` returns around one memory.
const MAX_RELATIONS_PER_MEMORY: usize = 100;
/// Most history entries `get` returns for one memory.
const MAX_HISTORY: usize = 50;
/// Most memories one `get` returns.
const MAX_GET: usize = 100;

/// A memory with what surrounds it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryDetail {
    pub memory: Memory,
    /// The id asked for when consolidation merged that memory into `memory` (its survivor).
    pub merged: Option<String>,
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

/// Longest chain of merges `get` follows.
const MAX_MERGE_HOPS: usize = 16;

/// The live memory a merged one ended in, and the id asked for; `m` itself otherwise.
fn survivor_of(c: &crate::store::Db, m: Memory) -> Result<(Memory, Option<String>)> {
    if m.deleted_at.is_none() || m.merged_into.is_none() {
        return Ok((m, None));
    }
    let asked = m.id.clone();
    let mut at = m;
    for _ in 0..MAX_MERGE_HOPS {
        let Some(into) = at
            .merged_into
            .as_deref()
            .filter(|_| at.deleted_at.is_some())
        else {
            break;
        };
        match memories::by_id(c, into)? {
            Some(next) => at = next,
            None => break,
        }
    }
    Ok((at, Some(asked)))
}

impl Engine {
    /// Memories by id or name, each with its live relations and, when asked, its history.
    /// Unknown references fail the call with the reference named. A memory consolidation merged
    /// away answers with its survivor (and `merged` names the id asked for).
    pub fn get(&self, refs: &[MemoryRef], with_history: bool) -> Result<Vec<MemoryDetail>> {
        self.get_in(refs, with_history, &Access::All)
    }

    /// [`Engine::get`] for a caller limited to the namespaces of `access`: a memory outside them
    /// fails the call; relations to memories outside them are left out.
    pub fn get_in(
        &self,
        refs: &[MemoryRef],
        with_history: bool,
        access: &Access,
    ) -> Result<Vec<MemoryDetail>> {
        if refs.is_empty() {
            return Err(Error::invalid(
                "ids",
                "names nothing",
                "give `ids` or `names`",
            ));
        }
        if refs.len() > MAX_GET {
            // Blame the field the caller used: ids come first, then names.
            let names = refs
                .iter()
                .filter(|r| matches!(r, MemoryRef::Name { .. }))
                .count();
            let ids = refs.len() - names;
            let (field, reason) = match (ids, names) {
                (_, 0) => ("ids", format!("has {ids} entries")),
                (0, _) => ("names", format!("has {names} entries")),
                _ => (
                    "names",
                    format!("has {names} entries, {} together with `ids`", refs.len()),
                ),
            };
            return Err(Error::invalid(
                field,
                reason,
                format!("ask for at most {MAX_GET} memories per call, ids and names together"),
            ));
        }
        let details = self.store.read(|c| {
            let mut out = Vec::with_capacity(refs.len());
            for (i, r) in refs.iter().enumerate() {
                let missing = || {
                    Error::not_found("memory", r.to_string(), format!("check entry {i}: use an id from remember/recall, or a name with its namespace"))
                };
                let memory = lookup_in(c, r, true, access)?.ok_or_else(missing)?;
                let (memory, merged) = survivor_of(c, memory)?;
                if !access.allows(&memory.namespace) {
                    return Err(missing());
                }
                let mut relations = relations::around(c, memory.key, MAX_RELATIONS_PER_MEMORY)?;
                if !access.is_all() {
                    let mut kept = Vec::with_capacity(relations.len());
                    for r in relations {
                        let other = if r.from == memory.id { &r.to } else { &r.from };
                        if memories::by_id(c, other)?.is_some_and(|m| access.allows(&m.namespace)) {
                            kept.push(r);
                        }
                    }
                    relations = kept;
                }
                let history = if with_history {
                    Some(history::of(c, Entity::Memory, memory.key.0, MAX_HISTORY)?)
                } else {
                    None
                };
                out.push(MemoryDetail { memory, merged, relations, history });
            }
            Ok(out)
        })?;
        self.note_touched(details.iter().map(|d| d.memory.key), now_millis());
        Ok(details)
    }

    /// The namespaces that `access` may read and that hold memories, in name order.
    pub fn namespaces_in(&self, access: &Access) -> Result<Vec<String>> {
        let all = self.store.read(memories::namespaces)?;
        Ok(all.into_iter().filter(|ns| access.allows(ns)).collect())
    }

    /// Up to `n` of the newest live memories that `access` may read, below `before` when given
    /// (what a listing pages through).
    pub fn newest_memories(
        &self,
        access: &Access,
        before: Option<MemoryKey>,
        n: usize,
    ) -> Result<Vec<memories::Listing>> {
        let within = match access {
            Access::All => None,
            Access::Only(list) => Some(list.as_slice()),
        };
        self.store.read(|c| memories::newest(c, within, before, n))
    }

    /// Up to `n` ids of live memories of `namespace` starting with `prefix` (completion).
    pub fn ids_with_prefix(&self, namespace: &str, prefix: &str, n: usize) -> Result<Vec<String>> {
        self.store
            .read(|c| memories::ids_with_prefix(c, namespace, prefix, n))
    }

    /// Counts per namespace and kind, index lag and database size.
    pub fn stats(&self) -> Result<Stats> {
        self.stats_in(&Access::All)
    }

    /// [`Engine::stats`] for a caller limited to the namespaces of `access`: the counts are of
    /// those namespaces only (index lag and database size are the server's).
    pub fn stats_in(&self, access: &Access) -> Result<Stats> {
        let within = match access {
            Access::All => None,
            Access::Only(list) => Some(list.as_slice()),
        };
        let mut stats = self.store.read(|c| memories::stats(c, within))?;
        // What a search cannot see yet (the overlay makes recent writes searchable at once).
        stats.text_index_lag = self.prepare_text_read()?;
        if let Some(e) = self.embedder() {
            let model = e.model_id().to_owned();
            stats.vectors = self
                .store
                .read(|c| match within {
                    None => crate::store::vectors::coverage(c, &model),
                    Some(list) => crate::store::vectors::coverage_in(c, &model, list),
                })?
                .1;
            stats.embedding_model = Some(model);
            stats.vector_index_lag = self.vector_lag()?;
        }
        stats.database_bytes = self.store.size_bytes();
        Ok(stats)
    }

    /// Checks schema, change-log lag, text index and SQLite integrity, after letting the text
    /// index catch up (briefly waiting for another process that holds its writer).
    pub fn doctor(&self) -> Result<DoctorReport> {
        self.sync_text()?;
        let stats = self.store.read(|c| memories::stats(c, None))?;
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
