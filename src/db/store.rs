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
