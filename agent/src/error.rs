//! The agent's one error type: what went wrong, on which file or with
//! central, worded for the one-line reason `kith` prints, with a stable code
//! for `--json` and `kith mcp`. Never carries a token.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not valid {what}: {reason}", path.display())]
    Invalid {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "not logged in: run `kith login --central URL` (or set KITH_CENTRAL_URL and KITH_TOKEN)"
    )]
    NotLoggedIn,
    #[error("another kith is working on {} right now; try again in a moment", path.display())]
    Busy { path: PathBuf },
    /// Nothing usable came back from central: no answer (down, too slow, a
    /// certificate not trusted), or one that does not read.
    #[error("central at {url}: {reason}")]
    Central { url: String, reason: String },
    /// Central's refusal: the code and message of its error body
    /// (`kith_proto::ErrorBody`), or `http_<status>` when the body was not
    /// kith's (a proxy's page).
    #[error("{message} ({code})")]
    Answered {
        status: u16,
        code: String,
        message: String,
    },
    /// An argument kith cannot use (a time it does not read, a range
    /// backwards): the command line is wrong, as for clap's own errors.
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Refused(String),
}

impl Error {
    /// A stable snake_case code, for `--json` errors.
    pub(crate) fn code(&self) -> &str {
        match self {
            Self::Io { .. } => "io_error",
            Self::Invalid { .. } => "invalid_file",
            Self::NotLoggedIn => "not_logged_in",
            Self::Busy { .. } => "busy",
            Self::Central { .. } => "central_unreachable",
            Self::Answered { code, .. } => code,
            Self::Refused(_) => "refused",
            Self::Usage(_) => "usage",
        }
    }
}

impl Error {
    /// Whether the command line was at fault: an argument kith refused, or
    /// one central refused as malformed (400, or a body or path over its
    /// limit). Such a failure exits 2, like clap's usage errors.
    pub(crate) fn is_usage(&self) -> bool {
        match self {
            Self::Usage(_) => true,
            Self::Answered { status, .. } => matches!(status, 400 | 413 | 414),
            _ => false,
        }
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// Names the file an IO error happened on.
pub(crate) trait IoContext<T> {
    fn at(self, what: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, what: &'static str, path: &Path) -> Result<T> {
        self.map_err(|source| Error::Io {
            what,
            path: path.to_owned(),
            source,
        })
    }
}
