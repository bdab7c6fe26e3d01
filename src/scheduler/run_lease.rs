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
use super::job::Gate;
use super::work::{Recording, Work};
use crate::backoff::Backoff;
use crate::history::Trigger;
use crate::lease::keeper::{Keeper, LeaseState, LeaseTimes};
use crate::lease::queue::{self, Place};
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
        recording: &Recording,
    ) -> Result<bool, LockNotTaken> {
        // An `allow` job's instants, each on a row of its own, wait in
        // their order.
        let in_order = self
            .hold
            .row()
            .filter(|row| row.starts_with(crate::lease::INSTANT_ROW_PREFIX))
            .map(|_| self.hold.instant());
        let waiting = Waiting {
            fence: self.hold.fence(),
            in_order,
            place: place(work, recording, self.hold.instant()),
        };
        self.locks = take_locks(engine, work, &self.keeper, waiting).await?;
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

/// A run's place among the waiters for a gate: a backfill's instant given
/// no priority of its own waits behind the others; the job's `priority`
/// (or the backfill's own) goes before lower ones; then the older instant
/// (the one the run is recorded at).
fn place(work: &Work, recording: &Recording, held: DateTime<Utc>) -> Place {
    Place {
        behind: recording.trigger == Trigger::Backfill && recording.priority.is_none(),
        priority: recording.priority.unwrap_or(work.settings.priority),
        instant: recording.instant.unwrap_or(held),
    }
}

/// How a run waits for its gates.
struct Waiting {
    /// Picks the slot of a limit tried first, so that runs spread over them.
    fence: i64,
    /// An `overlap = "allow"` job's instant: no slot is tried while an
    /// earlier instant of the job waits.
    in_order: Option<DateTime<Utc>>,
    /// Its place in each gate's line.
    place: Place,
}

/// Takes a slot of each of the job's gates (its shared locks and limits),
/// in their order, each as a lease claimed at the database's now and then
/// kept alive with the job's own: two jobs that share gates never hold one
/// each while waiting for the other's. A limit's slots are tried from one
/// that the fence picks, so that runs spread over them. A gate whose slots
/// are all held elsewhere is waited for, as an instant waits for a lease
/// held by a late run: up to [`LATE_LIMIT`], in the gate's line
/// ([`crate::lease::queue`]): the slots go to the waiters in the line's
/// order, across the fleet. `Err` says which gate and who holds it (the
/// slots taken are given back). With `in_order` (an `overlap = "allow"`
/// job's instant), no slot is tried while an earlier instant of the job
/// waits: the job's waiting instants start in their order, across the
/// fleet.
async fn take_locks(
    engine: &Engine,
    job: &Work,
    keeper: &Keeper,
    waiting: Waiting,
) -> Result<Vec<Lease>, LockNotTaken> {
    let Waiting {
        fence,
        in_order,
        place,
    } = waiting;
    let give_up = Instant::now() + LATE_LIMIT.to_std().unwrap_or_default();
    let mut taken: Vec<Lease> = Vec::new();
    let mut failed = None;
    'gates: for gate in &job.settings.gates {
        // Polled often enough that a slot let go passes to the line's
        // next waiter before a run claimed at the next instant asks for it.
        let mut backoff = Backoff::new(Duration::from_millis(10), LOCK_POLL_MAX);
        let first = usize::try_from(fence).unwrap_or_default() % gate.rows.len().max(1);
        let mut line = Line::new(gate, &job.name, place);
        loop {
            if keeper.state() == LeaseState::Lost {
                failed = Some(LockNotTaken::LeaseLost {
                    gate: gate.label.clone(),
                });
                line.leave(engine).await;
                break 'gates;
            }
            if *engine.phase.borrow() != Phase::Running {
                failed = Some(LockNotTaken::Stopping {
                    gate: gate.label.clone(),
                });
                line.leave(engine).await;
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
            let tried = if earlier_waits || !line.may_try(engine).await {
                0
            } else {
                gate.rows.len()
            };
            for row in gate.rows.iter().cycle().skip(first).take(tried) {
                match engine
                    .store
                    .claim_now(row, &engine.instance, job.settings.lock_at_most_for)
                    .await
                {
                    Ok(Claim::Won(lease)) => {
                        keeper.add(lease.clone());
                        taken.push(lease);
                        line.leave(engine).await;
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
                line.leave(engine).await;
                break 'gates;
            }
            line.keep(engine).await;
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

/// A run's place in the line of a gate's waiters
/// ([`crate::lease::queue`]), taken when it first finds the gate's slots
/// held and kept alive while it waits.
struct Line {
    prefix: String,
    row: String,
    slots: Vec<String>,
    instant: DateTime<Utc>,
    /// When the place was last taken or kept, if it is.
    kept: Option<Instant>,
}

impl Line {
    fn new(gate: &Gate, job: &str, place: Place) -> Line {
        let named = gate
            .rows
            .first()
            .map_or(gate.label.as_str(), String::as_str);
        Line {
            prefix: queue::line_prefix(named),
            row: queue::waiter_row(named, job, place),
            slots: gate.rows.clone(),
            instant: place.instant,
            kept: None,
        }
    }

    /// Whether the run may try for a slot now: fewer waiters are ahead of
    /// it than slots are free. A database that does not answer lets it
    /// try (its claims say what they can).
    async fn may_try(&self, engine: &Engine) -> bool {
        let (prefix, row, slots) = (self.prefix.clone(), self.row.clone(), self.slots.clone());
        engine
            .store
            .call("reading the line of waiters", move |conn| {
                queue::may_try(conn, &prefix, &row, &slots)
            })
            .await
            .unwrap_or(true)
    }

    /// Takes the run's place in the line, or keeps it, a few times per
    /// [`queue::WAITER_LEASE`].
    async fn keep(&mut self, engine: &Engine) {
        if self
            .kept
            .is_some_and(|kept| kept.elapsed() < queue::WAITER_LEASE / 4)
        {
            return;
        }
        let (row, instance, instant) = (self.row.clone(), engine.instance.clone(), self.instant);
        match engine
            .store
            .call("taking a place in the line of waiters", move |conn| {
                queue::wait_in_line(conn, &row, &instance, instant)
            })
            .await
        {
            Ok(()) => self.kept = Some(Instant::now()),
            Err(e) => {
                debug!(row = %self.row, "a place in the line of waiters could not be kept: {e}")
            }
        }
    }

    /// Leaves the line, if the run is in it.
    async fn leave(&mut self, engine: &Engine) {
        if self.kept.take().is_none() {
            return;
        }
        let row = self.row.clone();
        if let Err(e) = engine
            .store
            .call("leaving the line of waiters", move |conn| {
                queue::leave_line(conn, &row)
            })
            .await
        {
            debug!(row = %self.row, "the line of waiters could not be left; the place ends by itself: {e}");
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
