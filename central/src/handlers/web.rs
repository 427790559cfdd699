//! `POST /api/web/link`: a one-time link that signs the calling machine's
//! member in to the web page (`kith web`), for members without a PDS.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use kith_proto::{ErrorBody, SignInLink};

use crate::error::{Error, Result};
use crate::registry::Viewer;
use crate::state::AppState;
use crate::web::session::Secret;

#[utoipa::path(post, path = "/api/web/link",
    responses((status = 201, body = SignInLink), (status = 401, body = ErrorBody)))]
pub(crate) async fn link(
    State(state): State<AppState>,
    viewer: Viewer,
) -> Result<(StatusCode, Json<SignInLink>)> {
    // Only a machine's token asks for a link (a browser signs in once).
    if viewer.machine_id().is_none() {
        return Err(Error::Unauthenticated);
    }
    let secret = Secret::generate()?;
    let hash = secret.sha256();
    let expires_at =
        tokio::task::spawn_blocking(move || state.registry().add_sign_in_link(&hash, &viewer))
            .await??;
    Ok((
        StatusCode::CREATED,
        Json(SignInLink {
            path: format!("/signin/link?token={}", secret.expose()),
            expires_at,
        }),
    ))
}
