//! Keeping a won lease alive while its instant is being run (retries and
//! their pauses included): `extend` every `lock_at_most_for / 3`, and the
//! time of the last confirmation on the monotonic clock. A lease that
//! cannot be confirmed for `lock_at_most_for - lock_at_most_for / 3`
//! (database unreachable, partition, or `extend` changed nothing) is given
//! up before it can expire, so the run can be stopped before another
//! replica may claim the job.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::warn;

use super::Shared;
use crate::db::DbError;
use crate::lease::{self, Lease};
use crate::runner::Deadlines;

/// What the keeper knows of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Confirmed held at this instant.
    Held(Instant),
    /// Lost, or not confirmed in time.
    Lost,
}

/// The timings of one lease.
#[derive(Clone, Copy, Debug)]
pub struct LeaseTimes {
    /// `lock_at_most_for`.
    pub lease: Duration,
    /// How often it is extended.
    pub every: Duration,
    /// Past this without a confirmation, the lease is given up.
    pub must_confirm_within: Duration,
    /// SIGTERM to SIGKILL when a run is stopped for its lease: short enough
    /// that the run is dead before the lease can expire.
    pub stop_grace: Duration,
}

impl LeaseTimes {
    /// The timings for a job's lease.
    pub fn new(lock_at_most_for: Duration, kill_grace: Duration) -> Self {
        let every = lock_at_most_for / 3;
        LeaseTimes {
            lease: lock_at_most_for,
            every,
            must_confirm_within: lock_at_most_for - every,
            stop_grace: kill_grace.min(lock_at_most_for / 6),
        }
    }

    /// When the guard must stop a run whose lease was last confirmed at
    /// `confirmed`, counted from now.
    pub fn deadlines(&self, confirmed: Instant) -> Deadlines {
        let term = (confirmed + self.must_confirm_within).saturating_duration_since(Instant::now());
        Deadlines {
            term,
            kill: term + self.stop_grace,
        }
    }
}

/// A running keeper.
pub struct Keeper {
    state: watch::Receiver<LeaseState>,
    task: JoinHandle<()>,
    times: LeaseTimes,
}

impl Keeper {
    /// Starts keeping `lease`, confirmed (claimed) at `claimed`.
    pub fn start(shared: Arc<Shared>, lease: Lease, times: LeaseTimes, claimed: Instant) -> Keeper {
        let (sender, state) = watch::channel(LeaseState::Held(claimed));
        let task = tokio::spawn(keep(shared, lease, times, claimed, sender));
        Keeper { state, task, times }
    }

    /// The timings of this lease.
    pub fn times(&self) -> LeaseTimes {
        self.times
    }

    /// The current state.
    pub fn state(&self) -> LeaseState {
        *self.state.borrow()
    }

    /// Waits for the next change of state.
    pub async fn changed(&mut self) -> LeaseState {
        if self.state.changed().await.is_err() {
            return LeaseState::Lost;
        }
        *self.state.borrow_and_update()
    }

    /// Whether the lease is lost or its last confirmation is older than it
    /// may be (the moment the guard stops the run).
    pub fn past_confirmation_deadline(&self) -> bool {
        match self.state() {
            LeaseState::Lost => true,
            LeaseState::Held(confirmed) => confirmed.elapsed() >= self.times.must_confirm_within,
        }
    }

    /// Whether the lease is still this replica's right now: confirmed
    /// recently enough, or confirmed again by asking the database. Checked
    /// before a run's success is recorded, so that a replica that was frozen
    /// past its lease does not claim a success it had no right to.
    pub async fn verify(&self, shared: &Shared, lease: &Lease) -> bool {
        match self.state() {
            LeaseState::Lost => false,
            LeaseState::Held(confirmed) if confirmed.elapsed() < self.times.every => true,
            LeaseState::Held(confirmed) => match extend(shared, lease, self.times.lease).await {
                Ok(held) => held,
                Err(e) => {
                    shared.health.report_error(&e);
                    confirmed.elapsed() < self.times.must_confirm_within
                }
            },
        }
    }

    /// Stops keeping the lease.
    pub fn stop(self) {
        self.task.abort();
    }
}

/// One `extend` of `lease`, off the runtime.
async fn extend(shared: &Shared, lease: &Lease, lease_for: Duration) -> Result<bool, DbError> {
    let copy = lease.clone();
    shared
        .pool
        .run_blocking(move |conn| {
            lease::extend(conn, &copy, lease_for)
                .map_err(|e| DbError::query("extending the lease", e))
        })
        .await
}

async fn keep(
    shared: Arc<Shared>,
    lease: Lease,
    times: LeaseTimes,
    claimed: Instant,
    state: watch::Sender<LeaseState>,
) {
    let mut confirmed = claimed;
    let mut next = confirmed + times.every;
    loop {
        tokio::time::sleep_until(next).await;
        match extend(&shared, &lease, times.lease).await {
            Ok(true) => {
                shared.health.report_ok();
                confirmed = Instant::now();
                let _ = state.send(LeaseState::Held(confirmed));
                next = confirmed + times.every;
                continue;
            }
            Ok(false) => {
                shared.health.report_ok();
                crate::telemetry::extension_failed(&lease.job);
                warn!(job = %lease.job, fence = lease.fence, "lease lost: it expired or another replica holds it");
                let _ = state.send(LeaseState::Lost);
                return;
            }
            Err(e) => {
                crate::telemetry::extension_failed(&lease.job);
                shared.health.report_error(&e);
                warn!(job = %lease.job, "could not extend the lease: {e}");
            }
        }
        if confirmed.elapsed() >= times.must_confirm_within {
            warn!(job = %lease.job, fence = lease.fence, "lease not confirmed in time: giving it up before it can expire");
            let _ = state.send(LeaseState::Lost);
            return;
        }
        // After a failure, try again soon rather than a third later.
        next = Instant::now() + times.every.min(Duration::from_secs(1));
    }
}
