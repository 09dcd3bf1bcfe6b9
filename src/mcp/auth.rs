//! Bearer tokens for the HTTP transport: the tokens file (per line a subject, the SHA-256 of its
//! token, its scopes and namespaces), making new tokens, and the caller a request's token
//! identifies. The file holds hashes only; a token is never stored or logged.
//!
//! A line: `SUBJECT sha256:HEX scopes=read,write namespaces=*` (`#` starts a comment).

use std::collections::HashMap;
use std::path::Path;

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
    pub tokens: Option<Tokens>,
    pub oauth: Option<crate::mcp::oauth::OAuth>,
}

impl Gate {
    /// The caller of an `Authorization` header's value.
    pub async fn admit(&self, authorization: Option<&str>) -> std::result::Result<Caller, Refusal> {
        let token = bearer(authorization)?;
        if let Some(tokens) = &self.tokens
            && let Some(caller) = tokens.get(token)
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

impl Tokens {
    /// Reads a tokens file.
    pub fn load(path: &Path) -> Result<Tokens> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid(
                "tokens",
                format!("cannot read {}: {e}", path.display()),
                "create it with `mnemograph token add SUBJECT --tokens FILE`",
            )
        })?;
        Tokens::parse(&text).map_err(|(line, reason)| {
            Error::invalid(
                "tokens",
                format!("{} line {line}: {reason}", path.display()),
                "each line is `SUBJECT sha256:HEX scopes=read,write namespaces=*`, as `mnemograph token add` writes it",
            )
        })
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
    let hex: String = digest(&token).iter().map(|b| format!("{b:02x}")).collect();
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
