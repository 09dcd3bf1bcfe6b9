//! Bearer tokens for the HTTP transport: the tokens file (per line a subject, the SHA-256 of its
//! token, its scopes and namespaces), making new tokens, and the caller a request's token
//! identifies. The file holds hashes only; a token is never stored or logged.
//!
//! A line: `SUBJECT sha256:HEX scopes=read,write namespaces=*` (`#` starts a comment).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::engine::{Access, Grant};
use crate::error::{Error, Result};

pub use crate::engine::Scope;

/// Who a request acts for over HTTP: the owner of its tasks, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub subject: String,
    pub scope: Scope,
    /// The namespaces its tools may read and write.
    pub access: Access,
}

impl Caller {
    /// What this caller's calls may do (kept with the tasks it starts).
    pub fn grant(&self) -> Grant {
        Grant {
            scope: self.scope,
            access: self.access.clone(),
        }
    }
}

/// The tokens a server admits, by the hash of each.
#[derive(Debug, Default)]
pub struct Tokens {
    by_hash: HashMap<[u8; 32], Caller>,
}

/// Why a request's credentials were refused (401, or 403 for a token without a scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization: Bearer …` header.
    Missing,
    /// A token this server does not know, or one that does not verify.
    Invalid,
    /// An access token past its expiry.
    Expired,
    /// An access token that grants none of read, write and admin.
    NoScope,
}

/// The token of an `Authorization: Bearer …` header's value.
fn bearer(authorization: Option<&str>) -> std::result::Result<&str, Refusal> {
    let value = authorization.ok_or(Refusal::Missing)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(Refusal::Missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Refusal::Missing);
    }
    Ok(token.trim())
}

/// How HTTP requests are authorised: a tokens file, an OAuth authorisation server, or both
/// (a token of the file is looked up first; a JWT goes to the authorisation server's keys).
#[derive(Debug, Default)]
pub struct Gate {
    pub tokens: Option<TokenFile>,
    pub oauth: Option<crate::mcp::oauth::OAuth>,
}

impl Gate {
    /// The caller of an `Authorization` header's value.
    pub async fn admit(&self, authorization: Option<&str>) -> std::result::Result<Caller, Refusal> {
        let token = bearer(authorization)?;
        if let Some(file) = &self.tokens
            && let Some(caller) = file.current().get(token)
        {
            return Ok(caller.clone());
        }
        match &self.oauth {
            Some(oauth) if token.split('.').count() == 3 => oauth.verify(token).await,
            _ => Err(Refusal::Invalid),
        }
    }
}

const PREFIX: &str = "sha256:";

/// How often a served tokens file is looked at for changes.
const RECHECK: Duration = Duration::from_secs(1);

/// What tells a changed file from the one read: modification time, length, inode, and the
/// status change time and mode (a `chmod` changes only those).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
    changed: (i64, i64),
    mode: u32,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let (inode, changed, mode) = {
        use std::os::unix::fs::MetadataExt;
        (meta.ino(), (meta.ctime(), meta.ctime_nsec()), meta.mode())
    };
    #[cfg(not(unix))]
    let (inode, changed, mode) = (0, (0, 0), 0);
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode,
        changed,
        mode,
    })
}

/// The tokens file a server admits callers by, read again when it changes (looked at once a
/// second, when a request comes): a line removed stops admitting its token without a restart.
/// While the file is missing, unreadable, open to writing by others or malformed, no token of
/// it is admitted (and the log says why): its lines are exactly what is admitted.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    state: Mutex<FileState>,
}

#[derive(Debug)]
struct FileState {
    tokens: Arc<Tokens>,
    stamp: Option<Stamp>,
    checked: Instant,
}

impl TokenFile {
    /// Reads the file as `serve` needs it: private to its owner (see [`check_private`]), with
    /// at least one token.
    pub fn open(path: &Path) -> Result<TokenFile> {
        let before = stamp(path);
        let tokens = Tokens::load_served(path)?;
        if tokens.is_empty() {
            return Err(Error::invalid(
                "tokens",
                format!("{} holds no tokens", path.display()),
                format!(
                    "add one with `mnemograph token add SUBJECT --tokens {}`",
                    path.display()
                ),
            ));
        }
        Ok(TokenFile {
            path: path.to_owned(),
            state: Mutex::new(FileState {
                tokens: Arc::new(tokens),
                stamp: before,
                checked: Instant::now(),
            }),
        })
    }

    /// Tokens in the file as read.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tokens admitted now: the file is read again when it changed since it was last
    /// looked at (at most once per `RECHECK`).
    pub fn current(&self) -> Arc<Tokens> {
        let mut st = crate::lock::lock(&self.state);
        if st.checked.elapsed() >= RECHECK {
            st.checked = Instant::now();
            let now = stamp(&self.path);
            if now != st.stamp || now.is_none() {
                let read = Tokens::load_served(&self.path);
                // Unchanged content read again after a failure stays quiet.
                let changed = now != st.stamp;
                st.stamp = now;
                match read {
                    Ok(tokens) => {
                        if changed {
                            tracing::info!(file = %self.path.display(), tokens = tokens.len(), "tokens file read again");
                        }
                        st.tokens = Arc::new(tokens);
                    }
                    Err(e) => {
                        if changed {
                            tracing::error!(file = %self.path.display(), error = %e, "the tokens file cannot be used; no token of it is admitted until it is fixed");
                        }
                        st.tokens = Arc::new(Tokens::default());
                    }
                }
            }
        }
        Arc::clone(&st.tokens)
    }
}

/// An error when group or others may write the tokens file at `path`: whoever can write it can
/// admit themselves with any rights.
pub fn check_private(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| {
            Error::invalid(
                "tokens",
                format!("cannot read {}: {e}", path.display()),
                "create it with `mnemograph token add SUBJECT --tokens FILE`",
            )
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o022 != 0 {
            return Err(Error::invalid(
                "tokens",
                format!(
                    "{} can be written by its group or others (mode {mode:03o}), so anyone who can write it can admit themselves",
                    path.display()
                ),
                format!(
                    "make it private to the server's user: `chmod 600 {}`",
                    path.display()
                ),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Restricts the file at `path` to its owner (0600); true when it was more open before.
pub fn make_private(path: &Path) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
            return Ok(true);
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(false)
}

/// One line of a tokens file, as `token list` shows it (never the token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub subject: String,
    /// `sha256:` and the first 12 hex digits of the token's hash.
    pub hash_prefix: String,
    pub scope: Scope,
    pub access: Access,
}

/// The tokens of the file at `path`, one entry per line.
pub fn list(path: &Path) -> Result<Vec<Listed>> {
    let text = read(path)?;
    let tokens = Tokens::parse(&text).map_err(|(line, reason)| bad_line(path, line, &reason))?;
    let mut out: Vec<Listed> = tokens
        .by_hash
        .iter()
        .map(|(hash, c)| Listed {
            subject: c.subject.clone(),
            hash_prefix: format!("{PREFIX}{}", &hex(hash)[..12]),
            scope: c.scope,
            access: c.access.clone(),
        })
        .collect();
    out.sort_by(|a, b| {
        a.subject
            .cmp(&b.subject)
            .then(a.hash_prefix.cmp(&b.hash_prefix))
    });
    Ok(out)
}

/// Removes from the file at `path` the lines of `which`: a subject (all its tokens), a hash
/// prefix as `token list` shows it (`sha256:` and at least 8 hex digits; it must match one
/// line), or a token itself. The file is written anew beside and renamed into place, private
/// to its owner. Returns the subjects of the lines removed; an error when none matched.
pub fn revoke(path: &Path, which: &str) -> Result<Vec<String>> {
    let text = read(path)?;
    Tokens::parse(&text).map_err(|(line, reason)| bad_line(path, line, &reason))?;
    let which = which.trim();
    let by_token = (!which.starts_with(PREFIX)).then(|| hex(&digest(which)));
    let prefix = which.strip_prefix(PREFIX).map(str::to_ascii_lowercase);
    if let Some(p) = &prefix
        && (p.len() < 8 || !p.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(Error::invalid(
            "token",
            format!("{which:?} is not `sha256:` and at least 8 hex digits"),
            "give a subject, a hash prefix as `mnemograph token list` shows it, or the token",
        ));
    }
    let mut kept = String::with_capacity(text.len());
    let mut removed = Vec::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let mut fields = line.split_whitespace();
        let (subject, hash) = (
            fields.next(),
            fields.next().and_then(|h| h.strip_prefix(PREFIX)),
        );
        let matched = match (subject, hash) {
            (Some(subject), Some(hash)) => {
                subject == which
                    || prefix
                        .as_ref()
                        .is_some_and(|p| hash.starts_with(p.as_str()))
                    || by_token.as_ref().is_some_and(|t| t == hash)
            }
            _ => false,
        };
        if matched {
            removed.push(subject.unwrap_or_default().to_owned());
        } else {
            kept.push_str(raw);
            kept.push('\n');
        }
    }
    if removed.is_empty() {
        return Err(Error::not_found(
            "token",
            which.to_owned(),
            "give a subject or a hash prefix as `mnemograph token list` shows it",
        ));
    }
    if prefix.is_some() && removed.len() > 1 {
        return Err(Error::invalid(
            "token",
            format!("{which:?} matches {} lines", removed.len()),
            "give more digits of the hash, or the subject to revoke all of its tokens",
        ));
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let temp = path.with_extension("revoking");
    {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).write(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut out = options.open(&temp)?;
        std::io::Write::write_all(&mut out, kept.as_bytes())?;
        out.sync_all()?;
    }
    make_private(&temp)?;
    std::fs::rename(&temp, path)?;
    if let Some(d) = dir.and_then(|d| std::fs::File::open(d).ok()) {
        let _ = d.sync_all();
    }
    Ok(removed)
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| {
        Error::invalid(
            "tokens",
            format!("cannot read {}: {e}", path.display()),
            "create it with `mnemograph token add SUBJECT --tokens FILE`",
        )
    })
}

fn bad_line(path: &Path, line: usize, reason: &str) -> Error {
    Error::invalid(
        "tokens",
        format!("{} line {line}: {reason}", path.display()),
        "each line is `SUBJECT sha256:HEX scopes=read,write namespaces=*`, as `mnemograph token add` writes it",
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Tokens {
    /// Reads a tokens file.
    pub fn load(path: &Path) -> Result<Tokens> {
        let text = read(path)?;
        Tokens::parse(&text).map_err(|(line, reason)| bad_line(path, line, &reason))
    }

    /// Reads a tokens file a server admits callers by: it must be private (see
    /// [`check_private`]).
    fn load_served(path: &Path) -> Result<Tokens> {
        check_private(path)?;
        Tokens::load(path)
    }

    /// The tokens of a file's text; a bad line is `(its number, what is wrong)`.
    pub fn parse(text: &str) -> std::result::Result<Tokens, (usize, String)> {
        let mut by_hash = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(subject), Some(hash)) = (fields.next(), fields.next()) else {
                return Err((n, "a subject and a token hash are needed".into()));
            };
            check_subject(subject).map_err(|r| (n, r))?;
            let digest = parse_hash(hash).ok_or_else(|| {
                (
                    n,
                    format!("{hash:?} is not `sha256:` and 64 hex digits (the token itself never belongs here)"),
                )
            })?;
            let mut scope = None;
            let mut access = None;
            for field in fields {
                match field.split_once('=') {
                    Some(("scopes", list)) => {
                        for s in list.split(',') {
                            let s = Scope::parse(s).ok_or_else(|| {
                                (n, format!("unknown scope {s:?}; use read, write or admin"))
                            })?;
                            scope = scope.max(Some(s));
                        }
                    }
                    Some(("namespaces", list)) => {
                        access = Some(parse_namespaces(list).map_err(|r| (n, r))?);
                    }
                    _ => return Err((n, format!("unknown field {field:?}"))),
                }
            }
            let scope = scope.ok_or_else(|| (n, "no scopes=…".to_owned()))?;
            let caller = Caller {
                subject: subject.to_owned(),
                scope,
                access: access.ok_or_else(|| {
                    (
                        n,
                        "no namespaces=… (give namespaces=* for every namespace)".to_owned(),
                    )
                })?,
            };
            if by_hash.insert(digest, caller).is_some() {
                return Err((n, "the same token hash is listed twice".into()));
            }
        }
        Ok(Tokens { by_hash })
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The caller of an `Authorization` header's value.
    pub fn check(&self, authorization: Option<&str>) -> std::result::Result<&Caller, Refusal> {
        self.get(bearer(authorization)?).ok_or(Refusal::Invalid)
    }

    /// The caller of a token (the header's scheme taken off).
    fn get(&self, token: &str) -> Option<&Caller> {
        self.by_hash.get(&digest(token))
    }
}

fn check_subject(s: &str) -> std::result::Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 200
        && s.chars()
            .all(|c| c.is_alphanumeric() || "_-.@:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "subject {s:?} must be 1-200 letters, digits or `_ - . @ :`"
        ))
    }
}

/// The namespaces of a `namespaces=` field: `*` for every one, else names separated by commas.
fn parse_namespaces(list: &str) -> std::result::Result<Access, String> {
    if list == "*" {
        return Ok(Access::All);
    }
    let mut names = Vec::new();
    for ns in list.split(',') {
        if ns == "*" {
            return Err("`*` stands alone: every namespace, or a list of names".into());
        }
        let max = crate::config::Limits::default().max_name_bytes;
        crate::engine::validate::label("namespaces", ns, max)
            .map_err(|e| format!("namespace {ns:?}: {e}"))?;
        names.push(ns.to_owned());
    }
    Ok(Access::only(names))
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn parse_hash(s: &str) -> Option<[u8; 32]> {
    let hex = s.strip_prefix(PREFIX)?;
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A new random token (256 bits) and the tokens-file line that admits it for `subject`, in
/// `namespaces` (`None`: every namespace).
pub fn new_token(
    subject: &str,
    scopes: &[String],
    namespaces: Option<&[String]>,
) -> Result<(String, String)> {
    check_subject(subject)
        .map_err(|r| Error::invalid("subject", r, "give a name such as alice or ci-bot"))?;
    let mut list = Vec::new();
    for s in scopes {
        let scope = Scope::parse(s.trim()).ok_or_else(|| {
            Error::invalid(
                "scopes",
                format!("unknown scope {s:?}"),
                "use read, write or admin (comma-separated)",
            )
        })?;
        list.push(scope.name());
    }
    if list.is_empty() {
        return Err(Error::invalid(
            "scopes",
            "none given",
            "give at least one of read, write, admin",
        ));
    }
    let namespaces = match namespaces {
        None => "*".to_owned(),
        Some(list) => {
            let joined = list.iter().map(|n| n.trim()).collect::<Vec<_>>().join(",");
            parse_namespaces(&joined).map_err(|r| {
                Error::invalid(
                    "namespaces",
                    r,
                    "give namespace names separated by commas, or leave --namespaces out for every namespace",
                )
            })?;
            joined
        }
    };
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Internal(format!("no randomness from the operating system: {e}")))?;
    let token = format!(
        "mgt_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let hex = hex(&digest(&token));
    let line = format!(
        "{subject} {PREFIX}{hex} scopes={} namespaces={namespaces}",
        list.join(",")
    );
    Ok((token, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_is_admitted_by_its_line_and_nothing_else_is() {
        let (token, line) = new_token("alice", &["read".into(), "write".into()], None).unwrap();
        assert!(!line.contains(&token), "the file holds the hash only");
        let tokens = Tokens::parse(&format!("# team\n\n{line}\n")).unwrap();
        assert_eq!(tokens.len(), 1);
        let caller = tokens.check(Some(&format!("Bearer {token}"))).unwrap();
        assert_eq!(
            caller,
            &Caller {
                subject: "alice".into(),
                scope: Scope::Write,
                access: Access::All,
            }
        );
        assert_eq!(tokens.check(Some(&format!("bearer  {token} "))), Ok(caller));
        assert_eq!(tokens.check(None), Err(Refusal::Missing));
        assert_eq!(
            tokens.check(Some(&format!("Basic {token}"))),
            Err(Refusal::Missing)
        );
        assert_eq!(
            tokens.check(Some("Bearer mgt_wrong")),
            Err(Refusal::Invalid)
        );
        let (other, _) = new_token("alice", &["read".into()], None).unwrap();
        assert_ne!(token, other);
    }

    #[test]
    fn a_token_for_some_namespaces_admits_its_caller_to_those_only() {
        let list = ["work".to_owned(), "home".to_owned()];
        let (token, line) = new_token("carol", &["write".into()], Some(&list)).unwrap();
        assert!(line.ends_with("namespaces=work,home"), "{line}");
        let tokens = Tokens::parse(&line).unwrap();
        let caller = tokens.check(Some(&format!("Bearer {token}"))).unwrap();
        assert_eq!(caller.access, Access::only(list.clone()));
        assert!(caller.access.allows("home") && !caller.access.allows("default"));
        for bad in [
            vec!["*".to_owned(), "a".to_owned()],
            vec!["a b".to_owned()],
            vec![String::new()],
        ] {
            assert!(
                new_token("carol", &["read".into()], Some(&bad)).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let (_, good) = new_token("bob", &["admin".into()], None).unwrap();
        let hash = good.split_whitespace().nth(1).unwrap().to_owned();
        for (text, says) in [
            ("bob".to_owned(), "token hash"),
            ("bob mgt_plaintext scopes=read".to_owned(), "never belongs"),
            (format!("bob {hash} namespaces=*"), "no scopes"),
            (format!("bob {hash} scopes=root"), "unknown scope"),
            (format!("bob {hash} scopes=read"), "no namespaces"),
            (
                format!("bob {hash} scopes=read namespaces=a,*"),
                "stands alone",
            ),
            (format!("bob {hash} scopes=read namespaces=a,,b"), "empty"),
            (
                format!("bob {hash} scopes=read colour=red"),
                "unknown field",
            ),
            (format!("b/b {hash} scopes=read namespaces=*"), "subject"),
            (format!("{good}\n{good}"), "twice"),
        ] {
            let (line, reason) = Tokens::parse(&text).unwrap_err();
            assert!(reason.contains(says), "{text}: {reason}");
            assert!(line >= 1, "{text}");
        }
        assert!(new_token("bob", &[], None).is_err());
        assert!(new_token("bob", &["superuser".into()], None).is_err());
        assert!(new_token("", &["read".into()], None).is_err());
    }
}
