//! Dependent jobs (`after`): a job that runs once for each instant at
//! which its parents' runs ended as it asks (`succeeded`, unless `on` says
//! otherwise), with the parents' instant as its own.
//!
//! Nothing is handed from the replica that ran a parent to the one that
//! runs the dependent job: every replica reads the parents' rows in the
//! history (the fleet's record of how each instant ended) every
//! [`POLL`], decides each instant after the dependent job's last claimed
//! one, in order, and claims the ready ones through the job's own lease,
//! as a scheduled instant is claimed. The lease's `last_scheduled_at`
//! keeps each instant once, so whichever replica ran the parent, and
//! whether or not it is still up, the dependent run happens once. An
//! instant whose parents have not all ended is waited for: later ones are
//! not claimed before it, so the runs keep their instants' order.
//!
//! Every instant at which the parents ended has a row: one whose parents
//! ended while a run of the job was going (by the history) is an overrun,
//! and one at which a parent failed is `upstream failed`; either is still
//! claimed, and recorded `skipped` with its reason by the replica that wins
//! it. Ends that arrive together are a backlog, run in order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::engine::Engine;
use super::job::Job;
use super::tick::{self, Attempt, Cause, Current, Patience};
use super::{Phase, fmt_instant};
use crate::config::{After, Overlap, Parent};
use crate::history::{RunBrief, RunStatus, Trigger};
use crate::schedule::Schedule;
use crate::telemetry;

/// How often each replica reads the parents' runs: a dependent run starts
/// at most this long (and on average half of it) after its parents' ends
/// are recorded.
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// The most parents' rows read at once.
const PAGE: i64 = 500;

/// How long an instant waits for a parent that has no row for it (a
/// fan-in's parent that ran late, or not at all) before it is decided
/// without it; and for a retry a failed attempt promised (its replica may
/// have died in the pause before it).
pub(crate) const PARENT_PATIENCE: TimeDelta = TimeDelta::minutes(5);

/// What the parents' rows make of one of their instants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Every parent ended as `on` asks: the dependent job runs, due when
    /// the last of them ended, started by those runs.
    Ready {
        due: DateTime<Utc>,
        parents: Vec<i64>,
    },
    /// A parent's run of it ended for good otherwise than `on` asks, and
    /// not by succeeding (it failed, timed out, was recorded `missed`, …):
    /// the dependent job does not run, and its
    /// instant is recorded `skipped`, `why` saying which parent ended how.
    /// Due when the last of the parents' runs ended.
    Upstream {
        due: DateTime<Utc>,
        parents: Vec<i64>,
        why: String,
    },
    /// It does not run, and nothing is recorded: the instant is not a
    /// parent's, a parent succeeded where `on` asks for other endings, a
    /// parent has had no row for it for [`PARENT_PATIENCE`], or the job's
    /// calendars exclude it.
    NoRun,
    /// A parent's run of it has not ended for good yet.
    Pending,
    /// A parent has no row of it yet, but has rows of later instants that
    /// started [`OVERTAKEN_AFTER`] ago or more (it skipped the instant in
    /// an outage, or claims it late): the job's loop passes over it rather
    /// than hold every later instant back, and the check for missed
    /// instants judges the later ones, while it and `verify` still wait
    /// for its row, as for `Pending`.
    Overtaken,
}

/// How long after a parent's run of a later instant started an instant of
/// which it has no row is passed over by the dependent job's loop.
pub(crate) const OVERTAKEN_AFTER: TimeDelta = TimeDelta::seconds(5);

/// How one parent's runs of an instant ended.
enum Ended {
    /// For good, by this run (`None`: it has no run, only a `missed` row).
    As(RunStatus, Option<(i64, DateTime<Utc>)>),
    /// Not yet.
    NotYet,
    /// Not yet: it has no row of it.
    NoRowYet,
    /// It is not an instant of the parent's.
    NotItsInstant,
    /// It has no row, and waited long enough for one.
    Never,
}

/// Decides each instant of `rows` (the parents' runs of instants after the
/// job's last, in order, as [`crate::history::runs_after`] reads them) at
/// `now`, by the database's clock. `complete`: the rows are all there are,
/// not a page cut short (the last instant of a full page may lack rows).
pub(crate) fn decide(
    after: &After,
    own: &Schedule,
    rows: &[RunBrief],
    complete: bool,
    now: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, Decision)> {
    let mut by_instant: BTreeMap<DateTime<Utc>, Vec<&RunBrief>> = BTreeMap::new();
    for row in rows {
        by_instant
            .entry(row.scheduled_at.and_utc())
            .or_default()
            .push(row);
    }
    let last = by_instant.keys().next_back().copied();
    // Each parent's instants, each with the earliest start among its rows
    // of that instant and of every later one.
    let mut starts: BTreeMap<&str, BTreeMap<DateTime<Utc>, DateTime<Utc>>> = BTreeMap::new();
    for row in rows {
        let start = row.started_at.and_utc();
        let first = starts
            .entry(row.job.as_str())
            .or_default()
            .entry(row.scheduled_at.and_utc())
            .or_insert(start);
        *first = (*first).min(start);
    }
    for instants in starts.values_mut() {
        let mut earliest = DateTime::<Utc>::MAX_UTC;
        for first in instants.values_mut().rev() {
            earliest = earliest.min(*first);
            *first = earliest;
        }
    }
    // Whether `parent` has runs of instants after `instant` that started
    // long enough ago.
    let overtaken = |parent: &str, instant: DateTime<Utc>| {
        starts.get(parent).is_some_and(|instants| {
            instants
                .range((
                    std::ops::Bound::Excluded(instant),
                    std::ops::Bound::Unbounded,
                ))
                .next()
                .is_some_and(|(_, earliest)| now - *earliest >= OVERTAKEN_AFTER)
        })
    };
    let mut decided = Vec::new();
    for (instant, rows) in by_instant {
        if !complete && Some(instant) == last {
            decided.push((instant, Decision::Pending));
            break;
        }
        let ends: Vec<Ended> = after
            .parents
            .iter()
            .map(|parent| ended(parent, instant, &rows, now))
            .collect();
        let decision = if ends.iter().any(|e| matches!(e, Ended::NotItsInstant)) {
            Decision::NoRun
        } else if ends.iter().any(|e| matches!(e, Ended::NotYet)) {
            Decision::Pending
        } else if ends.iter().any(|e| matches!(e, Ended::NoRowYet)) {
            let all_overtaken = after
                .parents
                .iter()
                .zip(&ends)
                .filter(|(_, end)| matches!(end, Ended::NoRowYet))
                .all(|(parent, _)| overtaken(&parent.name, instant));
            if all_overtaken {
                Decision::Overtaken
            } else {
                Decision::Pending
            }
        } else if own.excluded(instant).is_some() {
            Decision::NoRun
        } else {
            let mut due = None;
            let mut parents = Vec::new();
            let mut failed = Vec::new();
            let mut all = true;
            for (parent, end) in after.parents.iter().zip(ends) {
                match end {
                    Ended::As(status, run) => {
                        if let Some((id, finished)) = run {
                            parents.push(id);
                            due = due.max(Some(finished));
                        }
                        // A parent that ended otherwise than it asks,
                        // and not by succeeding (a success is simply not
                        // an instant of a job that runs on failures).
                        if !after.on.contains(&status) {
                            all = false;
                            if status != RunStatus::Succeeded {
                                failed.push(format!("{} ended {}", parent.name, status.as_str()));
                            }
                        }
                    }
                    _ => all = false,
                }
            }
            match (all, due) {
                _ if !failed.is_empty() => Decision::Upstream {
                    due: due.unwrap_or(instant),
                    parents,
                    why: format!("upstream failed: {}", failed.join(", ")),
                },
                (true, Some(due)) => Decision::Ready { due, parents },
                _ => Decision::NoRun,
            }
        };
        decided.push((instant, decision));
    }
    decided
}

/// How `parent`'s runs of `instant` (among `rows`, every parent's) ended.
fn ended(parent: &Parent, instant: DateTime<Utc>, rows: &[&RunBrief], now: DateTime<Utc>) -> Ended {
    let own: Vec<&&RunBrief> = rows.iter().filter(|r| r.job == parent.name).collect();
    if own.is_empty() {
        let scheduled = !parent.schedule.is_manual() && !parent.schedule.is_after();
        if scheduled
            && parent
                .schedule
                .next_after(instant - TimeDelta::milliseconds(1))
                != Some(instant)
        {
            return Ended::NotItsInstant;
        }
        // The other parents' ends (or, with none, the instant) start the
        // wait for its row.
        let since = rows
            .iter()
            .filter_map(|r| r.finished_at)
            .max()
            .map_or(instant, |t| t.and_utc());
        return if now - since > PARENT_PATIENCE {
            Ended::Never
        } else {
            Ended::NoRowYet
        };
    }
    let finished = |run: &RunBrief| run.finished_at.map(|t| (run.id, t.and_utc()));
    if let Some(success) = own.iter().find(|r| r.status == RunStatus::Succeeded) {
        return Ended::As(RunStatus::Succeeded, finished(success));
    }
    let Some(last) = own.iter().max_by_key(|r| r.attempt) else {
        return Ended::NotYet;
    };
    match last.status {
        RunStatus::Running => Ended::NotYet,
        RunStatus::Missed => Ended::As(RunStatus::Missed, None),
        status @ (RunStatus::Failed | RunStatus::TimedOut)
            if last.attempt <= parent.retries as i32
                && parent.exit_codes.retried(status, last.exit_code) =>
        {
            // A retry is to come, unless its replica died in the pause.
            let end = last.finished_at.map_or(now, |t| t.and_utc());
            let backoff = TimeDelta::from_std(parent.retry_backoff).unwrap_or(TimeDelta::MAX);
            if now - end > backoff + PARENT_PATIENCE {
                Ended::As(status, finished(last))
            } else {
                Ended::NotYet
            }
        }
        status => Ended::As(status, finished(last)),
    }
}

/// The loop of a dependent job on this replica: reads its parents' runs
/// every [`POLL`] and claims each instant they made ready, in order.
pub(crate) async fn dependent_loop(
    engine: Arc<Engine>,
    job: Arc<Job>,
    mut retired: watch::Receiver<bool>,
) {
    let Some(after) = job.after.clone() else {
        return;
    };
    let parents = after.names();
    // The latest instant this replica decided (claimed, lost, or found
    // not to run): the next read starts after it.
    let mut handled: Option<DateTime<Utc>> = None;
    let mut current: Option<Current> = None;
    let mut others: Vec<JoinHandle<()>> = Vec::new();
    let patience = tick::late_limit(&job);
    'polling: loop {
        tokio::select! {
            biased;
            () = tick::stopping(&engine, &retired) => break,
            () = tokio::time::sleep(POLL) => {}
        }
        if !engine.health.is_up() {
            continue;
        }
        let row = match engine.store.find_lock(&job.name).await {
            Ok(row) => row,
            Err(e) => {
                debug!(job = %job.name, "the dependent job's lease row could not be read: {e}");
                continue;
            }
        };
        let now = engine.clock.now();
        // After the job's last claimed instant, or, for a job that has
        // claimed none, those that came since it was added.
        let floor = row
            .as_ref()
            .and_then(|r| r.last_scheduled_at.or(r.created_at).map(|t| t.and_utc()));
        let cursor = match (floor, handled) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b).unwrap_or(now - patience),
        };
        let rows = match engine.store.runs_after(parents.clone(), cursor, PAGE).await {
            Ok(rows) => rows,
            Err(e) => {
                debug!(job = %job.name, "the parents' runs could not be read: {e}");
                continue;
            }
        };
        let complete = (rows.len() as i64) < PAGE;
        for (instant, decision) in decide(&after, &job.schedule, &rows, complete, now) {
            let (due, parent_runs, upstream) = match decision {
                Decision::Pending => continue 'polling,
                Decision::NoRun => {
                    handled = Some(instant);
                    continue;
                }
                Decision::Overtaken => {
                    debug!(job = %job.name, instant = %fmt_instant(instant), "passed over: a parent has no run of it, and ran later instants (the check for missed instants waits for its row)");
                    handled = Some(instant);
                    continue;
                }
                Decision::Ready { due, parents } => (due, parents, None),
                Decision::Upstream { due, parents, why } => (due, parents, Some(why)),
            };
            let cause = Cause {
                trigger: Trigger::Dependency,
                due: Some(due),
                parent_runs,
                not_run: None,
                params: None,
            };
            let mut instants = Instants {
                engine: &engine,
                job: &job,
                current: &mut current,
                others: &mut others,
                retired: &mut retired,
            };
            let taken = match upstream {
                Some(why) => instants.not_run(instant, cause, why).await,
                None => instants.take(instant, cause, patience).await,
            };
            match taken {
                Taken::Done => handled = Some(instant),
                Taken::Again => continue 'polling,
                Taken::Stop => break 'polling,
            }
            if *engine.phase.borrow() != Phase::Running {
                break 'polling;
            }
        }
    }
    if let Some(run) = current {
        let _ = run.task.await;
    }
    for task in others {
        let _ = task.await;
    }
}

/// What became of one ready instant.
enum Taken {
    /// It was decided: run, recorded, or left to the check for missed
    /// instants.
    Done,
    /// It could not be decided now (the history could not be read): the
    /// next read starts at it again.
    Again,
    /// The loop is to stop.
    Stop,
}

/// The run of the job that was going when an instant's parents ended, as
/// the history tells.
struct Behind {
    /// The fence of its lease.
    fence: i64,
    /// Whether an instant after its own, before this one, ran or waits to
    /// run already: under `queue` and `replace`, the one that waits for it.
    waited: bool,
}

/// Why an instant whose parents ended while the job's run was going is not
/// run.
const OVERRUN: &str = "overrun: a run of the job was going when its parents ended";
const OVERRUN_WAITED: &str = "overrun: a run of the job was going when its parents ended, and an earlier instant waited for it already";

/// The dependent loop's state that each instant it takes works on.
struct Instants<'a> {
    engine: &'a Arc<Engine>,
    job: &'a Arc<Job>,
    /// This replica's latest run of the job.
    current: &'a mut Option<Current>,
    /// Its runs that may go beside it (`overlap = "allow"`).
    others: &'a mut Vec<JoinHandle<()>>,
    retired: &'a mut watch::Receiver<bool>,
}

impl Instants<'_> {
    /// Runs `instant`, whose parents ended at `cause.due`, as its overlap
    /// policy says. Its own run that this replica started after the
    /// parents ended (their ends came together, after a stall) is waited
    /// for: the instants are a backlog, run in order. Only an instant
    /// whose parents ended while a run of the job was going, by the
    /// history, is an overrun: `skip` records it `skipped`; `queue` and
    /// `replace` let the first such instant wait for that run and record
    /// the others `skipped`.
    async fn take(&mut self, instant: DateTime<Utc>, cause: Cause, patience: TimeDelta) -> Taken {
        let (engine, job) = (self.engine, self.job);
        let due = cause.due.unwrap_or(instant);
        if let Overlap::Allow(_) = job.settings.overlap {
            if let Some(run) = self.current.take_if(|run| run.is_running()) {
                self.others.retain(|task| !task.is_finished());
                self.others.push(run.task);
            }
            if too_late(engine, job, instant, due, patience) {
                return Taken::Done;
            }
            return self.attempt(instant, cause).await;
        }
        if let Some(run) = self
            .current
            .take_if(|run| run.is_running() && !run.was_going_at(due))
        {
            let mut run = run;
            tokio::select! {
                biased;
                () = tick::stopping(engine, self.retired) => {
                    *self.current = Some(run);
                    return Taken::Stop;
                }
                _ = &mut run.task => {}
            }
        }
        let behind = match behind(engine, job, instant, due).await {
            Ok(behind) => behind,
            Err(e) => {
                debug!(job = %job.name, instant = %fmt_instant(instant), "the job's runs could not be read: {e}");
                return Taken::Again;
            }
        };
        match behind {
            None if too_late(engine, job, instant, due, patience) => Taken::Done,
            None => self.attempt(instant, cause).await,
            Some(behind) => {
                telemetry::overrun(&job.name);
                self.overrun(instant, cause, behind).await
            }
        }
    }

    /// Claims `instant` and starts its run on a win.
    async fn attempt(&mut self, instant: DateTime<Utc>, cause: Cause) -> Taken {
        let (engine, job) = (self.engine, self.job);
        let due = cause.due.unwrap_or(instant);
        match tick::attempt(engine, job, instant, cause.clone(), Patience::Since(due)).await {
            Attempt::Won(run) => {
                info!(job = %job.name, instant = %fmt_instant(instant), "its parents ended: running");
                *self.current = Some(run);
                Taken::Done
            }
            // A run the history did not show yet was going when the
            // parents ended.
            Attempt::Overrun { fence, .. } => {
                self.overrun(
                    instant,
                    cause,
                    Behind {
                        fence,
                        waited: false,
                    },
                )
                .await
            }
            Attempt::Lost | Attempt::Paused { .. } | Attempt::Skipped => Taken::Done,
        }
    }

    /// An instant whose parents ended while the job's run `behind` was
    /// going.
    async fn overrun(&mut self, instant: DateTime<Utc>, cause: Cause, behind: Behind) -> Taken {
        let (engine, job) = (self.engine, self.job);
        match job.settings.overlap {
            Overlap::Queue | Overlap::Replace if !behind.waited => {
                let mut local = self
                    .current
                    .take_if(|run| run.is_running() && run.fence == behind.fence);
                let waited = tick::overlapping(
                    engine,
                    job,
                    instant,
                    behind.fence,
                    local.as_mut().map(|run| &mut run.task),
                    self.retired,
                    cause.clone(),
                )
                .await;
                match waited {
                    Some(Some(Attempt::Won(next))) => *self.current = Some(next),
                    Some(Some(_)) => {}
                    Some(None) => {
                        *self.current = local.filter(|run| run.is_running());
                        return Taken::Stop;
                    }
                    None => {
                        *self.current = local.filter(|run| run.is_running());
                        return self.not_run(instant, cause, OVERRUN_WAITED.into()).await;
                    }
                }
                Taken::Done
            }
            Overlap::Queue | Overlap::Replace => {
                self.not_run(instant, cause, OVERRUN_WAITED.into()).await
            }
            Overlap::Skip | Overlap::Allow(_) => self.not_run(instant, cause, OVERRUN.into()).await,
        }
    }

    /// Records `instant` `skipped`, `why` saying why, through its claim:
    /// the replica that wins it writes the one row the fleet has of it.
    /// Waits for the job's lease (a run going holds it) for as long as it
    /// takes.
    async fn not_run(&mut self, instant: DateTime<Utc>, cause: Cause, why: String) -> Taken {
        let (engine, job) = (self.engine, self.job);
        let cause = Cause {
            not_run: Some(why),
            ..cause
        };
        let patience = if matches!(job.settings.overlap, Overlap::Allow(_)) {
            Patience::Since(cause.due.unwrap_or(instant))
        } else {
            Patience::Waiting
        };
        let attempt = tokio::select! {
            biased;
            () = tick::stopping(engine, self.retired) => return Taken::Stop,
            attempt = tick::attempt(engine, job, instant, cause, patience) => attempt,
        };
        if let Attempt::Won(recording) = attempt {
            let _ = recording.task.await;
        }
        Taken::Done
    }
}

/// Whether `instant`, due at `due`, is older than the claim's `patience`:
/// skipped here, and recorded `missed` by the check for missed instants.
fn too_late(
    engine: &Engine,
    job: &Job,
    instant: DateTime<Utc>,
    due: DateTime<Utc>,
    patience: TimeDelta,
) -> bool {
    if engine.clock.now() - due <= patience {
        return false;
    }
    telemetry::skipped(&job.name, telemetry::Skip::TooLate, 1);
    warn!(
        job = %job.name,
        instant = %fmt_instant(instant),
        "instant skipped: its parents ended more than {}s ago before a replica got to it (the check for missed instants records it)",
        patience.num_seconds()
    );
    true
}

/// The run of `job` that was going at `due` (when `instant`'s parents
/// ended), by the fleet's history, if one was.
async fn behind(
    engine: &Engine,
    job: &Job,
    instant: DateTime<Utc>,
    due: DateTime<Utc>,
) -> Result<Option<Behind>, crate::db::DbError> {
    let name = job.name.to_string();
    engine
        .store
        .call("reading the job's runs", move |conn| {
            let now = crate::db::clock::database_now(conn)?;
            let held = crate::lease::find_lock(conn, &name)?
                .filter(|row| row.lock_until.and_utc() > now)
                .map(|row| row.fence);
            let Some((ran, fence)) = crate::history::run_going_at(conn, &name, due, held)? else {
                return Ok(None);
            };
            let waited = crate::history::ran_between(conn, &name, ran, instant)?;
            Ok(Some(Behind { fence, waited }))
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDateTime;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a time")
            .with_timezone(&Utc)
    }

    fn parent(name: &str, schedule: &str, retries: u32) -> Parent {
        Parent {
            name: name.to_string(),
            schedule: Schedule::parse(schedule, chrono_tz::Tz::UTC).expect("valid"),
            retries,
            retry_backoff: Duration::from_secs(10),
            exit_codes: Default::default(),
        }
    }

    fn row(
        id: i64,
        job: &str,
        instant: &str,
        attempt: i32,
        status: RunStatus,
        ended: Option<&str>,
    ) -> RunBrief {
        let naive = |t: &str| -> NaiveDateTime { at(t).naive_utc() };
        RunBrief {
            id,
            job: job.to_string(),
            scheduled_at: naive(instant),
            attempt,
            instance: "r".to_string(),
            fence: 1,
            started_at: naive(instant),
            finished_at: ended.map(naive),
            status,
            exit_code: None,
            confirmed_at: None,
            once_key: None,
            triggered_by: Trigger::Schedule,
            params: None,
            output_file: None,
        }
    }

    #[test]
    fn an_instant_runs_once_every_parent_ended_as_asked() {
        use RunStatus::*;
        let after = After {
            parents: vec![
                parent("a", "* * * * * *", 0),
                parent("b", "*/2 * * * * *", 1),
            ],
            on: vec![Succeeded],
        };
        let own = Schedule::after(&["a".into(), "b".into()], chrono_tz::Tz::UTC);
        let t0 = "2027-01-01T00:00:00Z";
        let t1 = "2027-01-01T00:00:01Z";
        let t2 = "2027-01-01T00:00:02Z";
        let t4 = "2027-01-01T00:00:04Z";
        let rows = vec![
            row(1, "a", t0, 1, Succeeded, Some("2027-01-01T00:00:00.3Z")),
            row(2, "b", t0, 1, Succeeded, Some("2027-01-01T00:00:00.5Z")),
            // b has no instant at :01: not a fan-in instant.
            row(3, "a", t1, 1, Succeeded, Some("2027-01-01T00:00:01.2Z")),
            // b failed at :02 and retries once: not yet, then ready.
            row(4, "a", t2, 1, Succeeded, Some("2027-01-01T00:00:02.2Z")),
            row(5, "b", t2, 1, Failed, Some("2027-01-01T00:00:02.4Z")),
            row(7, "a", t4, 1, Succeeded, Some("2027-01-01T00:00:04.2Z")),
        ];
        let decided = decide(&after, &own, &rows, true, at("2027-01-01T00:00:05Z"));
        assert_eq!(
            decided,
            [
                (
                    at(t0),
                    Decision::Ready {
                        due: at("2027-01-01T00:00:00.5Z"),
                        parents: vec![1, 2]
                    }
                ),
                (at(t1), Decision::NoRun),
                (at(t2), Decision::Pending),
                // :04 is b's too, and b has not run it yet.
                (at(t4), Decision::Pending),
            ]
        );
        let mut retried = rows.clone();
        retried.push(row(6, "b", t2, 2, Succeeded, Some("2027-01-01T00:00:03Z")));
        let decided = decide(&after, &own, &retried, true, at("2027-01-01T00:00:05Z"));
        assert_eq!(
            decided[2],
            (
                at(t2),
                Decision::Ready {
                    due: at("2027-01-01T00:00:03Z"),
                    parents: vec![4, 6]
                }
            )
        );
        // Long after, b's missing run of :04 is given up: no run.
        let decided = decide(&after, &own, &retried, true, at("2027-01-01T00:10:00Z"));
        assert_eq!(decided[3], (at(t4), Decision::NoRun));
        // A failure that ends for good: no run on success only, a run with
        // on = ["failed"].
        let one = After {
            parents: vec![parent("a", "* * * * * *", 0)],
            on: vec![Failed],
        };
        let failed = vec![row(9, "a", t0, 1, Failed, Some("2027-01-01T00:00:00.3Z"))];
        assert_eq!(
            decide(&one, &own, &failed, true, at(t1)),
            [(
                at(t0),
                Decision::Ready {
                    due: at("2027-01-01T00:00:00.3Z"),
                    parents: vec![9]
                }
            )]
        );
        let succeeded_only = After {
            on: vec![Succeeded],
            ..one.clone()
        };
        assert_eq!(
            decide(&succeeded_only, &own, &failed, true, at(t1)),
            [(
                at(t0),
                Decision::Upstream {
                    due: at("2027-01-01T00:00:00.3Z"),
                    parents: vec![9],
                    why: "upstream failed: a ended failed".into()
                }
            )]
        );
        // A success is no instant of a job that runs on failures.
        let succeeded = vec![row(
            9,
            "a",
            t0,
            1,
            Succeeded,
            Some("2027-01-01T00:00:00.3Z"),
        )];
        assert_eq!(
            decide(&one, &own, &succeeded, true, at(t1)),
            [(at(t0), Decision::NoRun)]
        );
        // A fan-in one of whose parents failed for good, the other
        // succeeding later: upstream failed, due at the last end.
        let fan_in = vec![
            row(1, "a", t0, 1, Succeeded, Some("2027-01-01T00:00:00.8Z")),
            row(2, "b", t0, 1, TimedOut, Some("2027-01-01T00:00:00.5Z")),
        ];
        let both = After {
            parents: vec![parent("a", "* * * * * *", 0), parent("b", "* * * * * *", 0)],
            on: vec![Succeeded],
        };
        assert_eq!(
            decide(&both, &own, &fan_in, true, at(t1)),
            [(
                at(t0),
                Decision::Upstream {
                    due: at("2027-01-01T00:00:00.8Z"),
                    parents: vec![1, 2],
                    why: "upstream failed: b ended timed_out".into()
                }
            )]
        );
        // A parent with no row of an instant, that ran later ones: the
        // instant is passed over once those started 5 s ago.
        let skipped_one = vec![
            row(1, "a", t0, 1, Succeeded, Some("2027-01-01T00:00:00.3Z")),
            row(2, "a", t2, 1, Succeeded, Some("2027-01-01T00:00:02.3Z")),
            row(3, "b", t2, 1, Succeeded, Some("2027-01-01T00:00:02.4Z")),
        ];
        let decided = decide(&both, &own, &skipped_one, true, at("2027-01-01T00:00:04Z"));
        assert_eq!(decided[0], (at(t0), Decision::Pending));
        let decided = decide(&both, &own, &skipped_one, true, at("2027-01-01T00:00:07Z"));
        assert_eq!(decided[0], (at(t0), Decision::Overtaken));
        assert!(
            matches!(decided[1], (_, Decision::Ready { .. })),
            "{decided:?}"
        );
        // A run still going, and the last instant of a page cut short.
        let going = vec![row(9, "a", t0, 1, Running, None)];
        assert_eq!(
            decide(&one, &own, &going, true, at(t1))[0].1,
            Decision::Pending
        );
        let done = vec![row(9, "a", t0, 1, Failed, Some("2027-01-01T00:00:00.3Z"))];
        assert_eq!(
            decide(&one, &own, &done, false, at(t1))[0].1,
            Decision::Pending
        );
    }
}
