//! Background work yields the CPU to requests: the background thread, the threads it hands batch
//! work to, and the threads running tasks run at a lower scheduling priority, so a recall answered
//! while other processes write (and this process indexes their writes, or walks a big graph for a
//! task) is not slowed by that work.

use std::sync::OnceLock;

/// How far background threads are lowered: to the lowest `nice` level, where a thread gets about
/// 1/70 of the share of a request thread on the same core. Several processes each run a few
/// background threads; together they must still leave requests most of the CPU.
#[cfg(target_os = "linux")]
const BACKGROUND_NICE: libc::c_int = 19;

/// Lowers the scheduling priority of the calling thread (only this thread: on Linux the nice
/// value belongs to the thread) for good: for threads that only ever do background work. Best
/// effort: where it is not possible (other systems), nothing changes.
pub fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls with no pointers; `gettid` cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        // SAFETY: as above; a failure only leaves the priority unchanged.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE) };
        if rc != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "could not lower the background thread's priority"
            );
        }
    }
}

/// The thread pool background batch work runs on (vector graph insertions): as many threads as
/// cores, each at the background priority. `None` when threads cannot be started (the work then
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
        assert_eq!(lowered, (before + BACKGROUND_NICE).min(19));
        // Only the thread that asked was lowered.
        assert_eq!(nice_of_this_thread(), before);
        let pool = background_pool().expect("a pool");
        assert_eq!(pool.install(nice_of_this_thread), lowered);
    }
}
