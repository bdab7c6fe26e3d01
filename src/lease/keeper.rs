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

use super::Lease;
use crate::db::Store;
use crate::db::health::Health;
use crate::runner::Deadlines;

/// What the keeper knows of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// Confirmed held at this instant.
    Held(Instant),
    /// Lost, or not confirmed in time.
    Lost,
}

/// The timings of one lease.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseTimes {
    /// `lock_at_most_for`.
    pub(crate) lease: Duration,
    /// How often it is extended.
    pub(crate) every: Duration,
    /// Past this without a confirmation, the lease is given up.
    pub(crate) must_confirm_within: Duration,
    /// SIGTERM to SIGKILL when a run is stopped for its lease: short enough
    /// that the run is dead before the lease can expire.
    pub(crate) stop_grace: Duration,
}

impl LeaseTimes {
    /// The timings for a job's lease.
    pub(crate) fn new(lock_at_most_for: Duration, kill_grace: Duration) -> Self {
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
    pub(crate) fn deadlines(&self, confirmed: Instant) -> Deadlines {
        let term = (confirmed + self.must_confirm_within).saturating_duration_since(Instant::now());
        Deadlines {
            term,
            kill: term + self.stop_grace,
        }
    }
}

/// A running keeper.
pub(crate) struct Keeper {
    /// The leases kept: the job's own, then the shared locks it took.
    leases: Arc<std::sync::Mutex<Vec<Lease>>>,
    state: watch::Receiver<LeaseState>,
    task: JoinHandle<()>,
    times: LeaseTimes,
    /// A run of this host's alone (`run_on = "every"`): no lease row, so
    /// nothing to lose; it is confirmed by the clock.
    local: bool,
}

impl Keeper {
    /// Starts keeping `lease`, confirmed (claimed) at `claimed`.
    pub(crate) fn start(
        store: Store,
        health: Arc<Health>,
        lease: Lease,
        times: LeaseTimes,
        claimed: Instant,
    ) -> Keeper {
        let (sender, state) = watch::channel(LeaseState::Held(claimed));
        let leases = Arc::new(std::sync::Mutex::new(vec![lease]));
        let task = tokio::spawn(keep(store, health, leases.clone(), times, claimed, sender));
        Keeper {
            leases,
            state,
            task,
            times,
            local: false,
        }
    }

    /// A keeper for a run that holds no lease row (a `run_on = "every"`
    /// job's, which each replica runs for itself): confirmed every
    /// `times.every`, never lost, so that only the run's own timeout stops
    /// it, whatever the database does.
    pub(crate) fn local(times: LeaseTimes, claimed: Instant) -> Keeper {
        let (sender, state) = watch::channel(LeaseState::Held(claimed));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(times.every).await;
                if sender.send(LeaseState::Held(Instant::now())).is_err() {
                    return;
                }
            }
        });
        Keeper {
            leases: Arc::default(),
            state,
            task,
            times,
            local: true,
        }
    }

    /// Keeps `lease` too (a shared lock the run took), from its next
    /// extension on: losing it is losing the run's lease.
    pub(crate) fn add(&self, lease: Lease) {
        if let Ok(mut leases) = self.leases.lock() {
            leases.push(lease);
        }
    }

    /// Follows the lease's state (a run's guard deadlines follow it).
    pub(crate) fn watch(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// The timings of this lease.
    pub(crate) fn times(&self) -> LeaseTimes {
        self.times
    }

    /// The current state.
    pub(crate) fn state(&self) -> LeaseState {
        *self.state.borrow()
    }

    /// Waits for the next change of state.
    pub(crate) async fn changed(&mut self) -> LeaseState {
        if self.state.changed().await.is_err() {
            return LeaseState::Lost;
        }
        *self.state.borrow_and_update()
    }

    /// Whether the lease is lost or its last confirmation is older than it
    /// may be (the moment the guard stops the run).
    pub(crate) fn past_confirmation_deadline(&self) -> bool {
        match self.state() {
            LeaseState::Lost => true,
            LeaseState::Held(confirmed) => confirmed.elapsed() >= self.times.must_confirm_within,
        }
    }

    /// Whether the lease is still this replica's right now: confirmed
    /// recently enough, or confirmed again by asking the database. Checked
    /// before a run's success is recorded, so that a replica that was frozen
    /// past its lease does not claim a success it had no right to.
    pub(crate) async fn verify(&self, store: &Store, health: &Health) -> bool {
        match self.state() {
            _ if self.local => true,
            LeaseState::Lost => false,
            LeaseState::Held(confirmed) if confirmed.elapsed() < self.times.every => true,
            LeaseState::Held(confirmed) => {
                match extend_all(store, &self.leases, self.times).await {
                    Ok(held) => held,
                    Err(e) => {
                        health.report_error(&e);
                        confirmed.elapsed() < self.times.must_confirm_within
                    }
                }
            }
        }
    }

    /// Stops keeping the lease.
    pub(crate) fn stop(self) {
        self.task.abort();
    }
}

/// Extends every lease of `leases`: `Ok(false)` if one of them was lost.
async fn extend_all(
    store: &Store,
    leases: &std::sync::Mutex<Vec<Lease>>,
    times: LeaseTimes,
) -> Result<bool, crate::db::DbError> {
    let leases = leases.lock().map(|l| l.clone()).unwrap_or_default();
    for lease in leases {
        if !store.extend(lease, times.lease).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn keep(
    store: Store,
    health: Arc<Health>,
    leases: Arc<std::sync::Mutex<Vec<Lease>>>,
    times: LeaseTimes,
    claimed: Instant,
    state: watch::Sender<LeaseState>,
) {
    // The job's own lease names it in logs and metrics.
    let (job, fence) = leases
        .lock()
        .ok()
        .and_then(|l| l.first().map(|lease| (lease.job.clone(), lease.fence)))
        .unwrap_or_default();
    let mut confirmed = claimed;
    let mut next = confirmed + times.every;
    loop {
        // The deadline holds however the database fails: between attempts
        // that fail fast, and while one hangs (a dead connection, a pool
        // waiting to connect). A run whose lease is not confirmed in time is
        // stopped before the lease can expire.
        let give_up_at = confirmed + times.must_confirm_within;
        tokio::time::sleep_until(next.min(give_up_at)).await;
        let extended = if Instant::now() >= give_up_at {
            None
        } else {
            tokio::select! {
                extended = extend_all(&store, &leases, times) => Some(extended),
                () = tokio::time::sleep_until(give_up_at) => {
                    crate::telemetry::extension_failed(&job);
                    None
                }
            }
        };
        let Some(extended) = extended else {
            warn!(job = %job, fence, "lease not confirmed in time: giving it up before it can expire");
            let _ = state.send(LeaseState::Lost);
            return;
        };
        match extended {
            Ok(true) => {
                health.report_ok();
                confirmed = Instant::now();
                let _ = state.send(LeaseState::Held(confirmed));
                next = confirmed + times.every;
                continue;
            }
            Ok(false) => {
                health.report_ok();
                crate::telemetry::extension_failed(&job);
                warn!(job = %job, fence, "lease lost: it expired or another replica holds it");
                let _ = state.send(LeaseState::Lost);
                return;
            }
            Err(e) => {
                crate::telemetry::extension_failed(&job);
                health.report_error(&e);
                warn!(job = %job, "could not extend the lease: {e}");
            }
        }
        // After a failure, try again soon rather than a third later.
        next = Instant::now() + times.every.min(Duration::from_secs(1));
    }
}
