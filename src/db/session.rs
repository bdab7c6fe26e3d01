//! Opening one connection: the backend the URL names, bounded connects,
//! and each session prepared (SQLite: WAL, a busy timeout, full syncs and
//! the database clock; MariaDB: a short lock wait and causal reads on
//! Galera; PostgreSQL: keepalives and a lock timeout).

use std::sync::Arc;
#[cfg(feature = "sqlite")]
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;

use super::{Backend, DatabaseUrl};
#[cfg(feature = "postgres")]
use super::{CALL_TIMEOUT, CONNECT_TIMEOUT};
use super::{DbConnection, DbError};
use crate::schedule::Clock;

/// How long SQLite waits for another replica's write before giving up.
#[cfg(feature = "sqlite")]
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;

/// Opens one connection to `url` and prepares its session, SQLite's clock
/// read from the system's.
pub(crate) fn establish(url: &DatabaseUrl) -> Result<DbConnection, DbError> {
    establish_with(
        url,
        &(Arc::new(crate::schedule::SystemClock) as Arc<dyn Clock>),
    )
}

/// The name of the SQL function that is SQLite's clock in every statement
/// replicron sends (see [`super::clock`]).
#[cfg(feature = "sqlite")]
const SQLITE_NOW: &str = "replicron_now";

/// Opens one connection to `url` and prepares its session. A SQLite
/// connection reads the database's time from `clock` (SQLite's own clock is
/// the clock of the process that asks, so replicas sharing a file on one
/// host agree on it; tests give it a virtual one).
#[cfg_attr(
    not(feature = "sqlite"),
    expect(
        unused_variables,
        reason = "only SQLite's clock is replicron's to give"
    )
)]
pub(crate) fn establish_with(
    url: &DatabaseUrl,
    clock: &Arc<dyn Clock>,
) -> Result<DbConnection, DbError> {
    {
        let connect_error = |e: ConnectionError| DbError::Connect {
            url: url.to_string(),
            message: crate::db::redact(&e.to_string()),
        };
        let setup_error = |e: diesel::result::Error| DbError::Connect {
            url: url.to_string(),
            message: format!("setting up the session: {e}"),
        };
        match url.backend() {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => {
                if let Some(parent) = std::path::Path::new(url.connection_string()).parent()
                    && !parent.as_os_str().is_empty()
                    && !parent.exists()
                {
                    return Err(DbError::Connect {
                        url: url.to_string(),
                        message: format!("folder {} does not exist", parent.display()),
                    });
                }
                let mut conn = diesel::SqliteConnection::establish(url.connection_string())
                    .map_err(connect_error)?;
                let clock = std::panic::AssertUnwindSafe(clock.clone());
                conn.register_noarg_sql_function::<diesel::sql_types::Text, _, _>(
                    SQLITE_NOW,
                    false,
                    move || clock.now().format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
                )
                .map_err(setup_error)?;
                // busy_timeout first: switching to WAL itself needs the lock.
                diesel::sql_query(format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"))
                    .execute(&mut conn)
                    .map_err(setup_error)?;
                enable_wal(&mut conn).map_err(setup_error)?;
                // synchronous = FULL: a commit (a claim, a run record) is on
                // disk before it returns, so a power loss cannot roll a claim
                // back and let its instant run again after the reboot. WAL's
                // NORMAL survives only a process crash. A small page cache:
                // the tables are small and hot, and a replica keeps several
                // connections.
                conn.batch_execute(
                    "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA cache_size = -512;",
                )
                    .map_err(setup_error)?;
                Ok(DbConnection::Sqlite(conn))
            }
            #[cfg(feature = "mysql")]
            Backend::Mysql => {
                // Each host of the URL in turn: a node of a cluster that is
                // down refuses at once, and the next one serves.
                let mut failed = None;
                let mut conn = None;
                for host in url.alternatives() {
                    match diesel::MysqlConnection::establish(host) {
                        Ok(connected) => {
                            conn = Some(connected);
                            break;
                        }
                        Err(e) => failed = Some(e),
                    }
                }
                let Some(mut conn) = conn else {
                    return Err(connect_error(failed.unwrap_or_else(|| {
                        ConnectionError::BadConnection("no host to connect to".to_string())
                    })));
                };
                // A claim must not wait long behind another replica's row
                // lock. And the optimizer estimates a `job = ?` range from
                // the index's statistics instead of diving into every index
                // that starts with `job` (four on the runs' table): at a
                // million runs those dives read about 15 pages a statement
                // that a small buffer pool does not keep, 3,000 for the
                // dashboard's overview of 200 jobs, for the same plan.
                conn.batch_execute(
                    "SET SESSION innodb_lock_wait_timeout = 10, eq_range_index_dive_limit = 1",
                )
                .map_err(setup_error)?;
                // On a Galera node, statements read what the whole cluster
                // has committed, not what this node has applied so far: a
                // claim must see the release another node just committed.
                // (A no-op without Galera; MySQL has no such variable.)
                let _ = conn.batch_execute("SET SESSION wsrep_sync_wait = 7");
                Ok(DbConnection::Mysql(conn))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                // Bounded connects, and keepalives so that a connection
                // across a dead network fails instead of hanging.
                let mut with_timeout = url.connection_string().to_string();
                for (key, value) in [
                    ("connect_timeout", CONNECT_TIMEOUT.as_secs().to_string()),
                    ("keepalives", "1".to_string()),
                    ("keepalives_idle", "5".to_string()),
                    ("keepalives_interval", "2".to_string()),
                    ("keepalives_count", "3".to_string()),
                    ("tcp_user_timeout", CALL_TIMEOUT.as_millis().to_string()),
                ] {
                    with_timeout = with_query_param(&with_timeout, key, &value);
                }
                let mut conn =
                    diesel::PgConnection::establish(&with_timeout).map_err(connect_error)?;
                conn.batch_execute("SET lock_timeout = '10s'")
                    .map_err(setup_error)?;
                Ok(DbConnection::Postgres(conn))
            }
            #[cfg_attr(
                all(feature = "sqlite", feature = "mysql", feature = "postgres"),
                expect(unreachable_patterns, reason = "every backend is compiled in")
            )]
            other => Err(DbError::Connect {
                url: url.to_string(),
                message: format!(
                    "this binary was built without the `{}` feature",
                    other.feature()
                ),
            }),
        }
    }
}

/// Switches a SQLite file to WAL (a setting the file keeps). Switching takes
/// an exclusive lock that SQLite does not wait for, so replicas opening a new
/// file together retry for as long as the busy timeout.
#[cfg(feature = "sqlite")]
fn enable_wal(conn: &mut diesel::SqliteConnection) -> QueryResult<()> {
    #[derive(QueryableByName)]
    struct JournalMode {
        #[diesel(sql_type = diesel::sql_types::Text)]
        journal_mode: String,
    }
    let started = std::time::Instant::now();
    loop {
        let result = diesel::sql_query("PRAGMA journal_mode = WAL").get_result::<JournalMode>(conn);
        match result {
            Ok(mode) if mode.journal_mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(diesel::result::Error::QueryBuilderError(
                    format!(
                        "SQLite kept journal mode {:?} instead of WAL",
                        mode.journal_mode
                    )
                    .into(),
                ));
            }
            Err(e)
                if started.elapsed() < Duration::from_millis(u64::from(SQLITE_BUSY_TIMEOUT_MS))
                    && e.to_string().contains("locked") =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Adds `key=value` to a URL's query unless the URL already sets `key`.
#[cfg_attr(not(any(feature = "postgres", test)), expect(dead_code))]
fn with_query_param(url: &str, key: &str, value: &str) -> String {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
    if query
        .split('&')
        .any(|pair| pair.split('=').next() == Some(key))
    {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&{key}={value}")
    } else {
        format!("{url}?{key}={value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_added_once() {
        assert_eq!(
            with_query_param("postgres://h/db", "connect_timeout", "5"),
            "postgres://h/db?connect_timeout=5"
        );
        assert_eq!(
            with_query_param("postgres://h/db?sslmode=require", "connect_timeout", "5"),
            "postgres://h/db?sslmode=require&connect_timeout=5"
        );
        assert_eq!(
            with_query_param("postgres://h/db?connect_timeout=2", "connect_timeout", "5"),
            "postgres://h/db?connect_timeout=2"
        );
    }
}
