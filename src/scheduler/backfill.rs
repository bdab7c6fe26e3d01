//! `replicron backfill JOB --from T1 --to T2`: every instant of a job in
//! a past range that has no succeeded run, run in order, with its own
//! instant (`REPLICRON_SCHEDULED_AT`), recorded as `backfill`.
//!
//! Each instant runs under the job's own lease, claimed at the database's
//! now as a trigger claims it, so that a backfill never runs beside another
//! run of the job (a scheduled one, a trigger, or another backfill's), on
//! any replica, and takes the job's shared locks and limits as any run
//! does. An `overlap = "allow"` job's instant runs instead under its
//! instant's own row, as the job's scheduled instants do, beside the job's
//! other runs as far as its run slots let it. Under that lease the history decides: an instant that some run
//! succeeded at is done (unless the backfill reruns those too); one whose
//! runs all ended otherwise (failed, timed out, killed, abandoned, lost
//! its lock, missed, skipped) or that never ran runs again. Its start
//! record is an `INSERT … SELECT` from the lease row, so a holder whose
//! lease ran out between the look and the record records nothing and runs
//! nothing: two backfills of overlapping ranges run each instant once, and
//! a backfill interrupted and started again goes on where it stopped,
//! running again the instant its interruption cut short.
//!
//! A backfill's lease is short ([`LEASE`], kept alive while its instant
//! runs, as any run's): a killed backfill holds the job for that long, not
//! for the job's `lock_at_most_for`. It runs below the schedule: it does
//! not claim the job while one of its scheduled instants is due and not
//! yet claimed, and, unless forced, it waits while the job is paused.

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
use crate::history::{BackfillState, RunStatus, Trigger};
use crate::lease::Claim;
use crate::schedule::{Schedule, fmt_instant};

pub(crate) mod progress;

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
    /// A backfill of the job is in progress (on `by`, since `since`; its
    /// mark ends at `until` unless kept alive).
    #[error(
        "{job}: a backfill of it is in progress (by {by}, since {}); wait for it to end, or cancel it with `replicron backfill {job} --cancel` (if its process is gone, its mark ends by itself at {})",
        fmt_instant(*.since),
        fmt_instant(*.until)
    )]
    InProgress {
        job: String,
        by: String,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    /// The fleet's backfills would have more instants left than `[daemon]
    /// max_backfill_instants` (what the text says).
    #[error("{job}: not begun: {why}")]
    TooMany { job: String, why: String },
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

/// The longest lease a backfill's instant holds between keep-alives: a
/// backfill killed with its instant holds the job no longer than this (a
/// replica not heard from for as long is taken for gone too).
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// How long a backfill leaves a scheduled instant that is due, and not
/// yet claimed, to the schedule. Past that no replica is running the
/// schedule's instant, and the backfill goes on.
const SCHEDULE_FIRST: TimeDelta = TimeDelta::seconds(5);

/// After how long of waiting for the job's lease a backfill says so at
/// warn, naming the holder.
const WAIT_TOLD_AFTER: Duration = Duration::from_secs(5);

/// `job` as a backfill runs it: with a lease of at most [`LEASE`].
pub(crate) fn as_backfilled(job: &Job) -> Job {
    let mut job = job.clone();
    job.settings.lock_at_most_for = job.settings.lock_at_most_for.min(LEASE);
    job.settings.lock_at_least_for = job
        .settings
        .lock_at_least_for
        .min(job.settings.lock_at_most_for);
    job
}

/// How a backfill treats what it finds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// Run again the instants that have a succeeded run too.
    pub(crate) rerun_succeeded: bool,
    /// Run while the job is paused.
    pub(crate) force: bool,
    /// The instants' priority among the waiters for a shared lock or a
    /// limit (`--priority`); `None`: behind every run that is not a
    /// backfill's.
    pub(crate) priority: Option<i32>,
}

/// What a backfill does with one instant, by its history (see the
/// module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// It never ran: run it.
    Run,
    /// Its runs did not succeed (the latest ended so): run it again.
    Rerun(RunStatus),
    /// A run of it succeeded: skip it.
    Skip,
    /// A run of it succeeded, and the backfill reruns those.
    RerunSucceeded,
}

/// What a backfill with `options` does with an instant whose history is
/// `state`.
pub(crate) fn decide(state: &BackfillState, options: Options) -> Decision {
    match (state.succeeded.is_some(), state.last) {
        (true, _) if options.rerun_succeeded => Decision::RerunSucceeded,
        (true, _) => Decision::Skip,
        (false, None) => Decision::Run,
        (false, Some(status)) => Decision::Rerun(status),
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decision::Run => f.write_str("never ran; will run"),
            Decision::Rerun(RunStatus::Running) => f.write_str(
                "ran before: interrupted (recorded running, its holder gone); will run again",
            ),
            Decision::Rerun(status) => write!(f, "ran before: {status}; will run again"),
            Decision::Skip => f.write_str("ran before: succeeded; skipped"),
            Decision::RerunSucceeded => {
                f.write_str("ran before: succeeded; will run again (--rerun-succeeded)")
            }
        }
    }
}

/// The lease row that marks a backfill of `job` in progress, fleet-wide:
/// held, and kept alive, by the process that runs it, from its first
/// instant to its end.
pub(crate) fn in_progress_row(job: &str) -> String {
    format!("{}backfill.{job}", crate::config::RESERVED_PREFIX)
}

/// A backfill in progress: its job's [`in_progress_row`] held, kept alive
/// every third of its lease (the backfill's, at most [`LEASE`]) until
/// [`InProgress::end`]. Once its lease is
/// found ended (`backfill --cancel`, or not kept alive in time) the
/// backfill is cancelled: it starts no further instant.
pub(crate) struct InProgress {
    lease: crate::lease::Lease,
    cancelled: Arc<std::sync::atomic::AtomicBool>,
    keeper: tokio::task::JoinHandle<()>,
    /// Its id: its row of progress (`progress`).
    pub(crate) id: i64,
    /// Its instants through, and of those the ones not succeeded.
    done: usize,
    failed: usize,
}

/// Marks a backfill of `job` in progress, unless one is already (one at a
/// time per job, across the fleet: that one is named), or the fleet's
/// backfills would go over `begin.limit` instants left (those are named).
/// Its progress is recorded where every replica reads it.
pub(crate) async fn begin(
    engine: &Arc<Engine>,
    job: &Job,
    begin: &progress::Begin,
) -> Result<Result<InProgress, Refused>, DbError> {
    let row = in_progress_row(&job.name);
    let length = as_backfilled(job).settings.lock_at_most_for;
    engine.store.ensure_rows(vec![row.clone()]).await?;
    let lease = match engine
        .store
        .claim_now(&row, &engine.instance, length)
        .await?
    {
        Claim::Won(lease) => lease,
        Claim::Held(holder) => {
            return Ok(Err(Refused::InProgress {
                job: job.name.to_string(),
                by: holder.by.unwrap_or_else(|| "another process".to_string()),
                since: holder.claimed_at.unwrap_or(holder.until),
                until: holder.until,
            }));
        }
        _ => {
            let now = engine.store.database_now().await?;
            return Ok(Err(Refused::InProgress {
                job: job.name.to_string(),
                by: "another process".to_string(),
                since: now,
                until: now,
            }));
        }
    };
    let id = match admit(engine, job, &lease, begin).await {
        Ok(Ok(id)) => id,
        Ok(Err(refused)) => {
            let _ = engine.store.release(lease, Duration::ZERO).await;
            return Ok(Err(refused));
        }
        Err(e) => {
            let _ = engine.store.release(lease, Duration::ZERO).await;
            return Err(e);
        }
    };
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (store, kept, told) = (engine.store.clone(), lease.clone(), cancelled.clone());
    let keeper = tokio::spawn(async move {
        loop {
            tokio::time::sleep(length / 3).await;
            // A database that does not answer is tried again: the lease
            // runs out by itself if it stays so.
            if let Ok(false) = store.extend(kept.clone(), length).await {
                told.store(true, std::sync::atomic::Ordering::SeqCst);
                return;
            }
        }
    });
    Ok(Ok(InProgress {
        lease,
        cancelled,
        keeper,
        id,
        done: 0,
        failed: 0,
    }))
}

/// Writes the progress row of the backfill of `job` that holds `lease`,
/// then withdraws it if the fleet's backfills, this one's included, are
/// over the limit; its id.
async fn admit(
    engine: &Engine,
    job: &Job,
    lease: &crate::lease::Lease,
    begin: &progress::Begin,
) -> Result<Result<i64, Refused>, DbError> {
    let store = &engine.store;
    let id = progress::insert(store, &job.name, lease.fence, &engine.instance, begin).await?;
    let others: Vec<_> = progress::read_in_progress(store)
        .await?
        .into_iter()
        .filter(|p| p.id != id)
        .collect();
    match progress::over_limit(begin.limit, begin.total, &others) {
        None => Ok(Ok(id)),
        Some(why) => {
            progress::delete(store, id).await;
            Ok(Err(Refused::TooMany {
                job: job.name.to_string(),
                why,
            }))
        }
    }
}

impl InProgress {
    /// Whether the backfill was cancelled: its row's lease ended, or is no
    /// longer this backfill's (read now, so a cancel stops it before its
    /// next instant).
    pub(crate) async fn cancelled(&self, engine: &Engine) -> Result<bool, DbError> {
        if self.cancelled.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(true);
        }
        let Some(row) = engine.store.find_lock(&self.lease.job).await? else {
            return Ok(true);
        };
        let now = engine.store.database_now().await?;
        Ok(row.fence != self.lease.fence || row.lock_until.and_utc() <= now)
    }

    /// Records that it runs `instant` now.
    pub(crate) async fn running(&self, engine: &Engine, instant: DateTime<Utc>) {
        progress::step(
            &engine.store,
            self.id,
            Some(instant),
            self.done,
            self.failed,
        )
        .await;
    }

    /// Records that it is through one more instant, which `succeeded` or
    /// not.
    pub(crate) async fn through(&mut self, engine: &Engine, succeeded: bool) {
        self.done += 1;
        self.failed += usize::from(!succeeded);
        progress::step(&engine.store, self.id, None, self.done, self.failed).await;
    }

    /// Ends it: its row is free for the next backfill of the job.
    pub(crate) async fn end(self, engine: &Engine) {
        self.keeper.abort();
        progress::delete(&engine.store, self.id).await;
        let row = self.lease.job.clone();
        if let Err(e) = engine.store.release(self.lease, Duration::ZERO).await {
            tracing::warn!(
                %row,
                "the backfill's row could not be released; it ends by itself within {}s: {e}",
                LEASE.as_secs()
            );
        }
    }
}

/// Cancels the backfill of `job` in progress: ends its row's lease, so
/// that it starts no further instant (the one running goes on to its end).
/// The instance that runs it, or `None` if none was in progress.
pub(crate) async fn cancel(store: &crate::db::Store, job: &str) -> Result<Option<String>, DbError> {
    let row = in_progress_row(job);
    let Some(lock) = store.find_lock(&row).await? else {
        return Ok(None);
    };
    if lock.lock_until.and_utc() <= store.database_now().await? {
        return Ok(None);
    }
    store.force_unlock(&row).await?;
    Ok(Some(
        lock.locked_by
            .unwrap_or_else(|| "another process".to_string()),
    ))
}

/// What a cancel did.
#[derive(Debug)]
pub(crate) struct Cancelled {
    /// The job of the backfill cancelled, or asked for.
    pub(crate) job: Option<String>,
    /// What was cancelled, or why nothing was.
    pub(crate) result: Result<String, String>,
}

/// Cancels the backfill `id` (of `job`, if given too), or else the
/// backfill of `job`, in progress.
pub(crate) async fn cancel_by(
    store: &crate::db::Store,
    job: Option<&str>,
    id: Option<i64>,
) -> Result<Cancelled, DbError> {
    let said = |job: Option<&str>, result| Cancelled {
        job: job.map(str::to_string),
        result,
    };
    let Some(id) = id else {
        let Some(job) = job else {
            return Ok(said(None, Err("name a job or a backfill's id".to_string())));
        };
        return Ok(match cancel(store, job).await? {
            Some(by) => said(
                Some(job),
                Ok(format!(
                    "cancelled the backfill of {job} run by {by}: it starts no further instant (the one running goes on to its end)"
                )),
            ),
            None => said(
                Some(job),
                Err(format!("no backfill of {job} is in progress")),
            ),
        });
    };
    let running = progress::read_in_progress(store).await?;
    let Some(row) = running.into_iter().find(|p| p.id == id) else {
        return Ok(said(job, Err(format!("no backfill {id} is in progress"))));
    };
    if let Some(job) = job
        && job != row.job
    {
        return Ok(said(
            Some(job),
            Err(format!("backfill {id} is of {}, not of {job}", row.job)),
        ));
    }
    Ok(match progress::cancel(store, id).await? {
        Some(row) => said(
            Some(&row.job),
            Ok(format!(
                "cancelled backfill {id} of {} run by {} ({}/{} instants done): it starts no further instant (the one running goes on to its end)",
                row.job, row.started_by, row.done, row.total
            )),
        ),
        None => said(
            Some(&row.job),
            Err(format!("no backfill {id} is in progress")),
        ),
    })
}

/// What became of one instant.
#[derive(Debug)]
pub(crate) enum Step {
    /// It ran: how its runs had ended before (`None`: it never ran), and
    /// how its last attempt ended now (`None` if none was recorded).
    Ran(Option<RunStatus>, Option<Outcome>),
    /// A run of it succeeded before: skipped.
    Succeeded,
    /// The scheduler is stopping: not run.
    Stopped,
}

impl Step {
    /// Whether its instant has a succeeded run now.
    pub(crate) fn succeeded(&self) -> bool {
        match self {
            Step::Ran(_, outcome) => outcome
                .as_ref()
                .is_some_and(|o| o.status == RunStatus::Succeeded),
            Step::Succeeded => true,
            Step::Stopped => false,
        }
    }
    /// Whether its instant ended well now: a run of it succeeded, or its
    /// process's exit code said it had nothing to do (`skip_exit_codes`).
    /// Not a failure to count.
    pub(crate) fn ended_well(&self) -> bool {
        match self {
            Step::Ran(_, Some(outcome)) => {
                outcome.status == RunStatus::Succeeded
                    || crate::config::exit_codes::skipped_by_code(outcome.status, outcome.exit_code)
            }
            Step::Ran(_, None) => false,
            Step::Succeeded => true,
            Step::Stopped => false,
        }
    }
}

/// Runs `instant` of `job` (as [`as_backfilled`] makes it) for the backfill
/// `key`, linked to the parents' runs `parent_runs` (a dependent job's),
/// unless the history says it is done (see the module's text): waits
/// for the job's lease (however long its running run takes, behind the
/// schedule's due instants, and, unless forced, while the job is paused),
/// then looks, then runs.
pub(crate) async fn run_instant(
    engine: &Arc<Engine>,
    job: &Job,
    instant: DateTime<Utc>,
    key: &str,
    options: Options,
    parent_runs: Vec<i64>,
    reason: Option<Arc<str>>,
) -> Result<Step, DbError> {
    let Some(work) = Work::of(job) else {
        return Ok(Step::Ran(None, None));
    };
    // An `overlap = "allow"` job's runs each hold their instant's own row,
    // under that row's fences: a backfilled instant does too, so that its
    // claims never take the job's scheduled runs going beside it for
    // runs of a vanished holder of the job's row.
    let lease_row = match job.settings.overlap {
        crate::config::Overlap::Allow(_) => crate::lease::instant_row(&job.name, instant),
        _ => job.name.to_string(),
    };
    engine.throttle.start(super::throttle::Kind::Backfill).await;
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    let waiting_since = Instant::now();
    // What the backfill said it waits for, each said once.
    let mut told: Vec<Wait> = Vec::new();
    let (lease, sent) = loop {
        if *engine.phase.borrow() != Phase::Running {
            return Ok(Step::Stopped);
        }
        let row = engine.store.find_lock(&job.name).await?;
        let held = if lease_row == *job.name {
            None
        } else {
            engine.store.find_lock(&lease_row).await?
        };
        let now = engine.store.database_now().await?;
        let wait = match &row {
            Some(row) => why_wait(job, row, now, options.force),
            None => None,
        };
        let claimed = if wait.is_none() {
            // The lease counts from when its claim was sent.
            let sent = Instant::now();
            match engine
                .store
                .claim_now(&lease_row, &engine.instance, job.settings.lock_at_most_for)
                .await?
            {
                Claim::Won(lease) => Some((lease, sent)),
                _ => None,
            }
        } else {
            None
        };
        if let Some(won) = claimed {
            break won;
        }
        let (kind, why) = wait.unwrap_or_else(|| {
            let holder = match held.as_ref().or(row.as_ref()) {
                Some(row) => format!(
                    " by {} until {}",
                    row.locked_by.as_deref().unwrap_or("nobody"),
                    fmt_instant(row.lock_until.and_utc())
                ),
                None => String::new(),
            };
            (Wait::Held, format!("its lease is held{holder}"))
        });
        if !told.contains(&kind) && waiting_since.elapsed() >= WAIT_TOLD_AFTER {
            told.push(kind);
            tracing::warn!(
                job = %job.name,
                key,
                instant = %fmt_instant(instant),
                "backfill waits: {why}"
            );
        }
        tokio::time::sleep(backoff.next_pause()).await;
    };
    let state = match engine.store.backfill_state(&job.name, instant).await {
        Ok(state) => state,
        Err(e) => {
            let _ = engine.store.release(lease, Duration::ZERO).await;
            return Err(e);
        }
    };
    if decide(&state, options) == Decision::Skip {
        let _ = engine.store.release(lease, Duration::ZERO).await;
        return Ok(Step::Succeeded);
    }
    let plan = Plan {
        work,
        hold: Hold::Fleet(lease),
        recording: Recording {
            instant: Some(instant),
            once_key: Some(key.to_string()),
            trigger: Trigger::Backfill,
            params: job.params_at(instant),
            reason,
            attempts_before: state.attempts,
            parent_runs,
            priority: options.priority,
            ..Recording::default()
        },
        claimed: sent,
        first_run: None,
        going: None,
    };
    Ok(Step::Ran(state.last, execute(engine.clone(), plan).await))
}

/// The jobs of `config` that run after `parent` (`after`), in the file's
/// order: what `--with-dependents` runs at its succeeded instants.
pub(crate) fn dependents<'c>(
    config: &'c crate::config::Config,
    parent: &str,
) -> Vec<&'c crate::config::Job> {
    config
        .jobs
        .iter()
        .filter(|job| {
            job.after
                .as_ref()
                .is_some_and(|after| after.parents.iter().any(|p| p.name == parent))
        })
        .collect()
}

/// The runs of each of `parents` that succeeded at `instant`, if every
/// one has one: a dependent job's instant that a backfill runs.
pub(crate) async fn parents_succeeded(
    engine: &Engine,
    parents: &[String],
    instant: DateTime<Utc>,
) -> Result<Option<Vec<i64>>, DbError> {
    let mut runs = Vec::new();
    for parent in parents {
        match engine
            .store
            .backfill_state(parent, instant)
            .await?
            .succeeded
        {
            Some(id) => runs.push(id),
            None => return Ok(None),
        }
    }
    Ok(Some(runs))
}

/// Why a backfill of `job` (or a rerun of an abandoned instant) does not
/// claim it now, by its lease row `row` at the database's `now`: paused
/// (unless `force`), or one of its scheduled instants is due and not yet
/// claimed (for at most [`SCHEDULE_FIRST`]).
pub(super) fn why_wait(
    job: &Job,
    row: &crate::lease::LockRow,
    now: DateTime<Utc>,
    force: bool,
) -> Option<(Wait, String)> {
    if !force && let Some(pause) = row.pause_at(now) {
        return Some((
            Wait::Paused,
            format!("the job is {pause}; resume it to go on"),
        ));
    }
    let last = row.last_scheduled_at?.and_utc();
    let due = job.schedule.next_after(last)?;
    (due <= now && now - due < SCHEDULE_FIRST).then(|| {
        (
            Wait::Due,
            format!("its scheduled instant {} is due first", fmt_instant(due)),
        )
    })
}

/// What a backfill's instant waits for before it claims the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    /// The job is paused.
    Paused,
    /// One of the schedule's instants is due.
    Due,
    /// Its lease is held.
    Held,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("time")
            .with_timezone(&Utc)
    }

    fn row(last: &str) -> crate::lease::LockRow {
        crate::lease::LockRow {
            name: "tick".into(),
            lock_until: at("2027-01-01T00:00:00Z").naive_utc(),
            locked_at: None,
            locked_by: None,
            last_scheduled_at: Some(at(last).naive_utc()),
            fence: 1,
            created_at: None,
            missed_checked_until: None,
            paused_at: None,
            paused_until: None,
            paused_by: None,
            paused_reason: None,
            claim_nonce: None,
            queued_for: None,
            stop_fence: None,
        }
    }

    /// A backfill leaves a scheduled instant that is due, and not yet
    /// claimed, to the schedule for a few seconds, then goes on (no replica
    /// runs the schedule); a paused job holds it unless it is forced.
    #[test]
    fn a_backfill_waits_for_a_due_instant_and_a_pause() {
        let job = Job::new("tick", "*/10 * * * * *").expect("job");
        let last = row("2027-01-01T00:00:10Z");
        let wait = |row: &crate::lease::LockRow, now: &str, force: bool| {
            why_wait(&job, row, at(now), force).map(|(kind, _)| kind)
        };
        assert_eq!(wait(&last, "2027-01-01T00:00:19.900Z", false), None);
        assert_eq!(
            wait(&last, "2027-01-01T00:00:20.100Z", false),
            Some(Wait::Due)
        );
        assert_eq!(
            wait(&last, "2027-01-01T00:00:24.900Z", false),
            Some(Wait::Due)
        );
        assert_eq!(wait(&last, "2027-01-01T00:00:25.100Z", false), None);
        let mut paused = last.clone();
        paused.paused_at = Some(at("2027-01-01T00:00:12Z").naive_utc());
        paused.paused_until = Some(at("2027-01-01T01:00:00Z").naive_utc());
        assert_eq!(
            wait(&paused, "2027-01-01T00:00:19Z", false),
            Some(Wait::Paused)
        );
        assert_eq!(wait(&paused, "2027-01-01T00:00:19Z", true), None);
    }

    /// What a backfill does with an instant, by its history.
    #[test]
    fn a_backfill_runs_again_what_did_not_succeed() {
        let state = |succeeded, last| BackfillState {
            succeeded,
            last,
            attempts: 1,
        };
        let plain = Options::default();
        let rerun = Options {
            rerun_succeeded: true,
            ..Options::default()
        };
        assert_eq!(decide(&state(None, None), plain), Decision::Run);
        for status in [
            RunStatus::Failed,
            RunStatus::TimedOut,
            RunStatus::Abandoned,
            RunStatus::Killed,
            RunStatus::LostLock,
            RunStatus::Running,
            RunStatus::Missed,
        ] {
            assert_eq!(
                decide(&state(None, Some(status)), plain),
                Decision::Rerun(status)
            );
        }
        let done = state(Some(7), Some(RunStatus::Failed));
        assert_eq!(decide(&done, plain), Decision::Skip);
        assert_eq!(decide(&done, rerun), Decision::RerunSucceeded);
    }
}
