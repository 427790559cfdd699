//! The family's AT Protocol PDS as the identity provider of machines: handle
//! -> DID, and the app passwords that become machine tokens (created and
//! revoked with the user's main password, checked with one `createSession`).
//!
//! Admin commands call this, and the web page's sign-in form (one
//! `createSession` with the member's password); no other request does (a
//! token or session is checked against its sha256 in the registry). Passwords travel as
//! [`Password`], whose `Debug` is redacted, and no error message carries one:
//! errors name the PDS, the handle and the XRPC error code, nothing the caller
//! typed as a secret.

use std::fmt;
use std::time::Duration;

use atrium_api::agent::atp_agent::store::MemorySessionStore;
use atrium_api::agent::atp_agent::AtpAgent;
use atrium_api::client::AtpServiceClient;
use atrium_api::com::atproto::{identity, server};
use atrium_api::types::string::Handle;
use atrium_api::xrpc::error::{Error as XrpcError, XrpcErrorKind};
use atrium_xrpc_client::reqwest::{ReqwestClient, ReqwestClientBuilder};

use crate::error::{Code, Error, Result};

/// A password (the account's main password or an app password). `Debug`
/// never shows it; [`Password::expose`] is the one way to read it.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    pub fn new(s: String) -> Self {
        Self(s)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(***)")
    }
}

/// An app password the PDS just created: shown to the user once, stored by
/// central only as its sha256.
#[derive(Debug)]
pub struct AppPassword {
    /// The name the PDS knows it by (what `revokeAppPassword` takes).
    pub name: String,
    pub secret: Password,
}

/// How long one PDS call may take. `createSession` alone takes >= 350 ms on
/// purpose; a PDS that does not answer within this is treated as down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The DID `handle` resolves to on the PDS at `pds_url`
/// (`com.atproto.identity.resolveHandle`).
pub async fn resolve_handle(pds_url: &str, handle: &str) -> Result<String> {
    let base = base_url(pds_url)?;
    let parsed = parse_handle(handle)?;
    let client = AtpServiceClient::new(xrpc_client(&base)?);
    let res = client
        .service
        .com
        .atproto
        .identity
        .resolve_handle(identity::resolve_handle::ParametersData { handle: parsed }.into())
        .await;
    match res {
        Ok(out) => Ok(out.data.did.as_str().to_owned()),
        Err(e) => Err(match classify(&e) {
            Failure::Status(400 | 404, _) => Error::invalid(
                Code::HandleNotFound,
                format!("the handle {handle} does not resolve on the PDS at {base}"),
            ),
            f => failed(&base, "resolveHandle", f),
        }),
    }
}

/// Logs in with the main password and creates an app password called `name`.
pub async fn create_app_password(
    pds_url: &str,
    handle: &str,
    main_password: &Password,
    name: &str,
) -> Result<AppPassword> {
    let base = base_url(pds_url)?;
    let agent = login(&base, handle, main_password).await?;
    let res = agent
        .api
        .com
        .atproto
        .server
        .create_app_password(
            server::create_app_password::InputData {
                name: name.to_owned(),
                privileged: None,
            }
            .into(),
        )
        .await;
    match res {
        Ok(out) => Ok(AppPassword {
            name: out.data.name,
            secret: Password::new(out.data.password),
        }),
        Err(e) => Err(match classify(&e) {
            Failure::Status(400, code) if code == "InvalidToken" => Error::invalid(
                Code::MainPasswordRequired,
                format!(
                    "the PDS at {base} will not create app passwords from this login: \
                     give {handle}'s main password, not an app password"
                ),
            ),
            // The PDS answers a duplicate name with a bare 500; confirm it
            // before saying so.
            Failure::Status(500, code) => {
                if has_app_password(&agent, name).await {
                    Error::conflict(
                        Code::AppPasswordExists,
                        format!(
                            "an app password with this name already exists on the PDS ({name:?})"
                        ),
                    )
                } else {
                    failed(&base, "createAppPassword", Failure::Status(500, code))
                }
            }
            f => failed(&base, "createAppPassword", f),
        }),
    }
}

/// One `createSession` with an app password (or, at web sign-in, the
/// member's own password); the DID it logs in as.
pub async fn check_app_password(
    pds_url: &str,
    handle: &str,
    app_password: &Password,
) -> Result<String> {
    let base = base_url(pds_url)?;
    let agent = login(&base, handle, app_password).await?;
    match agent.did().await {
        Some(did) => Ok(did.as_str().to_owned()),
        None => Err(Error::unavailable(
            Code::PdsFailed,
            format!("the PDS at {base} returned a session without a DID"),
        )),
    }
}

/// Logs in with the main password and revokes the app password `name`
/// (a name the PDS does not know is not an error there).
pub async fn revoke_app_password(
    pds_url: &str,
    handle: &str,
    main_password: &Password,
    name: &str,
) -> Result<()> {
    let base = base_url(pds_url)?;
    let agent = login(&base, handle, main_password).await?;
    agent
        .api
        .com
        .atproto
        .server
        .revoke_app_password(
            server::revoke_app_password::InputData {
                name: name.to_owned(),
            }
            .into(),
        )
        .await
        .map_err(|e| failed(&base, "revokeAppPassword", classify(&e)))
}

type Agent = AtpAgent<MemorySessionStore, ReqwestClient>;

async fn login(base: &str, handle: &str, password: &Password) -> Result<Agent> {
    parse_handle(handle)?;
    let agent = AtpAgent::new(xrpc_client(base)?, MemorySessionStore::default());
    match agent.login(handle, password.expose()).await {
        Ok(_) => Ok(agent),
        Err(e) => Err(match classify(&e) {
            Failure::Status(401, _) => Error::invalid(
                Code::WrongPassword,
                format!(
                    "the PDS at {base} refused the password for {handle} (AuthenticationRequired)"
                ),
            ),
            f => failed(base, "createSession", f),
        }),
    }
}

async fn has_app_password(agent: &Agent, name: &str) -> bool {
    match agent.api.com.atproto.server.list_app_passwords().await {
        Ok(out) => out.data.passwords.iter().any(|p| p.name == name),
        Err(_) => false,
    }
}

fn xrpc_client(base: &str) -> Result<ReqwestClient> {
    let http = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| Error::Internal(format!("cannot build an HTTP client: {e}")))?;
    Ok(ReqwestClientBuilder::new(base).client(http).build())
}

/// `pds_url` without a trailing slash, if it is an http(s) URL.
fn base_url(pds_url: &str) -> Result<String> {
    let base = pds_url.trim().trim_end_matches('/');
    let rest = base
        .strip_prefix("https://")
        .or_else(|| base.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => {
            Ok(base.to_owned())
        }
        _ => Err(Error::invalid(
            Code::PdsUrlInvalid,
            format!("the PDS URL must look like https://pds.example.com, not {pds_url:?}"),
        )),
    }
}

/// Whether `s` is an AT Protocol handle (at most 253 bytes, domain-like).
pub fn is_handle(s: &str) -> bool {
    Handle::new(s.to_owned()).is_ok()
}

fn parse_handle(handle: &str) -> Result<Handle> {
    Handle::new(handle.to_owned()).map_err(|why| {
        Error::invalid(
            Code::HandleInvalid,
            format!("{handle:?} is not an AT Protocol handle ({why})"),
        )
    })
}

/// What went wrong with one XRPC call, reduced to what the messages need.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// No HTTP answer (refused, timed out, not HTTP): the reason, from the
    /// HTTP client (it names the URL, never a request body).
    Unreachable(String),
    /// An HTTP error status with the XRPC error code, if any.
    Status(u16, String),
    /// An answer that is not the XRPC response asked for (not a PDS?).
    NotXrpc,
}

fn classify<E: fmt::Debug + fmt::Display>(e: &XrpcError<E>) -> Failure {
    match e {
        XrpcError::XrpcResponse(r) => {
            let code = match &r.error {
                Some(XrpcErrorKind::Undefined(body)) => body.error.clone().unwrap_or_default(),
                Some(XrpcErrorKind::Custom(custom)) => custom
                    .to_string()
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                None => String::new(),
            };
            Failure::Status(r.status.as_u16(), code)
        }
        XrpcError::Authentication(_) => Failure::Status(401, "AuthenticationRequired".into()),
        XrpcError::HttpClient(inner) => Failure::Unreachable(error_chain(inner.as_ref())),
        XrpcError::HttpRequest(inner) => Failure::Unreachable(inner.to_string()),
        XrpcError::SerdeJson(_)
        | XrpcError::SerdeHtmlForm(_)
        | XrpcError::UnexpectedResponseType => Failure::NotXrpc,
    }
}

/// The error and its sources on one line (reqwest's own message is only
/// "error sending request").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// The error for a failure no caller gave a more specific meaning to.
fn failed(base: &str, call: &str, f: Failure) -> Error {
    let message = match f {
        Failure::Unreachable(reason) => {
            return Error::unavailable(
                Code::PdsUnreachable,
                format!("cannot reach the PDS at {base}: {reason}"),
            )
        }
        Failure::Status(status, code) if code.is_empty() => {
            format!("the PDS at {base} failed {call}: HTTP {status}")
        }
        Failure::Status(status, code) => {
            format!("the PDS at {base} failed {call}: HTTP {status} ({code})")
        }
        Failure::NotXrpc => {
            format!("{base} answered {call} with something else than XRPC; is it a PDS?")
        }
    };
    Error::unavailable(Code::PdsFailed, message)
}
