//! The browser's session: a random 256-bit id in an `HttpOnly; Secure;
//! SameSite=Lax` cookie, of which the registry keeps only the sha256. The
//! CSRF token of a session's forms is derived from the id, so a page from
//! elsewhere, which cannot read the cookie, cannot make one.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use kith_shared::hash::sha256_hex;

use super::PageError;
use crate::error::{Code, Error, Result};
use crate::registry::{Viewer, SESSION_MAX_DAYS};
use crate::state::AppState;

/// The session cookie.
pub(crate) const COOKIE: &str = "kith_session";
/// The sign-in form's own cookie: its CSRF token before there is a session.
pub(crate) const SIGNIN_COOKIE: &str = "kith_signin";

/// A secret a browser holds: 32 random bytes, hex. `Debug` never shows it.
pub(crate) struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Secret {
    pub(crate) fn generate() -> Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
        Ok(Self(hex::encode(bytes)))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// What the registry stores and looks up.
    pub(crate) fn sha256(&self) -> String {
        sha256_hex(self.0.as_bytes())
    }

    /// The CSRF token of forms shown to the holder of this secret.
    pub(crate) fn csrf(&self) -> String {
        sha256_hex(format!("kith-csrf:{}", self.0).as_bytes())
    }

    /// `Set-Cookie` for this secret under `name`, for `max_age` seconds.
    pub(crate) fn cookie(&self, name: &str, max_age: u32) -> String {
        format!(
            "{name}={}; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age={max_age}",
            self.0
        )
    }

    /// The secret in a request's cookie `name`, if it looks like one.
    pub(crate) fn from_cookie(headers: &HeaderMap, name: &str) -> Option<Self> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| Self::parse(v))
    }

    /// A secret as the browser sends it back, if it looks like one.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(s.to_ascii_lowercase()))
    }

    /// Refuses a form whose CSRF token is not this secret's.
    pub(crate) fn check_csrf(&self, given: &str) -> Result<()> {
        let want = self.csrf();
        // Compared without an early exit, so timing says nothing.
        let same = want.len() == given.len()
            && want
                .bytes()
                .zip(given.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if same {
            Ok(())
        } else {
            Err(Error::invalid(
                Code::CsrfRefused,
                "this form is stale or did not come from this site; reload the page and try again",
            ))
        }
    }
}

/// `Set-Cookie` that removes the cookie `name`.
pub(crate) fn clear_cookie(name: &str) -> String {
    format!("{name}=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0")
}

/// How long the browser keeps the session cookie: as long as a session may
/// last at all (it is set once, at sign-in); the registry ends a session
/// idle for `SESSION_IDLE_DAYS` sooner.
pub(crate) const COOKIE_MAX_AGE: u32 = SESSION_MAX_DAYS * 24 * 60 * 60;

/// A signed-in browser: its viewer and its session's secret. Without a
/// live session, the page redirects to the sign-in form.
pub(crate) struct WebSession {
    pub viewer: Viewer,
    pub secret: Secret,
}

impl WebSession {
    pub(crate) fn csrf(&self) -> String {
        self.secret.csrf()
    }
}

impl FromRequestParts<AppState> for WebSession {
    type Rejection = PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let secret = Secret::from_cookie(&parts.headers, COOKIE).ok_or(Error::Unauthenticated)?;
        let hash = secret.sha256();
        let state = state.clone();
        let viewer = tokio::task::spawn_blocking(move || state.registry().viewer_by_session(&hash))
            .await??
            .ok_or(Error::Unauthenticated)?;
        Ok(Self { viewer, secret })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_cookie_is_read_back_and_the_csrf_token_checked() {
        let s = Secret::generate().unwrap_or_else(|_| Secret("0".repeat(64)));
        assert_eq!(format!("{s:?}"), "Secret(***)");
        let cookie = s.cookie(COOKIE, COOKIE_MAX_AGE);
        for flag in ["HttpOnly", "Secure", "SameSite=Lax", "Path=/"] {
            assert!(cookie.contains(flag), "{cookie}");
        }
        // Kept as long as a session may last (set once, at sign-in): a daily
        // user is not signed out when the idle limit passes after sign-in.
        assert!(cookie.ends_with("Max-Age=7776000"), "{cookie}");
        let mut headers = HeaderMap::new();
        let sent = format!("other=1; {COOKIE}={}", s.expose());
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&sent).unwrap_or(HeaderValue::from_static("")),
        );
        let back = Secret::from_cookie(&headers, COOKIE).map(|b| b.sha256());
        assert_eq!(back, Some(s.sha256()));
        assert!(Secret::from_cookie(&headers, SIGNIN_COOKIE).is_none());
        assert!(s.check_csrf(&s.csrf()).is_ok());
        assert!(s.check_csrf("").is_err());
        assert!(s.check_csrf(&s.sha256()).is_err());
    }
}
