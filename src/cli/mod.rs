//! The command line: argument parsing, configuration (flags > environment > defaults), logging to
//! stderr, and the commands. The only module that reads the environment or prints.
//!
//! Size: every command's flags and their dispatch sit together, so what a command accepts is read
//! in one place; the commands' work lives in the sibling files.

mod curate;
mod demo;
mod duration;
mod migrate;
mod model;
mod transfer;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::config::{Config, EmbedderSpec, SummarizerSpec};
use crate::engine::Engine;
use crate::engine::control::Progressing;
use crate::engine::traverse::{Shape, TraverseRequest};
use crate::model::{MemoryRef, NamespaceScope, RecallQuery, format_time};

/// Exit code of a run that failed at run time.
const EXIT_FAILURE: u8 = 1;
/// Exit code of `doctor` when it found problems.
const EXIT_UNHEALTHY: u8 = 3;

/// Graph memory for AI agents, served over MCP (stdio or Streamable HTTP).
#[derive(Debug, Parser)]
#[command(name = "mnemograph", version, about, long_about = None)]
struct Args {
    /// The memory database: a SQLite file (a path, or `sqlite:PATH`), or a PostgreSQL database
    /// shared by many servers (`postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME`). Default: the
    /// platform data folder, e.g. ~/.local/share/mnemograph/memory.db
    #[arg(long, global = true, env = "MNEMOGRAPH_DB")]
    db: Option<PathBuf>,

    /// The folder of this server's indexes (text and vector), which it builds from the database
    /// and keeps in step with it. Default: beside a SQLite file (`<db>.index`); for PostgreSQL, a
    /// folder named by the database's identity in the platform cache folder, e.g.
    /// ~/.cache/mnemograph/
    #[arg(long, global = true, env = "MNEMOGRAPH_INDEX_DIR")]
    index_dir: Option<PathBuf>,

    #[command(flatten)]
    embed: EmbedArgs,

    /// A folder `import` may read from and `export` may write to (repeatable), besides the
    /// database's folder. Never the filesystem root, the home folder itself or a system folder.
    #[arg(
        long,
        global = true,
        env = "MNEMOGRAPH_IMPORT_ROOTS",
        value_delimiter = ','
    )]
    import_root: Vec<PathBuf>,

    /// When a write is on disk: `normal` (a crash of the process loses nothing; a power cut or
    /// an OS crash may lose the commits since the last checkpoint) or `full` (every write is
    /// synced to disk before it is answered; slower writes).
    #[arg(
        long,
        global = true,
        env = "MNEMOGRAPH_DURABILITY",
        default_value = "normal",
        value_parser = ["normal", "full"]
    )]
    durability: String,

    #[command(subcommand)]
    command: Option<Command>,
}

/// Where recall's vectors come from.
#[derive(Debug, clap::Args, Default)]
struct EmbedArgs {
    /// Embedding provider: `builtin` (the static model in the binary; offline), `none`
    /// (text-only recall), `static:DIR` (a model2vec folder), `minilm:DIR` (the transformer;
    /// build feature `minilm`) or `http` (an OpenAI-compatible endpoint, see --embed-url).
    #[arg(
        long,
        global = true,
        env = "MNEMOGRAPH_EMBEDDER",
        default_value = "builtin"
    )]
    embedder: String,
    /// Base URL of the OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 (Ollama).
    #[arg(long, global = true, env = "MNEMOGRAPH_EMBED_URL")]
    embed_url: Option<String>,
    /// Model name sent to the endpoint, e.g. nomic-embed-text.
    #[arg(long, global = true, env = "MNEMOGRAPH_EMBED_MODEL")]
    embed_model: Option<String>,
    /// API key for the endpoint (sent as a bearer token; never logged).
    #[arg(
        long,
        global = true,
        env = "MNEMOGRAPH_EMBED_KEY",
        hide_env_values = true
    )]
    embed_key: Option<String>,
    /// Timeout of one embedding request, in milliseconds.
    #[arg(
        long,
        global = true,
        env = "MNEMOGRAPH_EMBED_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    embed_timeout_ms: u64,
    /// Who writes consolidation's summaries: `extractive` (built in, no model) or `http` (an
    /// OpenAI-compatible chat endpoint, see --summarizer-url; extractive when it fails).
    #[arg(
        long,
        global = true,
        env = "MNEMOGRAPH_SUMMARIZER",
        default_value = "extractive"
    )]
    summarizer: String,
    /// Base URL of the chat endpoint, e.g. http://localhost:11434/v1 (Ollama).
    #[arg(long, global = true, env = "MNEMOGRAPH_SUMMARIZER_URL")]
    summarizer_url: Option<String>,
    /// Model name sent to the chat endpoint, e.g. llama3.2.
    #[arg(long, global = true, env = "MNEMOGRAPH_SUMMARIZER_MODEL")]
    summarizer_model: Option<String>,
    /// API key for the chat endpoint (sent as a bearer token; never logged).
    #[arg(
        long,
        global = true,
        env = "MNEMOGRAPH_SUMMARIZER_KEY",
        hide_env_values = true
    )]
    summarizer_key: Option<String>,
    /// Timeout of one summary request, in milliseconds.
    #[arg(
        long,
        global = true,
        env = "MNEMOGRAPH_SUMMARIZER_TIMEOUT_MS",
        default_value_t = 60_000
    )]
    summarizer_timeout_ms: u64,
}

impl EmbedArgs {
    fn summarizer(&self) -> anyhow::Result<Option<SummarizerSpec>> {
        match self.summarizer.trim() {
            "extractive" | "" => Ok(None),
            "http" => Ok(Some(SummarizerSpec {
                base_url: self.summarizer_url.clone().ok_or_else(|| {
                    anyhow::anyhow!("--summarizer http needs --summarizer-url (or MNEMOGRAPH_SUMMARIZER_URL), e.g. http://localhost:11434/v1")
                })?,
                model: self.summarizer_model.clone().ok_or_else(|| {
                    anyhow::anyhow!("--summarizer http needs --summarizer-model (or MNEMOGRAPH_SUMMARIZER_MODEL), e.g. llama3.2")
                })?,
                api_key: self.summarizer_key.clone(),
                timeout_ms: self.summarizer_timeout_ms,
            })),
            other => anyhow::bail!("unknown --summarizer {other:?}; use extractive or http"),
        }
    }

    fn spec(&self) -> anyhow::Result<EmbedderSpec> {
        let e = self.embedder.trim();
        if e != "http" {
            return EmbedderSpec::local(e).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown --embedder {e:?}; use builtin, none, static:DIR, minilm:DIR or http"
                )
            });
        }
        Ok(EmbedderSpec::Http {
            base_url: self.embed_url.clone().ok_or_else(|| {
                anyhow::anyhow!("--embedder http needs --embed-url (or MNEMOGRAPH_EMBED_URL), e.g. http://localhost:11434/v1")
            })?,
            model: self.embed_model.clone().ok_or_else(|| {
                anyhow::anyhow!("--embedder http needs --embed-model (or MNEMOGRAPH_EMBED_MODEL)")
            })?,
            api_key: self.embed_key.clone(),
            timeout_ms: self.embed_timeout_ms,
        })
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve MCP over stdin/stdout (what MCP hosts run; the default), or over HTTP (--http).
    Serve(Box<ServeArgs>),
    /// Make a bearer token for `serve --http --tokens FILE`: prints the token once, as the last
    /// word of its output, and appends its hash (never the token) to FILE.
    #[command(subcommand)]
    Token(TokenAction),
    /// Open the memory browser on this database: serves the page on a loopback port (a free
    /// one unless --port) and prints its URL; Ctrl-C stops it. The same server as `serve
    /// --http 127.0.0.1:PORT`, with its flags.
    Ui(Box<UiArgs>),
    /// Start a server on a scratch database, talk MCP to it and print what happens.
    Demo {
        /// Show the MCP tasks flow instead: a graph of 100,000 memories, a walk that becomes a
        /// task, polled at the advertised interval with its progress printed.
        #[arg(long, conflicts_with = "job")]
        tasks: bool,
        /// Show a job's memory instead: two servers on one database, an import task under a
        /// job, the server running it killed, the job resumed on the other.
        #[arg(long)]
        job: bool,
    },
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
    /// Rebuild the text and vector indexes from the database.
    Reindex,
    /// Walk relations from a memory (id or name) and print what it reaches.
    Traverse {
        /// Seed memory: an id (m_…) or a name.
        seed: String,
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Hops (1–8).
        #[arg(long, default_value_t = 2)]
        depth: u8,
        /// out, in or both.
        #[arg(long, default_value = "both")]
        direction: String,
        /// Rank by relevance to this text.
        #[arg(long)]
        focus: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Import files or folders: mnemograph JSONL, MCP memory JSONL, MemoryGraph JSON,
    /// LoCoMo transcripts, Markdown/text (detected, or --format). Safe to repeat: what is stored
    /// is skipped.
    Import {
        /// Files or folders to read (the operator's paths are allowed as given).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// mnemograph, mcp-memory, memorygraph, locomo or markdown.
        #[arg(long)]
        format: Option<String>,
        /// Namespace for every record (default: the records' own, else "default").
        #[arg(long)]
        namespace: Option<String>,
        /// Report what would happen; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Export memories and relations as jsonl (re-importable), graphml, dot or html (one
    /// self-contained page: a list and a graph view).
    Export {
        #[arg(long, default_value = "jsonl")]
        format: String,
        /// Only these namespaces (repeatable; default all).
        #[arg(long)]
        namespace: Vec<String>,
        /// Include each memory's vector (jsonl).
        #[arg(long)]
        vectors: bool,
        /// Include each memory's previous versions (jsonl).
        #[arg(long)]
        history: bool,
        /// A new file to write (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only what a walk from this memory (an id, or a name in the first --namespace or
        /// `default`) reaches, and the relations between those.
        #[arg(long, value_name = "ID|NAME")]
        around: Option<String>,
        /// Hops of the walk from --around (1–8).
        #[arg(long, default_value_t = 2, requires = "around")]
        depth: u8,
    },
    /// Consolidate memory: merge near-duplicates, summarise old episodes, flag contradictions,
    /// decay salience, archive the long unused, tidy relations. Nothing is deleted; every run can be undone. Safe to run from cron: when
    /// another run holds the database this one says so and exits 0.
    Consolidate(curate::Call),
    /// Copy a whole memory database between SQLite and PostgreSQL: every row with its ids, keys
    /// and timestamps, and the change log. The target must be empty; an interrupted migration
    /// goes on where it stopped when the same command runs again. The source is only read.
    Migrate {
        /// The database to copy, as --db names it: a SQLite file (a path or sqlite:PATH) or a
        /// postgres:// URL.
        #[arg(long, value_name = "SOURCE")]
        from: PathBuf,
        /// The database to copy into, as --db names it: a new SQLite file or an empty PostgreSQL
        /// database (createdb).
        #[arg(long, value_name = "TARGET")]
        to: PathBuf,
        /// Rows copied per transaction on the target.
        #[arg(long, default_value_t = 5_000, value_name = "ROWS")]
        batch: usize,
    },
    /// Long-running calls (MCP tasks) recorded in the database.
    Tasks {
        #[command(subcommand)]
        action: TasksAction,
    },
    /// The built-in embedding model: distil it from all-MiniLM-L6-v2 (builds with
    /// `--features minilm`).
    Model {
        #[command(subcommand)]
        action: model::ModelAction,
    },
}

#[derive(Debug, clap::Args)]
struct UiArgs {
    /// The loopback port (0: a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, clap::Args, Default)]
struct ServeArgs {
    /// How long an eligible call may run before it is handed back as a task, in milliseconds
    /// (0: every eligible call from a task-capable client becomes a task).
    #[arg(long, env = "MNEMOGRAPH_INLINE_BUDGET_MS", default_value_t = 200)]
    inline_budget_ms: u64,
    /// How long finished task results are kept, in milliseconds (at most 24 h).
    #[arg(long, env = "MNEMOGRAPH_TASK_TTL_MS", default_value_t = 3_600_000)]
    task_ttl_ms: u64,
    /// Owner recorded on tasks instead of the client's name.
    #[arg(long, env = "MNEMOGRAPH_OWNER")]
    owner: Option<String>,
    /// Most tokens a tool result takes, inline or a task's (about 4 bytes of compact JSON per
    /// token, text and structured content together; at least 500). What does not fit is
    /// behind resource links the host reads page by page. A call may ask for less with
    /// `_meta["mnemograph/resultBudgetTokens"]`.
    #[arg(
        long,
        env = "MNEMOGRAPH_RESULT_BUDGET_TOKENS",
        default_value_t = 4_000,
        value_parser = clap::value_parser!(u64).range(500..)
    )]
    result_budget_tokens: u64,
    /// Consolidate every namespace this often (e.g. 6h, 30m, 90s; default: never), as a task of
    /// owner `scheduler`. Due a period after the last scheduled run in the database ended —
    /// the first within a minute of start when none is on record or it is overdue — and one at
    /// a time per database, however many servers share it.
    #[arg(
        long,
        env = "MNEMOGRAPH_CONSOLIDATE_EVERY",
        value_name = "DURATION",
        value_parser = duration::parse_period
    )]
    consolidate_every: Option<std::time::Duration>,
    /// Serve MCP over Streamable HTTP at this address (endpoint `/mcp`, e.g. 127.0.0.1:8080)
    /// instead of stdin/stdout (with --stdio, besides them). Loopback only unless
    /// --allow-unauthenticated is given.
    #[arg(long, env = "MNEMOGRAPH_HTTP", value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// With --http: also serve the host that started this process on stdin/stdout (one
    /// server, one task runner); the process ends when that session does.
    #[arg(long, requires = "http")]
    stdio: bool,
    /// With --http: do not serve the memory browser at `/`.
    #[arg(long, env = "MNEMOGRAPH_NO_UI")]
    no_ui: bool,
    /// Bearer tokens every HTTP request must carry: a file of `SUBJECT sha256:HEX scopes=…
    /// namespaces=*` lines, as `mnemograph token add` writes them.
    #[arg(long, env = "MNEMOGRAPH_TOKENS", value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// OAuth 2.1 resource-server mode: the authorisation server whose JWT access tokens are
    /// admitted (their `iss`). Needs --oauth-jwks and --oauth-audience.
    #[arg(long, env = "MNEMOGRAPH_OAUTH_ISSUER", value_name = "URL")]
    oauth_issuer: Option<String>,
    /// The authorisation server's public keys: a JWKS file, or its URL (https needs a build
    /// with the `tls` feature). Read again when a token names a key it does not hold.
    #[arg(long, env = "MNEMOGRAPH_OAUTH_JWKS", value_name = "FILE|URL")]
    oauth_jwks: Option<String>,
    /// This server's canonical URL, which access tokens must name as their audience, e.g.
    /// https://memory.example.com/mcp (also the `resource` of its protected-resource metadata).
    #[arg(long, env = "MNEMOGRAPH_OAUTH_AUDIENCE", value_name = "URL")]
    oauth_audience: Option<String>,
    /// Serve HTTP on an address other machines can reach, with no authorisation: anyone who
    /// reaches the port reads and writes every memory. Logged as a warning at every start.
    #[arg(long, env = "MNEMOGRAPH_ALLOW_UNAUTHENTICATED")]
    allow_unauthenticated: bool,
    /// A browser origin admitted over HTTP besides the loopback ones, e.g.
    /// https://app.example.com:443 (repeatable; other origins get 403).
    #[arg(
        long,
        env = "MNEMOGRAPH_ALLOW_ORIGINS",
        value_delimiter = ',',
        value_name = "ORIGIN"
    )]
    allow_origin: Vec<String>,
    /// A `Host` admitted over HTTP besides the loopback names, e.g. memory.example.com
    /// (repeatable; on a non-loopback address without any, every host is admitted).
    #[arg(
        long,
        env = "MNEMOGRAPH_ALLOW_HOSTS",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    allow_host: Vec<String>,
    /// Largest HTTP request body, in bytes (413 beyond; at once when the declared length is).
    #[arg(long, env = "MNEMOGRAPH_HTTP_MAX_BODY", default_value_t = 32 * 1024 * 1024)]
    http_max_body: usize,
    /// Longest an HTTP request may take to be answered, in milliseconds (504 beyond).
    #[arg(long, env = "MNEMOGRAPH_HTTP_TIMEOUT_MS", default_value_t = 60_000)]
    http_timeout_ms: u64,
    /// HTTP requests handled at once (503 beyond).
    #[arg(long, env = "MNEMOGRAPH_HTTP_MAX_IN_FLIGHT", default_value_t = 256)]
    http_max_in_flight: usize,
    /// HTTP requests one caller (a token's subject; without tokens, a client address) may have
    /// in flight (429 beyond; default: half of --http-max-in-flight).
    #[arg(long, env = "MNEMOGRAPH_HTTP_MAX_IN_FLIGHT_PER_CALLER")]
    http_max_in_flight_per_caller: Option<usize>,
    /// HTTP connections open at once (503 and closed beyond; lowered to fit the open-files
    /// limit).
    #[arg(long, env = "MNEMOGRAPH_HTTP_MAX_CONNECTIONS", default_value_t = 1024)]
    http_max_connections: usize,
    /// Longest from an HTTP request's first byte to the end of its head, in milliseconds (the
    /// connection is closed beyond).
    #[arg(
        long,
        env = "MNEMOGRAPH_HTTP_HEADER_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    http_header_timeout_ms: u64,
    /// Longest an HTTP request body may take to arrive, in milliseconds (408 beyond).
    #[arg(
        long,
        env = "MNEMOGRAPH_HTTP_BODY_TIMEOUT_MS",
        default_value_t = 20_000
    )]
    http_body_timeout_ms: u64,
    /// Longest an HTTP connection may sit without a request, in milliseconds (closed beyond).
    #[arg(
        long,
        env = "MNEMOGRAPH_HTTP_IDLE_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    http_idle_timeout_ms: u64,
    /// How long HTTP requests in flight may finish after SIGTERM or SIGINT, in milliseconds.
    #[arg(long, env = "MNEMOGRAPH_SHUTDOWN_GRACE_MS", default_value_t = 10_000)]
    shutdown_grace_ms: u64,
}

impl ServeArgs {
    /// The HTTP transport's settings, when HTTP was asked for; an error for a reachable address
    /// without authorisation unless that was allowed explicitly.
    fn http(&self) -> anyhow::Result<Option<crate::mcp::http::HttpOptions>> {
        let Some(addr) = self.http else {
            return Ok(None);
        };
        let tokens = match &self.tokens {
            Some(path) => {
                let tokens = crate::mcp::auth::TokenFile::open(path)?;
                tracing::info!(tokens = tokens.len(), file = %path.display(), "bearer tokens required (the file is read again when it changes)");
                Some(tokens)
            }
            None => None,
        };
        let oauth = match (&self.oauth_issuer, &self.oauth_jwks, &self.oauth_audience) {
            (None, None, None) => None,
            (Some(issuer), Some(jwks), Some(audience)) => {
                let oauth = crate::mcp::oauth::OAuth::load(crate::mcp::oauth::OAuthConfig {
                    issuer: issuer.clone(),
                    audience: audience.clone(),
                    jwks: crate::mcp::oauth::KeySource::parse(jwks),
                })?;
                tracing::info!(issuer, audience, "OAuth access tokens admitted");
                Some(oauth)
            }
            _ => anyhow::bail!(
                "OAuth needs all of --oauth-issuer (the authorisation server), --oauth-jwks (its keys) and --oauth-audience (this server's canonical URL)"
            ),
        };
        let auth = (tokens.is_some() || oauth.is_some())
            .then(|| Arc::new(crate::mcp::auth::Gate { tokens, oauth }));
        if !addr.ip().is_loopback() && auth.is_none() {
            anyhow::ensure!(
                self.allow_unauthenticated,
                "refusing to serve MCP on {addr} without authorisation: anyone who can reach it could read and write every memory. Serve on 127.0.0.1, or pass --allow-unauthenticated to accept that"
            );
            tracing::warn!(
                %addr,
                "serving MCP over HTTP WITHOUT AUTHORISATION on an address other machines may reach (--allow-unauthenticated)"
            );
        }
        Ok(Some(crate::mcp::http::HttpOptions {
            allowed_origins: self.allow_origin.clone(),
            allowed_hosts: self.allow_host.clone(),
            max_body_bytes: self.http_max_body,
            request_timeout: std::time::Duration::from_millis(self.http_timeout_ms),
            max_in_flight: self.http_max_in_flight,
            max_in_flight_per_caller: self.http_max_in_flight_per_caller,
            max_connections: self.http_max_connections,
            header_timeout: std::time::Duration::from_millis(self.http_header_timeout_ms),
            body_timeout: std::time::Duration::from_millis(self.http_body_timeout_ms),
            idle_timeout: std::time::Duration::from_millis(self.http_idle_timeout_ms),
            grace: std::time::Duration::from_millis(self.shutdown_grace_ms),
            auth,
            with_stdio: self.stdio,
            ui: !self.no_ui,
            ..crate::mcp::http::HttpOptions::new(addr)
        }))
    }
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// A new token for SUBJECT (the owner of its tasks).
    Add {
        subject: String,
        /// The tokens file (created when missing).
        #[arg(long)]
        tokens: PathBuf,
        /// What the token may do: read, write (includes read), admin (includes write).
        #[arg(long, value_delimiter = ',', default_value = "read,write")]
        scopes: Vec<String>,
        /// The only namespaces its tools may read and write (comma-separated); every
        /// namespace when left out.
        #[arg(long, value_delimiter = ',')]
        namespaces: Option<Vec<String>>,
    },
    /// Remove tokens from the file: every token of a SUBJECT, the one whose hash starts with a
    /// PREFIX as `token list` shows it (`sha256:` and 8 or more hex digits), or a token given
    /// itself. A server serving the file stops admitting them within a few seconds.
    Revoke {
        /// A subject, a hash prefix (`sha256:1a2b3c4d…`) or the token.
        which: String,
        /// The tokens file.
        #[arg(long)]
        tokens: PathBuf,
    },
    /// The tokens of the file: subject, hash prefix, scope, namespaces (never a token).
    List {
        /// The tokens file.
        #[arg(long)]
        tokens: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum TasksAction {
    /// The newest tasks of every client.
    List {
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// One task with its result or error.
    Show { id: String },
    /// Stop a running task: the process running it stops it within a heartbeat; a task whose
    /// process is gone is marked cancelled at once.
    Cancel { id: String },
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(matches!(args.command, None | Some(Command::Serve(_))));
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
    // rmcp logs every session it opens at info: noise on a server many clients reach.
    let default = if serving { "info,rmcp=warn" } else { "warn" };
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

#[allow(
    clippy::disallowed_methods,
    reason = "the CLI is the one place that reads the environment"
)]
fn home_dir() -> Option<PathBuf> {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

#[allow(
    clippy::disallowed_methods,
    reason = "the CLI is the one place that reads the environment"
)]
fn default_cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cache = if cfg!(target_os = "macos") {
        home.map(|h| h.join("Library/Caches"))
    } else if cfg!(windows) {
        std::env::var_os("LOCALAPPDATA").map(PathBuf::from)
    } else {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.map(|h| h.join(".cache")))
    };
    cache
        .unwrap_or_else(|| PathBuf::from("."))
        .join("mnemograph")
}

/// The database `--db` names.
enum Database {
    Postgres(String),
    Sqlite(PathBuf),
}

/// The database `--db` (or the option `field`) names: a PostgreSQL URL, or the path of a SQLite
/// file (`sqlite:` in front is allowed).
fn database_of(arg: Option<&PathBuf>, field: &str) -> Result<Database, crate::error::Error> {
    use crate::error::Error;
    let Some(arg) = arg else {
        return Ok(Database::Sqlite(default_db_path()));
    };
    let text = arg.to_string_lossy();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return Ok(Database::Postgres(text.into_owned()));
    }
    if let Some(path) = text
        .strip_prefix("sqlite://")
        .or(text.strip_prefix("sqlite:"))
    {
        if path.is_empty() {
            return Err(Error::invalid(
                field,
                "`sqlite:` names no file",
                "write sqlite:PATH or just the path",
            ));
        }
        return Ok(Database::Sqlite(PathBuf::from(path)));
    }
    if let Some((scheme, _)) = text.split_once("://") {
        return Err(Error::invalid(
            field,
            format!("`{scheme}://` is not a database this server uses"),
            "give a SQLite file's path or a postgres:// URL",
        ));
    }
    Ok(Database::Sqlite(arg.clone()))
}

/// The configuration of `db` with its defaults (indexes in `index_dir`, else the default
/// folder).
fn database_config(db: Database, index_dir: Option<&PathBuf>) -> Config {
    match db {
        Database::Postgres(url) => {
            Config::for_postgres(url, index_dir.cloned().unwrap_or_else(default_cache_dir))
        }
        Database::Sqlite(path) => Config::for_db(path),
    }
}

fn config(args: &Args) -> anyhow::Result<Config> {
    let mut cfg = database_config(
        database_of(args.db.as_ref(), "db")?,
        args.index_dir.as_ref(),
    );
    if let Some(dir) = &args.index_dir {
        cfg.index_dir = dir.clone();
        // A folder named by the operator holds this database's indexes itself.
        cfg.index_dir_per_database = false;
    }
    cfg.embedder = args.embed.spec()?;
    cfg.summarizer = args.embed.summarizer()?;
    cfg.durability = if args.durability == "full" {
        crate::config::Durability::Full
    } else {
        crate::config::Durability::Normal
    };
    // The database's folder is always a root; these add to it.
    cfg.import_roots = args
        .import_root
        .iter()
        .filter(|p| !p.as_os_str().is_empty())
        .cloned()
        .collect();
    cfg.home_dir = home_dir();
    Ok(cfg)
}

/// Logs, once, each import root that is refused and why (the database's folder when it is the
/// home folder, a root named `/`, …).
fn log_refused_roots(cfg: &Config) {
    let roots = cfg.transfer_roots();
    for r in &roots.refused {
        tracing::warn!(
            root = %r.path.display(),
            reason = %r.reason,
            "refused as an import root"
        );
    }
    if roots.allowed.is_empty() {
        tracing::warn!(
            "no folder is open to import and export: start with --import-root DIR (or MNEMOGRAPH_IMPORT_ROOTS) to name one"
        );
    }
}

/// `path` opened for appending, created readable by its owner only.
fn open_private_append(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// `path` made absolute and canonical, or for a file that does not exist yet, its canonical
/// folder joined with its name.
fn operator_path(path: &std::path::Path) -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    if let Ok(real) = path.canonicalize() {
        return Ok(real);
    }
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    Ok(dir
        .canonicalize()
        .with_context(|| format!("cannot open {}", dir.display()))?
        .join(name))
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let cfg = config(&args)?;
    let open = |cfg: Config| -> anyhow::Result<Engine> {
        let path = cfg.database_label();
        Engine::open(cfg).with_context(|| format!("cannot open the memory database {path}"))
    };
    // No command means `serve`, with its flags' environment variables and defaults.
    let command = args.command.unwrap_or_else(|| {
        Args::parse_from(["mnemograph", "serve"])
            .command
            .unwrap_or(Command::Serve(Box::default()))
    });
    match command {
        Command::Ui(ui) => {
            let UiArgs { port, mut serve } = *ui;
            // Loopback, the page on, no stdio session, whatever the serve variables say.
            serve.http = Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
            serve.stdio = false;
            serve.no_ui = false;
            let (tell, told) = std::sync::mpsc::channel();
            let _ = std::thread::Builder::new()
                .name("ui-url".into())
                .spawn(move || {
                    if let Ok(addr) = told.recv() {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "memory browser: http://{addr}/  (Ctrl-C to stop)");
                        let _ = out.flush();
                    }
                });
            serve_command(cfg, &serve, Some(tell))
        }
        Command::Serve(serve) => serve_command(cfg, &serve, None),
        Command::Token(TokenAction::Add {
            subject,
            tokens,
            scopes,
            namespaces,
        }) => {
            use anyhow::Context;
            use std::io::Write;
            let (token, line) =
                crate::mcp::auth::new_token(&subject, &scopes, namespaces.as_deref())?;
            if tokens.exists() {
                // A token is never added to a file others can write or read.
                if crate::mcp::auth::make_private(&tokens)
                    .with_context(|| format!("cannot restrict {}", tokens.display()))?
                {
                    tracing::warn!(file = %tokens.display(), "the tokens file was open to others; it is now private to its owner (0600)");
                }
                // The file must stay one the server reads: check it before adding to it.
                crate::mcp::auth::Tokens::load(&tokens)?;
            }
            let mut file = open_private_append(&tokens)
                .with_context(|| format!("cannot write {}", tokens.display()))?;
            writeln!(file, "{line}")
                .with_context(|| format!("cannot write {}", tokens.display()))?;
            file.sync_all()
                .with_context(|| format!("cannot write {}", tokens.display()))?;
            crate::mcp::auth::make_private(&tokens)
                .with_context(|| format!("cannot restrict {}", tokens.display()))?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "added {subject} ({}; {}) to {}; the token is shown once, keep it secret:\n{token}",
                scopes.join(","),
                namespaces.map_or_else(
                    || "every namespace".to_owned(),
                    |n| format!("namespaces {}", n.join(","))
                ),
                tokens.display()
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Token(TokenAction::Revoke { which, tokens }) => {
            use std::io::Write;
            let removed = crate::mcp::auth::revoke(&tokens, &which)?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "revoked {} token{} of {} in {}; a server serving the file stops admitting {} within a few seconds",
                removed.len(),
                if removed.len() == 1 { "" } else { "s" },
                {
                    let mut subjects = removed.clone();
                    subjects.dedup();
                    subjects.join(", ")
                },
                tokens.display(),
                if removed.len() == 1 { "it" } else { "them" }
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Token(TokenAction::List { tokens }) => {
            use std::io::Write;
            let listed = crate::mcp::auth::list(&tokens)?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{:<24}  {:<20}  {:<6}  namespaces",
                "subject", "hash", "scope"
            )?;
            for t in listed {
                let namespaces = match &t.access {
                    crate::engine::Access::All => "*".to_owned(),
                    crate::engine::Access::Only(list) => list.join(","),
                };
                writeln!(
                    out,
                    "{:<24}  {:<20}  {:<6}  {namespaces}",
                    t.subject,
                    t.hash_prefix,
                    t.scope.name()
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { tasks, job } => {
            if tasks {
                demo::run_tasks()?;
            } else if job {
                demo::run_job()?;
            } else {
                demo::run()?;
            }
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
                explain: true,
                ..RecallQuery::default()
            })?;
            for w in &page.warnings {
                writeln!(std::io::stderr().lock(), "warning: {w}")?;
            }
            let mut out = std::io::stdout().lock();
            if page.hits.is_empty() {
                writeln!(out, "no memories match")?;
            }
            writeln!(
                out,
                "{:>6}  {:<24}  {:<12}  {:<10}  {:<28}  snippet",
                "score", "id", "namespace", "kind", "ranked"
            )?;
            for h in page.hits {
                let snippet: String = h.snippet.replace('\n', " ").chars().take(80).collect();
                let ranked = h.explain.as_ref().map_or(String::new(), |x| {
                    why(
                        x.text_rank,
                        x.vector_rank,
                        h.via.as_ref().map(|v| v.relation.as_str()),
                    )
                });
                writeln!(
                    out,
                    "{:>6.2}  {:<24}  {:<12}  {:<10}  {:<28}  {}",
                    h.score, h.memory.id, h.memory.namespace, h.memory.kind, ranked, snippet
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Consolidate(call) => {
            let engine = open(cfg)?;
            curate::run(&engine, call)
        }
        Command::Stats => {
            let engine = open(cfg)?;
            let s = engine.stats()?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "memories        {}", s.memories)?;
            writeln!(out, "relations       {}", s.relations)?;
            writeln!(out, "forgotten       {}", s.forgotten_memories)?;
            writeln!(out, "text index lag  {}", s.text_index_lag)?;
            if let Some(model) = &s.embedding_model {
                writeln!(out, "embedding model {model}")?;
                writeln!(out, "vectors         {} of {}", s.vectors, s.memories)?;
                writeln!(out, "vector index lag {}", s.vector_index_lag)?;
            }
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
        Command::Traverse {
            seed,
            namespace,
            depth,
            direction,
            focus,
            limit,
        } => {
            let engine = open(cfg)?;
            let direction = match direction.as_str() {
                "out" => crate::graph::Direction::Out,
                "in" => crate::graph::Direction::In,
                "both" => crate::graph::Direction::Both,
                other => anyhow::bail!("unknown direction {other:?}: use out, in or both"),
            };
            let req = TraverseRequest {
                max_nodes: 1_000_000,
                focus,
                limit,
                ..walk_from(memory_ref(seed, namespace), depth, direction)
            };
            let started = std::time::Instant::now();
            let r = engine.traverse(&req, &Progressing::default())?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "reached {} memories, visited {} nodes in {:.1} ms",
                r.reached,
                r.visited,
                started.elapsed().as_secs_f64() * 1e3
            )?;
            writeln!(
                out,
                "{:>5}  {:>8}  {:<24}  {:<12}  snippet",
                "depth", "strength", "id", "via"
            )?;
            for n in r.nodes {
                let via = n.via.map(|v| v.kind).unwrap_or_default();
                let snippet: String = n.snippet.replace('\n', " ").chars().take(70).collect();
                writeln!(
                    out,
                    "{:>5}  {:>8.3}  {:<24}  {:<12}  {}",
                    n.depth, n.strength, n.memory.id, via, snippet
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Tasks { action } => tasks_command(open(cfg)?, action),
        Command::Migrate { from, to, batch } => {
            let [from, to] = [(&from, "from"), (&to, "to")].map(|(db, field)| {
                database_of(Some(db), field).map(|db| {
                    let mut c = database_config(db, None);
                    c.durability = cfg.durability;
                    c
                })
            });
            migrate::run(&from?, &to?, batch)
        }
        Command::Import {
            paths,
            format,
            namespace,
            dry_run,
        } => {
            let mut cfg = cfg;
            // The files and folders an operator names are allowed (each itself, not its folder),
            // under the same rules as every root.
            let mut sources = Vec::with_capacity(paths.len());
            for p in &paths {
                let real = p
                    .canonicalize()
                    .with_context(|| format!("cannot open {}", p.display()))?;
                cfg.import_roots.push(real.clone());
                sources.push(real);
            }
            let engine = open(cfg)?;
            log_refused_roots(engine.config());
            let clean = transfer::import(&engine, &sources, format.as_deref(), namespace, dry_run)?;
            Ok(if clean {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILURE)
            })
        }
        Command::Export {
            format,
            namespace,
            vectors,
            history,
            out,
            around,
            depth,
        } => {
            let around = around.map(|seed| {
                let home = namespace
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "default".into());
                walk_from(memory_ref(seed, home), depth, crate::graph::Direction::Both)
            });
            let mut cfg = cfg;
            // The new file an operator names is allowed (that file, not its folder).
            let out = match out {
                Some(o) => {
                    let target = operator_path(&o)?;
                    cfg.import_roots.push(target.clone());
                    Some(target)
                }
                None => None,
            };
            let engine = open(cfg)?;
            if out.is_some() {
                log_refused_roots(engine.config());
            }
            transfer::export(&engine, &format, namespace, around, (vectors, history), out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Model { action } => model::run(action),
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
            if engine.embedder().is_some() {
                let started = std::time::Instant::now();
                // The compact file first (a fraction of a second): a server started while the
                // graph is built searches it, so its answers are hybrid meanwhile.
                if let Some(v) = engine.write_flat_from_store()? {
                    writeln!(
                        std::io::stderr().lock(),
                        "vector file: {v} vectors written in {:.1} s (a server started meanwhile searches it); building the vector index's graph, the longest step…",
                        started.elapsed().as_secs_f64(),
                    )?;
                }
                let started = std::time::Instant::now();
                let n = engine.reindex_vectors()?;
                writeln!(
                    std::io::stdout().lock(),
                    "vector index rebuilt: {n} vectors in {:.1} s",
                    started.elapsed().as_secs_f64(),
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A memory as the command line names it: an id (`m_…`), or a name in `namespace`.
fn memory_ref(seed: String, namespace: String) -> MemoryRef {
    if seed.starts_with("m_") {
        MemoryRef::Id(seed)
    } else {
        MemoryRef::Name {
            namespace,
            name: seed,
        }
    }
}

/// A walk of the command line's from `seed`: every namespace (the operator's access), every
/// relation kind, the default node budget, as many nodes listed as a walk may list.
fn walk_from(seed: MemoryRef, depth: u8, direction: crate::graph::Direction) -> TraverseRequest {
    TraverseRequest {
        seeds: vec![seed],
        query: None,
        namespaces: NamespaceScope::All,
        depth,
        direction,
        kinds: vec![],
        min_weight: 0.0,
        valid_at: None,
        max_nodes: crate::engine::traverse::DEFAULT_MAX_NODES,
        shape: Shape::Nodes,
        focus: None,
        limit: crate::engine::traverse::MAX_LIMIT,
        include_archived: false,
        access: crate::engine::Access::All,
    }
}

/// `serve` (and `ui`): opens the engine, serves MCP over stdio or HTTP until the session ends or
/// a signal comes, then closes the engine. `listening` is told HTTP's bound address.
fn serve_command(
    cfg: Config,
    serve: &ServeArgs,
    listening: Option<std::sync::mpsc::Sender<std::net::SocketAddr>>,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let started = std::time::Instant::now();
    let http = serve.http()?.map(|mut http| {
        http.listening = listening;
        http
    });
    let path = cfg.database_label();
    let engine = Arc::new(
        Engine::open(cfg).with_context(|| format!("cannot open the memory database {path}"))?,
    );
    let background = engine.start_background()?;
    log_refused_roots(engine.config());
    {
        let engine = Arc::clone(&engine);
        let _ = std::thread::Builder::new()
            .name("clean-exports".into())
            .spawn(move || engine.clean_stale_exports());
    }
    tracing::info!(
        db = %engine.config().database_label(),
        open_ms = started.elapsed().as_secs_f64() * 1e3,
        transport = if http.is_some() { "http" } else { "stdio" },
        "engine open"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let options = crate::mcp::ServerOptions {
        owner: serve.owner.clone(),
        result_budget_tokens: Some(serve.result_budget_tokens as usize),
        schedule: serve
            .consolidate_every
            .map(crate::tasks::Schedule::consolidation),
        tasks: crate::tasks::TaskConfig {
            inline_budget: std::time::Duration::from_millis(serve.inline_budget_ms),
            default_ttl_ms: serve.task_ttl_ms,
            ..crate::tasks::TaskConfig::default()
        },
    };
    let served = match http {
        Some(http) => runtime.block_on(crate::mcp::http::serve_http(
            Arc::clone(&engine),
            options,
            http,
            crate::mcp::http::termination(),
        )),
        None => runtime.block_on(crate::mcp::serve_stdio(Arc::clone(&engine), options)),
    };
    // Work that ignores cancellation must not keep a closed session's process alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    // Closed here, not in the background thread while the process exits: the graph file
    // and the vector dump written, the database checkpointed. A tick that does not end
    // in time (a long index build) keeps the engine: what the next start reads is
    // written anyway.
    if !background.stop(std::time::Duration::from_secs(2))
        && let Err(e) = engine.prepare_exit()
    {
        tracing::warn!(error = %e, "could not write the graph file or checkpoint the database");
    }
    drop(engine);
    served?;
    Ok(ExitCode::SUCCESS)
}

fn tasks_command(engine: Engine, action: TasksAction) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match action {
        TasksAction::List { limit } => {
            let rows = engine.task_list(None, limit)?;
            if rows.is_empty() {
                writeln!(out, "no tasks")?;
            }
            for t in rows {
                writeln!(
                    out,
                    "{}…  {:<10} {:<10} {:<16} {}  {}",
                    crate::tasks::short_id(&t.id),
                    t.status.as_str(),
                    t.tool,
                    t.owner,
                    format_time(t.created_at),
                    t.status_message.unwrap_or_default()
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        TasksAction::Show { id } => {
            let Some(t) = find_task(&engine, &id)? else {
                writeln!(out, "no task {id}")?;
                return Ok(ExitCode::from(EXIT_FAILURE));
            };
            writeln!(out, "id        {}", t.id)?;
            writeln!(out, "tool      {}", t.tool)?;
            writeln!(out, "owner     {}", t.owner)?;
            writeln!(out, "status    {}", t.status.as_str())?;
            writeln!(out, "message   {}", t.status_message.unwrap_or_default())?;
            writeln!(out, "created   {}", format_time(t.created_at))?;
            writeln!(out, "updated   {}", format_time(t.updated_at))?;
            writeln!(out, "arguments {}", t.arguments)?;
            if let Some(r) = t.result {
                writeln!(out, "result    {r}")?;
            }
            if let Some(e) = t.error {
                writeln!(out, "error     {e}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        TasksAction::Cancel { id } => {
            let Some(t) = find_task(&engine, &id)? else {
                writeln!(out, "no task {id}")?;
                return Ok(ExitCode::from(EXIT_FAILURE));
            };
            let short = crate::tasks::short_id(&t.id);
            let stale_after = crate::tasks::TaskConfig::default().stale_after;
            match crate::tasks::cancel_for_operator(&engine, &t, stale_after)? {
                crate::tasks::OperatorCancel::AlreadyEnded(status) => {
                    writeln!(out, "task {short}… already {}", status.as_str())?;
                }
                crate::tasks::OperatorCancel::Cancelled => writeln!(
                    out,
                    "task {short}… cancelled: no process was running it (its process stopped; no heartbeat for {} s)",
                    (crate::model::now_millis() - t.heartbeat_at) / 1000
                )?,
                crate::tasks::OperatorCancel::Requested => writeln!(
                    out,
                    "cancellation requested for {short}…; the process running it stops it within a second"
                )?,
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A task by its full id or a unique prefix (as `tasks list` shows them).
fn find_task(engine: &Engine, id: &str) -> anyhow::Result<Option<crate::model::TaskRow>> {
    if let Some(t) = engine.task_get(id)? {
        return Ok(Some(t));
    }
    let matches: Vec<_> = engine
        .task_list(None, 10_000)?
        .into_iter()
        .filter(|t| t.id.starts_with(id.trim_end_matches('…')))
        .collect();
    match matches.len() {
        1 => Ok(matches.into_iter().next()),
        0 => Ok(None),
        n => anyhow::bail!("{n} tasks start with {id}; give more characters"),
    }
}

/// Why a hit ranks where it does: its place by words and by meaning, or, for a hit that joined
/// the page through a relation of another hit (recall's `expand`), that relation.
fn why(text_rank: Option<usize>, vector_rank: Option<usize>, via: Option<&str>) -> String {
    let place = |rank: Option<usize>, what: &str| rank.map(|r| format!("{what} #{r}"));
    let places: Vec<String> = [place(text_rank, "words"), place(vector_rank, "meaning")]
        .into_iter()
        .flatten()
        .collect();
    match (via, places.is_empty()) {
        (Some(relation), true) => format!("via {relation}"),
        (Some(relation), false) => format!("via {relation}, {}", places.join(", ")),
        (None, true) => "no match".to_owned(),
        (None, false) => [
            place(text_rank, "words").unwrap_or_else(|| "not by words".to_owned()),
            place(vector_rank, "meaning").unwrap_or_else(|| "not by meaning".to_owned()),
        ]
        .join(", "),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn why_names_the_place_by_words_and_by_meaning() {
        assert_eq!(super::why(Some(1), Some(3), None), "words #1, meaning #3");
        assert_eq!(super::why(None, Some(2), None), "not by words, meaning #2");
        assert_eq!(super::why(Some(4), None, None), "words #4, not by meaning");
        assert_eq!(super::why(None, None, Some("leads")), "via leads");
        assert_eq!(
            super::why(None, Some(7), Some("follows")),
            "via follows, meaning #7"
        );
    }
}
