//! kith-central's errors at the HTTP edge: the status each kind of failure
//! is sent with, and the body, `{"error": {"code", "message"}}`, which says
//! of a server-side failure only that it happened (the log has the rest).
//!
//! Each code's kind is in the table of codes (`error::Code`); `status` below
//! is the table of kinds.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kith_proto::{ErrorBody, ErrorDetail};

use crate::error::{Error, Kind};

/// The status a kind of failure is sent with.
pub(crate) fn status(kind: Kind) -> StatusCode {
    match kind {
        Kind::Invalid => StatusCode::BAD_REQUEST,
        Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
        Kind::Forbidden => StatusCode::FORBIDDEN,
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        Kind::Conflict => StatusCode::CONFLICT,
        Kind::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::UriTooLong => StatusCode::URI_TOO_LONG,
        Kind::UnreadableBody => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Kind::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The body sent to the client. Server-side failures say only that they
/// happened; a dependency that cannot serve says which and why.
pub(crate) fn body(e: &Error) -> ErrorBody {
    let message = match e.kind() {
        Kind::Internal => "internal error; see the server log".to_owned(),
        _ => e.to_string(),
    };
    ErrorBody {
        error: ErrorDetail {
            code: e.code().name().to_owned(),
            message,
        },
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = status(self.kind());
        if status.is_server_error() {
            tracing::error!(code = self.code().name(), error = %self, "request failed");
        }
        (status, Json(body(&self))).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn server_errors_hide_their_details() {
        let e = Error::Internal("/secret/path exploded".into());
        assert_eq!(status(e.kind()), StatusCode::INTERNAL_SERVER_ERROR);
        let body = body(&e);
        assert_eq!(body.error.code, Code::Internal.name());
        assert!(!body.error.message.contains("/secret/path"));
    }

    #[test]
    fn client_errors_say_why() {
        let e = Error::invalid(Code::InvalidJsonl, "line 3 is not JSON");
        assert_eq!(status(e.kind()), StatusCode::BAD_REQUEST);
        assert_eq!(body(&e).error.message, "line 3 is not JSON");
        assert_eq!(
            body(&Error::run_not_found()).error.code,
            Code::RunNotFound.name()
        );
    }

    /// Every code is sent as a failure: a client error, or a server error
    /// only for central's own failures and the dependencies it waits on.
    #[test]
    fn every_code_is_sent_as_a_failure() {
        for code in Code::ALL {
            let s = status(code.kind());
            let server_side = matches!(code.kind(), Kind::Internal | Kind::Unavailable);
            assert_eq!(s.is_server_error(), server_side, "{code:?}");
            assert!(s.is_client_error() || s.is_server_error(), "{code:?}");
        }
    }
}
