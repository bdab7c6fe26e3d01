//! One won instant: record each attempt, run its action, keep the lease
//! alive meanwhile, stop the run on its timeout, a lost lease or shutdown,
//! record how it ended, retry a failure if the job says so, release.
//!
//! The action runs as a task of its own: a panicking action ends its run
//! (recorded `failed`), not the scheduler. Told to stop, an action has its
//! grace to return (a child process: SIGTERM, then SIGKILL); past that the
//! task is aborted.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::{Instrument, error, info, warn};

use super::Phase;
use super::alerts::{RunAlerts, Started};
use super::engine::Engine;
use super::job::JobSettings;
use super::run_lease::{Hold, RunLease};
use super::run_rows::{Attempted, RunRows};
use super::work::{Outcome, Recording, Work};
use crate::config::exit_codes::ExitCodes;
use crate::history::{RunFinish, RunStatus, Trigger};
use crate::lease::keeper::{Keeper, LeaseState};
use crate::notify::{Event, Notice, Ping, Told};
use crate::runner::{Ended, Ending, RunContext, StopReason};
use crate::telemetry;

/// What to run, under what it holds.
pub(crate) struct Plan {
    pub(crate) work: Work,
    pub(crate) hold: Hold,
    pub(crate) recording: Recording,
    /// The monotonic moment the lease was claimed (its first confirmation).
    pub(crate) claimed: Instant,
    /// The history row of attempt 1, when the claim batch recorded it (and
    /// marked the runs of vanished holders abandoned).
    pub(crate) first_run: Option<i64>,
    /// When its action was going, for the scheduler's tick loop to tell an
    /// overrun from an instant that waits for the run.
    pub(crate) going: Option<Arc<Going>>,
}

/// When a run's action was going, by the database's clock: from its first
/// attempt's start (for a job with shared locks, from when it began to wait
/// for them) to its last attempt's end, the pauses between attempts
/// included. A run whose action has not started (its lease or its start
/// waits on a stalled database) or has ended (its end and release are on
/// their way) is not going: an instant that comes meanwhile waits for the
/// run instead of counting as its overrun.
#[derive(Debug, Default)]
pub(crate) struct Going(std::sync::Mutex<Span>, std::sync::Mutex<Option<String>>);

/// A run's first start and, once it is over, its last end.
type Span = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

impl Going {
    fn span(&self) -> std::sync::MutexGuard<'_, Span> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The action starts (again) at `at`: going until it ends.
    fn begin(&self, at: DateTime<Utc>) {
        let mut span = self.span();
        span.0.get_or_insert(at);
        span.1 = None;
    }

    /// The action ended at `at`.
    fn end(&self, at: DateTime<Utc>) {
        let mut span = self.span();
        if span.0.is_some() {
            span.1 = Some(at);
        }
    }

    /// No attempt is to come: a run whose last attempt did not start ends
    /// now, one whose did keeps its end.
    fn over(&self, at: DateTime<Utc>) {
        let mut span = self.span();
        if span.0.is_some() && span.1.is_none() {
            span.1 = Some(at);
        }
    }

    /// The run waits for its shared locks and limits (`gates`, as a
    /// message names them), or, `None`, no longer.
    fn waiting_for(&self, gates: Option<String>) {
        *self
            .1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = gates;
    }

    /// The shared locks and limits the run waits for, if it does.
    pub(crate) fn waits_for(&self) -> Option<String> {
        self.1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether the action has ended (and no retry's pause began since).
    pub(crate) fn has_ended(&self) -> bool {
        self.span().1.is_some()
    }

    /// Whether the action was going at `instant`.
    pub(crate) fn at(&self, instant: DateTime<Utc>) -> bool {
        match *self.span() {
            (Some(began), ended) => began < instant && ended.is_none_or(|end| end > instant),
            (None, _) => false,
        }
    }
}

/// Runs the instant `plan` won, with its retries, then releases the lease.
/// Returns how the last attempt ended (`None` if none could be recorded).
///
/// All of it happens in one `run` span (job, instant, fence, trigger,
/// replica, and each attempt's run id and number once recorded, its status
/// at the end): every line logged for the run, its action's included,
/// carries them. With traces on, the span is the run's trace: it has a
/// `claim` child from the claim's sending to its answer, an `attempt`
/// child per attempt (retries are attempts after the first), each with a
/// `start` (its start record to its action's start) and an `end` (its end
/// record).
pub(crate) async fn execute(engine: Arc<Engine>, plan: Plan) -> Option<Outcome> {
    let span = tracing::info_span!(
        parent: None,
        "run",
        job = %plan.work.name,
        instant = %super::fmt_instant(plan.hold.instant()),
        fence = plan.hold.fence(),
        trigger = %plan.recording.trigger,
        replica = %engine.instance,
        run_id = tracing::field::Empty,
        attempt = tracing::field::Empty,
        status = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if telemetry::traces::enabled() {
        telemetry::traces::start_run(
            &span,
            &plan.work.name,
            plan.hold.instant(),
            plan.hold.fence(),
        );
        let _claim = tracing::info_span!(
            parent: &span,
            "claim",
            { telemetry::traces::CLAIM_SENT } = plan.claimed.elapsed().as_micros() as i64,
        );
    }
    let parents = plan.recording.parent_runs.clone();
    let outcome = execute_in_span(engine.clone(), plan)
        .instrument(span.clone())
        .await;
    if let Some(outcome) = &outcome {
        span.record("status", outcome.status.as_str());
        if !ended_well(outcome.status, outcome.exit_code) {
            span.record("otel.status_code", "ERROR");
        }
    }
    if telemetry::traces::enabled() && !parents.is_empty() {
        link_parents(&engine, &span, parents).await;
    }
    outcome
}

/// Links a dependent job's run span to its parents' runs' spans.
async fn link_parents(engine: &Engine, span: &tracing::Span, parents: Vec<i64>) {
    match engine.store.find_runs(parents).await {
        Ok(rows) => telemetry::traces::link_runs(
            span,
            rows.iter()
                .map(|row| (row.job.as_str(), row.scheduled_at.and_utc(), row.fence)),
        ),
        Err(e) => warn!("the parents' runs could not be read to link their traces: {e}"),
    }
}

async fn execute_in_span(engine: Arc<Engine>, plan: Plan) -> Option<Outcome> {
    let Plan {
        work: job,
        hold,
        recording,
        claimed,
        first_run,
        going,
    } = plan;
    let settings = &job.settings;
    let mut held = RunLease::keep(&engine, &job, hold, claimed);
    let rows = RunRows::new(&engine, &job, held.hold(), &recording, first_run);
    rows.abandon_earlier();
    rows.record_trigger().await;
    let attempts = 1 + settings.retries;
    let mut last = None;
    // A run waiting for its shared locks is going, as another replica
    // reading its lease and history tells (its lease was held since its
    // claim).
    if let Some(going) = going.as_ref().filter(|_| !settings.gates.is_empty()) {
        going.begin(engine.clock.now());
        let gates: Vec<&str> = settings.gates.iter().map(|g| g.label.as_str()).collect();
        going.waiting_for(Some(gates.join(", ")));
    }
    if let Some(why) = &recording.not_run {
        last = rows.skipped(why).await;
    } else {
        let waiting = Instant::now();
        let taken = held.take_locks(&engine, &job, &recording).await;
        if let Some(going) = &going {
            going.waiting_for(None);
        }
        if !settings.gates.is_empty() {
            rows.waited_for_gates(waiting.elapsed());
        }
        if let Err(why) = taken {
            last = rows.skipped(&why.to_string()).await;
        }
    }
    let attempts = if last.is_some() { 0 } else { attempts };
    let alerts = RunAlerts::default();
    // How the attempt before each one ended, told to it.
    let mut previous = recording.previous_status;
    for attempt in 1..=attempts {
        if attempt > 1 && !pause_before_retry(&engine, settings, held.keeper()).await {
            if *engine.phase.borrow() != Phase::Running {
                retry_not_run(&rows, attempt).await;
            }
            break;
        }
        let attempt_span = tracing::info_span!(
            "attempt",
            attempt = i64::from(attempt),
            retry = attempt > 1,
            run_id = tracing::field::Empty,
            status = tracing::field::Empty,
        );
        let outcome = run_attempt(
            &engine,
            &job,
            &mut held,
            &recording,
            &rows,
            (attempt, previous),
            going.as_deref(),
            &alerts,
        )
        .instrument(attempt_span.clone())
        .await;
        if let Some((outcome, _)) = &outcome {
            attempt_span.record("status", outcome.status.as_str());
            previous = Some(outcome.status);
        }
        drop(attempt_span);
        // A failure or a timeout, unless retry_on_exit_codes leaves it out.
        let retryable = outcome.as_ref().is_some_and(|(outcome, _)| {
            settings
                .exit_codes
                .retried(outcome.status, outcome.exit_code)
        });
        last = outcome;
        if !retryable || attempt == attempts {
            break;
        }
        // The pause before the retry is part of the run.
        if let Some(going) = &going {
            going.begin(engine.clock.now());
        }
        info!(
            attempt,
            "retrying in {}",
            humantime::format_duration(settings.retry_backoff)
        );
    }
    if let Some(going) = &going {
        going.over(engine.clock.now());
    }
    held.release(&engine, &job).await;
    let (outcome, attempted) = last?;
    if recording.not_run.is_some() {
        return Some(outcome);
    }
    notify_outcome(&engine, &job, &outcome, attempted, recording.trigger).await;
    Some(outcome)
}

/// Waits `retry_backoff` with the lease kept alive; false if the lease was
/// lost or the scheduler is stopping meanwhile.
async fn pause_before_retry(engine: &Engine, settings: &JobSettings, keeper: &mut Keeper) -> bool {
    let pause = async {
        tokio::time::sleep(settings.retry_backoff).await;
        engine.throttle.start(super::throttle::Kind::Retry).await;
    };
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

/// Records the retry `attempt`, whose pause the scheduler's stop cut
/// short, `skipped`, saying so: the instant's history tells that a retry
/// was due and why it did not run. The failure before it stays the run's
/// outcome.
async fn retry_not_run(rows: &RunRows<'_>, attempt: u32) {
    let Some(run_id) = rows.start(attempt).await else {
        return;
    };
    warn!(attempt, "the retry is not run: replicron is stopping");
    rows.unstarted(
        run_id,
        attempt,
        RunStatus::Skipped,
        "replicron: not run: replicron stopped during the pause before this retry\n".to_string(),
    )
    .await;
}

/// One attempt (the run's `attempt`th, after one that ended `previous`,
/// if any); returns how it ended, or `None` if it could not be recorded
/// (and so was not run).
#[expect(
    clippy::too_many_arguments,
    reason = "what one attempt of a run is made of"
)]
async fn run_attempt(
    engine: &Arc<Engine>,
    job: &Work,
    held: &mut RunLease,
    recording: &Recording,
    rows: &RunRows<'_>,
    (attempt, previous): (u32, Option<RunStatus>),
    going: Option<&Going>,
    alerts: &RunAlerts,
) -> Option<(Outcome, Attempted)> {
    let (fence, due) = (held.hold().fence(), held.hold().instant());
    let keeper = held.keeper();
    let instant = rows.instant();
    let (attempt_span, run_span) = (tracing::Span::current(), rows.span());
    let starting = tracing::info_span!("start", pid = tracing::field::Empty);
    let run_id = rows.start(attempt).instrument(starting.clone()).await?;
    attempt_span.record("run_id", run_id);
    // The attempt as its row numbers it (after the instant's earlier ones,
    // for a backfill's or a rerun's run).
    let number = rows.attempt_number(attempt);
    // As i64: OpenTelemetry has no unsigned integers.
    run_span
        .record("run_id", run_id)
        .record("attempt", i64::from(number));
    // Nothing starts under a lease that is not confirmed after its start
    // record: the record may have waited (a stall) while the lease ran out.
    if !keeper
        .confirm_for_start(&engine.store)
        .instrument(starting.clone())
        .await
    {
        // Asked to stop for a later instant before it began (`replace`):
        // replaced, not lost.
        if replaced(engine, job, fence).await {
            warn!(
                "run not started: a later instant replaced it before it began (overlap = \"replace\")"
            );
            return Some(
                rows.unstarted(
                    run_id,
                    attempt,
                    RunStatus::Replaced,
                    "replicron: not started: a later instant replaced it before it began\n"
                        .to_string(),
                )
                .await,
            );
        }
        warn!("run not started: its lease could not be confirmed after its start was recorded");
        return Some(
            rows.unstarted(
                run_id,
                attempt,
                RunStatus::LostLock,
                "replicron: not started: its lease could not be confirmed in time\n".to_string(),
            )
            .await,
        );
    }
    let action = job.action.clone();
    let (stop, stopped) = watch::channel(None);
    let (started_tx, started_rx) = oneshot::channel();
    let ctx = RunContext {
        job: Arc::from(job.name.as_str()),
        instant,
        fence,
        attempt: u32::try_from(number).unwrap_or(attempt),
        previous_status: previous,
        trigger: recording.trigger.of_attempt(attempt),
        run_id,
        instance: Arc::from(engine.instance.as_str()),
        stop: stopped,
        lease: keeper.watch(),
        lease_times: keeper.times(),
        kill_grace: job.settings.kill_grace,
        guard: engine.guard.clone(),
        started: Arc::new(std::sync::Mutex::new(Some(started_tx))),
        params: recording.params.clone(),
        reason: recording.reason.clone(),
        span: run_span.clone(),
        trace: telemetry::traces::trace_context(run_span).map(Arc::new),
    };
    let began = Instant::now();
    // The action is called inside the task: a job whose closure panics
    // before it returns its future fails like one whose future panics.
    let mut task = tokio::spawn(async move { action.run(ctx).await }.in_current_span());
    // The run counts as started when its action says so (a process once it
    // is spawned): that is when lateness is what the job feels. A run that
    // ends before saying so (it could not start) is not logged as started.
    let mut watching = None;
    let ended_at_once = tokio::select! {
        biased;
        Ok(pid) = started_rx => {
            if let Some(going) = going {
                going.begin(engine.clock.now());
            }
            starting.record("pid", pid.map(i64::from));
            drop(starting);
            let late = engine.clock.now() - recording.due.unwrap_or(due);
            let late_by = late.to_std().unwrap_or_default();
            telemetry::start_lateness(&job.name, late_by);
            info!(
                pid,
                late_ms = late.num_milliseconds(),
                "run started"
            );
            engine.notifier.ping(&job.name, Ping::Start, run_id);
            watching = alerts.started(engine, job, Started {
                run_id,
                attempt,
                instant,
                trigger: recording.trigger,
                late: late_by,
            });
            None
        }
        joined = &mut task => Some(ending_of(joined)),
    };
    let (stopped_for, ending) = match ended_at_once {
        Some(ending) => (None, ending),
        None => watch_run(engine, job, rows, keeper, &mut task, &stop, run_id).await,
    };
    // Ended: not long-running from now on.
    drop(watching);
    // Over, though its end is still to be checked and recorded (which may
    // wait for the database).
    if let Some(going) = going {
        going.end(engine.clock.now());
    }
    // How long it ran: measured as soon as it is known to have ended, before
    // the lease is checked (which may wait for the database). A process
    // cannot have run past the moment its guard kills it for its lease: a
    // replica that was frozen, or waited on the database, when its process
    // exited learns of the exit late, and must not record an end later than
    // the next holder's start.
    let ended = Instant::now();
    let duration = ran_for(engine, keeper, began, ended);
    let (mut status, rule) = status_of(
        engine,
        keeper,
        stopped_for,
        &ending,
        &job.settings.exit_codes,
    )
    .await;
    if status == RunStatus::LostLock && replaced(engine, job, fence).await {
        warn!("the run was stopped for a later instant (overlap = \"replace\")");
        status = RunStatus::Replaced;
    }
    if status == RunStatus::Error {
        error!("cannot start the run: {}", ending.output.trim());
    }
    let mut output = output_of(&ending);
    // Which exit-code rule decided, where one other than "0 succeeds"
    // did; and, with retries left, a failure retry_on_exit_codes does
    // not retry.
    let retries_left = attempt < 1 + job.settings.retries;
    let not_retried = retries_left
        .then(|| {
            job.settings
                .exit_codes
                .not_retried(status, ending.exit_code)
        })
        .flatten();
    for line in rule.into_iter().chain(not_retried) {
        info!("{line}");
        output = with_line(output, &format!("replicron: {line}"));
    }
    rows.finish(
        run_id,
        RunFinish {
            status,
            exit_code: ending.exit_code,
            output: output.clone(),
            duration,
            output_file: ending.output_file.clone(),
        },
        ended,
    )
    .instrument(tracing::info_span!("end", status = status.as_str()))
    .await;
    telemetry::run_finished(&job.name, status, duration, engine.clock.now());
    info!(
        status = %status,
        exit_code = ending.exit_code,
        signal = ending.signal,
        duration_ms = duration.as_millis() as u64,
        "run finished"
    );
    if ended_well(status, ending.exit_code) {
        if status == RunStatus::Skipped {
            // Nothing to do is no failure: the job is as healthy as after
            // a success (replicron_runs_total counts it skipped).
            telemetry::last_success(&job.name, engine.clock.now());
        }
        engine.notifier.ping(&job.name, Ping::Success, run_id);
    } else {
        engine.notifier.ping(&job.name, Ping::Fail, run_id);
    }
    Some((
        Outcome {
            status,
            exit_code: ending.exit_code,
            output,
        },
        Attempted {
            run_id,
            attempt: number,
            duration,
            instant,
        },
    ))
}

/// The output recorded for an attempt that ended as `ending`: its own,
/// and, for a process ended by a signal, a last line naming the signal (a
/// SIGKILL it did not get from replicron is most likely the kernel's OOM
/// killer's).
fn output_of(ending: &Ending) -> String {
    let Some(signal) = ending.signal else {
        return ending.output.clone();
    };
    let name = nix::sys::signal::Signal::try_from(signal).map_or_else(
        |_| format!("signal {signal}"),
        |s| format!("{s} ({signal})"),
    );
    with_line(
        ending.output.clone(),
        &format!("replicron: the process was killed by {name}"),
    )
}

/// `output` with `line` as its last line.
fn with_line(mut output: String, line: &str) -> String {
    if !output.is_empty() && !output.ends_with('\n') {
        output.push('\n');
    }
    output.push_str(line);
    output.push('\n');
    output
}

/// Whether a run that ended `status` ended well: it succeeded, or its
/// process's exit code said it had nothing to do (`skip_exit_codes`; a
/// run skipped without running has no exit code).
fn ended_well(status: RunStatus, exit_code: Option<i32>) -> bool {
    status == RunStatus::Succeeded || crate::config::exit_codes::skipped_by_code(status, exit_code)
}

/// How long an attempt that began at `began` and was known to have ended
/// at `ended` ran: no longer than until its guard killed it for its lease.
fn ran_for(engine: &Engine, keeper: &Keeper, began: Instant, ended: Instant) -> Duration {
    let duration = ended - began;
    match keeper.kill_deadline() {
        Some(killed_by) if engine.guard.is_some() => killed_by
            .checked_duration_since(began)
            .map_or(duration, |bound| duration.min(bound)),
        _ => duration,
    }
}

/// The status an attempt that ended as `ending` (told to stop for
/// `stopped_for`, if it was) is recorded with, and the line naming the
/// exit-code rule that decided it, if one other than "0 succeeds" did: a
/// run whose lease was lost records no success nor failure it had no
/// right to.
async fn status_of(
    engine: &Engine,
    keeper: &Keeper,
    stopped_for: Option<StopReason>,
    ending: &Ending,
    rules: &ExitCodes,
) -> (RunStatus, Option<String>) {
    let mut rule = None;
    let mut status = match (stopped_for, ending.how) {
        // Not started because its lease's deadline passed before the spawn.
        (_, Ended::NotStarted) if keeper.past_confirmation_deadline() => RunStatus::LostLock,
        (_, Ended::NotStarted) => RunStatus::Error,
        (Some(StopReason::Timeout), _) => RunStatus::TimedOut,
        (Some(StopReason::LeaseLost), _) => RunStatus::LostLock,
        (Some(StopReason::Shutdown { .. }), _) => RunStatus::Killed,
        (None, how) => match (ending.exit_code, ending.signal) {
            // A process that exited: its code, by the job's rules.
            (Some(code), None) => {
                let judged = rules.judge(code);
                rule = judged.rule;
                judged.status
            }
            _ if how == Ended::Succeeded => RunStatus::Succeeded,
            _ => RunStatus::Failed,
        },
    };
    // Killed by a signal once the lease's confirmation deadline had passed:
    // the guard stopped it for its lease (it acts on the same deadline as
    // the keeper, which may not have noticed yet).
    if status == RunStatus::Failed && ending.signal.is_some() && keeper.past_confirmation_deadline()
    {
        warn!("the run was stopped: its lease could not be confirmed in time");
        status = RunStatus::LostLock;
    }
    // A replica frozen past its lease must not record a success (or any
    // ending) it had no right to: check the lease first.
    if matches!(
        status,
        RunStatus::Succeeded | RunStatus::Failed | RunStatus::Skipped
    ) && !keeper.verify(&engine.store).await
    {
        warn!("the run ended after its lease was lost");
        status = RunStatus::LostLock;
        rule = None;
    }
    (status, rule)
}

/// Whether a run of `job` under `fence` whose lease was lost was asked to
/// stop for a later instant (`overlap = "replace"`): its lease could no
/// longer be extended.
async fn replaced(engine: &Engine, job: &Work, fence: i64) -> bool {
    if job.settings.overlap != crate::config::Overlap::Replace {
        return false;
    }
    match engine.store.stop_requested(&job.name, fence).await {
        Ok(asked) => asked,
        Err(e) => {
            warn!("cannot tell whether the run was replaced: {e}");
            false
        }
    }
}

/// Tells about the instant's final outcome: a failure of any kind, or (if
/// the job asks) its recovery after one.
async fn notify_outcome(
    engine: &Engine,
    job: &Work,
    outcome: &Outcome,
    attempted: Attempted,
    trigger: Trigger,
) {
    if crate::config::exit_codes::skipped_by_code(outcome.status, outcome.exit_code) {
        // Nothing to do: neither a failure nor a recovery from one.
        return;
    }
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
                    warn!("cannot tell whether the run recovered from a failure: {e}");
                    return;
                }
            }
        }
        None => return,
    };
    engine.notifier.event(
        Notice::new(
            event,
            Told {
                job: &job.name,
                instant: attempted.instant,
                status: outcome.status,
                exit_code: outcome.exit_code,
                attempt: attempted.attempt,
                instance: &engine.instance,
                duration: Some(attempted.duration),
                output: &outcome.output,
                history_id: Some(attempted.run_id),
            },
        )
        .started_by(trigger),
    );
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
    rows: &RunRows<'_>,
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
            joined = &mut *task => return (stopping, ending_of(joined)),
            () = tokio::time::sleep_until(deadline), if stopping.is_none() => {
                warn!(timeout = %humantime::format_duration(job.settings.timeout), "run timed out; stopping it");
                tell(stop, &mut abort_at, StopReason::Timeout, job.settings.kill_grace);
            }
            () = tokio::time::sleep_until(abort_at.unwrap_or(deadline)), if abort_at.is_some() => {
                task.abort();
                warn!("the run did not end when told to stop; dropped");
                return (
                    stopping,
                    Ending::of(Ended::Failed, "stopped: it did not end within its grace".to_string()),
                );
            }
            state = keeper.changed() => match state {
                LeaseState::Lost => {
                    warn!("stopping the run: its lease is lost");
                    tell(stop, &mut abort_at, StopReason::LeaseLost, keeper.times().stop_grace);
                }
                LeaseState::Held(_) => rows.confirmed(run_id),
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
                        warn!("shutdown grace is over; stopping the run");
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
fn ending_of(joined: Result<Ending, tokio::task::JoinError>) -> Ending {
    match joined {
        Ok(ending) => ending,
        Err(e) if e.is_panic() => {
            let message = panic_message(e.into_panic());
            error!("the run panicked: {message}");
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

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};

    use super::Going;

    fn at(second: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::seconds(second)
    }

    /// A run claimed before an instant whose action had not started when
    /// the instant came (its lease confirmation waited on a stalled
    /// database) was not going then; one whose action had ended was not
    /// either; one whose action ran across it, or that paused between
    /// attempts across it, was.
    #[test]
    fn a_run_is_going_from_its_actions_start_to_its_last_end() {
        let going = Going::default();
        assert!(!going.at(at(10)), "not started");
        going.begin(at(14));
        assert!(!going.at(at(10)), "started after the instant");
        assert!(going.at(at(15)), "started before, not ended");
        going.end(at(16));
        assert!(going.at(at(15)) && !going.at(at(17)), "ended at 16");
        // A retry: going again from the pause on, under its first start.
        going.begin(at(16));
        assert!(going.at(at(15)) && going.at(at(17)), "between attempts");
        going.end(at(20));
        going.over(at(25));
        assert!(
            going.at(at(19)) && !going.at(at(21)),
            "over keeps the last end"
        );
        let unstarted = Going::default();
        unstarted.end(at(3));
        unstarted.over(at(4));
        assert!(
            !unstarted.at(at(2)) && !unstarted.at(at(5)),
            "never started"
        );
    }
}
