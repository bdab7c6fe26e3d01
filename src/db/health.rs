//! Whether the database answers. While it does not, a replica claims
//! nothing and runs nothing; one prober reconnects with backoff and jitter,
//! and every state change is logged once, not every tick.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::backoff::Backoff;
use tracing::{info, warn};

use crate::db::{DbError, Store};
use crate::telemetry::{self, Liveness};

/// The database as the daemon last saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DbState {
    /// Answering.
    Up,
    /// Unreachable since the last error.
    Down,
}

/// Shared view of the database's health.
pub(crate) struct Health {
    state: watch::Sender<DbState>,
    liveness: Arc<Liveness>,
}

/// While the database is up, it is pinged this often, so that `/healthz`
/// knows it answers even when no job fires.
const PING_EVERY: Duration = Duration::from_secs(10);

/// The first pause between reconnection attempts; it doubles up to
/// [`MAX_BACKOFF`], each with ±25 % jitter so that replicas do not knock
/// together.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(15);

impl Health {
    /// Starts out `Up`: the daemon only starts after the database answered.
    pub(crate) fn new(liveness: Arc<Liveness>) -> Self {
        liveness.database_answered();
        telemetry::database_up(true);
        Health {
            state: watch::Sender::new(DbState::Up),
            liveness,
        }
    }

    /// Whether the database is believed reachable.
    pub(crate) fn is_up(&self) -> bool {
        *self.state.borrow() == DbState::Up
    }

    /// Follows state changes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<DbState> {
        self.state.subscribe()
    }

    /// A call succeeded.
    pub(crate) fn report_ok(&self) {
        self.liveness.database_answered();
        self.state.send_if_modified(|state| {
            let changed = *state == DbState::Down;
            if changed {
                info!("database reachable again: claiming resumes, catch-up applies");
                telemetry::database_up(true);
                *state = DbState::Up;
            }
            changed
        });
    }

    /// A call failed: if the database is unreachable, say so once.
    pub(crate) fn report_error(&self, error: &DbError) {
        telemetry::database_error();
        if !error.is_unreachable() {
            return;
        }
        self.state.send_if_modified(|state| {
            let changed = *state == DbState::Up;
            if changed {
                warn!("database unreachable: no claims and no runs until it answers ({error})");
                telemetry::database_up(false);
                self.liveness.database_unreachable();
                *state = DbState::Down;
            }
            changed
        });
    }

    /// Pings the database: every [`PING_EVERY`] while it is up, and while
    /// it is down with backoff and jitter until it answers. Runs until
    /// `stop` resolves.
    pub(crate) async fn probe(&self, store: Store, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let mut states = self.subscribe();
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF).jitter(0.25);
        loop {
            let pause = if self.is_up() {
                backoff.reset();
                PING_EVERY
            } else {
                backoff.next_pause()
            };
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(pause) => {}
                // Gone down meanwhile: start backing off from the first step.
                _ = states.wait_for(|s| *s == DbState::Down), if self.is_up() => {
                    backoff.reset();
                    continue;
                }
            }
            match store.ping().await {
                Ok(_) => self.report_ok(),
                Err(e) => self.report_error(&e),
            }
        }
    }
}
