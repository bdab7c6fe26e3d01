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
    /// It does not run: a parent ended otherwise, did not run it, or the
    /// instant is not a parent's, or the job's calendars exclude it.
    NoRun,
    /// A parent's run of it has not ended for good yet.
    Pending,
}

/// How one parent's runs of an instant ended.
enum Ended {
    /// For good, by this run (`None`: it has no run, only a `missed` row).
    As(RunStatus, Option<(i64, DateTime<Utc>)>),
    /// Not yet.
    NotYet,
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
        } else if own.excluded(instant).is_some() {
            Decision::NoRun
        } else {
            let mut due = None;
            let mut parents = Vec::new();
            let mut all = true;
            for end in ends {
                match end {
                    Ended::As(status, run) if after.on.contains(&status) => {
                        if let Some((id, finished)) = run {
                            parents.push(id);
                            due = due.max(Some(finished));
                        }
                    }
                    _ => all = false,
                }
            }
            match (all, due) {
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
            Ended::NotYet
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
            if last.attempt <= parent.retries as i32 =>
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
            let (due, parent_runs) = match decision {
                Decision::Pending => continue 'polling,
                Decision::NoRun => {
                    handled = Some(instant);
                    continue;
                }
                Decision::Ready { due, parents } => (due, parents),
            };
            handled = Some(instant);
            if now - due > patience {
                telemetry::skipped(&job.name, telemetry::Skip::TooLate, 1);
                warn!(
                    job = %job.name,
                    instant = %fmt_instant(instant),
                    "instant skipped: its parents ended more than {}s ago before a replica got to it (the check for missed instants records it)",
                    patience.num_seconds()
                );
                continue;
            }
            let cause = Cause {
                trigger: Trigger::Dependency,
                due: Some(due),
                parent_runs,
            };
            if let Some(run) = current.take_if(|run| run.is_running()) {
                match job.settings.overlap {
                    Overlap::Allow(_) => {
                        others.retain(|task| !task.is_finished());
                        others.push(run.task);
                    }
                    Overlap::Queue | Overlap::Replace => {
                        let mut run = run;
                        let fence = run.fence;
                        let waited = tick::overlapping(
                            &engine,
                            &job,
                            instant,
                            fence,
                            Some(&mut run.task),
                            &mut retired,
                            cause,
                        )
                        .await;
                        match after_waiting(&job, instant, waited) {
                            Waited::Stop => break 'polling,
                            Waited::Run(next) => current = next,
                        }
                        continue;
                    }
                    Overlap::Skip => {
                        overrun(&job, instant);
                        current = Some(run);
                        continue;
                    }
                }
            }
            let attempt =
                tick::attempt(&engine, &job, instant, cause.clone(), Patience::Since(due)).await;
            match attempt {
                Attempt::Won(run) => {
                    info!(job = %job.name, instant = %fmt_instant(instant), "its parents ended: running");
                    current = Some(run);
                }
                Attempt::Overrun { fence, .. }
                    if matches!(job.settings.overlap, Overlap::Queue | Overlap::Replace) =>
                {
                    let waited =
                        tick::overlapping(&engine, &job, instant, fence, None, &mut retired, cause)
                            .await;
                    match after_waiting(&job, instant, waited) {
                        Waited::Stop => break 'polling,
                        Waited::Run(next) => current = next,
                    }
                }
                Attempt::Overrun { .. } => overrun(&job, instant),
                Attempt::Lost | Attempt::Paused { .. } | Attempt::Skipped => {}
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

/// What an instant that waited for the job's run (`queue`, `replace`)
/// leaves the loop with.
enum Waited {
    /// The loop is to stop.
    Stop,
    /// The run it started, if it won.
    Run(Option<Current>),
}

/// What [`tick::overlapping`]'s answer for `instant` makes of it: an
/// overrun where another instant waited already.
fn after_waiting(job: &Job, instant: DateTime<Utc>, waited: Option<Option<Attempt>>) -> Waited {
    match waited {
        Some(Some(Attempt::Won(next))) => Waited::Run(Some(next)),
        Some(Some(_)) => Waited::Run(None),
        Some(None) => Waited::Stop,
        None => {
            overrun(job, instant);
            Waited::Run(None)
        }
    }
}

/// Logs an instant of a dependent job that came while its run was going.
fn overrun(job: &Job, instant: DateTime<Utc>) {
    telemetry::overrun(&job.name);
    warn!(
        job = %job.name,
        instant = %fmt_instant(instant),
        "overrun: the job's previous run was still going when its parents ended; the instant is skipped"
    );
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
            [(at(t0), Decision::NoRun)]
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
