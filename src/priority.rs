//! The bulk of the background work yields the CPU to requests: the HNSW insertions of every
//! process's new vectors run on a pool of lower-priority threads, so a recall answered while
//! other processes write (and this process indexes their writes) is not slowed by that work.
//! Only work that may lag runs there: searches scan the vectors still waiting for the graph.
//! Loading indexes, committing text and tasks keep the normal priority, so a busy machine does
//! not starve them.

use std::sync::OnceLock;

/// How far background threads are lowered (`nice` steps): at 10 a thread gets about a tenth of
/// the share of a request thread on the same core, and still a share when the machine is busy.
#[cfg(target_os = "linux")]
const BACKGROUND_NICE: libc::c_int = 10;

/// The lowest priority (highest nice value) Linux has.
#[cfg(target_os = "linux")]
const LOWEST_NICE: libc::c_int = 19;

/// Lowers the scheduling priority of the calling thread (only this thread: on Linux the nice
/// value belongs to the thread) for good: for threads that only ever do background work. The
/// step is relative: a server started under `nice 10` runs its background threads at 19, not at
/// its request threads' 10. Best effort: where it is not possible (other systems), nothing
/// changes.
pub(crate) fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls with no pointers; `gettid` cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        // `getpriority` may rightly answer -1, so failure is told by errno alone.
        // SAFETY: `__errno_location` points at this thread's errno; the calls take no pointers.
        let current = unsafe {
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
            (*libc::__errno_location() == 0).then_some(nice)
        };
        let target = (current.unwrap_or(0) + BACKGROUND_NICE).min(LOWEST_NICE);
        // SAFETY: as above; a failure only leaves the priority unchanged.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, target) };
        if rc != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "could not lower the background thread's priority"
            );
        }
    }
}

/// The thread pool the HNSW insertions of the background job run on: as many threads as cores,
/// each at the background priority. `None` when threads cannot be started (the work then
/// runs on the calling thread).
pub(crate) fn background_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("mnemograph-bg-{i}"))
            .start_handler(|_| lower_this_thread())
            .build()
            .map_err(|e| tracing::warn!(error = %e, "no background thread pool"))
            .ok()
    })
    .as_ref()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn nice_of_this_thread() -> libc::c_int {
        // SAFETY: as in `lower_this_thread`.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        // SAFETY: as above (-1 is also a valid answer, but never ours here).
        unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }
    }

    #[test]
    fn background_threads_run_below_request_threads() {
        let before = nice_of_this_thread();
        let lowered = std::thread::spawn(|| {
            lower_this_thread();
            nice_of_this_thread()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (before + BACKGROUND_NICE).min(LOWEST_NICE));
        // Only the thread that asked was lowered.
        assert_eq!(nice_of_this_thread(), before);
        let pool = background_pool().expect("a pool");
        assert_eq!(pool.install(nice_of_this_thread), lowered);
    }

    #[test]
    fn a_niced_server_lowers_its_background_further() {
        let (started, lowered) = std::thread::spawn(|| {
            // A thread of a server started under `nice`: raising one's own nice value needs no
            // privilege.
            let started = (nice_of_this_thread() + 5).min(LOWEST_NICE);
            // SAFETY: as in `lower_this_thread`.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
            // SAFETY: as above.
            assert_eq!(
                unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, started) },
                0
            );
            lower_this_thread();
            (started, nice_of_this_thread())
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (started + BACKGROUND_NICE).min(LOWEST_NICE));
        assert!(lowered > started || started == LOWEST_NICE);
    }
}
