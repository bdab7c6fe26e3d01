//! The runs view's one query: runs of any jobs filtered by job, status,
//! replica, trigger and a range of start times, sorted by start, instant
//! or duration, and paged by keyset (a cursor holds the sort key and id of
//! a page's last row, so that runs recorded meanwhile never shift a page).
//! `/runs`, `/api/v1/runs` and the overview's failures read through it;
//! the indexes of `2026-11-30-000000_runs_view` keep it an index range at
//! a million rows. Also the rows a job's figures are computed from.

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text, Timestamp};

use super::{RunBrief, RunStatus, Trigger};
use crate::db::schema::replicron_runs::dsl as runs;
use crate::db::{Backend, DbConnection};

/// What a page of runs is sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SortKey {
    /// When the run started (database time).
    #[default]
    Started,
    /// The instant it ran for.
    Scheduled,
    /// How long it ran (a run that has not ended sorts as the shortest).
    Duration,
}

impl SortKey {
    /// Its name in a `sort` parameter.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SortKey::Started => "started",
            SortKey::Scheduled => "scheduled",
            SortKey::Duration => "duration",
        }
    }

    /// Every key.
    pub(crate) const ALL: [SortKey; 3] = [SortKey::Started, SortKey::Scheduled, SortKey::Duration];
}

/// Where the previous page ended: its last row's sort key (a time in
/// milliseconds since the epoch, or a duration in milliseconds, -1 for a
/// run without one) and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// The sort key of the row.
    pub(crate) key: i64,
    /// Its id.
    pub(crate) id: i64,
}

/// Which runs [`search`] returns, and how.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunSearch {
    /// Only these jobs' runs (none: every job's).
    pub(crate) jobs: Vec<String>,
    /// Only runs in these states.
    pub(crate) statuses: Vec<RunStatus>,
    /// Only runs of these replicas (instance ids).
    pub(crate) instances: Vec<String>,
    /// Only runs started so.
    pub(crate) triggers: Vec<Trigger>,
    /// Only runs that started at or after this (UTC).
    pub(crate) from: Option<NaiveDateTime>,
    /// Only runs that started before this (UTC).
    pub(crate) to: Option<NaiveDateTime>,
    /// Only the runs of this instant.
    pub(crate) instant: Option<NaiveDateTime>,
    /// Only `exec --once` runs of this KEY.
    pub(crate) once_key: Option<String>,
    /// The order.
    pub(crate) sort: SortKey,
    /// Oldest, or shortest, first.
    pub(crate) ascending: bool,
    /// The rows after this one, in that order.
    pub(crate) after: Option<Cursor>,
    /// At most this many.
    pub(crate) limit: i64,
}

/// Milliseconds since the epoch.
pub(crate) fn millis(time: NaiveDateTime) -> i64 {
    time.and_utc().timestamp_millis()
}

/// The time `millis` milliseconds after the epoch.
pub(crate) fn from_millis(millis: i64) -> Option<NaiveDateTime> {
    DateTime::<Utc>::from_timestamp_millis(millis).map(|t| t.naive_utc())
}

/// A run's duration in milliseconds, as SQL of `backend` (NULL while it
/// has not ended).
fn duration_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "CAST(ROUND((julianday(finished_at) - julianday(started_at)) * 86400000.0) AS INTEGER)"
        }
        Backend::Mysql => "(TIMESTAMPDIFF(MICROSECOND, started_at, finished_at) DIV 1000)",
        Backend::Postgres => {
            "CAST(ROUND(EXTRACT(EPOCH FROM (finished_at - started_at)) * 1000) AS BIGINT)"
        }
    }
}

/// How a time bound is written for SQLite, which compares its times as
/// text: a whole second is stored either bare (`…:05`, a bound parameter)
/// or with `.000` (the database's clock), and the bare form sorts first.
/// `Low`: the least text of the time (for `>=` and `<`); `High`: the
/// greatest (for `<=` and `>`).
#[derive(Clone, Copy)]
enum Form {
    Low,
    High,
}

fn sqlite_text(time: NaiveDateTime, form: Form) -> String {
    let whole = time.format("%Y-%m-%d %H:%M:%S").to_string();
    let ms = time.and_utc().timestamp_subsec_millis();
    match (form, ms) {
        (Form::Low, 0) => whole,
        _ => format!("{whole}.{ms:03}"),
    }
}

type Boxed = crate::db::schema::replicron_runs::BoxedQuery<
    'static,
    <DbConnection as diesel::Connection>::Backend,
>;

/// `column OP time`, comparing as `backend` stores times.
fn compare(query: Boxed, backend: Backend, column: &str, op: &str, time: NaiveDateTime) -> Boxed {
    let text = format!("{column} {op} ");
    if backend == Backend::Sqlite {
        let form = if op == ">=" || op == "<" {
            Form::Low
        } else {
            Form::High
        };
        query.filter(sql::<Bool>(&text).bind::<Text, _>(sqlite_text(time, form)))
    } else {
        query.filter(sql::<Bool>(&text).bind::<Timestamp, _>(time))
    }
}

/// The rows past `cursor` in the order of `search`: `key <= k AND (key < k
/// OR id < i)` (mirrored when ascending), whose first half is an index
/// range.
fn past(query: Boxed, backend: Backend, search: &RunSearch, cursor: Cursor) -> Boxed {
    let (loose, strict, id_op) = if search.ascending {
        (">=", ">", ">")
    } else {
        ("<=", "<", "<")
    };
    match search.sort {
        SortKey::Started | SortKey::Scheduled => {
            let column = if search.sort == SortKey::Started {
                "started_at"
            } else {
                "scheduled_at"
            };
            let Some(time) = from_millis(cursor.key) else {
                return query;
            };
            let query = compare(query, backend, column, loose, time);
            // (key strictly past) OR (id past): the second as SQL too, so
            // that the two share one bound parameter list.
            if backend == Backend::Sqlite {
                let form = if strict == "<" { Form::Low } else { Form::High };
                query.filter(
                    sql::<Bool>(&format!("({column} {strict} "))
                        .bind::<Text, _>(sqlite_text(time, form))
                        .sql(&format!(" OR id {id_op} "))
                        .bind::<BigInt, _>(cursor.id)
                        .sql(")"),
                )
            } else {
                query.filter(
                    sql::<Bool>(&format!("({column} {strict} "))
                        .bind::<Timestamp, _>(time)
                        .sql(&format!(" OR id {id_op} "))
                        .bind::<BigInt, _>(cursor.id)
                        .sql(")"),
                )
            }
        }
        SortKey::Duration => {
            let duration = format!("COALESCE({}, -1)", duration_sql(backend));
            query.filter(
                sql::<Bool>(&format!("{duration} {loose} "))
                    .bind::<BigInt, _>(cursor.key)
                    .sql(&format!(" AND ({duration} {strict} "))
                    .bind::<BigInt, _>(cursor.key)
                    .sql(&format!(" OR id {id_op} "))
                    .bind::<BigInt, _>(cursor.id)
                    .sql(")"),
            )
        }
    }
}

/// The runs matching `search`, in its order, without their output.
pub(crate) fn search(conn: &mut DbConnection, search: &RunSearch) -> QueryResult<Vec<RunBrief>> {
    let backend = conn.backend();
    let mut query: Boxed = runs::replicron_runs.into_boxed();
    if !search.jobs.is_empty() {
        query = query.filter(runs::job.eq_any(search.jobs.clone()));
    }
    if !search.statuses.is_empty() {
        query = query.filter(runs::status.eq_any(search.statuses.clone()));
    }
    if !search.instances.is_empty() {
        query = query.filter(runs::instance.eq_any(search.instances.clone()));
    }
    if !search.triggers.is_empty() {
        query = query.filter(runs::triggered_by.eq_any(search.triggers.clone()));
    }
    if let Some(key) = &search.once_key {
        query = query.filter(runs::once_key.eq(key.clone()));
    }
    if let Some(from) = search.from {
        query = compare(query, backend, "started_at", ">=", from);
    }
    if let Some(to) = search.to {
        query = compare(query, backend, "started_at", "<", to);
    }
    if let Some(instant) = search.instant {
        query = compare(query, backend, "scheduled_at", ">=", instant);
        query = compare(query, backend, "scheduled_at", "<=", instant);
    }
    if let Some(cursor) = search.after {
        query = past(query, backend, search, cursor);
    }
    query = match (search.sort, search.ascending) {
        (SortKey::Started, false) => query.order((runs::started_at.desc(), runs::id.desc())),
        (SortKey::Started, true) => query.order((runs::started_at.asc(), runs::id.asc())),
        (SortKey::Scheduled, false) => query.order((runs::scheduled_at.desc(), runs::id.desc())),
        (SortKey::Scheduled, true) => query.order((runs::scheduled_at.asc(), runs::id.asc())),
        (SortKey::Duration, ascending) => {
            let direction = if ascending { "ASC" } else { "DESC" };
            query.order(sql::<BigInt>(&format!(
                "COALESCE({}, -1) {direction}, id {direction}",
                duration_sql(backend)
            )))
        }
    };
    query
        .limit(search.limit.max(0))
        .select(RunBrief::as_select())
        .load(conn)
}

/// The sort key of `run` for `sort`, as a [`Cursor`] holds it.
pub(crate) fn cursor_of(run: &RunBrief, sort: SortKey) -> Cursor {
    let key = match sort {
        SortKey::Started => millis(run.started_at),
        SortKey::Scheduled => millis(run.scheduled_at),
        SortKey::Duration => run.duration().map_or(-1, |d| d.num_milliseconds().max(0)),
    };
    Cursor { key, id: run.id }
}

/// A run as a job's figures read it.
#[derive(Clone, Debug, PartialEq, Eq, Queryable)]
pub(crate) struct Sample {
    /// Its row.
    pub(crate) id: i64,
    /// Its instant.
    pub(crate) scheduled_at: NaiveDateTime,
    /// Its attempt (0: a missed instant).
    pub(crate) attempt: i32,
    /// When it started.
    pub(crate) started_at: NaiveDateTime,
    /// When it ended, if it has.
    pub(crate) finished_at: Option<NaiveDateTime>,
    /// How it ended.
    pub(crate) status: RunStatus,
    /// What started it.
    pub(crate) triggered_by: Trigger,
}

/// A window of a job's runs: how many are in each state, and the newest.
pub(crate) type Window = (Vec<(RunStatus, i64)>, Vec<Sample>);

/// How many of `job`'s runs that started at or after `from` ended in each
/// state (one indexed count), and the newest `cap` of them, newest first.
pub(crate) fn window(
    conn: &mut DbConnection,
    job: &str,
    from: NaiveDateTime,
    cap: i64,
) -> QueryResult<Window> {
    let backend = conn.backend();
    let base = || {
        compare(
            runs::replicron_runs
                .filter(runs::job.eq(job.to_string()))
                .into_boxed(),
            backend,
            "started_at",
            ">=",
            from,
        )
    };
    let of_job = runs::replicron_runs.filter(runs::job.eq(job.to_string()));
    let counts: Vec<(RunStatus, i64)> = if backend == Backend::Sqlite {
        of_job
            .filter(sql::<Bool>("started_at >= ").bind::<Text, _>(sqlite_text(from, Form::Low)))
            .group_by(runs::status)
            .select((runs::status, diesel::dsl::count_star()))
            .load(conn)?
    } else {
        of_job
            .filter(sql::<Bool>("started_at >= ").bind::<Timestamp, _>(from))
            .group_by(runs::status)
            .select((runs::status, diesel::dsl::count_star()))
            .load(conn)?
    };
    let sample = base()
        .order((runs::started_at.desc(), runs::id.desc()))
        .limit(cap)
        .select((
            runs::id,
            runs::scheduled_at,
            runs::attempt,
            runs::started_at,
            runs::finished_at,
            runs::status,
            runs::triggered_by,
        ))
        .load(conn)?;
    Ok((counts, sample))
}
