//! `GET /api/usage`: what the caller's own agents spent (or, for an admin,
//! every member's).

use axum::extract::State;
use axum::Json;
use kith_proto::{ErrorBody, UsageQuery, UsageResponse};

use super::ApiQuery;
use crate::error::Result;
use crate::registry::Viewer;
use crate::state::AppState;

#[utoipa::path(get, path = "/api/usage", params(UsageQuery),
    responses((status = 200, body = UsageResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn index(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> Result<Json<UsageResponse>> {
    let res =
        tokio::task::spawn_blocking(move || crate::usage::usage(&state, &viewer, &q)).await??;
    Ok(Json(res))
}
