//! A run's lease side, owned in one place: the fleet lease its claim won
//! (or, for a per-host run, this replica's own, which no row holds and
//! nobody else can take), the shared locks the job takes, the keeper that
//! keeps them all alive and confirms them against the deadlines the guard
//! also acts on, and their release. The executor asks it for the lease
//! and its keeper; nothing else claims, extends or releases a run's rows
//! of `replicron_locks`.

use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::Phase;
use super::engine::Engine;
use super::execute::Work;
use crate::backoff::Backoff;
use crate::config::LOCK_ROW_PREFIX;
use crate::lease::keeper::{Keeper, LeaseState, LeaseTimes};
use crate::lease::{Claim, Lease};
use crate::schedule::LATE_LIMIT;

/// The leases of one run, kept alive until [`RunLease::release`].
pub(crate) struct RunLease {
    /// The lease its claim won; for a per-host run, a local one.
    lease: Lease,
    /// A per-host run's lease is no row: nothing to release.
    per_host: bool,
    keeper: Keeper,
    /// The shared locks taken, in their order.
    locks: Vec<Lease>,
}

impl RunLease {
    /// Keeps `lease`, claimed (its statement sent) at `claimed`, alive for
    /// `work`: by extending its row, or for a per-host run by the clock.
    pub(crate) fn keep(
        engine: &Engine,
        work: &Work,
        lease: Lease,
        claimed: Instant,
        per_host: bool,
    ) -> RunLease {
        let times = LeaseTimes::new(work.settings.lock_at_most_for, work.settings.kill_grace);
        let keeper = if per_host {
            Keeper::local(times, claimed)
        } else {
            Keeper::start(engine.store.clone(), lease.clone(), times, claimed)
        };
        RunLease {
            lease,
            per_host,
            keeper,
            locks: Vec::new(),
        }
    }

    /// The run's own lease.
    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The run's lease and the keeper that confirms it, for an attempt.
    pub(crate) fn parts(&mut self) -> (&Lease, &mut Keeper) {
        (&self.lease, &mut self.keeper)
    }

    /// Takes `work`'s shared locks, kept alive with the lease from then on;
    /// `Ok(true)` if it took any. `Err` says which lock stayed held, and by
    /// whom (none is kept).
    pub(crate) async fn take_locks(
        &mut self,
        engine: &Engine,
        work: &Work,
    ) -> Result<bool, String> {
        self.locks = take_locks(engine, work, &self.keeper).await?;
        Ok(!self.locks.is_empty())
    }

    /// Stops keeping the leases, and gives the shared locks back (at once,
    /// in the reverse order) and then the run's lease (held on for
    /// `lock_at_least_for`).
    pub(crate) async fn release(mut self, engine: &Engine, work: &Work) {
        self.keeper.stop();
        for lock in self.locks.drain(..).rev() {
            release_lock(engine, work, lock).await;
        }
        if !self.per_host {
            release(engine, work, &self.lease).await;
        }
    }
}

/// The longest pause between two tries of a shared lock held elsewhere.
const LOCK_POLL_MAX: Duration = Duration::from_millis(100);

/// Takes the job's shared locks, in their (sorted) order, each as a lease
/// claimed at the database's now and then kept alive with the job's own:
/// two jobs that share locks never hold one each while waiting for the
/// other's. A lock held elsewhere is waited for, as an instant waits for a
/// lease held by a late run: up to [`LATE_LIMIT`]. `Err` says which lock
/// and who holds it (the locks taken are given back).
async fn take_locks(engine: &Engine, job: &Work, keeper: &Keeper) -> Result<Vec<Lease>, String> {
    let give_up = Instant::now() + LATE_LIMIT.to_std().unwrap_or_default();
    let mut taken: Vec<Lease> = Vec::new();
    let mut failed = None;
    'locks: for lock in &job.settings.locks {
        let name = lock.strip_prefix(LOCK_ROW_PREFIX).unwrap_or(lock);
        // Polled often enough that a waiter sees the lock free before a
        // run claimed at the next instant asks for it (a waiter has no
        // place in a queue).
        let mut backoff = Backoff::new(Duration::from_millis(10), LOCK_POLL_MAX);
        let mut holder = None;
        loop {
            if keeper.state() == LeaseState::Lost {
                failed = Some(format!(
                    "not run: its lease was lost while it waited for lock {name}"
                ));
                break 'locks;
            }
            if *engine.phase.borrow() != Phase::Running {
                failed = Some(format!(
                    "not run: replicron was stopping while it waited for lock {name}"
                ));
                break 'locks;
            }
            match engine
                .store
                .claim_now(lock, &engine.instance, job.settings.lock_at_most_for)
                .await
            {
                Ok(Claim::Won(lease)) => {
                    keeper.add(lease.clone());
                    taken.push(lease);
                    continue 'locks;
                }
                Ok(Claim::Held(held)) => holder = held.by,
                Ok(_) | Err(_) => {}
            }
            let pause = backoff.next_pause();
            if Instant::now() + pause > give_up {
                failed = Some(format!(
                    "not run: lock {name} stayed held by {} for {}s",
                    holder.as_deref().unwrap_or("another run"),
                    LATE_LIMIT.num_seconds()
                ));
                break 'locks;
            }
            tokio::time::sleep(pause).await;
        }
    }
    match failed {
        None => Ok(taken),
        Some(why) => {
            for lock in taken.into_iter().rev() {
                release_lock(engine, job, lock).await;
            }
            Err(why)
        }
    }
}

/// Gives a shared lock back at once.
async fn release_lock(engine: &Engine, job: &Work, lock: Lease) {
    if let Err(e) = engine
        .store
        .release_until(lock.clone(), Duration::ZERO, release_deadline(job))
        .await
    {
        warn!(job = %job.name, lock = %lock.job, "a shared lock could not be released; it ends by itself: {e}");
    }
}

/// Until when a release is tried again on fresh connections: a lease left
/// to run out holds its job for a whole `lock_at_most_for` with nobody
/// running it, but a run's task that waits on an unreachable database for
/// ever holds its loop.
fn release_deadline(job: &Work) -> Instant {
    Instant::now() + job.settings.lock_at_most_for.min(Duration::from_secs(10))
}

async fn release(engine: &Engine, job: &Work, lease: &Lease) {
    match engine
        .store
        .release_until(
            lease.clone(),
            job.settings.lock_at_least_for,
            release_deadline(job),
        )
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            warn!(job = %job.name, fence = lease.fence, "the lease was no longer ours at release")
        }
        Err(e) => {
            warn!(job = %job.name, "the lease could not be released; it ends by itself: {e}");
        }
    }
}
