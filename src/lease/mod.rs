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
pub(crate) mod queue;
pub(crate) mod runs;
mod store;

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

use crate::db::DbConnection;
use crate::db::batch;
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
/// the claimant, the instant, the next fence, and the statement's nonce.
macro_rules! claim_changes {
    ($instance:expr, $scheduled:expr, $length:expr, $nonce:expr) => {
        (
            locks::lock_until.eq(DbNowPlus::new($length)),
            locks::locked_at.eq(DbNow.nullable()),
            locks::locked_by.eq($instance),
            locks::last_scheduled_at.eq($scheduled.nullable()),
            locks::fence.eq(locks::fence + 1),
            locks::claim_nonce.eq(Some($nonce)),
        )
    };
}

/// The single claim's conditional UPDATE of one row, kept prepared.
macro_rules! claim_statement {
    ($name:expr, $instance:expr, $scheduled:expr, $length:expr, $nonce:expr $(, $pause:ident)?) => {
        cached::update(
            locks::replicron_locks,
            claim_changes!($instance, $scheduled, $length, $nonce),
            claimable!(locks::name.eq($name), $scheduled $(, $pause)?),
        )
    };
}

/// A claim statement's own number, written with its claim: the claim is
/// won exactly when the row holds it afterwards. Random, so that no other
/// statement (of another replica, of a process started again under the
/// same instance id, or of this one asking again) writes the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Nonce(pub(crate) i64);

impl Nonce {
    /// A fresh one.
    pub(crate) fn new() -> Self {
        Nonce((rand::random::<u64>() >> 1) as i64)
    }
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
    /// The claim statement's nonce (0 for a lease of this replica's own,
    /// which has no row).
    pub(crate) nonce: i64,
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
    /// The nonce of the last claim.
    pub(crate) claim_nonce: Option<i64>,
    /// `overlap = "queue"`: the instant that waits for the running run
    /// (while it is later than `last_scheduled_at`).
    pub(crate) queued_for: Option<NaiveDateTime>,
    /// `overlap = "replace"`: the fence of the run asked to stop.
    pub(crate) stop_fence: Option<i64>,
}

impl LockRow {
    /// The instant waiting for the running run (`overlap = "queue"`), if
    /// one still does.
    pub(crate) fn waiting(&self) -> Option<NaiveDateTime> {
        self.queued_for
            .filter(|queued| self.last_scheduled_at.is_none_or(|last| *queued > last))
    }
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
    fn paused_at_time(&self, now: NaiveDateTime) -> Option<Option<DateTime<Utc>>> {
        let until = self.paused_until.filter(|until| *until > now)?;
        Some((until < crate::db::clock::far_future()).then(|| until.and_utc()))
    }

    /// The job's pause in force at database time `now`, if any.
    pub(crate) fn pause_at(&self, now: DateTime<Utc>) -> Option<Pause> {
        let until = self.paused_at_time(now.naive_utc())?;
        Some(Pause {
            by: self.paused_by.clone(),
            since: self.paused_at,
            until,
            reason: self.paused_reason.clone(),
        })
    }
}

/// A job's pause in force: who paused it, since and until when, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pause {
    /// Who paused it.
    pub(crate) by: Option<String>,
    /// Since when (database time).
    pub(crate) since: Option<NaiveDateTime>,
    /// Until when; `None` until resumed.
    pub(crate) until: Option<DateTime<Utc>>,
    /// Why, as it was said.
    pub(crate) reason: Option<String>,
}

impl std::fmt::Display for Pause {
    /// "paused by … since … until …: (reason)", for messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "paused by {} since {}",
            self.by.as_deref().unwrap_or("?"),
            self.since
                .map_or_else(|| "?".to_string(), crate::history::rfc3339)
        )?;
        match self.until {
            Some(until) => write!(f, " until {}", crate::history::rfc3339(until.naive_utc()))?,
            None => f.write_str(" until resumed")?,
        }
        if let Some(reason) = self.reason.as_deref().filter(|r| !r.is_empty()) {
            write!(f, " ({reason})")?;
        }
        Ok(())
    }
}

/// The lease row of `instant` of an `overlap = "allow"` job: its runs
/// overlap, so each instant is claimed on a row of its own, whose
/// `last_scheduled_at` remembers that it was claimed.
pub(crate) fn instant_row(job: &str, instant: DateTime<Utc>) -> String {
    format!(
        "{INSTANT_ROW_PREFIX}{}.{:x}",
        crate::schedule::digest(job),
        instant.timestamp_millis()
    )
}

/// The prefix of [`instant_row`]s.
pub(crate) const INSTANT_ROW_PREFIX: &str = "replicron.at.";

/// Whether an instant of `job` (an `overlap = "allow"` job) earlier than
/// `instant` is claimed and waiting: its row's lease is held, and no run of
/// it is recorded yet (its run records its start once it has its shared
/// locks, limits and run slot). A waiter that died holds no lease for
/// long, so it keeps nobody waiting.
pub(crate) fn earlier_instant_waits(
    conn: &mut DbConnection,
    job: &str,
    instant: DateTime<Utc>,
) -> QueryResult<bool> {
    use crate::db::schema::replicron_runs::dsl as runs;
    let prefix = format!("{INSTANT_ROW_PREFIX}{}.", crate::schedule::digest(job));
    let claimed: Vec<(String, Option<NaiveDateTime>)> = locks::replicron_locks
        .select((locks::name, locks::last_scheduled_at))
        .filter(locks::name.like(format!("{prefix}%")))
        .filter(locks::lock_until.gt(DbNow))
        .filter(locks::last_scheduled_at.lt(to_db_time(instant).nullable()))
        .load(conn)?;
    // A row claimed at another instant than its own (a backfill's, which
    // runs its instant under the instant's row, claimed at the database's
    // now) records its run at the row's instant: not a waiting instant.
    let claimed: Vec<NaiveDateTime> = claimed
        .into_iter()
        .filter_map(|(name, at)| at.filter(|at| name == instant_row(job, at.and_utc())))
        .collect();
    if claimed.is_empty() {
        return Ok(false);
    }
    let started: Vec<NaiveDateTime> = runs::replicron_runs
        .select(runs::scheduled_at)
        .filter(runs::job.eq(job))
        .filter(runs::scheduled_at.eq_any(&claimed))
        .filter(runs::scope.eq(""))
        .load(conn)?;
    Ok(claimed.iter().any(|t| !started.contains(t)))
}

/// The lease rows of the `max_concurrent` slots of an `overlap = "allow"`
/// job's runs: each run holds one.
pub(crate) fn concurrent_rows(job: &str, max: u32) -> Vec<String> {
    let digest = crate::schedule::digest(job);
    (1..=max)
        .map(|slot| format!("replicron.run.{digest}.{slot}"))
        .collect()
}

/// Deletes the [`instant_row`]s whose lease ended before `older_than` ago:
/// their instants are far past any claim (a claim comes within
/// `LATE_LIMIT`, or `catch_up`, of its instant).
pub(crate) fn prune_instant_rows(
    conn: &mut DbConnection,
    older_than: Duration,
) -> QueryResult<usize> {
    diesel::delete(
        locks::replicron_locks
            .filter(locks::name.like(format!("{INSTANT_ROW_PREFIX}%")))
            .filter(locks::lock_until.lt(DbNowPlus::minus(older_than))),
    )
    .execute(conn)
}

/// The lease row of `exec --lock LOCK --once KEY`: the lock's name, then
/// the key's instant (`key_instant`) in hex milliseconds.
pub(crate) fn once_row(lock: &str, key_instant: DateTime<Utc>) -> String {
    format!("{lock}{ONCE_INFIX}{:x}", key_instant.timestamp_millis())
}

/// Whether lease row `name` is an `exec --once` key's, not a job's.
pub(crate) fn is_once_row(name: &str) -> bool {
    name.contains(ONCE_INFIX)
}

/// Between the lock's name and the key in an `exec --once` row's name.
const ONCE_INFIX: &str = ".once.";

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
            // The check for missed instants starts where the job does: its
            // first instants (an outage at a fleet's start) are told too.
            locks::missed_checked_until.eq(DbNow.nullable()),
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
/// UPDATE of the lease protocol (`docs/design.md`). Only [`Claim::Won`]
/// lets this replica run it. On PostgreSQL and SQLite the UPDATE returns
/// the new fence; on MariaDB/MySQL the row is read back, and it is this
/// claim's exactly when it holds this statement's nonce.
///
/// A row found missing is created and the claim tried once more; a
/// contention error is not a win; any other error is returned.
#[cfg(test)]
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
        Nonce::new(),
        true,
    )
}

/// [`claim`] of `instant`, heeding pauses or not, with `nonce`: a claim
/// whose answer may be lost is made with a nonce its caller keeps, so that
/// it can ask the row afterwards whether the claim committed.
pub(crate) fn claim_with(
    conn: &mut DbConnection,
    job: &str,
    instance: &str,
    instant: DateTime<Utc>,
    lock_at_most_for: Duration,
    pauses: Pauses,
    nonce: Nonce,
) -> QueryResult<Claim> {
    claim_one(
        conn,
        job,
        instance,
        instant,
        lock_at_most_for,
        pauses,
        nonce,
        true,
    )
}

#[expect(
    clippy::too_many_arguments,
    reason = "one claim's inputs, passed on unchanged"
)]
fn claim_one(
    conn: &mut DbConnection,
    job: &str,
    instance: &str,
    instant: DateTime<Utc>,
    lock_at_most_for: Duration,
    pauses: Pauses,
    nonce: Nonce,
    create_missing: bool,
) -> QueryResult<Claim> {
    let scheduled = to_db_time(instant);
    let Some(fence) = claim_returning(
        conn,
        job,
        instance,
        scheduled,
        lock_at_most_for,
        pauses,
        nonce,
    )?
    else {
        // No RETURNING (MariaDB/MySQL): the UPDATE, then a read of the row.
        let mut claims = claim_rows(
            conn,
            &[(job, lock_at_most_for)],
            instance,
            instant,
            pauses,
            nonce,
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
            nonce: nonce.0,
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
                nonce,
                false,
            )?
        }
        None => Claim::Taken,
    })
}

/// What a claim reads back of a lease row: its name, holder, last claimed
/// instant, fence, claim time and end, the database's clock, its pause
/// (since, until, by, why) and the last claim's nonce.
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
    Option<i64>,
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
    locks::claim_nonce,
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
    locks::claim_nonce,
);

/// What a claim of `scheduled` that was not won came to, given the row as
/// read with the database's clock: taken if that instant or a later one
/// was claimed, not yet if the database's clock is short of the instant,
/// held if the lease has not ended, else contended. A claim that heeds
/// pauses is paused if the row's pause covers `scheduled`.
fn not_won(row: &RowState, scheduled: At, pauses: Pauses) -> Claim {
    let (_, _, last_claimed, fence, locked_at, lock_until, now, pause, _) = row;
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
    nonce: Nonce,
) -> QueryResult<Option<Option<i64>>> {
    let nonce = nonce.0;
    macro_rules! update_returning_fence {
        ($conn:expr) => {
            match pauses {
                Pauses::Heeded => {
                    claim_statement!(job, instance, scheduled, length, nonce, unless_paused)
                        .returning(locks::fence)
                        .get_result::<i64>($conn)
                        .optional()
                }
                Pauses::Ignored => claim_statement!(job, instance, scheduled, length, nonce)
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
    _nonce: Nonce,
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
            Nonce::new(),
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
/// of the rows. A job is won exactly when its row holds `nonce` afterwards:
/// this call's own change, whatever else names this instance. Returns one
/// [`Claim`] per job, in order.
pub(crate) fn claim_many(
    conn: &mut DbConnection,
    jobs: &[(&str, Duration)],
    instance: &str,
    instant: DateTime<Utc>,
    nonce: Nonce,
) -> QueryResult<Vec<Claim>> {
    claim_rows(conn, jobs, instance, instant, Pauses::Heeded, nonce, true)
}

fn claim_rows(
    conn: &mut DbConnection,
    jobs: &[(&str, Duration)],
    instance: &str,
    instant: DateTime<Utc>,
    pauses: Pauses,
    nonce: Nonce,
    create_missing: bool,
) -> QueryResult<Vec<Claim>> {
    let scheduled = to_db_time(instant);
    let mut lengths: Vec<Duration> = jobs.iter().map(|(_, d)| *d).collect();
    lengths.sort();
    lengths.dedup();
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
                claim_statement!(*name, instance, scheduled, length, nonce.0, unless_paused)
                    .execute(conn)
            }
            ([name], Pauses::Ignored) => {
                claim_statement!(*name, instance, scheduled, length, nonce.0).execute(conn)
            }
            (_, Pauses::Heeded) => diesel::update(locks::replicron_locks)
                .filter(claimable!(
                    locks::name.eq_any(&names),
                    scheduled,
                    unless_paused
                ))
                .set(claim_changes!(instance, scheduled, length, nonce.0))
                .execute(conn),
            (_, Pauses::Ignored) => diesel::update(locks::replicron_locks)
                .filter(claimable!(locks::name.eq_any(&names), scheduled))
                .set(claim_changes!(instance, scheduled, length, nonce.0))
                .execute(conn),
        };
        match result {
            Ok(_) => {}
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
            // This statement's own change: the row holds its nonce (and,
            // since instants only grow, still this instant).
            Some((_, Some(by), Some(last), fence, .., Some(held)))
                if *held == nonce.0 && by == instance && *last == scheduled.0 =>
            {
                Claim::Won(Lease {
                    job: (*job).to_string(),
                    instant,
                    instance: instance.to_string(),
                    fence: *fence,
                    nonce: nonce.0,
                })
            }
            Some(state) => not_won(state, scheduled, pauses),
            // No cached "the row exists": a missing row is created and the
            // claim tried once more.
            None if create_missing => {
                insert_row(conn, job)?;
                let retried = claim_rows(
                    conn,
                    &[(job, *length)],
                    instance,
                    instant,
                    pauses,
                    nonce,
                    false,
                )?;
                retried.into_iter().next().unwrap_or(Claim::Taken)
            }
            None => Claim::Taken,
        };
        claims.push(claim);
    }
    Ok(claims)
}

/// What became of a claim whose answer was lost, as its row tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Committed {
    /// The row holds the claim's nonce: it committed, and nobody has
    /// claimed the job since. The lease is this replica's (revived if it
    /// had run out), under its fence.
    Held(Lease),
    /// It committed, but the job was claimed again since (its lease ran
    /// out): the instant is this replica's and it ran nowhere.
    Superseded {
        /// The claim's fence.
        fence: i64,
    },
    /// It did not commit: the row holds no claim of this instant.
    No,
    /// It did not commit, and another replica claimed this instant or a
    /// later one.
    Taken,
}

/// Learns from `job`'s row whether the claim of `instant` with `nonce` (its
/// answer lost) committed, and if so takes the lease up again for
/// `lock_at_most_for`, whether or not it had run out, as claimed now:
/// nobody has claimed the job since (the row still holds the nonce), so
/// nobody else ran anything under it.
pub(crate) fn take_up_unanswered(
    conn: &mut DbConnection,
    job: &str,
    instance: &str,
    instant: DateTime<Utc>,
    nonce: Nonce,
    lock_at_most_for: Duration,
) -> QueryResult<Committed> {
    let scheduled = to_db_time(instant);
    let Some(row) = find_lock(conn, job)? else {
        return Ok(Committed::No);
    };
    let claimed = row.last_scheduled_at;
    if row.claim_nonce != Some(nonce.0) || row.locked_by.as_deref() != Some(instance) {
        return Ok(match claimed {
            Some(last) if last >= scheduled.0 => Committed::Taken,
            _ => Committed::No,
        });
    }
    if claimed != Some(scheduled.0) {
        // Instants only grow: a row with our nonce names our instant.
        return Ok(Committed::No);
    }
    // Taken up now: `locked_at` says so, and an instant that came since
    // waits for the run rather than counting as its overrun.
    let changed = cached::update(
        locks::replicron_locks,
        (
            locks::lock_until.eq(DbNowPlus::new(lock_at_most_for)),
            locks::locked_at.eq(DbNow.nullable()),
        ),
        locks::name
            .eq(job)
            .and(locks::claim_nonce.eq(nonce.0))
            .and(locks::fence.eq(row.fence)),
    )
    .execute(conn)?;
    Ok(if changed == 1 {
        Committed::Held(Lease {
            job: job.to_string(),
            instant,
            instance: instance.to_string(),
            fence: row.fence,
            nonce: nonce.0,
        })
    } else {
        Committed::Superseded { fence: row.fence }
    })
}

/// Makes `instant` the one that waits for `job`'s running run
/// (`overlap = "queue"`), unless another instant waits already: `true` if
/// `instant` waits now. An instant waits until it is claimed (or a later
/// one is), so at most one waits at a time, on any replica.
pub(crate) fn enqueue(
    conn: &mut DbConnection,
    job: &str,
    instant: DateTime<Utc>,
) -> QueryResult<bool> {
    let instant = to_db_time(instant);
    let free = locks::queued_for
        .is_null()
        .or(locks::queued_for.eq(instant.nullable()))
        .or(locks::queued_for
            .le(locks::last_scheduled_at)
            .assume_not_null());
    diesel::update(
        locks::replicron_locks
            .filter(locks::name.eq(job))
            .filter(free),
    )
    .set(locks::queued_for.eq(instant.nullable()))
    .execute(conn)?;
    // Read back: MariaDB counts a row set to the value it held as unchanged.
    let queued: Option<Option<NaiveDateTime>> = locks::replicron_locks
        .select(locks::queued_for)
        .filter(locks::name.eq(job))
        .first(conn)
        .optional()?;
    Ok(queued.flatten() == Some(instant.0))
}

/// Asks the run that holds `job`'s lease under `fence` to stop
/// (`overlap = "replace"`): its lease can no longer be extended, so its
/// holder learns at its next keep-alive, stops the run, and releases the
/// lease. `false` if that lease is no longer held.
pub(crate) fn request_stop(conn: &mut DbConnection, job: &str, fence: i64) -> QueryResult<bool> {
    let changed = diesel::update(
        locks::replicron_locks
            .filter(locks::name.eq(job))
            .filter(locks::fence.eq(fence))
            .filter(locks::lock_until.gt(DbNow)),
    )
    .set(locks::stop_fence.eq(fence))
    .execute(conn)?;
    Ok(changed == 1)
}

/// Whether the run of `job` under `fence` was asked to stop for another
/// (`overlap = "replace"`).
pub(crate) fn stop_requested(conn: &mut DbConnection, job: &str, fence: i64) -> QueryResult<bool> {
    let stop: Option<Option<i64>> = locks::replicron_locks
        .select(locks::stop_fence)
        .filter(locks::name.eq(job))
        .first(conn)
        .optional()?;
    Ok(stop.flatten() == Some(fence))
}

/// Keeps a held lease alive for another `lock_at_most_for`. `false` means
/// the lease was lost (expired, claimed by someone else, or its run asked
/// to stop for another).
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
            .and(locks::lock_until.gt(DbNow))
            .and(
                locks::stop_fence
                    .is_null()
                    .or(locks::stop_fence.ne(lease.fence).assume_not_null()),
            ),
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

/// Ends several leases of one holder, each as [`release`] would, in one
/// statement: every row is checked against its own lease's fence, so a
/// row claimed by another since is left alone. Returns, for each lease in
/// order, whether it was still the row's. Only when fewer rows changed than
/// were named are they read back to tell which: a lease claimed again in
/// between that read and the release may then be told not ours.
pub(crate) fn release_many(
    conn: &mut DbConnection,
    leases: &[&Lease],
    lock_at_least_for: Duration,
) -> QueryResult<Vec<bool>> {
    let Some(first) = leases.first() else {
        return Ok(Vec::new());
    };
    debug_assert!(leases.iter().all(|l| l.instance == first.instance));
    let changed = LeasesReleased {
        until: ReleasedUntil::new(lock_at_least_for),
        instance: &first.instance,
        leases,
    }
    .execute(conn)?;
    if changed == leases.len() {
        return Ok(vec![true; leases.len()]);
    }
    let names: Vec<&str> = leases.iter().map(|l| l.job.as_str()).collect();
    let rows: Vec<(String, Option<String>, i64)> = locks::replicron_locks
        .select((locks::name, locks::locked_by, locks::fence))
        .filter(locks::name.eq_any(&names))
        .load(conn)?;
    Ok(leases
        .iter()
        .map(|lease| {
            rows.iter().any(|(name, by, fence)| {
                *name == lease.job
                    && by.as_deref() == Some(&lease.instance)
                    && *fence == lease.fence
            })
        })
        .collect())
}

/// `UPDATE replicron_locks SET lock_until = <released> WHERE locked_by = ?
/// AND name IN (…) AND fence = CASE name WHEN … THEN <its fence> … END`.
struct LeasesReleased<'a> {
    until: ReleasedUntil,
    instance: &'a String,
    leases: &'a [&'a Lease],
}

impl LeasesReleased<'_> {
    fn walk<'b, DB>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> QueryResult<()>
    where
        DB: batch::Binds,
        i64: diesel::serialize::ToSql<diesel::sql_types::BigInt, DB>,
        String: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
        ReleasedUntil: diesel::query_builder::QueryFragment<DB>,
    {
        use diesel::query_builder::QueryFragment as _;
        let name = |out: &mut diesel::query_builder::AstPass<'_, 'b, DB>, lease: &'b &Lease| {
            batch::text(out, &lease.job)
        };
        out.push_sql("UPDATE ");
        out.push_identifier("replicron_locks")?;
        out.push_sql(" SET ");
        out.push_identifier("lock_until")?;
        out.push_sql(" = ");
        self.until.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        out.push_identifier("locked_by")?;
        out.push_sql(" = ");
        batch::text(&mut out, self.instance)?;
        out.push_sql(" AND ");
        batch::key_in(&mut out, "name", self.leases, name)?;
        out.push_sql(" AND ");
        batch::case_by_key(
            &mut out,
            "fence",
            "name",
            self.leases,
            name,
            |out, lease| batch::big_int(out, &lease.fence),
        )?;
        out.unsafe_to_cache_prepared();
        Ok(())
    }
}

batch::batch_statement!(LeasesReleased);

/// Ends whatever lease `job` has, now (the operator's `unlock`). The claimed
/// instant is kept, so the instant that was running is never run again.
pub(crate) fn force_unlock(conn: &mut DbConnection, job: &str) -> QueryResult<bool> {
    let changed = diesel::update(locks::replicron_locks.filter(locks::name.eq(job)))
        .set(locks::lock_until.eq(DbNow))
        .execute(conn)?;
    Ok(changed == 1)
}

/// Pauses `job` from the database's now until `until` (`None`: until
/// resumed): the scheduler claims no instant of it in between. A job that
/// is paused already keeps its pause's start (only its end, who and why
/// change), so that its instants since then stay the pause's. Every pause
/// is kept whole in `replicron_pauses`. Returns `false` if the job has no
/// lease row.
pub(crate) fn pause(
    conn: &mut DbConnection,
    job: &str,
    until: Option<DateTime<Utc>>,
    by: &str,
    reason: Option<&str>,
) -> QueryResult<bool> {
    let until = until.map_or(At(crate::db::clock::far_future()), to_db_time);
    let kept = diesel::update(
        locks::replicron_locks
            .filter(locks::name.eq(job))
            .filter(locks::paused_at.is_not_null())
            .filter(locks::paused_until.gt(DbNow.nullable())),
    )
    .set((
        locks::paused_until.eq(until.nullable()),
        locks::paused_by.eq(by),
        locks::paused_reason.eq(reason),
    ))
    .execute(conn)?;
    let changed = if kept == 1 {
        kept
    } else {
        diesel::update(locks::replicron_locks.filter(locks::name.eq(job)))
            .set((
                locks::paused_at.eq(DbNow.nullable()),
                locks::paused_until.eq(until.nullable()),
                locks::paused_by.eq(by),
                locks::paused_reason.eq(reason),
            ))
            .execute(conn)?
    };
    if changed == 1 {
        record_pause(conn, job)?;
    }
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
    if changed == 1 {
        record_pause(conn, job)?;
    }
    Ok(changed == 1)
}

/// Copies `job`'s current pause, as its lease row holds it, into
/// `replicron_pauses`: the row of the pause that began at the same
/// `paused_at`, or a new one.
fn record_pause(conn: &mut DbConnection, job: &str) -> QueryResult<()> {
    use crate::db::schema::replicron_pauses::dsl as pauses;
    let Some(row) = find_lock(conn, job)? else {
        return Ok(());
    };
    let (Some(at), Some(until)) = (row.paused_at, row.paused_until) else {
        return Ok(());
    };
    let updated = diesel::update(
        pauses::replicron_pauses
            .filter(pauses::job.eq(job))
            .filter(pauses::paused_at.eq(At(at))),
    )
    .set((
        pauses::paused_until.eq(At(until)),
        pauses::paused_by.eq(&row.paused_by),
        pauses::reason.eq(&row.paused_reason),
    ))
    .execute(conn)?;
    if updated == 0 {
        diesel::insert_into(pauses::replicron_pauses)
            .values((
                pauses::job.eq(job),
                pauses::paused_at.eq(At(at)),
                pauses::paused_until.eq(At(until)),
                pauses::paused_by.eq(&row.paused_by),
                pauses::reason.eq(&row.paused_reason),
            ))
            .execute(conn)?;
    }
    Ok(())
}

/// The pauses of `job` that cover some of `[from, to]`: `(paused_at,
/// paused_until)` each, the current one (as its lease row holds it)
/// included.
pub(crate) fn pauses_between(
    conn: &mut DbConnection,
    job: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> QueryResult<Vec<(NaiveDateTime, NaiveDateTime)>> {
    use crate::db::schema::replicron_pauses::dsl as pauses;
    let mut found: Vec<(NaiveDateTime, NaiveDateTime)> = pauses::replicron_pauses
        .select((pauses::paused_at, pauses::paused_until))
        .filter(pauses::job.eq(job))
        .filter(pauses::paused_at.le(to_db_time(to)))
        .filter(pauses::paused_until.gt(to_db_time(from)))
        .load(conn)?;
    if let Some(row) = find_lock(conn, job)?
        && let (Some(at), Some(until)) = (row.paused_at, row.paused_until)
        && !found.contains(&(at, until))
    {
        found.push((at, until));
    }
    Ok(found)
}

/// The pauses of every job that cover some of `[from, to]`: `(job,
/// paused_at, paused_until)` each, the current ones (as the lease rows
/// hold them) included. Two statements, whatever the number of jobs.
pub(crate) fn all_pauses_between(
    conn: &mut DbConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> QueryResult<Vec<(String, NaiveDateTime, NaiveDateTime)>> {
    use crate::db::schema::replicron_pauses::dsl as pauses;
    let mut found: Vec<(String, NaiveDateTime, NaiveDateTime)> = pauses::replicron_pauses
        .select((pauses::job, pauses::paused_at, pauses::paused_until))
        .filter(pauses::paused_at.le(to_db_time(to)))
        .filter(pauses::paused_until.gt(to_db_time(from)))
        .load(conn)?;
    let current: Vec<(String, Option<NaiveDateTime>, Option<NaiveDateTime>)> =
        locks::replicron_locks
            .select((locks::name, locks::paused_at, locks::paused_until))
            .filter(locks::paused_until.is_not_null())
            .load(conn)?;
    for (job, at, until) in current {
        if let (Some(at), Some(until)) = (at, until)
            && at <= to.naive_utc()
            && until > from.naive_utc()
            && !found
                .iter()
                .any(|(j, a, u)| *j == job && *a == at && *u == until)
        {
            found.push((job, at, until));
        }
    }
    Ok(found)
}

/// Deletes the pauses that ended more than `older_than` ago (database
/// time); returns how many.
pub(crate) fn prune_pauses(conn: &mut DbConnection, older_than: Duration) -> QueryResult<usize> {
    use crate::db::schema::replicron_pauses::dsl as pauses;
    diesel::delete(
        pauses::replicron_pauses.filter(pauses::paused_until.lt(DbNowPlus::minus(older_than))),
    )
    .execute(conn)
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

/// Whether the fleet knew `job` before `instant` (its lease row was created
/// at or before it, or before creation times were kept), or has a run of
/// `instant` recorded (run, or recorded missed): a job written `at` an
/// instant the fleet already had is no mistake once the instant is past.
pub(crate) fn knew_before(
    conn: &mut DbConnection,
    job: &str,
    instant: DateTime<Utc>,
) -> QueryResult<bool> {
    use crate::db::schema::replicron_runs::dsl as runs;
    let created: Option<Option<NaiveDateTime>> = locks::replicron_locks
        .filter(locks::name.eq(job))
        .select(locks::created_at)
        .first(conn)
        .optional()?;
    match created {
        Some(None) => return Ok(true),
        Some(Some(created)) if created.and_utc() <= instant => return Ok(true),
        _ => {}
    }
    diesel::select(diesel::dsl::exists(
        runs::replicron_runs
            .filter(runs::job.eq(job))
            .filter(runs::scheduled_at.eq(to_db_time(instant))),
    ))
    .get_result(conn)
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
    read: Option<NaiveDateTime>,
    until: DateTime<Utc>,
) -> QueryResult<usize> {
    // Not if the mark went back since the round read it: a run's end
    // recorded meanwhile took it back (see `history::record_run_finished`),
    // and its instants are the next round's.
    let update = diesel::update(locks::replicron_locks.filter(locks::name.eq(job)))
        .set(locks::missed_checked_until.eq(to_db_time(until).nullable()));
    match read {
        Some(read) => update
            .filter(locks::missed_checked_until.ge(read))
            .execute(conn),
        None => update
            .filter(locks::missed_checked_until.is_null())
            .execute(conn),
    }
}

#[cfg(test)]
mod bench;
#[cfg(test)]
mod tests;
