//! HTTP to central, the one way kith asks it. `Central` builds every
//! request (central's URL; this machine's token, only ever in the
//! `Authorization` header; the private CA `kith login --ca-cert` stored,
//! trusted beside the system's roots) and reads every failed answer into the
//! crate's one error: `Error::Central` when nothing usable came back,
//! `Error::Answered` with central's error body (`kith_proto::ErrorBody`).
//! `Client` runs it on the caller's thread, for every command but `kith
//! mcp` (which has a runtime of its own), and on it: delivering one spooled
//! delta (`POST /api/runs`, zstd body, run id as `Idempotency-Key`), every
//! answer mapped to what the outbox should do, and checking a token (`GET
//! /api/status`).
//!
//! Requests run on the caller's thread, on a current-thread runtime: a hook is
//! a short process on a busy machine, and `reqwest::blocking` hands every
//! request to a runtime thread of its own, which then has to wait its turn
//! for a core (several milliseconds under load, per request).

use std::future::Future;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use kith_proto::{ErrorBody, IngestResponse, StatusResponse};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use tokio::runtime::Runtime;

use crate::config::{Auth, Secret};
use crate::error::{Error, Result};
use crate::outbox::{self, Delivery, Header, Replayed};

/// How long a request may take, connect to last byte, unless its caller
/// says otherwise.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Central, asked with this machine's token. Cheap to clone (the
/// connection pool is shared).
#[derive(Debug, Clone)]
pub(crate) struct Central {
    http: reqwest::Client,
    /// Without a trailing `/`: paths are appended.
    url: String,
    token: Secret,
    /// Each request's time, unless the request sets its own.
    timeout: Duration,
}

impl Central {
    pub(crate) fn new(auth: &Auth) -> Result<Self> {
        refuse_plain_http_off_loopback(&auth.central_url)?;
        let mut http =
            reqwest::Client::builder().user_agent(concat!("kith/", env!("CARGO_PKG_VERSION")));
        for cert in trusted_certificates(auth)? {
            http = http.add_root_certificate(cert);
        }
        let http = http.build().map_err(|e| Error::Central {
            url: auth.central_url.clone(),
            reason: without_url(&e),
        })?;
        Ok(Self {
            http,
            url: auth.central_url.trim_end_matches('/').to_owned(),
            token: auth.token.clone(),
            timeout: TIMEOUT,
        })
    }

    /// The same central, each request given at most `timeout`.
    pub(crate) fn within(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The address of `path` on central (which starts with `/`).
    pub(crate) fn link(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    pub(crate) fn get(&self, path: &str) -> RequestBuilder {
        self.request(Method::GET, path)
    }

    pub(crate) fn post(&self, path: &str) -> RequestBuilder {
        self.request(Method::POST, path)
    }

    pub(crate) fn delete(&self, path: &str) -> RequestBuilder {
        self.request(Method::DELETE, path)
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, self.link(path))
            .bearer_auth(self.token.expose())
            .timeout(self.timeout)
    }

    /// Sends `req` (built by this `Central`); any answer but a success is
    /// central's refusal.
    pub(crate) async fn send(&self, req: RequestBuilder) -> Result<Response> {
        let res = req.send().await.map_err(|e| self.failed(unreachable(&e)))?;
        let status = res.status();
        if status.is_success() {
            return Ok(res);
        }
        Err(match error_body(res).await {
            Some(body) => Error::Answered {
                status: status.as_u16(),
                code: body.error.code,
                message: body.error.message,
            },
            None => Error::Answered {
                status: status.as_u16(),
                code: format!("http_{}", status.as_u16()),
                message: format!("central answered {status}"),
            },
        })
    }

    /// Sends `req` and reads its answer as a `T`.
    pub(crate) async fn json<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T> {
        self.send(req)
            .await?
            .json()
            .await
            .map_err(|e| self.failed(format!("unreadable answer: {}", without_url(&e))))
    }

    /// Nothing usable came back, for `reason`.
    fn failed(&self, reason: String) -> Error {
        Error::Central {
            url: self.url.clone(),
            reason,
        }
    }
}

/// `Central` for a caller without a runtime: each call runs on the
/// caller's thread.
#[derive(Debug)]
pub(crate) struct Client {
    central: Central,
    /// Drives `central` inside each call; nothing runs between calls. Only
    /// `drop` takes it.
    runtime: Option<Runtime>,
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
    pub(crate) fn new(auth: &Auth) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::Central {
                url: auth.central_url.clone(),
                reason: format!("cannot start the HTTP runtime: {e}"),
            })?;
        Ok(Self {
            central: Central::new(auth)?,
            runtime: Some(runtime),
        })
    }

    /// The same client, each request given at most `timeout`.
    pub(crate) fn within(mut self, timeout: Duration) -> Self {
        self.central = self.central.clone().within(timeout);
        self
    }

    fn runtime(&self) -> &Runtime {
        self.runtime
            .as_ref()
            .unwrap_or_else(|| unreachable!("only drop takes the runtime"))
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime().block_on(future)
    }

    pub(crate) fn link(&self, path: &str) -> String {
        self.central.link(path)
    }

    pub(crate) fn get(&self, path: &str) -> RequestBuilder {
        self.central.get(path)
    }

    pub(crate) fn post(&self, path: &str) -> RequestBuilder {
        self.central.post(path)
    }

    pub(crate) fn delete(&self, path: &str) -> RequestBuilder {
        self.central.delete(path)
    }

    /// `Central::send`, the answer's body left unread.
    pub(crate) fn send(&self, req: RequestBuilder) -> Result<()> {
        self.block_on(self.central.send(req)).map(drop)
    }

    /// `Central::json`.
    pub(crate) fn json<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T> {
        self.block_on(self.central.json(req))
    }

    /// The whole body of the answer to `req`.
    pub(crate) fn bytes(&self, req: RequestBuilder) -> Result<Vec<u8>> {
        self.block_on(async {
            let res = self.central.send(req).await?;
            let bytes = res.bytes().await.map_err(|e| {
                self.central
                    .failed(format!("the answer broke off: {}", without_url(&e)))
            })?;
            Ok(bytes.to_vec())
        })
    }

    /// The body of the answer to `req`, read as it arrives.
    pub(crate) fn body(&self, req: RequestBuilder) -> Result<Body<'_>> {
        let res = self.block_on(self.central.send(req))?;
        Ok(Body {
            client: self,
            res,
            chunk: Vec::new(),
            at: 0,
        })
    }

    /// One delivery, given at most `timeout` (connect to last byte).
    pub(crate) fn deliver(
        &self,
        header: &Header,
        zstd_body: Vec<u8>,
        timeout: Duration,
    ) -> Delivery {
        if timeout.is_zero() {
            return Delivery::NotNow("out of time; the rest waits in the outbox".into());
        }
        self.block_on(self.post_run(header, zstd_body, timeout))
    }

    async fn post_run(&self, header: &Header, zstd_body: Vec<u8>, timeout: Duration) -> Delivery {
        let sent = self
            .central
            .post("/api/runs")
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
                    self.central.url,
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
                self.central.url
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
                self.central.url
            )),
        }
    }

    /// Replays the outbox to central within `budget`.
    pub(crate) fn flush(
        &self,
        state_dir: &Path,
        budget: Budget,
        lock_wait: Duration,
    ) -> Result<Replayed> {
        outbox::replay(state_dir, lock_wait, |header, body| {
            self.deliver(header, body, budget.next())
        })
    }

    /// `GET /api/status` with this token: who central thinks we are.
    pub(crate) fn status(&self, timeout: Duration) -> Result<StatusResponse> {
        self.block_on(self.get_status(timeout))
    }

    async fn get_status(&self, timeout: Duration) -> Result<StatusResponse> {
        let central = |reason: String| self.central.failed(reason);
        let res = self
            .central
            .get("/api/status")
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

/// An answer's body read as it arrives, each chunk fetched on the client's
/// thread when the last one is used up.
pub(crate) struct Body<'a> {
    client: &'a Client,
    res: Response,
    chunk: Vec<u8>,
    /// How much of `chunk` was read.
    at: usize,
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.client.block_on(self.res.chunk()) {
                Ok(Some(chunk)) => {
                    self.chunk = chunk.to_vec();
                    self.at = 0;
                }
                Ok(None) => return Ok(0),
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Central's `{"error": {"code", "message"}}`, if that is what came back.
async fn error_body(res: Response) -> Option<ErrorBody> {
    res.json::<ErrorBody>().await.ok()
}

/// Refuses to send the token as plain HTTP anywhere but this machine (the
/// token would cross the network readable by anyone on the way), unless
/// `KITH_INSECURE_HTTP=1` says the network is the person's own; central
/// refuses to serve that way by the same rule.
fn refuse_plain_http_off_loopback(central_url: &str) -> Result<()> {
    let Ok(url) = reqwest::Url::parse(central_url) else {
        return Ok(()); // reqwest names a URL it cannot use
    };
    let host = url.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    let allowed = std::env::var("KITH_INSECURE_HTTP").is_ok_and(|v| v == "1");
    if url.scheme() == "http" && !loopback && !allowed {
        return Err(Error::Refused(format!(
            "central at {central_url} is plain HTTP off this machine: the token would cross the network in the clear; use https (kith login --central https://...), or set KITH_INSECURE_HTTP=1 if the network is yours alone"
        )));
    }
    Ok(())
}

/// The certificates `kith login --ca-cert` stored with the login, trusted
/// in addition to the system's store (which honours `SSL_CERT_FILE`) and the
/// bundled roots.
pub(crate) fn trusted_certificates(auth: &Auth) -> Result<Vec<reqwest::Certificate>> {
    let Some(pem) = &auth.ca_cert else {
        return Ok(Vec::new());
    };
    parse_certificates(pem.as_bytes()).map_err(|reason| Error::Central {
        url: auth.central_url.clone(),
        reason: format!("the stored CA certificate is unusable ({reason}); run `kith login --ca-cert FILE` again"),
    })
}

/// Every certificate in a PEM bundle; a file with none is an error.
pub(crate) fn parse_certificates(
    pem: &[u8],
) -> std::result::Result<Vec<reqwest::Certificate>, String> {
    let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
}

/// Why a request got no answer, in a user's words. A certificate central's
/// is refused for says so (and what to do), not "unreachable".
pub(crate) fn unreachable(e: &reqwest::Error) -> String {
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
pub(crate) struct Budget {
    until: Instant,
    per_request: Duration,
}

impl Budget {
    pub(crate) fn new(total: Duration, per_request: Duration) -> Self {
        Self {
            until: Instant::now() + total,
            per_request,
        }
    }

    /// The timeout for the next request: what is left, at most `per_request`.
    pub(crate) fn next(&self) -> Duration {
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

    #[test]
    fn the_token_goes_as_plain_http_only_to_this_machine() {
        let client = |url: &str| {
            Client::new(&Auth {
                central_url: url.into(),
                token: crate::config::Secret::new("kith_test".into()),
                ca_cert: None,
            })
        };
        for ok in [
            "http://127.0.0.1:7878",
            "http://localhost:7878",
            "http://[::1]:7878",
            "https://kith.example.com",
        ] {
            assert!(client(ok).is_ok(), "{ok}");
        }
        for refused in ["http://kith.example.com", "http://192.168.1.20:7878"] {
            let e = client(refused)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains("plain HTTP off this machine") && !e.contains("kith_test"),
                "{refused}: {e}"
            );
        }
    }

    /// A lookup still running (a resolver that never answers) does not hold
    /// up dropping the client, so the hook ends when its time is up.
    #[test]
    fn dropping_a_client_leaves_a_stuck_lookup_behind() -> anyhow::Result<()> {
        let client = Client::new(&Auth {
            central_url: "https://central.invalid".into(),
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
