//! Background work of a serving process: index soon after writes, pick up other processes' writes,
//! record accesses, and let go of the index writer when idle so other processes can index.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::lock;
use crate::model::{MemoryKey, Millis};
use crate::store::memories;

/// How often the background loop looks for work.
const TICK: Duration = Duration::from_millis(50);
/// How long one tick may spend putting staged vectors into the HNSW graph.
const GRAPH_BUDGET: Duration = Duration::from_millis(300);
/// How often accesses (uses of memories, walks through relations) are taken for writing: each
/// write is a transaction, and under steady recall a flush a tick cost more than the counting.
/// Closing the engine writes what is left.
const ACCESS_EVERY: Duration = Duration::from_millis(5_000);
/// Most accesses written a tick: what a mark took is written over the next ticks, so that a
/// flush of five seconds of 64 clients' recalls does not take the cores at once.
const ACCESS_CHUNK: usize = 2_048;
/// How long the index writer is kept after the last indexing.
const WRITER_IDLE: Duration = Duration::from_millis(500);
/// With a listener for other processes' commits (PostgreSQL's NOTIFY), how often the change
/// log's head is read anyway (a notification lost with a dropped connection is caught then).
const POLL_WHILE_LISTENING: Duration = Duration::from_millis(1_000);
/// How long the listener waits for a notification before it looks whether to stop.
const LISTEN_WAIT: Duration = Duration::from_millis(500);

/// Every kind of background work, in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// Apply new change-log entries (ours or another process's) to the text index.
    CommitText,
    /// Load the relation graph (at start) or apply new change-log entries to it.
    SyncGraph,
    /// Rebuild the graph's compact adjacency once writes have stopped for a while, and write the
    /// graph file when it is due.
    FreezeGraph,
    /// Write recorded accesses (last accessed, access count) to the database: at a mark (`start`)
    /// take what was recorded since the last one, then write a chunk of it a tick.
    FlushAccess { start: bool },
    /// Release the text index writer after a quiet spell.
    ReleaseWriter,
    /// Load the vector index (at start), embed and index what changed, dump it now and then.
    SyncVectors,
}

/// Handle of the background thread. The thread ends when the handle or the engine is dropped,
/// after the tick it is in.
pub struct Background {
    stop: Arc<AtomicBool>,
    ended: std::sync::mpsc::Receiver<()>,
    _thread: std::thread::JoinHandle<()>,
}

impl Background {
    /// Stops the thread and waits up to `timeout` for the tick it is in to end; true when it
    /// did. The thread holds the engine during a tick: after this, the caller's last handle of
    /// the engine closes it in the caller's thread (writing what the next start reads and
    /// checkpointing the database), before the process exits.
    pub fn stop(self, timeout: Duration) -> bool {
        self.stop.store(true, Ordering::Release);
        match self.ended.recv_timeout(timeout) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => true,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Engine {
    /// Starts the background thread of a long-running process (the server).
    pub fn start_background(self: &Arc<Self>) -> std::io::Result<Background> {
        if self.embedder.is_some() && !self.vectors_loaded() {
            // The first tick loads the vector index; reads until then answer by text.
            self.vectors.set_loading(true);
        }
        if let Some(e) = self.embedder.clone() {
            // The model is parsed beside the index's load and the first reads, not by the
            // first recall (64 ms for the built-in one); a failed spawn leaves it to that
            // recall, as before.
            let _ = std::thread::Builder::new()
                .name("mnemograph-warm".into())
                .spawn(move || e.warm());
        }
        self.background.store(true, Ordering::Release);
        let weak: Weak<Engine> = Arc::downgrade(self);
        let stop = Arc::new(AtomicBool::new(false));
        let (ended_tx, ended) = std::sync::mpsc::channel();
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("mnemograph-jobs".into())
            .spawn(move || {
                let woken = listen(&weak, &stopping);
                run(&weak, &stopping, woken.as_deref());
                if let Some(engine) = weak.upgrade() {
                    engine.background.store(false, Ordering::Release);
                }
                let _ = ended_tx.send(());
            })?;
        Ok(Background {
            stop,
            ended,
            _thread: thread,
        })
    }

    pub(crate) fn note_touched(&self, keys: impl Iterator<Item = MemoryKey>, now: Millis) {
        lock::lock(&self.touched).extend(keys.map(|k| (k, now)));
    }

    /// Records that walks went through these relations (see [`Engine::flush_touched`]).
    pub(crate) fn note_walked(&self, relations: impl Iterator<Item = i64>, now: Millis) {
        lock::lock(&self.walked).extend(relations.map(|r| (r, now)));
    }

    /// Writes every recorded access to the database now: memories returned (their use and
    /// salience) and relations walked through (reinforced at most once a day, which restores
    /// their strength).
    pub(crate) fn flush_touched(&self) {
        self.flush_walked();
        let mut batch = std::mem::take(&mut *lock::lock(&self.draining));
        batch.append(&mut lock::lock(&self.touched));
        self.write_accesses(batch);
    }

    /// The background's flush: at a mark (`start`) the relations walked are written and the
    /// memories' accesses recorded since the last mark are queued; then at most `max` queued
    /// accesses are written (a memory's accesses are never split). True while some are queued.
    pub(crate) fn flush_access_step(&self, start: bool, max: usize) -> bool {
        if start {
            self.flush_walked();
        }
        let (chunk, more) = {
            let mut queue = lock::lock(&self.draining);
            if start && queue.is_empty() {
                *queue = std::mem::take(&mut *lock::lock(&self.touched));
                queue.sort_unstable_by_key(|(k, _)| *k);
            }
            let mut cut = max.min(queue.len());
            while cut > 0 && cut < queue.len() && queue[cut].0 == queue[cut - 1].0 {
                cut += 1;
            }
            let chunk: Vec<(MemoryKey, Millis)> = queue.drain(..cut).collect();
            (chunk, !queue.is_empty())
        };
        self.write_accesses(chunk);
        more
    }

    fn flush_walked(&self) {
        let walked = std::mem::take(&mut *lock::lock(&self.walked));
        if !walked.is_empty() {
            let now = walked.iter().map(|(_, t)| *t).max().unwrap_or(0);
            let mut keys: Vec<i64> = walked.into_iter().map(|(k, _)| k).collect();
            keys.sort_unstable();
            keys.dedup();
            if let Err(e) = self
                .store
                .write(|tx| crate::store::relations::reinforce(tx, &keys, now))
            {
                tracing::warn!(error = %e, "could not record relations walked through");
            }
        }
    }

    fn write_accesses(&self, batch: Vec<(MemoryKey, Millis)>) {
        if batch.is_empty() {
            return;
        }
        let now = batch.iter().map(|(_, t)| *t).max().unwrap_or(0);
        let keys: Vec<MemoryKey> = batch.into_iter().map(|(k, _)| k).collect();
        let reinforce = |s, at| crate::engine::curate::salience::on_use(s, at, now);
        if let Err(e) = self
            .store
            .write(|tx| memories::touch(tx, &keys, now, reinforce))
        {
            tracing::warn!(error = %e, "could not record memory accesses");
        }
    }

    fn run_job(&self, job: Job) -> crate::Result<()> {
        match job {
            Job::CommitText => self.index_pending_text(),
            Job::SyncGraph => {
                self.sync_graph()?;
                // At once after a load from the database, so the next start reads the file.
                self.write_graph_file_if_due(false)
            }
            Job::FreezeGraph => {
                self.freeze_graph_if_quiet()?;
                self.write_graph_file_if_due(false)
            }
            Job::FlushAccess { start } => {
                self.flush_access_step(start, ACCESS_CHUNK);
                Ok(())
            }
            Job::ReleaseWriter => {
                self.text.release_writer();
                Ok(())
            }
            Job::SyncVectors => {
                let loaded = self.ensure_vectors(true);
                self.vectors.set_loading(false);
                loaded?;
                self.sync_vectors(None)?;
                if self.bulk.load(Ordering::Acquire) > 0 {
                    // An import runs: its vectors are staged (searchable by scan); the graph
                    // insertions, which would take the cores it needs, wait until it is done.
                    return Ok(());
                }
                // The HNSW insertions, the bulk of the background CPU while others write, run on
                // the low-priority pool: they yield to requests (searches scan what waits).
                match crate::priority::background_pool() {
                    Some(pool) => pool.install(|| self.index_staged_vectors(GRAPH_BUDGET))?,
                    None => self.index_staged_vectors(GRAPH_BUDGET)?,
                };
                self.dump_vectors_if_due(false)
            }
        }
    }
}

/// On PostgreSQL, starts a thread that listens for other processes' commits and sets the flag it
/// returns when one comes; `None` on SQLite (the loop reads the log's head every tick).
fn listen(weak: &Weak<Engine>, stop: &Arc<AtomicBool>) -> Option<Arc<AtomicBool>> {
    let engine = weak.upgrade()?;
    if !engine.store.is_postgres() {
        return None;
    }
    drop(engine);
    let woken = Arc::new(AtomicBool::new(true));
    let (weak, stop, flag) = (weak.clone(), Arc::clone(stop), Arc::clone(&woken));
    let spawned = std::thread::Builder::new()
        .name("mnemograph-listen".into())
        .spawn(move || {
            let mut listener = None;
            while !stop.load(Ordering::Acquire) {
                let Some(engine) = weak.upgrade() else { return };
                if listener.is_none() {
                    match engine.store.listen() {
                        Ok(l) => listener = l,
                        Err(e) => tracing::warn!(error = %e, "cannot listen for changes; polling"),
                    }
                    // Whatever came while no one listened is read by the next tick.
                    flag.store(true, Ordering::Release);
                }
                drop(engine);
                let Some(l) = &listener else {
                    std::thread::sleep(POLL_WHILE_LISTENING);
                    continue;
                };
                match l.wait(LISTEN_WAIT) {
                    Ok(true) => flag.store(true, Ordering::Release),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "listening for changes stopped; listening again");
                        listener = None;
                        std::thread::sleep(LISTEN_WAIT);
                    }
                }
            }
        });
    match spawned {
        Ok(_) => Some(woken),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the listener thread; polling");
            None
        }
    }
}

fn run(weak: &Weak<Engine>, stop: &AtomicBool, woken: Option<&AtomicBool>) {
    let mut last_index = Instant::now();
    let mut last_poll = Instant::now();
    let mut last_access = Instant::now();
    let mut known_head = None;
    let mut first = true;
    loop {
        if !first {
            std::thread::sleep(TICK);
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Some(engine) = weak.upgrade() else { return };
        let mut jobs = Vec::with_capacity(4);
        let starting = std::mem::take(&mut first);
        if starting {
            jobs.push(Job::SyncGraph);
        }
        let dirty = engine.dirty.swap(false, Ordering::AcqRel);
        // Another process's writes show up only in the change log: read its head once a tick, or,
        // with a listener, when it heard of a commit (and once a POLL_WHILE_LISTENING anyway).
        let news = match woken {
            None => true,
            Some(flag) => {
                flag.swap(false, Ordering::AcqRel)
                    || dirty
                    || known_head.is_none()
                    || last_poll.elapsed() >= POLL_WHILE_LISTENING
            }
        };
        let head = if news {
            last_poll = Instant::now();
            engine.store.read(crate::store::changes::max_seq).ok()
        } else {
            known_head
        };
        known_head = head;
        let lagging = head.is_some_and(|h| h > engine.text.reader_seq());
        if dirty || lagging {
            jobs.push(Job::CommitText);
            jobs.push(Job::SyncGraph);
            last_index = Instant::now();
        }
        if engine.embedder.is_some()
            && (starting || dirty || lagging || engine.vectors_behind(head))
        {
            jobs.push(Job::SyncVectors);
        }
        jobs.push(Job::FreezeGraph);
        let accessed =
            !lock::lock(&engine.touched).is_empty() || !lock::lock(&engine.walked).is_empty();
        let start = accessed && last_access.elapsed() >= ACCESS_EVERY;
        if start {
            last_access = Instant::now();
        }
        if start || !lock::lock(&engine.draining).is_empty() {
            jobs.push(Job::FlushAccess { start });
        }
        if engine.text.holds_writer() && last_index.elapsed() > WRITER_IDLE {
            jobs.push(Job::ReleaseWriter);
        }
        for job in jobs {
            if let Err(e) = engine.run_job(job) {
                tracing::warn!(?job, error = %e, "background job failed");
            }
        }
    }
}
