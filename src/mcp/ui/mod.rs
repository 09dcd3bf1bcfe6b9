//! The memory browser: a page at `/` of the HTTP transport that speaks MCP to `/mcp` of the same
//! server (2026-07-28 stateless requests with the caller's bearer token), so it sees and may do
//! exactly what that caller's tools may — the same recall, walks, tasks, scopes and namespace
//! limits, no second implementation. Everything it loads ships in the binary (`index.html`,
//! `app.js`, `app.css`, and the graph library `formats::html` bundles for exports too, whose
//! provenance is `src/formats/html/vendor/README.md`); a strict Content-Security-Policy admits scripts, styles and requests of
//! this origin only, and the page shows memory content as text, never as markup.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// One file of the page.
struct Asset {
    path: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

/// The page's files, by the path they are served at.
const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        mime: "text/html; charset=utf-8",
        body: include_bytes!("index.html"),
    },
    Asset {
        path: "/ui/app.js",
        mime: "text/javascript; charset=utf-8",
        body: include_bytes!("app.js"),
    },
    Asset {
        path: "/ui/app.css",
        mime: "text/css; charset=utf-8",
        body: include_bytes!("app.css"),
    },
    Asset {
        path: "/ui/force-graph.min.js",
        mime: "text/javascript; charset=utf-8",
        body: crate::formats::html::GRAPH_LIBRARY,
    },
];

/// What the page may load and run: its own scripts and styles, requests to its own origin,
/// images of its own or `data:`, never framed, no inline script. The three style hashes are the
/// `<style>` elements the graph library injects (its canvas and tooltip rules, and the empty
/// element it creates first), so its own stylesheet applies without `unsafe-inline`; the
/// browser tests fail on any policy violation, so a new library version with other rules is
/// caught.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self' 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=' \
     'sha256-jtRRMYY2VbEXuBKbHvqM1/fPT8vazFrEooXdvwUK4y8=' \
     'sha256-9xjtvxMT1ApHlgn9ohbh2FNfvK5Tqtzy94BjfXBeMSY='; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The routes of the page's files (merged beside `/mcp` by the HTTP transport).
pub(crate) fn routes() -> Router {
    let mut router = Router::new();
    for (i, asset) in ASSETS.iter().enumerate() {
        router = router.route(
            asset.path,
            get(move |headers: HeaderMap| async move { serve(i, &headers) }),
        );
    }
    router
}

/// Each file's entity tag: the start of its SHA-256, quoted.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let digest = Sha256::digest(a.body);
                let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

/// One file with its security headers; 304 when the browser holds this version.
fn serve(i: usize, request: &HeaderMap) -> Response {
    let asset = &ASSETS[i];
    let tag = &etags()[i];
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.mime)], asset.body).into_response()
    };
    let headers = response.headers_mut();
    if let Ok(tag) = HeaderValue::from_str(tag) {
        headers.insert(header::ETAG, tag);
    }
    // Checked again on every load, so a new binary's page is never mixed with an old script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// Takes `Origin` off a request whose origin is this server's own (`http://` or `https://` and
/// the `Host` it was sent to): the memory browser's requests to `/mcp` are not cross-origin,
/// and rmcp's check of foreign origins would refuse them on a non-loopback address. The
/// transport layers it only where the `Host` was checked against a list or a token is needed
/// anyway, so a page of another site that rebinds its name to an open server gains nothing.
pub(crate) async fn same_origin(mut request: Request, next: Next) -> Response {
    let own = {
        let headers = request.headers();
        match (
            headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
            headers.get(header::HOST).and_then(|v| v.to_str().ok()),
        ) {
            (Some(origin), Some(host)) => origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|o| o.eq_ignore_ascii_case(host)),
            _ => false,
        }
    };
    if own {
        request.headers_mut().remove(header::ORIGIN);
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_stays_small_enough_to_ship() {
        // 400 KB compressed is the budget; the files uncompressed are held under it.
        let shipped: usize = ASSETS.iter().map(|a| a.body.len()).sum();
        assert!(shipped < 400 * 1024, "{shipped} bytes");
    }

    #[test]
    fn every_file_is_served_with_the_policy_and_revalidated_by_its_tag() {
        for (i, asset) in ASSETS.iter().enumerate() {
            let first = serve(i, &HeaderMap::new());
            assert_eq!(first.status(), StatusCode::OK, "{}", asset.path);
            let h = first.headers();
            assert_eq!(h[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            let tag = h[header::ETAG].clone();
            let mut again = HeaderMap::new();
            again.insert(header::IF_NONE_MATCH, tag);
            assert_eq!(serve(i, &again).status(), StatusCode::NOT_MODIFIED);
        }
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }
}
