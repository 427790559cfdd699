//! Service endpoints: liveness, status, Prometheus metrics, the OpenAPI document.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use kith_proto::{Counts, ErrorBody, LaneDepths, StatusResponse};

use crate::auth::Viewer;
use crate::error::Result;
use crate::state::AppState;

#[utoipa::path(get, path = "/healthz", responses((status = 200, body = String)))]
pub async fn healthz() -> &'static str {
    "ok\n"
}

#[utoipa::path(get, path = "/api/status",
    responses((status = 200, body = StatusResponse), (status = 401, body = ErrorBody)))]
pub async fn status(State(state): State<AppState>, viewer: Viewer) -> Result<Json<StatusResponse>> {
    let s = state.clone();
    let (counts, last_indexed_at, n_chunks) = tokio::task::spawn_blocking(move || {
        Ok::<_, crate::error::Error>((
            s.registry().counts()?,
            s.registry().last_indexed_at()?,
            chunks_or_zero(&s),
        ))
    })
    .await??;
    Ok(Json(StatusResponse {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        queue: lane_depths(&state, &counts),
        counts: Counts {
            users: counts.users,
            machines: counts.machines,
            runs: counts.runs,
            chunks: n_chunks,
            pending_index_jobs: counts.pending_jobs,
        },
        last_indexed_at,
        search_backend: state.index().name().to_owned(),
        embedder: state.embedder_name(),
        machine: viewer.machine_name,
        user: viewer.handle,
    }))
}

/// The index's chunk count; 0 while a search server is unreachable, so
/// status and metrics keep answering (the reason is logged, and searches
/// say it in their 503).
fn chunks_or_zero(state: &AppState) -> u64 {
    state.index().n_chunks().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot count indexed chunks");
        0
    })
}

/// Pending work per lane: embedding jobs waiting in the queue, plus runs
/// waiting for text indexing on the ingest lanes.
pub fn lane_depths(state: &AppState, counts: &crate::registry::RegistryCounts) -> LaneDepths {
    let embed = state.embed().map(|q| q.depths()).unwrap_or_default();
    LaneDepths {
        query: embed.query as u64,
        ingest_realtime: counts.realtime_jobs + embed.ingest_realtime as u64,
        ingest_bulk: counts.bulk_jobs + embed.ingest_bulk as u64,
    }
}

#[utoipa::path(get, path = "/metrics", responses((status = 200, body = String)))]
pub async fn metrics(State(state): State<AppState>) -> Result<impl IntoResponse> {
    let s = state.clone();
    let (counts, n_chunks) = tokio::task::spawn_blocking(move || {
        Ok::<_, crate::error::Error>((s.registry().counts()?, chunks_or_zero(&s)))
    })
    .await??;
    let lanes = lane_depths(&state, &counts);
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics().render(
            &counts,
            &lanes,
            state
                .embed()
                .map(|q| q.embedded_texts())
                .unwrap_or_default(),
            n_chunks,
        ),
    ))
}

#[utoipa::path(get, path = "/api/openapi.json", responses((status = 200, body = Object)))]
pub async fn openapi() -> impl IntoResponse {
    Json(crate::routes::openapi())
}
