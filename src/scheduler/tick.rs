//! The tick loop of one job: sleep until each instant by the database's
//! clock, claim it (through the [`super::claimer`]), and on a win start the
//! run; tell an overrun (the previous run was going when the instant came)
//! from an instant that only waits for a late or finishing run, and log
//! every instant skipped with its reason. Catch-up at start and after an
//! outage.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::claimer::{Claimed, Unanswered};
use super::engine::Engine;
use super::execute::{self, Plan};
use super::job::Job;
use super::run_lease::Hold;
use super::unanswered::{self, Settled, settle};
use super::work::{Recording, Work};
use super::{Phase, fmt_instant};
use crate::backoff::Backoff;
use crate::config::{Overlap, RunOn};
use crate::db::DbError;
use crate::db::health::DbState;
use crate::history::{RunStatus, Trigger};
use crate::lease::{self, Claim};
use crate::schedule::{LATE_LIMIT, Ticker};
use crate::telemetry;

/// Waits until the phase is no longer `Running`.
pub(crate) async fn draining(mut phase: watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p != Phase::Running).await;
}

/// Ends when the job's loop is to stop: the scheduler drains, or the job
/// was retired by a reload.
pub(super) fn stopping(
    engine: &Engine,
    retired: &watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + use<> {
    let (phase, mut retired) = (engine.phase.clone(), retired.clone());
    async move {
        tokio::select! {
            () = draining(phase) => {}
            _ = retired.wait_for(|retired| *retired) => {}
        }
    }
}

/// A run this replica started: when it claimed it, and when its action was
/// going (by the database's clock). An instant that comes before the action
/// starts (its lease or start record waits on the database) or while its
/// end is recorded and its lease released is no overrun: only one that came
/// while the action was going.
pub(super) struct Current {
    pub(super) task: JoinHandle<()>,
    /// The instant it runs.
    instant: DateTime<Utc>,
    claimed_at: DateTime<Utc>,
    going: Arc<execute::Going>,
    /// The fence of the lease it holds.
    pub(super) fence: i64,
}

impl Current {
    pub(super) fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Whether the run was going at `instant`.
    pub(super) fn was_going_at(&self, instant: DateTime<Utc>) -> bool {
        self.going.at(instant)
    }

    /// Whether `instant` of a job whose instants wait for its run
    /// (`queue`, `replace`) finds this run holding the job: such a run
    /// holds it from its own instant, not from its action's start, until
    /// its action ends (one whose start record or lease confirmation is
    /// still on its way holds it too). So an instant that came before a
    /// run that started late had started waits behind it, or replaces it,
    /// instead of starting late in turn once it ended: a backlog that fed
    /// itself, each run later than the one before by what it outlasts its
    /// period.
    fn holds_from_its_instant(&self, instant: DateTime<Utc>) -> bool {
        self.instant < instant && !self.going.has_ended()
    }
}

pub(crate) async fn job_loop(
    engine: Arc<Engine>,
    job: Arc<Job>,
    mut retired: watch::Receiver<bool>,
) {
    let mut current: Option<Current> = None;
    // Runs still going beside `current` (`overlap = "allow"`).
    let mut others: Vec<JoinHandle<()>> = Vec::new();
    let mut overrun_reported = false;
    let mut paused_reported = false;
    // Instants skipped while the database was unreachable: first, last,
    // how many; said in one line when it answers again.
    let mut skipped_down: Option<(DateTime<Utc>, DateTime<Utc>, usize)> = None;
    // Whether the schedule has no instant left (a job written `at`).
    let mut ended = false;
    // For a stop: the last instant handed out, one handed out that the
    // stop left undecided, and whether the loop ended with an instant that
    // waited for the job's run (`leave_waiting` decided it, and the
    // instants after it were its overruns).
    let since = engine.clock.now();
    let mut reached: Option<DateTime<Utc>> = None;
    let mut undecided: Option<DateTime<Utc>> = None;
    let mut left_waiting = false;
    let mut health = engine.health.subscribe();
    let mut ticker = Ticker::new(job.schedule.clone(), engine.clock.clone());
    let stop = |retired: &mut watch::Receiver<bool>| stopping(&engine, retired);
    if job.schedule.is_manual() {
        // @manual: no instant of its own; its runs are triggered.
        return;
    }
    if job.schedule.is_at_start() {
        // @reboot: one run at this replica's start, and no instant after.
        let instant = crate::db::clock::to_db_time(engine.clock.now()).0.and_utc();
        if let Attempt::Won(run) = run_here(&engine, &job, instant).await {
            current = Some(run);
        }
    } else if let Some((instant, run)) = catch_up(&engine, &job).await {
        current = run;
        ticker = Ticker::resuming_after(job.schedule.clone(), engine.clock.clone(), instant);
    }
    loop {
        let instant = tokio::select! {
            biased;
            () = stop(&mut retired) => break,
            changed = health.changed() => {
                if changed.is_err() {
                    break;
                }
                let state = *health.borrow_and_update();
                if state == DbState::Up
                    && let Some((first, last, count)) = skipped_down.take()
                {
                    warn!(
                        job = %job.name,
                        first = %fmt_instant(first),
                        last = %fmt_instant(last),
                        count,
                        "instants skipped on this replica while the database was unreachable \
                         (catch-up and the check for missed instants decide what they become)"
                    );
                }
                if state == DbState::Up && current.as_ref().is_none_or(|run| !run.is_running()) {
                    // Back from an outage: the missed instants are catch-up's.
                    // No instant handed out already comes again, even if
                    // the estimate of the database's clock moved back.
                    let handled = ticker.last();
                    ticker = Ticker::new(job.schedule.clone(), engine.clock.clone()).not_before(handled);
                    if let Some((instant, run)) = catch_up(&engine, &job).await {
                        current = run;
                        let after = handled.map_or(instant, |handled| handled.max(instant));
                        ticker = Ticker::resuming_after(job.schedule.clone(), engine.clock.clone(), after);
                    }
                }
                continue;
            }
            instant = ticker.tick(), if !ended => match instant {
                Some(instant) => instant,
                // A job written `at` one instant: its loop stays, so that
                // catch-up still takes the instant when the database
                // comes back from an outage that came over it.
                None if job.schedule.once_at().is_some() => {
                    ended = true;
                    continue;
                }
                None => break,
            },
        };
        reached = Some(instant);
        telemetry::schedule(&job.name, job.schedule.next_after(instant), None);
        if let Some(skipped) = ticker.take_skipped() {
            telemetry::skipped(&job.name, telemetry::Skip::TooLate, skipped.count);
            warn!(
                job = %job.name,
                first = %fmt_instant(skipped.first),
                last = %fmt_instant(skipped.last),
                count = skipped.count,
                "instants skipped: more than {}s late when this replica got to them (it was blocked, or its clock stepped)",
                LATE_LIMIT.num_seconds()
            );
        }
        if !engine.health.is_up() {
            telemetry::skipped(&job.name, telemetry::Skip::DatabaseDown, 1);
            debug!(job = %job.name, instant = %fmt_instant(instant), "skipped: the database is unreachable");
            skipped_down = Some(match skipped_down {
                Some((first, _, count)) => (first, instant, count + 1),
                None => (instant, instant, 1),
            });
            continue;
        }
        // An `allow` job's runs overlap: the local run is no reason to wait.
        if let Some(run) = current.take_if(|run| run.is_running() && allows_overlap(&job)) {
            others.retain(|task| !task.is_finished());
            others.push(run.task);
        }
        if let Some(run) = current.as_mut().filter(|run| run.is_running()) {
            let overlapped = run.was_going_at(job.schedule.start_of(instant))
                || (waits_for_the_run(&job) && run.holds_from_its_instant(instant));
            if overlapped
                && waits_for_the_run(&job)
                && let Some(waited) = overlapping(
                    &engine,
                    &job,
                    instant,
                    run.fence,
                    Some(&mut run.task),
                    &mut retired,
                    Cause::default(),
                )
                .await
            {
                current = None;
                ticker = Ticker::new(job.schedule.clone(), engine.clock.clone())
                    .not_before(Some(instant));
                match waited {
                    Some(Attempt::Won(run)) => {
                        current = Some(run);
                        overrun_reported = false;
                    }
                    Some(_) => {}
                    None => {
                        left_waiting = true;
                        break;
                    }
                }
                continue;
            }
            if overlapped {
                telemetry::overrun(&job.name);
                if !overrun_reported {
                    match run.going.waits_for() {
                        Some(gates) => warn!(
                            job = %job.name,
                            instant = %fmt_instant(instant),
                            running_since = %fmt_instant(run.claimed_at),
                            waiting_for = %gates,
                            "overrun: the job's previous run was still waiting for {gates} at this instant; its instants are skipped until it ends"
                        ),
                        None => warn!(
                            job = %job.name,
                            instant = %fmt_instant(instant),
                            running_since = %fmt_instant(run.claimed_at),
                            "overrun: the job's previous run was still going at this instant; its instants are skipped until it ends"
                        ),
                    }
                    overrun_reported = true;
                }
                continue;
            }
            // The run's action started after this instant came due (this
            // replica was blocked: a stall, a slow claim), has not started
            // yet (its lease or start record waits on the database), or had
            // ended and is being recorded and released. The instant waits
            // for it.
            let deadline = deadline_for(&engine, &job, instant);
            tokio::select! {
                biased;
                () = stop(&mut retired) => {
                    undecided = Some(instant);
                    break;
                }
                () = tokio::time::sleep_until(deadline) => {
                    skip_too_late(&job, instant, "the job's previous run, started late, was still going");
                    continue;
                }
                _ = &mut run.task => {}
            }
            // Its task is over (and awaited): nothing left to wait for.
            current = None;
        }
        let mut attempt = match job.run_on {
            RunOn::One => attempt(&engine, &job, instant, Cause::default(), Patience::OnTime).await,
            RunOn::Every => run_here(&engine, &job, instant).await,
        };
        if let Attempt::Overrun { fence, .. } = attempt
            && waits_for_the_run(&job)
            && let Some(waited) = overlapping(
                &engine,
                &job,
                instant,
                fence,
                None,
                &mut retired,
                Cause::default(),
            )
            .await
        {
            ticker =
                Ticker::new(job.schedule.clone(), engine.clock.clone()).not_before(Some(instant));
            match waited {
                Some(waited) => attempt = waited,
                None => {
                    left_waiting = true;
                    break;
                }
            }
        }
        let paused = matches!(attempt, Attempt::Paused { .. });
        if paused_reported && !paused {
            info!(job = %job.name, instant = %fmt_instant(instant), "claimed again: the job is no longer paused");
        }
        match attempt {
            Attempt::Won(run) => {
                current = Some(run);
                overrun_reported = false;
            }
            Attempt::Paused { by, reason } if !paused_reported => {
                info!(
                    job = %job.name,
                    instant = %fmt_instant(instant),
                    by = by.as_deref().unwrap_or("?"),
                    reason = reason.as_deref().unwrap_or(""),
                    "paused: its instants are not run (nor missed) until it is resumed"
                );
            }
            Attempt::Overrun { since, .. } if !overrun_reported => {
                warn!(
                    job = %job.name,
                    instant = %fmt_instant(instant),
                    running_since = %fmt_instant(since),
                    "overrun: the job's lease is held by a run that was going at this instant; its instants are skipped until it ends"
                );
                overrun_reported = true;
            }
            Attempt::Lost => overrun_reported = false,
            Attempt::Overrun { .. } | Attempt::Paused { .. } | Attempt::Skipped => {}
        }
        paused_reported = paused;
    }
    if !left_waiting
        && *engine.phase.borrow() != Phase::Running
        && let Some((first, last, count)) = not_reached(
            &job,
            reached.unwrap_or(since),
            undecided,
            engine.clock.now(),
        )
    {
        warn!(
            job = %job.name,
            first = %fmt_instant(first),
            last = %fmt_instant(last),
            count,
            "instants this replica had not run nor decided when it stopped (it ran behind): \
             left to the replicas that go on, or, if none claims them, to the check for missed instants"
        );
    }
    if let Some(run) = current {
        let _ = run.task.await;
        if waits_for_the_run(&job) && *engine.phase.borrow() != Phase::Running {
            decide_waiting_of_others(&engine, &job).await;
        }
    }
    for task in others {
        let _ = task.await;
    }
}

/// At a stop: the instants this loop had not reached (it ran behind: a
/// claim that waited, a run that started late) after `after`, and
/// `undecided`, one it had reached but not decided: the first, the last
/// and how many. A replica that goes on claims them, late; the check for
/// missed instants records those nobody ran, at the fleet's next start if
/// every replica stopped. Instants older than the ticker hands out are
/// left out: they were said as skipped already.
pub(super) fn not_reached(
    job: &Job,
    after: DateTime<Utc>,
    undecided: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<(DateTime<Utc>, DateTime<Utc>, usize)> {
    let left = NOT_REACHED_COUNT_LIMIT - usize::from(undecided.is_some());
    let from = after.max(now - late_limit(job));
    let reached = job
        .schedule
        .instants_while(from, left, |t| job.schedule.start_of(t) <= now);
    match (undecided, reached) {
        (Some(undecided), Some((_, last, count))) => Some((undecided, last, count + 1)),
        (Some(undecided), None) => Some((undecided, undecided, 1)),
        (None, reached) => reached,
    }
}

/// Instants not reached at a stop are counted up to this many.
const NOT_REACHED_COUNT_LIMIT: usize = 10_000;

/// At a stop, once this replica's run of `job` has ended: an instant that
/// another replica queued behind that run, and that this replica's own
/// ticks had not reached (it ran behind), was left to this replica by the
/// other when it stopped ("left to the replica whose run it waits for").
/// It is decided here as the replica that queued it would: run by another
/// replica that claims it, or else recorded `skipped`, never left unsaid.
async fn decide_waiting_of_others(engine: &Engine, job: &Job) {
    match engine.store.find_lock(&job.name).await {
        Ok(Some(row)) => {
            if let Some(waiting) = row.waiting() {
                leave_waiting(engine, job, waiting.and_utc()).await;
            }
        }
        Ok(None) => {}
        Err(e) => {
            warn!(job = %job.name, "an instant that waited for this replica's run may be left unrecorded: the job's lease could not be read: {e}");
        }
    }
}

/// The latest moment an instant may still be claimed: [`LATE_LIMIT`] after
/// its start, by the database's clock, as a point on the monotonic clock.
fn deadline_for(engine: &Engine, job: &Job, instant: DateTime<Utc>) -> Instant {
    deadline_since(engine, job, job.schedule.start_of(instant))
}

/// How late after it was due a run may still be claimed: [`LATE_LIMIT`],
/// or, for a dependent job, its `catch_up` if that is longer.
pub(super) fn late_limit(job: &Job) -> TimeDelta {
    let catch_up = TimeDelta::from_std(job.settings.catch_up).unwrap_or(LATE_LIMIT);
    if job.after.is_some() {
        LATE_LIMIT.max(catch_up)
    } else {
        LATE_LIMIT
    }
}

/// The latest moment a run due at `due` may still be claimed:
/// [`LATE_LIMIT`] after it (a dependent job's: its `catch_up`, if longer),
/// by the database's clock, as a point on the monotonic clock.
pub(super) fn deadline_since(engine: &Engine, job: &Job, due: DateTime<Utc>) -> Instant {
    let left = (due + late_limit(job) - engine.clock.now())
        .to_std()
        .unwrap_or_default();
    Instant::now() + left
}

/// Skips `instant` on this replica because the database answered `error`
/// where it had to tell whether the instant may run.
fn skip_on_error(job: &Job, instant: DateTime<Utc>, error: &DbError) -> Attempt {
    telemetry::skipped(&job.name, telemetry::Skip::Error, 1);
    warn!(job = %job.name, instant = %fmt_instant(instant), "instant skipped on this replica: {error}");
    Attempt::Skipped
}

fn skip_too_late(job: &Job, instant: DateTime<Utc>, why: &str) {
    telemetry::skipped(&job.name, telemetry::Skip::TooLate, 1);
    warn!(
        job = %job.name,
        instant = %fmt_instant(instant),
        "instant skipped: not claimable within {}s of its time: {why}",
        LATE_LIMIT.num_seconds()
    );
}

/// Catch-up: the latest instant at or before now, if it is at
/// most `catch_up` old, is claimed; the claim itself refuses it if it ran
/// already. Returns the instant and its run, if won.
async fn catch_up(
    engine: &Arc<Engine>,
    job: &Arc<Job>,
) -> Option<(DateTime<Utc>, Option<Current>)> {
    // An `every` job's instants are each replica's own: none to catch up.
    if job.run_on == RunOn::Every {
        return None;
    }
    let instant = catch_up_instant(job, engine.clock.now())?;
    // A job the fleet has just been given has missed nothing: only instants
    // after its lease row was created are caught up. A job written `at` an
    // instant is the exception: the file was accepted because its
    // `catch_up` covers the instant, so that it runs.
    let row = engine.store.find_lock(&job.name).await;
    let once = job.schedule.once_at().is_some();
    match row {
        Ok(Some(row))
            if !once
                && row
                    .created_at
                    .is_some_and(|created| instant < created.and_utc()) =>
        {
            debug!(job = %job.name, instant = %fmt_instant(instant), "no catch-up: the instant came before the job was added");
            return None;
        }
        Ok(_) => {}
        Err(e) => {
            debug!(job = %job.name, instant = %fmt_instant(instant), "no catch-up: the lease row could not be read: {e}");
            return None;
        }
    }
    let run = match attempt(
        engine,
        job,
        instant,
        Trigger::CatchUp.into(),
        Patience::OnTime,
    )
    .await
    {
        Attempt::Won(run) => {
            info!(job = %job.name, instant = %fmt_instant(instant), "catching up a missed instant");
            Some(run)
        }
        _ => None,
    };
    Some((instant, run))
}

/// The instant catch-up may claim: the latest one at or before `now`, if it
/// is at most `catch_up` old.
fn catch_up_instant(job: &Job, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if job.settings.catch_up.is_zero() {
        return None;
    }
    let mut instant = job.schedule.latest_at_or_before(now)?;
    // With a jitter, an instant whose start is still to come is the
    // ticker's, not catch-up's.
    if job.schedule.start_of(instant) > now {
        instant = job
            .schedule
            .latest_at_or_before(instant - TimeDelta::milliseconds(1))?;
    }
    let age = (now - job.schedule.start_of(instant)).to_std().ok()?;
    (age <= job.settings.catch_up).then_some(instant)
}

/// What starts a run, as its rows record it.
#[derive(Clone, Debug, Default)]
pub(super) struct Cause {
    pub(super) trigger: Trigger,
    /// When it was due, if not at its instant's start: a dependent job's
    /// run is due when its parents' runs ended.
    pub(super) due: Option<DateTime<Utc>>,
    /// The parents' runs whose ends started it.
    pub(super) parent_runs: Vec<i64>,
    /// Why the instant, once claimed, is recorded `skipped` instead of
    /// run.
    pub(super) not_run: Option<String>,
    /// Its parameters, if not the job's defaults: a one-time run's
    /// (`trigger --at`).
    pub(super) params: Option<Arc<crate::history::Params>>,
}

impl From<Trigger> for Cause {
    fn from(trigger: Trigger) -> Self {
        Cause {
            trigger,
            ..Cause::default()
        }
    }
}

/// What became of one instant on this replica.
pub(super) enum Attempt {
    /// Won: the run.
    Won(Current),
    /// Another replica has it (or a later one).
    Lost,
    /// The lease was held by a run that was going at the instant, or by
    /// `lock_at_least_for`: an overrun.
    Overrun {
        /// When that run was claimed.
        since: DateTime<Utc>,
        /// The fence of its lease.
        fence: i64,
    },
    /// The job is paused (`replicron pause`): not run, not missed.
    Paused {
        /// Who paused it.
        by: Option<String>,
        /// Why.
        reason: Option<String>,
    },
    /// Not claimed for another reason, logged where it was found.
    Skipped,
}

/// Claims `instant` of `job`; on a win, starts the run.
///
/// A claim the database refuses as not yet due (this replica's clock is
/// ahead of the database's) is tried again when it is; a contended one at
/// once. A lease held by a run claimed after the instant came (it started
/// late), or by one that had ended before the instant but whose release has
/// not landed, is waited for until the instant is [`LATE_LIMIT`] old. A
/// lease held by a run that was going at the instant, or on purpose by
/// `lock_at_least_for`, makes the instant an overrun.
pub(super) async fn attempt(
    engine: &Arc<Engine>,
    job: &Arc<Job>,
    instant: DateTime<Utc>,
    cause: Cause,
    patience: Patience,
) -> Attempt {
    // Said once per change by the drift check.
    if engine.drift.is_minority(&job.name) {
        telemetry::skipped(&job.name, telemetry::Skip::Minority, 1);
        debug!(job = %job.name, instant = %fmt_instant(instant), "not claimed: this replica's definition of the job is in the minority");
        return Attempt::Skipped;
    }
    // The moment the instant's run was due, by the database's clock.
    let due = match patience {
        Patience::Since(due) => due,
        Patience::OnTime | Patience::Waiting => job.schedule.start_of(instant),
    };
    if allows_overlap(job) {
        return attempt_allowed(
            engine,
            job,
            instant,
            cause,
            deadline_since(engine, job, due),
        )
        .await;
    }
    let (deadline, mut backoff) = match patience {
        Patience::OnTime | Patience::Since(_) => (
            deadline_since(engine, job, due),
            Backoff::new(Duration::from_millis(10), Duration::from_millis(250)),
        ),
        // Until the lease is given back, or has ended: at most a lease of
        // the run it waits for, or of the next, from now on.
        Patience::Waiting => (
            Instant::now() + WAITING_LIMIT,
            Backoff::new(Duration::from_millis(10), WAITING_POLL),
        ),
    };
    let mut wait = |reason: &str| {
        if *engine.phase.borrow() != Phase::Running {
            info!(job = %job.name, instant = %fmt_instant(instant), "not claimed: replicron is stopping ({reason}); a replica that goes on may claim it");
            return None;
        }
        let pause = backoff.next_pause();
        if Instant::now() + pause > deadline {
            skip_too_late(job, instant, reason);
            return None;
        }
        Some(pause)
    };
    loop {
        let claimed = engine.claimer.claim(job, instant).await;
        let pause = match claimed {
            Ok(Claimed::Won { lease, run, sent }) => {
                telemetry::claim(&job.name, true);
                let every = lease_times(job).every;
                if sent.elapsed() < every {
                    return start(engine, job, Hold::Fleet(lease), run, sent, &cause);
                }
                // Answered so late that the lease may be gone: confirm it
                // again before anything runs.
                warn!(
                    job = %job.name,
                    instant = %fmt_instant(instant),
                    answered_after_ms = sent.elapsed().as_millis() as u64,
                    "the claim was answered after a third of its lease: confirming the lease again before the run starts"
                );
                let late = Unanswered::late(&lease, sent);
                match settle(engine, job, instant, late, deadline).await {
                    Settled::Won { lease, run, sent } => {
                        return start(engine, job, Hold::Fleet(lease), run, sent, &cause);
                    }
                    Settled::Lost => return Attempt::Lost,
                    Settled::Retry | Settled::Skipped => return Attempt::Skipped,
                }
            }
            Ok(Claimed::Unanswered(unanswered)) => {
                // The claim may have committed without this replica hearing:
                // its row says, once the database answers again.
                warn!(
                    job = %job.name,
                    instant = %fmt_instant(instant),
                    "claim not answered: asking the database whether it committed once it answers: {}",
                    unanswered.error
                );
                match settle(engine, job, instant, unanswered, deadline).await {
                    Settled::Won { lease, run, sent } => {
                        return start(engine, job, Hold::Fleet(lease), run, sent, &cause);
                    }
                    Settled::Lost => return Attempt::Lost,
                    Settled::Skipped => return Attempt::Skipped,
                    Settled::Retry => match wait("its claims were not answered") {
                        Some(pause) => pause,
                        None => return Attempt::Skipped,
                    },
                }
            }
            Ok(Claimed::NotWon(Claim::Won(_) | Claim::Taken)) => {
                telemetry::claim(&job.name, false);
                debug!(job = %job.name, instant = %fmt_instant(instant), "claim lost");
                return Attempt::Lost;
            }
            Ok(Claimed::NotWon(Claim::Paused { by, reason })) => {
                telemetry::skipped(&job.name, telemetry::Skip::Paused, 1);
                debug!(job = %job.name, instant = %fmt_instant(instant), "paused: not claimed");
                return Attempt::Paused { by, reason };
            }
            Ok(Claimed::NotWon(Claim::NotYet { wait })) => {
                debug!(job = %job.name, instant = %fmt_instant(instant), wait_ms = wait.as_millis() as u64, "not yet due by the database's clock");
                wait.min(MAX_NOT_YET_WAIT) + Duration::from_millis(1)
            }
            Ok(Claimed::NotWon(Claim::Contended)) => {
                debug!(job = %job.name, instant = %fmt_instant(instant), "claim contended; claiming again");
                match wait("claims kept being contended") {
                    Some(_) => Duration::from_millis(1),
                    None => return Attempt::Skipped,
                }
            }
            Ok(Claimed::NotWon(Claim::Held(_))) if patience == Patience::Waiting => {
                match wait("the job's running run did not end") {
                    Some(pause) => pause,
                    None => return Attempt::Skipped,
                }
            }
            Ok(Claimed::NotWon(Claim::Held(holder))) => {
                // An instant of its own schedule finds a `queue` or
                // `replace` job's run holding the job from that run's
                // instant, as the replica that runs it does.
                let from_its_instant = patience == Patience::OnTime
                    && cause.trigger == Trigger::Schedule
                    && waits_for_the_run(job);
                match on_held(engine, job, &holder, due, from_its_instant).await {
                    OnHeld::Overrun { since } => {
                        telemetry::overrun(&job.name);
                        return Attempt::Overrun {
                            since,
                            fence: holder.fence,
                        };
                    }
                    OnHeld::Wait(why) => match wait(why) {
                        Some(pause) => pause,
                        None => return Attempt::Skipped,
                    },
                    OnHeld::Unknown(e) => return skip_on_error(job, instant, &e),
                }
            }
            Err(e) => return skip_on_error(job, instant, &e),
        };
        tokio::time::sleep(pause).await;
    }
}

/// How long a claim may wait for the job's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Patience {
    /// Until its instant is [`LATE_LIMIT`] old; a lease held by a run that
    /// was going at the instant makes it an overrun.
    OnTime,
    /// As `OnTime`, counted from when the run was due (a dependent job's
    /// run: when its parents' runs ended), not from its instant; up to the
    /// job's `catch_up` if that is longer.
    Since(DateTime<Utc>),
    /// Until the lease is free (an instant that waits for the job's run,
    /// `overlap = "queue"` or `"replace"`).
    Waiting,
}

/// How often an instant that waits for the job's run asks for the lease:
/// it starts this soon after the run ends.
pub(super) const WAITING_POLL: Duration = Duration::from_millis(40);

/// The longest an instant waits for the job's run: a bound for a lease
/// that never ends (each is at most `lock_at_most_for`, and kept only
/// while its run goes).
const WAITING_LIMIT: Duration = Duration::from_secs(366 * 24 * 3600);

/// Whether the job's runs may overlap (`overlap = "allow"`).
fn allows_overlap(job: &Job) -> bool {
    matches!(job.settings.overlap, Overlap::Allow(_))
}

/// Claims `instant` of an `overlap = "allow"` job on the instant's own
/// lease row (`lease::instant_row`), which the runs of other instants do
/// not hold; the job's row still says whether it is paused. On a win,
/// starts the run, which then waits for one of the job's run slots.
async fn attempt_allowed(
    engine: &Arc<Engine>,
    job: &Arc<Job>,
    instant: DateTime<Utc>,
    cause: Cause,
    deadline: Instant,
) -> Attempt {
    if let Some(not_run) = unless_paused(engine, job, instant).await {
        return not_run;
    }
    let row = lease::instant_row(&job.name, instant);
    loop {
        // The lease counts from when its claim was sent.
        let sent = Instant::now();
        let pause = match engine
            .store
            .claim(
                &row,
                &engine.instance,
                instant,
                job.settings.lock_at_most_for,
            )
            .await
        {
            Ok(Claim::Won(lease)) => {
                telemetry::claim(&job.name, true);
                return start(engine, job, Hold::Fleet(lease), None, sent, &cause);
            }
            Ok(Claim::NotYet { wait }) => wait.min(MAX_NOT_YET_WAIT) + Duration::from_millis(1),
            Ok(Claim::Contended) => Duration::from_millis(1),
            Ok(_) => {
                telemetry::claim(&job.name, false);
                debug!(job = %job.name, instant = %fmt_instant(instant), "claim lost");
                return Attempt::Lost;
            }
            Err(e) => return skip_on_error(job, instant, &e),
        };
        if Instant::now() + pause > deadline || *engine.phase.borrow() != Phase::Running {
            skip_too_late(job, instant, "its claims kept being contended");
            return Attempt::Skipped;
        }
        tokio::time::sleep(pause).await;
    }
}

/// Whether an instant that comes while the job's run is going waits for
/// it (`queue`), or for it to be stopped (`replace`).
pub(super) fn waits_for_the_run(job: &Job) -> bool {
    matches!(job.settings.overlap, Overlap::Queue | Overlap::Replace)
}

/// An instant that came while the job's run under `fence` was going (on
/// this replica, `local` is that run's task), for a job whose instants
/// wait for it: `None` if another instant waits already (this one is an
/// overrun); else, once the run has ended (`replace`: once it was asked to
/// stop, and did), the instant's claim: `Some(None)` if the job's loop
/// stopped meanwhile.
pub(super) async fn overlapping(
    engine: &Arc<Engine>,
    job: &Arc<Job>,
    instant: DateTime<Utc>,
    fence: i64,
    local: Option<&mut JoinHandle<()>>,
    retired: &mut watch::Receiver<bool>,
    cause: Cause,
) -> Option<Option<Attempt>> {
    match engine.store.enqueue(&job.name, instant).await {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => {
            warn!(job = %job.name, instant = %fmt_instant(instant), "the instant could not wait for the running run; an overrun: {e}");
            return None;
        }
    }
    let replace = job.settings.overlap == Overlap::Replace;
    if replace {
        match engine.store.request_stop(&job.name, fence).await {
            Ok(_) => {
                info!(job = %job.name, instant = %fmt_instant(instant), fence, "replacing the running run: it is asked to stop");
            }
            Err(e) => {
                warn!(job = %job.name, instant = %fmt_instant(instant), "the running run could not be asked to stop; the instant waits for it to end: {e}");
            }
        }
    } else {
        info!(job = %job.name, instant = %fmt_instant(instant), fence, "queued: the instant waits for the running run to end");
    }
    let stopped = stopping(engine, retired);
    tokio::pin!(stopped);
    if let Some(task) = local {
        let stopped_first = tokio::select! {
            biased;
            () = &mut stopped => true,
            _ = &mut *task => false,
        };
        if stopped_first {
            // The run goes on to its end, as any run does at a stop (told
            // to stop once the shutdown grace is over), and is recorded.
            let _ = task.await;
            leave_waiting(engine, job, instant).await;
            return Some(None);
        }
    }
    tokio::select! {
        biased;
        () = &mut stopped => {
            leave_waiting(engine, job, instant).await;
            Some(None)
        }
        attempt = attempt(engine, job, instant, cause, Patience::Waiting) => Some(Some(attempt)),
    }
}

/// How long a replica that stops leaves an instant that waited for the
/// job's run to the other replicas that wait for it, once the run's lease
/// is free (they claim it every [`WAITING_POLL`]), before it records the
/// instant itself.
const LEFT_TO_OTHERS_FOR: Duration = Duration::from_secs(2);

/// `instant`, which waited for the job's run (`queue`, `replace`), when
/// this replica stops (or a reload retires its job) before it could be
/// claimed. Every replica that reached it waits for it, and the first to
/// claim it once the run's lease is free runs it: it is left to the
/// replica whose run holds the lease, or to any that claims it within
/// [`LEFT_TO_OTHERS_FOR`] of the lease's end. If none does, this replica
/// claims it and records it `skipped`, saying why: never lost unsaid.
async fn leave_waiting(engine: &Engine, job: &Job, instant: DateTime<Utc>) {
    let scheduled = crate::db::clock::to_db_time(instant).0;
    let mut free_since: Option<Instant> = None;
    let mut stopping_since: Option<Instant> = None;
    loop {
        let row = match engine.store.find_lock(&job.name).await {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(e) => {
                warn!(job = %job.name, instant = %fmt_instant(instant), "the instant that waited for the job's run is left unrecorded: the job's lease could not be read: {e}");
                return;
            }
        };
        if row.last_scheduled_at.is_some_and(|last| last >= scheduled) {
            info!(job = %job.name, instant = %fmt_instant(instant), by = row.locked_by.as_deref().unwrap_or("?"), "the instant that waited for the job's run was claimed by another replica");
            return;
        }
        let held = row.lock_until.and_utc() > engine.clock.now();
        match row.locked_by.as_deref() {
            Some(holder) if held && holder != engine.instance => {
                info!(job = %job.name, instant = %fmt_instant(instant), holder, "the instant that waits for the job's run is left to the replica whose run it waits for");
                return;
            }
            _ if held => {
                // This replica's run (a triggered one, or one kept by
                // `lock_at_least_for`): it ends with the stop, once told
                // to, within its `kill_grace`.
                free_since = None;
                if matches!(*engine.phase.borrow(), Phase::Stopping { .. }) {
                    let since = *stopping_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > job.settings.kill_grace + LEFT_TO_OTHERS_FOR {
                        warn!(job = %job.name, instant = %fmt_instant(instant), "the instant that waited for the job's run is left unrecorded: this replica's lease of the job outlasts its stop (lock_at_least_for); the replica that claims the job next decides it");
                        return;
                    }
                }
            }
            _ => {
                if free_since.get_or_insert_with(Instant::now).elapsed() >= LEFT_TO_OTHERS_FOR {
                    break;
                }
            }
        }
        tokio::time::sleep(WAITING_POLL).await;
    }
    let why = if *engine.phase.borrow() == Phase::Running {
        "not run: its job was changed or removed by a reload while the instant waited for the job's run"
    } else {
        "not run: replicron stopped while the instant waited for the job's run, and no other replica claimed it"
    };
    match engine
        .store
        .claim(
            &job.name,
            &engine.instance,
            instant,
            job.settings.lock_at_most_for,
        )
        .await
    {
        Ok(Claim::Won(lease)) => {
            unanswered::record(
                engine,
                job,
                instant,
                lease.fence,
                true,
                why,
                telemetry::Skip::Stopped,
            )
            .await;
            if let Err(e) = engine.store.release(lease, Duration::ZERO).await {
                warn!(job = %job.name, "the lease could not be given back; it ends by itself: {e}");
            }
        }
        Ok(Claim::Taken) => {
            info!(job = %job.name, instant = %fmt_instant(instant), "the instant that waited for the job's run was claimed by another replica");
        }
        Ok(other) => {
            warn!(job = %job.name, instant = %fmt_instant(instant), "the instant that waited for the job's run is left unrecorded: its claim found {other:?}");
        }
        Err(e) => {
            warn!(job = %job.name, instant = %fmt_instant(instant), "the instant that waited for the job's run is left unrecorded: {e}");
        }
    }
}

/// What a lease held by `holder` when `instant` was claimed makes of the
/// instant.
enum OnHeld {
    /// An overrun of the run claimed at `since`.
    Overrun { since: DateTime<Utc> },
    /// Wait for the lease, as long as the instant may: why.
    Wait(&'static str),
    /// The history could not say what holds it.
    Unknown(DbError),
}

/// Whether `holder`'s lease makes `instant` an overrun (a run going when
/// the instant's run was to start, or a lease kept on purpose by
/// `lock_at_least_for`) or a wait (a run that started late, a release that
/// has not landed, a claim that started no run).
async fn on_held(
    engine: &Engine,
    job: &Job,
    holder: &lease::Holder,
    start: DateTime<Utc>,
    from_its_instant: bool,
) -> OnHeld {
    // A `queue` or `replace` job's run held the job from its own instant
    // (`Current::holds_from_its_instant`): the instant waits behind it, or
    // replaces it, however late it started, and a claim that started no
    // run is waited for as a run would be.
    if from_its_instant && let Some(held) = holder.instant.filter(|held| *held < start) {
        return OnHeld::Overrun {
            since: holder.claimed_at.unwrap_or(held),
        };
    }
    // Claimed after the instant came: a run that started late; the instant
    // waits for it.
    let Some(since) = holder.claimed_at.filter(|since| *since < start) else {
        return OnHeld::Wait("the job's lease stayed held by a run that started after it");
    };
    if held_on_purpose(job, holder, since) {
        return OnHeld::Overrun { since };
    }
    match was_going_at(engine, job, holder, start).await {
        Ok(Held::Going) => OnHeld::Overrun { since },
        // Its run had ended: its release has not landed yet.
        Ok(Held::Ended) => OnHeld::Wait("the release of the job's previous run did not land"),
        // Nothing runs without a start record: no run holds the lease, only
        // a claim (one whose replica died, or did not hear it won, before
        // recording it). The instant waits for the lease to be given back
        // or to run out.
        Ok(Held::NoRun) => {
            OnHeld::Wait("the job's lease stayed held by a claim that started no run")
        }
        Ok(Held::StartedLater) => {
            OnHeld::Wait("the job's lease stayed held by a run that started after it")
        }
        Err(e) => OnHeld::Unknown(e),
    }
}

/// Starts the run of `hold`'s instant, whose claim was sent at `claimed`
/// (for a per-host run, now).
fn start(
    engine: &Arc<Engine>,
    job: &Arc<Job>,
    hold: Hold,
    first_run: Option<i64>,
    claimed: Instant,
    cause: &Cause,
) -> Attempt {
    let Some(work) = Work::of(job) else {
        return Attempt::Skipped;
    };
    let claimed_at = engine.clock.now();
    let going = Arc::new(execute::Going::default());
    let (fence, instant) = (hold.fence(), hold.instant());
    let run = execute::execute(
        engine.clone(),
        Plan {
            work,
            recording: Recording {
                due: Some(
                    cause
                        .due
                        .unwrap_or_else(|| job.schedule.start_of(hold.instant())),
                ),
                trigger: cause.trigger,
                params: cause
                    .params
                    .clone()
                    .unwrap_or_else(|| job.params_at(hold.instant())),
                params_from_schedule: cause.params.is_none()
                    && job.schedule.params_at(hold.instant()).is_some(),
                parent_runs: cause.parent_runs.clone(),
                not_run: cause.not_run.clone(),
                ..Recording::default()
            },
            hold,
            claimed,
            first_run,
            going: Some(going.clone()),
        },
    );
    // A catch-up starts under the start throttle; the job's instants on
    // time never wait for it.
    let throttled = (cause.trigger == Trigger::CatchUp).then(|| engine.clone());
    Attempt::Won(Current {
        task: tokio::spawn(async move {
            if let Some(engine) = throttled {
                engine.throttle.start(super::throttle::Kind::CatchUp).await;
            }
            run.await;
        }),
        instant,
        claimed_at,
        going,
        fence,
    })
}

/// What `instant` of `job` becomes when its lease row says it is paused
/// (`Paused`), or cannot be read (`Skipped`); `None`: it may run. For the
/// runs that claim no job row: per-host runs, and `allow` jobs' instants.
async fn unless_paused(engine: &Engine, job: &Job, instant: DateTime<Utc>) -> Option<Attempt> {
    match engine.store.find_lock(&job.name).await {
        Ok(Some(row))
            if lease::pause_covers(
                row.paused_at,
                row.paused_until,
                crate::db::clock::to_db_time(instant).0,
            ) =>
        {
            telemetry::skipped(&job.name, telemetry::Skip::Paused, 1);
            Some(Attempt::Paused {
                by: row.paused_by,
                reason: row.paused_reason,
            })
        }
        Ok(_) => None,
        Err(e) => Some(skip_on_error(job, instant, &e)),
    }
}

/// Runs `instant` of a `run_on = "every"` job on this replica: no claim,
/// only the job's pause (its lease row says) is heeded. The tick loop
/// already keeps it from running beside itself here.
async fn run_here(engine: &Arc<Engine>, job: &Arc<Job>, instant: DateTime<Utc>) -> Attempt {
    if let Some(not_run) = unless_paused(engine, job, instant).await {
        return not_run;
    }
    start(
        engine,
        job,
        Hold::Here(instant),
        None,
        Instant::now(),
        &Cause::default(),
    )
}

/// Whether a lease claimed at `since` is held only because of
/// `lock_at_least_for`: released, it ends at `claimed_at +
/// lock_at_least_for`; unreleased, it ends a whole `lock_at_most_for` after
/// its last confirmation.
fn held_on_purpose(job: &Job, holder: &lease::Holder, since: DateTime<Utc>) -> bool {
    let at_least = chrono::TimeDelta::from_std(job.settings.lock_at_least_for).unwrap_or_default();
    !job.settings.lock_at_least_for.is_zero() && holder.until <= since + at_least
}

/// How long the history may say a lease's run is still going before that
/// is believed: its end record lands a moment after the run ends, and after
/// a stall (this replica's instant is already late) all the writes the stall
/// held back land together.
const END_RECORD_PATIENCE: Duration = Duration::from_millis(250);
const END_RECORD_PATIENCE_AFTER_STALL: Duration = Duration::from_secs(3);

/// What holds a lease, as the history tells.
enum Held {
    /// A run that was going at the instant's start.
    Going,
    /// A run that had ended by then (its release has not landed).
    Ended,
    /// A claim that recorded no run.
    NoRun,
    /// A run that started after it, under a lease taken up after it.
    StartedLater,
}

/// What holds `holder`'s lease as of `at` (an instant's start), by its
/// history: a run that ended (its last attempt, with no retry to come)
/// before then, one that did not, or no run at all under its fence.
async fn was_going_at(
    engine: &Engine,
    job: &Job,
    holder: &lease::Holder,
    at: DateTime<Utc>,
) -> Result<Held, DbError> {
    let Some(held_instant) = holder.instant else {
        return Ok(Held::Going);
    };
    let late = (engine.clock.now() - at).to_std().unwrap_or_default();
    let patience = if late > Duration::from_secs(1) {
        END_RECORD_PATIENCE_AFTER_STALL
    } else {
        END_RECORD_PATIENCE
    };
    let give_up = Instant::now() + patience;
    loop {
        let row = engine
            .store
            .latest_attempt(&job.name, held_instant, holder.fence)
            .await?;
        let recorded = row.is_some();
        // A run that started after the instant, under a lease taken up
        // after it (its claim was answered, or found committed, late), was
        // not going when the instant came: the instant waits for it. One
        // that started late under a lease held since before the instant
        // (it waited for its shared locks) was going.
        if row
            .as_ref()
            .is_some_and(|run| run.attempt == 1 && run.started_at.and_utc() > at)
            && engine.store.find_lock(&job.name).await?.is_some_and(|row| {
                row.fence == holder.fence && row.locked_at.is_some_and(|since| since.and_utc() > at)
            })
        {
            return Ok(Held::StartedLater);
        }
        let ended = row.and_then(|run| {
            let status = run.status;
            let retry_to_come = job.settings.exit_codes.retried(status, run.exit_code)
                && run.attempt <= job.settings.retries as i32;
            let finished = run.finished_at?;
            (status != RunStatus::Running && !retry_to_come).then(|| finished.and_utc())
        });
        match ended {
            Some(end) if end > at => return Ok(Held::Going),
            Some(_) => return Ok(Held::Ended),
            None if Instant::now() < give_up => tokio::time::sleep(Duration::from_millis(50)).await,
            None if recorded => return Ok(Held::Going),
            None => return Ok(Held::NoRun),
        }
    }
}

/// The timings of `job`'s lease.
fn lease_times(job: &Job) -> crate::lease::keeper::LeaseTimes {
    crate::lease::keeper::LeaseTimes::new(job.settings.lock_at_most_for, job.settings.kill_grace)
}

/// The longest pause before claiming again an instant the database said is
/// not yet due: a wrong offset is corrected by the next estimate.
const MAX_NOT_YET_WAIT: Duration = Duration::from_secs(5);
