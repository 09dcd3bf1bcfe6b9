//! What the measuring examples share: report lines on stdout and progress on stderr, latency
//! percentiles, and a `serve --http` child with the URL it listens on.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// A line of the report, on stdout.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// A progress line, on stderr.
macro_rules! note {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

/// Percentiles of a series of durations, in milliseconds (nearest rank).
pub(crate) struct Summary {
    pub(crate) n: usize,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

/// The percentiles of `samples` (not empty).
pub(crate) fn summarize(samples: &[Duration]) -> Summary {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
    Summary {
        n: ms.len(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: ms[ms.len() - 1],
    }
}

/// A `serve --http` child of `bin` on `db` (with `extra` arguments and, when given, the log
/// filter `log`), and the URL it listens on, named within `wait`.
pub(crate) fn serve_http(
    bin: &Path,
    db: &Path,
    extra: &[&str],
    log: Option<&str>,
    wait: Duration,
) -> (std::process::Child, String) {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("serve")
        .arg("--db")
        .arg(db)
        .args(["--http", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(filter) = log {
        cmd.env("MNEMOGRAPH_LOG", filter);
    }
    let mut child = cmd.spawn().expect("spawn the server");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split_whitespace().find_map(|w| w.strip_prefix("url=")) {
                let _ = tx.send(url.to_owned());
            }
        }
    });
    let url = rx.recv_timeout(wait).expect("the server names its URL");
    (child, url)
}

/// CPU time (user + system) process `pid` has used, from `/proc` (Linux).
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
