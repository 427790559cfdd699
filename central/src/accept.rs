//! Accepting connections, over TCP or TLS: at most `MAX_CONNECTIONS` open
//! at once, a deadline for each request's headers (which also closes a
//! connection that sends nothing, at first or between requests), and a
//! graceful end that lets requests in flight finish. (A body that stops
//! arriving, or trickles in, is timed by `http_limits`.)
//!
//! Without the deadline, idle sockets (opened and never written, as a
//! slowloris client does) would each hold a task and a descriptor for ever;
//! without the cap, enough of them exhaust the descriptors and `/healthz`
//! stops answering.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// Connections served at once; the next waits in the listen backlog until
/// one ends (an idle one ends after `HEADER_READ_TIMEOUT`).
pub(crate) const MAX_CONNECTIONS: usize = 1024;

/// How long a client has to send a request's headers, counted from the
/// connection's start or the end of its previous response.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on every connection `listener` accepts until `shutdown`
/// resolves, then waits for the requests in flight.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // Dropping `stop` tells every connection to finish; each holds a
    // `running` until it has, which `done` waits for.
    let (stop, stopping) = watch::channel(());
    let (done, running) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors, say: do not spin on it.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Small responses (a header write then a body write) must not wait
        // on Nagle + the client's delayed ACK (~40 ms each).
        let _ = tcp.set_nodelay(true);
        // Handlers that count by address (failed sign-ins) read the peer
        // with `ConnectInfo`.
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            },
        ));
        let tls = tls.clone();
        let stopping = stopping.clone();
        let running = running.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _running = running;
            let Some(acceptor) = tls else {
                return connection(tcp, false, service, stopping).await;
            };
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(&b"h2"[..]);
                    connection(stream, h2, service, stopping).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "tls handshake failed"),
                Err(_) => tracing::debug!(%peer, "tls handshake timed out"),
            }
        });
    }
    drop(stop);
    drop(running);
    done.closed().await;
}

/// One connection, HTTP/2 when TLS negotiated it, else HTTP/1.1 (the
/// version is known up front: sniffing it would wait on an idle client
/// with no deadline).
async fn connection<I, S>(
    io: I,
    h2: bool,
    service: TowerToHyperService<S>,
    mut stopping: watch::Receiver<()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let stop = stopping.changed();
    tokio::pin!(stop);
    let mut stopped = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = &mut stop, if !stopped => {
                stopped = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}
