//! A backfill's progress where the whole fleet reads it: one row of
//! `replicron_backfills` per backfill in progress, written by the process
//! that runs it (its range, its instants, how many are done and failed,
//! the instant it is at) and deleted at its end. A row is in progress while
//! its job's backfill lease row (`replicron.backfill.JOB`) is held under
//! the row's fence: one left by a process that died stops counting when
//! that lease runs out, and is deleted by the job's next backfill.
//!
//! The same rows bound the fleet's backfills (`[daemon]
//! max_backfill_instants`): a backfill writes its row, then sums the
//! instants left of every backfill in progress, its own included, and
//! withdraws if that is over the limit. Of two backfills that begin at
//! once, the later to write its row sees the other's: they never both
//! stay over the limit.

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

use crate::db::clock::{DbNow, to_db_time};
use crate::db::schema::replicron_backfills::dsl as b;
use crate::db::schema::replicron_locks::dsl as locks;
use crate::db::{DbError, Store};
use crate::lease::LockRow;
use crate::schedule::fmt_instant;

/// A row of `replicron_backfills`.
#[derive(Clone, Debug, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = crate::db::schema::replicron_backfills)]
pub(crate) struct ProgressRow {
    /// The backfill's id.
    pub id: i64,
    /// Its job.
    pub job: String,
    /// The fence of its job's backfill lease row.
    pub fence: i64,
    /// Its range's start.
    pub range_from: NaiveDateTime,
    /// Its range's end, not included.
    pub range_to: NaiveDateTime,
    /// Its instants.
    pub total: i64,
    /// The instants it is through.
    pub done: i64,
    /// Of those, the ones that did not succeed.
    pub failed: i64,
    /// The instant it runs now.
    pub current_instant: Option<NaiveDateTime>,
    /// The process that runs it.
    pub started_by: String,
    /// When it began.
    pub started_at: NaiveDateTime,
    /// When it last moved on.
    pub updated_at: NaiveDateTime,
}

impl ProgressRow {
    /// Its instants not yet done.
    pub(crate) fn left(&self) -> i64 {
        (self.total - self.done).max(0)
    }

    /// Whether it is in progress at `now`, by the lease rows `rows`.
    pub(crate) fn in_progress(&self, rows: &[LockRow], now: DateTime<Utc>) -> bool {
        let name = super::in_progress_row(&self.job);
        rows.iter().any(|row| {
            row.name == name && row.fence == self.fence && row.lock_until.and_utc() > now
        })
    }
}

/// What a backfill asks to begin with.
#[derive(Clone, Debug)]
pub(crate) struct Begin {
    /// Its range.
    pub(crate) from: DateTime<Utc>,
    /// Its end, not included.
    pub(crate) to: DateTime<Utc>,
    /// How many instants it has.
    pub(crate) total: usize,
    /// `[daemon] max_backfill_instants`.
    pub(crate) limit: u64,
}

/// Writes the row of a backfill of `job` under its backfill lease's
/// `fence`, run by `by`, deleting the rows its job's earlier backfills
/// left; its id.
pub(crate) async fn insert(
    store: &Store,
    job: &str,
    fence: i64,
    by: &str,
    begin: &Begin,
) -> Result<i64, DbError> {
    let (job, by) = (job.to_string(), by.to_string());
    let (from, to) = (to_db_time(begin.from), to_db_time(begin.to));
    let total = i64::try_from(begin.total).unwrap_or(i64::MAX);
    store
        .call("recording the backfill's progress", move |conn| {
            diesel::delete(b::replicron_backfills.filter(b::job.eq(&job))).execute(conn)?;
            diesel::insert_into(b::replicron_backfills)
                .values((
                    b::job.eq(&job),
                    b::fence.eq(fence),
                    b::range_from.eq(from.0),
                    b::range_to.eq(to.0),
                    b::total.eq(total),
                    b::done.eq(0_i64),
                    b::failed.eq(0_i64),
                    b::started_by.eq(&by),
                    b::started_at.eq(DbNow),
                    b::updated_at.eq(DbNow),
                ))
                .execute(conn)?;
            b::replicron_backfills
                .select(b::id)
                .filter(b::job.eq(&job))
                .filter(b::fence.eq(fence))
                .order(b::id.desc())
                .first(conn)
        })
        .await
}

/// Every row, in id order (those not in progress too).
pub(crate) async fn list(store: &Store) -> Result<Vec<ProgressRow>, DbError> {
    store
        .call("reading the backfills' progress", |conn| {
            b::replicron_backfills
                .select(ProgressRow::as_select())
                .order(b::id)
                .load(conn)
        })
        .await
}

/// The backfills in progress at `now`, by the lease rows `rows`.
pub(crate) fn in_progress(
    progress: Vec<ProgressRow>,
    rows: &[LockRow],
    now: DateTime<Utc>,
) -> Vec<ProgressRow> {
    progress
        .into_iter()
        .filter(|p| p.in_progress(rows, now))
        .collect()
}

/// The backfills in progress now, read from the database.
pub(crate) async fn read_in_progress(store: &Store) -> Result<Vec<ProgressRow>, DbError> {
    let progress = list(store).await?;
    let rows = store.list_locks().await?;
    let now = store.database_now().await?;
    Ok(in_progress(progress, &rows, now))
}

/// Why a backfill of `asked` more instants would go over `limit`, with
/// `running` in progress (its own row left out); `None` if it fits.
pub(crate) fn over_limit(limit: u64, asked: usize, running: &[ProgressRow]) -> Option<String> {
    let left: i64 = running.iter().map(ProgressRow::left).sum();
    let total = u64::try_from(left).unwrap_or(0) + asked as u64;
    if total <= limit {
        return None;
    }
    let listed = if running.is_empty() {
        "none in progress".to_string()
    } else {
        let each: Vec<String> = running
            .iter()
            .map(|p| {
                format!(
                    "{} left of backfill {} of {} (by {})",
                    p.left(),
                    p.id,
                    p.job,
                    p.started_by
                )
            })
            .collect();
        format!("{left} in progress: {}", each.join(", "))
    };
    Some(format!(
        "its {asked} instants would make {total}, over [daemon] max_backfill_instants = {limit} across the fleet ({listed}); wait for those to end, cancel one, or raise the limit"
    ))
}

/// Records that backfill `id` runs `current` now (`None`: between
/// instants), with `done` of its instants through, `failed` of them not
/// succeeded. A database that does not answer loses only this step's
/// figures: the next one writes them whole.
pub(crate) async fn step(
    store: &Store,
    id: i64,
    current: Option<DateTime<Utc>>,
    done: usize,
    failed: usize,
) {
    let current = current.map(|c| to_db_time(c).0);
    let (done, failed) = (done as i64, failed as i64);
    if let Err(e) = store
        .call("recording the backfill's progress", move |conn| {
            diesel::update(b::replicron_backfills.filter(b::id.eq(id)))
                .set((
                    b::current_instant.eq(current),
                    b::done.eq(done),
                    b::failed.eq(failed),
                    b::updated_at.eq(DbNow),
                ))
                .execute(conn)
        })
        .await
    {
        tracing::debug!(id, "the backfill's progress is not recorded: {e}");
    }
}

/// Deletes backfill `id`'s row: it ended.
pub(crate) async fn delete(store: &Store, id: i64) {
    if let Err(e) = store
        .call("deleting the backfill's progress", move |conn| {
            diesel::delete(b::replicron_backfills.filter(b::id.eq(id))).execute(conn)
        })
        .await
    {
        tracing::warn!(
            id,
            "the backfill's progress row is left; its job's next backfill deletes it: {e}"
        );
    }
}

/// Cancels backfill `id` if it is in progress: ends its job's backfill
/// lease if it is still this backfill's (its fence). The backfill, if it
/// was in progress.
pub(crate) async fn cancel(store: &Store, id: i64) -> Result<Option<ProgressRow>, DbError> {
    let Some(row) = read_in_progress(store)
        .await?
        .into_iter()
        .find(|p| p.id == id)
    else {
        return Ok(None);
    };
    let (name, fence) = (super::in_progress_row(&row.job), row.fence);
    let ended = store
        .call("ending the backfill's lease", move |conn| {
            diesel::update(
                locks::replicron_locks
                    .filter(locks::name.eq(&name))
                    .filter(locks::fence.eq(fence)),
            )
            .set(locks::lock_until.eq(DbNow))
            .execute(conn)
        })
        .await?;
    Ok((ended == 1).then_some(row))
}

/// A backfill in progress, as `status`, the API and the dashboard show it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Progress {
    /// Its id (`replicron backfill --cancel ID`).
    pub(crate) id: i64,
    /// Its range (RFC 3339).
    pub(crate) from: String,
    /// Its end, not included.
    pub(crate) to: String,
    /// Its instants.
    pub(crate) total: i64,
    /// The instants it is through (run, or skipped as succeeded before).
    pub(crate) done: i64,
    /// Of those, the ones whose run did not succeed.
    pub(crate) failed: i64,
    /// The instant it runs now, if one.
    pub(crate) current: Option<String>,
    /// When it last moved on.
    pub(crate) updated_at: String,
}

impl From<&ProgressRow> for Progress {
    fn from(row: &ProgressRow) -> Self {
        let at = |t: NaiveDateTime| fmt_instant(t.and_utc());
        Progress {
            id: row.id,
            from: at(row.range_from),
            to: at(row.range_to),
            total: row.total,
            done: row.done,
            failed: row.failed,
            current: row.current_instant.map(at),
            updated_at: at(row.updated_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, job: &str, total: i64, done: i64) -> ProgressRow {
        let t = DateTime::<Utc>::UNIX_EPOCH.naive_utc();
        ProgressRow {
            id,
            job: job.into(),
            fence: 3,
            range_from: t,
            range_to: t,
            total,
            done,
            failed: 0,
            current_instant: None,
            started_by: "r0".into(),
            started_at: t,
            updated_at: t,
        }
    }

    /// The limit counts the instants left of the backfills in progress
    /// and the new one's, and the refusal names the limit and each one.
    #[test]
    fn the_fleets_backfilled_instants_are_bounded() {
        assert_eq!(over_limit(100, 100, &[]), None);
        assert!(over_limit(100, 101, &[]).is_some());
        let running = [row(4, "tick", 80, 30), row(5, "tock", 10, 0)];
        assert_eq!(over_limit(100, 40, &running), None);
        let refused = over_limit(100, 41, &running).expect("over");
        assert!(refused.contains("max_backfill_instants = 100"), "{refused}");
        assert!(
            refused.contains("50 left of backfill 4 of tick (by r0)"),
            "{refused}"
        );
        assert!(refused.contains("60 in progress"), "{refused}");
    }
}
