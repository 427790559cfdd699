//! `/api/runs`: ingest a delta, read a run's metadata and bytes, its subtree
//! and the forest.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kith_proto::{
    DescendantsResponse, ErrorBody, ForestQuery, ForestResponse, IngestRequest, IngestResponse,
    RunMeta,
};
use kith_shared::ids::RunId;
use tokio_util::io::ReaderStream;

use super::{ApiJson, ApiQuery, RunPath};
use crate::error::{Code, Error, Result};
use crate::registry::Viewer;
use crate::registry::{ForestFilter, StoredRun};
use crate::state::AppState;

#[utoipa::path(post, path = "/api/runs", request_body = IngestRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "makes a replay safe")),
    responses((status = 202, body = IngestResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub(crate) async fn post(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    ApiJson(req): ApiJson<IngestRequest>,
) -> Result<(StatusCode, Json<IngestResponse>)> {
    let key = match headers.get("idempotency-key") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    Error::invalid(Code::InvalidIdempotencyKey, "Idempotency-Key must be ASCII")
                })?
                .to_owned(),
        ),
        None => None,
    };
    let res = crate::ingest::ingest(&state, &viewer, req, key).await?;
    Ok((StatusCode::ACCEPTED, Json(res)))
}

#[utoipa::path(get, path = "/api/runs/{id}", params(("id" = String, Path)),
    responses((status = 200, body = RunMeta), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    viewer: Viewer,
    RunPath(id): RunPath,
) -> Result<Json<RunMeta>> {
    let meta = tokio::task::spawn_blocking(move || {
        let run = read_run(&state, &viewer, &id, "get")?;
        crate::tree::run_meta(state.registry(), &viewer, run)
    })
    .await??;
    Ok(Json(meta))
}

#[utoipa::path(get, path = "/api/runs/{id}/jsonl", params(("id" = String, Path)),
    responses((status = 200, content_type = "application/x-ndjson", body = String), (status = 404, body = ErrorBody)))]
pub(crate) async fn jsonl(
    State(state): State<AppState>,
    viewer: Viewer,
    RunPath(id): RunPath,
) -> Result<Response> {
    let s = state.clone();
    let run = tokio::task::spawn_blocking(move || read_run(&s, &viewer, &id, "jsonl")).await??;
    let file = tokio::fs::File::open(state.store().absolute(&run.blob_path))
        .await
        .map_err(Error::reading_blob)?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_owned()),
            (header::CONTENT_LENGTH, run.run.jsonl_bytes.to_string()),
        ],
        Body::from_stream(ReaderStream::new(file)),
    )
        .into_response())
}

/// A run the viewer may read (404 otherwise, as if missing), audited when
/// it is someone else's.
fn read_run(state: &AppState, viewer: &Viewer, id: &RunId, what: &str) -> Result<StoredRun> {
    let run = state
        .registry()
        .run(viewer, id)?
        .ok_or_else(Error::run_not_found)?;
    state
        .registry()
        .audit_read(viewer, &run.run.user_id, &run.run.id, what)?;
    Ok(run)
}

#[utoipa::path(get, path = "/api/runs/{id}/descendants", params(("id" = String, Path)),
    responses((status = 200, body = DescendantsResponse), (status = 404, body = ErrorBody)))]
pub(crate) async fn descendants(
    State(state): State<AppState>,
    viewer: Viewer,
    RunPath(id): RunPath,
) -> Result<Json<DescendantsResponse>> {
    let res = tokio::task::spawn_blocking(move || {
        crate::tree::descendants(state.registry(), &viewer, &id)
    })
    .await??;
    Ok(Json(res))
}

#[utoipa::path(get, path = "/api/runs/forest", params(ForestQuery),
    responses((status = 200, body = ForestResponse), (status = 400, body = ErrorBody)))]
pub(crate) async fn forest(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiQuery(q): ApiQuery<ForestQuery>,
) -> Result<Json<ForestResponse>> {
    let since = match &q.since {
        Some(s) => Some(kith_shared::timestamp::normalize(s).ok_or_else(|| {
            Error::invalid(Code::InvalidQuery, "since must be an RFC 3339 timestamp")
        })?),
        None => None,
    };
    let root = match &q.root {
        Some(r) => Some(
            kith_shared::ids::RunId::parse(r)
                .map_err(|e| Error::invalid(Code::InvalidId, e.to_string()))?,
        ),
        None => None,
    };
    let filter = ForestFilter {
        since,
        runtime: q.runtime,
        machine: q.machine,
        root,
        limit: super::limit(q.limit, 50, 500)?,
    };
    let res = tokio::task::spawn_blocking(move || {
        crate::tree::forest(state.registry(), &viewer, &filter)
    })
    .await??;
    Ok(Json(res))
}
