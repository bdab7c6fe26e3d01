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
use tracing::{Instrument, warn};

use super::Lease;
use crate::db::Store;

/// What the keeper knows of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// Confirmed held at this instant.
    Held(Instant),
    /// Lost, or not confirmed in time.
    Lost,
}

/// When the runner's guard stops a run on its own: SIGTERM after `term`, SIGKILL
/// after `kill`, both counted from when the guard hears of them. The daemon
/// pushes them back each time it confirms the run's lease, so they only
/// fall due when the daemon cannot (frozen, partitioned or dead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deadlines {
    /// Until SIGTERM to the group.
    pub(crate) term: Duration,
    /// Until SIGKILL to the group.
    pub(crate) kill: Duration,
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
    /// Written by the keeping task, and by the checks before a start and
    /// before a record ([`Keeper::confirm_for_start`], [`Keeper::verify`])
    /// when they confirm the lease themselves.
    sender: Arc<watch::Sender<LeaseState>>,
    state: watch::Receiver<LeaseState>,
    task: JoinHandle<()>,
    times: LeaseTimes,
    /// A run of this host's alone (`run_on = "every"`): no lease row, so
    /// nothing to lose; it is confirmed by the clock.
    local: bool,
    /// Whether [`Keeper::changed`] has told of the loss already.
    told_lost: bool,
    /// The last confirmation, kept when the lease is lost.
    last_confirmed: Arc<std::sync::Mutex<Instant>>,
}

impl Keeper {
    /// Starts keeping `lease`, whose claim was sent at `claimed`: its first
    /// confirmation counts from when it was asked for, not from the answer
    /// (the database counts the lease from when the statement began, which
    /// is no earlier; a claim that waited in the server, or a reply read
    /// late, must not stretch the lease on this side).
    pub(crate) fn start(store: Store, lease: Lease, times: LeaseTimes, claimed: Instant) -> Keeper {
        let sender = Arc::new(watch::Sender::new(LeaseState::Held(claimed)));
        let state = sender.subscribe();
        let leases = Arc::new(std::sync::Mutex::new(vec![lease]));
        let last_confirmed = Arc::new(std::sync::Mutex::new(claimed));
        // In the run's span, if it has one: its lines name the run.
        let task = tokio::spawn(
            keep(
                store,
                leases.clone(),
                times,
                sender.clone(),
                last_confirmed.clone(),
            )
            .in_current_span(),
        );
        Keeper {
            leases,
            sender,
            state,
            task,
            times,
            local: false,
            told_lost: false,
            last_confirmed,
        }
    }

    /// A keeper for a run that holds no lease row (a `run_on = "every"`
    /// job's, which each replica runs for itself): confirmed every
    /// `times.every`, never lost, so that only the run's own timeout stops
    /// it, whatever the database does.
    pub(crate) fn local(times: LeaseTimes, claimed: Instant) -> Keeper {
        let sender = Arc::new(watch::Sender::new(LeaseState::Held(claimed)));
        let state = sender.subscribe();
        let beat = sender.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(times.every).await;
                if beat.send(LeaseState::Held(Instant::now())).is_err() {
                    return;
                }
            }
        });
        Keeper {
            leases: Arc::default(),
            sender,
            state,
            task,
            times,
            local: true,
            told_lost: false,
            last_confirmed: Arc::new(std::sync::Mutex::new(claimed)),
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

    /// Waits for the next change of state. The loss is told once: after
    /// that this never resolves, so that a caller that waits for changes in
    /// a loop acts on the loss once instead of spinning on it.
    pub(crate) async fn changed(&mut self) -> LeaseState {
        if self.told_lost {
            return std::future::pending().await;
        }
        let state = if self.state.changed().await.is_err() {
            LeaseState::Lost
        } else {
            *self.state.borrow_and_update()
        };
        if state == LeaseState::Lost {
            self.told_lost = true;
        }
        state
    }

    /// Whether the lease is lost or its last confirmation is older than it
    /// may be (the moment the guard stops the run).
    pub(crate) fn past_confirmation_deadline(&self) -> bool {
        match self.state() {
            LeaseState::Lost => true,
            LeaseState::Held(confirmed) => confirmed.elapsed() >= self.times.must_confirm_within,
        }
    }

    /// Records a confirmation asked for at `sent`, unless a later one is
    /// known or the lease is lost.
    fn confirmed(&self, sent: Instant) {
        confirm(&self.sender, &self.last_confirmed, sent);
    }

    /// When the guard kills a run of this lease at the latest: its last
    /// confirmation plus the confirmation deadline and the stop grace
    /// (`None` for a run of this host's own, which nothing kills for its
    /// lease).
    pub(crate) fn kill_deadline(&self) -> Option<Instant> {
        if self.local {
            return None;
        }
        let last = self.last_confirmed.lock().map(|l| *l).ok()?;
        Some(last + self.times.must_confirm_within + self.times.stop_grace)
    }

    /// Confirms the lease by asking the database, if its last confirmation
    /// is a third of the lease old or more: `Some(true)` held, `Some(false)`
    /// lost (and the keeper knows it), `None` not known (the database did
    /// not answer).
    async fn confirm_now(&self, store: &Store) -> Option<bool> {
        match self.state() {
            _ if self.local => Some(true),
            LeaseState::Lost => Some(false),
            LeaseState::Held(confirmed) if confirmed.elapsed() < self.times.every => Some(true),
            LeaseState::Held(_) => {
                let sent = Instant::now();
                match extend_all(store, &self.leases, self.times).await {
                    Ok(true) => {
                        self.confirmed(sent);
                        Some(true)
                    }
                    Ok(false) => {
                        self.sender.send_replace(LeaseState::Lost);
                        Some(false)
                    }
                    Err(_) => None,
                }
            }
        }
    }

    /// Whether a run may be started now, after its start record: the lease
    /// was confirmed within the last third of it, or is confirmed again by
    /// asking the database. A start record that was slow (a stall) cannot
    /// let a run start under a lease that is gone, or about to go.
    pub(crate) async fn confirm_for_start(&self, store: &Store) -> bool {
        self.confirm_now(store).await == Some(true)
    }

    /// Whether the lease is still this replica's right now: confirmed
    /// recently enough, or confirmed again by asking the database (or, if
    /// the database does not answer, still within its confirmation
    /// deadline). Checked before a run's success is recorded, so that a
    /// replica that was frozen past its lease does not claim a success it
    /// had no right to.
    pub(crate) async fn verify(&self, store: &Store) -> bool {
        match self.confirm_now(store).await {
            Some(held) => held,
            None => !self.past_confirmation_deadline(),
        }
    }

    /// Stops keeping the lease.
    pub(crate) fn stop(self) {
        self.task.abort();
    }
}

/// Records in `state` a confirmation asked for at `sent`, unless a later one
/// is known or the lease is lost; `last` keeps it past a loss.
fn confirm(state: &watch::Sender<LeaseState>, last: &std::sync::Mutex<Instant>, sent: Instant) {
    state.send_if_modified(|current| match current {
        LeaseState::Held(known) if *known < sent => {
            *current = LeaseState::Held(sent);
            if let Ok(mut last) = last.lock() {
                *last = sent;
            }
            true
        }
        _ => false,
    });
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
    leases: Arc<std::sync::Mutex<Vec<Lease>>>,
    times: LeaseTimes,
    state: Arc<watch::Sender<LeaseState>>,
    last_confirmed: Arc<std::sync::Mutex<Instant>>,
) {
    // The job's own lease names it in logs and metrics.
    let (job, fence) = leases
        .lock()
        .ok()
        .and_then(|l| l.first().map(|lease| (lease.job.clone(), lease.fence)))
        .unwrap_or_default();
    // The last confirmation: this task's, or a check's (before a start or a
    // record) that confirmed the lease itself.
    let last = || match *state.borrow() {
        LeaseState::Held(confirmed) => Some(confirmed),
        LeaseState::Lost => None,
    };
    let Some(mut confirmed) = last() else {
        return;
    };
    let mut next = confirmed + times.every;
    loop {
        // The deadline holds however the database fails: between attempts
        // that fail fast, and while one hangs (a dead connection, a pool
        // waiting to connect). A run whose lease is not confirmed in time is
        // stopped before the lease can expire.
        let give_up_at = confirmed + times.must_confirm_within;
        tokio::time::sleep_until(next.min(give_up_at)).await;
        match last() {
            None => return,
            // Confirmed meanwhile by a check: count from there.
            Some(later) if later > confirmed => {
                confirmed = later;
                next = next.max(confirmed + times.every);
                continue;
            }
            Some(_) => {}
        }
        let sent = Instant::now();
        let extended = if sent >= give_up_at {
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
            state.send_replace(LeaseState::Lost);
            return;
        };
        match extended {
            Ok(true) => {
                // Counted from when the extension was asked for: time it
                // spent waiting in the server, or unread, is not the lease's.
                confirmed = confirmed.max(sent);
                confirm(&state, &last_confirmed, confirmed);
                next = confirmed + times.every;
                continue;
            }
            Ok(false) => {
                crate::telemetry::extension_failed(&job);
                warn!(job = %job, fence, "lease lost: it expired or another replica holds it");
                state.send_replace(LeaseState::Lost);
                return;
            }
            Err(e) => {
                crate::telemetry::extension_failed(&job);
                warn!(job = %job, "could not extend the lease: {e}");
            }
        }
        // After a failure, try again soon rather than a third later.
        next = Instant::now() + times.every.min(Duration::from_secs(1));
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::lease::{claim, ensure_rows, force_unlock};
    use crate::testing::TestDb;
    use chrono::{DateTime, Utc};

    fn kept(db: &TestDb, lease_for: Duration) -> (Store, Lease) {
        let pool = db.pool(2);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["job"]).expect("rows");
        let instant: DateTime<Utc> = crate::db::clock::database_now(&mut conn).expect("now");
        let lease = claim(&mut conn, "job", "me", instant, lease_for)
            .expect("claim")
            .won()
            .expect("won");
        drop(conn);
        (Store::new(pool), lease)
    }

    /// Takes `job`'s lease away, as another replica that claims it does.
    fn claim_away(db: &TestDb) {
        force_unlock(&mut db.connect(), "job").expect("unlock");
        let now = crate::db::clock::database_now(&mut db.connect()).expect("now");
        claim(
            &mut db.connect(),
            "job",
            "other",
            now,
            Duration::from_secs(60),
        )
        .expect("claim")
        .won()
        .expect("won");
    }

    /// A lost lease is told once: a watcher that waits for changes in a
    /// loop is not woken again and again by the same loss.
    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_is_told_once() {
        let db = TestDb::sqlite();
        let (store, lease) = kept(&db, Duration::from_secs(3));
        let times = LeaseTimes::new(Duration::from_secs(3), Duration::from_secs(10));
        // Claimed by another replica meanwhile: the next extension fails.
        claim_away(&db);
        let mut keeper = Keeper::start(store, lease, times, Instant::now());
        assert_eq!(keeper.changed().await, LeaseState::Lost);
        let again = tokio::time::timeout(Duration::from_secs(60), keeper.changed()).await;
        assert!(again.is_err(), "the loss was told again: {again:?}");
        assert!(keeper.past_confirmation_deadline());
        keeper.stop();
    }

    /// Before a run starts, a lease last confirmed a third of it ago or more
    /// is confirmed again: held, the run may start (and the confirmation
    /// counts); claimed away meanwhile, it may not, and the keeper knows it
    /// is lost.
    #[tokio::test(start_paused = true)]
    async fn a_run_starts_only_under_a_lease_confirmed_after_its_record() {
        let db = TestDb::sqlite();
        let (store, lease) = kept(&db, Duration::from_secs(30));
        let times = LeaseTimes::new(Duration::from_secs(30), Duration::from_secs(10));
        // Confirmed just now: no question asked.
        let sent = Instant::now();
        let keeper = Keeper::start(store.clone(), lease.clone(), times, sent);
        assert!(keeper.confirm_for_start(&store).await);
        assert_eq!(keeper.state(), LeaseState::Held(sent));
        // Its start record took longer than a third of the lease (and no
        // extension came meanwhile): asked again, and held; the answer
        // counts as a confirmation from when it was asked.
        keeper.task.abort();
        tokio::time::advance(Duration::from_secs(11)).await;
        let asked = Instant::now();
        assert!(keeper.confirm_for_start(&store).await);
        assert_eq!(keeper.state(), LeaseState::Held(asked));
        // Another keeper whose lease is claimed away before its start:
        // no start, and lost.
        let old = Instant::now();
        let stale = Keeper::start(store.clone(), lease, times, old);
        tokio::time::advance(Duration::from_secs(11)).await;
        stale.task.abort();
        claim_away(&db);
        assert!(!stale.confirm_for_start(&store).await);
        assert_eq!(stale.state(), LeaseState::Lost);
    }
}
