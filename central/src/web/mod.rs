//! The family's web page, served by central on its own listener beside the
//! JSON API: server-rendered HTML (askama templates in `central/templates/`,
//! compiled into the binary), one stylesheet and one small script.
//!
//! A browser signs in with its member's PDS password or a one-time link
//! (`kith web`) and gets a session cookie; the registry turns the cookie's
//! hash into the same `Viewer` a machine token gives, and every page reads
//! through the JSON handlers' own functions with it. There is no privacy
//! rule here: what a page cannot read is "not found", as in the API.

pub(crate) mod actions;
pub(crate) mod assets;
mod chart;
mod highlight;
pub(crate) mod limits;
mod markdown;
pub(crate) mod pages;
pub(crate) mod session;
mod view;

use askama::Template;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use crate::error::Error;
use crate::http_error;

/// Changes the assets' URLs with each release (they are cached for a day).
pub(crate) const ASSET_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A page, or why there is none: any error of the domain, shown as HTML.
pub(crate) struct PageError(Error);

impl From<Error> for PageError {
    fn from(e: Error) -> Self {
        Self(e)
    }
}

impl From<tokio::task::JoinError> for PageError {
    fn from(e: tokio::task::JoinError) -> Self {
        Self(e.into())
    }
}

pub(crate) type PageResult = Result<Response, PageError>;

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let e = self.0;
        if matches!(e, Error::Unauthenticated) {
            return Redirect::to("/signin").into_response();
        }
        let status = http_error::status(e.kind());
        if status.is_server_error() {
            tracing::error!(code = e.code().name(), error = %e, "page failed");
        }
        let heading = match &e {
            Error::NotFound { .. } => "Not found".to_owned(),
            _ => status
                .canonical_reason()
                .unwrap_or("Something went wrong")
                .to_owned(),
        };
        // The same words the API sends: server-side details stay in the log.
        let message = match &e {
            Error::NotFound { .. } => {
                "There is nothing here you may read: it does not exist, or it was not shared with you."
                    .to_owned()
            }
            _ => http_error::body(&e).error.message,
        };
        let page = view::ErrorPage {
            chrome: None,
            heading,
            message,
        };
        (status, render(&page)).into_response()
    }
}

/// A page's refusal made by an extractor before its handler ran (a form
/// past the pages' limit, not a form, one that does not parse or did not
/// arrive in time), which axum sends as text/plain: the error page
/// instead, saying what axum said.
pub(crate) async fn extractor_refusals(res: Response) -> Response {
    let plain = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !plain || !res.status().is_client_error() {
        return res;
    }
    let status = res.status();
    // A rejection's text is a line or two.
    let said = axum::body::to_bytes(res.into_body(), 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let error = match status {
        StatusCode::PAYLOAD_TOO_LARGE => Error::BodyTooLarge {
            limit: crate::http_limits::PAGE_BODY_LIMIT,
        },
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Error::UnreadableBody {
            message: "a form must be sent as application/x-www-form-urlencoded".into(),
        },
        _ => Error::invalid(crate::error::Code::BadRequest, said),
    };
    PageError(error).into_response()
}

/// A template as an HTML response (a template that fails to render is a
/// bug: logged, and a bare 500).
pub(crate) fn render<T: Template>(page: &T) -> Response {
    match page.render() {
        Ok(html) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "template failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
