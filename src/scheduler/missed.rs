//! Missed instants, noticed fleet-wide: every replica computes the same
//! instants, so one of them (whichever wins the `replicron.missed` lease
//! each round) can tell which ones nobody ran. An instant older than the
//! job's `missed_after` with no history row, that came while no run of the
//! job was going (an overrun is not a miss) nor while it was paused, is recorded `missed` (attempt
//! 0), counted and notified, once: the history's unique key and the job's
//! `missed_checked_until` mark make a second check a no-op. `catch_up`
//! still decides what runs; this only records and tells.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::engine::Engine;
use super::job::Job;
use crate::db::DbError;
use crate::history::RunStatus;
use crate::lease::Claim;
use crate::notify::{Event, Notice, Told};
use crate::schedule::fmt_instant;

/// The lease row of the check (job names may not use the prefix).
pub(crate) const LEASE: &str = "replicron.missed";
/// The longest one round may take before another replica may start one. A
/// replica killed mid-round holds the check back this long; two rounds at
/// once would only repeat each other's reads (recording is idempotent).
const LEASE_FOR: Duration = Duration::from_secs(10);
/// The most missed instants recorded per job and round (after a long
/// outage); the rest are summed up in one log line.
pub(crate) const MAX_RECORDED: usize = 100;
/// The most instants looked at per job and round.
const MAX_SCANNED: usize = 100_000;

/// Checks now and then until `stop` resolves: every half of the shortest
/// `missed_after`, between 1 s and 30 s. A round under way when `stop`
/// resolves is finished, so its lease is given back rather than left to
/// hold the next replicas' checks off.
pub(crate) async fn check_forever(
    engine: Arc<Engine>,
    jobs: watch::Receiver<Vec<Arc<Job>>>,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let current = jobs.borrow().clone();
        tokio::select! {
            () = tokio::time::sleep(period(&current, engine.clock.now())) => {}
            () = &mut stop => return,
        }
        if !engine.health.is_up() {
            continue;
        }
        if let Err(e) = check_once(&engine, &current).await {
            warn!("the check for missed instants skipped this round: {e}");
        }
    }
}

fn period(jobs: &[Arc<Job>], now: DateTime<Utc>) -> Duration {
    check_period(
        jobs.iter()
            .map(|job| job.settings.missed_after(job.schedule.interval_after(now))),
    )
}

/// How often the check comes round, given the jobs' `missed_after`: every
/// half of the shortest (zero, never recorded, does not count), between
/// 1 s and 30 s.
pub(crate) fn check_period(missed_after: impl Iterator<Item = Duration>) -> Duration {
    missed_after
        .filter(|after| !after.is_zero())
        .min()
        .map_or(Duration::from_secs(30), |after| after / 2)
        .clamp(Duration::from_secs(1), Duration::from_secs(30))
}

/// One round, if this replica wins the check's lease: returns how many
/// instants it recorded missed.
async fn check_once(engine: &Engine, jobs: &[Arc<Job>]) -> Result<usize, DbError> {
    let Claim::Won(held) = engine
        .store
        .claim_now(LEASE, &engine.instance, LEASE_FOR)
        .await?
    else {
        debug!("another replica checks for missed instants this round");
        return Ok(0);
    };
    let mut recorded = 0;
    let mut result = Ok(());
    for job in jobs {
        match check_job(engine, job).await {
            Ok((n, first)) => {
                recorded += n;
                if let Some(first) = first {
                    rewind_dependents(engine, jobs, &job.name, first).await?;
                }
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let _ = engine.store.release(held, Duration::ZERO).await;
    result.map(|()| recorded)
}

/// Takes the marks of `parent`'s dependent jobs back before `first`, the
/// earliest instant just recorded missed for it. A parent's `missed` row
/// is written its own `missed_after` after its instant, which may be long
/// after a dependent's check went past that instant (one `LATE_LIMIT`
/// behind): without this, the dependent's instant would be neither run
/// nor recorded. The next round decides it as any other.
async fn rewind_dependents(
    engine: &Engine,
    jobs: &[Arc<Job>],
    parent: &str,
    first: DateTime<Utc>,
) -> Result<(), DbError> {
    for job in jobs {
        if job
            .after
            .as_ref()
            .is_some_and(|after| after.parents.iter().any(|p| p.name == parent))
        {
            let name = job.name.clone();
            let before = crate::db::clock::to_db_time(first - TimeDelta::milliseconds(1)).0;
            engine
                .store
                .call("taking a dependent job's missed mark back", move |conn| {
                    crate::history::rewind_missed_check_to(conn, &name, before)
                })
                .await?;
        }
    }
    Ok(())
}

/// Checks one job: returns how many instants it recorded missed, and the
/// earliest of them.
async fn check_job(engine: &Engine, job: &Job) -> Result<(usize, Option<DateTime<Utc>>), DbError> {
    // An `every` job's instants are each replica's: the fleet cannot tell
    // which replica should have run one.
    if job.run_on == crate::config::RunOn::Every {
        return Ok((0, None));
    }
    let name = job.name.clone();
    let now = engine.store.database_now().await?;
    let after = job.settings.missed_after(job.schedule.interval_after(now));
    if after.is_zero() {
        return Ok((0, None));
    }
    let Some(row) = engine.store.find_lock(&name).await? else {
        return Ok((0, None));
    };
    // An instant's run may start up to the job's jitter after it.
    let to = now - TimeDelta::from_std(after).unwrap_or(TimeDelta::MAX) - job.schedule.jitter();
    let Some(checked) = row.missed_checked_until.map(|t| t.and_utc()) else {
        // A row from before the check existed: what came before is not
        // this check's (rows are created with the mark at their creation).
        set_checked(engine, &name, row.missed_checked_until, to, Vec::new()).await?;
        return Ok((0, None));
    };
    let from = row
        .created_at
        .map_or(checked, |created| checked.max(created.and_utc()));
    if to <= from {
        return Ok((0, None));
    }
    // Each instant to check, and when its run was due: a scheduled job's
    // at its instant, a dependent job's when its parents' runs ended.
    let (instants, to) = match &job.after {
        Some(after) => dependent_instants(engine, job, after, from, to, now).await?,
        None => {
            let mut instants = Vec::new();
            let mut cursor = from;
            while let Some(next) = job.schedule.next_after(cursor) {
                if next > to || instants.len() >= MAX_SCANNED {
                    break;
                }
                instants.push((next, next));
                cursor = next;
            }
            (instants, to)
        }
    };
    let (Some(first), Some(last)) = (instants.first().map(|i| i.0), instants.last().map(|i| i.0))
    else {
        set_checked(engine, &name, row.missed_checked_until, to, Vec::new()).await?;
        return Ok((0, None));
    };
    let (ran, going, pauses) = {
        let name = name.clone();
        engine
            .store
            .call("reading the runs of the checked instants", move |conn| {
                let (ran, going) = crate::history::accounted_between(conn, &name, first, last)?;
                let pauses = crate::lease::pauses_between(conn, &name, first, last)?;
                Ok((ran, going, pauses))
            })
            .await?
    };
    let ran: HashSet<DateTime<Utc>> = ran.into_iter().collect();
    // A run keeps its lease from its first attempt's start to its last
    // attempt's end (retries included), and lock_at_least_for after it. A
    // run whose end is not known kept it at most until its lease ran out,
    // unless it holds the lease now.
    let lease_for = TimeDelta::from_std(job.settings.lock_at_most_for).unwrap_or(TimeDelta::MAX);
    let holds_now =
        |run: &crate::history::Going| run.fence == row.fence && row.lock_until.and_utc() > now;
    // The runs whose end was not known: one may end before the mark moves.
    let unended: Vec<i64> = going
        .iter()
        .filter(|run| run.finished_at.is_none())
        .map(|run| run.id)
        .collect();
    // An instant that waited for the run before it (`queue`, `replace`)
    // held the job from its instant on: the instants that came meanwhile,
    // up to its run's start, found it waiting (or the lease not yet given
    // back) and are its overruns, as `verify` judges them.
    let waited = super::tick::waits_for_the_run(job) && job.after.is_none();
    // A run's attempts under one lease (one fence) are one chain: an
    // attempt whose end is not known held the lease at most until the
    // chain's last confirmation (or its first start) and the lease's
    // length, as `verify` judges it. A retry's start is no confirmation.
    let mut chains: BTreeMap<(DateTime<Utc>, i64), Chain> = BTreeMap::new();
    for run in &going {
        let chain = chains
            .entry((run.instant, run.fence))
            .or_insert((run.started_at, run.confirmed_at));
        chain.0 = chain.0.min(run.started_at);
        chain.1 = chain.1.max(run.confirmed_at);
    }
    // One span per chain: a rerun of an abandoned instant (a later fence)
    // is a run of its own, and the gap between the two held nothing.
    let mut spans: BTreeMap<(DateTime<Utc>, i64), Span> = BTreeMap::new();
    for run in going {
        let (first, confirmed) = chains[&(run.instant, run.fence)];
        let chain = crate::history::Going {
            started_at: first,
            confirmed_at: confirmed,
            ..run.clone()
        };
        let end = chain.held_until(lease_for, holds_now(&run));
        let start = if waited {
            run.started_at.min(run.instant)
        } else {
            run.started_at
        };
        let span = spans
            .entry((run.instant, run.fence))
            .or_insert((start, end));
        span.0 = span.0.min(start);
        span.1 = match (span.1, end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
    let at_least = TimeDelta::from_std(job.settings.lock_at_least_for).unwrap_or_default();
    let overrun = |t: DateTime<Utc>| {
        spans
            .values()
            .any(|(start, end)| *start <= t && end.is_none_or(|end| t <= end + at_least))
    };
    // The instants of the job's pauses were not to run: every pause, not
    // only the last (a pause replaced by another keeps its instants).
    let paused = |t: DateTime<Utc>| {
        pauses
            .iter()
            .any(|(at, until)| crate::lease::pause_covers(Some(*at), Some(*until), t.naive_utc()))
    };
    let missed: Vec<DateTime<Utc>> = instants
        .into_iter()
        .filter(|(t, due)| !ran.contains(t) && !overrun(*due) && !paused(*t))
        .map(|(t, _)| t)
        .collect();
    let mut recorded = 0;
    let skip = missed.len().saturating_sub(MAX_RECORDED);
    for instant in missed.iter().skip(skip).copied() {
        let (name, me) = (name.clone(), engine.instance.clone());
        let id = engine
            .store
            .call("recording a missed instant", move |conn| {
                crate::history::record_missed(conn, &name, instant, &me)
            })
            .await?;
        if let Some(id) = id {
            recorded += 1;
            tell_missed(engine, &job.name, instant, id);
        }
    }
    if recorded > 0 {
        crate::telemetry::missed(&name, recorded);
        let (first, last) = (missed[skip], missed[missed.len() - 1]);
        if skip > 0 {
            warn!(
                job = %name,
                missed = missed.len(),
                recorded,
                first = %fmt_instant(missed[0]),
                last = %fmt_instant(last),
                "instants missed: no replica claimed them; the latest {MAX_RECORDED} are recorded missed"
            );
        } else {
            warn!(
                job = %name,
                missed = recorded,
                first = %fmt_instant(first),
                last = %fmt_instant(last),
                "instants missed: no replica claimed them in time; recorded missed"
            );
        }
    }
    set_checked(engine, &name, row.missed_checked_until, to, unended).await?;
    Ok((recorded, (recorded > 0).then(|| missed[skip])))
}

/// A dependent job's instants after `from` whose parents' runs ended as it
/// asks by `to` (each with that end), and how far the check may mark them
/// done: not past an instant whose parents have not all ended, nor past
/// one whose run is not yet `missed_after` late.
async fn dependent_instants(
    engine: &Engine,
    job: &Job,
    after: &crate::config::After,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(Vec<(DateTime<Utc>, DateTime<Utc>)>, DateTime<Utc>), DbError> {
    const PAGE: i64 = 10_000;
    let rows = engine.store.runs_after(after.names(), from, PAGE).await?;
    let complete = (rows.len() as i64) < PAGE;
    let mut instants = Vec::new();
    let mut mark = to;
    // The first instant passed over while its parent's row is awaited.
    let mut awaited: Option<DateTime<Utc>> = None;
    for (instant, decision) in super::after::decide(after, &job.schedule, &rows, complete, now) {
        if instant > to {
            break;
        }
        use super::after::Decision;
        match decision {
            Decision::NoRun => {}
            // An instant its parents' ends left not to run is recorded
            // `skipped` by the replica that claims it; one that no replica
            // got to is missed as a ready one is.
            Decision::Ready { due, .. } | Decision::Upstream { due, .. } if due <= to => {
                instants.push((instant, due))
            }
            // A parent has no row of it but has runs of later instants (its
            // instant was an overrun, or its row is late): the job's loop
            // passed over it and decides the later ones, so they are checked
            // as any other, while the mark stays before it until its row
            // comes or the wait for it ends (`PARENT_PATIENCE`). An instant
            // checked again is not recorded twice.
            Decision::Overtaken => {
                awaited.get_or_insert(instant - TimeDelta::milliseconds(1));
            }
            Decision::Ready { .. } | Decision::Upstream { .. } | Decision::Pending => {
                mark = instant - TimeDelta::milliseconds(1);
                break;
            }
        }
    }
    let mark = awaited.map_or(mark, |awaited| awaited.min(mark));
    // A parent's run may be recorded up to LATE_LIMIT after its instant (a
    // replica that claimed it late, a node that stalled its write), after
    // the runs of its later instants: the mark stays behind what may still
    // appear, so that such an instant is checked once it does.
    let mark = mark.min(now - crate::schedule::LATE_LIMIT).max(from);
    Ok((instants, mark))
}

/// When a run held its job: from its first start to its last end (none:
/// still going).
type Span = (DateTime<Utc>, Option<DateTime<Utc>>);

/// A run's attempts under one fence: the first one's start, and the last
/// confirmation of its lease, if any was recorded.
type Chain = (DateTime<Utc>, Option<DateTime<Utc>>);

async fn set_checked(
    engine: &Engine,
    job: &str,
    read: Option<chrono::NaiveDateTime>,
    until: DateTime<Utc>,
    unended: Vec<i64>,
) -> Result<(), DbError> {
    let job = job.to_string();
    engine
        .store
        .call(
            "recording how far missed instants were checked",
            move |conn| commit_checked(conn, &job, read, until, &unended),
        )
        .await
        .map(drop)
}

/// Moves `job`'s mark to `until` (unless a run's end took it back since the
/// round `read` it), then takes it back to the earliest end now recorded
/// among `unended`, the runs the round counted as going without knowing
/// their ends. A run that ended between the round's read and this move
/// found the mark still before its end, so its own rewind changed nothing:
/// without this, its overruns would stay overruns, neither run nor
/// recorded missed. An end recorded after this read rewinds by itself.
pub(crate) fn commit_checked(
    conn: &mut crate::db::DbConnection,
    job: &str,
    read: Option<chrono::NaiveDateTime>,
    until: DateTime<Utc>,
    unended: &[i64],
) -> diesel::QueryResult<()> {
    crate::lease::set_missed_checked(conn, job, read, until)?;
    crate::history::rewind_missed_check_to_ended(conn, job, unended)?;
    Ok(())
}

/// Notifies `instant` of `job`, just recorded `missed` as row `id`.
pub(super) fn tell_missed(engine: &Engine, job: &str, instant: DateTime<Utc>, id: i64) {
    engine.notifier.event(Notice::new(
        Event::Missed,
        Told::unrun(job, instant, RunStatus::Missed, &engine.instance, id),
    ));
}
