//! The OpenAI-compatible embeddings provider: `POST {base_url}/embeddings` over HTTP (Ollama,
//! llama.cpp server, vLLM, LocalAI, OpenAI itself with the `tls` feature).

use std::fmt;
use std::io::{ErrorKind, Read};
use std::time::Duration;

use serde::Deserialize;

use crate::embed::{Embedder, check_output, normalize};
use crate::error::{Error, Result};

/// Most texts sent in one request; longer lists are split into several requests.
pub const MAX_BATCH: usize = 256;

/// Largest reply body read (256 texts × 8192 dimensions of JSON floats fit with room to spare).
const MAX_REPLY_BYTES: u64 = 128 * 1024 * 1024;

/// How much of an error reply's body is quoted in the error.
const ERROR_BODY_BYTES: usize = 200;

/// Text embedded once at construction to learn the dimension when it is not configured.
const PROBE_TEXT: &str = "dimension probe";

const PROVIDER: &str = "http";

/// Where and how to reach an OpenAI-compatible embeddings endpoint.
#[derive(Clone)]
pub struct HttpConfig {
    /// Base of the API, e.g. `http://localhost:11434/v1`; `/embeddings` is appended unless the
    /// URL already ends with it. A trailing slash is fine.
    pub base_url: String,
    /// Model name sent with every request, e.g. `nomic-embed-text`.
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set. Never logged or shown in errors.
    pub api_key: Option<String>,
    /// Vector length; when `None` it is asked of the server once, at construction.
    pub dim: Option<usize>,
    /// Limit for connecting and for each whole request (connect, send, wait, read).
    /// [`HttpConfig::DEFAULT_TIMEOUT`] (30 s) leaves room for a local server loading its model.
    pub timeout: Duration,
}

impl HttpConfig {
    /// A sensible request timeout: 30 seconds.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("dim", &self.dim)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Embeddings from an OpenAI-compatible HTTP endpoint; vectors are normalised on arrival.
pub struct HttpEmbedder {
    agent: ureq::Agent,
    url: String,
    model: String,
    api_key: Option<String>,
    id: String,
    dim: usize,
    timeout: Duration,
}

impl fmt::Debug for HttpEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpEmbedder")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("dim", &self.dim)
            .field("timeout", &self.timeout)
            .finish()
    }
}

fn fail(reason: impl Into<String>) -> Error {
    Error::Embed {
        provider: PROVIDER.to_owned(),
        reason: reason.into(),
    }
}

/// The full endpoint URL for `base_url`, checked: http(s) scheme, a host, and an https URL only
/// in a build that can speak TLS.
fn endpoint(base_url: &str) -> Result<String> {
    checked_url(base_url, "/embeddings").map_err(fail)
}

/// `base_url` with `path` appended (unless it ends with it already), checked as [`endpoint`]
/// says; the error is the reason alone.
pub(super) fn checked_url(base_url: &str, path: &str) -> std::result::Result<String, String> {
    let base = base_url.trim().trim_end_matches('/');
    if base.is_empty() {
        return Err("the base URL is empty; give one such as http://localhost:11434/v1".into());
    }
    let uri: ureq::http::Uri = base.parse().map_err(|e| {
        format!("`{base}` is not a valid URL ({e}); give one such as http://localhost:11434/v1")
    })?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            if !cfg!(feature = "tls") {
                return Err(format!(
                    "cannot reach `{base}`: https endpoints need `cargo build --release --features tls`; \
                     or use an http:// endpoint such as a local Ollama"
                ));
            }
        }
        _ => {
            return Err(format!(
                "`{base}` must start with http:// or https://, e.g. http://localhost:11434/v1"
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!(
            "`{base}` has no host; give one such as http://localhost:11434/v1"
        ));
    }
    if base.ends_with(path) {
        Ok(base.to_owned())
    } else {
        Ok(format!("{base}{path}"))
    }
}

/// A JSON POST to `url`, with `api_key` as a bearer token when there is one.
pub(super) fn post_json(
    agent: &ureq::Agent,
    url: &str,
    api_key: Option<&str>,
) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
    let req = agent
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json");
    match api_key {
        Some(key) => req.header("Authorization", format!("Bearer {key}")),
        None => req,
    }
}

/// True for hosts that are this machine; those are reached directly, never through a proxy
/// configured in the environment.
pub(super) fn is_loopback(url: &str) -> bool {
    let Ok(uri) = url.parse::<ureq::http::Uri>() else {
        return false;
    };
    let host = uri.host().unwrap_or("");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[derive(Deserialize)]
struct Reply {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

impl HttpEmbedder {
    /// Checks the configuration and, when `dim` is not given, asks the server for one embedding
    /// to learn the dimension — so an unreachable endpoint fails here, with the URL in the error.
    pub fn new(cfg: HttpConfig) -> Result<HttpEmbedder> {
        let url = endpoint(&cfg.base_url)?;
        let model = cfg.model.trim().to_owned();
        if model.is_empty() {
            return Err(fail(
                "the model name is empty; give the name the server knows, e.g. nomic-embed-text",
            ));
        }
        if cfg.dim == Some(0) {
            return Err(fail(
                "the dimension must be at least 1; leave it unset to ask the server",
            ));
        }
        let mut builder = ureq::Agent::config_builder()
            .timeout_connect(Some(cfg.timeout))
            .timeout_global(Some(cfg.timeout))
            .http_status_as_error(false);
        if is_loopback(&url) {
            builder = builder.proxy(None);
        }
        let agent: ureq::Agent = builder.build().into();
        let mut embedder = HttpEmbedder {
            agent,
            url,
            id: format!("http:{model}"),
            model,
            api_key: cfg.api_key.filter(|k| !k.is_empty()),
            dim: cfg.dim.unwrap_or(0),
            timeout: cfg.timeout,
        };
        if cfg.dim.is_none() {
            embedder.dim = embedder.discover_dim()?;
        }
        Ok(embedder)
    }

    /// One probe request; the length of the vector that comes back.
    fn discover_dim(&self) -> Result<usize> {
        let prefix = |e: Error| match e {
            Error::Embed { provider, reason } => Error::Embed {
                provider,
                reason: format!("discovering the embedding dimension: {reason}"),
            },
            other => other,
        };
        let out = self.request(&[PROBE_TEXT]).map_err(prefix)?;
        let dim = out.first().map_or(0, Vec::len);
        if dim == 0 {
            return Err(fail(format!(
                "discovering the embedding dimension: {} answered an empty vector for model `{}`",
                self.url, self.model
            )));
        }
        check_output(PROVIDER, dim, 1, &out).map_err(prefix)?;
        Ok(dim)
    }

    /// One POST for at most [`MAX_BATCH`] texts; vectors in input order, not yet checked.
    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let body = serde_json::to_vec(&serde_json::json!({
            "model": self.model,
            "input": texts,
        }))?;
        let req = post_json(&self.agent, &self.url, self.api_key.as_deref());
        let mut resp = req.send(&body[..]).map_err(|e| self.transport_error(e))?;
        let status = resp.status();
        let mut bytes = Vec::new();
        let read = resp
            .body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .reader()
            .read_to_end(&mut bytes);
        if status.as_u16() >= 400 {
            let shown = snippet(&bytes);
            return Err(fail(format!(
                "{} answered HTTP {status}{}{shown}",
                self.url,
                if shown.is_empty() { "" } else { ": " },
            )));
        }
        if let Err(e) = read {
            return Err(self.read_error(e));
        }
        if !status.is_success() {
            return Err(fail(format!(
                "{} answered HTTP {status}, expected 200 with embeddings",
                self.url
            )));
        }
        let reply: Reply = serde_json::from_slice(&bytes).map_err(|e| {
            fail(format!(
                "{} did not answer the expected JSON {{\"data\":[{{\"embedding\":[…]}}]}} ({e}); \
                 is it an OpenAI-compatible /embeddings endpoint? reply starts: {}",
                self.url,
                snippet(&bytes)
            ))
        })?;
        self.in_order(reply.data)
    }

    /// The vectors of a reply in input order: by `index` when every item has one, else as sent.
    fn in_order(&self, items: Vec<Item>) -> Result<Vec<Vec<f32>>> {
        if items.iter().any(|it| it.index.is_none()) {
            return Ok(items.into_iter().map(|it| it.embedding).collect());
        }
        let n = items.len();
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; n];
        for it in items {
            let i = it.index.unwrap_or(usize::MAX);
            match slots.get_mut(i) {
                Some(slot @ None) => *slot = Some(it.embedding),
                Some(Some(_)) => {
                    return Err(fail(format!(
                        "{} answered index {i} twice in one reply",
                        self.url
                    )));
                }
                None => {
                    return Err(fail(format!(
                        "{} answered index {i} in a reply of {n} vectors",
                        self.url
                    )));
                }
            }
        }
        Ok(slots.into_iter().flatten().collect())
    }

    fn transport_error(&self, e: ureq::Error) -> Error {
        let url = &self.url;
        match e {
            ureq::Error::Io(io) if io.kind() == ErrorKind::ConnectionRefused => fail(format!(
                "nothing answers at {url}; is the embedding server running?"
            )),
            ureq::Error::Io(io) => self.read_error(io),
            ureq::Error::Timeout(_) => fail(format!(
                "no answer from {url} within {:?}; is the server up and the model loaded? \
                 a longer timeout may help",
                self.timeout
            )),
            ureq::Error::HostNotFound => fail(format!(
                "cannot resolve the host of {url}; check the base URL"
            )),
            other => fail(format!("request to {url} failed: {other}")),
        }
    }

    fn read_error(&self, e: std::io::Error) -> Error {
        // ureq reports its own timeouts during a body read as io errors wrapping ureq::Error.
        let timed_out = e.kind() == ErrorKind::TimedOut
            || e.get_ref()
                .and_then(|inner| inner.downcast_ref::<ureq::Error>())
                .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
        if timed_out {
            return fail(format!(
                "no answer from {} within {:?}; is the server up and the model loaded? \
                 a longer timeout may help",
                self.url, self.timeout
            ));
        }
        fail(format!("reading the reply of {} failed: {e}", self.url))
    }
}

/// The first ~200 bytes of a body as text, cut at a character boundary, whitespace squeezed.
pub(super) fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(ERROR_BODY_BYTES + 4)]);
    let squeezed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut end = squeezed.len().min(ERROR_BODY_BYTES);
    while !squeezed.is_char_boundary(end) {
        end -= 1;
    }
    let more = squeezed.len() > end || bytes.len() > ERROR_BODY_BYTES + 4;
    format!("{}{}", &squeezed[..end], if more { "…" } else { "" })
}

impl Embedder for HttpEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let mut all = Vec::with_capacity(texts.len());
        for batch in texts.chunks(MAX_BATCH) {
            let mut out = self.request(batch)?;
            check_output(PROVIDER, self.dim, batch.len(), &out)?;
            for v in &mut out {
                normalize(v);
            }
            all.append(&mut out);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::thread::JoinHandle;
    use std::time::Instant;

    /// What the test server saw of one request.
    struct Seen {
        head: String,
        body: serde_json::Value,
    }

    impl Seen {
        fn inputs(&self) -> usize {
            self.body["input"].as_array().map_or(0, Vec::len)
        }
    }

    /// Reads one HTTP request: head up to the blank line, then `Content-Length` bytes of body.
    fn read_request(stream: &mut TcpStream) -> Seen {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "client closed before the request head ended");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap())
            })
            .expect("request without Content-Length");
        while buf.len() < head_end + len {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "client closed before the request body ended");
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = serde_json::from_slice(&buf[head_end..head_end + len]).unwrap();
        Seen { head, body }
    }

    /// A loopback server answering `n` connections, one request each; returns the base URL and
    /// a handle yielding every request seen.
    fn serve(
        n: usize,
        answer: impl Fn(&Seen) -> (u16, String) + Send + 'static,
    ) -> (String, JoinHandle<Vec<Seen>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..n {
                let (mut stream, _) = listener.accept().unwrap();
                let req = read_request(&mut stream);
                let (status, body) = answer(&req);
                let reply = format!(
                    "HTTP/1.1 {status} Canned\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(reply.as_bytes()).unwrap();
                seen.push(req);
            }
            seen
        });
        (base, handle)
    }

    /// An OpenAI-style reply carrying `vectors` with their indices, listed in reverse.
    fn reply_reversed(vectors: &[Vec<f32>]) -> String {
        let data: Vec<_> = vectors
            .iter()
            .enumerate()
            .rev()
            .map(|(i, v)| serde_json::json!({"object": "embedding", "embedding": v, "index": i}))
            .collect();
        serde_json::json!({"object": "list", "data": data, "model": "m"}).to_string()
    }

    fn config(base_url: &str, dim: Option<usize>) -> HttpConfig {
        HttpConfig {
            base_url: base_url.to_owned(),
            model: "test-model".to_owned(),
            api_key: None,
            dim,
            timeout: Duration::from_secs(5),
        }
    }

    fn reason(e: Error) -> String {
        match e {
            Error::Embed { provider, reason } => {
                assert_eq!(provider, "http");
                reason
            }
            other => panic!("expected Error::Embed, got {other:?}"),
        }
    }

    /// A port on 127.0.0.1 that nothing listens on.
    fn free_port() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    #[test]
    fn embeds_two_texts_in_index_order_with_key_and_model() {
        let (base, server) = serve(1, |_| {
            (200, reply_reversed(&[vec![3.0, 4.0], vec![0.0, 2.0]]))
        });
        let mut cfg = config(&format!("{base}/"), Some(2));
        cfg.api_key = Some("sk-secret".to_owned());
        let e = HttpEmbedder::new(cfg).unwrap();
        assert_eq!(e.model_id(), "http:test-model");
        assert_eq!(e.dim(), 2);
        assert!(!format!("{e:?}").contains("sk-secret"));
        let out = e.embed(&["first", "second"]).unwrap();
        assert_eq!(out, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        let seen = server.join().unwrap();
        assert_eq!(seen.len(), 1);
        let head = seen[0].head.to_ascii_lowercase();
        assert!(head.starts_with("post /v1/embeddings http/1.1"), "{head}");
        assert!(head.contains("authorization: bearer sk-secret"), "{head}");
        assert_eq!(seen[0].body["model"], "test-model");
        assert_eq!(
            seen[0].body["input"],
            serde_json::json!(["first", "second"])
        );
    }

    #[test]
    fn no_authorization_header_without_a_key() {
        let (base, server) = serve(1, |_| (200, reply_reversed(&[vec![1.0]])));
        let e = HttpEmbedder::new(config(&base, Some(1))).unwrap();
        e.embed(&["x"]).unwrap();
        let seen = server.join().unwrap();
        assert!(!seen[0].head.to_ascii_lowercase().contains("authorization"));
    }

    #[test]
    fn discovers_the_dimension_at_construction() {
        let (base, server) = serve(2, |req| {
            let v = vec![vec![1.0, 2.0, 2.0]; req.inputs()];
            (200, reply_reversed(&v))
        });
        let e = HttpEmbedder::new(config(&base, None)).unwrap();
        assert_eq!(e.dim(), 3);
        let out = e.embed(&["a"]).unwrap();
        let expect = [1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0];
        assert!(out[0].iter().zip(expect).all(|(a, b)| (a - b).abs() < 1e-6));
        let seen = server.join().unwrap();
        assert_eq!(seen[0].inputs(), 1);
        assert_eq!(seen[1].body["input"], serde_json::json!(["a"]));
    }

    #[test]
    fn splits_600_texts_into_three_requests() {
        let (base, server) = serve(3, |req| {
            let n = req.inputs();
            let v: Vec<Vec<f32>> = (0..n).map(|i| vec![1.0, i as f32]).collect();
            (200, reply_reversed(&v))
        });
        let e = HttpEmbedder::new(config(&format!("{base}/embeddings"), Some(2))).unwrap();
        let texts: Vec<String> = (0..600).map(|i| format!("text {i}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let out = e.embed(&refs).unwrap();
        assert_eq!(out.len(), 600);
        let seen = server.join().unwrap();
        let sizes: Vec<usize> = seen.iter().map(Seen::inputs).collect();
        assert_eq!(sizes, vec![256, 256, 88]);
        assert!(seen[0].head.starts_with("POST /v1/embeddings "));
        assert_eq!(seen[2].body["input"][0], "text 512");
        // Text 257 is the second of the second batch: its vector was [1, 1] before normalising.
        let h = std::f32::consts::FRAC_1_SQRT_2;
        assert!((out[257][0] - h).abs() < 1e-6 && (out[257][1] - h).abs() < 1e-6);
    }

    #[test]
    fn wrong_dimension_is_an_embed_error() {
        let (base, server) = serve(1, |_| (200, reply_reversed(&[vec![1.0, 0.0]])));
        let e = HttpEmbedder::new(config(&base, Some(3))).unwrap();
        let msg = reason(e.embed(&["x"]).unwrap_err());
        assert!(
            msg.contains("2 dimensions") && msg.contains("expected 3"),
            "{msg}"
        );
        server.join().unwrap();
    }

    #[test]
    fn http_500_reports_status_and_body() {
        let (base, server) = serve(1, |_| (500, r#"{"error":"model exploded"}"#.to_owned()));
        let e = HttpEmbedder::new(config(&base, Some(3))).unwrap();
        let msg = reason(e.embed(&["x"]).unwrap_err());
        assert!(
            msg.contains("500") && msg.contains("model exploded"),
            "{msg}"
        );
        server.join().unwrap();
    }

    #[test]
    fn garbage_body_is_an_error() {
        let (base, server) = serve(1, |_| (200, "<html>hello</html>".to_owned()));
        let e = HttpEmbedder::new(config(&base, Some(3))).unwrap();
        let msg = reason(e.embed(&["x"]).unwrap_err());
        assert!(
            msg.contains("expected JSON") && msg.contains("<html>"),
            "{msg}"
        );
        server.join().unwrap();
    }

    #[test]
    fn silent_server_fails_within_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            read_request(&mut stream);
            // Hold the connection open, answering nothing, until the test is over.
            let _ = wait.recv_timeout(Duration::from_secs(10));
        });
        let mut cfg = config(&base, Some(3));
        cfg.timeout = Duration::from_millis(300);
        let e = HttpEmbedder::new(cfg).unwrap();
        let start = Instant::now();
        let msg = reason(e.embed(&["x"]).unwrap_err());
        let took = start.elapsed();
        assert!(took < Duration::from_secs(3), "took {took:?}");
        assert!(msg.contains("no answer") && msg.contains("300ms"), "{msg}");
        drop(done);
        server.join().unwrap();
    }

    #[test]
    fn refused_connection_names_the_url() {
        let base = format!("http://127.0.0.1:{}/v1", free_port());
        let msg = reason(HttpEmbedder::new(config(&base, None)).unwrap_err());
        assert!(msg.contains("nothing answers"), "{msg}");
        assert!(msg.contains(&format!("{base}/embeddings")), "{msg}");
        assert!(msg.contains("dimension"), "{msg}");

        let e = HttpEmbedder::new(config(&base, Some(3))).unwrap();
        let msg = reason(e.embed(&["x"]).unwrap_err());
        assert!(msg.contains("is the embedding server running"), "{msg}");
    }

    #[test]
    fn empty_input_sends_nothing() {
        let base = format!("http://127.0.0.1:{}/v1", free_port());
        let e = HttpEmbedder::new(config(&base, Some(3))).unwrap();
        assert!(e.embed(&[]).unwrap().is_empty());
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn https_without_tls_feature_says_how_to_fix() {
        let msg =
            reason(HttpEmbedder::new(config("https://api.example.com/v1", Some(3))).unwrap_err());
        assert!(
            msg.contains("--features tls") && msg.contains("http://"),
            "{msg}"
        );
    }

    /// With `tls`, an https endpoint is accepted and spoken to in TLS: the first bytes on the
    /// wire are a TLS handshake record, and a peer that is no TLS server is an error, not a panic.
    #[cfg(feature = "tls")]
    #[test]
    fn https_endpoints_speak_tls() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("https://{}/v1", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut record = [0u8; 3];
            stream.read_exact(&mut record).unwrap();
            record
        });
        let e = HttpEmbedder::new(config(&base, Some(3))).unwrap();
        let err = e.embed(&["x"]).unwrap_err();
        assert!(matches!(err, Error::Embed { .. }), "{err:?}");
        // Content type 22 (handshake), protocol version 3.x.
        let record = server.join().unwrap();
        assert_eq!(record[..2], [0x16, 0x03], "{record:?}");
    }

    #[test]
    fn bad_urls_and_settings_fail_at_construction() {
        for url in ["", "  ", "localhost:11434/v1", "ftp://host/v1", "http://"] {
            let err = HttpEmbedder::new(config(url, Some(3))).unwrap_err();
            assert!(matches!(err, Error::Embed { .. }), "{url}: {err:?}");
        }
        let mut cfg = config("http://127.0.0.1:1/v1", Some(3));
        cfg.model = String::new();
        assert!(HttpEmbedder::new(cfg).is_err());
        assert!(HttpEmbedder::new(config("http://127.0.0.1:1/v1", Some(0))).is_err());
    }

    #[test]
    fn endpoint_tolerates_slashes_and_a_full_path() {
        let want = "http://localhost:11434/v1/embeddings";
        for base in [
            "http://localhost:11434/v1",
            "http://localhost:11434/v1/",
            "http://localhost:11434/v1/embeddings",
            "http://localhost:11434/v1/embeddings/",
        ] {
            assert_eq!(endpoint(base).unwrap(), want, "{base}");
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let mut cfg = config("http://127.0.0.1:1/v1", Some(3));
        cfg.api_key = Some("sk-secret".to_owned());
        assert!(!format!("{cfg:?}").contains("sk-secret"));
    }
}
