//! The compact vector file (see [`crate::index::vector::flat`]) from the engine's side: read by the first
//! searches of a fresh process while the HNSW graph loads, written beside the index (also while
//! vectors are staged, which the graph dump has to wait for) and at close, and by a command that
//! wrote vectors without loading the index.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::Engine;
use crate::error::Result;
use crate::index::vector::flat::FlatVectors;
use crate::store::{changes, vectors};

/// How often the file is rewritten while the index moves (besides at close).
const WRITE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Rows read from the database per page when a command writes the file.
const PAGE: usize = 10_000;

/// What this process knows of the file.
pub(crate) struct FlatState {
    slot: Slot,
    /// Change-log position of the file on disk as far as this process knows (-1: unknown).
    written_seq: i64,
    written_at: Instant,
}

enum Slot {
    /// Not read yet.
    Untried,
    /// Not there, not usable, or no longer needed (the index is loaded).
    Absent,
    Ready(Arc<FlatVectors>),
}

impl Default for FlatState {
    fn default() -> FlatState {
        FlatState {
            slot: Slot::Untried,
            written_seq: -1,
            written_at: Instant::now(),
        }
    }
}

impl Engine {
    /// The file's vectors when it belongs to this database's history (read on first use).
    pub(crate) fn flat_for_read(&self) -> Result<Option<Arc<FlatVectors>>> {
        let Some(e) = &self.embedder else {
            return Ok(None);
        };
        let mut state = self.vectors.flat();
        match &state.slot {
            Slot::Ready(f) => return Ok(Some(Arc::clone(f))),
            Slot::Absent => return Ok(None),
            Slot::Untried => {}
        }
        let started = Instant::now();
        let read = match FlatVectors::read(&self.cfg.vector_index_dir(), e.model_id(), e.dim()) {
            Ok(Some(f)) => {
                if self.store.read(|c| changes::follows(c, f.position()))? {
                    Some(Arc::new(f))
                } else {
                    tracing::info!(
                        "the compact vector file belongs to another database or history; not used"
                    );
                    None
                }
            }
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(error = %err, "the compact vector file is not used");
                None
            }
        };
        state.slot = match &read {
            Some(f) => {
                tracing::info!(
                    vectors = f.len(),
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "compact vector file read; searched until the vector index is loaded"
                );
                state.written_seq = f.position().seq;
                Slot::Ready(Arc::clone(f))
            }
            None => Slot::Absent,
        };
        Ok(read)
    }

    /// Once the index is installed at `seq`: the compact file stays (read now) when it covers
    /// more of this database's change log than the index — a command-line import wrote it after
    /// the index's dump, or there is no dump — and is freed otherwise. A file kept is never
    /// overwritten by the index's own before the index has passed it.
    pub(crate) fn settle_flat(&self, seq: i64) -> Result<()> {
        let Some(e) = &self.embedder else {
            return Ok(());
        };
        let on_disk = match &self.vectors.flat().slot {
            Slot::Ready(f) => Some(f.position().clone()),
            _ => FlatVectors::position_in(&self.cfg.vector_index_dir(), e.model_id(), e.dim()),
        };
        let ahead = match on_disk {
            Some(p) if p.seq > seq => self.store.read(|c| changes::follows(c, &p))?,
            _ => false,
        };
        if ahead && self.flat_for_read()?.is_some() {
            return Ok(());
        }
        self.drop_flat();
        Ok(())
    }

    /// The compact file while it covers more of the change log than the loaded index does (an
    /// index built from the database, with no dump to load, as after a command-line import);
    /// once the index has passed it, the file's vectors are freed.
    pub(crate) fn flat_ahead_of_index(&self) -> Result<Option<Arc<FlatVectors>>> {
        if matches!(self.vectors.flat().slot, Slot::Absent) {
            return Ok(None);
        }
        let Some(f) = self.flat_for_read()? else {
            return Ok(None);
        };
        if self
            .vectors
            .loaded_seq()
            .is_none_or(|seq| f.position().seq > seq)
        {
            return Ok(Some(f));
        }
        self.drop_flat();
        Ok(None)
    }

    /// Frees the file's vectors once the index is loaded.
    pub(crate) fn drop_flat(&self) {
        let mut state = self.vectors.flat();
        if let Slot::Ready(f) = &state.slot {
            state.written_seq = state.written_seq.max(f.position().seq);
        }
        state.slot = Slot::Absent;
    }

    /// Rewrites the file from the loaded index when the index moved past it and `force` or
    /// enough time has passed.
    pub(crate) fn write_flat_if_due(&self, force: bool) -> Result<()> {
        let written = {
            let state = self.vectors.flat();
            if !force && state.written_at.elapsed() < WRITE_EVERY {
                return Ok(());
            }
            state.written_seq
        };
        let Some(seq) = self.vectors.loaded_seq().filter(|seq| *seq > written) else {
            return Ok(());
        };
        let Some(position) = self.store.read(|c| changes::position_at(c, seq))? else {
            return Ok(());
        };
        let started = Instant::now();
        let Some(flat) = self.vectors.with_loaded(|ix| ix.flat(position)) else {
            return Ok(());
        };
        flat.write(&self.cfg.vector_index_dir())?;
        tracing::debug!(
            vectors = flat.len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "compact vector file written"
        );
        self.flat_written(seq);
        Ok(())
    }

    fn flat_written(&self, seq: i64) {
        let mut state = self.vectors.flat();
        state.written_seq = state.written_seq.max(seq);
        state.written_at = Instant::now();
    }

    /// Writes the file from the stored vectors, for a process that wrote vectors without the
    /// index (a command-line import). Writes nothing unless every live memory has its vector
    /// (the file must hold everything up to its position). Returns the vectors written.
    pub fn write_flat_from_store(&self) -> Result<Option<usize>> {
        let Some(e) = &self.embedder else {
            return Ok(None);
        };
        let model = e.model_id();
        let (position, stored) = self.store.snapshot(|c| {
            let (live, covered) = vectors::coverage(c, model)?;
            if live != covered {
                return Ok((None, Vec::new()));
            }
            let position = changes::head(c)?;
            let mut stored = Vec::with_capacity(live.max(0) as usize);
            let mut after = crate::model::MemoryKey(0);
            loop {
                let page = vectors::current_page(c, model, after, PAGE)?;
                let Some((last, _)) = page.last() else { break };
                after = last.key;
                stored.extend(page.into_iter().map(|(v, _)| (v.key.0 as u64, v.vec)));
            }
            Ok((Some(position), stored))
        })?;
        let Some(position) = position else {
            return Ok(None);
        };
        let seq = position.seq;
        let flat = FlatVectors::new(
            model,
            e.dim(),
            position,
            stored.iter().map(|(k, v)| (*k, v.as_slice())),
        );
        flat.write(&self.cfg.vector_index_dir())?;
        self.flat_written(seq);
        Ok(Some(flat.len()))
    }
}
