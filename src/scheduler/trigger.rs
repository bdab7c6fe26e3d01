//! A run of a job now, outside its schedule: `replicron trigger`, and the
//! dashboard's and API's trigger. The instant is the database's now, taken
//! through the job's lease like any claim, and the job's `overlap` decides
//! what a run already going means, as for a scheduled instant: `skip`
//! refuses, `queue` waits for it to end, `replace` stops it and then runs,
//! and `allow` runs beside it (on an instant row of its own, in one of the
//! job's run slots).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::engine::Engine;
use super::run_lease::Hold;
use super::{Job, Outcome, Phase, Plan, Recording, Work};
use crate::config::Overlap;
use crate::db::DbError;
use crate::history::{Params, Trigger};
use crate::lease::{self, Claim, Pause};

/// How a trigger began.
#[derive(Debug)]
pub(crate) enum Started {
    /// The run is going; the handle ends with how it ended (`None` if no
    /// attempt could be recorded).
    Running {
        /// The lease's fence: the run's row in the history carries it.
        fence: i64,
        /// The run.
        handle: JoinHandle<Option<Outcome>>,
    },
    /// Not started.
    Refused(Refusal),
}

/// Why a trigger started no run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The job is paused (and the trigger was not forced).
    Paused(Pause),
    /// Its lease is held: a run is going on some replica (and the job's
    /// `overlap` is `skip`, or the scheduler began to stop while the
    /// trigger waited for it).
    Held,
    /// The job has nothing to run on this replica.
    NotRunnable,
}

/// Claims `job`'s lease at the database's now and starts its run with
/// `params` (checked against the job's declaration by the caller) and the
/// operator's `reason` (checked too), unless
/// the job is paused (and `force` is off) or its lease is held by a run
/// its `overlap` does not wait for, replace or run beside.
pub(crate) async fn start(
    engine: Arc<Engine>,
    job: &Job,
    force: bool,
    params: Params,
    reason: Option<Arc<str>>,
) -> Result<Started, crate::Error> {
    engine
        .store
        .ensure_rows(vec![job.name().to_string()])
        .await?;
    if let Some(pause) = paused(&engine, job, force).await? {
        return Ok(Started::Refused(Refusal::Paused(pause)));
    }
    let Some(work) = Work::of(job) else {
        return Ok(Started::Refused(Refusal::NotRunnable));
    };
    let (sent, claimed) = claim(&engine, job).await?;
    match claimed {
        Claim::Won(lease) => {
            let fence = lease.fence;
            let plan = Plan {
                work,
                hold: Hold::Fleet(lease),
                recording: Recording {
                    trigger: Trigger::Manual,
                    params: Arc::new(params),
                    reason,
                    ..Recording::default()
                },
                claimed: sent,
                first_run: None,
                going: None,
            };
            let handle = tokio::spawn(super::execute::execute(engine, plan));
            Ok(Started::Running { fence, handle })
        }
        _ => Ok(Started::Refused(Refusal::Held)),
    }
}

/// Claims `job`'s run now as its `overlap` says; the claim's answer, and
/// when the claim that answered was sent (the lease counts from then).
async fn claim(engine: &Engine, job: &Job) -> Result<(Instant, Claim), DbError> {
    let length = job.settings.lock_at_most_for;
    let mut asked_to_stop = None;
    let mut told_waiting = false;
    let mut taken = 0;
    loop {
        let sent = Instant::now();
        let claimed = match job.settings.overlap {
            // Beside the runs going: on the instant's own row, as a
            // scheduled instant of the job is claimed.
            Overlap::Allow(_) => {
                let now = engine.store.database_now().await?;
                let row = lease::instant_row(job.name(), now);
                engine
                    .store
                    .claim(&row, &engine.instance, now, length)
                    .await?
            }
            _ => {
                engine
                    .store
                    .claim_now(job.name(), &engine.instance, length)
                    .await?
            }
        };
        let waits = matches!(job.settings.overlap, Overlap::Queue | Overlap::Replace)
            && *engine.phase.borrow() == Phase::Running;
        match claimed {
            Claim::Held(holder) if waits => {
                if job.settings.overlap == Overlap::Replace && asked_to_stop != Some(holder.fence) {
                    engine.store.request_stop(job.name(), holder.fence).await?;
                    tracing::info!(job = %job.name, fence = holder.fence, "trigger: replacing the running run: it is asked to stop");
                    asked_to_stop = Some(holder.fence);
                } else if asked_to_stop.is_none() && !told_waiting {
                    tracing::info!(job = %job.name, fence = holder.fence, "trigger: waiting for the running run to end (overlap = \"queue\")");
                    told_waiting = true;
                }
                tokio::time::sleep(super::tick::WAITING_POLL).await;
            }
            // An instant claimed at this same moment (the schedule's, or
            // another trigger's): the database's now moves on.
            Claim::Taken | Claim::Contended if taken < TAKEN_RETRIES => {
                taken += 1;
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            claimed => return Ok((sent, claimed)),
        }
    }
}

/// How often a trigger claims again when it found the instant of the
/// database's now claimed already, or its claim contended.
const TAKEN_RETRIES: u32 = 5;

/// `job`'s pause in force now, unless `force`.
async fn paused(
    engine: &Engine,
    job: &Job,
    force: bool,
) -> Result<Option<Pause>, crate::db::DbError> {
    if force {
        return Ok(None);
    }
    let Some(row) = engine.store.find_lock(job.name()).await? else {
        return Ok(None);
    };
    Ok(row.pause_at(engine.store.database_now().await?))
}

/// A trigger sent to a running scheduler.
#[derive(Debug)]
pub(crate) struct Request {
    /// The job, as the current config defines it.
    pub(crate) job: Job,
    /// Run it even though it is paused.
    pub(crate) force: bool,
    /// Its parameters, checked against the job's declaration.
    pub(crate) params: Params,
    /// Why the operator asked (checked by the caller: one line of at most
    /// 500 characters).
    pub(crate) reason: Option<Arc<str>>,
    /// Instead of one run now: a backfill of these instants (checked by
    /// the caller: past, and not too many).
    pub(crate) backfill: Option<Backfill>,
    /// How it began, or why it could not.
    pub(crate) reply: tokio::sync::oneshot::Sender<Answer>,
}

/// A backfill asked of a running scheduler (the API's, the dashboard's).
#[derive(Debug)]
pub(crate) struct Backfill {
    /// The range's start.
    pub(crate) from: DateTime<Utc>,
    /// Its end, not included.
    pub(crate) to: DateTime<Utc>,
    /// Its instants, in order.
    pub(crate) instants: Vec<DateTime<Utc>>,
    /// Whether it reruns succeeded instants; `force` is the request's.
    pub(crate) rerun_succeeded: bool,
    /// `[daemon] max_backfill_instants`.
    pub(crate) limit: u64,
    /// The instants' priority among the waiters for a shared lock or a
    /// limit, as `backfill --priority`'s; `None`: behind every run that
    /// is not a backfill's.
    pub(crate) priority: Option<i32>,
}

/// How a requested trigger began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The run is going, under this lease's fence.
    Running(i64),
    /// The backfill of this many instants has begun.
    Backfilling(usize),
    /// Not begun: a backfill of the job is in progress (what the refusal
    /// says).
    InProgress(String),
    /// No run was started, for this reason.
    Refused(Refusal),
    /// The scheduler could not try: it is shutting down, or the database
    /// did not answer.
    Failed(String),
}

/// Starts `request`'s run, answers how it began, and waits for it to end.
pub(crate) async fn answer(engine: Arc<Engine>, request: Request) {
    let Request {
        job,
        force,
        params,
        reason,
        backfill,
        reply,
    } = request;
    if *engine.phase.borrow() != super::Phase::Running {
        let _ = reply.send(Answer::Failed("replicron is shutting down".to_string()));
        return;
    }
    if let Some(backfill) = backfill {
        match paused(&engine, &job, force).await {
            Ok(Some(pause)) => {
                let _ = reply.send(Answer::Refused(Refusal::Paused(pause)));
                return;
            }
            Ok(None) => {}
            Err(e) => {
                let _ = reply.send(Answer::Failed(e.to_string()));
                return;
            }
        }
        let begin = super::backfill::progress::Begin {
            from: backfill.from,
            to: backfill.to,
            total: backfill.instants.len(),
            limit: backfill.limit,
        };
        let mut in_progress = match super::backfill::begin(&engine, &job, &begin).await {
            Ok(Ok(in_progress)) => in_progress,
            Ok(Err(refused)) => {
                let _ = reply.send(Answer::InProgress(refused.to_string()));
                return;
            }
            Err(e) => {
                let _ = reply.send(Answer::Failed(e.to_string()));
                return;
            }
        };
        let _ = reply.send(Answer::Backfilling(backfill.instants.len()));
        let options = super::backfill::Options {
            rerun_succeeded: backfill.rerun_succeeded,
            force,
            priority: backfill.priority,
        };
        run_backfill(&engine, &job, backfill, options, reason, &mut in_progress).await;
        in_progress.end(&engine).await;
        return;
    }
    match start(engine, &job, force, params, reason).await {
        Ok(Started::Running { fence, handle }) => {
            let _ = reply.send(Answer::Running(fence));
            let _ = handle.await;
        }
        Ok(Started::Refused(refusal)) => {
            let _ = reply.send(Answer::Refused(refusal));
        }
        Err(e) => {
            let _ = reply.send(Answer::Failed(e.to_string()));
        }
    }
}

/// Runs a backfill's instants in order, as `replicron backfill` does, until
/// the scheduler stops (it goes on where it stopped when asked again).
async fn run_backfill(
    engine: &Arc<Engine>,
    job: &Job,
    backfill: Backfill,
    options: super::backfill::Options,
    reason: Option<Arc<str>>,
    in_progress: &mut super::backfill::InProgress,
) {
    let key = super::backfill::key(backfill.from, backfill.to);
    let job = &super::backfill::as_backfilled(job);
    tracing::info!(job = %job.name, key, instants = backfill.instants.len(), "backfill started");
    for instant in backfill.instants {
        match in_progress.cancelled(engine).await {
            Ok(false) => {}
            Ok(true) => {
                tracing::warn!(job = %job.name, key, "backfill cancelled");
                return;
            }
            Err(e) => {
                tracing::error!(job = %job.name, key, "backfill stopped: {e}");
                return;
            }
        }
        in_progress.running(engine, instant).await;
        let ran = super::backfill::run_instant(
            engine,
            job,
            instant,
            &key,
            options,
            Vec::new(),
            reason.clone(),
        )
        .await;
        match ran {
            Ok(super::backfill::Step::Stopped) => {
                tracing::warn!(job = %job.name, key, "backfill stopped with the scheduler; ask for it again to go on");
                return;
            }
            Ok(step) => in_progress.through(engine, step.ended_well()).await,
            Err(e) => {
                tracing::error!(job = %job.name, key, instant = %super::fmt_instant(instant), "backfill stopped: {e}");
                return;
            }
        }
    }
    tracing::info!(job = %job.name, key, "backfill done");
}
