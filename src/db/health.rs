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

    /// Pings the database through `store` (the engine's, which tells this
    /// tracker how each call went): every [`PING_EVERY`] while it is up,
    /// and while it is down with backoff and jitter until it answers. Runs
    /// until `stop` resolves.
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
            // The store tells the outcome (telling it here too would count
            // a failed ping twice in replicron_database_errors_total).
            let _ = store.ping().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{DbState, Health};
    use crate::db::DbError;
    use crate::telemetry::{Liveness, Unhealthy};

    fn unreachable() -> DbError {
        DbError::Timeout {
            context: "claiming".to_string(),
        }
    }

    fn refused() -> DbError {
        DbError::query("claiming", diesel::result::Error::NotFound)
    }

    /// Only an error that says the database cannot be reached takes it
    /// down, once however often it is said; the first answer brings it up,
    /// once; `/healthz` follows.
    #[tokio::test(start_paused = true)]
    async fn unreachable_errors_take_it_down_once_and_an_answer_brings_it_up() {
        let liveness = Arc::new(Liveness::new());
        liveness.tick();
        let health = Health::new(liveness.clone());
        let mut states = health.subscribe();
        assert!(health.is_up());
        health.report_error(&refused());
        assert!(health.is_up(), "a refused statement is an answer");
        assert!(!states.has_changed().expect("open"));
        health.report_error(&unreachable());
        health.report_error(&unreachable());
        assert!(!health.is_up());
        assert!(states.has_changed().expect("open"));
        assert_eq!(*states.borrow_and_update(), DbState::Down);
        assert_eq!(liveness.problem(), Some(Unhealthy::DatabaseUnreachable));
        health.report_error(&unreachable());
        assert!(!states.has_changed().expect("open"), "said once");
        health.report_ok();
        health.report_ok();
        assert_eq!(*states.borrow_and_update(), DbState::Up);
        assert!(!states.has_changed().expect("open"), "said once");
        assert_eq!(liveness.problem(), None);
    }

    /// A database that answers nothing for 30 s makes the replica
    /// unhealthy even without an error; a stopped tick loop comes first.
    #[tokio::test(start_paused = true)]
    async fn silence_and_a_stopped_tick_loop_are_unhealthy() {
        let liveness = Arc::new(Liveness::new());
        let health = Health::new(liveness.clone());
        liveness.tick();
        tokio::time::advance(Duration::from_secs(4)).await;
        liveness.tick();
        assert_eq!(liveness.problem(), None);
        tokio::time::advance(Duration::from_secs(27)).await;
        liveness.tick();
        assert_eq!(liveness.problem(), Some(Unhealthy::DatabaseSilent));
        health.report_ok();
        assert_eq!(liveness.problem(), None);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(liveness.problem(), Some(Unhealthy::TickLoopStopped));
    }
}
