//! The limits every request meets before a handler reads it: the size of
//! its head and its body, how long its body may pause and how long it may
//! take in all. `routes` applies them to every route; the extractors
//! (`handlers`) name them in refusals.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Largest form body a page takes: a handle, a password and a CSRF token,
/// or a share's few fields.
pub(crate) const PAGE_BODY_LIMIT: usize = 16 * 1024;
/// The longest request target (path and query) served.
pub(crate) const MAX_URI_BYTES: usize = 8 * 1024;
/// The most headers a request may carry (each line counts). Hyper reads up
/// to `PARSED_HEADERS`, so that a request between the two gets kith's
/// error body.
pub(crate) const MAX_HEADERS: usize = 100;
/// The headers hyper parses before it refuses a request itself.
pub(crate) const PARSED_HEADERS: usize = 1000;
/// The most bytes of header names and values served.
pub(crate) const MAX_HEADER_BYTES: usize = 32 * 1024;
/// The longest a request body may pause between two reads (nginx's
/// `client_body_timeout`): a client that stops sending mid-body gets a 400
/// and its connection back, instead of holding it for ever.
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest body of any request but a delta (a search, a tag edit, a
/// share, a web form: a few KiB of JSON each). Parsed, a body of many short
/// strings takes ten times its size; a delta's limit is the configured one.
pub(crate) const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// The route that takes deltas: the one whose body may be as large as
/// configured.
pub(crate) const INGEST_PATH: &str = "/api/runs";

/// The body limit of a request to `path`, `ingest` being the configured one.
pub(crate) fn body_limit(ingest: usize, path: &str) -> usize {
    if path == INGEST_PATH {
        ingest
    } else {
        ingest.min(MAX_REQUEST_BYTES)
    }
}

/// Sign-in requests (the routes that take no credentials, and wait on a
/// PDS) served at once; the next is answered 503 at once. Every other
/// route checks its credentials before it reads a body, so sign-ins however
/// many or slow cannot starve the family's searches.
pub(crate) const MAX_ANONYMOUS_IN_FLIGHT: usize = 128;

/// The least time a request's whole body is given, however small.
pub(crate) const BODY_DEADLINE_BASE: Duration = Duration::from_secs(10);
/// The slowest sending an honest client is given time for beyond the base,
/// in bytes a second: a body that trickles in slower (a byte every few
/// seconds, each pause under `BODY_READ_TIMEOUT`) is refused at its
/// deadline instead of holding its connection for as long as it likes.
pub(crate) const MIN_BODY_BYTES_PER_SEC: u64 = 64 * 1024;

/// How long a request's whole body may take to arrive: its declared length
/// (else the route's limit) at `MIN_BODY_BYTES_PER_SEC`, and the base.
pub(crate) fn body_deadline(declared: Option<u64>, limit: usize) -> Duration {
    let bytes = declared.unwrap_or(limit as u64).min(limit as u64);
    BODY_DEADLINE_BASE + Duration::from_secs(bytes / MIN_BODY_BYTES_PER_SEC)
}

/// A request body that fails once its deadline passes, however it trickles.
pub(crate) struct DeadlineBody {
    inner: axum::body::Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    after: Duration,
}

impl DeadlineBody {
    pub(crate) fn new(inner: axum::body::Body, after: Duration) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(after)),
            after,
        }
    }
}

/// The error of a body past its deadline.
#[derive(Debug)]
pub(crate) struct BodyDeadline(Duration);

impl std::fmt::Display for BodyDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} s",
            self.0.as_secs()
        )
    }
}

impl std::error::Error for BodyDeadline {}

impl http_body::Body for DeadlineBody {
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            let after = self.after;
            return Poll::Ready(Some(Err(BodyDeadline(after).into())));
        }
        Pin::new(&mut self.inner).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bodys_deadline_grows_with_its_length_up_to_the_limit() {
        let mib = 1024 * 1024;
        assert_eq!(body_deadline(Some(15_000), mib), BODY_DEADLINE_BASE);
        assert_eq!(
            body_deadline(Some(64 * mib as u64), 64 * mib),
            BODY_DEADLINE_BASE + Duration::from_secs(1024)
        );
        // Unknown length: the route's limit; a declared length over it
        // counts as the limit (it is refused anyway).
        assert_eq!(
            body_deadline(None, mib),
            BODY_DEADLINE_BASE + Duration::from_secs(16)
        );
        assert_eq!(body_deadline(Some(u64::MAX), mib), body_deadline(None, mib));
    }
}
