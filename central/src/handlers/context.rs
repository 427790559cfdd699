//! `POST /api/context`.

use axum::extract::State;
use axum::Json;
use kith_proto::{ContextRequest, ContextResponse, ErrorBody};

use super::ApiJson;
use crate::error::Result;
use crate::registry::Viewer;
use crate::state::AppState;

#[utoipa::path(post, path = "/api/context", request_body = ContextRequest,
    responses((status = 200, body = ContextResponse), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(crate) async fn post(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiJson(req): ApiJson<ContextRequest>,
) -> Result<Json<ContextResponse>> {
    Ok(Json(crate::context::context(&state, &viewer, req).await?))
}
