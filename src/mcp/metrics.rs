//! Prometheus metrics of a server: tool calls by tool and outcome with their latency, counted as
//! calls end; tasks by status, index lag and database size, read at each scrape. No label holds
//! memory contents, tokens or subjects.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::engine::Engine;
use crate::error::{Error, Result};

/// How a tool call ended, as its `outcome` label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with its result.
    Ok,
    /// Answered with a tool error (`isError`: bad arguments, unknown ids, a missing scope…).
    ToolError,
    /// Handed back as a task.
    Task,
    /// A JSON-RPC error (unknown tool, an internal error).
    ProtocolError,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::Task => "task",
            Outcome::ProtocolError => "protocol_error",
        }
    }
}

/// The server's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    /// The names a `tool` label may take.
    known: std::collections::HashSet<String>,
    calls: IntCounterVec,
    seconds: HistogramVec,
    tasks: IntGaugeVec,
    lag: IntGaugeVec,
    db_bytes: IntGauge,
    database_up: IntGauge,
    graph_failures: IntCounter,
}

fn internal(e: prometheus::Error) -> Error {
    Error::Internal(format!("metrics: {e}"))
}

impl Metrics {
    pub fn new() -> Result<Metrics> {
        let registry = Registry::new_custom(Some("mnemograph".into()), None).map_err(internal)?;
        let calls = IntCounterVec::new(
            Opts::new("tool_calls_total", "Tool calls by tool and outcome."),
            &["tool", "outcome"],
        )
        .map_err(internal)?;
        let seconds = HistogramVec::new(
            HistogramOpts::new(
                "tool_call_seconds",
                "Time to answer a tool call (to its task handle for a task), by tool.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
            ]),
            &["tool"],
        )
        .map_err(internal)?;
        let tasks = IntGaugeVec::new(
            Opts::new("tasks", "Task rows in the database by status."),
            &["status"],
        )
        .map_err(internal)?;
        let lag = IntGaugeVec::new(
            Opts::new(
                "index_lag_changes",
                "Changes of the database a search cannot see yet, by index.",
            ),
            &["index"],
        )
        .map_err(internal)?;
        let db_bytes = IntGauge::new(
            "database_bytes",
            "Size of the database file and its write-ahead log.",
        )
        .map_err(internal)?;
        let database_up = IntGauge::new(
            "database_up",
            "1 when the memory database answered the last scrape, else 0 (the reason is in the log).",
        )
        .map_err(internal)?;
        let graph_failures = IntCounter::new(
            "vector_graph_failures_total",
            "Vector searches whose graph search failed and were answered by an exact scan.",
        )
        .map_err(internal)?;
        for c in [
            Box::new(calls.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(database_up.clone()),
            Box::new(graph_failures.clone()),
            Box::new(seconds.clone()),
            Box::new(tasks.clone()),
            Box::new(lag.clone()),
            Box::new(db_bytes.clone()),
        ] {
            registry.register(c).map_err(internal)?;
        }
        let known = crate::mcp::tools::all()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        Ok(Metrics {
            registry,
            known,
            calls,
            seconds,
            tasks,
            lag,
            db_bytes,
            database_up,
            graph_failures,
        })
    }

    /// Counts one call of `tool` (a name the server lists, else `other`: a client cannot grow
    /// the label set) that took `seconds`.
    pub fn observe(&self, tool: &str, outcome: Outcome, seconds: f64) {
        let tool = if self.known.contains(tool) {
            tool
        } else {
            "other"
        };
        self.calls.with_label_values(&[tool, outcome.label()]).inc();
        self.seconds.with_label_values(&[tool]).observe(seconds);
    }

    /// The text exposition, with the gauges read from `engine` now (blocking: SQL). While the
    /// database does not answer, its gauges are left out and `database_up` is 0; the error,
    /// which may name the database's address and user, goes to the log only.
    pub fn render(&self, engine: &Engine) -> Result<String> {
        let failures = engine.vector_graph_failures();
        self.graph_failures
            .inc_by(failures.saturating_sub(self.graph_failures.get()));
        self.tasks.reset();
        self.lag.reset();
        let read = engine.task_counts().and_then(|counts| {
            for (status, n) in counts {
                self.tasks.with_label_values(&[status.as_str()]).set(n);
            }
            let (text, vector) = index_lags(engine)?;
            self.lag.with_label_values(&["text"]).set(text);
            self.lag.with_label_values(&["vector"]).set(vector);
            Ok(())
        });
        match read {
            Ok(()) => self.database_up.set(1),
            Err(e) => {
                tracing::warn!(error = %e, "metrics: the database's gauges could not be read");
                self.database_up.set(0);
            }
        }
        let db = &engine.config().db_path;
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
        self.db_bytes
            .set(i64::try_from(size(db) + size(std::path::Path::new(&wal))).unwrap_or(i64::MAX));
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .map_err(internal)?;
        String::from_utf8(out).map_err(|e| Error::Internal(format!("metrics: {e}")))
    }
}

/// Changes of the database a search cannot see yet: by words, by meaning (blocking: SQL).
pub(crate) fn index_lags(engine: &Engine) -> Result<(i64, i64)> {
    Ok((engine.prepare_text_read()?, engine.vector_lag()?))
}
