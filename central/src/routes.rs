//! The one list of routes, the middleware around them, and the OpenAPI
//! document assembled from the handlers' annotations and kith-proto's types.
//!
//! Every refusal carries kith's error body, also those made below the
//! handlers (the method router's 405, the decompression layer's 415) and
//! the limits checked on a request's head before anything reads its body.
//! Hyper's own refusals (a request it cannot parse, a head over ~400 KB)
//! happen before any of this and stay bodiless.

use axum::body::HttpBody;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use tower_http::decompression::RequestDecompressionLayer;
use utoipa::OpenApi;

use crate::error::Error;
use crate::handlers::{context, conversations, meta, runs, search, shares};
use crate::state::AppState;

/// The longest request target (path and query) served.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// The most bytes of header names and values served.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

pub fn app(state: AppState) -> Router {
    let limit = state.config().max_body_bytes;
    Router::new()
        .route("/healthz", get(meta::healthz))
        .route("/metrics", get(meta::metrics))
        .route("/api/openapi.json", get(meta::openapi))
        .route("/api/status", get(meta::status))
        .route("/api/runs", post(runs::post))
        .route("/api/runs/forest", get(runs::forest))
        .route("/api/runs/{id}", get(runs::get))
        .route("/api/runs/{id}/jsonl", get(runs::jsonl))
        .route("/api/runs/{id}/descendants", get(runs::descendants))
        .route("/api/conversations", get(conversations::index))
        .route("/api/conversations/{id}", get(conversations::get))
        .route("/api/conversations/{id}/turns", get(conversations::turns))
        .route("/api/conversations/{id}/jsonl", get(conversations::jsonl))
        .route("/api/search", post(search::post))
        .route("/api/context", post(context::post))
        .route("/api/shares", post(shares::post).get(shares::index))
        .route("/api/shares/{id}", delete(shares::delete))
        .route("/api/audit", get(shares::audit))
        .fallback(|| async { Error::NotFound { what: "route" } })
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed })
        // The limit applies to the decompressed body, so a small zstd bomb
        // cannot expand past it.
        .layer(DefaultBodyLimit::max(limit))
        .layer(RequestDecompressionLayer::new().gzip(true).zstd(true))
        .layer(middleware::from_fn(
            move |req: Request, next: Next| async move {
                match check_head(&req, limit) {
                    Ok(()) => next.run(req).await,
                    Err(e) => e.into_response(),
                }
            },
        ))
        .layer(middleware::map_response(move |res: Response| async move {
            with_error_body(res, limit)
        }))
        .with_state(state)
}

/// Refuses a request by its head alone, before its body is read or its
/// bearer looked up: a target or headers over their limits, or a declared
/// `Content-Length` over the body limit (a compressed body that long
/// decompresses longer still, but for a few bytes of framing).
fn check_head(req: &Request, body_limit: usize) -> Result<(), Error> {
    let target = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if target > MAX_URI_BYTES {
        return Err(Error::UriTooLong {
            limit: MAX_URI_BYTES,
        });
    }
    let head: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if head > MAX_HEADER_BYTES {
        return Err(Error::HeadersTooLarge {
            limit: MAX_HEADER_BYTES,
        });
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > body_limit as u64) {
        return Err(Error::PayloadTooLarge { limit: body_limit });
    }
    Ok(())
}

/// A refusal made below the handlers comes without a body: it gets kith's,
/// keeping its headers (`Allow`, `Accept-Encoding`).
fn with_error_body(res: Response, body_limit: usize) -> Response {
    let status = res.status();
    if !status.is_client_error()
        || res.headers().contains_key(header::CONTENT_TYPE)
        || res.body().size_hint().exact() != Some(0)
    {
        return res;
    }
    let error = match status {
        StatusCode::BAD_REQUEST => Error::bad_request("bad_request", "the request is malformed"),
        StatusCode::METHOD_NOT_ALLOWED => Error::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => Error::PayloadTooLarge { limit: body_limit },
        StatusCode::URI_TOO_LONG => Error::UriTooLong {
            limit: MAX_URI_BYTES,
        },
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Error::UnsupportedMediaType {
            message: "the body must be JSON, sent as is or with Content-Encoding gzip or zstd"
                .into(),
        },
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => Error::HeadersTooLarge {
            limit: MAX_HEADER_BYTES,
        },
        _ => return res,
    };
    let (parts, _) = res.into_parts();
    let mut out = error.into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH {
            out.headers_mut().append(name, value.clone());
        }
    }
    out
}

#[derive(OpenApi)]
#[openapi(paths(
    meta::healthz,
    meta::status,
    meta::metrics,
    meta::openapi,
    runs::post,
    runs::get,
    runs::jsonl,
    runs::descendants,
    runs::forest,
    conversations::index,
    conversations::get,
    conversations::turns,
    conversations::jsonl,
    search::post,
    context::post,
    shares::post,
    shares::index,
    shares::delete,
    shares::audit,
))]
struct Paths;

/// The OpenAPI document of the whole HTTP API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = kith_proto::ApiDoc::openapi();
    doc.merge(Paths::openapi());
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{to_bytes, Body};

    async fn body_of(res: Response) -> serde_json::Value {
        let bytes = to_bytes(res.into_body(), 1 << 16).await.unwrap_or_default();
        serde_json::from_slice(&bytes).unwrap_or_default()
    }

    /// A bodiless refusal gets kith's body and keeps its headers; answers
    /// that have a body, and successes, pass as they are.
    #[tokio::test]
    async fn bodiless_refusals_get_the_error_body() {
        let cases = [
            (StatusCode::BAD_REQUEST, "bad_request"),
            (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            (StatusCode::URI_TOO_LONG, "uri_too_long"),
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers_too_large",
            ),
        ];
        for (status, code) in cases {
            let res = Response::builder()
                .status(status)
                .header(header::ALLOW, "GET,HEAD")
                .body(Body::empty())
                .unwrap_or_default();
            let out = with_error_body(res, 4096);
            assert_eq!(out.status(), status);
            assert_eq!(out.headers()[header::ALLOW], "GET,HEAD");
            assert_eq!(out.headers()[header::CONTENT_TYPE], "application/json");
            let body = body_of(out).await;
            assert_eq!(body["error"]["code"], code, "{status}");
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                assert!(body["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("4096 bytes"));
            }
        }
        let has_body = Error::run_not_found().into_response();
        let out = with_error_body(has_body, 4096);
        assert_eq!(body_of(out).await["error"]["code"], "run_not_found");
        let ok = with_error_body(StatusCode::NO_CONTENT.into_response(), 4096);
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        assert!(!ok.headers().contains_key(header::CONTENT_TYPE));
        // A status kith has no code for passes as it is.
        let teapot = with_error_body(StatusCode::IM_A_TEAPOT.into_response(), 4096);
        assert!(!teapot.headers().contains_key(header::CONTENT_TYPE));
    }
}
