//! One won instant: record each attempt, run its action, keep the lease
//! alive meanwhile, stop the run on its timeout, a lost lease or shutdown,
//! record how it ended, retry a failure if the job says so, release.
//!
//! The action runs as a task of its own: a panicking action ends its run
//! (recorded `failed`), not the scheduler. Told to stop, an action has its
//! grace to return (a child process: SIGTERM, then SIGKILL); past that the
//! task is aborted.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::Phase;
use super::engine::Engine;
use super::job::{Job, JobSettings};
use crate::backoff::Backoff;
use crate::config::LOCK_ROW_PREFIX;
use crate::history::journal::Write;
use crate::history::{NewRun, RunFinish, RunStatus};
use crate::lease::keeper::{Keeper, LeaseState, LeaseTimes};
use crate::lease::{Claim, Lease};
use crate::notify::{Event, Notice, Ping};
use crate::runner::{Action, Ended, Ending, RunContext, StopReason};
use crate::schedule::LATE_LIMIT;
use crate::telemetry;

/// How the last attempt of an instant ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Its status.
    pub(crate) status: RunStatus,
    /// Its exit code, if a process exited.
    pub(crate) exit_code: Option<i32>,
    /// The tail of its output, as recorded (for a run that could not start:
    /// why).
    pub(crate) output: String,
}

/// How a run is recorded when that differs from its lease: an `exec
/// --once` run holds the lease of its KEY, whose instant only names the
/// key, and is recorded at the time it started, with the key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Recording {
    /// Recorded (and given as `REPLICRON_SCHEDULED_AT`) instead of the
    /// lease's instant.
    pub(crate) instant: Option<DateTime<Utc>>,
    /// The `exec --once` KEY.
    pub(crate) once_key: Option<String>,
    /// When the run was due, if not at the lease's instant (a job's
    /// jitter): its start's lateness is measured from here.
    pub(crate) due: Option<DateTime<Utc>>,
    /// A run of this replica's own (`run_on = "every"`): its lease is no
    /// row of the database's but a local one, never extended nor released,
    /// and its history rows carry this instance as their scope.
    pub(crate) per_host: bool,
}

/// What runs: a name (its history rows carry it: a job's, or `exec`'s
/// NAME), the settings that bound each run, and the action.
#[derive(Clone)]
pub(crate) struct Work {
    pub(crate) name: String,
    pub(crate) settings: JobSettings,
    pub(crate) action: Arc<dyn Action>,
}

impl Work {
    /// What `job` runs; `None` for a job with nothing to run (never built).
    pub(crate) fn of(job: &Job) -> Option<Work> {
        Some(Work {
            name: job.name.clone(),
            settings: job.settings.clone(),
            action: job.action.clone()?,
        })
    }
}

/// What to run under a won lease.
pub(crate) struct Plan {
    pub(crate) work: Work,
    pub(crate) lease: Lease,
    pub(crate) recording: Recording,
    /// The monotonic moment the lease was claimed (its first confirmation).
    pub(crate) claimed: Instant,
    /// The history row of attempt 1, when the claim batch recorded it (and
    /// marked the runs of vanished holders abandoned).
    pub(crate) first_run: Option<i64>,
    /// Set, by the database's clock, once the last attempt is over, before
    /// the lease is released.
    pub(crate) ended: Option<Arc<OnceLock<DateTime<Utc>>>>,
}

/// Runs the instant `plan` won, with its retries, then releases the lease.
/// Returns how the last attempt ended (`None` if none could be recorded).
pub(crate) async fn execute(engine: Arc<Engine>, plan: Plan) -> Option<Outcome> {
    let Plan {
        work: job,
        lease,
        recording,
        claimed,
        first_run,
        ended,
    } = plan;
    let settings = &job.settings;
    let times = LeaseTimes::new(settings.lock_at_most_for, settings.kill_grace);
    let mut keeper = if recording.per_host {
        Keeper::local(times, claimed)
    } else {
        Keeper::start(
            engine.store.clone(),
            engine.health.clone(),
            lease.clone(),
            times,
            claimed,
        )
    };
    if first_run.is_none() && lease.job == job.name && !recording.per_host {
        engine.journal.push(Write::Abandoned {
            job: job.name.clone(),
            fence: lease.fence,
        });
    }
    let attempts = 1 + settings.retries;
    let mut last = None;
    let locks = match take_locks(&engine, &job, &keeper).await {
        Ok(locks) => {
            // Recorded at the claim, it starts now: its end is measured
            // from its start, and a run that waited must not look ended
            // before it ran.
            if let (false, Some(id)) = (locks.is_empty(), first_run)
                && let Err(e) = engine.store.restart_run(id).await
            {
                engine.health.report_error(&e);
                warn!(job = %job.name, run_id = id, "the run's start after its locks could not be recorded: {e}");
            }
            locks
        }
        Err(why) => {
            last = record_skipped(&engine, &job, &lease, &recording, first_run, &why).await;
            Vec::new()
        }
    };
    let attempts = if last.is_some() { 0 } else { attempts };
    for attempt in 1..=attempts {
        if attempt > 1 && !pause_before_retry(&engine, settings, &mut keeper).await {
            break;
        }
        let recorded = if attempt == 1 { first_run } else { None };
        let outcome = run_attempt(
            &engine,
            &job,
            &lease,
            &recording,
            &mut keeper,
            attempt,
            recorded,
        )
        .await;
        let retryable = matches!(
            outcome,
            Some((
                Outcome {
                    status: RunStatus::Failed | RunStatus::TimedOut,
                    ..
                },
                _
            ))
        );
        last = outcome;
        if !retryable || attempt == attempts {
            break;
        }
        info!(job = %job.name, instant = %super::fmt_instant(lease.instant), attempt, "retrying in {}", humantime::format_duration(settings.retry_backoff));
    }
    keeper.stop();
    if let Some(ended) = ended {
        let _ = ended.set(engine.clock.now());
    }
    for lock in locks.into_iter().rev() {
        release_lock(&engine, &job, lock).await;
    }
    if !recording.per_host {
        release(&engine, &job, &lease).await;
    }
    let (outcome, attempted) = last?;
    notify_outcome(&engine, &job, &outcome, attempted).await;
    Some(outcome)
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
                    engine.health.report_ok();
                    keeper.add(lease.clone());
                    taken.push(lease);
                    continue 'locks;
                }
                Ok(Claim::Held(held)) => holder = held.by,
                Ok(_) => {}
                Err(e) => engine.health.report_error(&e),
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
    if let Err(e) = engine.store.release(lock.clone(), Duration::ZERO).await {
        engine.health.report_error(&e);
        warn!(job = %job.name, lock = %lock.job, "a shared lock could not be released; it ends by itself: {e}");
    }
}

/// Records the instant `skipped` (a shared lock stayed held), as attempt 1.
async fn record_skipped(
    engine: &Engine,
    job: &Work,
    lease: &Lease,
    recording: &Recording,
    first_run: Option<i64>,
    why: &str,
) -> Option<(Outcome, Attempted)> {
    let instant = recording.instant.unwrap_or(lease.instant);
    let run_id = match first_run {
        Some(id) => id,
        None => match engine
            .store
            .record_run_started(new_run(engine, job, lease, recording, 1))
            .await
        {
            Ok(id) => id,
            Err(e) => {
                engine.health.report_error(&e);
                error!(job = %job.name, instant = %super::fmt_instant(instant), "the skipped instant could not be recorded: {e}");
                return None;
            }
        },
    };
    warn!(job = %job.name, instant = %super::fmt_instant(instant), run_id, "instant skipped: {why}");
    let outcome = Outcome {
        status: RunStatus::Skipped,
        exit_code: None,
        output: format!("replicron: {why}\n"),
    };
    record_end(
        engine,
        &job.name,
        run_id,
        RunFinish {
            status: outcome.status,
            exit_code: None,
            output: outcome.output.clone(),
            duration: Duration::ZERO,
        },
    )
    .await;
    telemetry::run_finished(
        &job.name,
        outcome.status,
        Duration::ZERO,
        engine.clock.now(),
    );
    Some((
        outcome,
        Attempted {
            run_id,
            attempt: 1,
            duration: Duration::ZERO,
            instant,
        },
    ))
}

/// The history row of attempt `attempt` of `lease`'s instant, as it starts.
fn new_run(
    engine: &Engine,
    job: &Work,
    lease: &Lease,
    recording: &Recording,
    attempt: u32,
) -> NewRun {
    NewRun {
        job: job.name.clone(),
        scheduled_at: recording.instant.unwrap_or(lease.instant),
        attempt: attempt as i32,
        instance: engine.instance.clone(),
        fence: lease.fence,
        once_key: recording.once_key.clone(),
        scope: if recording.per_host {
            engine.instance.clone()
        } else {
            String::new()
        },
    }
}

/// Waits `retry_backoff` with the lease kept alive; false if the lease was
/// lost or the scheduler is stopping meanwhile.
async fn pause_before_retry(engine: &Engine, settings: &JobSettings, keeper: &mut Keeper) -> bool {
    let pause = tokio::time::sleep(settings.retry_backoff);
    tokio::pin!(pause);
    let mut phase = engine.phase.clone();
    loop {
        if keeper.state() == LeaseState::Lost || *phase.borrow() != Phase::Running {
            return false;
        }
        tokio::select! {
            () = &mut pause => return true,
            _ = keeper.changed() => {}
            changed = phase.changed() => {
                if changed.is_err() {
                    return false;
                }
            }
        }
    }
}

/// One attempt; returns how it ended, or `None` if it could not be
/// recorded (and so was not run).
async fn run_attempt(
    engine: &Arc<Engine>,
    job: &Work,
    lease: &Lease,
    recording: &Recording,
    keeper: &mut Keeper,
    attempt: u32,
    recorded: Option<i64>,
) -> Option<(Outcome, Attempted)> {
    let instant = recording.instant.unwrap_or(lease.instant);
    let started = match recorded {
        Some(id) => Ok(id),
        None => {
            engine
                .store
                .record_run_started(new_run(engine, job, lease, recording, attempt))
                .await
        }
    };
    let run_id = match started {
        Ok(id) => id,
        Err(e) => {
            engine.health.report_error(&e);
            // A run whose start cannot be recorded is not started: nothing
            // may run without a record.
            error!(job = %job.name, instant = %super::fmt_instant(lease.instant), attempt, "run not started, its start could not be recorded: {e}");
            return None;
        }
    };
    let action = job.action.clone();
    let (stop, stopped) = watch::channel(None);
    let (started_tx, started_rx) = oneshot::channel();
    let ctx = RunContext {
        job: Arc::from(job.name.as_str()),
        instant,
        fence: lease.fence,
        attempt,
        run_id,
        instance: Arc::from(engine.instance.as_str()),
        stop: stopped,
        lease: keeper.watch(),
        lease_times: keeper.times(),
        kill_grace: job.settings.kill_grace,
        guard: engine.guard.clone(),
        started: Arc::new(std::sync::Mutex::new(Some(started_tx))),
    };
    let began = Instant::now();
    // The action is called inside the task: a job whose closure panics
    // before it returns its future fails like one whose future panics.
    let mut task = tokio::spawn(async move { action.run(ctx).await });
    // The run counts as started when its action says so (a process once it
    // is spawned): that is when lateness is what the job feels. A run that
    // ends before saying so (it could not start) is not logged as started.
    let ended_at_once = tokio::select! {
        biased;
        Ok(pid) = started_rx => {
            let late = engine.clock.now() - recording.due.unwrap_or(lease.instant);
            telemetry::start_lateness(&job.name, late.to_std().unwrap_or_default());
            info!(
                job = %job.name,
                instant = %super::fmt_instant(lease.instant),
                run_id,
                fence = lease.fence,
                attempt,
                pid,
                late_ms = late.num_milliseconds(),
                "run started"
            );
            engine.notifier.ping(&job.name, Ping::Start, run_id);
            None
        }
        joined = &mut task => Some(ending_of(joined, job, run_id)),
    };
    let (stopped_for, ending) = match ended_at_once {
        Some(ending) => (None, ending),
        None => watch_run(engine, job, keeper, &mut task, &stop, run_id).await,
    };
    let mut status = match (stopped_for, ending.how) {
        (_, Ended::NotStarted) => RunStatus::Error,
        (Some(StopReason::Timeout), _) => RunStatus::TimedOut,
        (Some(StopReason::LeaseLost), _) => RunStatus::LostLock,
        (Some(StopReason::Shutdown { .. }), _) => RunStatus::Killed,
        (None, Ended::Succeeded) => RunStatus::Succeeded,
        (None, Ended::Failed) => RunStatus::Failed,
    };
    // Killed by a signal once the lease's confirmation deadline had passed:
    // the guard stopped it for its lease (it acts on the same deadline as
    // the keeper, which may not have noticed yet).
    if status == RunStatus::Failed && ending.signal.is_some() && keeper.past_confirmation_deadline()
    {
        warn!(job = %job.name, run_id, "the run was stopped: its lease could not be confirmed in time");
        status = RunStatus::LostLock;
    }
    // A replica frozen past its lease must not record a success (or any
    // ending) it had no right to: check the lease first.
    if matches!(status, RunStatus::Succeeded | RunStatus::Failed)
        && !keeper.verify(&engine.store, &engine.health).await
    {
        warn!(job = %job.name, run_id, "the run ended after its lease was lost");
        status = RunStatus::LostLock;
    }
    if status == RunStatus::Error {
        error!(job = %job.name, run_id, "cannot start the run: {}", ending.output.trim());
    }
    let duration = began.elapsed();
    record_end(
        engine,
        &job.name,
        run_id,
        RunFinish {
            status,
            exit_code: ending.exit_code,
            output: ending.output.clone(),
            duration,
        },
    )
    .await;
    telemetry::run_finished(&job.name, status, duration, engine.clock.now());
    info!(
        job = %job.name,
        instant = %super::fmt_instant(lease.instant),
        run_id,
        fence = lease.fence,
        attempt,
        status = %status,
        exit_code = ending.exit_code,
        duration_ms = duration.as_millis() as u64,
        "run finished"
    );
    if status == RunStatus::Succeeded {
        engine.notifier.ping(&job.name, Ping::Success, run_id);
    } else {
        engine.notifier.ping(&job.name, Ping::Fail, run_id);
    }
    Some((
        Outcome {
            status,
            exit_code: ending.exit_code,
            output: ending.output,
        },
        Attempted {
            run_id,
            attempt: attempt as i32,
            duration,
            instant,
        },
    ))
}

/// Records how run `id` of `job` ended, before anything else is done with
/// its lease: the next claimant's sweep must find the run ended, not still
/// `running` under an older fence, which it would mark `abandoned` (and
/// tell) though its holder released the lease in good order. An end the
/// database does not take now goes to the journal, which retries it until
/// it lands.
async fn record_end(engine: &Engine, job: &str, id: i64, finish: RunFinish) {
    let write = Write::Finished {
        job: job.to_string(),
        id,
        finish: finish.clone(),
    };
    match engine
        .store
        .call("recording a run's end", move |conn| {
            crate::history::record_run_finished(conn, id, &finish)
        })
        .await
    {
        Ok(_) => engine.health.report_ok(),
        Err(e) => {
            // The journal's retries say the rest (and the health state).
            debug!(job, run_id = id, "the run's end goes to the journal: {e}");
            engine.journal.push(write);
        }
    }
}

/// What identifies an attempt that ran, for the notice of its instant.
#[derive(Clone, Copy, Debug)]
struct Attempted {
    run_id: i64,
    attempt: i32,
    duration: Duration,
    instant: DateTime<Utc>,
}

/// Tells about the instant's final outcome: a failure of any kind, or (if
/// the job asks) its recovery after one.
async fn notify_outcome(engine: &Engine, job: &Work, outcome: &Outcome, attempted: Attempted) {
    let event = match Event::of_status(outcome.status) {
        Some(event) => event,
        None if outcome.status == RunStatus::Succeeded
            && engine.notifier.wants(&job.name, Event::Recovered) =>
        {
            let job_name = job.name.clone();
            match engine
                .store
                .call("reading the job's previous run", move |conn| {
                    crate::history::status_before(conn, &job_name, attempted.instant)
                })
                .await
            {
                Ok(Some(previous)) if Event::of_status(previous).is_some() => Event::Recovered,
                Ok(_) => return,
                Err(e) => {
                    warn!(job = %job.name, "cannot tell whether the run recovered from a failure: {e}");
                    return;
                }
            }
        }
        None => return,
    };
    engine.notifier.event(Notice::new(
        event,
        &job.name,
        attempted.instant,
        outcome.status,
        outcome.exit_code,
        attempted.attempt,
        &engine.instance,
        Some(attempted.duration),
        &outcome.output,
        Some(attempted.run_id),
    ));
}

/// How long a run told to stop may take beyond its grace (a process gets
/// SIGKILL at the end of the grace, and is then reaped) before its task is
/// aborted.
const ABORT_MARGIN: Duration = Duration::from_secs(2);

/// Waits for the run's task to end; tells it to stop on timeout, on a lost
/// lease and at shutdown, aborts it if it does not end in time, and records
/// each confirmation of its lease. Returns why it was told to stop, if it
/// was, and how it ended.
async fn watch_run(
    engine: &Engine,
    job: &Work,
    keeper: &mut Keeper,
    task: &mut tokio::task::JoinHandle<Ending>,
    stop: &watch::Sender<Option<StopReason>>,
    run_id: i64,
) -> (Option<StopReason>, Ending) {
    let deadline = Instant::now() + job.settings.timeout;
    let mut phase = engine.phase.clone();
    let mut abort_at: Option<Instant> = None;
    if keeper.state() == LeaseState::Lost {
        tell(
            stop,
            &mut abort_at,
            StopReason::LeaseLost,
            keeper.times().stop_grace,
        );
    }
    loop {
        let stopping = *stop.borrow();
        tokio::select! {
            joined = &mut *task => return (stopping, ending_of(joined, job, run_id)),
            () = tokio::time::sleep_until(deadline), if stopping.is_none() => {
                warn!(job = %job.name, timeout = %humantime::format_duration(job.settings.timeout), "run timed out; stopping it");
                tell(stop, &mut abort_at, StopReason::Timeout, job.settings.kill_grace);
            }
            () = tokio::time::sleep_until(abort_at.unwrap_or(deadline)), if abort_at.is_some() => {
                task.abort();
                warn!(job = %job.name, run_id, "the run did not end when told to stop; dropped");
                return (
                    stopping,
                    Ending::of(Ended::Failed, "stopped: it did not end within its grace".to_string()),
                );
            }
            state = keeper.changed() => match state {
                LeaseState::Lost => {
                    warn!(job = %job.name, "stopping the run: its lease is lost");
                    tell(stop, &mut abort_at, StopReason::LeaseLost, keeper.times().stop_grace);
                }
                LeaseState::Held(_) => {
                    engine.journal.push(Write::Confirmed { job: job.name.clone(), id: run_id });
                }
            },
            changed = phase.changed() => {
                let current = *phase.borrow();
                match (changed, current) {
                    (_, Phase::Stopping { immediate: true }) => {
                        // Forced: a process gets SIGKILL at once.
                        let _ = stop.send(Some(StopReason::Shutdown { immediate: true }));
                        abort_at = Some(Instant::now() + ABORT_MARGIN);
                    }
                    (_, Phase::Stopping { immediate: false }) => {
                        warn!(job = %job.name, "shutdown grace is over; stopping the run");
                        tell(
                            stop,
                            &mut abort_at,
                            StopReason::Shutdown { immediate: false },
                            job.settings.kill_grace,
                        );
                    }
                    // The controller is gone: nobody will say stop.
                    (Err(_), _) => phase = tokio::sync::watch::channel(current).1,
                    (Ok(()), _) => {}
                }
            }
        }
    }
}

/// Tells the run to stop (once), and when its task is aborted if it has
/// not ended by then.
fn tell(
    stop: &watch::Sender<Option<StopReason>>,
    abort_at: &mut Option<Instant>,
    reason: StopReason,
    grace: Duration,
) {
    if stop.borrow().is_none() {
        let _ = stop.send(Some(reason));
        *abort_at = Some(Instant::now() + grace + ABORT_MARGIN);
    }
}

/// How a run's task ended: its action's ending, or `failed` when it
/// panicked (the scheduler goes on) or was cancelled.
fn ending_of(joined: Result<Ending, tokio::task::JoinError>, job: &Work, run_id: i64) -> Ending {
    match joined {
        Ok(ending) => ending,
        Err(e) if e.is_panic() => {
            let message = panic_message(e.into_panic());
            error!(job = %job.name, run_id, "the run panicked: {message}");
            Ending::of(Ended::Failed, format!("panicked: {message}"))
        }
        Err(e) => Ending::of(Ended::Failed, format!("the run's task ended: {e}")),
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".to_string())
}

async fn release(engine: &Engine, job: &Work, lease: &Lease) {
    match engine
        .store
        .release(lease.clone(), job.settings.lock_at_least_for)
        .await
    {
        Ok(true) => engine.health.report_ok(),
        Ok(false) => {
            warn!(job = %job.name, fence = lease.fence, "the lease was no longer ours at release")
        }
        Err(e) => {
            engine.health.report_error(&e);
            warn!(job = %job.name, "the lease could not be released; it ends by itself: {e}");
        }
    }
}
