//! The `Host` check of every endpoint (DNS rebinding): which hosts a server admits, and the
//! middleware that refuses the others.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::mcp::http::HttpOptions;

/// Loopback names a `Host` header may carry.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The `Host` values admitted (names or `name:port`): the loopback names and the ones asked
/// for; empty (any host) on a non-loopback address when none was asked for.
pub(super) fn allowed_hosts(http: &HttpOptions, local: SocketAddr) -> Vec<String> {
    if local.ip().is_loopback() || !http.allowed_hosts.is_empty() {
        LOOPBACK_HOSTS
            .iter()
            .map(|h| (*h).to_owned())
            .chain(http.allowed_hosts.iter().cloned())
            .collect()
    } else {
        Vec::new()
    }
}

/// A host and its port, as a `Host` header or an allowed entry names them (brackets of an IPv6
/// address dropped, the name lower-cased).
fn authority(value: &str) -> Option<(String, Option<u16>)> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let a = value.parse::<axum::http::uri::Authority>().ok()?;
    let host = a
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    Some((host, a.port_u16()))
}

/// Whether a `Host` header's value is admitted by `allowed` (an entry without a port admits
/// every port); an empty list admits every host.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let Some((name, port)) = authority(host) else {
        return false;
    };
    allowed.iter().any(|entry| {
        let (a_name, a_port) =
            authority(entry).unwrap_or_else(|| (entry.trim().to_ascii_lowercase(), None));
        a_name == name && a_port.is_none_or(|p| Some(p) == port)
    })
}

/// Refuses a request whose `Host` is not admitted (403; 400 without a readable one), whatever
/// its path: a page of another site that rebinds its name to this address reads no endpoint.
pub(super) async fn check_host(
    State(hosts): State<Arc<Vec<String>>>,
    request: Request,
    next: Next,
) -> Response {
    if !hosts.is_empty() {
        let host = match request.headers().get(header::HOST) {
            Some(v) => v.to_str().ok().map(str::to_owned),
            None => request.uri().authority().map(|a| a.as_str().to_owned()),
        };
        let Some(host) = host else {
            return (
                StatusCode::BAD_REQUEST,
                "Bad Request: missing or unreadable Host header\n",
            )
                .into_response();
        };
        if !host_allowed(&host, &hosts) {
            tracing::warn!(host = %host.escape_debug(), "refused a request for another host (possible DNS rebinding)");
            return (
                StatusCode::FORBIDDEN,
                "Forbidden: Host header is not allowed\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_matched_by_name_and_by_port_when_one_is_given() {
        let allowed: Vec<String> = ["localhost", "127.0.0.1", "::1", "Memory.Example.com:8443"]
            .iter()
            .map(|h| (*h).to_owned())
            .collect();
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:80",
            "memory.example.com:8443",
            "LOCALHOST",
        ] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "attacker.example",
            "memory.example.com",
            "memory.example.com:80",
            "127.0.0.2",
            "",
            "local host",
            "localhost.attacker.example",
        ] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
        assert!(host_allowed("anything.example", &[]));
    }
}
