//! Plain configuration structs, built once by the CLI (flags > env > defaults) and passed down.

use std::path::{Path, PathBuf};

/// Limits on what one call may store; bad input beyond them is refused with a clear error.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Largest `content` of one memory, in bytes.
    pub max_content_bytes: usize,
    /// Most tags on one memory.
    pub max_tags: usize,
    /// Longest tag, in bytes.
    pub max_tag_bytes: usize,
    /// Longest name, namespace or kind, in bytes.
    pub max_name_bytes: usize,
    /// Most memories or relations in one `remember` / `relate` call.
    pub max_batch: usize,
    /// Most content bytes in one `remember` call, all memories together.
    pub max_call_bytes: usize,
    /// Largest `metadata` object, serialised, in bytes.
    pub max_metadata_bytes: usize,
    /// Most hits one recall page returns.
    pub max_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_content_bytes: 64 * 1024,
            max_tags: 32,
            max_tag_bytes: 64,
            max_name_bytes: 200,
            max_batch: 10_000,
            max_call_bytes: 16 * 1024 * 1024,
            max_metadata_bytes: 16 * 1024,
            max_limit: 100,
        }
    }
}

/// Which embedding provider recall uses for its vector signal.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum EmbedderSpec {
    /// The static model compiled into the binary (offline, microseconds a text).
    #[default]
    Builtin,
    /// No vectors: recall is text-only.
    None,
    /// A static model folder in model2vec's layout.
    StaticDir(PathBuf),
    /// The MiniLM transformer from a sentence-transformers folder (build feature `minilm`).
    MiniLm(PathBuf),
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    Http {
        base_url: String,
        model: String,
        api_key: Option<String>,
        timeout_ms: u64,
    },
    /// Deterministic word hashing, for tests.
    Hashing(usize),
}

/// Everything the engine needs to open a memory file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The SQLite database: the source of truth.
    pub db_path: PathBuf,
    /// Folder of the derived indexes (`<db>.index/`).
    pub index_dir: PathBuf,
    /// Memory budget of the tantivy writer, in bytes.
    pub text_writer_bytes: usize,
    /// How long a write waits for another process's lock before failing, in milliseconds.
    pub busy_timeout_ms: u64,
    pub limits: Limits,
    /// The embedding provider of the vector index.
    pub embedder: EmbedderSpec,
    /// Folders `import` may read from and `export` may write to. Empty: the current directory
    /// and the database's folder.
    pub import_roots: Vec<PathBuf>,
}

impl Config {
    /// Defaults for a database at `db_path`, with the indexes beside it.
    pub fn for_db(db_path: impl AsRef<Path>) -> Config {
        let db_path = db_path.as_ref().to_path_buf();
        let mut index_dir = db_path.clone().into_os_string();
        index_dir.push(".index");
        Config {
            db_path,
            index_dir: PathBuf::from(index_dir),
            text_writer_bytes: 64 * 1024 * 1024,
            busy_timeout_ms: 10_000,
            limits: Limits::default(),
            embedder: EmbedderSpec::default(),
            import_roots: Vec::new(),
        }
    }

    /// The folders imports and exports are confined to (see [`Config::import_roots`]).
    pub fn transfer_roots(&self) -> Vec<PathBuf> {
        if !self.import_roots.is_empty() {
            return self.import_roots.clone();
        }
        let mut roots = Vec::new();
        if let Ok(cwd) = std::env::current_dir() {
            roots.push(cwd);
        }
        let db_dir = match self.db_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        roots.push(db_dir);
        roots
    }

    /// Folder of the HNSW dump.
    pub fn vector_index_dir(&self) -> PathBuf {
        self.index_dir.join("vector")
    }

    /// Folder of the tantivy index.
    pub fn text_index_dir(&self) -> PathBuf {
        self.index_dir.join("text")
    }
}
