//! The limits every request meets before a handler reads it: the size of
//! its head and its body, and how long its body may pause. `routes` applies
//! them to every route; the extractors (`handlers`) name them in refusals.

/// The longest request target (path and query) served.
pub(crate) const MAX_URI_BYTES: usize = 8 * 1024;
/// The most bytes of header names and values served.
pub(crate) const MAX_HEADER_BYTES: usize = 32 * 1024;
/// The longest a request body may pause between two reads (nginx's
/// `client_body_timeout`): a client that stops sending mid-body gets a 400
/// and its connection back, instead of holding it for ever.
pub(crate) const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
