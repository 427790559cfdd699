//! Who is asking, from the `Authorization` header alone: the bearer token's
//! sha256 names a machine row, which the registry turns into the request's
//! `Viewer` (no PDS call). Every read of runs takes that `Viewer`.

use crate::error::Error;
use crate::registry::Viewer;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;

/// A bearer token. `Debug` never shows it.
pub(crate) struct Token(String);

impl Token {
    pub(crate) fn new(s: String) -> Self {
        Self(s)
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// What the registry stores and looks up: hex sha256 of the token.
    pub(crate) fn sha256(&self) -> String {
        kith_shared::hash::sha256_hex(self.0.as_bytes())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Error;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            // The scheme is case-insensitive (RFC 9110 11.1): `bearer` too.
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| Token::new(t.trim().to_owned()))
            .filter(|t| !t.expose().is_empty())
            .ok_or(Error::Unauthenticated)?;
        // Off the async workers: a registry read can wait behind a long one.
        let registry = state.clone();
        let viewer = tokio::task::spawn_blocking(move || {
            registry.registry().viewer_by_token(&token.sha256())
        })
        .await??
        .ok_or(Error::Unauthenticated)?;
        if let Some(machine) = viewer.machine_id() {
            state.note_seen(machine);
        }
        Ok(viewer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_debug_hides_the_secret() {
        let t = Token::new("kith_supersecret".into());
        assert_eq!(format!("{t:?}"), "Token(***)");
        assert_eq!(t.sha256().len(), 64);
        assert!(!t.sha256().contains("supersecret"));
    }
}
