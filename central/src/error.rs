//! The one error type of kith-central and its mapping to HTTP: a stable
//! snake_case code, a status, and a message that never carries internal
//! details for server-side failures (those are logged instead).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kith_proto::{ErrorBody, ErrorDetail};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed; `code` says how (`invalid_jsonl`, `invalid_id`, ...).
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("missing, unknown or revoked bearer token")]
    Unauthorized,
    /// A known caller asking for what only an admin may see.
    #[error("only an admin of this kith-central may read {what}")]
    AdminOnly { what: &'static str },
    /// Also the answer for runs the viewer may not read: the two are indistinguishable.
    #[error("{what} not found")]
    NotFound { what: &'static str },
    /// The request contradicts what central already accepted.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("this method is not allowed on this path")]
    MethodNotAllowed,
    /// A body central cannot read: not JSON, or an encoding other than gzip or zstd.
    #[error("{message}")]
    UnsupportedMediaType { message: String },
    #[error("the request URI is longer than the limit of {limit} bytes")]
    UriTooLong { limit: usize },
    #[error("the request headers are larger than the limit of {limit} bytes")]
    HeadersTooLarge { limit: usize },
    /// A dependency (index, embedder) cannot serve this right now.
    #[error("{message}")]
    Unavailable { code: &'static str, message: String },
    #[error("registry: {0}")]
    Registry(#[from] rusqlite::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
        }
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::Conflict {
            code,
            message: message.into(),
        }
    }

    pub fn run_not_found() -> Self {
        Self::NotFound { what: "run" }
    }

    /// A run's blob that could not be read: gone means the run is (a forget
    /// deletes the blobs just before the rows), anything else is an error.
    pub fn reading_blob(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::NotFound {
            Self::run_not_found()
        } else {
            e.into()
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::AdminOnly { .. } => StatusCode::FORBIDDEN,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            Self::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Registry(_) | Self::Io(_) | Self::Json(_) | Self::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest { code, .. }
            | Self::Conflict { code, .. }
            | Self::Unavailable { code, .. } => code,
            Self::Unauthorized => "unauthorized",
            Self::AdminOnly { .. } => "admin_only",
            Self::NotFound { what: "run" } => "run_not_found",
            Self::NotFound {
                what: "conversation",
            } => "conversation_not_found",
            Self::NotFound { .. } => "not_found",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::UnsupportedMediaType { .. } => "unsupported_media_type",
            Self::UriTooLong { .. } => "uri_too_long",
            Self::HeadersTooLarge { .. } => "headers_too_large",
            Self::Registry(_) | Self::Io(_) | Self::Json(_) | Self::Internal(_) => "internal",
        }
    }

    /// The body sent to the client. Server-side failures say only that they happened.
    pub fn body(&self) -> ErrorBody {
        let message =
            if self.status().is_server_error() && !matches!(self, Self::Unavailable { .. }) {
                "internal error; see the server log".to_owned()
            } else {
                self.to_string()
            };
        ErrorBody {
            error: ErrorDetail {
                code: self.code().to_owned(),
                message,
            },
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(code = self.code(), error = %self, "request failed");
        }
        (status, Json(self.body())).into_response()
    }
}

impl From<tokio::task::JoinError> for Error {
    fn from(e: tokio::task::JoinError) -> Self {
        Self::Internal(format!("blocking task failed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_hide_their_details() {
        let e = Error::Internal("/secret/path exploded".into());
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = e.body();
        assert_eq!(body.error.code, "internal");
        assert!(!body.error.message.contains("/secret/path"));
    }

    #[test]
    fn client_errors_say_why() {
        let e = Error::bad_request("invalid_jsonl", "line 3 is not JSON");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.body().error.message, "line 3 is not JSON");
        assert_eq!(Error::run_not_found().body().error.code, "run_not_found");
    }
}
