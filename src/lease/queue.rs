//! The line of the runs that wait for a shared lock's or a limit's slot,
//! across the fleet: each waiter holds a lease row of its own, named by
//! the gate and its place in the line, kept alive while it waits and
//! deleted once it has its slot (or gives up). A waiter tries for a slot
//! only while fewer waiters are ahead of it than slots are free, so the
//! slots go to the waiters in the line's order, whichever replica's poll
//! comes first. A waiter that died keeps its place no longer than
//! [`WAITER_LEASE`].
//!
//! The order: first the runs that are not a backfill's (a backfill given
//! no priority of its own waits behind them), then the higher `priority`,
//! then the older instant.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

use crate::config::PRIORITY_RANGE;
use crate::db::DbConnection;
use crate::db::clock::{DbNow, DbNowPlus, to_db_time};
use crate::db::schema::replicron_locks::dsl as locks;

/// The prefix of the waiters' rows.
pub(crate) const WAITER_ROW_PREFIX: &str = "replicron.q.";

/// How long a waiter's place outlives its last keep-alive: a replica that
/// died waiting holds up the line no longer.
pub(crate) const WAITER_LEASE: Duration = Duration::from_secs(10);

/// A waiter's place in a gate's line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    /// A backfill's instant given no priority of its own: behind every
    /// other waiter.
    pub(crate) behind: bool,
    /// Higher goes first (within [`PRIORITY_RANGE`]).
    pub(crate) priority: i32,
    /// Then the older instant.
    pub(crate) instant: DateTime<Utc>,
}

/// The part of a waiter's row name that every waiter for `gate` (a gate's
/// first slot row) shares.
pub(crate) fn line_prefix(gate: &str) -> String {
    format!("{WAITER_ROW_PREFIX}{}.", crate::schedule::digest(gate))
}

/// The row of `job`'s run waiting at `place` for `gate`: the line's prefix,
/// then the place written so that the names sort in the line's order (all
/// of one width: tier, priority, the instant's milliseconds), then the
/// job. At most 62 characters.
pub(crate) fn waiter_row(gate: &str, job: &str, place: Place) -> String {
    let tier = u8::from(place.behind);
    let clamped = place
        .priority
        .clamp(*PRIORITY_RANGE.start(), *PRIORITY_RANGE.end());
    let rank = PRIORITY_RANGE.end() - clamped;
    let millis = u64::try_from(place.instant.timestamp_millis()).unwrap_or_default();
    format!(
        "{}{tier}{rank:04}{:012x}{}",
        line_prefix(gate),
        millis & 0xffff_ffff_ffff,
        crate::schedule::digest(job)
    )
}

/// Takes (or keeps) `row`'s place in its line for [`WAITER_LEASE`], for
/// `instance`, waiting for `instant`.
pub(crate) fn wait_in_line(
    conn: &mut DbConnection,
    row: &str,
    instance: &str,
    instant: DateTime<Utc>,
) -> QueryResult<()> {
    super::ensure_rows(conn, &[row])?;
    diesel::update(locks::replicron_locks.filter(locks::name.eq(row)))
        .set((
            locks::lock_until.eq(DbNowPlus::new(WAITER_LEASE)),
            locks::locked_at.eq(DbNow.nullable()),
            locks::locked_by.eq(instance),
            locks::last_scheduled_at.eq(to_db_time(instant).nullable()),
        ))
        .execute(conn)?;
    Ok(())
}

/// Leaves `row`'s line.
pub(crate) fn leave_line(conn: &mut DbConnection, row: &str) -> QueryResult<()> {
    diesel::delete(locks::replicron_locks.filter(locks::name.eq(row))).execute(conn)?;
    Ok(())
}

/// Whether `row` (a waiter's, in `prefix`'s line, which it may not have
/// joined yet) may try for one of `slots` now: fewer live waiters are
/// ahead of it than slots are free, by the database's clock. The names
/// are compared here, not by the database's collation.
pub(crate) fn may_try(
    conn: &mut DbConnection,
    prefix: &str,
    row: &str,
    slots: &[String],
) -> QueryResult<bool> {
    let waiting: Vec<String> = locks::replicron_locks
        .select(locks::name)
        .filter(locks::name.like(format!("{prefix}%")))
        .filter(locks::lock_until.gt(DbNow))
        .load(conn)?;
    let ahead = waiting
        .iter()
        .filter(|name| name.as_str() < row && name.starts_with(prefix))
        .count();
    if ahead == 0 {
        return Ok(true);
    }
    let held: Vec<(String, NaiveDateTime, NaiveDateTime)> = locks::replicron_locks
        .select((locks::name, locks::lock_until, DbNow))
        .filter(locks::name.eq_any(slots))
        .load(conn)?;
    let busy = held.iter().filter(|(_, until, now)| until > now).count();
    Ok(ahead < slots.len().saturating_sub(busy))
}

/// Deletes the waiters' rows whose lease ended before `older_than` ago
/// (their replicas died waiting).
pub(crate) fn prune_waiter_rows(
    conn: &mut DbConnection,
    older_than: Duration,
) -> QueryResult<usize> {
    diesel::delete(
        locks::replicron_locks
            .filter(locks::name.like(format!("{WAITER_ROW_PREFIX}%")))
            .filter(locks::lock_until.lt(DbNowPlus::minus(older_than))),
    )
    .execute(conn)
}
