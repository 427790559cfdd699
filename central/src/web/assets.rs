//! The stylesheet and script, compiled into the binary and cached by
//! browsers; and the headers every page carries (a Content-Security-Policy
//! that allows no inline script, no framing, no referrer).

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../../assets/kith.css");
const JS: &str = include_str!("../../assets/kith.js");

/// A day: the pages name the assets with `?v=` of the release.
const CACHE: &str = "public, max-age=86400";

pub(crate) async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, CACHE),
        ],
        CSS,
    )
        .into_response()
}

pub(crate) async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, CACHE),
        ],
        JS,
    )
        .into_response()
}

/// The policy of every page: its own stylesheet and script only.
pub(crate) const CSP: &str =
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the page headers to a web response (keeping an asset's cache
/// header; pages are never cached).
pub(crate) async fn page_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    let mut set = |name, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(header::CONTENT_SECURITY_POLICY, CSP);
    set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(header::X_FRAME_OPTIONS, "DENY");
    // A sign-in link's token must not leave in a Referer.
    set(header::REFERRER_POLICY, "no-referrer");
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}
