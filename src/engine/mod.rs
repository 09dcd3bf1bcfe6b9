//! The synchronous facade every front end uses: remember, relate, recall, get, update, forget,
//! restore, stats. It is the only place that coordinates the store and the derived indexes; it
//! never knows about MCP or async runtimes.

mod access;
pub mod control;
pub mod curate;
pub mod cursor;
mod estimate;
pub mod export;
mod flat;
mod graph;
mod halves;
pub mod import;
pub mod job_context;
mod jobs;
mod overlap;
mod read;
pub mod recall;
pub mod snippet;
mod sync;
mod task_rows;
pub mod traverse;
pub mod validate;
mod vectors;
pub mod work;
mod write;

pub use graph::relation_strength;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::embed::Embedder;
use crate::error::Result;
use crate::index::text::{OpenState, TextIndex};
use crate::model::{MemoryKey, Millis};
use crate::store::Store;

pub use crate::store::tasks::{Answered, Beat, Ending};
pub use access::{Access, Grant, Scope};
pub use estimate::Estimate;
pub use export::{ExportOutput, ExportRequest, ExportTarget, OutFormat};
pub use graph::GraphStats;
pub use import::{ImportReport, ImportRequest, Source};
pub use jobs::Background;
pub use read::{DoctorReport, MemoryDetail};
pub use write::{ForgetReport, Link, RelateItem, RelationRef, RememberItem, Remembered};

/// One open memory file: the database and its indexes.
pub struct Engine {
    cfg: Config,
    store: Store,
    /// The database's identity, recorded by the derived indexes with the position they applied.
    database_id: String,
    text: TextIndex,
    /// Set by writes; the background job indexes soon after.
    dirty: AtomicBool,
    /// Memories returned to callers, recorded off the hot path.
    touched: Mutex<Vec<(MemoryKey, Millis)>>,
    /// Accesses taken from `touched` at the last flush mark, sorted by key, written a chunk a
    /// tick so that no one flush takes the cores for long.
    draining: Mutex<Vec<(MemoryKey, Millis)>>,
    /// Relations walks went through (their keys), recorded off the hot path like `touched`.
    walked: Mutex<Vec<(i64, Millis)>>,
    /// The relation graph's copy: loaded on first use (or by the background job at start).
    graph: graph::Graph,
    /// The embedding provider (None: recall is text-only).
    embedder: Option<Arc<dyn Embedder>>,
    /// The chat endpoint for abstractive summaries (None: extractive only).
    summarizer: Option<Arc<dyn crate::embed::chat::Summarizer>>,
    /// The vector side: the index, its catch-up lock, the read overlay, the compact file.
    vectors: vectors::Vectors,
    /// Imports running: the background job leaves the vector index alone meanwhile (its
    /// insertions would take the cores the import needs) and catches up afterwards.
    bulk: std::sync::atomic::AtomicUsize,
    /// Set once a background job runs: reads then leave index maintenance to it.
    background: AtomicBool,
}

impl Engine {
    /// Opens (creating when missing) the database of `cfg` and its text index, rebuilding the
    /// index from the database when it is missing or unusable, and catching it up otherwise.
    pub fn open(cfg: Config) -> Result<Engine> {
        let embedder = crate::embed::open(&cfg.embedder)?;
        Engine::open_with(cfg, embedder)
    }

    /// Like [`Engine::open`], with an embedding provider made by the caller (`cfg.embedder` is
    /// ignored).
    pub fn open_with(mut cfg: Config, embedder: Option<Arc<dyn Embedder>>) -> Result<Engine> {
        let summarizer: Option<Arc<dyn crate::embed::chat::Summarizer>> = match &cfg.summarizer {
            Some(spec) => Some(Arc::new(crate::embed::chat::HttpSummarizer::new(spec)?)),
            None => None,
        };
        let store = Store::open(&cfg)?;
        let database_id = store.read(crate::store::changes::database_id)?;
        if cfg.index_dir_per_database {
            cfg.index_dir = cfg.index_dir.join(&database_id);
            cfg.index_dir_per_database = false;
        }
        let (text, state) = TextIndex::open(&cfg.text_index_dir(), cfg.text_writer_bytes)?;
        if state == OpenState::Recreated {
            tracing::warn!("text index was rebuilt from the database");
        }
        let engine = Engine {
            cfg,
            store,
            database_id,
            text,
            dirty: AtomicBool::new(false),
            touched: Mutex::new(Vec::new()),
            draining: Mutex::new(Vec::new()),
            walked: Mutex::new(Vec::new()),
            graph: graph::Graph::default(),
            embedder,
            summarizer,
            vectors: vectors::Vectors::default(),
            bulk: std::sync::atomic::AtomicUsize::new(0),
            background: AtomicBool::new(false),
        };
        engine.verify_text_history()?;
        // Consolidation runs left `running` by a process that is gone become `interrupted`, so
        // they can be undone at once (a failure here only delays that).
        if let Err(e) = engine.interrupt_dead_runs() {
            tracing::warn!(error = %e, "could not look for interrupted consolidation runs");
        }
        Ok(engine)
    }

    /// The configuration this engine was opened with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// True once [`Engine::start_background`] ran: the background job keeps the indexes current,
    /// so reads only overlay what it has not applied yet.
    fn has_background(&self) -> bool {
        self.background.load(Ordering::Acquire)
    }

    fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    fn resolve_namespace(&self, field: &str, ns: Option<&str>) -> Result<String> {
        let ns = ns.unwrap_or(crate::model::DEFAULT_NAMESPACE);
        validate::label(field, ns, self.cfg.limits.max_name_bytes)?;
        Ok(ns.to_owned())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.flush_touched();
        self.text.release_writer();
        if let Err(e) = self.close_vectors() {
            tracing::warn!(error = %e, "could not write the vector index; it will be rebuilt at next start");
        }
        if let Err(e) = self.close_graph() {
            tracing::warn!(error = %e, "could not write the graph file; the next start loads the graph from the database");
        }
    }
}

#[cfg(test)]
mod recall_tests;
#[cfg(test)]
pub(crate) mod tests;
