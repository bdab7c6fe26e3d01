//! `replicron verify`'s judgement of the history: for every instant a job
//! was due in a range, whether it ran exactly once (one chain of attempts,
//! under one lease), or is accounted for otherwise (recorded `missed` or
//! `skipped`, paused, an overrun of a run that held the job's lease, before
//! the job reached the fleet, or too recent to judge); and across the
//! job's runs, whether any started before its instant, overlapped another,
//! or is left `running` with no live lease. A backfill's run of an instant
//! that ran before is a deliberate rerun: counted as such, never a
//! duplicate; so is the rerun of an abandoned run (`on_abandon =
//! "rerun"`): the instant's next attempt, a retry, under a later lease. It
//! reads only.
//!
//! The instants due come from the job file given: a schedule that changed
//! within the range is judged by the file as it is now (see
//! `docs/design.md#verifying-the-history`). A dependent job's instants are
//! its parents': the parents' endings in the history say which were due,
//! as the job's own loop decides them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use diesel::prelude::*;
use serde::Serialize;

use crate::db::DbConnection;
use crate::db::clock::to_db_time;
use crate::db::schema::replicron_runs::dsl as runs;
use crate::history::RunStatus;
use crate::schedule::{Schedule, fmt_instant};

/// What a job promises, as the job file says.
#[derive(Clone, Debug)]
pub(crate) struct Promise {
    /// The job.
    pub(crate) name: String,
    /// When it is due.
    pub(crate) schedule: Schedule,
    /// Its lease's length.
    pub(crate) lock_at_most_for: Duration,
    /// How long its lease is kept after a run.
    pub(crate) lock_at_least_for: Duration,
    /// After how long an instant nobody ran is recorded missed (zero:
    /// never).
    pub(crate) missed_after: Duration,
    /// How often the check for missed instants comes round: an instant is
    /// judged once it may have been recorded.
    pub(crate) check_every: Duration,
    /// How many of its runs may go at once: 1, or `overlap = "allow"`'s
    /// `max_concurrent` (whose runs hold leases of their instants', not
    /// the job's).
    pub(crate) concurrent: u32,
    /// Whether an instant that comes while a run goes waits for it
    /// (`overlap = "queue"` or `"replace"`).
    pub(crate) waits: bool,
    /// A dependent job's parents, and the endings it runs on.
    pub(crate) after: Option<crate::config::After>,
}

/// A run's row, as verify reads it.
#[derive(Clone, Debug, Queryable, Selectable)]
#[diesel(table_name = crate::db::schema::replicron_runs)]
pub(crate) struct Row {
    id: i64,
    scheduled_at: NaiveDateTime,
    attempt: i32,
    instance: String,
    fence: i64,
    started_at: NaiveDateTime,
    finished_at: Option<NaiveDateTime>,
    status: RunStatus,
    /// A process's exit code: a `skipped` row with one ran, and its code
    /// said it had nothing to do (`skip_exit_codes`).
    exit_code: Option<i32>,
    confirmed_at: Option<NaiveDateTime>,
    triggered_by: crate::history::Trigger,
    /// Whether it records an attempt that started nothing: its lease could
    /// not be confirmed after its start record (`lost_lock`, "not
    /// started"), as a claim found committed too late may be.
    #[diesel(select_expression = runs::output.like(NOT_STARTED))]
    #[diesel(select_expression_type = diesel::dsl::Like<runs::output, &'static str>)]
    never_started: bool,
}

/// The output of an attempt recorded without starting anything, as a
/// `LIKE` pattern.
const NOT_STARTED: &str = "replicron: not started:%";

/// Everything verify knows of one job.
#[derive(Clone, Debug)]
pub(crate) struct Evidence {
    /// The database's clock.
    pub(crate) now: DateTime<Utc>,
    /// When its lease row was created (`None`: no row, or older than the
    /// column).
    pub(crate) created_at: Option<DateTime<Utc>>,
    /// The fence and end of its lease now, if it has a row.
    pub(crate) lease: Option<(i64, DateTime<Utc>)>,
    /// The fence and end now of the leases of the instants of its runs
    /// recorded `running` that were claimed on rows of their own
    /// (`overlap = "allow"`): such a run holds its instant's row, not the
    /// job's.
    pub(crate) instant_leases: BTreeMap<NaiveDateTime, (i64, DateTime<Utc>)>,
    /// Its pauses that cover some of the range.
    pub(crate) pauses: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    /// Its runs that concern the range.
    pub(crate) runs: Vec<Row>,
    /// A dependent job's parents' runs of the range's instants.
    pub(crate) parents: Vec<crate::history::RunBrief>,
}

/// Reads what verify needs of `job` for `[from, to]`: its runs for those
/// instants, the runs that may have held its lease then, and its
/// `parents`' runs of those instants.
pub(crate) fn gather(
    conn: &mut DbConnection,
    job: &str,
    parents: &[String],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> QueryResult<Evidence> {
    let now = crate::db::clock::database_now(conn)?;
    let row = crate::lease::find_lock(conn, job)?;
    let pauses = crate::lease::pauses_between(conn, job, from, to)?
        .into_iter()
        .map(|(at, until)| (at.and_utc(), until.and_utc()))
        .collect();
    let runs: Vec<Row> = runs::replicron_runs
        .select(Row::as_select())
        .filter(runs::job.eq(job))
        .filter(runs::scope.eq(""))
        .filter(runs::scheduled_at.le(to_db_time(to)))
        .filter(
            runs::scheduled_at
                .ge(to_db_time(from))
                .or(runs::finished_at.ge(to_db_time(from).nullable()))
                .or(runs::finished_at.is_null()),
        )
        .order((runs::scheduled_at, runs::attempt))
        .load(conn)?;
    let instant_leases = instant_leases(conn, job, &runs)?;
    let parents = if parents.is_empty() {
        Vec::new()
    } else {
        crate::history::runs_between(conn, parents, from, to)?
    };
    Ok(Evidence {
        now,
        created_at: row.as_ref().and_then(|r| r.created_at).map(|t| t.and_utc()),
        lease: row.map(|r| (r.fence, r.lock_until.and_utc())),
        instant_leases,
        pauses,
        runs,
        parents,
    })
}

/// The leases of the instants' own rows (`crate::lease::instant_row`) of
/// `job`'s runs still recorded `running`, by instant: an `overlap =
/// "allow"` job's runs hold those, not the job's row.
fn instant_leases(
    conn: &mut DbConnection,
    job: &str,
    runs: &[Row],
) -> QueryResult<BTreeMap<NaiveDateTime, (i64, DateTime<Utc>)>> {
    use crate::db::schema::replicron_locks::dsl as locks;
    let instants: BTreeMap<String, NaiveDateTime> = runs
        .iter()
        .filter(|run| run.status == RunStatus::Running)
        .map(|run| {
            (
                crate::lease::instant_row(job, run.scheduled_at.and_utc()),
                run.scheduled_at,
            )
        })
        .collect();
    if instants.is_empty() {
        return Ok(BTreeMap::new());
    }
    let rows: Vec<(String, i64, NaiveDateTime)> = locks::replicron_locks
        .select((locks::name, locks::fence, locks::lock_until))
        .filter(locks::name.eq_any(instants.keys()))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, fence, until)| Some((*instants.get(&name)?, (fence, until.and_utc()))))
        .collect())
}

/// What kind of thing is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Finding {
    /// An instant neither run nor accounted for: the worst.
    Unaccounted,
    /// An instant run under two leases, or an attempt recorded twice.
    Duplicate,
    /// A run that started before its instant, by the database's clock.
    Early,
    /// Two runs of one job at once.
    Overlap,
    /// A run still `running` whose lease is no longer held.
    LeftRunning,
}

impl Finding {
    /// Its name in the report.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Finding::Unaccounted => "unaccounted",
            Finding::Duplicate => "duplicate",
            Finding::Early => "early",
            Finding::Overlap => "overlap",
            Finding::LeftRunning => "left_running",
        }
    }
}

/// One thing wrong, with what shows it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Violation {
    /// What kind.
    pub(crate) kind: Finding,
    /// The job.
    pub(crate) job: String,
    /// The instant concerned, RFC 3339.
    pub(crate) instant: Option<String>,
    /// The history rows concerned.
    pub(crate) runs: Vec<i64>,
    /// The replicas that recorded them.
    pub(crate) replicas: Vec<String>,
    /// What is wrong, in a sentence.
    pub(crate) message: String,
}

/// How one job's instants in the range are accounted for.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Tally {
    /// The job.
    pub(crate) job: String,
    /// Instants due in the range.
    pub(crate) due: usize,
    /// Run (one chain of attempts).
    pub(crate) ran: usize,
    /// Of those, run again by a backfill after earlier runs ended (a
    /// rerun of a run that did not succeed, or one asked for), or after
    /// an abandoned run (`on_abandon = "rerun"`).
    pub(crate) rerun: usize,
    /// Recorded `missed`, and not run.
    pub(crate) missed: usize,
    /// Recorded `skipped` (with the reason in its output).
    pub(crate) skipped: usize,
    /// In a pause.
    pub(crate) paused: usize,
    /// While a run of the job held its lease.
    pub(crate) overrun: usize,
    /// Before the job's lease row was created: the job was not yet in the
    /// fleet.
    pub(crate) before_job: usize,
    /// Too recent to judge: the check for missed instants has not got to
    /// them yet.
    pub(crate) pending: usize,
    /// Neither run nor accounted for.
    pub(crate) unaccounted: usize,
}

/// One chain of attempts: the rows of one instant under one lease.
struct Chain<'r> {
    rows: Vec<&'r Row>,
    start: DateTime<Utc>,
    /// Its end if it is known: every attempt ended.
    end: Option<DateTime<Utc>>,
}

impl Chain<'_> {
    /// Whether anything ran: a chain of `skipped` rows, or of attempts
    /// that started nothing, only records an instant that was not run (its
    /// claim's answer came too late, or a shared lock stayed held), when it
    /// was found so, not a run. A row skipped by its exit code ran.
    fn ran(&self) -> bool {
        !self
            .rows
            .iter()
            .all(|r| (r.status == RunStatus::Skipped && r.exit_code.is_none()) || r.never_started)
    }

    /// Whether a backfill started it.
    fn backfilled(&self) -> bool {
        self.rows
            .iter()
            .min_by_key(|r| r.attempt)
            .is_some_and(|r| r.triggered_by == crate::history::Trigger::Backfill)
    }

    /// Whether it is the rerun of `before`, an abandoned run (`on_abandon
    /// = "rerun"`): this chain begins with the attempt after `before`'s
    /// last, a retry, under a later lease, which only a rerun records (a
    /// run's own retries keep its lease; a backfill's say so). `before`'s
    /// last attempt is no longer `running`: it was marked `abandoned`,
    /// and may have been given its end since by a holder that was cut
    /// off, not dead (`lost_lock`, or whatever ending it had recorded
    /// before it lost the lease and could not write).
    fn reruns_abandoned(&self, before: &Chain) -> bool {
        let last = before.rows.iter().max_by_key(|r| r.attempt);
        let first = self.rows.iter().min_by_key(|r| r.attempt);
        match (last, first) {
            (Some(last), Some(first)) => {
                last.status != RunStatus::Running
                    && first.attempt == last.attempt + 1
                    && first.fence > last.fence
                    && first.triggered_by == crate::history::Trigger::Retry
            }
            _ => false,
        }
    }
}

/// The chains of one instant that ran, split into those that count as
/// runs of it (more than one is a duplicate) and the number of reruns: a
/// chain a backfill started after the instant's first is one, and so is
/// the rerun of the abandoned chain before it. (Each holds the job's
/// lease, so none overlaps another: the check for overlaps judges that.)
fn reruns<'c, 'r>(ran: &[&'c Chain<'r>]) -> (Vec<&'c Chain<'r>>, usize) {
    let mut ran = ran.to_vec();
    ran.sort_by_key(|c| c.start);
    let mut counted = Vec::new();
    let mut reruns = 0;
    for (n, chain) in ran.iter().enumerate() {
        if n > 0 && (chain.backfilled() || chain.reruns_abandoned(ran[n - 1])) {
            reruns += 1;
        } else {
            counted.push(*chain);
        }
    }
    (counted, reruns)
}

/// Judges `promise`'s instants in `[from, to]` and its runs, by `evidence`.
pub(crate) fn judge(
    promise: &Promise,
    evidence: &Evidence,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> (Tally, Vec<Violation>) {
    let mut tally = Tally {
        job: promise.name.clone(),
        ..Tally::default()
    };
    let mut found = Vec::new();
    let lease = TimeDelta::from_std(promise.lock_at_most_for).unwrap_or(TimeDelta::MAX);
    let at_least = TimeDelta::from_std(promise.lock_at_least_for).unwrap_or_default();
    let violation =
        |kind, instant: Option<NaiveDateTime>, rows: &[&Row], message: String| Violation {
            kind,
            job: promise.name.clone(),
            instant: instant.map(|t| fmt_instant(t.and_utc())),
            runs: rows.iter().map(|r| r.id).collect(),
            replicas: rows
                .iter()
                .map(|r| r.instance.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            message,
        };
    // The chains of attempts, by instant and lease.
    let mut chains: BTreeMap<(NaiveDateTime, i64), Vec<&Row>> = BTreeMap::new();
    let mut missed: BTreeSet<NaiveDateTime> = BTreeSet::new();
    for row in &evidence.runs {
        if row.attempt == 0 {
            missed.insert(row.scheduled_at);
        } else {
            chains
                .entry((row.scheduled_at, row.fence))
                .or_default()
                .push(row);
        }
    }
    let chains: Vec<((NaiveDateTime, i64), Chain)> = chains
        .into_iter()
        .map(|(key, rows)| {
            let start = rows
                .iter()
                .map(|r| r.started_at)
                .min()
                .unwrap_or(key.0)
                .and_utc();
            let end = rows
                .iter()
                .map(|r| r.finished_at)
                .collect::<Option<Vec<_>>>()
                .and_then(|ends| ends.into_iter().max())
                .map(|t| t.and_utc());
            (key, Chain { rows, start, end })
        })
        .collect();
    // Until when each chain may have held the lease: its end, or, not
    // known, until the lease could have run out after its last
    // confirmation (or now, while it holds the lease still).
    // A run claimed on its instant's own row (`overlap = "allow"`) holds
    // that row's lease; any other, the job's.
    let holds_now = |instant: NaiveDateTime, fence: i64| {
        evidence
            .instant_leases
            .get(&instant)
            .or(evidence.lease.as_ref())
            .is_some_and(|(current, until)| *current == fence && *until > evidence.now)
    };
    let held: Vec<(DateTime<Utc>, DateTime<Utc>)> = chains
        .iter()
        .map(|((instant, fence), chain)| {
            let until = match chain.end {
                Some(end) => end + at_least,
                None if holds_now(*instant, *fence) => DateTime::<Utc>::MAX_UTC,
                None => {
                    let confirmed = chain
                        .rows
                        .iter()
                        .filter_map(|r| r.confirmed_at)
                        .max()
                        .map(|c| c.and_utc())
                        .unwrap_or(chain.start)
                        .max(chain.start);
                    confirmed + lease
                }
            };
            // An instant that waited for the run before it (`queue`,
            // `replace`) held the job from its instant on: the instants
            // that came meanwhile, up to its run's start, found it waiting
            // (or the lease not yet given back) and are its overruns.
            let start = if promise.waits && promise.after.is_none() {
                chain.start.min(instant.and_utc())
            } else {
                chain.start
            };
            (start, until)
        })
        .collect();
    let by_instant: BTreeMap<NaiveDateTime, Vec<&Chain>> =
        chains
            .iter()
            .fold(BTreeMap::new(), |mut map, ((at, _), chain)| {
                map.entry(*at).or_insert_with(Vec::new).push(chain);
                map
            });

    // The runs themselves: early starts, rows left running, overlaps.
    for ((instant, fence), chain) in &chains {
        for row in &chain.rows {
            if row.started_at < row.scheduled_at {
                found.push(violation(
                    Finding::Early,
                    Some(row.scheduled_at),
                    &[row],
                    format!(
                        "run {} started at {}, {} ms before its instant",
                        row.id,
                        fmt_instant(row.started_at.and_utc()),
                        (row.scheduled_at - row.started_at).num_milliseconds()
                    ),
                ));
            }
            if row.status == RunStatus::Running && !holds_now(*instant, *fence) {
                found.push(violation(
                    Finding::LeftRunning,
                    Some(row.scheduled_at),
                    &[row],
                    format!(
                        "run {} (attempt {}) is recorded running, but its lease (fence {fence}) is no longer held",
                        row.id, row.attempt
                    ),
                ));
            }
        }
    }
    let mut known: Vec<&Chain> = chains
        .iter()
        .map(|(_, c)| c)
        .filter(|c| c.end.is_some() && c.ran())
        .collect();
    known.sort_by_key(|c| c.start);
    if promise.concurrent > 1 {
        // Runs that may overlap: never more than `concurrent` at once.
        let mut going: Vec<(DateTime<Utc>, &Chain)> = Vec::new();
        for chain in &known {
            going.retain(|(end, _)| *end > chain.start);
            going.push((chain.end.unwrap_or(chain.start), chain));
            if going.len() > promise.concurrent as usize {
                let rows: Vec<&Row> = going
                    .iter()
                    .flat_map(|(_, c)| c.rows.iter().copied())
                    .collect();
                found.push(violation(
                    Finding::Overlap,
                    Some(chain.rows[0].scheduled_at),
                    &rows,
                    format!(
                        "the run of {} started at {} while {} others went on (max_concurrent {})",
                        fmt_instant(chain.rows[0].scheduled_at.and_utc()),
                        fmt_instant(chain.start),
                        going.len() - 1,
                        promise.concurrent
                    ),
                ));
            }
        }
    }
    let known = if promise.concurrent > 1 {
        Vec::new()
    } else {
        known
    };
    let mut latest: Option<&Chain> = None;
    for chain in known {
        if let Some(before) = latest
            && let Some(before_end) = before.end
            && chain.start < before_end
        {
            let rows: Vec<&Row> = before.rows.iter().chain(&chain.rows).copied().collect();
            found.push(violation(
                Finding::Overlap,
                Some(chain.rows[0].scheduled_at),
                &rows,
                format!(
                    "the run of {} started at {} while the run of {} went on until {}",
                    fmt_instant(chain.rows[0].scheduled_at.and_utc()),
                    fmt_instant(chain.start),
                    fmt_instant(before.rows[0].scheduled_at.and_utc()),
                    fmt_instant(before_end),
                ),
            ));
        }
        if latest.is_none_or(|l| chain.end > l.end) {
            latest = Some(chain);
        }
    }

    // The instants due.
    let settled = evidence.now
        - TimeDelta::from_std(promise.missed_after).unwrap_or(TimeDelta::MAX / 2)
        - promise.schedule.jitter()
        - TimeDelta::from_std(promise.check_every).unwrap_or_default();
    let to = to.min(evidence.now);
    let mut spans = held.clone();
    spans.sort();
    // A dependent job's instants are its parents' (`after`): those at
    // which its parents' runs ended for good (as it asks, or failing), as
    // its loop decides them, each with when its run was due (the parents'
    // last end); those still undecided, and those it ran or was recorded
    // at, each at most once.
    let decided: BTreeMap<DateTime<Utc>, Option<DateTime<Utc>>> = match &promise.after {
        Some(after) if promise.schedule.is_after() => crate::scheduler::after::decide(
            after,
            &promise.schedule,
            &evidence.parents,
            true,
            evidence.now,
        )
        .into_iter()
        .filter_map(|(at, decision)| {
            use crate::scheduler::after::Decision;
            match decision {
                Decision::Ready { due, .. } | Decision::Upstream { due, .. } => {
                    Some((at, Some(due)))
                }
                Decision::Pending | Decision::Overtaken => Some((at, None)),
                Decision::NoRun => None,
            }
        })
        .collect(),
        _ => BTreeMap::new(),
    };
    let dependent: Vec<DateTime<Utc>> = if promise.schedule.is_after() {
        by_instant
            .keys()
            .chain(missed.iter())
            .map(|at| at.and_utc())
            .chain(decided.keys().copied())
            .filter(|at| *at >= from && *at <= to)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    } else {
        Vec::new()
    };
    let mut dependent = dependent.into_iter();
    let mut cursor = from - TimeDelta::milliseconds(1);
    loop {
        let next = if promise.schedule.is_after() {
            dependent.next()
        } else {
            promise.schedule.next_after(cursor)
        };
        let Some(instant) = next else {
            break;
        };
        if instant > to {
            break;
        }
        cursor = instant;
        tally.due += 1;
        let at = to_db_time(instant).0;
        let chains_here = by_instant.get(&at).map_or(&[][..], Vec::as_slice);
        let ran_here: Vec<&Chain> = chains_here.iter().copied().filter(|c| c.ran()).collect();
        let (ran_here, reran) = reruns(&ran_here);
        if reran > 0 {
            tally.rerun += 1;
        }
        if ran_here.len() > 1 {
            let rows: Vec<&Row> = ran_here.iter().flat_map(|c| c.rows.clone()).collect();
            found.push(violation(
                Finding::Duplicate,
                Some(at),
                &rows,
                format!(
                    "ran {} times, under fences {:?}",
                    ran_here.len(),
                    rows.iter().map(|r| r.fence).collect::<BTreeSet<_>>()
                ),
            ));
        }
        if !chains_here.is_empty() {
            if ran_here.is_empty() && reran == 0 {
                tally.skipped += 1;
            } else {
                tally.ran += 1;
            }
            continue;
        }
        // When its run was due: a dependent job's when its parents ended
        // (`None`: they have not all ended yet).
        let due = match decided.get(&instant) {
            Some(due) => *due,
            None => Some(promise.schedule.start_of(instant)),
        };
        if missed.contains(&at) {
            tally.missed += 1;
        } else if evidence
            .pauses
            .iter()
            .any(|(since, until)| *since <= instant && instant < *until)
        {
            tally.paused += 1;
        } else if let Some(due) = due
            && spans
                .iter()
                .take_while(|(start, _)| *start <= due)
                .any(|(_, until)| *until >= due)
        {
            tally.overrun += 1;
        } else if evidence.created_at.is_some_and(|created| instant < created) {
            tally.before_job += 1;
        } else if due.is_none_or(|due| due > settled) {
            tally.pending += 1;
        } else {
            tally.unaccounted += 1;
            found.push(violation(
                Finding::Unaccounted,
                Some(at),
                &[],
                if decided.contains_key(&instant) {
                    "its parents ended, but it was neither run nor recorded missed or skipped; not paused, and no run held the job's lease then".to_string()
                } else {
                    "neither run nor recorded missed or skipped; not paused, and no run held the job's lease then".to_string()
                },
            ));
        }
    }
    (tally, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("time")
            .with_timezone(&Utc)
    }

    fn promise() -> Promise {
        Promise {
            name: "job".into(),
            schedule: Schedule::parse("* * * * *", chrono_tz::Tz::UTC).expect("schedule"),
            lock_at_most_for: Duration::from_secs(120),
            lock_at_least_for: Duration::ZERO,
            missed_after: Duration::from_secs(60),
            check_every: Duration::from_secs(30),
            concurrent: 1,
            waits: false,
            after: None,
        }
    }

    fn row(id: i64, minute: u32, attempt: i32, fence: i64, status: RunStatus) -> Row {
        let at = utc("2027-01-01T00:00:00Z").naive_utc() + TimeDelta::minutes(i64::from(minute));
        Row {
            id,
            scheduled_at: at,
            attempt,
            instance: format!("r{fence}"),
            fence,
            started_at: at + TimeDelta::milliseconds(5),
            finished_at: (status != RunStatus::Running && status != RunStatus::Abandoned)
                .then(|| at + TimeDelta::seconds(10)),
            status,
            exit_code: None,
            confirmed_at: None,
            triggered_by: crate::history::Trigger::Schedule,
            never_started: false,
        }
    }

    fn evidence(runs: Vec<Row>) -> Evidence {
        Evidence {
            now: utc("2027-01-01T01:00:00Z"),
            created_at: Some(utc("2026-12-31T00:00:00Z")),
            lease: Some((1000, utc("2027-01-01T00:59:00Z"))),
            instant_leases: BTreeMap::new(),
            pauses: Vec::new(),
            runs,
            parents: Vec::new(),
        }
    }

    fn judged(
        runs: Vec<Row>,
        pauses: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    ) -> (Tally, Vec<Finding>) {
        let mut evidence = evidence(runs);
        evidence.pauses = pauses;
        let (tally, found) = judge(
            &promise(),
            &evidence,
            utc("2027-01-01T00:00:00Z"),
            utc("2027-01-01T00:09:00Z"),
        );
        (tally, found.into_iter().map(|v| v.kind).collect())
    }

    /// A `skipped` row records an instant not run, when it was found so:
    /// it is no run, so it overlaps nothing and doubles nothing, even when
    /// it lands inside another run of the job (a replica that learnt late
    /// that its claim had committed, after the next holder had started).
    #[test]
    fn a_skipped_record_is_no_run() {
        let mut runs: Vec<Row> = (0..10)
            .map(|m| {
                row(
                    i64::from(m) + 1,
                    m,
                    1,
                    i64::from(m) + 1,
                    RunStatus::Succeeded,
                )
            })
            .collect();
        // 00:03's run went on for 90 s, and 00:04's claim, found committed
        // too late, was recorded skipped at 00:04:10, inside it.
        runs[3].finished_at = Some(runs[3].started_at + TimeDelta::seconds(90));
        runs.retain(|r| r.id != 5);
        let mut skipped = row(11, 4, 1, 11, RunStatus::Skipped);
        skipped.started_at += TimeDelta::seconds(10);
        skipped.finished_at = Some(skipped.started_at);
        runs.push(skipped);
        // 00:06 ran, and a claim of it found committed too late was
        // recorded skipped under another fence.
        let mut late = row(12, 6, 1, 12, RunStatus::Skipped);
        late.started_at += TimeDelta::seconds(40);
        late.finished_at = Some(late.started_at);
        runs.push(late);
        let (tally, found) = judged(runs, Vec::new());
        assert!(found.is_empty(), "{found:?}");
        assert_eq!((tally.due, tally.ran, tally.skipped), (10, 9, 1));
    }

    /// An attempt recorded `lost_lock` without starting anything (its
    /// claim was found committed after the next holder had started, and
    /// its lease could not be confirmed) is no run either: it overlaps
    /// nothing.
    #[test]
    fn an_attempt_that_started_nothing_is_no_run() {
        let mut runs: Vec<Row> = (0..10)
            .map(|m| {
                row(
                    i64::from(m) + 1,
                    m,
                    1,
                    i64::from(m) + 1,
                    RunStatus::Succeeded,
                )
            })
            .collect();
        // 00:03's run went on for 90 s; 00:04's claim, taken up at
        // 00:04:10, found its lease gone and started nothing.
        runs[3].finished_at = Some(runs[3].started_at + TimeDelta::seconds(90));
        runs.retain(|r| r.id != 5);
        let mut late = row(11, 4, 1, 11, RunStatus::LostLock);
        late.started_at += TimeDelta::seconds(10);
        late.finished_at = Some(late.started_at + TimeDelta::milliseconds(30));
        late.never_started = true;
        runs.push(late.clone());
        let (tally, found) = judged(runs.clone(), Vec::new());
        assert!(found.is_empty(), "{found:?}");
        assert_eq!((tally.due, tally.ran, tally.skipped), (10, 9, 1));
        // The same row with a run behind it is an overlap.
        let last = runs.len() - 1;
        runs[last].never_started = false;
        let (_, found) = judged(runs, Vec::new());
        assert_eq!(found, vec![Finding::Overlap], "{found:?}");
    }

    /// Ten clean minutes: each ran once.
    #[test]
    fn a_clean_history_is_clean() {
        let runs = (0..10)
            .map(|m| {
                row(
                    i64::from(m) + 1,
                    m,
                    1,
                    i64::from(m) + 1,
                    RunStatus::Succeeded,
                )
            })
            .collect();
        let (tally, found) = judged(runs, Vec::new());
        assert_eq!((tally.due, tally.ran), (10, 10));
        assert!(found.is_empty(), "{found:?}");
    }

    /// Each kind of trouble is found and named: a deleted row (an
    /// instant unaccounted), an early start, two chains of one instant, an
    /// overlap, a row left running; and what accounts for an instant not
    /// run is not a finding.
    #[test]
    fn each_kind_is_found_and_what_accounts_is_not() {
        let mut runs: Vec<Row> = Vec::new();
        // 00:00 ran; 00:01 is gone; 00:02 started early.
        runs.push(row(1, 0, 1, 1, RunStatus::Succeeded));
        let mut early = row(3, 2, 1, 3, RunStatus::Succeeded);
        early.started_at -= TimeDelta::seconds(2);
        runs.push(early);
        // 00:03 ran twice, under two leases.
        runs.push(row(4, 3, 1, 4, RunStatus::Succeeded));
        runs.push(row(5, 3, 1, 5, RunStatus::Succeeded));
        // 00:04 ran on past 00:05's start (70 s), and 00:05 ran.
        let mut long = row(6, 4, 1, 6, RunStatus::Succeeded);
        long.finished_at = Some(long.started_at + TimeDelta::seconds(70));
        runs.push(long);
        runs.push(row(7, 5, 1, 7, RunStatus::Succeeded));
        // 00:06 is left running under a lease that ended.
        runs.push(row(8, 6, 1, 8, RunStatus::Running));
        // 00:07 missed, 00:08 skipped, 00:09 paused.
        runs.push(row(9, 7, 0, 0, RunStatus::Missed));
        runs.push(row(10, 8, 1, 10, RunStatus::Skipped));
        let pause = (utc("2027-01-01T00:08:30Z"), utc("2027-01-01T00:09:30Z"));
        let (tally, found) = judged(runs, vec![pause]);
        let kinds: BTreeSet<Finding> = found.iter().copied().collect();
        assert_eq!(
            kinds,
            [
                Finding::Unaccounted,
                Finding::Duplicate,
                Finding::Early,
                Finding::Overlap,
                Finding::LeftRunning
            ]
            .into_iter()
            .collect(),
            "{found:?}"
        );
        assert_eq!(
            found.iter().filter(|f| **f == Finding::Unaccounted).count(),
            1
        );
        assert_eq!(
            (tally.missed, tally.skipped, tally.paused),
            (1, 1, 1),
            "{tally:?}"
        );
    }

    /// A backfill's run of an instant that ran before (failed, abandoned,
    /// or succeeded and rerun on purpose) is a rerun, counted so and never
    /// a duplicate; two runs the schedule started are one still.
    #[test]
    fn a_backfills_rerun_is_no_duplicate() {
        let later = |mut row: Row, trigger, minutes: i64| {
            row.triggered_by = trigger;
            row.started_at += TimeDelta::minutes(minutes);
            row.finished_at = row.finished_at.map(|t| t + TimeDelta::minutes(minutes));
            row
        };
        use crate::history::Trigger;
        let mut runs: Vec<Row> = (0..10)
            .filter(|m| ![1, 2, 3, 4].contains(m))
            .map(|m| {
                row(
                    i64::from(m) + 1,
                    m,
                    1,
                    i64::from(m) + 1,
                    RunStatus::Succeeded,
                )
            })
            .collect();
        // 00:01 failed, then a backfill ran it again (attempt 2); 00:02 was
        // abandoned (its end never recorded), then backfilled twice.
        runs.push(row(20, 1, 1, 20, RunStatus::Failed));
        runs.push(later(
            row(21, 1, 2, 121, RunStatus::Succeeded),
            Trigger::Backfill,
            30,
        ));
        runs.push(row(22, 2, 1, 22, RunStatus::Abandoned));
        runs.push(later(
            row(23, 2, 2, 123, RunStatus::Failed),
            Trigger::Backfill,
            31,
        ));
        runs.push(later(
            row(24, 2, 3, 124, RunStatus::Succeeded),
            Trigger::Backfill,
            32,
        ));
        // 00:03 succeeded and a backfill reran it on purpose.
        runs.push(row(25, 3, 1, 25, RunStatus::Succeeded));
        runs.push(later(
            row(26, 3, 2, 126, RunStatus::Succeeded),
            Trigger::Backfill,
            33,
        ));
        // 00:04 was run twice by the schedule: a duplicate.
        runs.push(row(27, 4, 1, 27, RunStatus::Succeeded));
        runs.push(later(
            row(28, 4, 1, 128, RunStatus::Succeeded),
            Trigger::CatchUp,
            34,
        ));
        let (tally, found) = judged(runs, Vec::new());
        assert_eq!(found, vec![Finding::Duplicate], "{tally:?}");
        assert_eq!((tally.ran, tally.rerun), (10, 3), "{tally:?}");
    }

    /// An abandoned run followed by its rerun (the next attempt, a retry,
    /// under a later fence) is a rerun, never a duplicate, as is a rerun's
    /// own abandoned run rerun again, and one after a run whose holder,
    /// cut off, recorded its end over the mark later (`lost_lock`, or the
    /// success it could not write in time); a second run of an instant
    /// that begins at attempt 1, or is not a retry, or skips an attempt,
    /// or is under an earlier lease, is a duplicate.
    #[test]
    fn the_rerun_of_an_abandoned_run_is_no_duplicate() {
        use crate::history::Trigger;
        let rerun = |id: i64, minute: u32, attempt: i32, fence: i64, status, trigger| {
            let mut row = row(id, minute, attempt, fence, status);
            row.triggered_by = trigger;
            row.started_at += TimeDelta::seconds(20);
            row.finished_at = row.finished_at.map(|t| t + TimeDelta::seconds(20));
            row
        };
        let clean = |minutes: &[u32]| -> Vec<Row> {
            (0..10)
                .filter(|m| !minutes.contains(m))
                .map(|m| {
                    row(
                        i64::from(m) + 1,
                        m,
                        1,
                        i64::from(m) + 1,
                        RunStatus::Succeeded,
                    )
                })
                .collect()
        };
        let mut runs = clean(&[1, 2, 3, 4]);
        // 00:01 abandoned, rerun once; 00:02 abandoned twice, rerun twice;
        // 00:03's holder recorded lost_lock over the mark, rerun once;
        // 00:04's its success, which it could not write before the mark.
        runs.push(row(20, 1, 1, 20, RunStatus::Abandoned));
        runs.push(rerun(21, 1, 2, 21, RunStatus::Succeeded, Trigger::Retry));
        runs.push(row(22, 2, 1, 22, RunStatus::Abandoned));
        let mut again = rerun(23, 2, 2, 23, RunStatus::Abandoned, Trigger::Retry);
        again.finished_at = None;
        runs.push(again);
        let mut third = rerun(24, 2, 3, 25, RunStatus::Succeeded, Trigger::Retry);
        third.started_at += TimeDelta::seconds(5);
        third.finished_at = third.finished_at.map(|t| t + TimeDelta::seconds(5));
        runs.push(third);
        runs.push(row(26, 3, 1, 26, RunStatus::LostLock));
        runs.push(rerun(27, 3, 2, 27, RunStatus::Succeeded, Trigger::Retry));
        runs.push(row(28, 4, 1, 28, RunStatus::Succeeded));
        runs.push(rerun(29, 4, 2, 29, RunStatus::Succeeded, Trigger::Retry));
        let (tally, found) = judged(runs, Vec::new());
        assert_eq!(found, Vec::<Finding>::new(), "{tally:?}");
        assert_eq!((tally.ran, tally.rerun), (10, 4), "{tally:?}");
        // Doubles all the same.
        for (before, second) in [
            // The schedule's attempt 1 again, under a later lease.
            (
                RunStatus::Abandoned,
                rerun(31, 1, 1, 31, RunStatus::Succeeded, Trigger::Schedule),
            ),
            // Not a retry.
            (
                RunStatus::Abandoned,
                rerun(31, 1, 2, 31, RunStatus::Succeeded, Trigger::CatchUp),
            ),
            // An attempt skipped.
            (
                RunStatus::Abandoned,
                rerun(31, 1, 3, 31, RunStatus::Succeeded, Trigger::Retry),
            ),
            // Under an earlier lease.
            (
                RunStatus::Abandoned,
                rerun(31, 1, 2, 5, RunStatus::Succeeded, Trigger::Retry),
            ),
        ] {
            let mut runs = clean(&[1]);
            runs.push(row(30, 1, 1, 30, before));
            runs.push(second);
            let (tally, found) = judged(runs, Vec::new());
            assert_eq!(found, vec![Finding::Duplicate], "{before:?} {tally:?}");
        }
    }

    /// An instant that came while a run held the lease is an overrun; one
    /// after an abandoned run's lease could have run out is unaccounted;
    /// one too recent to judge is pending; one before the job existed is
    /// the job's absence.
    #[test]
    fn overruns_abandoned_runs_pending_and_before_the_job() {
        let mut abandoned = row(1, 0, 1, 1, RunStatus::Abandoned);
        abandoned.confirmed_at = Some(abandoned.started_at + TimeDelta::seconds(30));
        // Held until 00:02:30 at most: 00:01 and 00:02 are overruns, 00:03
        // on unaccounted.
        let (tally, found) = judged(vec![abandoned], Vec::new());
        assert_eq!(tally.overrun, 2, "{tally:?}");
        assert_eq!(tally.unaccounted, 7, "{tally:?}");
        assert!(found.iter().all(|f| *f == Finding::Unaccounted));
        let mut evidence = evidence(Vec::new());
        evidence.now = utc("2027-01-01T00:05:00Z");
        evidence.created_at = Some(utc("2027-01-01T00:01:30Z"));
        let (tally, found) = judge(
            &promise(),
            &evidence,
            utc("2027-01-01T00:00:00Z"),
            utc("2027-01-01T00:09:00Z"),
        );
        // 00:00–00:01 before the job; 00:02–00:03 unaccounted; 00:04–00:05
        // pending (missed_after 1 min, and a round of the check, from
        // 00:05); nothing after now.
        assert_eq!(
            (
                tally.due,
                tally.before_job,
                tally.unaccounted,
                tally.pending
            ),
            (6, 2, 2, 2),
            "{tally:?}"
        );
        assert_eq!(found.len(), 2);
    }

    /// `queue`: the run of 00:01 waited behind a run of 00:00 that went on
    /// to 00:01:30, and started at 00:02:10; 00:02 came in between, found
    /// 00:01 waiting, and is its overrun, not unaccounted. Without waiting
    /// (`skip`), 00:02 is unaccounted.
    #[test]
    fn an_instant_that_came_while_one_waited_is_an_overrun_of_the_waiting_one() {
        let mut first = row(1, 0, 1, 1, RunStatus::Succeeded);
        first.finished_at = Some(first.scheduled_at + TimeDelta::seconds(90));
        let mut waited = row(2, 1, 1, 2, RunStatus::Succeeded);
        waited.started_at = waited.scheduled_at + TimeDelta::seconds(70);
        waited.finished_at = Some(waited.scheduled_at + TimeDelta::seconds(100));
        let runs = vec![first, waited];
        let judge_with = |waits: bool| {
            let promise = Promise { waits, ..promise() };
            let (tally, _) = judge(
                &promise,
                &evidence(runs.clone()),
                utc("2027-01-01T00:00:00Z"),
                utc("2027-01-01T00:02:00Z"),
            );
            (tally.overrun, tally.unaccounted)
        };
        assert_eq!(judge_with(true), (1, 0));
        assert_eq!(judge_with(false), (0, 1));
    }

    /// An `allow` job's runs may overlap up to `max_concurrent`: three runs
    /// of a minute each, a minute apart, going at once, are fine with 3 and
    /// an overlap with 2; a run recorded running is judged by its
    /// instant's row, not the job's own lease: fine while that row's lease
    /// is held under its fence, left running once it has ended.
    #[test]
    fn runs_of_an_allow_job_overlap_up_to_max_concurrent() {
        let long = |id: i64, minute: u32| {
            let mut run = row(id, minute, 1, 1, RunStatus::Succeeded);
            run.finished_at = Some(run.scheduled_at + TimeDelta::seconds(150));
            run
        };
        let runs: Vec<Row> = (0..10).map(|m| long(i64::from(m) + 1, m)).collect();
        let judge_with = |concurrent: u32, runs: Vec<Row>| {
            let promise = Promise {
                concurrent,
                ..promise()
            };
            let (_, found) = judge(
                &promise,
                &evidence(runs),
                utc("2027-01-01T00:00:00Z"),
                utc("2027-01-01T00:09:00Z"),
            );
            found.into_iter().map(|v| v.kind).collect::<Vec<_>>()
        };
        assert_eq!(judge_with(3, runs.clone()), Vec::<Finding>::new());
        assert!(judge_with(2, runs.clone()).contains(&Finding::Overlap));
        let mut running = runs;
        running[9].status = RunStatus::Running;
        running[9].finished_at = None;
        let judge_held_until = |until: &str| {
            let promise = Promise {
                concurrent: 3,
                ..promise()
            };
            let mut evidence = evidence(running.clone());
            evidence
                .instant_leases
                .insert(running[9].scheduled_at, (1, utc(until)));
            let (_, found) = judge(
                &promise,
                &evidence,
                utc("2027-01-01T00:00:00Z"),
                utc("2027-01-01T00:09:00Z"),
            );
            found.into_iter().map(|v| v.kind).collect::<Vec<_>>()
        };
        assert_eq!(
            judge_held_until("2027-01-01T01:05:00Z"),
            Vec::<Finding>::new()
        );
        assert_eq!(
            judge_held_until("2027-01-01T00:20:00Z"),
            vec![Finding::LeftRunning]
        );
    }

    /// A dependent job is judged against its parents' endings: an instant
    /// at which its parent succeeded and it has no row is `unaccounted`;
    /// one at which the parent failed and it was recorded `skipped` is
    /// skipped; one at which the parent is still going is pending; one the
    /// parent ran is ran.
    #[test]
    fn a_dependent_job_is_judged_against_its_parents_endings() {
        use crate::history::{RunBrief, Trigger};
        let parent = crate::config::Parent {
            name: "a".into(),
            schedule: Schedule::parse("* * * * *", chrono_tz::Tz::UTC).expect("schedule"),
            retries: 0,
            retry_backoff: Duration::from_secs(10),
            exit_codes: Default::default(),
        };
        let promise = Promise {
            schedule: Schedule::after(&["a".into()], chrono_tz::Tz::UTC),
            after: Some(crate::config::After {
                parents: vec![parent],
                on: vec![RunStatus::Succeeded],
            }),
            ..promise()
        };
        let base = utc("2027-01-01T00:00:00Z").naive_utc();
        let parent_run = |id: i64, minute: i64, status: RunStatus| RunBrief {
            id,
            job: "a".into(),
            scheduled_at: base + TimeDelta::minutes(minute),
            attempt: 1,
            instance: "r1".into(),
            fence: id,
            started_at: base + TimeDelta::minutes(minute),
            finished_at: (status != RunStatus::Running)
                .then(|| base + TimeDelta::minutes(minute) + TimeDelta::seconds(1)),
            status,
            exit_code: None,
            confirmed_at: None,
            once_key: None,
            triggered_by: Trigger::Schedule,
            params: None,
            output_file: None,
        };
        // The child ran at 00:01 (after a's end), was recorded skipped at
        // 00:02 (a failed); nothing at 00:03, which a ran; a still goes
        // at 00:04 (its lease held).
        let mut ran = row(1, 1, 1, 1, RunStatus::Succeeded);
        ran.started_at += TimeDelta::seconds(2);
        ran.finished_at = Some(ran.started_at + TimeDelta::seconds(1));
        let skipped = row(2, 2, 1, 2, RunStatus::Skipped);
        let mut evidence = evidence(vec![ran, skipped]);
        evidence.parents = vec![
            parent_run(11, 1, RunStatus::Succeeded),
            parent_run(12, 2, RunStatus::Failed),
            parent_run(13, 3, RunStatus::Succeeded),
            parent_run(14, 4, RunStatus::Running),
        ];
        let (tally, found) = judge(
            &promise,
            &evidence,
            utc("2027-01-01T00:00:00Z"),
            utc("2027-01-01T00:09:00Z"),
        );
        assert_eq!(
            (
                tally.due,
                tally.ran,
                tally.skipped,
                tally.pending,
                tally.unaccounted
            ),
            (4, 1, 1, 1, 1),
            "{tally:?}"
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, Finding::Unaccounted);
        assert_eq!(
            found[0].instant.as_deref(),
            Some("2027-01-01T00:03:00.000Z")
        );
    }
}
