//! The one way the rest of replicron reaches the database from async code:
//! a [`Store`] over the pool, whose typed methods (defined beside their
//! statements, in `lease`, `history` and `registry`) each run one statement
//! function off the runtime, bounded, with its error saying what was being
//! done.

use diesel::QueryResult;

use super::{DbConnection, DbError, Pool};

/// Typed async access to the database.
#[derive(Clone, Debug)]
pub(crate) struct Store {
    pool: Pool,
}

impl Store {
    /// A store over `pool`.
    pub(crate) fn new(pool: Pool) -> Self {
        Store { pool }
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
        loop {
            match self.call(doing, f.clone()).await {
                Err(e) if e.is_unreachable() && tokio::time::Instant::now() + pause < deadline => {
                    tracing::debug!("{doing}: trying again on a fresh connection: {e}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                result => return result,
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
        self.pool.run_blocking(f).await
    }

    /// Whether the database answers.
    pub(crate) async fn ping(&self) -> Result<(), DbError> {
        self.pool.ping().await
    }
}
