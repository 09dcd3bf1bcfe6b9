//! OAuth 2.1 resource-server mode of the HTTP transport: JWT access tokens an authorisation
//! server issued, verified against its JWKS (a file or a URL), with the issuer, the audience (this
//! server's canonical URL) and the expiry checked; and the protected-resource metadata (RFC 9728)
//! that tells clients where to get such tokens.
//!
//! Only asymmetric signatures are accepted (RS*, PS*, ES256/384, EdDSA): a shared secret in a key
//! set, or `alg: none`, never admits a token. A token signed by a key the set does not hold makes
//! the server read the set again (at most every [`REFRESH_EVERY`]), so a rotated key is picked
//! up without a restart, and a key taken out of the set stops admitting tokens.
//!
//! Claims: `sub` is the caller (the owner of its tasks, the actor in history); `scope` (space
//! separated) carries `read`, `write` or `admin` (also as `mnemograph:read` …); the optional
//! `namespaces` claim (a list of names, or `"*"`) limits the namespaces, every one when absent.

use std::path::PathBuf;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::engine::Access;
use crate::error::{Error, Result};
use crate::mcp::auth::{Caller, Refusal, Scope};

/// Shortest time between two reads of the key set caused by unknown keys.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);
/// Longest wait for a JWKS URL to answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest key set read.
const MAX_JWKS_BYTES: u64 = 1024 * 1024;
/// Clock skew allowed on `exp` and `nbf`, in seconds.
const LEEWAY_SECS: u64 = 30;

/// Where the authorisation server's public keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    File(PathBuf),
    /// An `http(s)://` URL (https needs a build with the `tls` feature).
    Url(String),
}

impl KeySource {
    /// A URL when `s` starts with `http://` or `https://`, else a file path.
    pub fn parse(s: &str) -> KeySource {
        if s.starts_with("https://") || s.starts_with("http://") {
            KeySource::Url(s.to_owned())
        } else {
            KeySource::File(PathBuf::from(s))
        }
    }

    fn describe(&self) -> String {
        match self {
            KeySource::File(p) => p.display().to_string(),
            KeySource::Url(u) => u.clone(),
        }
    }
}

/// What the operator configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConfig {
    /// The authorisation server (`iss` of its tokens).
    pub issuer: String,
    /// The `aud` the tokens must name: this server's canonical URL.
    pub audience: String,
    pub jwks: KeySource,
}

/// One usable key of the set.
struct Key {
    kid: Option<String>,
    /// The algorithm the set pins for the key, if it does.
    alg: Option<Algorithm>,
    decoding: DecodingKey,
    kind: KeyKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    Ec,
    Ed,
}

/// Verifies access tokens of one authorisation server.
pub struct OAuth {
    cfg: OAuthConfig,
    keys: RwLock<Vec<Key>>,
    /// When the key set was last read; one refresh at a time.
    refreshed: tokio::sync::Mutex<Instant>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth").field("cfg", &self.cfg).finish()
    }
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    namespaces: Option<serde_json::Value>,
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::invalid(
        "oauth",
        reason,
        "give --oauth-jwks as the authorisation server's JWKS (a file, or its jwks_uri)",
    )
}

impl OAuth {
    /// Reads the key set; an error when it cannot be read or holds no usable key.
    pub fn load(cfg: OAuthConfig) -> Result<OAuth> {
        for (field, v) in [
            ("--oauth-issuer", &cfg.issuer),
            ("--oauth-audience", &cfg.audience),
        ] {
            if v.trim().is_empty() {
                return Err(Error::invalid(field, "is empty", "give a URL"));
            }
        }
        let keys = read_keys(&cfg.jwks)?;
        Ok(OAuth {
            cfg,
            keys: RwLock::new(keys),
            refreshed: tokio::sync::Mutex::new(Instant::now()),
        })
    }

    /// The issuer tokens must come from.
    pub fn issuer(&self) -> &str {
        &self.cfg.issuer
    }

    /// The audience tokens must name (this server's canonical URL).
    pub fn audience(&self) -> &str {
        &self.cfg.audience
    }

    /// The caller a JWT access token names, or why it is refused.
    pub async fn verify(&self, token: &str) -> std::result::Result<Caller, Refusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| Refusal::Invalid)?;
        let kind = kind_of(header.alg).ok_or(Refusal::Invalid)?;
        let kid = header.kid.as_deref();
        if let Some(caller) = self.try_keys(token, header.alg, kind, kid)? {
            return Ok(caller);
        }
        // No key of the set fits: the authorisation server may have rotated its keys.
        if self.refresh().await
            && let Some(caller) = self.try_keys(token, header.alg, kind, kid)?
        {
            return Ok(caller);
        }
        Err(Refusal::Invalid)
    }

    /// The caller when a key of the set fits the token (`None` when none fits).
    fn try_keys(
        &self,
        token: &str,
        alg: Algorithm,
        kind: KeyKind,
        kid: Option<&str>,
    ) -> std::result::Result<Option<Caller>, Refusal> {
        let keys = self.keys.read().map_err(|_| Refusal::Invalid)?;
        let fitting = keys.iter().filter(|k| {
            k.kind == kind
                && k.alg.is_none_or(|a| a == alg)
                && match (kid, &k.kid) {
                    (Some(want), Some(have)) => want == have,
                    (Some(_), None) => false,
                    (None, _) => true,
                }
        });
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&self.cfg.issuer]);
        validation.set_audience(&[&self.cfg.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        let mut fitted = false;
        for key in fitting {
            fitted = true;
            match jsonwebtoken::decode::<Claims>(token, &key.decoding, &validation) {
                Ok(data) => return caller_of(data.claims).map(Some),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind;
                    match e.kind() {
                        ErrorKind::InvalidSignature => continue,
                        ErrorKind::ExpiredSignature => return Err(Refusal::Expired),
                        _ => return Err(Refusal::Invalid),
                    }
                }
            }
        }
        // A kid the set names with a signature that does not verify is a bad token, not a
        // rotation; without a kid, no key verifying it may mean one.
        if fitted && kid.is_some() {
            return Err(Refusal::Invalid);
        }
        Ok(None)
    }

    /// Reads the key set again unless that was done within [`REFRESH_EVERY`]; true when it
    /// was read.
    async fn refresh(&self) -> bool {
        let mut last = self.refreshed.lock().await;
        if last.elapsed() < REFRESH_EVERY {
            return false;
        }
        *last = Instant::now();
        let source = self.cfg.jwks.clone();
        match tokio::task::spawn_blocking(move || read_keys(&source)).await {
            Ok(Ok(keys)) => {
                tracing::info!(keys = keys.len(), jwks = %self.cfg.jwks.describe(), "read the key set again");
                if let Ok(mut held) = self.keys.write() {
                    *held = keys;
                }
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not read the key set again; keeping the keys held");
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the key set failed");
                false
            }
        }
    }

    /// The protected-resource metadata (RFC 9728) of `resource`, this server's MCP URL.
    pub fn metadata(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": self.cfg.audience,
            "authorization_servers": [self.cfg.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": ["read", "write", "admin"],
            "resource_name": "mnemograph",
        })
    }
}

/// The scope and namespaces of verified claims.
fn caller_of(claims: Claims) -> std::result::Result<Caller, Refusal> {
    let subject = claims.sub;
    if subject.is_empty() || subject.len() > 200 || subject.chars().any(char::is_control) {
        return Err(Refusal::Invalid);
    }
    let scope = claims
        .scope
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|s| match s.strip_prefix("mnemograph:").unwrap_or(s) {
            "read" => Some(Scope::Read),
            "write" => Some(Scope::Write),
            "admin" => Some(Scope::Admin),
            _ => None,
        })
        .max()
        .ok_or(Refusal::NoScope)?;
    let access = match claims.namespaces {
        None | Some(serde_json::Value::Null) => Access::All,
        Some(serde_json::Value::String(s)) if s == "*" => Access::All,
        Some(serde_json::Value::Array(items)) => {
            let names: Option<Vec<String>> = items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect();
            Access::only(names.ok_or(Refusal::Invalid)?)
        }
        Some(_) => return Err(Refusal::Invalid),
    };
    Ok(Caller {
        subject,
        scope,
        access,
    })
}

/// The kind of key an asymmetric algorithm needs; `None` for shared-secret algorithms.
fn kind_of(alg: Algorithm) -> Option<KeyKind> {
    use Algorithm::*;
    match alg {
        RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => Some(KeyKind::Rsa),
        ES256 | ES384 => Some(KeyKind::Ec),
        EdDSA => Some(KeyKind::Ed),
        HS256 | HS384 | HS512 => None,
    }
}

/// The usable keys of a key set's text: signing keys of the asymmetric kinds.
fn parse_keys(text: &str, from: &str) -> Result<Vec<Key>> {
    let set: JwkSet = serde_json::from_str(text).map_err(|e| {
        invalid(format!(
            "{from} is not a JWKS (a JSON object with `keys`): {e}"
        ))
    })?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let kind = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => KeyKind::Rsa,
            AlgorithmParameters::EllipticCurve(_) => KeyKind::Ec,
            AlgorithmParameters::OctetKeyPair(_) => KeyKind::Ed,
            // A shared secret has no place in a public key set.
            AlgorithmParameters::OctetKey(_) => continue,
        };
        if jwk
            .common
            .public_key_use
            .as_ref()
            .is_some_and(|u| *u != jsonwebtoken::jwk::PublicKeyUse::Signature)
        {
            continue;
        }
        let alg = match jwk.common.key_algorithm {
            None => None,
            Some(a) => match a.to_string().parse::<Algorithm>() {
                Ok(alg) if kind_of(alg) == Some(kind) => Some(alg),
                _ => continue,
            },
        };
        let Ok(decoding) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            decoding,
            kind,
        });
    }
    if keys.is_empty() {
        return Err(invalid(format!(
            "{from} holds no signing key this server can use (RSA, EC P-256/P-384 or Ed25519)"
        )));
    }
    Ok(keys)
}

fn read_keys(source: &KeySource) -> Result<Vec<Key>> {
    let from = source.describe();
    let text = match source {
        KeySource::File(path) => std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read {from}: {e}")))?,
        KeySource::Url(url) => fetch(url)?,
    };
    parse_keys(&text, &from)
}

fn fetch(url: &str) -> Result<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(FETCH_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .get(url)
        .header("Accept", "application/json")
        .call()
        .map_err(|e| {
            let tls = if url.starts_with("https://") && !cfg!(feature = "tls") {
                " (this build has no https: rebuild with `--features tls`, or give the key set as a file)"
            } else {
                ""
            };
            invalid(format!("cannot fetch {url}: {e}{tls}"))
        })?;
    if !resp.status().is_success() {
        return Err(invalid(format!("{url} answered HTTP {}", resp.status())));
    }
    resp.body_mut()
        .with_config()
        .limit(MAX_JWKS_BYTES)
        .read_to_string()
        .map_err(|e| invalid(format!("cannot read the answer of {url}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sets_keep_signing_keys_and_drop_shared_secrets() {
        let text = r#"{"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", "kid": "ed", "use": "sig"},
            {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", "kid": "enc", "use": "enc"}
        ]}"#;
        let keys = parse_keys(text, "test").unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("ed"));
        assert_eq!(keys[0].kind, KeyKind::Ed);
        assert!(parse_keys(r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#, "t").is_err());
        assert!(parse_keys("[]", "t").is_err());
    }

    #[test]
    fn claims_give_the_subject_its_scope_and_namespaces() {
        let claims = |v: serde_json::Value| serde_json::from_value::<Claims>(v).unwrap();
        let c = caller_of(claims(serde_json::json!({
            "sub": "alice", "scope": "openid mnemograph:read write",
            "namespaces": ["work", "home"]
        })))
        .unwrap();
        assert_eq!(c.subject, "alice");
        assert_eq!(c.scope, Scope::Write);
        assert_eq!(
            c.access,
            Access::only(["home".to_owned(), "work".to_owned()])
        );
        let c = caller_of(claims(serde_json::json!({"sub": "bob", "scope": "admin"}))).unwrap();
        assert_eq!((c.scope, c.access), (Scope::Admin, Access::All));
        assert_eq!(
            caller_of(claims(serde_json::json!({"sub": "eve", "scope": "openid"}))),
            Err(Refusal::NoScope)
        );
        assert_eq!(
            caller_of(claims(
                serde_json::json!({"sub": "eve", "scope": "read", "namespaces": 3})
            )),
            Err(Refusal::Invalid)
        );
    }
}
