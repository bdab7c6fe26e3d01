//! Sign-in throttled per client address: a few wrong tokens are free, then
//! each one more doubles the wait before the next try (from 1 s, at most
//! [`MAX_WAIT`]); a right token clears the address. The table is this
//! replica's, in memory, bounded.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Wrong tokens an address may send before it waits.
const FREE_FAILURES: u32 = 5;
/// The longest wait.
const MAX_WAIT: Duration = Duration::from_secs(300);
/// An address with no wrong token for this long is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(900);
/// The most addresses remembered.
const MAX_ADDRESSES: usize = 10_000;

#[derive(Clone, Copy, Debug)]
struct Failures {
    count: u32,
    last: Instant,
    until: Instant,
}

/// The failures of each client address.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    clients: Mutex<HashMap<IpAddr, Failures>>,
}

impl Throttle {
    /// How long `client` must still wait before its next try, if at all.
    pub(crate) fn wait(&self, client: IpAddr) -> Option<Duration> {
        let clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        clients
            .get(&client)
            .filter(|f| f.until > now)
            .map(|f| f.until - now)
    }

    /// Counts a wrong token from `client`; returns how long it now waits.
    pub(crate) fn failed(&self, client: IpAddr) -> Duration {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if clients.len() >= MAX_ADDRESSES && !clients.contains_key(&client) {
            clients.retain(|_, f| now.duration_since(f.last) < FORGET_AFTER || f.until > now);
        }
        let entry = clients.entry(client).or_insert(Failures {
            count: 0,
            last: now,
            until: now,
        });
        if now.duration_since(entry.last) >= FORGET_AFTER {
            entry.count = 0;
        }
        entry.count += 1;
        entry.last = now;
        let wait = match entry.count.checked_sub(FREE_FAILURES + 1) {
            None => Duration::ZERO,
            Some(doublings) => Duration::from_secs(1)
                .checked_mul(1_u32 << doublings.min(16))
                .unwrap_or(MAX_WAIT)
                .min(MAX_WAIT),
        };
        entry.until = now + wait;
        wait
    }

    /// A right token from `client`: its failures are forgotten.
    pub(crate) fn succeeded(&self, client: IpAddr) {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients.remove(&client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_few_failures_are_free_then_each_doubles_the_wait() {
        let throttle = Throttle::default();
        let client: IpAddr = "192.0.2.7".parse().expect("address");
        let other: IpAddr = "192.0.2.8".parse().expect("address");
        for _ in 0..FREE_FAILURES {
            assert_eq!(throttle.failed(client), Duration::ZERO);
            assert_eq!(throttle.wait(client), None);
        }
        assert_eq!(throttle.failed(client), Duration::from_secs(1));
        assert!(throttle.wait(client).is_some());
        assert_eq!(throttle.wait(other), None);
        assert_eq!(throttle.failed(client), Duration::from_secs(2));
        assert_eq!(throttle.failed(client), Duration::from_secs(4));
        for _ in 0..20 {
            throttle.failed(client);
        }
        assert_eq!(throttle.wait(client), Some(MAX_WAIT));
        tokio::time::advance(MAX_WAIT).await;
        assert_eq!(throttle.wait(client), None);
        throttle.succeeded(client);
        assert_eq!(throttle.failed(client), Duration::ZERO);
    }
}
