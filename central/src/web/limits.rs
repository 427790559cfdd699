//! Failed sign-ins, counted over a sliding window per handle from one
//! address, per address, and per handle from everywhere (a higher bar), so
//! a password cannot be guessed at the speed of the PDS, and one guesser
//! cannot lock the handle's owner out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::lock;

/// How long a failure counts.
pub(crate) const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failures of one handle from one address within the window before that
/// pair is refused.
pub(crate) const PER_HANDLE: usize = 5;
/// Failures from one address within the window before it is refused.
pub(crate) const PER_ADDRESS: usize = 20;
/// Failures of one handle from every address within the window before it
/// is refused everywhere: guessing spread over many addresses.
pub(crate) const PER_HANDLE_EVERYWHERE: usize = 100;

/// Recent failures by key (`pair:…`, `addr:…` or `handle:…`).
#[derive(Default)]
pub struct SignInLimits {
    failures: Mutex<HashMap<String, Vec<Instant>>>,
}

impl SignInLimits {
    /// Starts a sign-in: `Err(wait)` when the handle or the address failed
    /// too often lately; otherwise the attempt counts as a failure from now
    /// until `release` takes it back, so sign-ins sent at once count each
    /// while they wait on the PDS.
    pub fn begin(&self, handle: &str, addr: IpAddr) -> Result<Attempt, Duration> {
        self.begin_at(handle, addr, Instant::now())
    }

    /// Takes back an attempt that did not fail: it signed in, or no password
    /// was tried (the PDS did not answer).
    pub fn release(&self, attempt: Attempt) {
        let mut failures = lock(&self.failures);
        for key in attempt.keys {
            if let Some(at) = failures.get_mut(&key) {
                if let Some(i) = at.iter().position(|t| *t == attempt.at) {
                    at.remove(i);
                }
                if at.is_empty() {
                    failures.remove(&key);
                }
            }
        }
    }

    fn begin_at(&self, handle: &str, addr: IpAddr, now: Instant) -> Result<Attempt, Duration> {
        let mut failures = lock(&self.failures);
        failures.retain(|_, at| {
            at.retain(|t| now.duration_since(*t) < WINDOW);
            !at.is_empty()
        });
        let keys = keys(handle, addr);
        for (key, most) in keys
            .iter()
            .zip([PER_HANDLE, PER_ADDRESS, PER_HANDLE_EVERYWHERE])
        {
            if let Some(at) = failures.get(key).filter(|at| at.len() >= most) {
                let oldest = at[at.len() - most];
                return Err(WINDOW.saturating_sub(now.duration_since(oldest)));
            }
        }
        for key in &keys {
            failures.entry(key.clone()).or_default().push(now);
        }
        Ok(Attempt { keys, at: now })
    }
}

/// The address a sign-in is counted against: the peer's, or, when the peer
/// is this host (a TLS proxy in front of central, as deployed), the address
/// that proxy appended last to `X-Forwarded-For`; otherwise every visitor
/// would share the proxy's address and its limit.
pub(crate) fn client_addr(peer: IpAddr, headers: &axum::http::HeaderMap) -> IpAddr {
    // An IPv4 proxy reaching a `[::]` listener shows as `::ffff:127.0.0.1`.
    if !peer.to_canonical().is_loopback() {
        return peer;
    }
    headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next_back()
        .and_then(|last| last.trim().parse().ok())
        .unwrap_or(peer)
}

/// A sign-in under way, counted as failed until released.
#[derive(Debug)]
pub struct Attempt {
    keys: [String; 3],
    at: Instant,
}

fn keys(handle: &str, addr: IpAddr) -> [String; 3] {
    let handle = handle.to_ascii_lowercase();
    [
        format!("pair:{handle} {addr}"),
        format!("addr:{addr}"),
        format!("handle:{handle}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Behind a proxy on this host, visitors are told apart by the address
    /// the proxy forwards (the last one, which it appended); a header from
    /// a visitor reaching central directly counts for nothing.
    #[test]
    fn the_address_behind_a_local_proxy_is_the_forwarded_one() {
        use axum::http::{HeaderMap, HeaderValue};
        let proxy: IpAddr = [127, 0, 0, 1].into();
        let direct: IpAddr = [192, 0, 2, 7].into();
        let mut headers = HeaderMap::new();
        assert_eq!(client_addr(proxy, &headers), proxy);
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("203.0.113.9, 198.51.100.4"),
        );
        assert_eq!(
            client_addr(proxy, &headers),
            IpAddr::from([198, 51, 100, 4])
        );
        assert_eq!(client_addr(direct, &headers), direct);
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap_or(proxy);
        assert_eq!(
            client_addr(mapped, &headers),
            IpAddr::from([198, 51, 100, 4])
        );
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("not an address"),
        );
        assert_eq!(client_addr(proxy, &headers), proxy);
    }

    #[test]
    fn refuses_a_handle_or_an_address_after_too_many_failures() {
        let limits = SignInLimits::default();
        let home: IpAddr = [127, 0, 0, 1].into();
        let away: IpAddr = [127, 0, 0, 2].into();
        for _ in 0..PER_HANDLE {
            assert!(limits.begin("alice.test", home).is_ok());
        }
        // The handle is refused from that address, in any case; its owner
        // elsewhere still signs in.
        assert!(limits.begin("ALICE.test", home).is_err());
        assert!(limits.begin("alice.test", away).is_ok());
        // Another handle from the same address is not (yet).
        assert!(limits.begin("bob.test", home).is_ok());
        for i in 0..PER_ADDRESS {
            let _ = limits.begin(&format!("guess{i}.test"), away);
        }
        assert!(limits.begin("carol.test", away).is_err());
        assert!(limits.begin("carol.test", home).is_ok());
        // Guessing spread over many addresses stops the handle everywhere.
        let spread = SignInLimits::default();
        for i in 0..PER_HANDLE_EVERYWHERE {
            let addr = IpAddr::from([10, 0, (i / 250) as u8, (i % 250) as u8]);
            assert!(spread.begin("dave.test", addr).is_ok());
        }
        assert!(spread.begin("dave.test", home).is_err());
        // Failures older than the window no longer count.
        let later = Instant::now() + WINDOW;
        assert!(limits.begin_at("alice.test", away, later).is_ok());
    }

    #[test]
    fn attempts_under_way_count_until_released() {
        let limits = SignInLimits::default();
        let home: IpAddr = [127, 0, 0, 1].into();
        // Sign-ins sent at once: each counts before any has an answer.
        let waiting: Vec<Attempt> = (0..PER_HANDLE)
            .map(|_| limits.begin("alice.test", home))
            .collect::<Result<_, _>>()
            .expect("the first five start");
        assert!(limits.begin("alice.test", home).is_err());
        // Released attempts (signed in, or the PDS did not answer) no longer
        // count; the others still do.
        for attempt in waiting.into_iter().take(2) {
            limits.release(attempt);
        }
        assert!(limits.begin("alice.test", home).is_ok());
        assert!(limits.begin("alice.test", home).is_ok());
        assert!(limits.begin("alice.test", home).is_err());
    }
}
