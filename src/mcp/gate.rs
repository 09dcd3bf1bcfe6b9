//! Fair admission of tool calls to the cores: at most `slots` calls (about the core count) run
//! at once; the rest wait in line, first come first served within a caller, and callers take
//! turns as slots free up, so one caller's flood of requests delays its own calls, not another
//! caller's.
//!
//! Without it, 64 concurrent recalls on two cores were 64 threads time-sliced by the kernel:
//! each took 32 times as long, their caches thrashed (a recall cost twice the CPU it costs
//! alone) and whichever caller sent most got most. A call waiting here holds no thread: it is
//! a future parked on a channel, woken with its slot already counted as taken.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// The line in front of the cores.
pub(crate) struct Gate {
    slots: usize,
    line: Mutex<Line>,
}

#[derive(Default)]
struct Line {
    /// Calls holding a slot.
    running: usize,
    /// Each waiting caller's calls, oldest first.
    waiting: HashMap<String, VecDeque<oneshot::Sender<Turn>>>,
    /// Callers with waiting calls, in the order they get the next free slots.
    turns: VecDeque<String>,
}

/// A slot held by a call; dropping it hands the slot to the next call in line.
pub(crate) struct Turn {
    gate: Option<Arc<Gate>>,
}

impl Gate {
    /// A gate of `slots` slots (at least one).
    pub(crate) fn new(slots: usize) -> Arc<Gate> {
        Arc::new(Gate {
            slots: slots.max(1),
            line: Mutex::new(Line::default()),
        })
    }

    /// A gate with a slot per core this process may use.
    pub(crate) fn per_core() -> Arc<Gate> {
        Gate::new(std::thread::available_parallelism().map_or(2, usize::from))
    }

    fn line(&self) -> std::sync::MutexGuard<'_, Line> {
        // Counters and queues only, each change made whole under the lock.
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot for a call of `caller`. A call dropped while it waits leaves the line
    /// (its slot, if one was handed to it meanwhile, goes to the next).
    pub(crate) async fn enter(self: &Arc<Self>, caller: &str) -> Turn {
        let waiting = {
            let mut line = self.line();
            if line.running < self.slots && line.turns.is_empty() {
                line.running += 1;
                return Turn {
                    gate: Some(Arc::clone(self)),
                };
            }
            let (tx, rx) = oneshot::channel();
            let line = &mut *line;
            let queue = line.waiting.entry(caller.to_owned()).or_default();
            if queue.is_empty() {
                line.turns.push_back(caller.to_owned());
            }
            queue.push_back(tx);
            rx
        };
        match waiting.await {
            Ok(turn) => turn,
            // The gate hands out every slot it takes back and never drops a waiter, so this
            // is unreachable; a call is never turned away for it.
            Err(_) => Turn { gate: None },
        }
    }

    /// Gives a freed slot to the next caller in turn, or frees it.
    fn pass_on(self: &Arc<Self>) {
        let mut guard = self.line();
        let line = &mut *guard;
        while let Some(caller) = line.turns.pop_front() {
            let Some(queue) = line.waiting.get_mut(&caller) else {
                continue;
            };
            let Some(next) = queue.pop_front() else {
                line.waiting.remove(&caller);
                continue;
            };
            if queue.is_empty() {
                line.waiting.remove(&caller);
            } else {
                line.turns.push_back(caller);
            }
            match next.send(Turn {
                gate: Some(Arc::clone(self)),
            }) {
                Ok(()) => return,
                // The waiting call is gone: its turn is disarmed (dropping it under this lock
                // must not pass the slot on again), and the next one gets the slot.
                Err(mut turn) => turn.gate = None,
            }
        }
        line.running = line.running.saturating_sub(1);
    }

    /// Calls holding a slot, and calls waiting for one.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let line = self.line();
        (line.running, line.waiting.values().map(VecDeque::len).sum())
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.pass_on();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    /// Up to the slots enter at once; the next waits until one leaves.
    #[tokio::test]
    async fn calls_beyond_the_slots_wait_for_one_to_leave() {
        let gate = Gate::new(2);
        let a = gate.enter("x").await;
        let _b = gate.enter("y").await;
        let g = Arc::clone(&gate);
        let third = tokio::spawn(async move { g.enter("z").await });
        settle().await;
        assert_eq!(gate.counts(), (2, 1));
        assert!(!third.is_finished());
        drop(a);
        let c = tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .expect("the waiting call entered")
            .unwrap();
        assert_eq!(gate.counts(), (2, 0));
        drop(c);
        assert_eq!(gate.counts(), (1, 0));
    }

    /// A caller with many calls in line does not keep another caller's one call waiting
    /// behind all of them: callers take turns, each caller's calls in the order they came.
    #[tokio::test]
    async fn callers_take_turns_and_each_callers_calls_keep_their_order() {
        let gate = Gate::new(1);
        let first = gate.enter("flood").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut calls = Vec::new();
        for (caller, n) in [
            ("flood", 1),
            ("flood", 2),
            ("flood", 3),
            ("quiet", 1),
            ("flood", 4),
        ] {
            let (g, order) = (Arc::clone(&gate), Arc::clone(&order));
            calls.push(tokio::spawn(async move {
                let turn = g.enter(caller).await;
                order.lock().unwrap().push(format!("{caller}{n}"));
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(turn);
            }));
            settle().await;
        }
        drop(first);
        for c in calls {
            c.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["flood1", "quiet1", "flood2", "flood3", "flood4"]
        );
        assert_eq!(gate.counts(), (0, 0));
    }

    /// A call given up while it waits (its client went away, its request timed out) leaves
    /// the line, and the slot goes to the next.
    #[tokio::test]
    async fn a_call_given_up_while_waiting_leaves_its_place_to_the_next() {
        let gate = Gate::new(1);
        let held = gate.enter("a").await;
        let g = Arc::clone(&gate);
        let gone = tokio::spawn(async move { g.enter("b").await });
        settle().await;
        let g = Arc::clone(&gate);
        let next = tokio::spawn(async move { g.enter("c").await });
        settle().await;
        gone.abort();
        let _ = gone.await;
        drop(held);
        let turn = tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .expect("the next call entered")
            .unwrap();
        assert_eq!(gate.counts(), (1, 0));
        drop(turn);
        assert_eq!(gate.counts(), (0, 0));
    }
}
