//! A run's lease side, owned in one place: the fleet lease its claim won
//! (or, for a per-host run, this replica's own, which no row holds and
//! nobody else can take), the shared locks the job takes, the keeper that
//! keeps them all alive and confirms them against the deadlines the guard
//! also acts on, and their release. The executor asks it for the lease
//! and its keeper; nothing else claims, extends or releases a run's rows
//! of `replicron_locks`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::Phase;
use super::engine::Engine;
use super::work::Work;
use crate::backoff::Backoff;
use crate::lease::keeper::{Keeper, LeaseState, LeaseTimes};
use crate::lease::{Claim, Lease};
use crate::schedule::LATE_LIMIT;

/// What a run holds as it begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The fleet's lease of the job's row, won by a claim.
    Fleet(Lease),
    /// Nothing of the fleet's: a per-host run (`run_on = "every"`) of this
    /// instant, which no row holds and nobody else can take. Its history
    /// rows carry this replica as their scope.
    Here(DateTime<Utc>),
}

impl Hold {
    /// The instant held.
    pub(crate) fn instant(&self) -> DateTime<Utc> {
        match self {
            Hold::Fleet(lease) => lease.instant,
            Hold::Here(instant) => *instant,
        }
    }

    /// The fence the run's rows carry: the lease's, or [`Hold::NO_FENCE`].
    pub(crate) fn fence(&self) -> i64 {
        match self {
            Hold::Fleet(lease) => lease.fence,
            Hold::Here(_) => Hold::NO_FENCE,
        }
    }

    /// The fence of a per-host run's rows: no claim gave it one.
    const NO_FENCE: i64 = 0;

    /// The lease row held, if any.
    pub(crate) fn row(&self) -> Option<&str> {
        match self {
            Hold::Fleet(lease) => Some(&lease.job),
            Hold::Here(_) => None,
        }
    }
}

/// The leases of one run, kept alive until [`RunLease::release`].
pub(crate) struct RunLease {
    hold: Hold,
    keeper: Keeper,
    /// The shared locks taken, in their order.
    locks: Vec<Lease>,
}

impl RunLease {
    /// Keeps `hold`, claimed (its statement sent) at `claimed`, alive for
    /// `work`: a fleet lease by extending its row, a per-host run's by the
    /// clock alone.
    pub(crate) fn keep(engine: &Engine, work: &Work, hold: Hold, claimed: Instant) -> RunLease {
        let times = LeaseTimes::new(work.settings.lock_at_most_for, work.settings.kill_grace);
        let keeper = match &hold {
            Hold::Fleet(lease) => {
                Keeper::start(engine.store.clone(), lease.clone(), times, claimed)
            }
            Hold::Here(_) => Keeper::local(times, claimed),
        };
        RunLease {
            hold,
            keeper,
            locks: Vec::new(),
        }
    }

    /// What the run holds.
    pub(crate) fn hold(&self) -> &Hold {
        &self.hold
    }

    /// The keeper that confirms the run's leases, for an attempt.
    pub(crate) fn keeper(&mut self) -> &mut Keeper {
        &mut self.keeper
    }

    /// Takes a slot of each of `work`'s shared locks and limits, kept alive
    /// with the lease from then on; `Ok(true)` if it took any. `Err` says
    /// which could not be had, and why (none is kept).
    pub(crate) async fn take_locks(
        &mut self,
        engine: &Engine,
        work: &Work,
    ) -> Result<bool, LockNotTaken> {
        // An `allow` job's instants, each on a row of its own, wait in
        // their order.
        let in_order = self
            .hold
            .row()
            .filter(|row| row.starts_with(crate::lease::INSTANT_ROW_PREFIX))
            .map(|_| self.hold.instant());
        self.locks = take_locks(engine, work, &self.keeper, self.hold.fence(), in_order).await?;
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
        if let Hold::Fleet(lease) = &self.hold {
            release(engine, work, lease).await;
        }
    }
}

/// Why a run did not get a slot of each of its shared locks and limits,
/// and so did not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LockNotTaken {
    /// The run's own lease was lost while it waited for `gate`.
    #[error("not run: its lease was lost while it waited for {gate}")]
    LeaseLost { gate: String },
    /// The scheduler began to stop while the run waited for `gate`.
    #[error("not run: replicron was stopping while it waited for {gate}")]
    Stopping { gate: String },
    /// Every slot of `gate` stayed held (by `by`, as far as their rows
    /// name them) past [`LATE_LIMIT`].
    #[error(
        "not run: {gate} stayed held by {} for {}s",
        holders(by),
        LATE_LIMIT.num_seconds()
    )]
    Held { gate: String, by: Vec<String> },
}

/// Who held a gate's slots, as a message says it.
fn holders(by: &[String]) -> String {
    if by.is_empty() {
        "another run".to_string()
    } else {
        by.join(", ")
    }
}

/// The longest pause between two tries of a shared lock held elsewhere.
const LOCK_POLL_MAX: Duration = Duration::from_millis(100);

/// Takes a slot of each of the job's gates (its shared locks and limits),
/// in their order, each as a lease claimed at the database's now and then
/// kept alive with the job's own: two jobs that share gates never hold one
/// each while waiting for the other's. A limit's slots are tried from one
/// that `fence` picks, so that runs spread over them. A gate whose slots
/// are all held elsewhere is waited for, as an instant waits for a lease
/// held by a late run: up to [`LATE_LIMIT`]. `Err` says which gate and who
/// holds it (the slots taken are given back). With `in_order` (an
/// `overlap = "allow"` job's instant), no slot is tried while an earlier
/// instant of the job waits: the job's waiting instants start in their
/// order, across the fleet.
async fn take_locks(
    engine: &Engine,
    job: &Work,
    keeper: &Keeper,
    fence: i64,
    in_order: Option<DateTime<Utc>>,
) -> Result<Vec<Lease>, LockNotTaken> {
    let give_up = Instant::now() + LATE_LIMIT.to_std().unwrap_or_default();
    let mut taken: Vec<Lease> = Vec::new();
    let mut failed = None;
    'gates: for gate in &job.settings.gates {
        // Polled often enough that a waiter sees a slot free before a run
        // claimed at the next instant asks for it (a waiter has no place
        // in a queue).
        let mut backoff = Backoff::new(Duration::from_millis(10), LOCK_POLL_MAX);
        let first = usize::try_from(fence).unwrap_or_default() % gate.rows.len().max(1);
        loop {
            if keeper.state() == LeaseState::Lost {
                failed = Some(LockNotTaken::LeaseLost {
                    gate: gate.label.clone(),
                });
                break 'gates;
            }
            if *engine.phase.borrow() != Phase::Running {
                failed = Some(LockNotTaken::Stopping {
                    gate: gate.label.clone(),
                });
                break 'gates;
            }
            let mut holders = Vec::new();
            let earlier_waits = match in_order.filter(|_| taken.is_empty()) {
                Some(instant) => engine
                    .store
                    .earlier_instant_waits(&job.name, instant)
                    .await
                    .unwrap_or(true),
                None => false,
            };
            let tried = if earlier_waits { 0 } else { gate.rows.len() };
            for row in gate.rows.iter().cycle().skip(first).take(tried) {
                match engine
                    .store
                    .claim_now(row, &engine.instance, job.settings.lock_at_most_for)
                    .await
                {
                    Ok(Claim::Won(lease)) => {
                        keeper.add(lease.clone());
                        taken.push(lease);
                        continue 'gates;
                    }
                    Ok(Claim::Held(held)) => holders.extend(held.by),
                    Ok(_) | Err(_) => {}
                }
            }
            let pause = backoff.next_pause();
            if Instant::now() + pause > give_up {
                holders.sort();
                holders.dedup();
                failed = Some(LockNotTaken::Held {
                    gate: gate.label.clone(),
                    by: holders,
                });
                break 'gates;
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
    if let Err(e) = release_lease(engine, job, &lock, Duration::ZERO).await {
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

/// Releases `lease`, with the releases that fall due with it; alone, on
/// fresh connections until [`release_deadline`], if that fails.
async fn release_lease(
    engine: &Engine,
    job: &Work,
    lease: &Lease,
    at_least: Duration,
) -> Result<bool, crate::db::DbError> {
    match engine.finisher.release(lease.clone(), at_least).await {
        Ok(ours) => Ok(ours),
        Err(e) => {
            debug!(job = %job.name, fence = lease.fence, "the lease is released alone: {e}");
            engine
                .store
                .release_until(lease.clone(), at_least, release_deadline(job))
                .await
        }
    }
}

async fn release(engine: &Engine, job: &Work, lease: &Lease) {
    match release_lease(engine, job, lease, job.settings.lock_at_least_for).await {
        Ok(true) => {}
        Ok(false) => {
            warn!(job = %job.name, fence = lease.fence, "the lease was no longer ours at release")
        }
        Err(e) => {
            warn!(job = %job.name, "the lease could not be released; it ends by itself: {e}");
        }
    }
}
