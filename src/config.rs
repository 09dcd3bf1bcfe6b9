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

/// An OpenAI-compatible chat endpoint (`POST {base_url}/chat/completions`) for summaries.
#[derive(Clone, PartialEq, Eq)]
pub struct SummarizerSpec {
    pub base_url: String,
    pub model: String,
    /// Sent as a bearer token; never logged.
    pub api_key: Option<String>,
    pub timeout_ms: u64,
}

impl std::fmt::Debug for SummarizerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummarizerSpec")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout_ms", &self.timeout_ms)
            .finish()
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

impl EmbedderSpec {
    /// A provider that runs in this process, as `--embedder` names it: `builtin` (or empty),
    /// `none`, `static:DIR` or `minilm:DIR`; `None` for anything else (`http` needs more).
    pub fn local(name: &str) -> Option<EmbedderSpec> {
        Some(match name.trim() {
            "builtin" | "" => EmbedderSpec::Builtin,
            "none" | "off" => EmbedderSpec::None,
            other => match other.split_once(':') {
                Some(("static", dir)) => EmbedderSpec::StaticDir(PathBuf::from(dir)),
                Some(("minilm", dir)) => EmbedderSpec::MiniLm(PathBuf::from(dir)),
                _ => return None,
            },
        })
    }
}

/// When a committed write is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// SQLite's `synchronous=NORMAL` in WAL mode: a commit is written to the log at once and the
    /// log is synced at checkpoints. A crash of the process loses nothing; a power cut or an
    /// operating system crash may lose the commits since the last checkpoint (the file stays
    /// consistent).
    #[default]
    Normal,
    /// `synchronous=FULL`: every commit is synced to disk before the call returns, so it
    /// survives a power cut too; each write takes one more disk sync.
    Full,
}

/// Everything the engine needs to open a memory file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The SQLite database: the source of truth (unused when [`Config::postgres`] is set).
    pub db_path: PathBuf,
    /// A `postgres://` URL: the PostgreSQL database is the source of truth instead of the file.
    pub postgres: Option<String>,
    /// Folder of the derived indexes (`<db>.index/`).
    pub index_dir: PathBuf,
    /// When true, the indexes live in a folder of [`Config::index_dir`] named by the database's
    /// identity (a cache folder shared by several databases: each keeps its own indexes).
    pub index_dir_per_database: bool,
    /// Memory budget of the tantivy writer, in bytes.
    pub text_writer_bytes: usize,
    /// How long a write waits for another process's lock before failing, in milliseconds.
    pub busy_timeout_ms: u64,
    /// When a committed write is on disk.
    pub durability: Durability,
    pub limits: Limits,
    /// The embedding provider of the vector index.
    pub embedder: EmbedderSpec,
    /// The chat endpoint that writes abstractive summaries (`None`: extractive summaries).
    pub summarizer: Option<SummarizerSpec>,
    /// Folders (or single files) `import` may read from and `export` may write to, besides the
    /// database's folder: what the operator named. See [`Config::transfer_roots`].
    pub import_roots: Vec<PathBuf>,
    /// The user's home folder, when known: never a root itself (nor anything above it).
    pub home_dir: Option<PathBuf>,
}

/// A root that was refused, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedRoot {
    pub path: PathBuf,
    /// Says what the folder is, e.g. "it is the home folder".
    pub reason: String,
}

/// Where imports may read and exports may write.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TransferRoots {
    /// Canonical folders (or single files), in order: the database's folder first.
    pub allowed: Vec<PathBuf>,
    /// Roots that were asked for (or the database's folder) but are never allowed.
    pub refused: Vec<RefusedRoot>,
}

/// Pseudo-filesystems: never read or written, whatever the roots.
pub const PSEUDO_FILESYSTEMS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// System folders that are never a root, nor is anything below them.
const SYSTEM_TREES: [&str; 18] = [
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/run",
    "/var/run",
    "/var/lock",
    "/var/log",
    "/var/spool",
    "/var/mail",
    "/System",
    "/private/etc",
    "/private/var/log",
];

/// Folders that hold other users' or the system's files: never a root themselves, though a
/// folder below them may be (`/var/lib/mnemograph`, `/home/me/notes`).
const SHARED_FOLDERS: [&str; 15] = [
    "/home",
    "/Users",
    "/root",
    "/var",
    "/var/lib",
    "/opt",
    "/srv",
    "/mnt",
    "/media",
    "/snap",
    "/private",
    "/private/var",
    "/Library",
    "/Volumes",
    "/Applications",
];

/// Why the canonical path `real` may never be an import root, or `None` when it may be. `home`
/// is the canonical home folder.
pub fn root_refusal(real: &Path, home: Option<&Path>) -> Option<String> {
    if real.parent().is_none() {
        return Some("it is the filesystem root".into());
    }
    if let Some(home) = home {
        if real == home {
            return Some("it is the home folder (name a folder inside it)".into());
        }
        if home.starts_with(real) {
            return Some("it contains the home folder".into());
        }
    }
    if let Some(p) = PSEUDO_FILESYSTEMS.iter().find(|p| real.starts_with(p)) {
        return Some(format!("it is on a pseudo-filesystem ({p})"));
    }
    if let Some(p) = SYSTEM_TREES.iter().find(|p| real.starts_with(p)) {
        return Some(format!("it is a system folder ({p})"));
    }
    if SHARED_FOLDERS.iter().any(|p| real == Path::new(p)) {
        return Some("it is a system folder holding other users' or the system's files".into());
    }
    None
}

/// `path` made absolute and canonical; a path that does not exist yet (an export's new file)
/// is its canonical folder joined with its name.
fn canonical_root(path: &Path) -> std::io::Result<PathBuf> {
    match path.canonicalize() {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                return Err(e);
            };
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            Ok(parent.canonicalize()?.join(name))
        }
        Err(e) => Err(e),
    }
}

impl Config {
    /// Defaults for a database at `db_path`, with the indexes beside it.
    pub fn for_db(db_path: impl AsRef<Path>) -> Config {
        let db_path = db_path.as_ref().to_path_buf();
        let mut index_dir = db_path.clone().into_os_string();
        index_dir.push(".index");
        Config {
            db_path,
            postgres: None,
            index_dir: PathBuf::from(index_dir),
            index_dir_per_database: false,
            text_writer_bytes: 64 * 1024 * 1024,
            busy_timeout_ms: 10_000,
            durability: Durability::default(),
            limits: Limits::default(),
            embedder: EmbedderSpec::default(),
            summarizer: None,
            import_roots: Vec::new(),
            home_dir: None,
        }
    }

    /// Defaults for the PostgreSQL database at `url`, with the indexes in a folder of
    /// `index_root` named by the database's identity.
    pub fn for_postgres(url: impl Into<String>, index_root: impl AsRef<Path>) -> Config {
        let mut cfg = Config::for_db(index_root.as_ref().join("unused.db"));
        cfg.postgres = Some(url.into());
        cfg.index_dir = index_root.as_ref().to_path_buf();
        cfg.index_dir_per_database = true;
        cfg
    }

    /// The database as logs name it: the file's path, or the PostgreSQL URL without its
    /// password.
    pub fn database_label(&self) -> String {
        match &self.postgres {
            Some(url) => redact(url),
            None => self.db_path.display().to_string(),
        }
    }

    /// The folder of the database file.
    pub fn db_dir(&self) -> PathBuf {
        match self.db_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// The roots imports and exports are confined to: the database's folder and
    /// [`Config::import_roots`], each made canonical, minus those [`root_refusal`] refuses (the
    /// filesystem root, the home folder and what contains it, system folders, pseudo-filesystems)
    /// and those that cannot be resolved. Never the current directory.
    pub fn transfer_roots(&self) -> TransferRoots {
        let home = self.home_dir.as_ref().and_then(|h| h.canonicalize().ok());
        let mut out = TransferRoots::default();
        // A PostgreSQL database has no folder: only the named roots.
        let db_dir = self.postgres.is_none().then(|| self.db_dir());
        for path in db_dir.into_iter().chain(self.import_roots.iter().cloned()) {
            let checked = match canonical_root(&path) {
                Err(e) => Err(format!("it cannot be opened ({e})")),
                Ok(real) => match root_refusal(&real, home.as_deref()) {
                    Some(reason) => Err(reason),
                    None => Ok(real),
                },
            };
            match checked {
                Ok(real) if !out.allowed.contains(&real) => out.allowed.push(real),
                Ok(_) => {}
                Err(reason) if !out.refused.iter().any(|r| r.path == path) => {
                    out.refused.push(RefusedRoot { path, reason })
                }
                Err(_) => {}
            }
        }
        out
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

/// `url` with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filesystem_root_home_and_system_folders_are_never_roots() {
        let home = Path::new("/home/ada");
        let refused = |p: &str| root_refusal(Path::new(p), Some(home));
        for p in [
            "/",
            "/home/ada",
            "/home",
            "/etc",
            "/etc/ssh",
            "/usr/share/doc",
            "/bin",
            "/lib64",
            "/boot",
            "/var",
            "/var/lib",
            "/var/log/syslog.d",
            "/run/user/1000",
            "/proc",
            "/proc/self",
            "/sys/kernel",
            "/dev/shm",
            "/root",
        ] {
            assert!(refused(p).is_some(), "{p} must be refused");
        }
        assert!(refused("/home/ada").unwrap().contains("home folder"));
        assert!(refused("/").unwrap().contains("filesystem root"));
        assert!(refused("/proc/self").unwrap().contains("pseudo-filesystem"));
        assert!(refused("/etc/ssh").unwrap().contains("system folder"));
        // Folders below a temporary folder or root's home folder (built from their parts).
        let below = |top: &str, sub: &str| format!("{top}/{sub}");
        for p in [
            "/home/ada/notes".to_owned(),
            "/home/ada/.local/share/mnemograph".to_owned(),
            "/var/lib/mnemograph".to_owned(),
            "/srv/memory".to_owned(),
            below("/tmp", "x"),
            "/data".to_owned(),
            below("/root", "notes"),
        ] {
            assert_eq!(refused(&p), None, "{p} may be a root");
        }
        // Without a known home folder only the other rules apply.
        assert_eq!(root_refusal(Path::new("/home/ada"), None), None);
    }

    #[test]
    fn the_default_root_is_the_database_folder_unless_it_is_the_home_folder() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(real.join("db")).unwrap();
        std::fs::create_dir_all(real.join("notes")).unwrap();
        let mut cfg = Config::for_db(real.join("db/memory.db"));
        let roots = cfg.transfer_roots();
        assert_eq!(
            roots.allowed,
            vec![real.join("db")],
            "never the current directory"
        );
        assert!(roots.refused.is_empty());

        cfg.import_roots = vec![
            real.join("notes"),
            real.join("notes"),
            real.join("new.jsonl"),
            real.join("missing/deeper"),
            PathBuf::from("/"),
            PathBuf::from("/etc"),
        ];
        let roots = cfg.transfer_roots();
        assert_eq!(
            roots.allowed,
            vec![real.join("db"), real.join("notes"), real.join("new.jsonl")]
        );
        let refused: Vec<&Path> = roots.refused.iter().map(|r| r.path.as_path()).collect();
        assert_eq!(
            refused,
            vec![
                real.join("missing/deeper").as_path(),
                Path::new("/"),
                Path::new("/etc")
            ]
        );

        // A database in the home folder: that default is refused, named roots still count.
        let mut cfg = Config::for_db(real.join("memory.db"));
        cfg.home_dir = Some(real.clone());
        let roots = cfg.transfer_roots();
        assert!(roots.allowed.is_empty());
        assert_eq!(roots.refused.len(), 1);
        assert!(roots.refused[0].reason.contains("home folder"), "{roots:?}");
        cfg.import_roots = vec![real.join("notes")];
        assert_eq!(cfg.transfer_roots().allowed, vec![real.join("notes")]);
    }
}
