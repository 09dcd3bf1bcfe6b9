//! The one error type of the library: user errors (the caller can fix them) apart from internal ones.

/// Everything that can go wrong in mnemograph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is missing, malformed or out of range; `hint` says how to fix it.
    #[error("invalid `{field}`: {reason}. {hint}")]
    InvalidArgument {
        field: String,
        reason: String,
        hint: String,
    },
    /// A memory, relation or task that does not exist (or is not visible to the caller).
    #[error("{what} not found: {id}. {hint}")]
    NotFound {
        what: &'static str,
        id: String,
        hint: String,
    },
    /// A name that is already taken in its namespace.
    #[error("conflict: {reason}. {hint}")]
    Conflict { reason: String, hint: String },
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("text index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// An embedding provider failed or answered something unusable (wrong dimension, bad reply,
    /// missing model file). Recall falls back to text search when this happens.
    #[error("embedder {provider}: {reason}")]
    Embed { provider: String, reason: String },
    /// Stored state that cannot be read back.
    #[error("corrupted {what}: {reason}")]
    Corrupted { what: String, reason: String },
    /// The caller cancelled the work before it finished.
    #[error("cancelled")]
    Cancelled,
    /// A background worker died or a lock was poisoned.
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    /// True when the caller can fix it (bad input, unknown id); false for faults of the server.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Error::InvalidArgument { .. } | Error::NotFound { .. } | Error::Conflict { .. }
        )
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(
        field: impl Into<String>,
        reason: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
            hint: hint.into(),
        }
    }

    /// Shorthand for [`Error::NotFound`].
    pub fn not_found(what: &'static str, id: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::NotFound {
            what,
            id: id.into(),
            hint: hint.into(),
        }
    }
}

/// Result of every fallible library call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
