//! Who is asking: the `Viewer` that the bearer token resolves to. It is built
//! from the `Authorization` header alone (sha256 of the token -> machine row,
//! no PDS call) and every read of runs takes it.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use kith_shared::ids::{MachineId, UserId};

use crate::error::Error;
use crate::state::AppState;

/// The authenticated (user, machine) behind a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub user_id: UserId,
    pub machine_id: MachineId,
    pub machine_name: String,
    pub handle: String,
    pub is_admin: bool,
    /// Live grants this user received, as of this request.
    pub grants: Vec<crate::registry::Grant>,
}

/// A bearer token. `Debug` never shows it.
pub struct Token(String);

impl Token {
    pub fn new(s: String) -> Self {
        Self(s)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What the registry stores and looks up: hex sha256 of the token.
    pub fn sha256(&self) -> String {
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
            .ok_or(Error::Unauthorized)?;
        let viewer = state
            .registry()
            .viewer_by_token(&token.sha256())?
            .ok_or(Error::Unauthorized)?;
        state.note_seen(&viewer.machine_id);
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
