//! Accepting connections, over TCP or TLS: at most `MAX_CONNECTIONS` open
//! at once, a deadline for each request's headers (which also closes a
//! connection that sends nothing, at first or between requests), and a
//! graceful end that lets requests in flight finish. (A body that stops
//! arriving, or trickles in, is timed by `http_limits`.)
//!
//! Without the deadline, idle sockets (opened and never written, as a
//! slowloris client does) would each hold a task and a descriptor for ever;
//! without the cap, enough of them exhaust the descriptors and `/healthz`
//! stops answering. HTTP/2 has no header deadline between requests, so
//! every connection is also closed (gracefully: a response under way
//! finishes) once it has had no request in flight for `IDLE_TIMEOUT`, and
//! any connection once it is `MAX_CONNECTION_AGE` old; one that does not
//! close when asked (an HTTP/2 client that never answers the goodbye's
//! ping) is cut off `CLOSE_GRACE` later, once nothing is in flight. With
//! every seat taken, the connection idle longest (none in flight) is
//! closed for the next: idle connections opened again as fast as they
//! close cannot keep a client with a request out.

use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Connections served at once from one address: one client (or one
/// household behind one address) cannot take every connection. A reverse
/// proxy on the same host connects from 127.0.0.1 or ::1, which are not
/// capped (the proxy limits its own clients).
pub(crate) const MAX_CONNECTIONS_PER_ADDRESS: usize = 64;

/// How long a client has to send a request's headers, counted from the
/// connection's start or the end of its previous response.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may stay open with no request in flight.
pub(crate) const IDLE_TIMEOUT: Duration = HEADER_READ_TIMEOUT;

/// How long a connection asked to close for idleness or age may take to.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How long any connection stays open; a client reconnects.
pub(crate) const MAX_CONNECTION_AGE: Duration = Duration::from_secs(30 * 60);

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
    let per_address = Arc::new(PerAddress::default());
    let open = Arc::new(Open::default());
    // Dropping `stop` tells every connection to finish; each holds a
    // `running` until it has, which `done` waits for.
    let (stop, stopping) = watch::channel(());
    let (done, running) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        // Full: the connection idle longest makes room (a client waiting
        // for a request to be served needs the seat more than one that
        // sends nothing).
        if permits.available_permits() == 0 {
            open.evict_most_idle();
        }
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
        let Some(seat) = per_address.enter(peer.ip()) else {
            tracing::debug!(%peer, "connection refused: too many from this address");
            continue;
        };
        // Small responses (a header write then a body write) must not wait
        // on Nagle + the client's delayed ACK (~40 ms each).
        let _ = tcp.set_nodelay(true);
        // Handlers that count by address (failed sign-ins) read the peer
        // with `ConnectInfo`.
        let activity = Arc::new(Activity::new());
        let counted = activity.clone();
        let seated = open.seat(activity.clone());
        let service = TowerToHyperService::new(
            app.clone()
                .map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer));
                    req
                })
                .map_future(move |answer| {
                    let request = counted.begin();
                    async move {
                        let answered = answer.await;
                        drop(request);
                        answered
                    }
                }),
        );
        let tls = tls.clone();
        let stopping = stopping.clone();
        let running = running.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _seat = seat;
            let _running = running;
            let evicted = seated.evicted.clone();
            let served = async move {
                let Some(acceptor) = tls else {
                    return connection(tcp, false, service, stopping, activity).await;
                };
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let h2 = stream.get_ref().1.alpn_protocol() == Some(&b"h2"[..]);
                        connection(stream, h2, service, stopping, activity).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "tls handshake failed"),
                    Err(_) => tracing::debug!(%peer, "tls handshake timed out"),
                }
            };
            tokio::select! {
                () = served => {}
                () = evicted.notified() => {
                    tracing::debug!(%peer, "an idle connection made room for a new one");
                }
            }
            drop(seated);
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
    activity: Arc<Activity>,
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
        .header_read_timeout(HEADER_READ_TIMEOUT)
        // Past `MAX_HEADERS`, `routes` refuses with kith's error body.
        .max_headers(crate::http_limits::PARSED_HEADERS);
    let builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    // (An HTTP/2 connection's frames never look like HTTP/1.1's refusals.)
    let io = crate::refusal_bodies::RefusalBodies::new(io);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let stop = stopping.changed();
    tokio::pin!(stop);
    let mut stopped = false;
    // When an idle or old connection was asked to close.
    let mut closing: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
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
            _ = tick.tick() => {
                if !stopped
                    && (activity.idle_for() >= IDLE_TIMEOUT || activity.age() >= MAX_CONNECTION_AGE)
                {
                    stopped = true;
                    closing = Some(Instant::now());
                    conn.as_mut().graceful_shutdown();
                }
                // HTTP/2's goodbye waits for the client to answer a ping: a
                // client that never does is cut off, once nothing is in flight.
                if closing.is_some_and(|at| at.elapsed() >= CLOSE_GRACE)
                    && activity.idle_for() > Duration::ZERO
                {
                    tracing::debug!("an idle connection did not close when asked: cut off");
                    return;
                }
            }
        }
    }
}

/// Every open connection's activity, to find the one idle longest when
/// all seats are taken.
#[derive(Default)]
struct Open(std::sync::Mutex<OpenSeats>);

#[derive(Default)]
struct OpenSeats {
    next: u64,
    seats: std::collections::HashMap<u64, (Arc<Activity>, Arc<tokio::sync::Notify>)>,
}

/// An open connection's place in `Open`; left when it drops.
struct Seated {
    open: Arc<Open>,
    id: u64,
    /// Told when the connection is to close to make room.
    evicted: Arc<tokio::sync::Notify>,
}

impl Open {
    fn seat(self: &Arc<Self>, activity: Arc<Activity>) -> Seated {
        let evicted = Arc::new(tokio::sync::Notify::new());
        let mut open = crate::sync::lock(&self.0);
        let id = open.next;
        open.next += 1;
        open.seats.insert(id, (activity, evicted.clone()));
        Seated {
            open: self.clone(),
            id,
            evicted,
        }
    }

    /// Closes the connection with no request in flight that has been idle
    /// longest, if there is one (a request under way is never cut).
    fn evict_most_idle(&self) {
        let mut open = crate::sync::lock(&self.0);
        let most_idle = open
            .seats
            .iter()
            .map(|(id, (activity, _))| (activity.idle_for(), *id))
            .filter(|(idle, _)| *idle > Duration::ZERO)
            .max();
        if let Some((_, id)) = most_idle {
            if let Some((_, evicted)) = open.seats.remove(&id) {
                evicted.notify_one();
            }
        }
    }
}

impl Drop for Seated {
    fn drop(&mut self) {
        crate::sync::lock(&self.open.0).seats.remove(&self.id);
    }
}

/// The open connections of each address, but the host's own.
#[derive(Default)]
struct PerAddress(std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>);

/// One open connection of a capped address; counted out when it drops.
struct Counted(Arc<PerAddress>, IpAddr);

impl PerAddress {
    /// A connection from `ip`, unless the address has its fill.
    fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<Option<Counted>> {
        let ip = ip.to_canonical();
        if ip.is_loopback() && (ip == IpAddr::from([127, 0, 0, 1]) || ip.is_ipv6()) {
            return Some(None);
        }
        let mut open = crate::sync::lock(&self.0);
        let n = open.entry(ip).or_default();
        if *n >= MAX_CONNECTIONS_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(Some(Counted(self.clone(), ip)))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut open = crate::sync::lock(&self.0 .0);
        if let Some(n) = open.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.1);
            }
        }
    }
}

/// One connection's requests: how many are in flight, and since when it
/// has had none.
pub(crate) struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds from `opened` to the end of the last request.
    last_ms: AtomicU64,
}

/// A request in flight; its end is stamped when it drops.
pub(crate) struct InFlight(Arc<Activity>);

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// How long the connection has had no request in flight (zero while
    /// one is).
    pub(crate) fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::SeqCst));
        self.age().saturating_sub(last)
    }

    pub(crate) fn age(&self) -> Duration {
        self.opened.elapsed()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = u64::try_from(self.0.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_ms.store(now, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_has_its_fill_of_connections_but_the_hosts_own() {
        let all = Arc::new(PerAddress::default());
        let lan = IpAddr::from([192, 168, 1, 20]);
        let held: Vec<_> = (0..MAX_CONNECTIONS_PER_ADDRESS)
            .map(|_| all.enter(lan))
            .collect();
        assert!(held.iter().all(|c| matches!(c, Some(Some(_)))));
        assert!(all.enter(lan).is_none(), "one past the cap");
        assert!(matches!(
            all.enter(IpAddr::from([192, 168, 1, 21])),
            Some(Some(_))
        ));
        for local in [IpAddr::from([127, 0, 0, 1]), "::1".parse().unwrap_or(lan)] {
            assert!(matches!(all.enter(local), Some(None)), "{local}");
        }
        // Another loopback address is another client.
        assert!(matches!(
            all.enter(IpAddr::from([127, 0, 0, 2])),
            Some(Some(_))
        ));
        drop(held);
        assert!(matches!(all.enter(lan), Some(Some(_))), "counted out");
    }

    #[test]
    fn a_connection_is_idle_only_with_no_request_in_flight() {
        let activity = Arc::new(Activity::new());
        std::thread::sleep(Duration::from_millis(30));
        assert!(activity.idle_for() >= Duration::from_millis(30));
        let request = activity.begin();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(activity.idle_for(), Duration::ZERO);
        drop(request);
        assert!(activity.idle_for() < Duration::from_millis(30));
        assert!(activity.age() >= Duration::from_millis(60));
    }
}
