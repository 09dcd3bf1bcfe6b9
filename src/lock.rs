//! One policy for locks a panic unwound through: every lock recovers, so one panicking request
//! never turns into a permanent error for the life of the process.
//!
//! A panic while a lock is held leaves its data in one of two conditions, and each lock in the
//! crate is of one kind:
//!
//! - **Always valid.** The SQLite connections (a transaction dropped while unwinding rolls back,
//!   so the connection is idle and the database untouched), the reader pool, queues of pending
//!   work, the vector index's internals (each mutation is a single assignment or append). These
//!   recover with [`lock`] and [`read`]: the poison is cleared and the data used as it is.
//! - **Derived, possibly half-changed.** The in-memory relation graph, the engine's vector state,
//!   the read overlays and the tantivy writer (with its uncommitted documents) are rebuilt from
//!   the database when a panic may have interrupted a change to them: their owners take them
//!   with [`write_or_reset`], [`read_or_reset`] or [`lock_or_reset`], which reset them (to "not
//!   loaded") first.
//!
//! Lock order, outer first (a thread holding one may take only those after it):
//! `Vectors::sync` → `Vectors::index` → `VectorIndex` writer → `VectorIndex` state (the overlay
//! and the compact file are locked alone); `Graph::loading` → `Graph::state` → `Store` writer or
//! reader pool; the text index writer slot → `Store` reader pool. The graph and the vector locks
//! are never held together.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, recovering it when a panic unwound through an earlier holder.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| {
        m.clear_poison();
        poisoned.into_inner()
    })
}

/// Read-locks `l`, recovering it when a panic unwound through an earlier writer.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|poisoned| {
        l.clear_poison();
        poisoned.into_inner()
    })
}

/// Locks derived state; when a panic unwound through an earlier holder, `reset` puts it back
/// into a valid state first (see [`write_or_reset`]).
pub(crate) fn lock_or_reset<T>(m: &Mutex<T>, reset: impl FnOnce(&mut T)) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => {
            let mut g = poisoned.into_inner();
            reset(&mut g);
            m.clear_poison();
            g
        }
    }
}

/// Write-locks derived state; when a panic unwound through an earlier writer, `reset` puts it
/// back into a valid state (typically "not loaded") before anyone sees it again.
pub(crate) fn write_or_reset<T>(
    l: &RwLock<T>,
    reset: impl FnOnce(&mut T),
) -> RwLockWriteGuard<'_, T> {
    match l.write() {
        Ok(g) => g,
        Err(poisoned) => {
            let mut g = poisoned.into_inner();
            reset(&mut g);
            l.clear_poison();
            tracing::warn!("a panic interrupted a change to in-memory state; it is reloaded");
            g
        }
    }
}

/// Read-locks derived state; when a panic unwound through an earlier writer, the state is reset
/// first (see [`write_or_reset`]).
pub(crate) fn read_or_reset<T>(
    l: &RwLock<T>,
    reset: impl FnOnce(&mut T),
) -> RwLockReadGuard<'_, T> {
    if l.is_poisoned() {
        drop(write_or_reset(l, reset));
    }
    read(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poison<T: Send + Sync>(l: &RwLock<T>) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = l.write();
            panic!("forced");
        }));
        assert!(l.is_poisoned());
    }

    #[test]
    fn derived_state_is_reset_and_plain_data_kept_after_a_panic() {
        let derived = RwLock::new(Some(7));
        poison(&derived);
        assert_eq!(*read_or_reset(&derived, |s| *s = None), None);
        assert!(!derived.is_poisoned());
        *write_or_reset(&derived, |_| unreachable!()) = Some(8);
        assert_eq!(
            *read_or_reset(&derived, |s| *s = None),
            Some(8),
            "reset once only"
        );

        let plain = RwLock::new(vec![1, 2]);
        poison(&plain);
        assert_eq!(*read(&plain), [1, 2]);
        assert!(!plain.is_poisoned());

        let m = Mutex::new(3);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = m.lock();
            panic!("forced");
        }));
        assert_eq!(*lock(&m), 3);
        assert!(!m.is_poisoned());
    }
}
