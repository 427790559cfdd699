//! HTTP handlers, one file per resource, named by verb. Each extracts, makes
//! one domain call and returns a DTO.

pub(crate) mod context;
pub(crate) mod conversations;
pub(crate) mod meta;
pub(crate) mod runs;
pub(crate) mod search;
pub(crate) mod shares;
pub(crate) mod usage;
pub(crate) mod web;

use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use kith_shared::ids::RunId;
use serde::de::DeserializeOwned;

use crate::error::{Code, Error};
use crate::state::AppState;

/// `axum::Json` whose rejections are kith's error body.
pub(crate) struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
    AppState: FromRef<S>,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = crate::http_limits::body_limit(
            AppState::from_ref(state).config().max_body_bytes,
            req.uri().path(),
        );
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Self(v)),
            Err(rejection) => Err(match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => Error::BodyTooLarge { limit },
                StatusCode::UNSUPPORTED_MEDIA_TYPE => Error::UnreadableBody {
                    message: rejection.body_text(),
                },
                _ => Error::invalid(Code::InvalidJson, rejection.body_text()),
            }),
        }
    }
}

/// `axum::extract::Query` whose rejections are kith's error body.
pub(crate) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Self(q.0))
            .map_err(|r| Error::invalid(Code::InvalidQuery, r.body_text()))
    }
}

/// A page's `limit`: `default` when not given, at most `max`, and never 0
/// (a page of nothing is a mistake, not a request).
pub(crate) fn limit(given: Option<u32>, default: u32, max: u32) -> crate::error::Result<u32> {
    match given {
        Some(0) => Err(Error::invalid(
            Code::InvalidLimit,
            format!("limit must be 1 to {max}"),
        )),
        Some(n) => Ok(n.min(max)),
        None => Ok(default),
    }
}

/// A run id from the path, validated (this is the path-traversal check).
pub(crate) struct RunPath(pub RunId);

/// A path's `{id}` as sent (a conversation id or prefix, a share id), or
/// kith's error body when it is not text (`%FF`).
pub(crate) struct IdPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(id)| Self(id))
            .map_err(|r| Error::invalid(Code::InvalidId, r.body_text()))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RunPath {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(raw) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|r| Error::invalid(Code::InvalidId, r.body_text()))?;
        RunId::parse(&raw)
            .map(Self)
            .map_err(|e| Error::invalid(Code::InvalidId, e.to_string()))
    }
}
