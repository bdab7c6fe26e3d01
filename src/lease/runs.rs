//! The statements that join a lease to its runs: the starts of the runs a
//! replica won at one instant, recorded from the lease rows that give each
//! its fence, and the runs of holders that lost their leases marked
//! abandoned, each in one statement for every job of an instant.

use chrono::{DateTime, Utc};
use diesel::prelude::*;

use crate::db::DbConnection;
use crate::db::clock::DbNow;
use crate::db::clock::to_db_time;
use crate::db::schema::replicron_locks::dsl as locks;
use crate::db::schema::replicron_runs::dsl as runs;
use crate::history::{RunRow, RunStatus};

/// Writes the `running` rows of every run `instance` starts at `instant`
/// under the leases it holds for `jobs`, in one INSERT … SELECT from those
/// lease rows (which give each run its fence), and reads them back in one
/// SELECT: `(job, run id)` for each lease still held.
pub(crate) fn record_leased_runs_started(
    conn: &mut DbConnection,
    jobs: &[&str],
    instance: &str,
    instant: DateTime<Utc>,
    attempt: i32,
) -> QueryResult<Vec<(String, i64)>> {
    let scheduled = to_db_time(instant);
    let held = locks::replicron_locks
        .filter(locks::name.eq_any(jobs))
        .filter(locks::locked_by.eq(instance))
        .filter(locks::last_scheduled_at.eq(scheduled.nullable()))
        .select((
            locks::name,
            locks::last_scheduled_at.assume_not_null(),
            attempt.into_sql::<diesel::sql_types::Integer>(),
            locks::locked_by.assume_not_null(),
            locks::fence,
            DbNow,
            RunStatus::Running.into_sql::<diesel::sql_types::Text>(),
            "".into_sql::<diesel::sql_types::Text>(),
        ));
    diesel::insert_into(runs::replicron_runs)
        .values(held)
        .into_columns((
            runs::job,
            runs::scheduled_at,
            runs::attempt,
            runs::instance,
            runs::fence,
            runs::started_at,
            runs::status,
            runs::output,
        ))
        .execute(conn)?;
    runs::replicron_runs
        .select((runs::job, runs::id))
        .filter(runs::job.eq_any(jobs))
        .filter(runs::scheduled_at.eq(scheduled))
        .filter(runs::attempt.eq(attempt))
        .filter(runs::instance.eq(instance))
        .load(conn)
}

/// Marks `abandoned` every run of `jobs` still recorded `running` under a
/// fence older than its lease row's current one: their holders lost the
/// lease to a later claim. One read for all the jobs a replica won at one
/// instant (and one update per such run, which is rare). Returns the rows
/// this call marked.
pub(crate) fn mark_abandoned_behind_leases(
    conn: &mut DbConnection,
    jobs: &[&str],
) -> QueryResult<Vec<RunRow>> {
    let current_fence = locks::replicron_locks
        .select(locks::fence)
        .filter(locks::name.eq(runs::job))
        .single_value();
    let candidates = runs::replicron_runs
        .select(RunRow::as_select())
        .filter(runs::job.eq_any(jobs))
        .filter(runs::status.eq(RunStatus::Running))
        .filter(runs::fence.nullable().lt(current_fence))
        .load(conn)?;
    crate::history::mark_rows_abandoned(conn, candidates)
}
