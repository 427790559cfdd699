//! `/api/conversations`: recent conversations, one conversation's facts,
//! its turns, its exact bytes, its owner's tag edits, where it continues
//! on another machine (`resume`), and forgetting it. `{id}` is any run id of it, its
//! conversation id, or a unique prefix of either.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use kith_proto::{
    ConversationResponse, ConversationsQuery, ConversationsResponse, ErrorBody, ForgetResponse,
    ForkOrigin, ForkRequest, ResumeRequest, ResumeResponse, TagCount, TagList, TagsRequest,
    TagsResponse, TurnsQuery, TurnsResponse,
};
use tokio_util::io::ReaderStream;

use super::{ApiJson, ApiQuery, IdPath};
use crate::error::{Code, Error, Result};
use crate::registry::Viewer;
use crate::registry::{ConversationFilter, Facets, Forgetter};
use crate::state::AppState;

#[utoipa::path(get, path = "/api/conversations", params(ConversationsQuery),
    responses((status = 200, body = ConversationsResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody)))]
pub(crate) async fn index(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiQuery(q): ApiQuery<ConversationsQuery>,
) -> Result<Json<ConversationsResponse>> {
    let time = |name: &str, v: &Option<String>| {
        v.as_deref()
            .map(|s| {
                kith_shared::timestamp::normalize(s).ok_or_else(|| {
                    Error::invalid(Code::InvalidQuery, format!("{name} must be RFC 3339"))
                })
            })
            .transpose()
    };
    let filter = ConversationFilter {
        facets: Facets::checked(
            [
                &q.file, &q.tool, &q.command, &q.project, &q.branch, &q.owner,
            ],
            &q.machine,
        )?,
        runtime: q.runtime,
        machine: q.machine.clone(),
        since: time("since", &q.since)?,
        until: time("until", &q.until)?,
        after: q
            .cursor
            .as_deref()
            .map(crate::tree::parse_cursor)
            .transpose()?,
        limit: super::limit(q.limit, 50, 200)?,
    };
    let res = tokio::task::spawn_blocking(move || {
        crate::tree::conversations(state.registry(), &viewer, &filter)
    })
    .await??;
    Ok(Json(res))
}

#[utoipa::path(get, path = "/api/conversations/{id}", params(("id" = String, Path)),
    responses((status = 200, body = ConversationResponse), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    viewer: Viewer,
    IdPath(id): IdPath,
) -> Result<Json<ConversationResponse>> {
    let res = tokio::task::spawn_blocking(move || {
        crate::tree::conversation(state.registry(), &viewer, &id)
    })
    .await??;
    Ok(Json(res))
}

#[utoipa::path(get, path = "/api/conversations/{id}/turns", params(("id" = String, Path), TurnsQuery),
    responses((status = 200, body = TurnsResponse), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn turns(
    State(state): State<AppState>,
    viewer: Viewer,
    IdPath(id): IdPath,
    ApiQuery(q): ApiQuery<TurnsQuery>,
) -> Result<Json<TurnsResponse>> {
    let offset = q.offset.unwrap_or(0);
    let limit = super::limit(q.limit, 200, 1000)? as usize;
    let res = tokio::task::spawn_blocking(move || {
        let (registry, store, cache) = (state.registry(), state.store(), state.turns_cache());
        let start = crate::tree::PageStart::Offset(offset);
        crate::tree::turns(registry, store, cache, &viewer, &id, start, limit)
    })
    .await??;
    Ok(Json(res))
}

#[utoipa::path(get, path = "/api/conversations/{id}/jsonl", params(("id" = String, Path)),
    responses((status = 200, content_type = "application/x-ndjson", body = String),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn jsonl(
    State(state): State<AppState>,
    viewer: Viewer,
    IdPath(id): IdPath,
) -> Result<Response> {
    conversation_bytes(&state, viewer, id).await
}

/// A conversation's exact bytes as the viewer may read them, one delta's
/// file after another (each opened when the stream reaches it): the JSON
/// route and the web page's raw view.
pub(crate) async fn conversation_bytes(
    state: &AppState,
    viewer: Viewer,
    id: String,
) -> Result<Response> {
    let s = state.clone();
    let runs = tokio::task::spawn_blocking(move || {
        crate::tree::conversation_blobs(s.registry(), &viewer, &id)
    })
    .await??;
    let length: u64 = runs.iter().map(|r| r.run.jsonl_bytes).sum();
    let paths: Vec<std::path::PathBuf> = runs
        .iter()
        .map(|r| state.store().absolute(&r.blob_path))
        .collect();
    let body = futures_util::stream::iter(paths)
        .then(|path| async move { tokio::fs::File::open(path).await.map(ReaderStream::new) })
        .flat_map(|opened| match opened {
            Ok(stream) => stream.left_stream(),
            Err(e) => futures_util::stream::once(async move { Err(e) }).right_stream(),
        });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_owned()),
            (header::CONTENT_LENGTH, length.to_string()),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// Forgets a conversation of the caller's, with its subagents: deleted from
/// the index, the blobs and the registry, its bytes never taken again. Only
/// the owner may; any other caller gets 404, as for an unknown id.
#[utoipa::path(delete, path = "/api/conversations/{id}", params(("id" = String, Path)),
    responses((status = 200, body = ForgetResponse), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    viewer: Viewer,
    IdPath(id): IdPath,
) -> Result<Json<ForgetResponse>> {
    // No delta of the chain is accepted while it goes (it would hang
    // under a run being deleted); the next one continues the tombstone.
    let gate = state.ingest_gate().await;
    let s = state.clone();
    let res = tokio::task::spawn_blocking(move || {
        let _gate = gate;
        crate::forget::forget(&s, Forgetter::Owner(&viewer), &id)
    })
    .await??;
    Ok(Json(res))
}

#[utoipa::path(post, path = "/api/conversations/{id}/tags", params(("id" = String, Path)),
    request_body = TagsRequest,
    responses((status = 200, body = TagsResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn tags(
    State(state): State<AppState>,
    viewer: Viewer,
    IdPath(id): IdPath,
    ApiJson(req): ApiJson<TagsRequest>,
) -> Result<Json<TagsResponse>> {
    crate::tagging::check(&req)?;
    // Not beside a forget of the conversation (its rewritten metadata would
    // outlive the run) nor a delta deciding its tags.
    let gate = state.ingest_gate().await;
    let res = tokio::task::spawn_blocking(move || {
        let _gate = gate;
        crate::tagging::edit(&state, &viewer, &id, &req)
    })
    .await??;
    Ok(Json(res))
}

#[utoipa::path(post, path = "/api/conversations/{id}/resume", params(("id" = String, Path)),
    request_body = ResumeRequest,
    responses((status = 200, body = ResumeResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(crate) async fn resume(
    State(state): State<AppState>,
    viewer: Viewer,
    IdPath(id): IdPath,
    ApiJson(req): ApiJson<ResumeRequest>,
) -> Result<Json<ResumeResponse>> {
    let res = tokio::task::spawn_blocking(move || {
        crate::resume::record(state.registry(), &viewer, &id, &req)
    })
    .await??;
    Ok(Json(res))
}

#[utoipa::path(post, path = "/api/conversations/{id}/fork", params(("id" = String, Path)),
    request_body = ForkRequest,
    responses((status = 200, body = ForkOrigin), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn fork(
    State(state): State<AppState>,
    viewer: Viewer,
    IdPath(id): IdPath,
    ApiJson(req): ApiJson<ForkRequest>,
) -> Result<Json<ForkOrigin>> {
    let res = tokio::task::spawn_blocking(move || {
        crate::resume::fork(state.registry(), &viewer, &id, &req)
    })
    .await??;
    Ok(Json(res))
}

#[utoipa::path(get, path = "/api/tags", responses((status = 200, body = TagList)))]
pub(crate) async fn tag_list(
    State(state): State<AppState>,
    viewer: Viewer,
) -> Result<Json<TagList>> {
    let tags = tokio::task::spawn_blocking(move || state.registry().tags(&viewer)).await??;
    Ok(Json(TagList {
        tags: tags
            .into_iter()
            .map(|(tag, conversations)| TagCount { tag, conversations })
            .collect(),
    }))
}
