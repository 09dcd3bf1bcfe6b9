//! The command line: argument parsing, configuration (flags > environment > defaults), logging to
//! stderr, and the commands. The only module that reads the environment or prints.

mod demo;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::engine::Engine;
use crate::model::{NamespaceScope, RecallQuery, format_time};

/// Exit code of a run that failed at run time.
const EXIT_FAILURE: u8 = 1;
/// Exit code of `doctor` when it found problems.
const EXIT_UNHEALTHY: u8 = 3;

/// Graph memory for AI agents, served over MCP (stdio).
#[derive(Debug, Parser)]
#[command(name = "mnemograph", version, about, long_about = None)]
struct Args {
    /// The memory database (SQLite). Default: the platform data folder, e.g.
    /// ~/.local/share/mnemograph/memory.db
    #[arg(long, global = true, env = "MNEMOGRAPH_DB")]
    db: Option<PathBuf>,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve MCP over stdin/stdout (what MCP hosts run; the default).
    Serve,
    /// Start a server on a scratch database, talk MCP to it and print what happens.
    Demo,
    /// Search memories and print a table.
    Recall {
        /// Words or a question.
        query: String,
        /// Only this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// How many hits (1–100).
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// Counts per namespace and kind, index lag, database size.
    Stats,
    /// Check schema version, change-log lag, text index and SQLite integrity.
    Doctor,
    /// Rebuild the text index from the database.
    Reindex,
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(matches!(args.command, None | Some(Command::Serve)));
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn init_logging(serving: bool) {
    let default = if serving { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MNEMOGRAPH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init();
}

#[allow(
    clippy::disallowed_methods,
    reason = "the CLI is the one place that reads the environment"
)]
fn default_db_path() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let data = if cfg!(target_os = "macos") {
        home.map(|h| h.join("Library/Application Support"))
    } else if cfg!(windows) {
        std::env::var_os("APPDATA").map(PathBuf::from)
    } else {
        std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.map(|h| h.join(".local/share")))
    };
    data.unwrap_or_else(|| PathBuf::from("."))
        .join("mnemograph")
        .join("memory.db")
}

fn config(args: &Args) -> Config {
    Config::for_db(args.db.clone().unwrap_or_else(default_db_path))
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let cfg = config(&args);
    let open = |cfg: Config| -> anyhow::Result<Engine> {
        let path = cfg.db_path.display().to_string();
        Engine::open(cfg).with_context(|| format!("cannot open the memory database {path}"))
    };
    match args.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let started = std::time::Instant::now();
            let engine = Arc::new(open(cfg)?);
            let _background = engine.start_background()?;
            tracing::info!(
                db = %engine.config().db_path.display(),
                open_ms = started.elapsed().as_secs_f64() * 1e3,
                "serving MCP on stdio"
            );
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(crate::mcp::serve_stdio(
                engine,
                crate::mcp::ServerOptions::default(),
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(demo::run())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Recall {
            query,
            namespace,
            limit,
        } => {
            let engine = open(cfg)?;
            let page = engine.recall(&RecallQuery {
                text: query,
                namespaces: namespace
                    .map_or(NamespaceScope::All, |n| NamespaceScope::Only(vec![n])),
                limit,
                ..RecallQuery::default()
            })?;
            let mut out = std::io::stdout().lock();
            if page.hits.is_empty() {
                writeln!(out, "no memories match")?;
            }
            writeln!(
                out,
                "{:>6}  {:<24}  {:<12}  {:<10}  snippet",
                "score", "id", "namespace", "kind"
            )?;
            for h in page.hits {
                let snippet: String = h.snippet.replace('\n', " ").chars().take(80).collect();
                writeln!(
                    out,
                    "{:>6.2}  {:<24}  {:<12}  {:<10}  {}",
                    h.score, h.memory.id, h.memory.namespace, h.memory.kind, snippet
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats => {
            let engine = open(cfg)?;
            let s = engine.stats()?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "memories        {}", s.memories)?;
            writeln!(out, "relations       {}", s.relations)?;
            writeln!(out, "forgotten       {}", s.forgotten_memories)?;
            writeln!(out, "text index lag  {}", s.text_index_lag)?;
            writeln!(out, "database size   {} bytes", s.database_bytes)?;
            for (ns, n) in s.by_namespace {
                writeln!(out, "namespace  {ns:<20} {n}")?;
            }
            for (kind, n) in s.by_kind {
                writeln!(out, "kind       {kind:<20} {n}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor => {
            let engine = open(cfg)?;
            engine.sync_text()?;
            let r = engine.doctor()?;
            let mut out = std::io::stdout().lock();
            let mark = |ok: bool| if ok { "ok " } else { "BAD" };
            writeln!(
                out,
                "{} schema version {} (this build writes {})",
                mark(r.schema_version == crate::store::SCHEMA_VERSION),
                r.schema_version,
                crate::store::SCHEMA_VERSION
            )?;
            writeln!(
                out,
                "{} change log at {}, text index at {}",
                mark(r.text_index_seq >= r.change_log_seq),
                r.change_log_seq,
                r.text_index_seq
            )?;
            writeln!(
                out,
                "{} text index holds {} of {} live memories",
                mark(r.text_index_docs as i64 == r.live_memories),
                r.text_index_docs,
                r.live_memories
            )?;
            writeln!(
                out,
                "{} sqlite integrity check{}",
                mark(r.integrity_problems.is_empty()),
                if r.integrity_problems.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.integrity_problems.join("; "))
                }
            )?;
            if r.healthy() {
                Ok(ExitCode::SUCCESS)
            } else {
                writeln!(
                    out,
                    "problems found: `mnemograph reindex` rebuilds the text index"
                )?;
                Ok(ExitCode::from(EXIT_UNHEALTHY))
            }
        }
        Command::Reindex => {
            let engine = open(cfg)?;
            let started = std::time::Instant::now();
            let n = engine.reindex_text()?;
            writeln!(
                std::io::stdout().lock(),
                "text index rebuilt: {n} memories in {:.1} s (at {})",
                started.elapsed().as_secs_f64(),
                format_time(crate::model::now_millis())
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
