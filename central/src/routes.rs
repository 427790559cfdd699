//! The one list of routes, the middleware around them, and the OpenAPI
//! document assembled from the handlers' annotations and kith-proto's types.

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use axum::Router;
use tower_http::decompression::RequestDecompressionLayer;
use utoipa::OpenApi;

use crate::handlers::{conversations, meta, runs, search, shares};
use crate::state::AppState;

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
        .route("/api/shares", post(shares::post).get(shares::index))
        .route("/api/shares/{id}", delete(shares::delete))
        .route("/api/audit", get(shares::audit))
        .fallback(|| async { crate::error::Error::NotFound { what: "route" } })
        // The limit applies to the decompressed body, so a small zstd bomb
        // cannot expand past it.
        .layer(DefaultBodyLimit::max(limit))
        .layer(RequestDecompressionLayer::new().gzip(true).zstd(true))
        .with_state(state)
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
