//! `replicron backfill JOB --from T1 --to T2`: every instant of a job in a
//! past range, run once each, in order, with its own instant
//! (`REPLICRON_SCHEDULED_AT`), recorded as `backfill`.
//!
//! Each instant runs under the job's own lease, claimed at the database's
//! now as a trigger claims it, so that a backfill never runs beside another
//! run of the job (a scheduled one, a trigger, or another backfill's), on
//! any replica, and takes the job's shared locks and limits as any run
//! does. Under that lease the history decides: an instant that this
//! backfill (its key, `backfill FROM..TO`) recorded already is done, and
//! with `only_missing` one that any run of it succeeded. Its start record
//! is an `INSERT … SELECT` from the lease row, so a holder whose lease ran
//! out between the look and the record records nothing and runs nothing:
//! two operators (or two replicas) backfilling the same range run each
//! instant once, and a backfill interrupted and started again goes on
//! where it stopped.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;

use super::engine::Engine;
use super::execute::{Plan, execute};
use super::run_lease::Hold;
use super::work::{Outcome, Recording, Work};
use super::{Job, Phase};
use crate::backoff::Backoff;
use crate::db::DbError;
use crate::history::Trigger;
use crate::lease::Claim;
use crate::schedule::{Schedule, fmt_instant};

/// The most instants a backfill runs without being told it is meant
/// (`--yes`).
pub(crate) const CONFIRM_ABOVE: usize = 10_000;

/// The instants of `schedule` in `[from, to)`, in order; at most `cap` of
/// them (one more than a caller allows tells it there are more).
pub(crate) fn instants(
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    cap: usize,
) -> Vec<DateTime<Utc>> {
    let mut instants = Vec::new();
    let mut cursor = from - TimeDelta::milliseconds(1);
    while instants.len() < cap {
        match schedule.next_after(cursor) {
            Some(next) if next < to => {
                instants.push(next);
                cursor = next;
            }
            _ => break,
        }
    }
    instants
}

/// Why a backfill of a range of a job cannot be: what the command line
/// and the API refuse alike.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// `@manual` or `@reboot`.
    #[error("{job}: {expression} has no instants to backfill")]
    NoInstants { job: String, expression: String },
    /// A dependent job (`after`).
    #[error("{0}: it runs after its parents, at their instants: backfill them, or trigger it")]
    Dependent(String),
    /// A `run_on = "every"` job.
    #[error(
        "{0}: a run_on = \"every\" job's instants are each replica's own: run its command on the host"
    )]
    PerHost(String),
    /// `from` is not before `to`.
    #[error("from {} is not before to {}", fmt_instant(*.from), fmt_instant(*.to))]
    Empty {
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    },
    /// `to` is after the database's now.
    #[error(
        "to {} is in the future (the database's now is {}): instants not yet due are the schedule's",
        fmt_instant(*.to),
        fmt_instant(*.now)
    )]
    Future {
        to: DateTime<Utc>,
        now: DateTime<Utc>,
    },
}

/// Whether `job` has a range `[from, to)` to backfill, before the
/// database is asked anything.
pub(crate) fn check_range(
    job: &crate::config::Job,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), Refused> {
    if job.schedule.is_manual() || job.schedule.is_at_start() {
        return Err(Refused::NoInstants {
            job: job.name.to_string(),
            expression: job.schedule.expression().to_string(),
        });
    }
    if job.after.is_some() {
        return Err(Refused::Dependent(job.name.to_string()));
    }
    if job.run_on == crate::config::RunOn::Every {
        return Err(Refused::PerHost(job.name.to_string()));
    }
    if from >= to {
        return Err(Refused::Empty { from, to });
    }
    Ok(())
}

/// Whether a range ending at `to` is past at the database's `now`.
pub(crate) fn check_past(to: DateTime<Utc>, now: DateTime<Utc>) -> Result<(), Refused> {
    if to > now {
        return Err(Refused::Future { to, now });
    }
    Ok(())
}

/// The key a backfill of `[from, to)` records its runs with (their
/// `once_key`): the same range is the same backfill, whoever starts it.
pub(crate) fn key(from: DateTime<Utc>, to: DateTime<Utc>) -> String {
    format!("backfill {}..{}", fmt_instant(from), fmt_instant(to))
}

/// What became of one instant.
#[derive(Debug)]
pub(crate) enum Step {
    /// It ran: how its last attempt ended (`None` if none was recorded).
    Ran(Option<Outcome>),
    /// This backfill ran it already.
    Done,
    /// A run of it succeeded before (with `only_missing`).
    Succeeded,
    /// The scheduler is stopping: not run.
    Stopped,
}

/// Runs `instant` of `job` for the backfill `key` unless the history says
/// it is done (see the module's text): waits for the job's lease (however
/// long its running run takes), then looks, then runs.
pub(crate) async fn run_instant(
    engine: &Arc<Engine>,
    job: &Job,
    instant: DateTime<Utc>,
    key: &str,
    only_missing: bool,
) -> Result<Step, DbError> {
    let Some(work) = Work::of(job) else {
        return Ok(Step::Ran(None));
    };
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    let (lease, sent) = loop {
        if *engine.phase.borrow() != Phase::Running {
            return Ok(Step::Stopped);
        }
        // The lease counts from when its claim was sent.
        let sent = Instant::now();
        match engine
            .store
            .claim_now(&job.name, &engine.instance, job.settings.lock_at_most_for)
            .await?
        {
            Claim::Won(lease) => break (lease, sent),
            _ => tokio::time::sleep(backoff.next_pause()).await,
        }
    };
    let state = match engine.store.backfill_state(&job.name, instant, key).await {
        Ok(state) => state,
        Err(e) => {
            let _ = engine.store.release(lease, Duration::ZERO).await;
            return Err(e);
        }
    };
    if state.done || (only_missing && state.succeeded) {
        let _ = engine.store.release(lease, Duration::ZERO).await;
        return Ok(if state.done {
            Step::Done
        } else {
            Step::Succeeded
        });
    }
    let plan = Plan {
        work,
        hold: Hold::Fleet(lease),
        recording: Recording {
            instant: Some(instant),
            once_key: Some(key.to_string()),
            trigger: Trigger::Backfill,
            params: job.default_params.clone(),
            attempts_before: state.attempts,
            ..Recording::default()
        },
        claimed: sent,
        first_run: None,
        going: None,
    };
    Ok(Step::Ran(execute(engine.clone(), plan).await))
}
