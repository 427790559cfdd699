//! The forms (`POST`) and the sign-in: with the member's PDS password or a
//! one-time link, then sign out (here or everywhere), share a conversation,
//! revoke a share, revoke a machine. Every form but the sign-in carries the
//! session's CSRF token; the sign-in forms (password, and the link's
//! confirmation) carry their own cookie's, so no other site can sign a
//! browser in to someone else's account.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use kith_proto::ShareRequest;
use kith_shared::ids::UserId;
use serde::Deserialize;

use super::session::{clear_cookie, Secret, WebSession, COOKIE, COOKIE_MAX_AGE, SIGNIN_COOKIE};
use super::view::{SignInLinkPage, SignInPage};
use super::{render, PageResult};
use crate::error::{Code, Error};
use crate::pds::Password;
use crate::registry::{Revoked, SignedIn};
use crate::state::AppState;

/// How long the sign-in form's cookie lives.
const SIGNIN_COOKIE_MAX_AGE: u32 = 60 * 60;
/// How long a sign-in for a handle central does not know waits before it is
/// refused: about what a PDS's `createSession` takes to refuse a password.
const UNKNOWN_HANDLE_WAIT: std::time::Duration = std::time::Duration::from_millis(400);

/// The sign-in form, with a fresh CSRF cookie.
pub(crate) async fn signin_form() -> PageResult {
    signin_page(StatusCode::OK, None, "")
}

fn signin_page(status: StatusCode, error: Option<String>, handle: &str) -> PageResult {
    let secret = Secret::generate()?;
    let mut res = render(&SignInPage {
        chrome: None,
        error,
        csrf: secret.csrf(),
        handle: handle.to_owned(),
    });
    *res.status_mut() = status;
    set_cookie(
        &mut res,
        &secret.cookie(SIGNIN_COOKIE, SIGNIN_COOKIE_MAX_AGE),
    );
    Ok(res)
}

/// The sign-in form's fields. `Debug` is not derived: it holds a password.
#[derive(Deserialize)]
pub(crate) struct SignInForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    handle: String,
    #[serde(default)]
    password: String,
}

/// Signs in with the handle's PDS: one `createSession` there; on success a
/// session here. Failures are counted per handle and per address.
pub(crate) async fn signin(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> PageResult {
    signin_cookie(&headers)?.check_csrf(&form.csrf)?;
    let handle = form.handle.trim().trim_start_matches('@').to_owned();
    let password = Password::new(form.password);
    // Not a handle: nothing to try, count or show back.
    if !crate::pds::is_handle(&handle) {
        return signin_page(
            StatusCode::BAD_REQUEST,
            Some("That is not a handle: it looks like alice.example.com.".to_owned()),
            "",
        );
    }
    let limits = state.sign_in_limits();
    let attempt = match limits.begin(&handle, super::limits::client_addr(peer.ip(), &headers)) {
        Ok(attempt) => attempt,
        Err(wait) => {
            let minutes = wait.as_secs().div_ceil(60).max(1);
            return signin_page(
                StatusCode::TOO_MANY_REQUESTS,
                Some(format!(
                    "Too many failed sign-ins for this handle or from this address; try again in {minutes} minutes."
                )),
                &handle,
            );
        }
    };
    // From here the attempt counts as failed unless released.
    let refused = || {
        signin_page(
            StatusCode::UNAUTHORIZED,
            Some("Wrong handle or password.".to_owned()),
            &handle,
        )
    };
    let s = state.clone();
    let h = handle.clone();
    let Some(user) = tokio::task::spawn_blocking(move || s.registry().user_by_handle(&h)).await??
    else {
        // As long as a PDS takes to refuse a password: how soon the answer
        // comes must not tell an outsider which handles are the family's.
        tokio::time::sleep(UNKNOWN_HANDLE_WAIT).await;
        return refused();
    };
    let Some(pds_url) = &user.pds_url else {
        limits.release(attempt);
        return signin_page(
            StatusCode::BAD_REQUEST,
            Some(format!(
                "{handle} has no PDS: run `kith web` on one of your registered machines to sign in."
            )),
            &handle,
        );
    };
    let did = match crate::pds::check_app_password(pds_url, &handle, &password).await {
        Ok(did) => did,
        Err(Error::Invalid {
            code: Code::WrongPassword,
            ..
        }) => return refused(),
        Err(e @ Error::Unavailable { .. }) => {
            limits.release(attempt);
            // Its address and the reason are the operator's to read, not a
            // visitor's who is not signed in.
            tracing::warn!(handle = %handle, error = %e, "a PDS did not answer a sign-in");
            return signin_page(
                StatusCode::SERVICE_UNAVAILABLE,
                Some("Your PDS did not answer; try again in a moment.".to_owned()),
                &handle,
            );
        }
        Err(e) => return Err(e.into()),
    };
    if user.did.as_ref().is_some_and(|known| *known != did) {
        tracing::warn!(handle = %handle, "the PDS signed in a different DID than the registry holds");
        return refused();
    }
    // A machine's token is an app password the PDS takes too: the session
    // it opens is that machine's (it ends when the machine is revoked), and
    // a revoked machine's signs nothing in, even while the PDS still takes it.
    let s = state.clone();
    let hash = crate::auth::Token::new(password.expose().to_owned()).sha256();
    let user_id = user.id.clone();
    let machine =
        match tokio::task::spawn_blocking(move || s.registry().machine_of_token(&user_id, &hash))
            .await??
        {
            Some((_, true)) => return refused(),
            Some((machine, false)) => Some(machine),
            None => None,
        };
    limits.release(attempt);
    tracing::info!(handle = %handle, "web sign-in");
    let who = SignedIn {
        user: user.id,
        machine,
    };
    start_session(&state, who).await
}

/// A new session: the cookie, and on to the search page.
async fn start_session(state: &AppState, who: SignedIn) -> PageResult {
    let secret = Secret::generate()?;
    let hash = secret.sha256();
    let s = state.clone();
    tokio::task::spawn_blocking(move || s.registry().start_session(&hash, &who)).await??;
    let mut res = Redirect::to("/").into_response();
    set_cookie(&mut res, &secret.cookie(COOKIE, COOKIE_MAX_AGE));
    set_cookie(&mut res, &clear_cookie(SIGNIN_COOKIE));
    Ok(res)
}

#[derive(Deserialize)]
pub(crate) struct LinkQuery {
    #[serde(default)]
    token: String,
}

fn link_used() -> Error {
    Error::invalid(
        Code::LinkUsed,
        "this sign-in link was used already, expired, is not one, or its machine was revoked; run `kith web` again",
    )
}

/// The page a one-time link from `kith web` opens (valid minutes): whom it
/// signs in, and a button that does. Opening it uses nothing, so a link
/// previewer that fetches it does not spend it, and a link sent by someone
/// else says whose account it is before anything happens.
pub(crate) async fn signin_link_form(
    State(state): State<AppState>,
    Query(q): Query<LinkQuery>,
) -> PageResult {
    let hash = Secret::parse(&q.token).ok_or_else(link_used)?.sha256();
    let handle = tokio::task::spawn_blocking(move || state.registry().sign_in_link_handle(&hash))
        .await??
        .ok_or_else(link_used)?;
    let secret = Secret::generate()?;
    let mut res = render(&SignInLinkPage {
        chrome: None,
        handle,
        token: q.token,
        csrf: secret.csrf(),
    });
    set_cookie(
        &mut res,
        &secret.cookie(SIGNIN_COOKIE, SIGNIN_COOKIE_MAX_AGE),
    );
    Ok(res)
}

#[derive(Deserialize)]
pub(crate) struct LinkForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
}

/// Signs in with a one-time link, from its page's form (used once).
pub(crate) async fn signin_link(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LinkForm>,
) -> PageResult {
    signin_cookie(&headers)?.check_csrf(&form.csrf)?;
    let hash = Secret::parse(&form.token).ok_or_else(link_used)?.sha256();
    let s = state.clone();
    let who = tokio::task::spawn_blocking(move || s.registry().redeem_sign_in_link(&hash))
        .await??
        .ok_or_else(link_used)?;
    start_session(&state, who).await
}

/// The sign-in forms' cookie, or why a form is refused without it.
fn signin_cookie(headers: &HeaderMap) -> Result<Secret, Error> {
    Secret::from_cookie(headers, SIGNIN_COOKIE).ok_or_else(|| {
        Error::invalid(
            Code::CsrfRefused,
            "the sign-in form expired or did not come from this site; reload it",
        )
    })
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// Ends this browser's session.
pub(crate) async fn signout(
    State(state): State<AppState>,
    session: WebSession,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    session.secret.check_csrf(&form.csrf)?;
    let hash = session.secret.sha256();
    tokio::task::spawn_blocking(move || state.registry().end_session(&hash)).await??;
    let mut res = Redirect::to("/signin").into_response();
    set_cookie(&mut res, &clear_cookie(COOKIE));
    Ok(res)
}

/// Ends every session of this member, on every browser.
pub(crate) async fn signout_everywhere(
    State(state): State<AppState>,
    session: WebSession,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    session.secret.check_csrf(&form.csrf)?;
    let user = session.viewer.user_id().clone();
    tokio::task::spawn_blocking(move || state.registry().end_sessions_of(&user)).await??;
    let mut res = Redirect::to("/signin").into_response();
    set_cookie(&mut res, &clear_cookie(COOKIE));
    Ok(res)
}

#[derive(Deserialize)]
pub(crate) struct ShareForm {
    #[serde(default)]
    csrf: String,
    conversation: String,
    with: String,
    /// Days until the grant ends; empty for never.
    #[serde(default)]
    expires: String,
    /// `on` when the checkbox is ticked.
    #[serde(default)]
    follow: Option<String>,
}

/// Shares one of my conversations, as `POST /api/shares` does.
pub(crate) async fn share(
    State(state): State<AppState>,
    session: WebSession,
    Form(form): Form<ShareForm>,
) -> PageResult {
    session.secret.check_csrf(&form.csrf)?;
    let expires_at = match form.expires.trim() {
        "" => None,
        days => {
            let days: i64 = days
                .parse()
                .ok()
                .filter(|d| (1..=3650).contains(d))
                .ok_or_else(|| Error::invalid(Code::InvalidExpiry, "expiry is a number of days"))?;
            let at = time::OffsetDateTime::now_utc() + time::Duration::days(days);
            Some(kith_shared::timestamp::render(at))
        }
    };
    let req = ShareRequest {
        scope: format!("conversation:{}", form.conversation.trim()),
        with: form.with.trim().to_owned(),
        expires_at,
        follow: form.follow.is_some(),
    };
    let viewer = session.viewer;
    tokio::task::spawn_blocking(move || crate::sharing::grant(state.registry(), &viewer, &req))
        .await??;
    Ok(Redirect::to("/shares").into_response())
}

/// Revokes one of my shares.
pub(crate) async fn revoke_share(
    State(state): State<AppState>,
    session: WebSession,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    session.secret.check_csrf(&form.csrf)?;
    let viewer = session.viewer;
    let revoked =
        tokio::task::spawn_blocking(move || state.registry().revoke_share(&viewer, &id)).await??;
    match revoked {
        Revoked::Now | Revoked::Already => Ok(Redirect::to("/shares").into_response()),
        Revoked::NoSuchGrant => Err(Error::not_found("share").into()),
    }
}

#[derive(Deserialize)]
pub(crate) struct MachineForm {
    #[serde(default)]
    csrf: String,
    name: String,
    /// Whose machine (a user id): another's only for an admin.
    #[serde(default)]
    user: Option<String>,
}

/// Revokes one of my machines, or (an admin) anyone's: its token stops
/// working at once.
pub(crate) async fn revoke_machine(
    State(state): State<AppState>,
    session: WebSession,
    Form(form): Form<MachineForm>,
) -> PageResult {
    session.secret.check_csrf(&form.csrf)?;
    let me = session.viewer.user_id().clone();
    let user = match form.user.as_deref() {
        None => me.clone(),
        Some(id) if id == me.as_str() => me.clone(),
        // Another's machine: "not found" unless an admin asks.
        Some(id) if session.viewer.is_admin() => {
            UserId::parse(id).map_err(|_| Error::not_found("machine"))?
        }
        Some(_) => return Err(Error::not_found("machine").into()),
    };
    let back = if user == me { "/machines" } else { "/admin" };
    let now = kith_shared::timestamp::now();
    let revoked = tokio::task::spawn_blocking(move || {
        state.registry().revoke_machine(&user, &form.name, &now)
    })
    .await??;
    if !revoked {
        return Err(Error::not_found("machine").into());
    }
    Ok(Redirect::to(back).into_response())
}

fn set_cookie(res: &mut Response, cookie: &str) {
    if let Ok(value) = cookie.parse() {
        res.headers_mut().append(header::SET_COOKIE, value);
    }
}
