//! The pool of connections to one database, and the helper that keeps
//! blocking diesel calls off the async runtime with a bound on each call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use diesel::prelude::*;
use diesel::r2d2::{self, ManageConnection, PooledConnection};

use super::{CALL_TIMEOUT, CONNECT_TIMEOUT, DbConnection, DbError, establish_with};
use crate::db::DatabaseUrl;
use crate::schedule::Clock;

/// Opens connections for the pool and prepares each session.
#[derive(Clone)]
pub(crate) struct Manager {
    url: DatabaseUrl,
    clock: Arc<dyn Clock>,
    /// Counts the calls that failed because the server could not be
    /// reached: a connection opened, or checked, before the latest one may
    /// lead to a server that is gone.
    outages: Arc<AtomicU64>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// A pooled connection, with what the pool cannot see for itself: that a
/// statement on it failed because the server could not be reached. Such a
/// connection is dropped instead of being handed out again (a MariaDB
/// connection whose socket died does not know it).
pub(crate) struct PoolConnection {
    conn: DbConnection,
    broken: bool,
    /// The count of outages when this connection was opened or last
    /// checked.
    checked: u64,
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
    fn mark_broken(&mut self) {
        self.broken = true;
    }
}

impl ManageConnection for Manager {
    type Connection = PoolConnection;
    type Error = r2d2::Error;

    fn connect(&self) -> Result<PoolConnection, r2d2::Error> {
        let conn = establish_with(&self.url, &self.clock).map_err(|e| {
            r2d2::Error::ConnectionError(ConnectionError::BadConnection(connect_reason(e)))
        })?;
        Ok(PoolConnection {
            conn,
            broken: false,
            checked: self.outages.load(Ordering::SeqCst),
        })
    }

    fn is_valid(&self, conn: &mut PoolConnection) -> Result<(), r2d2::Error> {
        diesel::r2d2::R2D2Connection::ping(&mut conn.conn).map_err(r2d2::Error::QueryError)
    }

    fn has_broken(&self, conn: &mut PoolConnection) -> bool {
        conn.broken || diesel::r2d2::R2D2Connection::is_broken(&mut conn.conn)
    }
}

/// A pool of connections to one database: SQLite (`sqlite://path`),
/// MariaDB/MySQL (`mysql://…`) or PostgreSQL (`postgres://…`), as the URL
/// says. Cheap to clone; every clone shares the connections.
///
/// ```no_run
/// # fn main() -> Result<(), replicron::Error> {
/// let pool = replicron::Pool::open("postgres://cron:secret@db.internal/cron", 8)?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Pool {
    inner: r2d2::Pool<Manager>,
    url: DatabaseUrl,
    /// How long a caller waits for one call ([`CALL_TIMEOUT`], shorter in
    /// tests).
    call_timeout: std::time::Duration,
    /// Shared with the [`Manager`].
    outages: Arc<AtomicU64>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL's Display is redacted: no password here.
        write!(f, "Pool({})", self.url)
    }
}

/// A connection taken from the [`Pool`].
type PooledConn = PooledConnection<Manager>;

impl Pool {
    /// [`Pool::open`] for a parsed URL, with SQLite's clock read from
    /// `clock` (the system's, or a test's virtual one).
    pub(crate) fn connect(
        url: &DatabaseUrl,
        size: u32,
        clock: Arc<dyn Clock>,
    ) -> Result<Pool, DbError> {
        let outages = Arc::new(AtomicU64::new(0));
        let manager = Manager {
            url: url.clone(),
            clock: clock.clone(),
            outages: outages.clone(),
        };
        let inner = r2d2::Pool::builder()
            .max_size(size.max(1))
            // Two connections stay open however idle the replica is; a burst
            // opens more (up to pool_size), which stay for idle_timeout.
            .min_idle(Some(2.min(size.max(1))))
            .connection_timeout(CONNECT_TIMEOUT)
            .test_on_check_out(false)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager);
        let pool = Pool {
            inner,
            url: url.clone(),
            call_timeout: CALL_TIMEOUT,
            outages,
        };
        // The manager's own error says why; the pool's would only say "timed out".
        establish_with(url, &clock)?;
        Ok(pool)
    }

    /// This pool with callers waiting `timeout` for a call.
    #[cfg(all(test, feature = "sqlite"))]
    pub(crate) fn with_call_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The URL this pool connects to (its `Display` is redacted).
    pub(crate) fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// Takes a connection, waiting at most [`CONNECT_TIMEOUT`]. After a
    /// call failed because the server could not be reached (a crash, a
    /// failover), each idle connection is pinged once before it is handed
    /// out, and one that does not answer is dropped: a dead connection
    /// left in the pool fails no later statement (a release, an end
    /// record) on its own.
    pub(crate) fn get(&self) -> Result<PooledConn, DbError> {
        let connect_error = |e: r2d2::PoolError| DbError::Connect {
            url: self.url.to_string(),
            message: e.to_string(),
        };
        // Every connection the pool holds, and one more, newly opened.
        for _ in 0..=self.inner.max_size() {
            let mut conn = self.inner.get().map_err(connect_error)?;
            let outages = self.outages.load(Ordering::SeqCst);
            if conn.checked >= outages {
                return Ok(conn);
            }
            if ping(&mut conn).is_ok() {
                conn.checked = outages;
                return Ok(conn);
            }
            tracing::debug!("a pooled connection did not answer after an outage: dropped");
            conn.mark_broken();
        }
        self.inner.get().map_err(connect_error)
    }

    /// Counts a call that failed because the server could not be reached.
    fn outage(&self) {
        self.outages.fetch_add(1, Ordering::SeqCst);
    }

    /// Runs `f` with a connection on tokio's blocking pool, so that the
    /// async tasks never wait on the database themselves.
    pub(crate) async fn run_blocking<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConnection) -> Result<T, DbError> + Send + 'static,
    {
        let pool = self.clone();
        let call = tokio::task::spawn_blocking(move || {
            let mut conn = pool.get().inspect_err(|_| pool.outage())?;
            let result = f(&mut conn);
            if result.as_ref().is_err_and(DbError::is_unreachable) {
                conn.mark_broken();
                pool.outage();
            }
            result
        });
        match tokio::time::timeout(self.call_timeout, call).await {
            Ok(joined) => joined.map_err(|e| DbError::Task(e.to_string()))?,
            Err(_) => Err(DbError::Timeout {
                context: format!("a call to {}", self.url),
            }),
        }
    }

    /// `SELECT 1` through the pool: whether the database answers.
    pub(crate) async fn ping(&self) -> Result<(), DbError> {
        self.run_blocking(|conn| {
            ping(conn)
                .map(drop)
                .map_err(|e| DbError::query("pinging the database", e))
        })
        .await
    }

    /// Applies the pending migrations of this backend, one replica at a
    /// time across the cluster ([`migrate`]); returns how many were applied.
    pub(crate) fn migrate(&self) -> Result<usize, DbError> {
        let mut conn = self.get()?;
        let holder = format!(
            "{}:{}",
            hostname::get()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        );
        let done =
            super::migrate::migrate(&mut conn, &holder).map_err(|error| DbError::Migrate {
                url: self.url.to_string(),
                error,
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

/// Why a connection could not be opened, as the pool quotes it in its own
/// error (`timed out waiting for connection: …`): without the URL, which
/// the [`DbError::Connect`] that carries the pool's error names once.
pub(super) fn connect_reason(error: DbError) -> String {
    match error {
        DbError::Connect { message, .. } => message,
        other => other.to_string(),
    }
}

/// `SELECT 1` through diesel: proves a connection works.
pub(crate) fn ping(conn: &mut DbConnection) -> QueryResult<i32> {
    // A literal, not a bind parameter: MariaDB types a bare `SELECT ?` as NULL.
    diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>("1")).get_result(conn)
}
