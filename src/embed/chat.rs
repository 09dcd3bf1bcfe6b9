//! Abstractive summaries through an OpenAI-compatible chat endpoint: `POST {base_url}/chat/
//! completions` (Ollama, llama.cpp server, vLLM, OpenAI with the `tls` feature). Optional: the
//! summarise step writes extractive summaries without it, and falls back to them when it fails.

use std::io::Read;
use std::time::Duration;

use serde::Deserialize;

use crate::config::SummarizerSpec;
use crate::embed::http::{checked_url, is_loopback, post_json, snippet};
use crate::error::{Error, Result};

/// Most characters of source text sent per summary (the earliest, when a group says more).
const MAX_INPUT_CHARS: usize = 12_000;
/// Largest reply body read.
const MAX_REPLY_BYTES: u64 = 4 * 1024 * 1024;

/// Writes a summary of some texts.
pub trait Summarizer: Send + Sync {
    /// Where it runs (for messages): the endpoint URL.
    fn describe(&self) -> &str;
    /// A summary of `texts` (in the order said) of at most `max_chars` characters; the reason
    /// when it cannot.
    fn summarize(
        &self,
        about: &str,
        texts: &[&str],
        max_chars: usize,
    ) -> std::result::Result<String, String>;
}

/// An OpenAI-compatible chat endpoint.
pub struct HttpSummarizer {
    agent: ureq::Agent,
    url: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for HttpSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSummarizer")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[derive(Deserialize)]
struct Reply {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    content: Option<String>,
}

impl HttpSummarizer {
    /// Checks the configuration (no request is made until a summary is asked for).
    pub fn new(spec: &SummarizerSpec) -> Result<HttpSummarizer> {
        let bad = |reason: String| {
            Error::invalid(
                "summarizer",
                reason,
                "fix --summarizer-url / --summarizer-model (or MNEMOGRAPH_SUMMARIZER_URL / _MODEL)",
            )
        };
        let url = checked_url(&spec.base_url, "/chat/completions").map_err(bad)?;
        let model = spec.model.trim().to_owned();
        if model.is_empty() {
            return Err(bad(
                "has no model name; give the name the server knows, e.g. llama3.2".into(),
            ));
        }
        let timeout = Duration::from_millis(spec.timeout_ms.max(1));
        let mut builder = ureq::Agent::config_builder()
            .timeout_connect(Some(timeout))
            .timeout_global(Some(timeout))
            .http_status_as_error(false);
        if is_loopback(&url) {
            builder = builder.proxy(None);
        }
        Ok(HttpSummarizer {
            agent: builder.build().into(),
            url,
            model,
            api_key: spec.api_key.clone().filter(|k| !k.is_empty()),
            timeout,
        })
    }
}

/// `text` cut to at most `max` characters, at the end of a sentence when one ends in reach.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    match cut.rfind(['.', '!', '?']) {
        Some(end) if end > max / 2 => cut[..=end].to_owned(),
        _ => cut,
    }
}

/// What a model is asked for a summary of `texts` (in the order said, the earliest when they
/// say more than it reads) under `about`, in at most `max_chars` characters: its system
/// prompt and the user's message. The same whoever's model writes it.
pub(crate) fn prompt(about: &str, texts: &[&str], max_chars: usize) -> (String, String) {
    let mut input = String::new();
    for t in texts {
        if input.len() + t.len() > MAX_INPUT_CHARS {
            break;
        }
        input.push_str(t);
        input.push('\n');
    }
    let system = format!(
        "You summarise conversations and notes for a memory store. Write plain prose of at \
         most {max_chars} characters. Keep every name, date and number that matters; state \
         facts, not greetings; add nothing that is not in the text."
    );
    (system, format!("{about}\n\n{input}"))
}

/// A model's summary as it is stored: one line, at most `max_chars` characters.
pub(crate) fn tidy(text: &str, max_chars: usize) -> String {
    clip(
        &text.split_whitespace().collect::<Vec<_>>().join(" "),
        max_chars,
    )
}

impl Summarizer for HttpSummarizer {
    fn describe(&self) -> &str {
        &self.url
    }

    fn summarize(
        &self,
        about: &str,
        texts: &[&str],
        max_chars: usize,
    ) -> std::result::Result<String, String> {
        let (system, user) = prompt(about, texts, max_chars);
        let body = serde_json::json!({
            "model": self.model,
            "temperature": 0,
            "stream": false,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        });
        let req = post_json(&self.agent, &self.url, self.api_key.as_deref());
        let url = &self.url;
        let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let mut resp = req.send(&body[..]).map_err(|e| match e {
            ureq::Error::Timeout(_) => format!("no answer from {url} within {:?}", self.timeout),
            other => format!("request to {url} failed: {other}"),
        })?;
        let status = resp.status();
        let mut bytes = Vec::new();
        resp.body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .reader()
            .read_to_end(&mut bytes)
            .map_err(|e| format!("reading the reply of {url} failed: {e}"))?;
        if !status.is_success() {
            return Err(format!("{url} answered HTTP {status}: {}", snippet(&bytes)));
        }
        let reply: Reply = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{url} did not answer a chat completion ({e}); reply starts: {}",
                snippet(&bytes)
            )
        })?;
        let text = reply
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .map(|t| tidy(&t, max_chars))
            .unwrap_or_default();
        if text.is_empty() {
            return Err(format!("{url} answered an empty summary"));
        }
        Ok(text)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    /// A loopback chat endpoint answering each request with `content` (HTTP 200) until the
    /// test ends; returns its base URL.
    pub(crate) fn fake_chat(content: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                // Head, then the body by Content-Length.
                loop {
                    let n = stream.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let body = serde_json::json!({
                    "choices": [{"message": {"role": "assistant", "content": content}}]
                })
                .to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        base
    }

    fn spec(base_url: &str) -> SummarizerSpec {
        SummarizerSpec {
            base_url: base_url.into(),
            model: "m".into(),
            api_key: None,
            timeout_ms: 5_000,
        }
    }

    #[test]
    fn a_chat_reply_becomes_the_summary_clipped_at_a_sentence() {
        let s = HttpSummarizer::new(&spec(&fake_chat(
            "Caroline went to a support group on 7 May 2023.  It helped her. More words here",
        )))
        .unwrap();
        let out = s.summarize("Session 1", &["Caroline: hi"], 60).unwrap();
        assert_eq!(out, "Caroline went to a support group on 7 May 2023.");
    }

    #[test]
    fn a_bad_configuration_or_a_dead_endpoint_is_a_reason() {
        assert!(HttpSummarizer::new(&spec("ftp://x")).is_err());
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/v1", l.local_addr().unwrap())
        };
        let s = HttpSummarizer::new(&spec(&dead)).unwrap();
        let why = s.summarize("x", &["y"], 100).unwrap_err();
        assert!(why.contains("/v1/chat/completions"), "{why}");
    }
}
