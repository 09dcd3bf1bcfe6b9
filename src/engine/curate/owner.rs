//! Which process holds a run's lease, and whether it is gone. A lease's holder names its process
//! (`pid=…,start=…,boot=…,pidns=…`: the process id, its start time in clock ticks after boot, the
//! kernel's boot id and the process-id namespace). A process on the same machine — the same boot
//! and namespace — is looked up in `/proc`: when it is missing, a zombie, or another process
//! that got the same id, the holder is gone at once, without waiting for its heartbeat to go
//! stale. Elsewhere (another machine on a shared PostgreSQL, another container, a system
//! without `/proc`) nothing can be told here and the heartbeat alone decides.

use std::sync::OnceLock;

/// A process, as a lease names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Process {
    pid: u32,
    /// Start time after boot, in clock ticks (`/proc/PID/stat`, field 22).
    start: u64,
    /// `/proc/sys/kernel/random/boot_id`: differs on another machine and after a reboot.
    boot: String,
    /// The process-id namespace (`/proc/self/ns/pid`): ids of another one mean nothing here.
    pidns: String,
}

/// State and start time of process `pid` from `/proc/PID/stat` (`None`: no such process, or
/// unreadable).
fn stat(pid: &str) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces or parentheses itself.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 3 (state) … 22 (start time): the start time is 19 after the state.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty() && !s.contains([',', ' ', '=']))
}

impl Process {
    /// This process, when `/proc` can describe it (and describes this process: its `self` has
    /// this process's id, so it is mounted for this namespace).
    pub(crate) fn current() -> Option<&'static Process> {
        static CURRENT: OnceLock<Option<Process>> = OnceLock::new();
        CURRENT
            .get_or_init(|| {
                let pid = std::process::id();
                let me = std::fs::read_link("/proc/self").ok()?;
                if me.to_str()? != pid.to_string() {
                    return None;
                }
                let (_, start) = stat("self")?;
                let pidns = std::fs::read_link("/proc/self/ns/pid").ok()?;
                let pidns = pidns.to_str()?.replace(['[', ']', ':'], "");
                Some(Process {
                    pid,
                    start,
                    boot: read_trimmed("/proc/sys/kernel/random/boot_id")?,
                    pidns,
                })
            })
            .as_ref()
    }

    /// How a lease names the process.
    pub(crate) fn label(&self) -> String {
        format!(
            "pid={},start={},boot={},pidns={}",
            self.pid, self.start, self.boot, self.pidns
        )
    }

    /// The process a holder names (the last word of the holder), if it names one.
    pub(crate) fn of_holder(holder: &str) -> Option<Process> {
        let label = holder.rsplit(' ').next()?;
        let mut p = Process {
            pid: 0,
            start: 0,
            boot: String::new(),
            pidns: String::new(),
        };
        for part in label.split(',') {
            let (k, v) = part.split_once('=')?;
            match k {
                "pid" => p.pid = v.parse().ok()?,
                "start" => p.start = v.parse().ok()?,
                "boot" => p.boot = v.to_owned(),
                "pidns" => p.pidns = v.to_owned(),
                _ => return None,
            }
        }
        (p.pid != 0 && !p.boot.is_empty() && !p.pidns.is_empty()).then_some(p)
    }

    /// Whether this process is gone, seen from `here` (`None`: it runs where `here` cannot
    /// look, so only its heartbeat tells).
    fn gone_from(&self, here: &Process) -> Option<bool> {
        if self.boot != here.boot || self.pidns != here.pidns {
            return None;
        }
        Some(match stat(&self.pid.to_string()) {
            None => true,
            // A zombie or a dead task has stopped; another start time is another process.
            Some((state, start)) => matches!(state, 'Z' | 'X' | 'x') || start != self.start,
        })
    }
}

/// A lease holder's name: `who` (such as `run:ID`) followed by this process's label, when it
/// has one.
pub(crate) fn holder(who: &str) -> String {
    match Process::current() {
        Some(p) => format!("{who} {}", p.label()),
        None => who.to_owned(),
    }
}

/// Whether the process that `holder` names is known to be gone (false when that cannot be told
/// here).
pub(crate) fn holder_gone(holder: &str) -> bool {
    match (Process::of_holder(holder), Process::current()) {
        (Some(p), Some(here)) => p.gone_from(here) == Some(true),
        _ => false,
    }
}

/// Says on stderr that a test that needs `/proc` did not run here.
#[cfg(test)]
pub(crate) fn skipped() {
    use std::io::Write;
    // Written to the process's stderr itself, which the harness does not capture.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: no /proc describes this process here; a lease holder's process cannot be looked up"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_names_its_process_and_a_live_one_is_not_gone() {
        let Some(me) = Process::current() else {
            skipped();
            return;
        };
        let h = holder("run:run_1");
        assert!(h.starts_with("run:run_1 pid="), "{h}");
        assert_eq!(Process::of_holder(&h).as_ref(), Some(me));
        assert!(!holder_gone(&h));
        // Names without a process (older holders) cannot be told gone.
        assert!(!holder_gone("run:run_1"));
        assert_eq!(Process::of_holder("run:run_1"), None);
    }

    #[test]
    fn an_ended_process_or_a_reused_id_is_gone_and_another_machine_cannot_be_told() {
        let Some(me) = Process::current() else {
            skipped();
            return;
        };
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let ended = Process { pid, ..me.clone() };
        assert!(holder_gone(&format!("run:x {}", ended.label())));
        // This process's id with another start time: the id was reused.
        let reused = Process {
            start: me.start + 1,
            ..me.clone()
        };
        assert!(holder_gone(&format!("run:x {}", reused.label())));
        // Another boot or namespace: only the heartbeat can tell.
        let elsewhere = Process {
            boot: "another-machine".into(),
            ..ended.clone()
        };
        assert!(!holder_gone(&format!("run:x {}", elsewhere.label())));
        let container = Process {
            pidns: "pid4026530000".into(),
            ..ended
        };
        assert!(!holder_gone(&format!("run:x {}", container.label())));
    }

    #[test]
    fn a_zombie_is_gone() {
        let Some(me) = Process::current() else {
            skipped();
            return;
        };
        // Ended but not waited for: a zombie until reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stat(&pid.to_string()).is_some_and(|(s, _)| s != 'Z') {
            assert!(
                std::time::Instant::now() < deadline,
                "the child did not end"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let start = stat(&pid.to_string()).map_or(0, |(_, s)| s);
        let zombie = Process {
            pid,
            start,
            ..me.clone()
        };
        assert!(holder_gone(&format!("run:x {}", zombie.label())));
        child.wait().unwrap();
    }
}
