//! The start throttle (`[daemon] max_starts_per_second`): a replica starts
//! its catch-up, backfill and retry runs at most this many a second, one
//! every `1 / max_starts_per_second`, so that a replica back from an
//! outage or a deploy, with many of them due at once, does not start them
//! all in the same moment. Scheduled instants on time never ask it: they
//! are never held back, and the runs it holds back come after them. Each
//! start it holds back is counted in `replicron_throttled_starts_total`.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::DEFAULT_STARTS_PER_SECOND;

/// What a start the throttle paces is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A missed instant caught up at start or after an outage.
    CatchUp,
    /// A backfill's instant.
    Backfill,
    /// A failed run's next attempt.
    Retry,
}

impl Kind {
    /// Its label in `replicron_throttled_starts_total`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::CatchUp => "catch_up",
            Kind::Backfill => "backfill",
            Kind::Retry => "retry",
        }
    }
}

/// One replica's throttle.
#[derive(Debug)]
pub(crate) struct Throttle {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Starts a second.
    per_second: u32,
    /// The earliest moment of the next start.
    next: Option<Instant>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(DEFAULT_STARTS_PER_SECOND)
    }
}

impl Throttle {
    /// A throttle of `per_second` starts a second (at least one).
    pub(crate) fn new(per_second: u32) -> Self {
        Throttle {
            state: Mutex::new(State {
                per_second: per_second.max(1),
                next: None,
            }),
        }
    }

    /// Sets its starts a second (a reload's `[daemon]`).
    pub(crate) fn set(&self, per_second: u32) {
        self.lock().per_second = per_second.max(1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The moment a start asked for now may happen, taken: now, or
    /// `1 / per_second` after the start before it.
    fn take(&self) -> Instant {
        let now = Instant::now();
        let mut state = self.lock();
        let interval = Duration::from_secs(1) / state.per_second;
        let at = state.next.map_or(now, |next| next.max(now));
        state.next = Some(at + interval);
        at
    }

    /// Waits for the next start of `kind` the throttle allows.
    pub(crate) async fn start(&self, kind: Kind) {
        let at = self.take();
        if at > Instant::now() {
            crate::telemetry::throttled_start(kind.as_str());
            tracing::debug!(
                kind = kind.as_str(),
                "start held back by max_starts_per_second"
            );
            tokio::time::sleep_until(at).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts come one every `1 / per_second`, however many ask at once,
    /// and the first one at once; a rate set later applies to the next.
    #[tokio::test(start_paused = true)]
    async fn starts_are_paced() {
        let throttle = std::sync::Arc::new(Throttle::new(10));
        let begun = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..30 {
            let throttle = throttle.clone();
            tasks.push(tokio::spawn(async move {
                throttle.start(Kind::CatchUp).await;
                Instant::now()
            }));
        }
        let mut at = Vec::new();
        for task in tasks {
            at.push(task.await.expect("task") - begun);
        }
        at.sort();
        assert_eq!(at[0], Duration::ZERO);
        assert_eq!(at[29], Duration::from_millis(2900));
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(100), "{at:?}");
        }
        // Idle for longer than its interval: the next start is at once.
        tokio::time::sleep(Duration::from_secs(5)).await;
        throttle.set(1000);
        let now = Instant::now();
        throttle.start(Kind::Retry).await;
        throttle.start(Kind::Retry).await;
        assert_eq!(Instant::now() - now, Duration::from_millis(1));
    }
}
