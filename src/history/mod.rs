//! The run history: one row per run attempt in `replicron_runs`, written at
//! start and at its end with database times (`docs/design.md#the-life-of-a-run`). The
//! statements are here; [`journal`] queues the writes that must not be lost,
//! [`retention`] deletes old rows.

pub(crate) mod journal;
pub(crate) mod retention;
pub(crate) mod search;
mod store;

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use serde::Serialize;

use crate::db::DbConnection;
use crate::db::batch;
use crate::db::cached;
use crate::db::clock::to_db_time;
use crate::db::clock::{DbNow, DbNowPlus, FinishedAt};
use crate::db::schema::replicron_runs::dsl as runs;
pub(crate) use crate::run::{Params, RunStatus, Trigger};

/// A run's identity and owner, written when it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NewRun {
    /// The job.
    pub(crate) job: String,
    /// The instant the run is for.
    pub(crate) scheduled_at: DateTime<Utc>,
    /// 1, or more when retried.
    pub(crate) attempt: i32,
    /// Who runs it.
    pub(crate) instance: String,
    /// Under which lease.
    pub(crate) fence: i64,
    /// The KEY of an `exec --once` run.
    pub(crate) once_key: Option<String>,
    /// Empty for a run of the fleet's; the instance id for a run of a
    /// `run_on = "every"` job, which every replica records.
    pub(crate) scope: String,
    /// The lease row the run is held under: its start is recorded only
    /// while that row still names `instance` under `fence` (`None`: a run
    /// of this replica's own, which holds no row).
    pub(crate) lease_row: Option<String>,
    /// What started it.
    pub(crate) trigger: Trigger,
    /// Its parameters, as a JSON object (`None`: it has none).
    pub(crate) params: Option<String>,
}

/// A row of `replicron_runs`.
#[derive(Clone, Debug, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = crate::db::schema::replicron_runs)]
pub(crate) struct RunRow {
    /// Auto-increment key.
    pub id: i64,
    /// The job.
    pub job: String,
    /// The instant it ran for (UTC).
    pub scheduled_at: NaiveDateTime,
    /// 1, or more when retried.
    pub attempt: i32,
    /// Who ran it.
    pub instance: String,
    /// Under which lease.
    pub fence: i64,
    /// Database time it started (UTC).
    pub started_at: NaiveDateTime,
    /// Database time it finished (UTC), if it has.
    pub finished_at: Option<NaiveDateTime>,
    /// How it ended, or that it has not.
    pub status: RunStatus,
    /// Exit code; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// The tail of its output.
    pub output: String,
    /// The holder's last confirmation of its lease (UTC), if any.
    pub confirmed_at: Option<NaiveDateTime>,
    /// The KEY of an `exec --once` run.
    pub once_key: Option<String>,
    /// What started it.
    pub triggered_by: Trigger,
    /// Its parameters, as a JSON object.
    pub params: Option<String>,
    /// The file its whole output was kept in, on its replica.
    pub output_file: Option<String>,
}

/// A run as every reader shows it: `history --format json`, `status`'s last
/// run, the API and the dashboard. The table's column names, times in RFC
/// 3339 UTC with milliseconds, how long it ran, and its output where it was
/// read (a listing leaves it out).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunRecord {
    /// Auto-increment key.
    pub id: i64,
    /// The job.
    pub job: String,
    /// The instant.
    pub scheduled_at: String,
    /// The attempt.
    pub attempt: i32,
    /// Who ran it.
    pub instance: String,
    /// Under which lease.
    pub fence: i64,
    /// When it started.
    pub started_at: String,
    /// When it finished, if it has.
    pub finished_at: Option<String>,
    /// How it ended.
    pub status: RunStatus,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// How long it ran, in seconds, if it has ended.
    pub duration_seconds: Option<f64>,
    /// The tail of its output, where it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The holder's last confirmation of its lease: for a run whose end is
    /// not known (`abandoned`), the best bound.
    pub confirmed_at: Option<String>,
    /// The KEY of an `exec --once` run.
    pub once_key: Option<String>,
    /// What started it.
    pub triggered_by: Trigger,
    /// The parameters it was given (empty for none).
    pub params: Params,
    /// The ids of the parents' runs that started it (`dependency`; empty
    /// for any other run).
    pub parent_runs: Vec<i64>,
    /// Why an operator started it (a trigger's or a backfill's reason),
    /// where it was read and given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The file its whole output was kept in, on its replica
    /// (`output_store = "files"`), once it has ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_file: Option<String>,
}

/// A run's parameters as recorded: a JSON object of strings (empty for
/// none, and for a column this build cannot read).
pub(crate) fn params_of(column: Option<&str>) -> Params {
    column
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// Parameters as the column records them: `None` for none. The values of
/// the parameters named in `secret` are written `[redacted]`: the run was given them, its rows and whoever reads them
/// are not.
pub(crate) fn params_column(params: &Params, secret: &[String]) -> Option<String> {
    let shown: std::collections::BTreeMap<&str, &str> = params
        .iter()
        .map(|(name, value)| {
            let value = if secret.contains(name) {
                crate::db::audit::REDACTED
            } else {
                value.as_str()
            };
            (name.as_str(), value)
        })
        .collect();
    (!shown.is_empty()).then(|| serde_json::to_string(&shown).unwrap_or_default())
}

/// RFC 3339, UTC, milliseconds: how replicron writes every time.
pub(crate) fn rfc3339(time: NaiveDateTime) -> String {
    time.and_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl From<&RunBrief> for RunRecord {
    fn from(run: &RunBrief) -> Self {
        RunRecord {
            id: run.id,
            job: run.job.clone(),
            scheduled_at: rfc3339(run.scheduled_at),
            attempt: run.attempt,
            instance: run.instance.clone(),
            fence: run.fence,
            started_at: rfc3339(run.started_at),
            finished_at: run.finished_at.map(rfc3339),
            status: run.status,
            exit_code: run.exit_code,
            duration_seconds: run
                .duration()
                .map(|d| d.num_milliseconds().max(0) as f64 / 1000.0),
            output: None,
            confirmed_at: run.confirmed_at.map(rfc3339),
            once_key: run.once_key.clone(),
            triggered_by: run.triggered_by,
            params: params_of(run.params.as_deref()),
            parent_runs: Vec::new(),
            reason: None,
            output_file: run.output_file.clone(),
        }
    }
}

impl From<RunRow> for RunRecord {
    fn from(row: RunRow) -> Self {
        let mut record = RunRecord::from(&RunBrief::from(&row));
        record.output = Some(row.output);
        record
    }
}

/// Which runs [`list_runs`] returns.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunFilter {
    /// Only this job's.
    pub job: Option<String>,
    /// Only runs in this state.
    pub status: Option<RunStatus>,
    /// Only `exec --once` runs of this KEY.
    pub once_key: Option<String>,
    /// Only runs that started at or after this (database time, UTC).
    pub since: Option<NaiveDateTime>,
    /// Only runs older than this one (by id): the next page of a listing.
    pub before_id: Option<i64>,
    /// At most this many, newest first.
    pub limit: i64,
}

/// Writes a `running` row for a run that is starting; returns its id.
/// A second row for the same job, instant and attempt is refused by the
/// table's unique key. A run held under a lease row is recorded only while
/// that row still names its instance under its fence and its lease has not
/// run out (an INSERT … SELECT from the row): a replica whose lease ran out
/// or was claimed away meanwhile (its statement waited in a stalled server)
/// records nothing, and gets `NotFound`.
pub(crate) fn record_run_started(conn: &mut DbConnection, run: &NewRun) -> QueryResult<i64> {
    use crate::db::schema::replicron_locks::dsl as locks;
    use diesel::sql_types::{BigInt, Integer, Nullable, Text};
    let scheduled = to_db_time(run.scheduled_at);
    match &run.lease_row {
        Some(row) => {
            let values = locks::replicron_locks
                .filter(locks::name.eq(row))
                .filter(locks::fence.eq(run.fence))
                .filter(locks::locked_by.eq(&run.instance))
                .filter(locks::lock_until.gt(DbNow))
                .select((
                    run.job.clone().into_sql::<Text>(),
                    scheduled,
                    run.attempt.into_sql::<Integer>(),
                    run.instance.clone().into_sql::<Text>(),
                    run.fence.into_sql::<BigInt>(),
                    DbNow,
                    RunStatus::Running.into_sql::<Text>(),
                    "".into_sql::<Text>(),
                    run.once_key.clone().into_sql::<Nullable<Text>>(),
                    run.scope.clone().into_sql::<Text>(),
                    run.trigger.into_sql::<Text>(),
                    run.params.clone().into_sql::<Nullable<Text>>(),
                ));
            diesel::insert_into(runs::replicron_runs)
                .values(values)
                .into_columns((
                    runs::job,
                    runs::scheduled_at,
                    runs::attempt,
                    runs::instance,
                    runs::fence,
                    runs::started_at,
                    runs::status,
                    runs::output,
                    runs::once_key,
                    runs::scope,
                    runs::triggered_by,
                    runs::params,
                ))
                .execute(conn)?;
        }
        None => {
            diesel::insert_into(runs::replicron_runs)
                .values((
                    runs::job.eq(&run.job),
                    runs::scheduled_at.eq(scheduled),
                    runs::attempt.eq(run.attempt),
                    runs::instance.eq(&run.instance),
                    runs::fence.eq(run.fence),
                    runs::started_at.eq(DbNow),
                    runs::finished_at.eq(None::<NaiveDateTime>),
                    runs::status.eq(RunStatus::Running),
                    runs::exit_code.eq(None::<i32>),
                    runs::output.eq(""),
                    runs::once_key.eq(&run.once_key),
                    runs::scope.eq(&run.scope),
                    runs::triggered_by.eq(run.trigger),
                    runs::params.eq(&run.params),
                ))
                .execute(conn)?;
        }
    }
    // RETURNING is not portable to MariaDB/MySQL; the unique key is, and the
    // fence tells this run's row from another's.
    runs::replicron_runs
        .select(runs::id)
        .filter(runs::job.eq(&run.job))
        .filter(runs::scheduled_at.eq(scheduled))
        .filter(runs::attempt.eq(run.attempt))
        .filter(runs::scope.eq(&run.scope))
        .filter(runs::fence.eq(run.fence))
        .filter(runs::instance.eq(&run.instance))
        .first(conn)
}

/// Records that `run`'s instant, claimed under its lease but never run, is
/// `skipped`, with `output` saying why: the `running` row its claim
/// recorded is ended so, or a row is written for it. Returns the row's id
/// if this call recorded it (`None`: the instant's row had ended already,
/// or the lease no longer holds, so the row cannot be written).
pub(crate) fn record_unrun(
    conn: &mut DbConnection,
    run: &NewRun,
    output: &str,
) -> QueryResult<Option<i64>> {
    let existing: Option<(i64, RunStatus)> = runs::replicron_runs
        .select((runs::id, runs::status))
        .filter(runs::job.eq(&run.job))
        .filter(runs::scheduled_at.eq(to_db_time(run.scheduled_at)))
        .filter(runs::attempt.eq(run.attempt))
        .filter(runs::scope.eq(&run.scope))
        .first(conn)
        .optional()?;
    let id = match existing {
        Some((id, RunStatus::Running)) => id,
        Some(_) => return Ok(None),
        None => match record_run_started(conn, run) {
            Ok(id) => id,
            Err(diesel::result::Error::NotFound)
            | Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            )) => return Ok(None),
            Err(e) => return Err(e),
        },
    };
    let changed = diesel::update(
        runs::replicron_runs
            .filter(runs::id.eq(id))
            .filter(runs::status.eq(RunStatus::Running)),
    )
    .set((
        runs::finished_at.eq(FinishedAt::after(Duration::ZERO).nullable()),
        runs::status.eq(RunStatus::Skipped),
        runs::output.eq(output),
    ))
    .execute(conn)?;
    Ok((changed == 1).then_some(id))
}

/// What the history says of `job`'s `instant` for a backfill: which run
/// of it succeeded (the latest, if any did), how its latest attempt ended,
/// and that attempt's number (0: none).
pub(crate) fn backfill_state(
    conn: &mut DbConnection,
    job: &str,
    instant: DateTime<Utc>,
) -> QueryResult<BackfillState> {
    let rows: Vec<(i64, i32, RunStatus)> = runs::replicron_runs
        .select((runs::id, runs::attempt, runs::status))
        .filter(runs::job.eq(job))
        .filter(runs::scheduled_at.eq(to_db_time(instant)))
        .filter(runs::scope.eq(""))
        .order((runs::attempt, runs::id))
        .load(conn)?;
    Ok(BackfillState {
        succeeded: rows
            .iter()
            .rev()
            .find(|(_, _, status)| *status == RunStatus::Succeeded)
            .map(|(id, _, _)| *id),
        last: rows.last().map(|(_, _, status)| *status),
        attempts: rows
            .iter()
            .map(|(_, attempt, _)| *attempt)
            .max()
            .unwrap_or(0),
    })
}

/// What the history says of `job`'s `instant` for a rerun of an abandoned
/// run of it: its latest attempt, and how many times it was rerun already.
pub(crate) fn rerun_state(
    conn: &mut DbConnection,
    job: &str,
    instant: DateTime<Utc>,
) -> QueryResult<RerunState> {
    let rows: Vec<(i64, i32, i64, RunStatus, Trigger)> = runs::replicron_runs
        .select((
            runs::id,
            runs::attempt,
            runs::fence,
            runs::status,
            runs::triggered_by,
        ))
        .filter(runs::job.eq(job))
        .filter(runs::scheduled_at.eq(to_db_time(instant)))
        .filter(runs::scope.eq(""))
        .filter(runs::attempt.gt(0))
        .order((runs::attempt, runs::id))
        .load(conn)?;
    // A rerun is a chain of attempts under a lease of its own whose first
    // attempt is a retry: a run's own retries share its first attempt's
    // lease.
    let mut firsts: std::collections::BTreeMap<i64, Trigger> = std::collections::BTreeMap::new();
    for (_, _, fence, _, trigger) in &rows {
        firsts.entry(*fence).or_insert(*trigger);
    }
    Ok(RerunState {
        latest: rows
            .last()
            .map(|(id, attempt, _, status, _)| (*id, *attempt, *status)),
        reruns: firsts
            .values()
            .filter(|trigger| **trigger == Trigger::Retry)
            .count(),
    })
}

/// See [`rerun_state`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RerunState {
    /// Its latest attempt: its row's id, its number and its status (`None`:
    /// the instant has no row).
    pub(crate) latest: Option<(i64, i32, RunStatus)>,
    /// How many times it was rerun after an abandoned attempt.
    pub(crate) reruns: usize,
}

/// See [`backfill_state`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BackfillState {
    /// The latest run of the instant that succeeded, if one did.
    pub(crate) succeeded: Option<i64>,
    /// How its latest row ended (`None`: the instant has no row).
    pub(crate) last: Option<RunStatus>,
    /// Its latest attempt (0: none).
    pub(crate) attempts: i32,
}

/// Records what started run `id`, whose row the claim batch wrote as the
/// schedule's (a catch-up run's).
pub(crate) fn set_trigger(
    conn: &mut DbConnection,
    id: i64,
    trigger: Trigger,
) -> QueryResult<usize> {
    diesel::update(runs::replicron_runs.filter(runs::id.eq(id)))
        .set(runs::triggered_by.eq(trigger))
        .execute(conn)
}

/// Writes the parameters of run `id` (as [`params_column`] gives them):
/// attempt 1 of a one-time run (`trigger --at`), recorded by the claim
/// batch without them.
pub(crate) fn set_params(conn: &mut DbConnection, id: i64, params: &str) -> QueryResult<usize> {
    diesel::update(runs::replicron_runs.filter(runs::id.eq(id)))
        .set(runs::params.eq(Some(params)))
        .execute(conn)
}

/// Links run `id` to the parents' runs `parents` whose ends started it.
pub(crate) fn link_parents(
    conn: &mut DbConnection,
    id: i64,
    parents: &[i64],
) -> QueryResult<usize> {
    use crate::db::schema::replicron_run_parents::dsl as links;
    // One statement per parent: a batch insert has no form every backend
    // takes, and a fan-in has a few parents.
    let mut linked = 0;
    for parent in parents {
        linked += diesel::insert_into(links::replicron_run_parents)
            .values((links::run_id.eq(id), links::parent_id.eq(*parent)))
            .execute(conn)?;
    }
    Ok(linked)
}

/// The parents' runs of each of `ids` that has any.
pub(crate) fn parents_of(
    conn: &mut DbConnection,
    ids: &[i64],
) -> QueryResult<std::collections::HashMap<i64, Vec<i64>>> {
    use crate::db::schema::replicron_run_parents::dsl as links;
    let mut found: std::collections::HashMap<i64, Vec<i64>> = std::collections::HashMap::new();
    if ids.is_empty() {
        return Ok(found);
    }
    let pairs: Vec<(i64, i64)> = links::replicron_run_parents
        .filter(links::run_id.eq_any(ids))
        .order((links::run_id, links::parent_id))
        .select((links::run_id, links::parent_id))
        .load(conn)?;
    for (run, parent) in pairs {
        found.entry(run).or_default().push(parent);
    }
    Ok(found)
}

/// Records why an operator started run `id`.
pub(crate) fn record_reason(conn: &mut DbConnection, id: i64, reason: &str) -> QueryResult<usize> {
    use crate::db::schema::replicron_run_reasons::dsl as reasons;
    diesel::insert_into(reasons::replicron_run_reasons)
        .values((reasons::run_id.eq(id), reasons::reason.eq(reason)))
        .execute(conn)
}

/// Why an operator started each of `ids` that has a reason.
pub(crate) fn reasons_of(
    conn: &mut DbConnection,
    ids: &[i64],
) -> QueryResult<std::collections::HashMap<i64, String>> {
    use crate::db::schema::replicron_run_reasons::dsl as reasons;
    if ids.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    let pairs: Vec<(i64, String)> = reasons::replicron_run_reasons
        .filter(reasons::run_id.eq_any(ids))
        .select((reasons::run_id, reasons::reason))
        .load(conn)?;
    Ok(pairs.into_iter().collect())
}

/// The ids of the records an operator may have given a reason for (a
/// trigger's, a backfill's, and their retries).
pub(crate) fn reasoned_ids(records: &[RunRecord]) -> Vec<i64> {
    records
        .iter()
        .filter(|r| {
            matches!(
                r.triggered_by,
                Trigger::Manual | Trigger::Backfill | Trigger::Retry
            )
        })
        .map(|r| r.id)
        .collect()
}

/// Fills each record's `reason` from `reasons` (by run id).
pub(crate) fn attach_reasons(
    records: &mut [RunRecord],
    mut reasons: std::collections::HashMap<i64, String>,
) {
    for record in records {
        if let Some(reason) = reasons.remove(&record.id) {
            record.reason = Some(reason);
        }
    }
}

/// Fills each record's `reason` (none where they cannot be read: a
/// listing is not refused for them).
pub(crate) fn with_reasons(conn: &mut DbConnection, records: &mut [RunRecord]) {
    if let Ok(reasons) = reasons_of(conn, &reasoned_ids(records)) {
        attach_reasons(records, reasons);
    }
}

/// The ids of the records a dependency (or a backfill, which runs
/// dependent jobs with `--with-dependents`) started: those that may have
/// parents' runs.
pub(crate) fn dependent_ids(records: &[RunRecord]) -> Vec<i64> {
    records
        .iter()
        .filter(|r| matches!(r.triggered_by, Trigger::Dependency | Trigger::Backfill))
        .map(|r| r.id)
        .collect()
}

/// Fills each record's `parent_runs` from `parents` (by run id).
pub(crate) fn attach_parents(
    records: &mut [RunRecord],
    mut parents: std::collections::HashMap<i64, Vec<i64>>,
) {
    for record in records {
        if let Some(ids) = parents.remove(&record.id) {
            record.parent_runs = ids;
        }
    }
}

/// Fills each record's `parent_runs` from the links (none where they
/// cannot be read: a listing is not refused for them).
pub(crate) fn with_parents(conn: &mut DbConnection, records: &mut [RunRecord]) {
    if let Ok(parents) = parents_of(conn, &dependent_ids(records)) {
        attach_parents(records, parents);
    }
}

/// The fleet's runs (not per-host ones) of `jobs` for instants after
/// `after`, instant by instant (each instant's rows by job and attempt), at
/// most `limit`: what a dependent job's parents did.
pub(crate) fn runs_after(
    conn: &mut DbConnection,
    jobs: &[String],
    after: DateTime<Utc>,
    limit: i64,
) -> QueryResult<Vec<RunBrief>> {
    runs::replicron_runs
        .filter(runs::job.eq_any(jobs))
        .filter(runs::scope.eq(""))
        .filter(runs::scheduled_at.gt(to_db_time(after)))
        .order((runs::scheduled_at, runs::job, runs::attempt))
        .limit(limit)
        .select(RunBrief::as_select())
        .load(conn)
}

/// The fleet's runs of `jobs` for instants in `[from, to]`, as
/// [`runs_after`] orders them: what a dependent job's parents did in a
/// range.
pub(crate) fn runs_between(
    conn: &mut DbConnection,
    jobs: &[String],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> QueryResult<Vec<RunBrief>> {
    runs::replicron_runs
        .filter(runs::job.eq_any(jobs))
        .filter(runs::scope.eq(""))
        .filter(runs::scheduled_at.ge(to_db_time(from)))
        .filter(runs::scheduled_at.le(to_db_time(to)))
        .order((runs::scheduled_at, runs::job, runs::attempt))
        .select(RunBrief::as_select())
        .load(conn)
}

/// The instant and fence of the fleet's run of `job` that was going at
/// `at` (the database's time): an attempt that had started by then and
/// had not ended before it. A row still `running` counts only under
/// `fence`, the fence of the job's lease while it is held (a row left
/// `running` by a holder that vanished is no run going); a `skipped` row
/// records an instant that did not run.
pub(crate) fn run_going_at(
    conn: &mut DbConnection,
    job: &str,
    at: DateTime<Utc>,
    fence: Option<i64>,
) -> QueryResult<Option<(DateTime<Utc>, i64)>> {
    let at = to_db_time(at);
    let ended_after = runs::finished_at.gt(at.nullable());
    let going = runs::status
        .eq(RunStatus::Running)
        .and(runs::fence.nullable().eq(fence));
    let row: Option<(NaiveDateTime, i64)> = runs::replicron_runs
        .select((runs::scheduled_at, runs::fence))
        .filter(runs::job.eq(job))
        .filter(runs::scope.eq(""))
        .filter(runs::attempt.gt(0))
        .filter(ran_or_ended_by_its_code())
        .filter(runs::started_at.le(at))
        .filter(ended_after.or(going))
        .order(runs::started_at.desc())
        .first(conn)
        .optional()?;
    Ok(row.map(|(instant, fence)| (instant.and_utc(), fence)))
}

/// A row that is not `skipped`, or one skipped by its exit code
/// (`skip_exit_codes`), whose process ran: a row skipped without running
/// has no exit code.
fn ran_or_ended_by_its_code() -> diesel::dsl::Or<
    diesel::dsl::NotEq<runs::status, RunStatus>,
    diesel::dsl::IsNotNull<runs::exit_code>,
> {
    runs::status
        .ne(RunStatus::Skipped)
        .or(runs::exit_code.is_not_null())
}

/// Whether an instant of `job` after `after` and before `before` was run
/// (or claimed to run): a row of an attempt that is not `skipped`.
pub(crate) fn ran_between(
    conn: &mut DbConnection,
    job: &str,
    after: DateTime<Utc>,
    before: DateTime<Utc>,
) -> QueryResult<bool> {
    let found: Option<i64> = runs::replicron_runs
        .select(runs::id)
        .filter(runs::job.eq(job))
        .filter(runs::scope.eq(""))
        .filter(runs::attempt.gt(0))
        .filter(ran_or_ended_by_its_code())
        .filter(runs::scheduled_at.gt(to_db_time(after)))
        .filter(runs::scheduled_at.lt(to_db_time(before)))
        .first(conn)
        .optional()?;
    Ok(found.is_some())
}

/// Moves run `id`'s start to the database's now: a run recorded when its
/// lease was claimed, that then waited for its shared locks, starts when it
/// has them (its end is measured from its start).
pub(crate) fn restart_run(conn: &mut DbConnection, id: i64) -> QueryResult<usize> {
    diesel::update(runs::replicron_runs.filter(runs::id.eq(id)))
        .set(runs::started_at.eq(DbNow))
        .execute(conn)
}

/// Records how run `id` ended, `duration` after it started: `finished_at`
/// is the database's `started_at` plus that duration, so a write that lands
/// late (after an outage) still says when the run really ended. An end that
/// `may_be_late` (written `missed_after` or more after the run ended, so
/// that the check for missed instants may have gone past it) also takes
/// that check back to it; an end written at once needs no second
/// statement. Returns whether the row exists.
pub(crate) fn record_run_finished(
    conn: &mut DbConnection,
    id: i64,
    finish: &RunFinish,
    may_be_late: bool,
) -> QueryResult<bool> {
    let changed = cached::update(
        runs::replicron_runs,
        (
            runs::finished_at.eq(FinishedAt::after(finish.duration).nullable()),
            runs::status.eq(finish.status),
            runs::exit_code.eq(finish.exit_code),
            runs::output.eq(&finish.output),
            runs::output_file.eq(&finish.output_file),
        ),
        runs::id.eq(id),
    )
    .execute(conn)?;
    if changed == 1 && may_be_late {
        rewind_missed_check(conn, id)?;
    }
    Ok(changed == 1)
}

/// Records how several runs ended, `(run id, end)` each, in one statement:
/// each row gets its own end, as [`record_run_finished`] would write it
/// (never one that may be late: its missed-instant check is the single
/// end's). The statement is atomic: every row is written, or none, and
/// writing it again writes the same. Returns how many rows changed.
pub(crate) fn record_runs_finished(
    conn: &mut DbConnection,
    ends: &[(i64, &RunFinish)],
) -> QueryResult<usize> {
    if ends.is_empty() {
        return Ok(0);
    }
    let rows: Vec<FinishedRow<'_>> = ends
        .iter()
        .map(|(id, finish)| FinishedRow {
            id: *id,
            at: FinishedAt::after(finish.duration),
            finish,
        })
        .collect();
    RunsFinished { rows: &rows }.execute(conn)
}

struct FinishedRow<'a> {
    id: i64,
    at: FinishedAt,
    finish: &'a RunFinish,
}

/// `UPDATE replicron_runs SET finished_at = CASE id WHEN … END, status = …,
/// exit_code = …, output = … WHERE id IN (…)`.
struct RunsFinished<'a> {
    rows: &'a [FinishedRow<'a>],
}

impl RunsFinished<'_> {
    fn walk<'b, DB>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> QueryResult<()>
    where
        DB: batch::Binds,
        i64: diesel::serialize::ToSql<diesel::sql_types::BigInt, DB>,
        str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
        String: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
        Option<i32>:
            diesel::serialize::ToSql<diesel::sql_types::Nullable<diesel::sql_types::Integer>, DB>,
        Option<String>:
            diesel::serialize::ToSql<diesel::sql_types::Nullable<diesel::sql_types::Text>, DB>,
        FinishedAt: diesel::query_builder::QueryFragment<DB>,
    {
        use diesel::query_builder::QueryFragment as _;
        use diesel::sql_types::{Integer, Nullable, Text};
        let id = |out: &mut diesel::query_builder::AstPass<'_, 'b, DB>,
                  row: &'b FinishedRow<'_>| { batch::big_int(out, &row.id) };
        out.push_sql("UPDATE ");
        out.push_identifier("replicron_runs")?;
        out.push_sql(" SET ");
        batch::case_by_key(&mut out, "finished_at", "id", self.rows, id, |out, row| {
            row.at.walk_ast(out.reborrow())
        })?;
        out.push_sql(", ");
        batch::case_by_key(&mut out, "status", "id", self.rows, id, |out, row| {
            out.push_bind_param::<Text, RunStatus>(&row.finish.status)
        })?;
        out.push_sql(", ");
        batch::case_by_key(&mut out, "exit_code", "id", self.rows, id, |out, row| {
            out.push_bind_param::<Nullable<Integer>, Option<i32>>(&row.finish.exit_code)
        })?;
        out.push_sql(", ");
        batch::case_by_key(&mut out, "output", "id", self.rows, id, |out, row| {
            batch::text(out, &row.finish.output)
        })?;
        out.push_sql(", ");
        batch::case_by_key(&mut out, "output_file", "id", self.rows, id, |out, row| {
            out.push_bind_param::<Nullable<Text>, Option<String>>(&row.finish.output_file)
        })?;
        out.push_sql(" WHERE ");
        batch::key_in(&mut out, "id", self.rows, id)?;
        out.unsafe_to_cache_prepared();
        Ok(())
    }
}

batch::batch_statement!(RunsFinished);

/// Takes the check for missed instants of run `id`'s job back to the run's
/// end, if it had gone past it. While a run's end is not known the check
/// counts the instants after its start as its overruns; an end recorded
/// late (its replica was cut off, or frozen, when the run ended) may show
/// that the run had ended before some of them, and those, unless they ran,
/// are misses: the next round judges them again.
fn rewind_missed_check(conn: &mut DbConnection, id: i64) -> QueryResult<usize> {
    use crate::db::schema::replicron_locks::dsl as locks;
    let end = runs::replicron_runs
        .select(runs::finished_at)
        .filter(runs::id.eq(id))
        .single_value()
        .assume_not_null();
    let job = runs::replicron_runs
        .select(runs::job)
        .filter(runs::id.eq(id))
        .single_value()
        .assume_not_null();
    diesel::update(locks::replicron_locks)
        .filter(locks::name.eq(job))
        .filter(locks::missed_checked_until.gt(end.nullable()))
        .set(locks::missed_checked_until.eq(end.nullable()))
        .execute(conn)
}

/// Takes the check for missed instants of `job` back to the earliest end
/// recorded among runs `ids`, if it had gone past it: the check counted
/// those runs as going, not knowing their ends, and one of them may have
/// ended (and tried [`rewind_missed_check`]) before the check moved its mark.
/// Returns how many rows changed.
pub(crate) fn rewind_missed_check_to_ended(
    conn: &mut DbConnection,
    job: &str,
    ids: &[i64],
) -> QueryResult<usize> {
    if ids.is_empty() {
        return Ok(0);
    }
    let ends: Vec<Option<NaiveDateTime>> = runs::replicron_runs
        .select(runs::finished_at)
        .filter(runs::id.eq_any(ids))
        .filter(runs::finished_at.is_not_null())
        .load(conn)?;
    let Some(end) = ends.into_iter().flatten().min() else {
        return Ok(0);
    };
    rewind_missed_check_to(conn, job, to_db_time(end.and_utc()).0)
}

/// Notes that run `id`'s holder has just confirmed its lease: were the
/// holder to vanish, the run is known to have lasted at least until now.
pub(crate) fn record_run_confirmed(conn: &mut DbConnection, id: i64) -> QueryResult<usize> {
    cached::update(
        runs::replicron_runs,
        runs::confirmed_at.eq(DbNow.nullable()),
        runs::id.eq(id).and(runs::status.eq(RunStatus::Running)),
    )
    .execute(conn)
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunFinish {
    /// Its final status.
    pub status: RunStatus,
    /// Its exit code, `None` when killed by a signal or never started.
    pub exit_code: Option<i32>,
    /// The tail of its output.
    pub output: String,
    /// How long it ran, on the monotonic clock.
    pub duration: Duration,
    /// The file its whole output was kept in (`output_store = "files"`).
    pub output_file: Option<String>,
}

/// Marks `abandoned` every run of `job` still recorded `running` under a
/// fence older than `fence`: their holders lost the lease, since this
/// replica has claimed it. Returns the rows this call marked (as they were
/// before), so that the replica that recorded each tells about it.
pub(crate) fn mark_abandoned(
    conn: &mut DbConnection,
    job: &str,
    fence: i64,
) -> QueryResult<Vec<RunRow>> {
    let candidates = runs::replicron_runs
        .select(RunRow::as_select())
        .filter(runs::job.eq(job))
        .filter(runs::status.eq(RunStatus::Running))
        .filter(runs::fence.lt(fence))
        .load(conn)?;
    mark_rows_abandoned(conn, candidates)
}

/// Marks each of `candidates` `abandoned` if it is still `running`; returns
/// the ones this call changed (another replica may have marked some).
pub(crate) fn mark_rows_abandoned(
    conn: &mut DbConnection,
    candidates: Vec<RunRow>,
) -> QueryResult<Vec<RunRow>> {
    let mut marked = Vec::new();
    for row in candidates {
        // When it ended is not known: its holder's last confirmation
        // (`confirmed_at`) is the best bound, and finished_at stays empty.
        let changed = cached::update(
            runs::replicron_runs,
            runs::status.eq(RunStatus::Abandoned),
            runs::id.eq(row.id).and(runs::status.eq(RunStatus::Running)),
        )
        .execute(conn)?;
        if changed == 1 {
            rewind_missed_check_to(conn, &row.job, row.confirmed_at.unwrap_or(row.started_at))?;
            marked.push(row);
        }
    }
    Ok(marked)
}

/// Takes `job`'s check for missed instants back to `at`, if it had gone
/// past it. A round that read a run as going, its holder still holding the
/// lease, counted every instant after its start as its overrun; once the
/// run is marked `abandoned`, it held the lease only until its last
/// confirmation plus `lock_at_most_for`, and the instants after that
/// which nobody ran are to be recorded `missed`, as `verify` judges them.
pub(crate) fn rewind_missed_check_to(
    conn: &mut DbConnection,
    job: &str,
    at: NaiveDateTime,
) -> QueryResult<usize> {
    use crate::db::schema::replicron_locks::dsl as locks;
    diesel::update(locks::replicron_locks)
        .filter(locks::name.eq(job))
        .filter(locks::missed_checked_until.gt(at))
        .set(locks::missed_checked_until.eq(at))
        .execute(conn)
}

/// What is done with the runs a replica has just marked `abandoned`: they
/// are notified.
pub(crate) type OnAbandoned = std::sync::Arc<dyn Fn(&[RunRow]) + Send + Sync>;

/// The final status of `job`'s newest instant before `instant` (its last
/// attempt; a missed instant's row counts), if any has ended.
pub(crate) fn status_before(
    conn: &mut DbConnection,
    job: &str,
    instant: DateTime<Utc>,
) -> QueryResult<Option<RunStatus>> {
    runs::replicron_runs
        .select(runs::status)
        .filter(runs::job.eq(job))
        .filter(runs::scheduled_at.lt(to_db_time(instant)))
        .filter(runs::status.ne(RunStatus::Running))
        // A skip by exit code is neither a failure nor a success to
        // recover from: the run before it tells.
        .filter(
            runs::status
                .ne(RunStatus::Skipped)
                .or(runs::exit_code.is_null()),
        )
        .order((runs::scheduled_at.desc(), runs::attempt.desc()))
        .first(conn)
        .optional()
}

/// Records `instant` of `job` as `missed` (attempt 0, started and ended at
/// the instant, by `instance`); false if it was recorded already.
pub(crate) fn record_missed(
    conn: &mut DbConnection,
    job: &str,
    instant: DateTime<Utc>,
    instance: &str,
) -> QueryResult<Option<i64>> {
    let at = to_db_time(instant);
    let inserted = diesel::insert_into(runs::replicron_runs)
        .values((
            runs::job.eq(job),
            runs::scheduled_at.eq(at),
            runs::attempt.eq(0),
            runs::instance.eq(instance),
            runs::fence.eq(0_i64),
            runs::started_at.eq(at),
            runs::finished_at.eq(at.nullable()),
            runs::status.eq(RunStatus::Missed),
            runs::output.eq(""),
        ))
        .execute(conn);
    match inserted {
        Ok(_) => runs::replicron_runs
            .select(runs::id)
            .filter(runs::job.eq(job))
            .filter(runs::scheduled_at.eq(at))
            .filter(runs::attempt.eq(0))
            .first(conn)
            .optional(),
        // Recorded already (by another round, or a run that came late).
        // A deadlock or serialization failure is an error: the round is
        // tried again rather than taking the instant for recorded.
        Err(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _,
        )) => Ok(None),
        Err(e) => Err(e),
    }
}

/// An attempt that may have held its job's lease in a span of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Going {
    /// Its row.
    pub(crate) id: i64,
    /// Its instant.
    pub(crate) instant: DateTime<Utc>,
    /// When it started.
    pub(crate) started_at: DateTime<Utc>,
    /// When it ended, if it is known to have.
    pub(crate) finished_at: Option<DateTime<Utc>>,
    /// Its status.
    pub(crate) status: RunStatus,
    /// Its holder's last recorded confirmation of its lease.
    pub(crate) confirmed_at: Option<DateTime<Utc>>,
    /// Its lease's fence.
    pub(crate) fence: i64,
}

impl Going {
    /// Until when it may have held its job's lease: its end, if it ended;
    /// else (abandoned, or still `running`) until its lease could have run
    /// out, `lock_at_most_for` after its last confirmation, unless it holds
    /// the lease right now (`holds_now`: the lease row is still its own and
    /// unexpired), when it is still going.
    pub(crate) fn held_until(
        &self,
        lock_at_most_for: chrono::TimeDelta,
        holds_now: bool,
    ) -> Option<DateTime<Utc>> {
        match self.finished_at {
            Some(end) => Some(end),
            None if self.status == RunStatus::Running && holds_now => None,
            None => Some(
                self.confirmed_at
                    .map_or(self.started_at, |c| c.max(self.started_at))
                    + lock_at_most_for,
            ),
        }
    }
}

/// The instants of `job` in `[from, to]` with a history row (any attempt),
/// and the attempts that may have held its lease in that span (a run
/// whose end is not known counts from its start on).
pub(crate) fn accounted_between(
    conn: &mut DbConnection,
    job: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> QueryResult<(Vec<DateTime<Utc>>, Vec<Going>)> {
    let recorded: Vec<NaiveDateTime> = runs::replicron_runs
        .select(runs::scheduled_at)
        .filter(runs::job.eq(job))
        .filter(runs::scheduled_at.ge(to_db_time(from)))
        .filter(runs::scheduled_at.le(to_db_time(to)))
        .load(conn)?;
    #[expect(clippy::type_complexity, reason = "one row's columns, named below")]
    let going: Vec<(
        i64,
        NaiveDateTime,
        NaiveDateTime,
        Option<NaiveDateTime>,
        RunStatus,
        Option<NaiveDateTime>,
        i64,
    )> = runs::replicron_runs
        .select((
            runs::id,
            runs::scheduled_at,
            runs::started_at,
            runs::finished_at,
            runs::status,
            runs::confirmed_at,
            runs::fence,
        ))
        .filter(runs::job.eq(job))
        .filter(runs::attempt.gt(0))
        // Its instant, not its start: a run of `queue` or `replace` that
        // waited held the job from its instant.
        .filter(runs::scheduled_at.le(to_db_time(to)))
        .filter(
            runs::finished_at
                .is_null()
                .or(runs::finished_at.ge(to_db_time(from).nullable())),
        )
        .load(conn)?;
    Ok((
        recorded.into_iter().map(|t| t.and_utc()).collect(),
        going
            .into_iter()
            .map(
                |(id, instant, start, end, status, confirmed, fence)| Going {
                    id,
                    instant: instant.and_utc(),
                    started_at: start.and_utc(),
                    finished_at: end.map(|e| e.and_utc()),
                    status,
                    confirmed_at: confirmed.map(|c| c.and_utc()),
                    fence,
                },
            )
            .collect(),
    ))
}

/// When each of `jobs` last ended a run successfully (database time), for
/// the jobs that ever did.
pub(crate) fn last_successes(
    conn: &mut DbConnection,
    jobs: &[String],
) -> QueryResult<Vec<(String, Option<NaiveDateTime>)>> {
    runs::replicron_runs
        .filter(runs::job.eq_any(jobs))
        // A skip by exit code (nothing to do) ended well too.
        .filter(
            runs::status.eq(RunStatus::Succeeded).or(runs::status
                .eq(RunStatus::Skipped)
                .and(runs::exit_code.is_not_null())),
        )
        .group_by(runs::job)
        .select((runs::job, diesel::dsl::max(runs::finished_at)))
        .load(conn)
}

/// The rows matching `filter`, newest first, before any select.
fn filtered(
    filter: &RunFilter,
) -> crate::db::schema::replicron_runs::BoxedQuery<
    'static,
    <DbConnection as diesel::Connection>::Backend,
> {
    let mut query = runs::replicron_runs
        .order(runs::id.desc())
        .limit(filter.limit.max(0))
        .into_boxed();
    if let Some(job) = &filter.job {
        query = query.filter(runs::job.eq(job.clone()));
    }
    if let Some(status) = filter.status {
        query = query.filter(runs::status.eq(status));
    }
    if let Some(key) = &filter.once_key {
        query = query.filter(runs::once_key.eq(key.clone()));
    }
    if let Some(since) = filter.since {
        query = query.filter(runs::started_at.ge(since));
    }
    if let Some(before) = filter.before_id {
        query = query.filter(runs::id.lt(before));
    }
    query
}

/// Runs matching `filter`, newest first.
pub(crate) fn list_runs(conn: &mut DbConnection, filter: &RunFilter) -> QueryResult<Vec<RunRow>> {
    filtered(filter).select(RunRow::as_select()).load(conn)
}

/// A run without its output: what listings show.
#[derive(Clone, Debug, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = crate::db::schema::replicron_runs)]
pub(crate) struct RunBrief {
    /// Auto-increment key.
    pub id: i64,
    /// The job.
    pub job: String,
    /// The instant it ran for (UTC).
    pub scheduled_at: NaiveDateTime,
    /// 1, or more when retried.
    pub attempt: i32,
    /// Who ran it.
    pub instance: String,
    /// Under which lease.
    pub fence: i64,
    /// Database time it started (UTC).
    pub started_at: NaiveDateTime,
    /// Database time it finished (UTC), if it has.
    pub finished_at: Option<NaiveDateTime>,
    /// How it ended, or that it has not.
    pub status: RunStatus,
    /// Exit code; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// The holder's last confirmation of its lease.
    pub confirmed_at: Option<NaiveDateTime>,
    /// The KEY of an `exec --once` run.
    pub once_key: Option<String>,
    /// What started it.
    pub triggered_by: Trigger,
    /// Its parameters, as a JSON object.
    pub params: Option<String>,
    /// The file its whole output was kept in, on its replica.
    pub output_file: Option<String>,
}

impl From<&RunRow> for RunBrief {
    fn from(row: &RunRow) -> Self {
        RunBrief {
            id: row.id,
            job: row.job.clone(),
            scheduled_at: row.scheduled_at,
            attempt: row.attempt,
            instance: row.instance.clone(),
            fence: row.fence,
            started_at: row.started_at,
            finished_at: row.finished_at,
            status: row.status,
            exit_code: row.exit_code,
            confirmed_at: row.confirmed_at,
            once_key: row.once_key.clone(),
            triggered_by: row.triggered_by,
            params: row.params.clone(),
            output_file: row.output_file.clone(),
        }
    }
}

impl RunBrief {
    /// How long it ran, if it has ended.
    pub(crate) fn duration(&self) -> Option<chrono::TimeDelta> {
        Some(self.finished_at? - self.started_at)
    }
}

/// Runs matching `filter`, newest first, without their output.
pub(crate) fn list_briefs(
    conn: &mut DbConnection,
    filter: &RunFilter,
) -> QueryResult<Vec<RunBrief>> {
    filtered(filter).select(RunBrief::as_select()).load(conn)
}

/// The last `count` runs of each of `jobs`, newest first, without output:
/// one indexed statement per job (`(job, id)`), on one connection.
pub(crate) fn recent_briefs(
    conn: &mut DbConnection,
    jobs: &[String],
    count: i64,
) -> QueryResult<Vec<(String, Vec<RunBrief>)>> {
    jobs.iter()
        .map(|job| {
            let runs = runs::replicron_runs
                .select(RunBrief::as_select())
                .filter(runs::job.eq(job))
                .order(runs::id.desc())
                .limit(count)
                .load(conn)?;
            Ok((job.clone(), runs))
        })
        .collect()
}

/// The run with id `id`, output and all.
pub(crate) fn find_run(conn: &mut DbConnection, id: i64) -> QueryResult<Option<RunRow>> {
    runs::replicron_runs
        .select(RunRow::as_select())
        .filter(runs::id.eq(id))
        .first(conn)
        .optional()
}

/// The run with id `id` without its output (a finished run's may be
/// `output_limit` long: what only asks how it stands need not read it).
pub(crate) fn find_brief(conn: &mut DbConnection, id: i64) -> QueryResult<Option<RunBrief>> {
    runs::replicron_runs
        .select(RunBrief::as_select())
        .filter(runs::id.eq(id))
        .first(conn)
        .optional()
}

/// The runs with these ids, in one statement (in no particular order).
pub(crate) fn find_runs(conn: &mut DbConnection, ids: &[i64]) -> QueryResult<Vec<RunRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    runs::replicron_runs
        .select(RunRow::as_select())
        .filter(runs::id.eq_any(ids))
        .load(conn)
}

/// Of the runs `ids`, those that still have a row, each with whether it is
/// `running`: which of a replica's kept output files still have their run.
pub(crate) fn runs_left(
    conn: &mut DbConnection,
    ids: &[i64],
) -> QueryResult<std::collections::HashMap<i64, bool>> {
    let mut left = std::collections::HashMap::new();
    for chunk in ids.chunks(500) {
        let rows: Vec<(i64, RunStatus)> = runs::replicron_runs
            .select((runs::id, runs::status))
            .filter(runs::id.eq_any(chunk))
            .load(conn)?;
        left.extend(
            rows.into_iter()
                .map(|(id, status)| (id, status == RunStatus::Running)),
        );
    }
    Ok(left)
}

/// The last attempt recorded for instant `instant` of `job` under lease
/// `fence`, if any (found through the run's unique key).
pub(crate) fn latest_attempt(
    conn: &mut DbConnection,
    job: &str,
    instant: DateTime<Utc>,
    fence: i64,
) -> QueryResult<Option<RunRow>> {
    runs::replicron_runs
        .select(RunRow::as_select())
        .filter(runs::job.eq(job))
        .filter(runs::scheduled_at.eq(to_db_time(instant)))
        .filter(runs::fence.eq(fence))
        .order(runs::attempt.desc())
        .first(conn)
        .optional()
}

/// The newest run of `job`, if any.
pub(crate) fn latest_run(conn: &mut DbConnection, job: &str) -> QueryResult<Option<RunRow>> {
    runs::replicron_runs
        .select(RunRow::as_select())
        .filter(runs::job.eq(job))
        .order(runs::id.desc())
        .first(conn)
        .optional()
}

/// The run of `job` recorded running under lease `fence`, if its newest
/// run is one: a lease that must not be ended without `--force`.
pub(crate) fn running_under(
    conn: &mut DbConnection,
    job: &str,
    fence: i64,
) -> QueryResult<Option<RunRow>> {
    Ok(latest_run(conn, job)?.filter(|run| run.fence == fence && run.status == RunStatus::Running))
}

/// Deletes at most `batch` finished runs that started more than
/// `older_than` ago (database time). Returns how many were deleted; call
/// again until it returns less than `batch`.
pub(crate) fn prune_runs(
    conn: &mut DbConnection,
    older_than: Duration,
    batch: i64,
) -> QueryResult<usize> {
    // Two statements, because MariaDB/MySQL take no LIMIT in a subquery
    // under IN; each stays short, so pruning never holds locks for long.
    let ids: Vec<i64> = runs::replicron_runs
        .select(runs::id)
        .filter(runs::started_at.lt(DbNowPlus::minus(older_than)))
        .filter(runs::status.ne(RunStatus::Running))
        .order(runs::id)
        .limit(batch)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    {
        use crate::db::schema::replicron_run_parents::dsl as links;
        diesel::delete(links::replicron_run_parents.filter(links::run_id.eq_any(&ids)))
            .execute(conn)?;
        use crate::db::schema::replicron_run_reasons::dsl as reasons;
        diesel::delete(reasons::replicron_run_reasons.filter(reasons::run_id.eq_any(&ids)))
            .execute(conn)?;
    }
    diesel::delete(runs::replicron_runs.filter(runs::id.eq_any(&ids))).execute(conn)
}

#[cfg(test)]
mod tests;
