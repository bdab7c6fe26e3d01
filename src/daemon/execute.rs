//! One won instant: record each attempt, run it, keep the lease alive,
//! record how it ended, retry a failure if the job says so, release.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};

use nix::sys::signal::Signal;
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::journal::Write;
use super::keeper::{Keeper, LeaseState, LeaseTimes};
use super::{Phase, Shared, fmt_instant};
use crate::config::Job;
use crate::db::DbError;
use crate::history::{self, NewRun, RunFinish, RunStatus};
use crate::lease::{self, Lease};
use crate::runner::{self, Exit, RunSpec, Running};
use crate::telemetry;

/// How a run is recorded when that differs from its lease: an `exec
/// --once` run holds the lease of its KEY, whose instant only names the
/// key, and is recorded at the time it started, with the key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    /// Recorded (and given as `REPLICRON_SCHEDULED_AT`) instead of the
    /// lease's instant.
    pub instant: Option<DateTime<Utc>>,
    /// The `exec --once` KEY.
    pub once_key: Option<String>,
}

/// How the last attempt of an instant ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Its status.
    pub status: RunStatus,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The tail of its output, as recorded in history (for a run that could
    /// not start: why).
    pub output: String,
}

/// Runs the instant `lease` was won for, with its retries, then releases.
/// History rows carry `job.name`, which is the lease's name except for
/// `exec --once`, whose lease row is its key's. `first_run` is the history
/// row of attempt 1 when the claim batch recorded it (and marked the
/// vanished holders' runs abandoned). `ended` is set, by the database's
/// clock, once the last attempt is over, before the lease is released.
/// Returns how the last attempt ended (`None` if none could be recorded).
pub async fn execute(
    shared: Arc<Shared>,
    job: Arc<Job>,
    lease: Lease,
    claimed: Instant,
    first_run: Option<i64>,
    ended: Option<Arc<OnceLock<DateTime<Utc>>>>,
    recording: Recording,
) -> Option<Outcome> {
    let times = LeaseTimes::new(job.lock_at_most_for, job.kill_grace);
    let mut keeper = Keeper::start(shared.clone(), lease.clone(), times, claimed);
    if first_run.is_none() && lease.job == job.name {
        shared.journal.push(Write::Abandoned {
            job: job.name.clone(),
            fence: lease.fence,
        });
    }
    let attempts = 1 + job.retries as i32;
    let mut last = None;
    for attempt in 1..=attempts {
        if attempt > 1 && !pause_before_retry(&shared, &job, &mut keeper).await {
            break;
        }
        let recorded = if attempt == 1 { first_run } else { None };
        let outcome = run_attempt(
            &shared,
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
            Some(Outcome {
                status: RunStatus::Failed | RunStatus::TimedOut,
                ..
            })
        );
        last = outcome;
        if !retryable || attempt == attempts {
            break;
        }
        info!(job = %job.name, instant = %fmt_instant(lease.instant), attempt, "retrying in {}", humantime::format_duration(job.retry_backoff));
    }
    keeper.stop();
    if let Some(ended) = ended {
        let _ = ended.set(shared.clock.now());
    }
    release(&shared, &job, &lease).await;
    last
}

/// Waits `retry_backoff` with the lease kept alive; false if the lease was
/// lost or the daemon is stopping meanwhile.
async fn pause_before_retry(shared: &Shared, job: &Job, keeper: &mut Keeper) -> bool {
    let pause = tokio::time::sleep(job.retry_backoff);
    tokio::pin!(pause);
    let mut phase = shared.phase.clone();
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

/// The environment of a run: the job's `env` and the `REPLICRON_*` variables.
fn run_env(
    job: &Job,
    lease: &Lease,
    instant: DateTime<Utc>,
    run_id: i64,
    attempt: i32,
) -> BTreeMap<String, String> {
    let mut env = job.env.clone();
    env.insert("REPLICRON_JOB".into(), job.name.clone());
    env.insert("REPLICRON_SCHEDULED_AT".into(), fmt_instant(instant));
    env.insert("REPLICRON_RUN_ID".into(), run_id.to_string());
    env.insert("REPLICRON_FENCE".into(), lease.fence.to_string());
    env.insert("REPLICRON_INSTANCE".into(), lease.instance.clone());
    env.insert("REPLICRON_ATTEMPT".into(), attempt.to_string());
    env
}

/// One attempt; returns how it ended, or `None` if it could not be
/// recorded (and so was not run).
async fn run_attempt(
    shared: &Arc<Shared>,
    job: &Job,
    lease: &Lease,
    recording: &Recording,
    keeper: &mut Keeper,
    attempt: i32,
    recorded: Option<i64>,
) -> Option<Outcome> {
    let instant = recording.instant.unwrap_or(lease.instant);
    let started = if let Some(id) = recorded {
        Ok(id)
    } else {
        let (fence, instance, name) = (lease.fence, shared.instance.clone(), job.name.clone());
        let once_key = recording.once_key.clone();
        shared
            .pool
            .run_blocking(move |conn| {
                history::record_run_started(
                    conn,
                    &NewRun {
                        job: &name,
                        scheduled_at: instant,
                        attempt,
                        instance: &instance,
                        fence,
                        once_key: once_key.as_deref(),
                    },
                )
                .map_err(|e| DbError::query("recording the run's start", e))
            })
            .await
    };
    let run_id = match started {
        Ok(id) => id,
        Err(e) => {
            shared.health.report_error(&e);
            // A run whose start cannot be recorded is not started: nothing
            // may run without a record.
            error!(job = %job.name, instant = %fmt_instant(lease.instant), attempt, "run not started, its start could not be recorded: {e}");
            return None;
        }
    };
    let spec = RunSpec {
        job: job.name.clone(),
        run_id,
        command: job.command.clone(),
        env: run_env(job, lease, instant, run_id, attempt),
        working_dir: job.working_dir.clone(),
        output_limit: job.output_limit,
        inherit_stdio: shared.inherit_stdio,
    };
    let began = Instant::now();
    let confirmed = match keeper.state() {
        LeaseState::Held(at) => at,
        LeaseState::Lost => began - keeper.times().lease,
    };
    let deadlines = keeper.times().deadlines(confirmed);
    let (status, exit, output) = match runner::spawn(&spec, &shared.guard, deadlines).await {
        Ok(mut running) => {
            let late = shared.clock.now() - lease.instant;
            telemetry::start_lateness(&job.name, late.to_std().unwrap_or_default());
            info!(
                job = %job.name,
                instant = %fmt_instant(lease.instant),
                run_id,
                fence = lease.fence,
                attempt,
                pid = running.group().as_raw(),
                late_ms = late.num_milliseconds(),
                "run started"
            );
            let (mut status, exit) = watch_run(shared, job, keeper, &mut running, run_id).await;
            // Killed by a signal once the lease's confirmation deadline had
            // passed: the guard stopped it for its lease (it acts on the same
            // deadline as the keeper, which may not have noticed yet).
            if status == RunStatus::Failed
                && matches!(exit, Exit::Signal(_))
                && keeper.past_confirmation_deadline()
            {
                warn!(job = %job.name, run_id, "the run was stopped: its lease could not be confirmed in time");
                status = RunStatus::LostLock;
            }
            // A replica frozen past its lease must not record a success (or
            // any ending) it had no right to: check the lease first.
            if matches!(status, RunStatus::Succeeded | RunStatus::Failed)
                && !keeper.verify(shared, lease).await
            {
                warn!(job = %job.name, run_id, "the run ended after its lease was lost");
                status = RunStatus::LostLock;
            }
            let group = running.group();
            let output = running.finish().await;
            shared.guard.forget(group).await;
            (status, exit.code(), output.tail)
        }
        Err(e) => {
            error!(job = %job.name, run_id, "cannot start the run: {e}");
            (
                RunStatus::Error,
                None,
                format!("replicron: cannot start the run: {e}\n"),
            )
        }
    };
    let duration = began.elapsed();
    shared.journal.push(Write::Finished {
        job: job.name.clone(),
        id: run_id,
        finish: RunFinish {
            status,
            exit_code: exit,
            output: output.clone(),
            duration,
        },
    });
    let ended = shared.clock.now().timestamp_millis() as f64 / 1000.0;
    telemetry::run_finished(&job.name, status, duration, ended);
    info!(
        job = %job.name,
        instant = %fmt_instant(lease.instant),
        run_id,
        fence = lease.fence,
        attempt,
        status = %status,
        exit_code = exit,
        duration_ms = duration.as_millis() as u64,
        "run finished"
    );
    Some(Outcome {
        status,
        exit_code: exit,
        output,
    })
}

/// Waits for the run to end; stops it on timeout, on a lost lease and at
/// shutdown, and keeps the guard's deadlines in step with the lease.
async fn watch_run(
    shared: &Shared,
    job: &Job,
    keeper: &mut Keeper,
    running: &mut Running,
    run_id: i64,
) -> (RunStatus, Exit) {
    let deadline = Instant::now() + job.timeout;
    let mut phase = shared.phase.clone();
    loop {
        if keeper.state() == LeaseState::Lost {
            warn!(job = %job.name, "stopping the run: its lease is lost");
            return (
                RunStatus::LostLock,
                stop(running, keeper.times().stop_grace).await,
            );
        }
        tokio::select! {
            exit = running.wait() => {
                return match exit {
                    Ok(exit @ Exit::Code(0)) => (RunStatus::Succeeded, exit),
                    Ok(exit) => (RunStatus::Failed, exit),
                    Err(e) => {
                        error!(job = %job.name, "lost track of the run's process: {e}");
                        (RunStatus::Error, Exit::Code(-1))
                    }
                };
            }
            () = tokio::time::sleep_until(deadline) => {
                warn!(job = %job.name, timeout = %humantime::format_duration(job.timeout), "run timed out; stopping it");
                return (RunStatus::TimedOut, stop(running, job.kill_grace).await);
            }
            state = keeper.changed() => {
                if let LeaseState::Held(confirmed) = state {
                    shared.guard.refresh(running.group(), keeper.times().deadlines(confirmed)).await;
                    shared.journal.push(Write::Confirmed { job: job.name.clone(), id: run_id });
                }
            }
            changed = phase.changed() => {
                let current = *phase.borrow();
                match (changed, current) {
                    (_, Phase::Stopping { immediate: true }) => {
                        running.signal(Signal::SIGKILL);
                        let exit = running.wait().await.unwrap_or(Exit::Signal(9));
                        return (RunStatus::Killed, exit);
                    }
                    (_, Phase::Stopping { immediate: false }) => {
                        warn!(job = %job.name, "shutdown grace is over; stopping the run");
                        return (RunStatus::Killed, stop(running, job.kill_grace).await);
                    }
                    // The controller is gone: nobody will say stop.
                    (Err(_), _) => phase = tokio::sync::watch::channel(current).1,
                    (Ok(()), _) => {}
                }
            }
        }
    }
}

async fn stop(running: &mut Running, grace: std::time::Duration) -> Exit {
    running.terminate(grace).await.unwrap_or(Exit::Signal(9))
}

async fn release(shared: &Shared, job: &Job, lease: &Lease) {
    let (copy, at_least) = (lease.clone(), job.lock_at_least_for);
    let released = shared
        .pool
        .run_blocking(move |conn| {
            lease::release(conn, &copy, at_least)
                .map_err(|e| DbError::query("releasing the lease", e))
        })
        .await;
    match released {
        Ok(true) => shared.health.report_ok(),
        Ok(false) => {
            warn!(job = %job.name, fence = lease.fence, "the lease was no longer ours at release")
        }
        Err(e) => {
            shared.health.report_error(&e);
            warn!(job = %job.name, "the lease could not be released; it ends by itself: {e}");
        }
    }
}
