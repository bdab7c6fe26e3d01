//! This replica's reading of the database's clock. The tick loops sleep
//! until each instant by the database's clock, not the host's, so that a
//! host whose clock has drifted fires with the others instead of early or
//! late. The offset is estimated at start, every [`SYNC_EVERY`], and when the
//! database answers again after an outage, each time from a few samples of
//! which the one with the shortest round trip wins (as NTP does).

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use tracing::{info, warn};

use crate::db::health::{DbState, Health};
use crate::db::{DbError, Store};
use crate::schedule::{DatabaseClock, Offset};
use crate::telemetry;

/// How often the offset is estimated again.
const SYNC_EVERY: Duration = Duration::from_secs(30);

/// Readings of the database's clock per estimate.
const SAMPLES: usize = 5;

/// An offset this large is worth a warning: it is the host's clock that is
/// wrong, and its jobs' own idea of the time with it.
const WARN_ABOVE: TimeDelta = TimeDelta::seconds(1);

/// Estimates and applies the offset, and says so when it crosses
/// [`WARN_ABOVE`] either way.
pub(crate) struct ClockSync {
    clock: Arc<DatabaseClock>,
    store: Store,
    beyond: bool,
}

impl ClockSync {
    /// Keeps `clock` in step with the database behind `pool`.
    pub(crate) fn new(clock: Arc<DatabaseClock>, store: Store) -> Self {
        ClockSync {
            clock,
            store,
            beyond: false,
        }
    }

    /// Estimates the offset once and applies it.
    pub(crate) async fn sync(&mut self) -> Result<Offset, DbError> {
        let host = self.clock.host().clone();
        let estimate = self
            .store
            .call("reading the database's clock", move |conn| {
                crate::db::clock::estimate_offset(conn, &*host, SAMPLES)
            })
            .await?;
        self.clock.set(estimate);
        telemetry::clock_offset(estimate);
        let beyond = estimate.offset.abs() > WARN_ABOVE;
        if beyond && !self.beyond {
            warn!(
                offset = %describe(estimate),
                "this host's clock is more than {}s from the database's; the host's clock is the likely \
                 cause (is NTP running?). Jobs still fire on the database's clock, but see this host's time",
                WARN_ABOVE.num_seconds()
            );
        } else if !beyond && self.beyond {
            info!(offset = %describe(estimate), "this host's clock is back within {}s of the database's", WARN_ABOVE.num_seconds());
        }
        self.beyond = beyond;
        Ok(estimate)
    }

    /// Estimates again every [`SYNC_EVERY`] and when the database is back
    /// after an outage, until `stop` resolves.
    pub(crate) async fn run(
        mut self,
        health: Arc<Health>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut states = health.subscribe();
        loop {
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(SYNC_EVERY) => {}
                changed = states.changed() => {
                    if changed.is_err() || *states.borrow_and_update() != DbState::Up {
                        continue;
                    }
                }
            }
            // A failure is the store's to tell; the next estimate comes
            // with the database's return.
            let _ = self.sync().await;
        }
    }
}

/// How far the host's clock is ahead of the database's, and the error
/// bound: `+3.000s (±0.2ms)` for a host 3 s fast, `-0.004s …` for one
/// behind.
pub(crate) fn describe(estimate: Offset) -> String {
    let micros = -estimate.offset.num_microseconds().unwrap_or(i64::MAX);
    format!(
        "{}{:.3}s (±{:.2}ms)",
        if micros < 0 { "-" } else { "+" },
        micros.unsigned_abs() as f64 / 1e6,
        estimate.error.as_secs_f64() * 1e3
    )
}
