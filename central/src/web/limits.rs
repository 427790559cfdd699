//! Failed sign-ins, counted per handle and per address over a sliding
//! window, so a password cannot be guessed at the speed of the PDS.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::state::lock;

/// How long a failure counts.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failures of one handle within the window before it is refused.
pub const PER_HANDLE: usize = 5;
/// Failures from one address within the window before it is refused.
pub const PER_ADDRESS: usize = 20;

/// Recent failures by key (`handle:…` or `addr:…`).
#[derive(Default)]
pub struct SignInLimits {
    failures: Mutex<HashMap<String, Vec<Instant>>>,
}

impl SignInLimits {
    /// `Err(wait)` when the handle or the address failed too often lately.
    pub fn check(&self, handle: &str, addr: IpAddr) -> Result<(), Duration> {
        self.check_at(handle, addr, Instant::now())
    }

    /// Counts one failed sign-in.
    pub fn failed(&self, handle: &str, addr: IpAddr) {
        let now = Instant::now();
        let mut failures = lock(&self.failures);
        for key in keys(handle, addr) {
            failures.entry(key).or_default().push(now);
        }
    }

    fn check_at(&self, handle: &str, addr: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut failures = lock(&self.failures);
        failures.retain(|_, at| {
            at.retain(|t| now.duration_since(*t) < WINDOW);
            !at.is_empty()
        });
        let [by_handle, by_addr] = keys(handle, addr);
        for (key, most) in [(by_handle, PER_HANDLE), (by_addr, PER_ADDRESS)] {
            if let Some(at) = failures.get(&key).filter(|at| at.len() >= most) {
                let oldest = at[at.len() - most];
                return Err(WINDOW.saturating_sub(now.duration_since(oldest)));
            }
        }
        Ok(())
    }
}

fn keys(handle: &str, addr: IpAddr) -> [String; 2] {
    [
        format!("handle:{}", handle.to_ascii_lowercase()),
        format!("addr:{addr}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_handle_or_an_address_after_too_many_failures() {
        let limits = SignInLimits::default();
        let home: IpAddr = [127, 0, 0, 1].into();
        let away: IpAddr = [127, 0, 0, 2].into();
        for _ in 0..PER_HANDLE {
            assert!(limits.check("alice.test", home).is_ok());
            limits.failed("alice.test", home);
        }
        // The handle is refused from anywhere, in any case.
        assert!(limits.check("alice.test", away).is_err());
        assert!(limits.check("ALICE.test", home).is_err());
        // Another handle from the same address is not (yet).
        assert!(limits.check("bob.test", home).is_ok());
        for i in 0..PER_ADDRESS {
            limits.failed(&format!("guess{i}.test"), away);
        }
        assert!(limits.check("carol.test", away).is_err());
        assert!(limits.check("carol.test", home).is_ok());
        // Failures older than the window no longer count.
        let later = Instant::now() + WINDOW;
        assert!(limits.check_at("alice.test", away, later).is_ok());
    }
}
