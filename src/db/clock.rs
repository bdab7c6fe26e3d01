//! The database clock: the only SQL that differs by backend.
//!
//! Lease comparisons use the database's time only, never a replica's. These
//! query nodes render the current time and the lease arithmetic for each
//! backend: MariaDB/MySQL `UTC_TIMESTAMP(3)` (into `DATETIME(3)` columns,
//! which no session time zone can shift), PostgreSQL `clock_timestamp()` in
//! UTC (not `now()`, which is frozen at the start of the transaction), and
//! SQLite its own clock at millisecond precision, as text that sorts like
//! time.

use std::time::Duration;

use chrono::{DateTime, DurationRound as _, NaiveDateTime, TimeDelta, Utc};
use diesel::expression::{
    AppearsOnTable, Expression, SelectableExpression, ValidGrouping, is_aggregate,
};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::Timestamp;
use diesel::{QueryResult, RunQueryDsl as _};

use super::schema::{replicron_locks, replicron_runs};
use super::{DbConnection, MultiBackend};

/// The database's current time, UTC, at the millisecond precision of the
/// columns it is compared with.
#[derive(Clone, Copy, Debug, QueryId)]
pub(crate) struct DbNow;

/// The database's current time, UTC, as precisely as the backend tells it
/// (microseconds on MariaDB/MySQL and PostgreSQL, milliseconds on SQLite):
/// for estimating how far a replica's clock is from the database's.
#[derive(Clone, Copy, Debug, QueryId)]
struct DbNowPrecise;

impl DbNowPrecise {
    /// The backend's resolution: how much older than the true time a
    /// reading can be, since each backend truncates.
    pub(crate) fn resolution(backend: crate::db::Backend) -> std::time::Duration {
        match backend {
            crate::db::Backend::Sqlite => std::time::Duration::from_millis(1),
            _ => std::time::Duration::from_micros(1),
        }
    }
}

/// A time from the application (a scheduled instant, UTC), bound as a
/// parameter. MariaDB/MySQL receive it as `DATETIME`: bound as `TIMESTAMP`
/// it would become NULL after 2038-01-19.
#[derive(Clone, Copy, Debug, QueryId)]
pub(crate) struct At(pub NaiveDateTime);

impl At {
    /// The epoch: the `lock_until` of a lock row nobody has claimed yet.
    pub(crate) fn epoch() -> At {
        At(chrono::DateTime::<chrono::Utc>::UNIX_EPOCH.naive_utc())
    }
}

/// The latest time every backend stores (`DATETIME(3)` ends in the year
/// 9999): the end of a pause that has none.
/// Whether `at` is a time every backend stores and compares: from 1970 on
/// (MariaDB's DATETIME starts at year 1000, and nothing of replicron's is
/// older than the epoch), and before [`far_future`] (MariaDB's DATETIME
/// ends with 9999; the latest day stands for "until resumed"). A time a
/// person gives (a pause's end, a `since`, a range to verify) outside it
/// is refused with this message, rather than failing the statement or, on
/// MariaDB, being stored as a date nothing can read back.
pub(crate) fn storable(at: chrono::DateTime<chrono::Utc>) -> Result<(), String> {
    let latest = far_future() - chrono::TimeDelta::days(1);
    if at.timestamp() < 0 {
        Err(format!(
            "{} is before 1970-01-01T00:00:00Z",
            at.format("%Y-%m-%dT%H:%M:%SZ")
        ))
    } else if at.naive_utc() > latest {
        Err(format!(
            "{} is after {}Z, the latest time every database stores",
            at.format("%Y-%m-%dT%H:%M:%SZ"),
            latest.format("%Y-%m-%dT%H:%M:%S")
        ))
    } else {
        Ok(())
    }
}

pub(crate) fn far_future() -> NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
        .and_then(|d| d.and_hms_milli_opt(23, 59, 59, 0))
        .unwrap_or(NaiveDateTime::MAX)
}

/// The database's current time plus a duration.
#[derive(Clone, Debug, QueryId)]
pub(crate) struct DbNowPlus(Interval);

/// The end of a released lease: the later of now and
/// `locked_at + lock_at_least_for`.
#[derive(Clone, Debug, QueryId)]
pub(crate) struct ReleasedUntil(Interval);

/// When a run finished, from the database's own start time and the run's
/// duration measured on the monotonic clock: `started_at + duration`. It
/// stays right when the write lands after a database outage.
#[derive(Clone, Debug, QueryId)]
pub(crate) struct FinishedAt(Interval);

impl FinishedAt {
    /// `started_at + duration`.
    pub(crate) fn after(duration: Duration) -> Self {
        FinishedAt(Interval::new(duration, '+'))
    }
}

/// A duration in the forms the backends bind it.
#[derive(Clone, Debug, QueryId)]
struct Interval {
    #[cfg_attr(
        not(any(feature = "mysql", feature = "postgres")),
        expect(
            dead_code,
            reason = "only MariaDB/MySQL and PostgreSQL bind microseconds"
        )
    )]
    micros: i64,
    #[cfg_attr(
        not(feature = "sqlite"),
        expect(dead_code, reason = "only SQLite binds a date modifier")
    )]
    sqlite_modifier: String,
}

impl Interval {
    fn new(duration: Duration, sign: char) -> Self {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        Interval {
            micros: if sign == '-' { -micros } else { micros },
            sqlite_modifier: format!(
                "{sign}{}.{:03} seconds",
                duration.as_secs(),
                duration.subsec_millis()
            ),
        }
    }
}

impl DbNowPlus {
    /// Now plus `duration`.
    pub(crate) fn new(duration: Duration) -> Self {
        DbNowPlus(Interval::new(duration, '+'))
    }

    /// Now minus `duration`.
    pub(crate) fn minus(duration: Duration) -> Self {
        DbNowPlus(Interval::new(duration, '-'))
    }
}

impl ReleasedUntil {
    /// The release time for a lease kept at least `lock_at_least_for`.
    pub(crate) fn new(lock_at_least_for: Duration) -> Self {
        ReleasedUntil(Interval::new(lock_at_least_for, '+'))
    }
}

macro_rules! timestamp_expression {
    ($($node:ty),*) => {$(
        impl Expression for $node {
            type SqlType = Timestamp;
        }
        impl<QS> AppearsOnTable<QS> for $node {}
        impl<QS> SelectableExpression<QS> for $node {}
        impl ValidGrouping<()> for $node {
            type IsAggregate = is_aggregate::Never;
        }
        impl QueryFragment<MultiBackend> for $node {
            fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, MultiBackend>) -> QueryResult<()> {
                MultiBackend::walk_variant_ast(self, pass)
            }
        }
    )*};
}

timestamp_expression!(
    DbNow,
    DbNowPrecise,
    At,
    DbNowPlus,
    ReleasedUntil,
    FinishedAt
);

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use diesel::sqlite::Sqlite;

    // The clock is a function of the session (see `db::session`): the host's
    // clock, as SQLite's own 'now' is, or a test's virtual one.
    const NOW: &str = "replicron_now()";

    impl QueryFragment<Sqlite> for DbNow {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            out.push_sql(NOW);
            Ok(())
        }
    }

    impl QueryFragment<Sqlite> for DbNowPrecise {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            out.push_sql(NOW);
            Ok(())
        }
    }

    impl QueryFragment<Sqlite> for At {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            out.push_bind_param::<Timestamp, _>(&self.0)
        }
    }

    impl QueryFragment<Sqlite> for DbNowPlus {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            out.push_sql("strftime('%Y-%m-%d %H:%M:%f', replicron_now(), ");
            out.push_bind_param::<diesel::sql_types::Text, _>(&self.0.sqlite_modifier)?;
            out.push_sql(")");
            Ok(())
        }
    }

    impl QueryFragment<Sqlite> for FinishedAt {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            out.push_sql("strftime('%Y-%m-%d %H:%M:%f', ");
            replicron_runs::started_at.walk_ast(out.reborrow())?;
            out.push_sql(", ");
            out.push_bind_param::<diesel::sql_types::Text, _>(&self.0.sqlite_modifier)?;
            out.push_sql(")");
            Ok(())
        }
    }

    impl QueryFragment<Sqlite> for ReleasedUntil {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            out.push_sql("max(");
            out.push_sql(NOW);
            out.push_sql(", strftime('%Y-%m-%d %H:%M:%f', ");
            replicron_locks::locked_at.walk_ast(out.reborrow())?;
            out.push_sql(", ");
            out.push_bind_param::<diesel::sql_types::Text, _>(&self.0.sqlite_modifier)?;
            out.push_sql("))");
            Ok(())
        }
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    use diesel::mysql::Mysql;

    impl QueryFragment<Mysql> for DbNow {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql("UTC_TIMESTAMP(3)");
            Ok(())
        }
    }

    impl QueryFragment<Mysql> for DbNowPrecise {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql("UTC_TIMESTAMP(6)");
            Ok(())
        }
    }

    impl QueryFragment<Mysql> for At {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_bind_param::<diesel::sql_types::Datetime, _>(&self.0)
        }
    }

    impl QueryFragment<Mysql> for DbNowPlus {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql("(UTC_TIMESTAMP(3) + INTERVAL ");
            out.push_bind_param::<diesel::sql_types::BigInt, _>(&self.0.micros)?;
            out.push_sql(" MICROSECOND)");
            Ok(())
        }
    }

    impl QueryFragment<Mysql> for FinishedAt {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql("(");
            replicron_runs::started_at.walk_ast(out.reborrow())?;
            out.push_sql(" + INTERVAL ");
            out.push_bind_param::<diesel::sql_types::BigInt, _>(&self.0.micros)?;
            out.push_sql(" MICROSECOND)");
            Ok(())
        }
    }

    impl QueryFragment<Mysql> for ReleasedUntil {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql("GREATEST(UTC_TIMESTAMP(3), ");
            replicron_locks::locked_at.walk_ast(out.reborrow())?;
            out.push_sql(" + INTERVAL ");
            out.push_bind_param::<diesel::sql_types::BigInt, _>(&self.0.micros)?;
            out.push_sql(" MICROSECOND)");
            Ok(())
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use diesel::pg::Pg;

    // Truncated to the columns' milliseconds: TIMESTAMP(3) would round a
    // stored time up, past the clock that compares with it.
    const NOW: &str = "date_trunc('milliseconds', clock_timestamp() AT TIME ZONE 'UTC')";

    impl QueryFragment<Pg> for DbNow {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql(NOW);
            Ok(())
        }
    }

    impl QueryFragment<Pg> for DbNowPrecise {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql("(clock_timestamp() AT TIME ZONE 'UTC')");
            Ok(())
        }
    }

    impl QueryFragment<Pg> for At {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_bind_param::<Timestamp, _>(&self.0)
        }
    }

    impl QueryFragment<Pg> for DbNowPlus {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql("(");
            out.push_sql(NOW);
            out.push_sql(" + ");
            out.push_bind_param::<diesel::sql_types::BigInt, _>(&self.0.micros)?;
            out.push_sql(" * INTERVAL '1 microsecond')");
            Ok(())
        }
    }

    impl QueryFragment<Pg> for FinishedAt {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql("(");
            replicron_runs::started_at.walk_ast(out.reborrow())?;
            out.push_sql(" + ");
            out.push_bind_param::<diesel::sql_types::BigInt, _>(&self.0.micros)?;
            out.push_sql(" * INTERVAL '1 microsecond')");
            Ok(())
        }
    }

    impl QueryFragment<Pg> for ReleasedUntil {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql("GREATEST(");
            out.push_sql(NOW);
            out.push_sql(", ");
            replicron_locks::locked_at.walk_ast(out.reborrow())?;
            out.push_sql(" + ");
            out.push_bind_param::<diesel::sql_types::BigInt, _>(&self.0.micros)?;
            out.push_sql(" * INTERVAL '1 microsecond')");
            Ok(())
        }
    }
}

/// Estimates how far `host` is from the database's clock, as NTP does:
/// `samples` readings of the database's time, each between two readings of
/// the host's; the one with the shortest round trip wins, and half its
/// round trip (plus the database clock's resolution) bounds the error.
pub(crate) fn estimate_offset(
    conn: &mut super::DbConnection,
    host: &dyn crate::schedule::Clock,
    samples: usize,
) -> QueryResult<crate::schedule::Offset> {
    use diesel::RunQueryDsl as _;
    let resolution = DbNowPrecise::resolution(conn.backend());
    let mut best: Option<(chrono::TimeDelta, chrono::TimeDelta)> = None;
    for _ in 0..samples.max(1) {
        let before = host.now();
        let database = diesel::select(DbNowPrecise)
            .get_result::<NaiveDateTime>(conn)?
            .and_utc();
        let after = host.now();
        let round_trip = (after - before).max(chrono::TimeDelta::zero());
        // The database truncates: its true time is up to one resolution
        // later than it says, so the middle of that span is the estimate.
        let database = database + chrono::TimeDelta::from_std(resolution / 2).unwrap_or_default();
        let offset = database - (before + round_trip / 2);
        if best.is_none_or(|(_, shortest)| round_trip < shortest) {
            best = Some((offset, round_trip));
        }
    }
    let (offset, round_trip) = best.unwrap_or_default();
    Ok(crate::schedule::Offset {
        offset,
        error: (round_trip / 2).to_std().unwrap_or_default() + resolution / 2,
    })
}

/// Stored times are UTC at millisecond precision; so is every instant.
pub(crate) fn to_db_time(instant: DateTime<Utc>) -> At {
    At(instant
        .duration_trunc(TimeDelta::milliseconds(1))
        .unwrap_or(instant)
        .naive_utc())
}

/// The database's current time.
pub(crate) fn database_now(conn: &mut DbConnection) -> QueryResult<DateTime<Utc>> {
    diesel::select(DbNow)
        .get_result::<NaiveDateTime>(conn)
        .map(|t| t.and_utc())
}
