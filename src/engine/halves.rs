//! The threads that search a hybrid recall's vector half while the calling thread searches its
//! words: one per core, started with the first hybrid recall, each blocked on a queue until a
//! half arrives.
//!
//! Not rayon's pool, which served this before: a rayon worker that runs out of work spins
//! (yielding the CPU a few dozen times) before it sleeps, and with one half per recall every
//! half ended in such a spin — 4 % of the server's CPU under one HTTP client, more than the
//! queue here costs in all. Here a helper sleeps on a condition variable as soon as the queue is
//! empty, and a caller waits for its half the same way.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The helpers' queue, first in first out.
struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

impl Queue {
    fn push(&self, job: Job) {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(job);
        self.ready.notify_one();
    }

    fn serve(&self) {
        loop {
            let job = wait_for(&self.jobs, &self.ready, VecDeque::pop_front);
            // A job catches its own panic (see `join`); nothing unwinds through here.
            job();
        }
    }
}

/// Sleeps on `ready` until `take` gets something out of what `state` guards.
fn wait_for<S, T>(
    state: &Mutex<S>,
    ready: &Condvar,
    mut take: impl FnMut(&mut S) -> Option<T>,
) -> T {
    let mut guard = state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(t) = take(&mut guard) {
            return t;
        }
        guard = ready.wait(guard).unwrap_or_else(PoisonError::into_inner);
    }
}

/// The queue, its helpers started on first use; `None` when the system would start none.
fn queue() -> Option<&'static Queue> {
    static QUEUE: OnceLock<Option<&'static Queue>> = OnceLock::new();
    *QUEUE.get_or_init(|| {
        let queue: &'static Queue = Box::leak(Box::new(Queue {
            jobs: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        }));
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        let started = (0..threads)
            .filter(|i| {
                std::thread::Builder::new()
                    .name(format!("mnemograph-recall-{i}"))
                    .spawn(|| queue.serve())
                    .is_ok()
            })
            .count();
        if started == 0 {
            tracing::warn!(
                "no recall threads: a hybrid recall searches its halves one after the other"
            );
            return None;
        }
        Some(queue)
    })
}

/// A half's result, once a helper has put it there.
struct Slot<T> {
    value: Mutex<Option<std::thread::Result<T>>>,
    done: Condvar,
}

impl<T> Slot<T> {
    fn wait(&self) -> std::thread::Result<T> {
        wait_for(&self.value, &self.done, Option::take)
    }
}

/// Waits for the helper's half when dropped, so that whatever the half borrows outlives it
/// even when the caller's own half panics.
struct Joined<'a, T>(&'a Slot<T>);

impl<T> Joined<'_, T> {
    fn result(self) -> std::thread::Result<T> {
        let r = self.0.wait();
        // Waited for already: no second wait on drop.
        std::mem::forget(self);
        r
    }
}

impl<T> Drop for Joined<'_, T> {
    fn drop(&mut self) {
        let _ = self.0.wait();
    }
}

/// Runs `there` on a helper thread and `here` on this one, and returns both results once both
/// are done (`there`'s panic as an `Err`, `here`'s unwinds as usual, after `there` is done).
/// Without helpers, runs `there` first, here.
pub(crate) fn join<'a, T: Send + 'a, H>(
    there: impl FnOnce() -> T + Send + 'a,
    here: impl FnOnce() -> H,
) -> (std::thread::Result<T>, H) {
    let Some(queue) = queue() else {
        let t = catch_unwind(AssertUnwindSafe(there));
        return (t, here());
    };
    let slot = Arc::new(Slot {
        value: Mutex::new(None),
        done: Condvar::new(),
    });
    let put = Arc::clone(&slot);
    let job: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
        let r = catch_unwind(AssertUnwindSafe(there));
        *put.value.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
        put.done.notify_one();
    });
    // SAFETY: the job may borrow what lives for 'a; it is erased to 'static only to cross to
    // the helper. `Joined` waits for the job to have run to its end (it stores its result as
    // its last act, after which it touches nothing borrowed) before this function returns or
    // unwinds, so no borrow is used after 'a ends. The job never panics out of a helper: its
    // body's panic is caught and stored.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Job>(job) };
    queue.push(job);
    let joined = Joined(&slot);
    let h = here();
    (joined.result(), h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both halves run, the helper's on another thread, and borrow the caller's data.
    #[test]
    fn both_halves_run_and_may_borrow() {
        let words = String::from("borrowed words");
        let me = std::thread::current().id();
        let (there, here) = join(
            || (words.split(' ').count(), std::thread::current().id()),
            || words.len(),
        );
        let (count, on) = there.unwrap();
        assert_eq!((count, here), (2, 14));
        assert_ne!(on, me, "the helper's half ran on this thread");
    }

    /// A panicking helper half is an error for the caller, and the helpers keep serving.
    #[test]
    fn a_panic_in_the_helper_half_is_returned_and_the_helpers_go_on() {
        let (there, here) = join(|| -> u32 { panic!("the half failed") }, || 7);
        assert!(there.is_err());
        assert_eq!(here, 7);
        for i in 0..100u32 {
            let (there, _) = join(move || i * 2, || ());
            assert_eq!(there.unwrap(), i * 2);
        }
    }

    /// A panic in the caller's half unwinds only after the helper's half, which borrows the
    /// caller's data, has finished.
    #[test]
    fn a_panic_here_waits_for_the_half_there() {
        let finished = std::sync::atomic::AtomicBool::new(false);
        let r = catch_unwind(AssertUnwindSafe(|| {
            join(
                || {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    finished.store(true, std::sync::atomic::Ordering::SeqCst);
                },
                || panic!("this half failed"),
            )
        }));
        assert!(r.is_err());
        assert!(finished.load(std::sync::atomic::Ordering::SeqCst));
    }

    /// Many callers at once: every half comes back to its own caller.
    #[test]
    fn many_callers_each_get_their_own_half() {
        let callers: Vec<_> = (0..16u64)
            .map(|c| {
                std::thread::spawn(move || {
                    (0..200u64).all(|n| {
                        let (there, here) = join(move || c * 1_000 + n, move || n);
                        there.unwrap() == c * 1_000 + here
                    })
                })
            })
            .collect();
        for c in callers {
            assert!(c.join().unwrap());
        }
    }
}
