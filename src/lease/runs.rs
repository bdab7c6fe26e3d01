//! The statements that join a lease to its runs: the starts of the runs a
//! replica won at one instant, recorded from the lease rows that give each
//! its fence, and the runs of holders that lost their leases marked
//! abandoned: in one statement for every job of an instant, or, for an
//! `overlap = "allow"` job whose runs hold their instants' rows, by the
//! instants' rows whose leases have ended.

use diesel::prelude::*;

use super::{Lease, Nonce};
use crate::db::DbConnection;
use crate::db::clock::DbNow;
use crate::db::clock::to_db_time;
use crate::db::schema::replicron_locks::dsl as locks;
use crate::db::schema::replicron_runs::dsl as runs;
use crate::history::{RunRow, RunStatus};

/// Writes the `running` rows of the runs whose leases one claim statement
/// (`nonce`) won for `instance` at `instant`, in one INSERT … SELECT from
/// those lease rows (which give each run its fence; a row that no longer
/// holds the nonce, or whose lease has run out, gives no run: a record that
/// waited in the server past the lease would otherwise stand for a run
/// beside the next holder's), and reads them back in one SELECT: `(job,
/// run id)` for each row recorded under its lease's fence.
pub(crate) fn record_leased_runs_started(
    conn: &mut DbConnection,
    won: &[&Lease],
    nonce: Nonce,
    attempt: i32,
) -> QueryResult<Vec<(String, i64)>> {
    let Some(first) = won.first() else {
        return Ok(Vec::new());
    };
    let (instance, instant) = (first.instance.as_str(), first.instant);
    let jobs: Vec<&str> = won.iter().map(|l| l.job.as_str()).collect();
    let scheduled = to_db_time(instant);
    let held = locks::replicron_locks
        .filter(locks::name.eq_any(&jobs))
        .filter(locks::claim_nonce.eq(nonce.0))
        .filter(locks::locked_by.eq(instance))
        .filter(locks::last_scheduled_at.eq(scheduled.nullable()))
        .filter(locks::lock_until.gt(DbNow))
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
    let recorded: Vec<(String, i64, i64)> = runs::replicron_runs
        .select((runs::job, runs::id, runs::fence))
        .filter(runs::job.eq_any(&jobs))
        .filter(runs::scheduled_at.eq(scheduled))
        .filter(runs::attempt.eq(attempt))
        .filter(runs::scope.eq(""))
        .load(conn)?;
    Ok(recorded
        .into_iter()
        .filter(|(job, _, fence)| won.iter().any(|l| l.job == *job && l.fence == *fence))
        .map(|(job, id, _)| (job, id))
        .collect())
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

/// Marks `abandoned` every run of `job` (an `overlap = "allow"` job) still
/// recorded `running` whose lease, its instant's row
/// ([`super::instant_row`]), has ended by the database's clock under the
/// run's fence or a later one: nobody keeps it any more, so its holder
/// died, or was cut off and stopped it (its end, recorded later, replaces
/// the mark). A run held on the job's own row (a trigger's, a backfill's)
/// has no instant row and is left to the job's next claimant. Returns the
/// rows this call marked.
pub(crate) fn mark_abandoned_behind_instants(
    conn: &mut DbConnection,
    job: &str,
) -> QueryResult<Vec<RunRow>> {
    let running: Vec<RunRow> = runs::replicron_runs
        .select(RunRow::as_select())
        .filter(runs::job.eq(job))
        .filter(runs::status.eq(RunStatus::Running))
        .filter(runs::scope.eq(""))
        .load(conn)?;
    if running.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<String> = running
        .iter()
        .map(|run| super::instant_row(job, run.scheduled_at.and_utc()))
        .collect();
    let ended: Vec<(String, i64)> = locks::replicron_locks
        .select((locks::name, locks::fence))
        .filter(locks::name.eq_any(&rows))
        .filter(locks::lock_until.le(DbNow))
        .load(conn)?;
    let candidates = running
        .into_iter()
        .zip(rows)
        .filter(|(run, row)| {
            ended
                .iter()
                .any(|(name, fence)| name == row && run.fence <= *fence)
        })
        .map(|(run, _)| run)
        .collect();
    crate::history::mark_rows_abandoned(conn, candidates)
}
