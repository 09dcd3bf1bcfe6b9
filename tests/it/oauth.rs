//! OAuth resource-server mode of `serve --http`: JWT access tokens of an authorisation server,
//! checked against its key set (a file, or a URL), with issuer, audience and expiry; a rotated
//! key set; and the protected-resource metadata that names the authorisation server.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::signature::KeyPair as _;
use serde_json::{Value, json};

use crate::http::{MCP_HEADERS, tools_list};
use crate::support::{Era, HttpChild, Server, TestDb, http_request};

const ISSUER: &str = "https://auth.example.test";
const AUDIENCE: &str = "https://memory.example.test/mcp";

/// An Ed25519 signing key of the authorisation server.
struct SigningKey {
    kid: String,
    pkcs8: Vec<u8>,
    /// The public key, base64url (the JWK's `x`).
    x: String,
}

impl SigningKey {
    fn new(kid: &str) -> SigningKey {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng)
            .expect("a key pair")
            .as_ref()
            .to_vec();
        let pair = ring::signature::Ed25519KeyPair::from_pkcs8(&pkcs8).expect("read it back");
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
        SigningKey {
            kid: kid.to_owned(),
            pkcs8,
            x,
        }
    }

    fn jwk(&self) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "x": self.x, "kid": self.kid, "use": "sig", "alg": "EdDSA"})
    }

    /// A token with `claims` signed by this key.
    fn sign(&self, claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(
            &header,
            claims,
            &jsonwebtoken::EncodingKey::from_ed_der(&self.pkcs8),
        )
        .expect("sign a token")
    }
}

fn key_set(keys: &[&SigningKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs()
}

/// Claims of a token for `sub` that is good for ten minutes.
fn claims(sub: &str, scope: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": scope, "exp": now() + 600, "iat": now()})
}

/// The arguments of `serve` for OAuth with the key set at `jwks`.
fn oauth_args(jwks: &str) -> [&str; 6] {
    [
        "--oauth-issuer",
        ISSUER,
        "--oauth-audience",
        AUDIENCE,
        "--oauth-jwks",
        jwks,
    ]
}

/// The status and answer of `tools/list` sent with `token`.
async fn list_with(http: &HttpChild, token: &str) -> (u16, String) {
    let auth = format!("Bearer {token}");
    let mut headers = MCP_HEADERS.to_vec();
    headers.push(("Authorization", auth.as_str()));
    http_request(http.authority(), "POST", "/mcp", &headers, &tools_list()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_access_tokens_are_checked_against_the_key_set_and_its_rotation() {
    let db = TestDb::new();
    let jwks = db.path.with_file_name("jwks.json");
    let first = SigningKey::new("k1");
    std::fs::write(&jwks, key_set(&[&first])).unwrap();
    let http = HttpChild::beside(&db.path, "oauth.log", &oauth_args(jwks.to_str().unwrap())).await;
    let log = http.log.clone();
    let at = http.authority().to_owned();

    // The protected-resource metadata names this resource and its authorisation server.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let (status, answer) = http_request(&at, "GET", path, &[], b"").await;
        assert_eq!(status, 200, "{path}: {answer}");
        let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["resource"], AUDIENCE);
        assert_eq!(body["authorization_servers"], json!([ISSUER]));
    }
    let (status, answer) = http_request(&at, "POST", "/mcp", &MCP_HEADERS, &tools_list()).await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer.contains(
            r#"resource_metadata="https://memory.example.test/.well-known/oauth-protected-resource/mcp""#
        ),
        "{answer}"
    );

    // A good token works through the MCP client; its subject owns what it does.
    let good = first.sign(&claims("alice@example.test", "openid read write"));
    let s = Server::attach(&http.url, Era::Discover, Some(&good), &log).await;
    let ids = s
        .remember(json!([{"content": "The staging database moved to the new cluster"}]))
        .await;
    let hits = s.recall_ids(json!({"query": "staging database"})).await;
    assert!(hits.contains(&ids[0]), "{hits:?}");
    s.ok("update", json!({"id": ids[0], "importance": 0.8}))
        .await;
    let got = s.ok("get", json!({"ids": [ids[0]], "history": true})).await;
    assert_eq!(
        got["memories"][0]["history"][0]["actor"],
        "tool:update by alice@example.test"
    );
    s.stop().await;

    // Expired, for another audience or issuer, unsigned, signed with a shared secret, or
    // granting no scope: refused.
    let mut expired = claims("alice", "read");
    expired["exp"] = json!(now() - 120);
    let mut elsewhere = claims("alice", "read");
    elsewhere["aud"] = json!("https://other.example.test/mcp");
    let mut foreign = claims("alice", "read");
    foreign["iss"] = json!("https://evil.example.test");
    let hmac = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims("alice", "read"),
        &jsonwebtoken::EncodingKey::from_secret(first.x.as_bytes()),
    )
    .unwrap();
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let unsigned = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"})),
        b64(claims("alice", "read"))
    );
    for (what, token) in [
        ("expired", first.sign(&expired)),
        ("another audience", first.sign(&elsewhere)),
        ("another issuer", first.sign(&foreign)),
        ("a shared secret", hmac),
        ("unsigned", unsigned),
        ("not a JWT", "mgt_whatever".to_owned()),
    ] {
        let (status, answer) = list_with(&http, &token).await;
        assert_eq!(status, 401, "{what}: {answer}");
        assert!(
            answer.contains(r#"error="invalid_token""#),
            "{what}: {answer}"
        );
    }
    let (status, answer) = list_with(&http, &first.sign(&claims("alice", "openid"))).await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("insufficient_scope"), "{answer}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains(&good), "no token in the log");

    // The authorisation server rotates its key: the new key's tokens are admitted once the set
    // is read again; the retired key's are not.
    let second = SigningKey::new("k2");
    std::fs::write(&jwks, key_set(&[&second])).unwrap();
    tokio::time::sleep(mnemograph::mcp::oauth::REFRESH_EVERY).await;
    let (status, answer) = list_with(&http, &second.sign(&claims("bob", "read"))).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = list_with(&http, &first.sign(&claims("alice", "read"))).await;
    assert_eq!(status, 401, "a retired key: {answer}");
    http.stop().await;

    // The key set from a URL.
    let served = key_set(&[&second]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf).await;
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{served}",
                served.len()
            );
            let _ = conn.write_all(reply.as_bytes()).await;
        }
    });
    let http = HttpChild::spawn(&db.path, &oauth_args(&jwks_url), &log).await;
    let (status, answer) = list_with(&http, &second.sign(&claims("bob", "read"))).await;
    assert_eq!(status, 200, "{answer}");
    http.stop().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_oauth_server_points_at_its_metadata_and_it_needs_no_token() {
    let db = TestDb::new();
    let tokens = db.path.with_file_name("tokens");
    crate::http::add_token(&tokens, "alice", "read");
    let tokens = tokens.to_str().unwrap().to_owned();
    let log = db.path.with_file_name("challenge.log");
    let metadata = [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ];

    // Tokens only: the challenge and its text send no client looking for an authorisation
    // server, and there is no metadata to read.
    let http = HttpChild::spawn(&db.path, &["--tokens", &tokens], &log).await;
    let at = http.authority().to_owned();
    let (status, answer) = http_request(&at, "POST", "/mcp", &MCP_HEADERS, &tools_list()).await;
    assert_eq!(status, 401, "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("www-authenticate: bearer"), "{answer}");
    assert!(!answer.contains("resource_metadata"), "{answer}");
    assert!(
        !lower.contains("metadata") && !lower.contains("authorisation server"),
        "{answer}"
    );
    assert!(answer.contains("mnemograph token add"), "{answer}");
    for path in metadata {
        let (status, answer) = http_request(&at, "GET", path, &[], b"").await;
        assert_eq!(status, 404, "{path}: {answer}");
        assert!(
            !answer.to_ascii_lowercase().contains("www-authenticate"),
            "{answer}"
        );
    }
    http.stop().await;

    // OAuth beside the tokens: the challenge names the metadata, which is served to anyone
    // (RFC 9728), with or without a token, good or bad, on an admitted host only.
    let jwks = db.path.with_file_name("jwks.json");
    std::fs::write(&jwks, key_set(&[&SigningKey::new("k1")])).unwrap();
    let mut args = oauth_args(jwks.to_str().unwrap()).to_vec();
    args.extend(["--tokens", tokens.as_str()]);
    let http = HttpChild::spawn(&db.path, &args, &log).await;
    let at = http.authority().to_owned();
    let (status, answer) = http_request(&at, "POST", "/mcp", &MCP_HEADERS, &tools_list()).await;
    assert_eq!(status, 401, "{answer}");
    assert!(answer.contains(r#"resource_metadata=""#), "{answer}");
    assert!(
        answer.contains("protected-resource metadata") && answer.contains("mnemograph token add"),
        "{answer}"
    );
    for path in metadata {
        for headers in [
            vec![],
            vec![("Authorization", "Bearer mgt_not-a-token")],
            vec![("Authorization", "Bearer a.b.c")],
        ] {
            let (status, answer) = http_request(&at, "GET", path, &headers, b"").await;
            assert_eq!(status, 200, "{path} {headers:?}: {answer}");
            let body: Value =
                serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            assert_eq!(body["resource"], AUDIENCE);
        }
        let (status, answer) =
            http_request(&at, "GET", path, &[("Host", "attacker.example")], b"").await;
        assert_eq!(status, 403, "{path}: {answer}");
    }
    http.stop().await;
}
