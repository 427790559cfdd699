//! The one error type of kith-central, and the one table of the codes it
//! carries: each failure says what went wrong with a stable snake_case
//! [`Code`], and each code has a [`Kind`]. Nothing here speaks HTTP: the
//! edge (`http_error`) sends each kind with its status, and never the
//! details of a server-side failure (those are logged instead).

/// What kind of failure a code names. The edge sends each kind with one
/// status (`http_error::status`, given here in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The request is malformed, or asks for what cannot be (400).
    Invalid,
    /// No caller central knows for this call: a missing, unknown or revoked
    /// token or session (401).
    Unauthenticated,
    /// A known caller asking for what it may not (403).
    Forbidden,
    /// Nothing by that name the caller may read (404).
    NotFound,
    /// The path does not take this method (405).
    MethodNotAllowed,
    /// The request contradicts what central already accepted (409).
    Conflict,
    /// The body is over its limit (413).
    BodyTooLarge,
    /// The target, path and query, is over its limit (414).
    UriTooLong,
    /// A body central cannot read: not JSON, or in an encoding other than
    /// gzip or zstd (415).
    UnreadableBody,
    /// The headers are over their limit (431).
    HeadersTooLarge,
    /// A dependency (an index, the embedder, a PDS) cannot serve this right
    /// now (503).
    Unavailable,
    /// Central failed; only the server log says how (500).
    Internal,
}

/// Declares [`Code`] from its table: every code once, grouped by its kind,
/// with the name clients see.
macro_rules! codes {
    ($($kind:ident { $($(#[doc = $doc:literal])* $code:ident = $name:literal,)* })*) => {
        /// Why a request failed, as clients read it in `error.code`. The
        /// names are a contract: clients and tests match on them, so a name,
        /// once sent, never changes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Code {
            $($($(#[doc = $doc])* $code,)*)*
        }

        impl Code {
            /// Every code, in the table's order.
            #[cfg(test)]
            pub(crate) const ALL: &[Code] = &[$($(Self::$code,)*)*];

            /// The snake_case name clients see.
            pub fn name(self) -> &'static str {
                match self {
                    $($(Self::$code => $name,)*)*
                }
            }

            pub(crate) fn kind(self) -> Kind {
                match self {
                    $($(Self::$code => Kind::$kind,)*)*
                }
            }
        }
    };
}

codes! {
    Invalid {
        /// A request refused below the handlers, which gave no reason.
        BadRequest = "bad_request",
        /// A web form that is stale or did not come from this site.
        CsrfRefused = "csrf_refused",
        EmptyQuery = "empty_query",
        /// A delta's field (its conversation id, its agent's version, ...)
        /// over its limit.
        FieldTooLong = "field_too_long",
        /// A search or list filter value over its limit.
        FilterTooLong = "filter_too_long",
        /// Not an AT Protocol handle.
        HandleInvalid = "handle_invalid",
        /// A handle the PDS does not resolve.
        HandleNotFound = "handle_not_found",
        InvalidBudget = "invalid_budget",
        InvalidCursor = "invalid_cursor",
        InvalidDiversity = "invalid_diversity",
        /// A share's expiry that is not a number of days, or is past.
        InvalidExpiry = "invalid_expiry",
        InvalidFilter = "invalid_filter",
        /// A share given to its own giver.
        InvalidGrantee = "invalid_grantee",
        /// An id that is not one (a run's, a conversation's, a path's), or
        /// too short a prefix.
        InvalidId = "invalid_id",
        InvalidIdempotencyKey = "invalid_idempotency_key",
        /// A page's `limit` of 0.
        InvalidLimit = "invalid_limit",
        /// A body that is not the JSON the route takes.
        InvalidJson = "invalid_json",
        /// A delta whose bytes are not JSON lines.
        InvalidJsonl = "invalid_jsonl",
        InvalidOffset = "invalid_offset",
        /// A query string the route cannot read.
        InvalidQuery = "invalid_query",
        /// A delta whose offsets do not span its bytes.
        InvalidRange = "invalid_range",
        InvalidRecency = "invalid_recency",
        InvalidRedactions = "invalid_redactions",
        /// A share's scope that is not `conversation:`, `run:` or `tag:`.
        InvalidScope = "invalid_scope",
        InvalidSourceIdentity = "invalid_source_identity",
        InvalidTags = "invalid_tags",
        InvalidTimestamp = "invalid_timestamp",
        /// A usage report's time zone that is not UTC, a fixed offset or a
        /// zone of the tz database.
        InvalidTimezone = "invalid_timezone",
        /// A one-time sign-in link used already, expired, or not one.
        LinkUsed = "link_used",
        /// An app password given where the PDS wants the main one.
        MainPasswordRequired = "main_password_required",
        PdsUrlInvalid = "pds_url_invalid",
        QueryTooLong = "query_too_long",
        /// A resume of a conversation someone else wrote (shared with the
        /// caller): it is forked, not continued.
        NotOwner = "not_owner",
        /// A parent run that is not one of the sender's.
        UnknownParent = "unknown_parent",
        /// A tag share that would cover none of the giver's runs.
        UnknownTag = "unknown_tag",
        /// A handle no family member has (a share's grantee, an owner filter).
        UnknownMember = "unknown_member",
        /// A password the PDS refused.
        WrongPassword = "wrong_password",
    }
    Unauthenticated {
        Unauthorized = "unauthorized",
    }
    Forbidden {
        AdminOnly = "admin_only",
        /// Members' usage asked of a central whose config keeps it from
        /// admins.
        MembersUsageOff = "members_usage_off",
    }
    NotFound {
        /// A share, machine, user, page or route.
        NotFound = "not_found",
        RunNotFound = "run_not_found",
        ConversationNotFound = "conversation_not_found",
    }
    MethodNotAllowed {
        MethodNotAllowed = "method_not_allowed",
    }
    Conflict {
        AlreadyRevoked = "already_revoked",
        /// A prefix that names more than one conversation.
        AmbiguousId = "ambiguous_id",
        AppPasswordExists = "app_password_exists",
        /// A delta that starts where no accepted delta of its source ends.
        ChainGap = "chain_gap",
        /// A delta whose `prev_sha256` is not its chain's hash.
        ChainMismatch = "chain_mismatch",
        MachineExists = "machine_exists",
        /// A delta over bytes of its source already accepted.
        RangeOverlap = "range_overlap",
        /// A file already recorded as continuing another conversation.
        ResumeConflict = "resume_conflict",
        /// A run id or idempotency key already used for other bytes.
        RunConflict = "run_conflict",
        UserExists = "user_exists",
    }
    BodyTooLarge {
        PayloadTooLarge = "payload_too_large",
    }
    UriTooLong {
        UriTooLong = "uri_too_long",
    }
    UnreadableBody {
        UnsupportedMediaType = "unsupported_media_type",
    }
    HeadersTooLarge {
        HeadersTooLarge = "headers_too_large",
    }
    Unavailable {
        /// Semantic search or embedding without an embedder.
        EmbedderUnavailable = "embedder_unavailable",
        /// The embedded index, held by another kith-central.
        IndexBusy = "index_busy",
        /// The embedded index, missing or unreadable until a reindex.
        IndexUnavailable = "index_unavailable",
        /// A PDS that answered, but not as it should.
        PdsFailed = "pds_failed",
        PdsUnreachable = "pds_unreachable",
        /// Meilisearch, down or still being set up.
        SearchBackendUnavailable = "search_backend_unavailable",
        /// Requests without credentials have their fill under way.
        Busy = "busy",
    }
    Internal {
        Internal = "internal",
    }
}

/// A code is equal to its name: what a client compares it with.
impl PartialEq<&str> for Code {
    fn eq(&self, name: &&str) -> bool {
        self.name() == *name
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed, or asks for what cannot be; `code` says how.
    #[error("{message}")]
    Invalid { code: Code, message: String },
    /// No caller central knows for this call.
    #[error("missing, unknown or revoked bearer token")]
    Unauthenticated,
    /// A known caller asking for what only an admin may see.
    #[error("only an admin of this kith-central may read {what}")]
    AdminOnly { what: &'static str },
    /// An admin asking for members' usage where the config keeps it off.
    #[error("this kith-central keeps members' usage from admins too ([usage] admin_sees_members = false)")]
    MembersUsageOff,
    /// Also the answer for runs the viewer may not read: the two are
    /// indistinguishable.
    #[error("{what} not found")]
    NotFound { code: Code, what: &'static str },
    /// The request contradicts what central already accepted.
    #[error("{message}")]
    Conflict { code: Code, message: String },
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("this method is not allowed on this path")]
    MethodNotAllowed,
    /// A body central cannot read: not JSON, or an encoding other than gzip or zstd.
    #[error("{message}")]
    UnreadableBody { message: String },
    #[error("the request URI is longer than the limit of {limit} bytes")]
    UriTooLong { limit: usize },
    #[error("the request headers are larger than the limit of {limit} bytes")]
    HeadersTooLarge { limit: usize },
    #[error("the request has more than the limit of {limit} headers")]
    TooManyHeaders { limit: usize },
    /// A dependency (index, embedder, PDS) cannot serve this right now.
    #[error("{message}")]
    Unavailable { code: Code, message: String },
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
    pub(crate) fn invalid(code: Code, message: impl Into<String>) -> Self {
        debug_assert_eq!(code.kind(), Kind::Invalid, "{code:?}");
        Self::Invalid {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn conflict(code: Code, message: impl Into<String>) -> Self {
        debug_assert_eq!(code.kind(), Kind::Conflict, "{code:?}");
        Self::Conflict {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn unavailable(code: Code, message: impl Into<String>) -> Self {
        debug_assert_eq!(code.kind(), Kind::Unavailable, "{code:?}");
        Self::Unavailable {
            code,
            message: message.into(),
        }
    }

    /// A share, machine, user, page or route: `not_found`.
    pub(crate) fn not_found(what: &'static str) -> Self {
        Self::NotFound {
            code: Code::NotFound,
            what,
        }
    }

    pub(crate) fn run_not_found() -> Self {
        Self::NotFound {
            code: Code::RunNotFound,
            what: "run",
        }
    }

    pub(crate) fn conversation_not_found() -> Self {
        Self::NotFound {
            code: Code::ConversationNotFound,
            what: "conversation",
        }
    }

    /// A run's blob that could not be read: gone means the run is (a forget
    /// deletes the blobs just before the rows), anything else is an error.
    pub(crate) fn reading_blob(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::NotFound {
            Self::run_not_found()
        } else {
            e.into()
        }
    }

    pub fn code(&self) -> Code {
        match self {
            Self::Invalid { code, .. }
            | Self::NotFound { code, .. }
            | Self::Conflict { code, .. }
            | Self::Unavailable { code, .. } => *code,
            Self::Unauthenticated => Code::Unauthorized,
            Self::AdminOnly { .. } => Code::AdminOnly,
            Self::MembersUsageOff => Code::MembersUsageOff,
            Self::BodyTooLarge { .. } => Code::PayloadTooLarge,
            Self::MethodNotAllowed => Code::MethodNotAllowed,
            Self::UnreadableBody { .. } => Code::UnsupportedMediaType,
            Self::UriTooLong { .. } => Code::UriTooLong,
            Self::HeadersTooLarge { .. } | Self::TooManyHeaders { .. } => Code::HeadersTooLarge,
            Self::Registry(_) | Self::Io(_) | Self::Json(_) | Self::Internal(_) => Code::Internal,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        self.code().kind()
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

    /// Each name is snake_case and names one code: two codes sent under one
    /// name could not be told apart.
    #[test]
    fn every_code_has_its_own_snake_case_name() {
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.name()).collect();
        for name in &names {
            assert!(
                !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    && !name.starts_with('_')
                    && !name.ends_with('_'),
                "{name}"
            );
        }
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a name given to two codes");
    }

    /// Each variant's code is of the variant's kind.
    #[test]
    fn each_error_carries_a_code_of_its_kind() {
        let cases = [
            (Error::Unauthenticated, Kind::Unauthenticated),
            (Error::AdminOnly { what: "/metrics" }, Kind::Forbidden),
            (Error::not_found("share"), Kind::NotFound),
            (Error::run_not_found(), Kind::NotFound),
            (Error::conversation_not_found(), Kind::NotFound),
            (Error::BodyTooLarge { limit: 1 }, Kind::BodyTooLarge),
            (Error::MethodNotAllowed, Kind::MethodNotAllowed),
            (
                Error::UnreadableBody {
                    message: "zip".into(),
                },
                Kind::UnreadableBody,
            ),
            (Error::UriTooLong { limit: 1 }, Kind::UriTooLong),
            (Error::HeadersTooLarge { limit: 1 }, Kind::HeadersTooLarge),
            (Error::TooManyHeaders { limit: 1 }, Kind::HeadersTooLarge),
            (Error::Internal("boom".into()), Kind::Internal),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e:?}");
        }
        assert_eq!(Error::run_not_found().code(), "run_not_found");
        assert_eq!(
            Error::reading_blob(std::io::ErrorKind::NotFound.into()).code(),
            Code::RunNotFound
        );
    }
}
