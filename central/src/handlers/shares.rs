//! `/api/shares` and `/api/audit`: explicit sharing and the read audit.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use kith_proto::{AuditQuery, AuditResponse, ErrorBody, Share, ShareRequest, SharesResponse};

use super::{ApiJson, ApiQuery, IdPath};
use crate::error::{Code, Error, Result};
use crate::registry::Revoked;
use crate::registry::Viewer;
use crate::state::AppState;

#[utoipa::path(post, path = "/api/shares", request_body = ShareRequest,
    responses((status = 201, body = Share), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn post(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiJson(req): ApiJson<ShareRequest>,
) -> Result<(StatusCode, Json<Share>)> {
    let share =
        tokio::task::spawn_blocking(move || crate::sharing::grant(state.registry(), &viewer, &req))
            .await??;
    Ok((StatusCode::CREATED, Json(crate::sharing::to_wire(share))))
}

#[utoipa::path(get, path = "/api/shares", responses((status = 200, body = SharesResponse)))]
pub(crate) async fn index(
    State(state): State<AppState>,
    viewer: Viewer,
) -> Result<Json<SharesResponse>> {
    let res = tokio::task::spawn_blocking(move || crate::sharing::list(state.registry(), &viewer))
        .await??;
    Ok(Json(res))
}

#[utoipa::path(delete, path = "/api/shares/{id}", params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    viewer: Viewer,
    IdPath(id): IdPath,
) -> Result<StatusCode> {
    let revoked =
        tokio::task::spawn_blocking(move || state.registry().revoke_share(&viewer, &id)).await??;
    match revoked {
        Revoked::Now => Ok(StatusCode::NO_CONTENT),
        Revoked::Already => Err(Error::conflict(
            Code::AlreadyRevoked,
            "this grant was already revoked",
        )),
        Revoked::NoSuchGrant => Err(Error::not_found("share")),
    }
}

#[utoipa::path(get, path = "/api/audit", params(AuditQuery),
    responses((status = 200, body = AuditResponse), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn audit(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditResponse>> {
    let res =
        tokio::task::spawn_blocking(move || crate::sharing::audit(state.registry(), &viewer, &q))
            .await??;
    Ok(Json(res))
}
