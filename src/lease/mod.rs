//! The lease protocol: ShedLock-style `lock_until` rows on database time,
//! with a fencing token (`docs/design.md#the-lease-protocol`). The statements are here,
//! their async calls in [`store`](self); [`keeper`] keeps a won lease alive
//! while its run goes; [`runs`] joins leases to the runs they start.
//!
//! One function per statement. A replica runs instant T of a job only if
//! [`claim`] changed the job's row, and the row's `last_scheduled_at`
//! guarantees that no T is ever claimed twice, whatever the replicas' clocks
//! say: the only clock compared with a stored time is the database's.
//! Every statement runs alone, in its own autocommit transaction.

pub(crate) mod keeper;
pub(crate) mod runs;
mod store;

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

use crate::db::DbConnection;
use crate::db::cached;
use crate::db::clock::{At, DbNow, DbNowPlus, ReleasedUntil, database_now, to_db_time};
use crate::db::is_contention;
use crate::db::schema::replicron_locks::dsl as locks;

/// The claim's conditions on the rows `$names` selects: the lease has ended
/// by the database's clock, `$scheduled` is later than the last instant
/// claimed, and the database's clock has reached `$scheduled` (a replica
/// whose clock runs fast cannot start an instant early).
macro_rules! claimable {
    ($names:expr, $scheduled:expr) => {
        $names
            .and(locks::lock_until.le(DbNow))
            .and(
                locks::last_scheduled_at
                    .is_null()
                    .or(locks::last_scheduled_at.lt($scheduled.nullable())),
            )
            .and($scheduled.le(DbNow))
    };
    // A scheduled claim also needs `$scheduled` outside the job's last
    // pause, `[paused_at, paused_until)`: the instants the check for missed
    // instants leaves out, no more. An instant due before the pause (its
    // claim delayed past it) is still run, never silently dropped.
    ($names:expr, $scheduled:expr, unless_paused) => {
        claimable!($names, $scheduled).and(
            locks::paused_until
                .is_null()
                .or(locks::paused_until.le($scheduled.nullable()))
                .or(locks::paused_at.gt($scheduled.nullable())),
        )
    };
}

/// What a claim writes: the lease until the database's now plus `$length`,
/// the claimant, the instant, the next fence.
macro_rules! claim_changes {
    ($instance:expr, $scheduled:expr, $length:expr) => {
        (
            locks::lock_until.eq(DbNowPlus::new($length)),
            locks::locked_at.eq(DbNow.nullable()),
            locks::locked_by.eq($instance),
            locks::last_scheduled_at.eq($scheduled.nullable()),
            locks::fence.eq(locks::fence + 1),
        )
    };
}

/// The single claim's conditional UPDATE of one row, kept prepared.
macro_rules! claim_statement {
    ($name:expr, $instance:expr, $scheduled:expr, $length:expr $(, $pause:ident)?) => {
        cached::update(
            locks::replicron_locks,
            claim_changes!($instance, $scheduled, $length),
            claimable!(locks::name.eq($name), $scheduled $(, $pause)?),
        )
    };
}

/// Whether a claim heeds the job's pause: the scheduler's claims of
/// instants do; an operator's `trigger --force`, `exec` and the daemon's own
/// rows do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pauses {
    /// A paused job's instants are not claimed: [`Claim::Paused`].
    Heeded,
    /// The claim is made as if the job were not paused.
    Ignored,
}

/// A won claim: instant `instant` of `job` belongs to `instance` under
/// `fence` until the lease ends or is released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Lease {
    /// The job.
    pub(crate) job: String,
    /// The scheduled instant this lease is for.
    pub(crate) instant: DateTime<Utc>,
    /// Who holds it.
    pub(crate) instance: String,
    /// The fencing token: the row's `fence` after this claim.
    pub(crate) fence: i64,
}

/// A lease row as stored.
#[derive(Clone, Debug, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = crate::db::schema::replicron_locks)]
pub(crate) struct LockRow {
    /// Job name.
    pub(crate) name: String,
    /// The lease ends at this database time (UTC).
    pub(crate) lock_until: NaiveDateTime,
    /// Database time of the last claim.
    pub(crate) locked_at: Option<NaiveDateTime>,
    /// Instance id of the last claimant.
    pub(crate) locked_by: Option<String>,
    /// The instant of the last claim.
    pub(crate) last_scheduled_at: Option<NaiveDateTime>,
    /// Claims so far.
    pub(crate) fence: i64,
    /// Database time the row was created (unknown for rows older than the
    /// column).
    pub(crate) created_at: Option<NaiveDateTime>,
    /// Every instant up to this database time has been checked for a miss.
    pub(crate) missed_checked_until: Option<NaiveDateTime>,
    /// When the job was last paused.
    pub(crate) paused_at: Option<NaiveDateTime>,
    /// The pause's end: the scheduler claims no instant from `paused_at`
    /// up to (not including) this.
    pub(crate) paused_until: Option<NaiveDateTime>,
    /// Who paused it.
    pub(crate) paused_by: Option<String>,
    /// Why.
    pub(crate) paused_reason: Option<String>,
}

/// Whether a pause from `paused_at` until `paused_until` (the lease row's
/// columns) covers instant `t`: `paused_at <= t < paused_until`, the rule
/// of the scheduler's claims and of the check for missed instants alike.
pub(crate) fn pause_covers(
    paused_at: Option<NaiveDateTime>,
    paused_until: Option<NaiveDateTime>,
    t: NaiveDateTime,
) -> bool {
    paused_until.is_some_and(|until| t < until) && paused_at.is_none_or(|at| at <= t)
}

impl LockRow {
    /// Whether the job is paused at database time `now`, and until when
    /// (`None`: until resumed).
    pub(crate) fn paused_at_time(&self, now: NaiveDateTime) -> Option<Option<DateTime<Utc>>> {
        let until = self.paused_until.filter(|until| *until > now)?;
        Some((until < crate::db::clock::far_future()).then(|| until.and_utc()))
    }

    /// "paused by … since … until …: reason", for messages.
    pub(crate) fn describe_pause(&self, until: Option<DateTime<Utc>>) -> String {
        let mut text = format!(
            "paused by {} since {}",
            self.paused_by.as_deref().unwrap_or("?"),
            self.paused_at
                .map_or_else(|| "?".to_string(), crate::history::rfc3339)
        );
        match until {
            Some(until) => text.push_str(&format!(
                " until {}",
                crate::history::rfc3339(until.naive_utc())
            )),
            None => text.push_str(" until resumed"),
        }
        if let Some(reason) = self.paused_reason.as_deref().filter(|r| !r.is_empty()) {
            text.push_str(&format!(" ({reason})"));
        }
        text
    }
}

/// Creates the lease row of each job that has none. Safe when every replica
/// starts at once: a row another replica inserted first counts as created.
/// Returns how many rows this call inserted.
pub(crate) fn ensure_rows(conn: &mut DbConnection, jobs: &[&str]) -> QueryResult<usize> {
    let existing: Vec<String> = locks::replicron_locks
        .select(locks::name)
        .filter(locks::name.eq_any(jobs))
        .load(conn)?;
    let mut inserted = 0;
    for job in jobs
        .iter()
        .filter(|job| !existing.iter().any(|e| e == *job))
    {
        inserted += insert_row(conn, job)?;
    }
    Ok(inserted)
}

fn insert_row(conn: &mut DbConnection, job: &str) -> QueryResult<usize> {
    let result = diesel::insert_into(locks::replicron_locks)
        .values((
            locks::name.eq(job),
            locks::lock_until.eq(At::epoch()),
            locks::locked_at.eq(None::<NaiveDateTime>),
            locks::locked_by.eq(None::<String>),
            locks::last_scheduled_at.eq(None::<NaiveDateTime>),
            locks::fence.eq(0_i64),
            locks::created_at.eq(DbNow.nullable()),
        ))
        .execute(conn);
    match result {
        Err(e) if is_contention(&e) => Ok(0),
        other => other,
    }
}

/// What a claim came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This replica won the instant and runs it.
    Won(Lease),
    /// This instant, or a later one, was claimed already: it is never this
    /// replica's.
    Taken,
    /// The instant is unclaimed, but the lease is held (a run of the job
    /// is going, or its release has not landed, or `lock_at_least_for`
    /// keeps it): it can be claimed only once the lease ends.
    Held(Holder),
    /// The database's clock has not reached the instant yet (this
    /// replica's clock is ahead of it): try again after `wait`.
    NotYet {
        /// How far the database's clock is from the instant.
        wait: Duration,
    },
    /// The row was claimable, but this statement did not change it: a
    /// conflicting write won certification on another node, or the
    /// statement failed with a deadlock or serialization error. Claim again.
    Contended,
    /// The job is paused (`replicron pause`) for this instant: it is not
    /// run, and not missed.
    Paused {
        /// Who paused it.
        by: Option<String>,
        /// Why.
        reason: Option<String>,
    },
}

/// Who holds a lease, as its row says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    /// The holder's instance id.
    pub(crate) by: Option<String>,
    /// The instant the holder claimed.
    pub(crate) instant: Option<DateTime<Utc>>,
    /// The holder's fence.
    pub(crate) fence: i64,
    /// When it claimed, by the database's clock: a run claimed before an
    /// instant may have been going when the instant came (an overrun); one
    /// claimed after it started late, and the instant waits for it.
    pub(crate) claimed_at: Option<DateTime<Utc>>,
    /// When the lease ends unless extended or released.
    pub(crate) until: DateTime<Utc>,
}

#[cfg(test)]
impl Claim {
    /// The lease, if won.
    pub(crate) fn won(self) -> Option<Lease> {
        match self {
            Claim::Won(lease) => Some(lease),
            _ => None,
        }
    }
}

/// Claims instant `instant` of `job` for `instance`: the one conditional
/// UPDATE of the lease protocol (`docs/design.md`). Only [`Claim::Won`] lets this replica run it. On
/// PostgreSQL and SQLite the UPDATE returns the new fence; on MariaDB/MySQL
/// its row count decides and the fence is read back.
///
/// A row found missing is created and the claim tried once more; a
/// contention error is [`Claim::Taken`]; any other error is returned.
pub(crate) fn claim(
    conn: &mut DbConnection,
    job: &str,
    instance: &str,
    instant: DateTime<Utc>,
    lock_at_most_for: Duration,
) -> QueryResult<Claim> {
    claim_one(
        conn,
        job,
        instance,
        instant,
        lock_at_most_for,
        Pauses::Heeded,
        true,
    )
}

fn claim_one(
    conn: &mut DbConnection,
    job: &str,
    instance: &str,
    instant: DateTime<Utc>,
    lock_at_most_for: Duration,
    pauses: Pauses,
    create_missing: bool,
) -> QueryResult<Claim> {
    let scheduled = to_db_time(instant);
    let Some(fence) = claim_returning(conn, job, instance, scheduled, lock_at_most_for, pauses)?
    else {
        // No RETURNING (MariaDB/MySQL): the UPDATE, then a read of the fence.
        let mut claims = claim_rows(
            conn,
            &[(job, lock_at_most_for)],
            instance,
            instant,
            pauses,
            create_missing,
        )?;
        return Ok(claims.pop().unwrap_or(Claim::Taken));
    };
    if let Some(fence) = fence {
        return Ok(Claim::Won(Lease {
            job: job.to_string(),
            instant,
            instance: instance.to_string(),
            fence,
        }));
    }
    // Not won: the row tells whether the instant is taken, not yet due, or
    // waits for a held lease.
    let row: Option<RowState> = locks::replicron_locks
        .select(ROW_STATE)
        .filter(locks::name.eq(job))
        .get_result(conn)
        .optional()?;
    Ok(match row {
        Some(state) => not_won(&state, scheduled, pauses),
        // No cached "the row exists": a missing row is created and the
        // claim tried once more.
        None if create_missing => {
            insert_row(conn, job)?;
            claim_one(
                conn,
                job,
                instance,
                instant,
                lock_at_most_for,
                pauses,
                false,
            )?
        }
        None => Claim::Taken,
    })
}

/// What a claim reads back of a lease row: its name, holder, last claimed
/// instant, fence, claim time and end, the database's clock, and its pause
/// (since, until, by, why).
type RowState = (
    String,
    Option<String>,
    Option<NaiveDateTime>,
    i64,
    Option<NaiveDateTime>,
    NaiveDateTime,
    NaiveDateTime,
    (
        Option<NaiveDateTime>,
        Option<NaiveDateTime>,
        Option<String>,
        Option<String>,
    ),
);

/// The pause columns a claim reads back.
type PauseColumns = (
    locks::paused_at,
    locks::paused_until,
    locks::paused_by,
    locks::paused_reason,
);

const ROW_STATE: (
    locks::name,
    locks::locked_by,
    locks::last_scheduled_at,
    locks::fence,
    locks::locked_at,
    locks::lock_until,
    DbNow,
    PauseColumns,
) = (
    locks::name,
    locks::locked_by,
    locks::last_scheduled_at,
    locks::fence,
    locks::locked_at,
    locks::lock_until,
    DbNow,
    (
        locks::paused_at,
        locks::paused_until,
        locks::paused_by,
        locks::paused_reason,
    ),
);

/// What a claim of `scheduled` that was not won came to, given the row as
/// read with the database's clock: taken if that instant or a later one
/// was claimed, not yet if the database's clock is short of the instant,
/// held if the lease has not ended, else contended. A claim that heeds
/// pauses is paused if the row's pause covers `scheduled`.
fn not_won(row: &RowState, scheduled: At, pauses: Pauses) -> Claim {
    let (_, _, last_claimed, fence, locked_at, lock_until, now, pause) = row;
    let (paused_at, paused_until, by, reason) = pause;
    match last_claimed {
        Some(last) if *last >= scheduled.0 => Claim::Taken,
        _ if pauses == Pauses::Heeded && pause_covers(*paused_at, *paused_until, scheduled.0) => {
            Claim::Paused {
                by: by.clone(),
                reason: reason.clone(),
            }
        }
        _ if *now < scheduled.0 => Claim::NotYet {
            wait: (scheduled.0 - *now).to_std().unwrap_or_default(),
        },
        _ if lock_until > now => Claim::Held(Holder {
            by: row.1.clone(),
            instant: last_claimed.map(|t| t.and_utc()),
            fence: *fence,
            claimed_at: locked_at.map(|t| t.and_utc()),
            until: lock_until.and_utc(),
        }),
        _ => Claim::Contended,
    }
}

/// The claim's conditional UPDATE with `RETURNING fence`, where the backend
/// has it (PostgreSQL, SQLite): `Some(Some(fence))` when won, `Some(None)`
/// when not (a contention error included), `None` on MariaDB/MySQL, which
/// has no `UPDATE … RETURNING`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn claim_returning(
    conn: &mut DbConnection,
    job: &str,
    instance: &str,
    scheduled: At,
    length: Duration,
    pauses: Pauses,
) -> QueryResult<Option<Option<i64>>> {
    macro_rules! update_returning_fence {
        ($conn:expr) => {
            match pauses {
                Pauses::Heeded => claim_statement!(job, instance, scheduled, length, unless_paused)
                    .returning(locks::fence)
                    .get_result::<i64>($conn)
                    .optional(),
                Pauses::Ignored => claim_statement!(job, instance, scheduled, length)
                    .returning(locks::fence)
                    .get_result::<i64>($conn)
                    .optional(),
            }
        };
    }
    let result = match conn {
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(conn) => update_returning_fence!(conn),
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(conn) => update_returning_fence!(conn),
        #[cfg(feature = "mysql")]
        DbConnection::Mysql(_) => return Ok(None),
    };
    match result {
        Ok(fence) => Ok(Some(fence)),
        Err(e) if is_contention(&e) => Ok(Some(None)),
        Err(e) => Err(e),
    }
}

/// Built for MariaDB/MySQL alone: no backend with `UPDATE … RETURNING`.
#[cfg(not(any(feature = "postgres", feature = "sqlite")))]
fn claim_returning(
    _conn: &mut DbConnection,
    _job: &str,
    _instance: &str,
    _scheduled: At,
    _length: Duration,
    _pauses: Pauses,
) -> QueryResult<Option<Option<i64>>> {
    Ok(None)
}

/// Claims `job` at the database's current time: for runs that have no
/// scheduled instant (`trigger`, `exec`, retention). Later callers get later
/// instants, so a released lease can be claimed again. A pause is not
/// heeded: `trigger` asks for `--force` first.
pub(crate) fn claim_at_database_now(
    conn: &mut DbConnection,
    job: &str,
    instance: &str,
    lock_at_most_for: Duration,
) -> QueryResult<Claim> {
    // Contended means another statement got in the way of a claimable
    // row: read the clock again and try once more.
    let mut claimed = Claim::Contended;
    for _ in 0..5 {
        let now = database_now(conn)?;
        claimed = claim_one(
            conn,
            job,
            instance,
            now,
            lock_at_most_for,
            Pauses::Ignored,
            true,
        )?;
        if claimed != Claim::Contended {
            break;
        }
    }
    Ok(claimed)
}

/// Claims `instant` of several jobs at once, for replicas where many jobs
/// share an instant: one conditional UPDATE per lease length over all the
/// names (each row under exactly the conditions of [`claim`]), then one read
/// of which leases this instance won, by fence. Returns one [`Claim`] per
/// job, in order.
///
/// A row this instance won shows its id and the instant; so would a row it
/// had won for the same instant before, so a batch must not ask again for
/// an instant this instance already won (the daemon never does). A single
/// claim is decided by its own UPDATE (the fence it returns, or its row
/// count) and has no such limit.
pub(crate) fn claim_many(
    conn: &mut DbConnection,
    jobs: &[(&str, Duration)],
    instance: &str,
    instant: DateTime<Utc>,
) -> QueryResult<Vec<Claim>> {
    claim_rows(conn, jobs, instance, instant, Pauses::Heeded, true)
}

fn claim_rows(
    conn: &mut DbConnection,
    jobs: &[(&str, Duration)],
    instance: &str,
    instant: DateTime<Utc>,
    pauses: Pauses,
    create_missing: bool,
) -> QueryResult<Vec<Claim>> {
    let scheduled = to_db_time(instant);
    let mut lengths: Vec<Duration> = jobs.iter().map(|(_, d)| *d).collect();
    lengths.sort();
    lengths.dedup();
    let mut changed = 0;
    for length in lengths {
        let names: Vec<&str> = jobs
            .iter()
            .filter(|(_, d)| *d == length)
            .map(|(n, _)| *n)
            .collect();
        // One name: the single claim's statement, kept prepared. A batch's
        // SQL has as many shapes as there are batch sizes: prepared each time.
        let result = match (&names[..], pauses) {
            ([name], Pauses::Heeded) => {
                claim_statement!(*name, instance, scheduled, length, unless_paused).execute(conn)
            }
            ([name], Pauses::Ignored) => {
                claim_statement!(*name, instance, scheduled, length).execute(conn)
            }
            (_, Pauses::Heeded) => diesel::update(locks::replicron_locks)
                .filter(claimable!(
                    locks::name.eq_any(&names),
                    scheduled,
                    unless_paused
                ))
                .set(claim_changes!(instance, scheduled, length))
                .execute(conn),
            (_, Pauses::Ignored) => diesel::update(locks::replicron_locks)
                .filter(claimable!(locks::name.eq_any(&names), scheduled))
                .set(claim_changes!(instance, scheduled, length))
                .execute(conn),
        };
        match result {
            Ok(n) => changed += n,
            // Another replica's write got in the way: for these rows this
            // round is lost; the read below tells each row's state.
            Err(e) if is_contention(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let names: Vec<&str> = jobs.iter().map(|(n, _)| *n).collect();
    let rows: Vec<RowState> = match names[..] {
        [name] => locks::replicron_locks
            .select(ROW_STATE)
            .filter(locks::name.eq(name))
            .load(conn)?,
        _ => locks::replicron_locks
            .select(ROW_STATE)
            .filter(locks::name.eq_any(&names))
            .load(conn)?,
    };
    let mut claims = Vec::with_capacity(jobs.len());
    for (job, length) in jobs {
        let claim = match rows.iter().find(|(name, ..)| name == job) {
            // The instant is this instance's exactly when the row names it
            // and this instance: instants only grow, so no one else's claim
            // and no earlier claim of ours can look like this.
            Some((_, Some(by), Some(last), fence, ..))
                if by == instance && *last == scheduled.0 && (jobs.len() > 1 || changed == 1) =>
            {
                Claim::Won(Lease {
                    job: (*job).to_string(),
                    instant,
                    instance: instance.to_string(),
                    fence: *fence,
                })
            }
            Some(state) => not_won(state, scheduled, pauses),
            // No cached "the row exists": a missing row is created and the
            // claim tried once more.
            None if create_missing => {
                insert_row(conn, job)?;
                let retried =
                    claim_rows(conn, &[(job, *length)], instance, instant, pauses, false)?;
                retried.into_iter().next().unwrap_or(Claim::Taken)
            }
            None => Claim::Taken,
        };
        claims.push(claim);
    }
    Ok(claims)
}

/// Keeps a held lease alive for another `lock_at_most_for`. `false` means
/// the lease was lost (expired, or claimed by someone else).
pub(crate) fn extend(
    conn: &mut DbConnection,
    lease: &Lease,
    lock_at_most_for: Duration,
) -> QueryResult<bool> {
    let changed = cached::update(
        locks::replicron_locks,
        locks::lock_until.eq(DbNowPlus::new(lock_at_most_for)),
        locks::name
            .eq(&lease.job)
            .and(locks::locked_by.eq(&lease.instance))
            .and(locks::fence.eq(lease.fence))
            .and(locks::lock_until.gt(DbNow)),
    )
    .execute(conn)?;
    Ok(changed == 1)
}

/// Ends a lease: it stays held until `locked_at + lock_at_least_for` if that
/// is later than now. Only the holder with the right fence can release;
/// `false` means this lease was no longer the row's.
pub(crate) fn release(
    conn: &mut DbConnection,
    lease: &Lease,
    lock_at_least_for: Duration,
) -> QueryResult<bool> {
    let changed = cached::update(
        locks::replicron_locks,
        locks::lock_until.eq(ReleasedUntil::new(lock_at_least_for)),
        locks::name
            .eq(&lease.job)
            .and(locks::locked_by.eq(&lease.instance))
            .and(locks::fence.eq(lease.fence)),
    )
    .execute(conn)?;
    Ok(changed == 1)
}

/// Ends whatever lease `job` has, now (the operator's `unlock`). The claimed
/// instant is kept, so the instant that was running is never run again.
pub(crate) fn force_unlock(conn: &mut DbConnection, job: &str) -> QueryResult<bool> {
    let changed = diesel::update(locks::replicron_locks.filter(locks::name.eq(job)))
        .set(locks::lock_until.eq(DbNow))
        .execute(conn)?;
    Ok(changed == 1)
}

/// Pauses `job` from the database's now until `until` (`None`: until
/// resumed): the scheduler claims no instant of it in between.
/// Returns `false` if the job has no lease row.
pub(crate) fn pause(
    conn: &mut DbConnection,
    job: &str,
    until: Option<DateTime<Utc>>,
    by: &str,
    reason: Option<&str>,
) -> QueryResult<bool> {
    let until = until.map_or(At(crate::db::clock::far_future()), to_db_time);
    let changed = diesel::update(locks::replicron_locks.filter(locks::name.eq(job)))
        .set((
            locks::paused_at.eq(DbNow.nullable()),
            locks::paused_until.eq(until.nullable()),
            locks::paused_by.eq(by),
            locks::paused_reason.eq(reason),
        ))
        .execute(conn)?;
    Ok(changed == 1)
}

/// Ends `job`'s pause now: its instants from the database's now on are
/// claimed again; those of the pause never are. Returns `false` if it was
/// not paused.
pub(crate) fn resume(conn: &mut DbConnection, job: &str) -> QueryResult<bool> {
    let changed = diesel::update(
        locks::replicron_locks
            .filter(locks::name.eq(job))
            .filter(locks::paused_until.gt(DbNow.nullable())),
    )
    .set(locks::paused_until.eq(DbNow.nullable()))
    .execute(conn)?;
    Ok(changed == 1)
}

/// The jobs among `jobs` paused at the database's now.
pub(crate) fn paused_jobs(conn: &mut DbConnection, jobs: &[&str]) -> QueryResult<Vec<String>> {
    locks::replicron_locks
        .select(locks::name)
        .filter(locks::name.eq_any(jobs))
        .filter(locks::paused_until.gt(DbNow.nullable()))
        .load(conn)
}

/// The lease row of `job`, if it has one.
pub(crate) fn find_lock(conn: &mut DbConnection, job: &str) -> QueryResult<Option<LockRow>> {
    locks::replicron_locks
        .filter(locks::name.eq(job))
        .select(LockRow::as_select())
        .first(conn)
        .optional()
}

/// Every lease row, by name.
pub(crate) fn list_locks(conn: &mut DbConnection) -> QueryResult<Vec<LockRow>> {
    locks::replicron_locks
        .order(locks::name)
        .select(LockRow::as_select())
        .load(conn)
}

/// Whether `job`'s lease is held at the database's current time.
pub(crate) fn is_held(conn: &mut DbConnection, job: &str) -> QueryResult<bool> {
    diesel::select(diesel::dsl::exists(
        locks::replicron_locks
            .filter(locks::name.eq(job))
            .filter(locks::lock_until.gt(DbNow)),
    ))
    .get_result(conn)
}

/// Records that every instant of `job` up to `until` has been checked for
/// a miss.
pub(crate) fn set_missed_checked(
    conn: &mut DbConnection,
    job: &str,
    until: DateTime<Utc>,
) -> QueryResult<usize> {
    diesel::update(locks::replicron_locks.filter(locks::name.eq(job)))
        .set(locks::missed_checked_until.eq(to_db_time(until).nullable()))
        .execute(conn)
}

#[cfg(test)]
mod bench;
#[cfg(test)]
mod tests;
