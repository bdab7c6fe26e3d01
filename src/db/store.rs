//! The one way the rest of replicron reaches the database from async code:
//! a [`Store`] over the pool, whose typed methods (defined beside their
//! statements, in `lease`, `history` and `registry`) each run one statement
//! function off the runtime, bounded, with its error saying what was being
//! done. A daemon's store tells its [`Health`] how every call went, so that
//! no caller has to.

use std::sync::Arc;

use diesel::QueryResult;

use super::health::Health;
use super::{DbConnection, DbError, Pool};

/// Typed async access to the database.
#[derive(Clone)]
pub(crate) struct Store {
    pool: Pool,
    /// Told of every call's outcome (a daemon's; a command's has none).
    health: Option<Arc<Health>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store over `pool`.
    pub(crate) fn new(pool: Pool) -> Self {
        Store { pool, health: None }
    }

    /// The same store, telling `health` how each of its calls went: an
    /// answer counts as the database up, an unreachable database as down.
    pub(crate) fn reporting_to(self, health: Arc<Health>) -> Self {
        Store {
            health: Some(health),
            ..self
        }
    }

    /// Tells the health tracker, if any, how a call went.
    fn report<T>(&self, result: Result<T, DbError>) -> Result<T, DbError> {
        if let Some(health) = &self.health {
            match &result {
                Ok(_) => health.report_ok(),
                Err(e) => health.report_error(e),
            }
        }
        result
    }

    /// The pool behind it.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs the statement function `f` on a pooled connection, off the
    /// runtime; a failure says it happened while `doing`.
    pub(crate) async fn call<T, F>(&self, doing: &'static str, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConnection) -> QueryResult<T> + Send + 'static,
    {
        let result = self.call_unreported(doing, f).await;
        self.report(result)
    }

    /// [`Store::call`], not told to the health tracker.
    async fn call_unreported<T, F>(&self, doing: &'static str, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConnection) -> QueryResult<T> + Send + 'static,
    {
        self.pool
            .run_blocking(move |conn| f(conn).map_err(|e| DbError::query(doing, e)))
            .await
    }

    /// [`Store::call`], tried again while the database cannot be reached,
    /// until `deadline`: each try takes a connection of its own, and one
    /// that failed so is dropped from the pool, so a dead pooled connection
    /// (after a failover, or a server restart) fails one try, not the call.
    pub(crate) async fn call_until<T, F>(
        &self,
        doing: &'static str,
        deadline: tokio::time::Instant,
        f: F,
    ) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: Fn(&mut DbConnection) -> QueryResult<T> + Clone + Send + 'static,
    {
        let mut pause = std::time::Duration::from_millis(50);
        // Only the outcome is told: a dead pooled connection that fails
        // one try does not make the database down for a moment.
        loop {
            match self.call_unreported(doing, f.clone()).await {
                Err(e) if e.is_unreachable() && tokio::time::Instant::now() + pause < deadline => {
                    tracing::debug!("{doing}: trying again on a fresh connection: {e}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                result => return self.report(result),
            }
        }
    }

    /// Runs `f`, which may send several statements and say itself what
    /// failed, on a pooled connection off the runtime.
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConnection) -> Result<T, DbError> + Send + 'static,
    {
        let result = self.pool.run_blocking(f).await;
        self.report(result)
    }

    /// Whether the database answers.
    pub(crate) async fn ping(&self) -> Result<(), DbError> {
        let result = self.pool.ping().await;
        self.report(result)
    }
}
