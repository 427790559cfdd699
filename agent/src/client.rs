//! HTTP to central: delivering one spooled delta (`POST /api/runs`, zstd
//! body, run id as `Idempotency-Key`) and checking a token (`GET
//! /api/status`). Every answer is mapped to what the outbox should do; the
//! token goes only into the `Authorization` header.
//!
//! Requests run on the caller's thread, on a current-thread runtime: a hook is
//! a short process on a busy machine, and `reqwest::blocking` hands every
//! request to a runtime thread of its own, which then has to wait its turn
//! for a core (several milliseconds under load, per request).

use std::path::Path;
use std::time::{Duration, Instant};

use kith_proto::{ErrorBody, IngestResponse, StatusResponse};
use reqwest::{Response, StatusCode};
use tokio::runtime::Runtime;

use crate::config::Auth;
use crate::error::{Error, Result};
use crate::outbox::{self, Delivery, Header, Replayed};

#[derive(Debug)]
pub struct Client {
    http: reqwest::Client,
    /// Drives `http` inside each call; nothing runs between calls. Only
    /// `drop` takes it.
    runtime: Option<Runtime>,
    auth: Auth,
}

impl Drop for Client {
    /// Without waiting for what a request left running: a name lookup
    /// (`getaddrinfo`, on a blocking thread) outlives the request's timeout
    /// when DNS does not answer, and a runtime dropped the usual way waits
    /// for it, holding up the hook the agent waits on.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Client {
    pub fn new(auth: &Auth) -> Result<Self> {
        let central = |reason: String| Error::Central {
            url: auth.central_url.clone(),
            reason,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| central(format!("cannot start the HTTP runtime: {e}")))?;
        let mut http =
            reqwest::Client::builder().user_agent(concat!("kith/", env!("CARGO_PKG_VERSION")));
        for cert in trusted_certificates(auth)? {
            http = http.add_root_certificate(cert);
        }
        let http = http.build().map_err(|e| central(without_url(&e)))?;
        Ok(Self {
            http,
            runtime: Some(runtime),
            auth: auth.clone(),
        })
    }

    fn runtime(&self) -> &Runtime {
        self.runtime
            .as_ref()
            .unwrap_or_else(|| unreachable!("only drop takes the runtime"))
    }

    pub fn central_url(&self) -> &str {
        &self.auth.central_url
    }

    /// One delivery, given at most `timeout` (connect to last byte).
    pub fn deliver(&self, header: &Header, zstd_body: Vec<u8>, timeout: Duration) -> Delivery {
        if timeout.is_zero() {
            return Delivery::NotNow("out of time; the rest waits in the outbox".into());
        }
        self.runtime()
            .block_on(self.post_run(header, zstd_body, timeout))
    }

    async fn post_run(&self, header: &Header, zstd_body: Vec<u8>, timeout: Duration) -> Delivery {
        let sent = self
            .http
            .post(format!("{}/api/runs", self.auth.central_url))
            .bearer_auth(self.auth.token.expose())
            .header("Idempotency-Key", &header.run_id)
            .header("Content-Type", "application/json")
            .header("Content-Encoding", "zstd")
            .timeout(timeout)
            .body(zstd_body)
            .send()
            .await;
        let res = match sent {
            Ok(res) => res,
            Err(e) => {
                return Delivery::NotNow(format!(
                    "central at {}: {}",
                    self.auth.central_url,
                    unreachable(&e)
                ))
            }
        };
        let status = res.status();
        if status.is_success() {
            return match res.json::<IngestResponse>().await {
                Ok(receipt) => Delivery::Accepted(receipt),
                Err(e) => Delivery::NotNow(format!(
                    "central sent an unreadable receipt: {}",
                    without_url(&e)
                )),
            };
        }
        let refusal = matches!(
            status,
            StatusCode::BAD_REQUEST | StatusCode::CONFLICT | StatusCode::PAYLOAD_TOO_LARGE
        );
        match (status, error_body(res).await) {
            (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _) => {
                Delivery::Unauthorized(format!(
                "central refused this machine's token ({status}); run `kith login --central {}`",
                self.auth.central_url
            ))
            }
            // Only central's own refusals (with its error body) set deltas
            // aside; its own 5xx holds back one transcript; anything else (a
            // proxy's 404 or 502, 429) is "not now".
            (_, Some(body)) if refusal => Delivery::Refused {
                status: status.as_u16(),
                code: body.error.code,
                message: body.error.message,
            },
            (_, Some(body)) if status.is_server_error() => Delivery::Failed(format!(
                "central answered {status} {}: {}",
                body.error.code, body.error.message
            )),
            (_, Some(body)) => Delivery::NotNow(format!(
                "central answered {status} {}: {}",
                body.error.code, body.error.message
            )),
            (_, None) => Delivery::NotNow(format!(
                "{} answered {status} to POST /api/runs; is that kith-central?",
                self.auth.central_url
            )),
        }
    }

    /// Replays the outbox to central within `budget`.
    pub fn flush(&self, state_dir: &Path, budget: Budget, lock_wait: Duration) -> Result<Replayed> {
        outbox::replay(state_dir, lock_wait, |header, body| {
            self.deliver(header, body, budget.next())
        })
    }

    /// `GET /api/status` with this token: who central thinks we are.
    pub fn status(&self, timeout: Duration) -> Result<StatusResponse> {
        self.runtime().block_on(self.get_status(timeout))
    }

    async fn get_status(&self, timeout: Duration) -> Result<StatusResponse> {
        let central = |reason: String| Error::Central {
            url: self.auth.central_url.clone(),
            reason,
        };
        let res = self
            .http
            .get(format!("{}/api/status", self.auth.central_url))
            .bearer_auth(self.auth.token.expose())
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| central(unreachable(&e)))?;
        let status = res.status();
        if status == StatusCode::UNAUTHORIZED {
            return Err(central("the token was refused (401)".into()));
        }
        if !status.is_success() {
            return Err(central(match error_body(res).await {
                Some(b) => format!("{status} {}: {}", b.error.code, b.error.message),
                None => format!("answered {status} to GET /api/status; is that kith-central?"),
            }));
        }
        res.json()
            .await
            .map_err(|e| central(format!("unreadable status: {}", without_url(&e))))
    }
}

/// Central's `{"error": {"code", "message"}}`, if that is what came back.
async fn error_body(res: Response) -> Option<ErrorBody> {
    res.json::<ErrorBody>().await.ok()
}

/// The certificates `kith login --ca-cert` stored with the login, trusted
/// in addition to the system's store (which honours `SSL_CERT_FILE`) and the
/// bundled roots.
pub fn trusted_certificates(auth: &Auth) -> Result<Vec<reqwest::Certificate>> {
    let Some(pem) = &auth.ca_cert else {
        return Ok(Vec::new());
    };
    parse_certificates(pem.as_bytes()).map_err(|reason| Error::Central {
        url: auth.central_url.clone(),
        reason: format!("the stored CA certificate is unusable ({reason}); run `kith login --ca-cert FILE` again"),
    })
}

/// Every certificate in a PEM bundle; a file with none is an error.
pub fn parse_certificates(pem: &[u8]) -> std::result::Result<Vec<reqwest::Certificate>, String> {
    let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
}

/// Why a request got no answer, in a user's words. A certificate central's
/// is refused for says so (and what to do), not "unreachable".
pub fn unreachable(e: &reqwest::Error) -> String {
    if let Some(cert) = certificate_error(e) {
        format!(
            "its TLS certificate is not trusted ({cert}); if a private CA signed it, \
             run `kith login --ca-cert FILE` or set SSL_CERT_FILE"
        )
    } else if e.is_timeout() {
        "no answer in time".into()
    } else if e.is_connect() {
        "unreachable".into()
    } else {
        without_url(e)
    }
}

/// The TLS certificate error behind `e`, if that is why it failed. It
/// travels wrapped (reqwest, hyper, `io::Error`s from the connector), and
/// `io::Error::source` skips its payload, so an `io::Error` is looked into.
fn certificate_error(e: &reqwest::Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(tls @ rustls::Error::InvalidCertificate(_)) =
            err.downcast_ref::<rustls::Error>()
        {
            return Some(tls.to_string());
        }
        next = match err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(payload) => Some(payload),
            None => err.source(),
        };
    }
    None
}

/// reqwest's messages repeat the URL; keep the reason.
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(url) = e.url() {
        s = s.replace(&format!(" for url ({url})"), "");
    }
    s
}

/// A name as one URL path segment: a person may type anything.
pub(crate) fn path_part(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// A time budget shared by several requests (a hook has ~1.5 s in all).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    until: Instant,
    per_request: Duration,
}

impl Budget {
    pub fn new(total: Duration, per_request: Duration) -> Self {
        Self {
            until: Instant::now() + total,
            per_request,
        }
    }

    /// The timeout for the next request: what is left, at most `per_request`.
    pub fn next(&self) -> Duration {
        self.until
            .saturating_duration_since(Instant::now())
            .min(self.per_request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A lookup still running (a resolver that never answers) does not hold
    /// up dropping the client, so the hook ends when its time is up.
    #[test]
    fn dropping_a_client_leaves_a_stuck_lookup_behind() -> anyhow::Result<()> {
        let client = Client::new(&Auth {
            central_url: "http://central.invalid".into(),
            token: crate::config::Secret::new("kith_test".into()),
            ca_cert: None,
        })?;
        let released = Arc::new(AtomicBool::new(false));
        let stuck = released.clone();
        client.runtime().spawn_blocking(move || {
            while !stuck.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(client);
            let _ = tx.send(());
        });
        let dropped = rx.recv_timeout(Duration::from_secs(30)).is_ok();
        released.store(true, Ordering::SeqCst);
        assert!(dropped, "dropping the client waited for the blocking task");
        Ok(())
    }
}
