//! History retention's deletions: rows older than `history_retention`,
//! finished runs only, and the audit log's rows as old, in small batches
//! with a pause between them, so that no statement holds locks for long.
//! One replica at a time runs a round, under the `replicron.retention`
//! lease that the scheduler takes.

use std::future::Future;
use std::time::Duration;

use tracing::warn;

use crate::db::{DbError, Store};

/// Rows per delete.
const BATCH: i64 = 500;

/// Deletes every finished run older than `older_than`, batch after batch;
/// returns how many were deleted (a batch that fails ends the round).
pub(crate) async fn prune(store: &Store, older_than: Duration) -> usize {
    in_batches("history retention", || store.prune_runs(older_than, BATCH)).await
}

/// Deletes every row of the audit log older than `older_than`, as
/// [`prune`] does the history's.
pub(crate) async fn prune_audit(store: &Store, older_than: Duration) -> usize {
    in_batches("audit log retention", || {
        store.call("pruning the audit log", move |conn| {
            crate::db::audit::prune(conn, older_than, BATCH)
        })
    })
    .await
}

/// Calls `batch` until it deletes less than [`BATCH`] rows or fails;
/// returns how many it deleted.
async fn in_batches<F, Fut>(what: &str, mut batch: F) -> usize
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize, DbError>>,
{
    let mut deleted = 0;
    loop {
        match batch().await {
            Ok(n) => {
                deleted += n;
                if (n as i64) < BATCH {
                    return deleted;
                }
            }
            Err(e) => {
                warn!("{what} stopped after {deleted} rows: {e}");
                return deleted;
            }
        }
        // Let the database breathe between batches.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
