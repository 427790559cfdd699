//! `POST /api/search`.

use axum::extract::State;
use axum::Json;
use kith_proto::{ErrorBody, SearchRequest, SearchResponse};

use super::ApiJson;
use crate::error::Result;
use crate::registry::Viewer;
use crate::state::AppState;

#[utoipa::path(post, path = "/api/search", request_body = SearchRequest,
    responses((status = 200, body = SearchResponse), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(crate) async fn post(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiJson(req): ApiJson<SearchRequest>,
) -> Result<Json<SearchResponse>> {
    Ok(Json(crate::search::search(&state, &viewer, req).await?))
}
