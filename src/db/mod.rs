//! The database: one connection type over every compiled backend, the pool,
//! the embedded migrations, and the helper that keeps blocking diesel calls
//! off the async runtime.
//!
//! The backend is chosen from the URL scheme by [`crate::config::DatabaseUrl`];
//! [`Manager`] opens the matching variant of [`DbConnection`] and prepares
//! the session (SQLite: WAL and a busy timeout, so replicas sharing a file
//! wait for each other instead of failing with "database is locked").

pub mod cached;
pub mod clock;
mod connection;
pub mod migrate;
pub mod schema;

pub use self::connection::{DbConnection, MultiBackend};

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{self, ManageConnection, PooledConnection};
use thiserror::Error;

use crate::config::{Backend, DatabaseUrl};

/// How long opening a connection, or waiting for a pooled one, may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the async side waits for one database call (connection
/// included). A statement stuck on a dead network may go on in its blocking
/// thread, but nobody waits for it longer than this.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long SQLite waits for another replica's write before giving up.
#[cfg(feature = "sqlite")]
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;

/// What can go wrong reaching the database. Messages carry the redacted URL.
#[derive(Debug, Error)]
pub enum DbError {
    /// No connection could be opened or taken from the pool.
    #[error("cannot connect to {url}: {message}")]
    Connect {
        /// Redacted URL.
        url: String,
        /// The driver's or the pool's reason.
        message: String,
    },
    /// Applying the migrations failed.
    #[error("cannot apply migrations to {url}: {message}")]
    Migrate {
        /// Redacted URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// A statement failed.
    #[error("{context}: {source}")]
    Query {
        /// What was being done.
        context: String,
        /// The database's error.
        #[source]
        source: diesel::result::Error,
    },
    /// The blocking task was cancelled or panicked.
    #[error("database task failed: {0}")]
    Task(String),
    /// One error reported to several callers (a batch that failed).
    #[error("{message}")]
    Shared {
        /// The original error, as text.
        message: String,
        /// Whether the original said the database is unreachable.
        unreachable: bool,
    },
    /// The call took longer than [`CALL_TIMEOUT`].
    #[error("{context}: no answer from the database within {}s", CALL_TIMEOUT.as_secs())]
    Timeout {
        /// What was being done.
        context: String,
    },
}

impl DbError {
    /// Wraps a query error with what was being done.
    pub fn query(context: impl Into<String>, source: diesel::result::Error) -> Self {
        DbError::Query {
            context: context.into(),
            source,
        }
    }

    /// The same error again, for another caller.
    pub fn shared(error: &DbError) -> Self {
        DbError::Shared {
            message: error.to_string(),
            unreachable: error.is_unreachable(),
        }
    }

    /// Whether this error says the database cannot be reached (as opposed
    /// to a statement it refused).
    pub fn is_unreachable(&self) -> bool {
        match self {
            DbError::Connect { .. } | DbError::Timeout { .. } | DbError::Task(_) => true,
            DbError::Migrate { .. } => false,
            DbError::Shared { unreachable, .. } => *unreachable,
            DbError::Query { source, .. } => {
                use diesel::result::{DatabaseErrorKind, Error};
                match source {
                    Error::DatabaseError(
                        DatabaseErrorKind::UnableToSendCommand
                        | DatabaseErrorKind::ClosedConnection,
                        _,
                    )
                    | Error::BrokenTransactionManager => true,
                    Error::DatabaseError(_, info) => {
                        let message = info.message().to_ascii_lowercase();
                        [
                            "gone away",
                            "lost connection",
                            "connection",
                            "server closed",
                            "terminating",
                            "could not receive",
                            "could not send",
                            "broken pipe",
                            "shutdown",
                        ]
                        .iter()
                        .any(|needle| message.contains(needle))
                    }
                    _ => false,
                }
            }
        }
    }
}

/// Opens connections for the pool and prepares each session.
#[derive(Clone, Debug)]
pub struct Manager {
    url: DatabaseUrl,
}

impl Manager {
    /// A manager for `url`.
    pub fn new(url: DatabaseUrl) -> Self {
        Manager { url }
    }
}

/// Opens one connection to `url` and prepares its session.
pub fn establish(url: &DatabaseUrl) -> Result<DbConnection, DbError> {
    {
        let connect_error = |e: ConnectionError| DbError::Connect {
            url: url.to_string(),
            message: crate::config::redact(&e.to_string()),
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
                let mut conn = diesel::MysqlConnection::establish(url.connection_string())
                    .map_err(connect_error)?;
                // A claim must not wait long behind another replica's row lock.
                conn.batch_execute("SET SESSION innodb_lock_wait_timeout = 10")
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

/// A pooled connection, with what the pool cannot see for itself: that a
/// statement on it failed because the server could not be reached. Such a
/// connection is dropped instead of being handed out again (a MariaDB
/// connection whose socket died does not know it).
pub struct PoolConnection {
    conn: DbConnection,
    broken: bool,
}

impl std::ops::Deref for PoolConnection {
    type Target = DbConnection;

    fn deref(&self) -> &DbConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for PoolConnection {
    fn deref_mut(&mut self) -> &mut DbConnection {
        &mut self.conn
    }
}

impl PoolConnection {
    /// Marks the connection as not to be reused.
    pub fn mark_broken(&mut self) {
        self.broken = true;
    }
}

impl ManageConnection for Manager {
    type Connection = PoolConnection;
    type Error = r2d2::Error;

    fn connect(&self) -> Result<PoolConnection, r2d2::Error> {
        let conn = establish(&self.url).map_err(|e| {
            r2d2::Error::ConnectionError(ConnectionError::BadConnection(e.to_string()))
        })?;
        Ok(PoolConnection {
            conn,
            broken: false,
        })
    }

    fn is_valid(&self, conn: &mut PoolConnection) -> Result<(), r2d2::Error> {
        diesel::r2d2::R2D2Connection::ping(&mut conn.conn).map_err(r2d2::Error::QueryError)
    }

    fn has_broken(&self, conn: &mut PoolConnection) -> bool {
        conn.broken || diesel::r2d2::R2D2Connection::is_broken(&mut conn.conn)
    }
}

/// A pool of connections to one database.
#[derive(Clone)]
pub struct Pool {
    inner: r2d2::Pool<Manager>,
    url: DatabaseUrl,
}

/// A connection taken from the [`Pool`].
pub type PooledConn = PooledConnection<Manager>;

impl Pool {
    /// Opens a pool of at most `size` connections and checks that one
    /// connection can be made, so a wrong URL fails here, clearly.
    pub fn open(url: &DatabaseUrl, size: u32) -> Result<Pool, DbError> {
        let inner = r2d2::Pool::builder()
            .max_size(size.max(1))
            // Two connections stay open however idle the replica is; a burst
            // opens more (up to pool_size), which stay for idle_timeout.
            .min_idle(Some(2.min(size.max(1))))
            .connection_timeout(CONNECT_TIMEOUT)
            .test_on_check_out(false)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(Manager::new(url.clone()));
        let pool = Pool {
            inner,
            url: url.clone(),
        };
        // The manager's own error says why; the pool's would only say "timed out".
        establish(url)?;
        Ok(pool)
    }

    /// The URL this pool connects to (its `Display` is redacted).
    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// The backend behind this pool.
    pub fn backend(&self) -> Backend {
        self.url.backend()
    }

    /// Takes a connection, waiting at most [`CONNECT_TIMEOUT`].
    pub fn get(&self) -> Result<PooledConn, DbError> {
        self.inner.get().map_err(|e| DbError::Connect {
            url: self.url.to_string(),
            message: e.to_string(),
        })
    }

    /// Runs `f` with a connection on tokio's blocking pool, so that the
    /// async tasks never wait on the database themselves.
    pub async fn run_blocking<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConnection) -> Result<T, DbError> + Send + 'static,
    {
        let pool = self.clone();
        let call = tokio::task::spawn_blocking(move || {
            let mut conn = pool.get()?;
            let result = f(&mut conn);
            if result.as_ref().is_err_and(DbError::is_unreachable) {
                conn.mark_broken();
            }
            result
        });
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(joined) => joined.map_err(|e| DbError::Task(e.to_string()))?,
            Err(_) => Err(DbError::Timeout {
                context: format!("a call to {}", self.url),
            }),
        }
    }

    /// `SELECT 1` through the pool: whether the database answers.
    pub async fn ping(&self) -> Result<(), DbError> {
        self.run_blocking(|conn| {
            ping(conn)
                .map(drop)
                .map_err(|e| DbError::query("pinging the database", e))
        })
        .await
    }

    /// Applies the pending migrations of this backend, one replica at a
    /// time across the cluster ([`migrate`]); returns how many were applied.
    pub fn migrate(&self) -> Result<usize, DbError> {
        let mut conn = self.get()?;
        let holder = format!(
            "{}:{}",
            hostname::get()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        );
        let done = migrate::migrate(&mut conn, &holder).map_err(|message| DbError::Migrate {
            url: self.url.to_string(),
            message,
        })?;
        if done.healed > 0 {
            tracing::warn!(
                healed = done.healed,
                "finished migrations that an earlier attempt had left half-applied"
            );
        }
        Ok(done.applied)
    }
}

/// `SELECT 1` through diesel: proves a connection works.
pub fn ping(conn: &mut DbConnection) -> QueryResult<i32> {
    // A literal, not a bind parameter: MariaDB types a bare `SELECT ?` as NULL.
    diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>("1")).get_result(conn)
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
