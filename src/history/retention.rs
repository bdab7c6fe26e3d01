//! History retention's deletions: rows older than `history_retention`,
//! finished ones only, in small batches with a pause between them, so that
//! no statement holds locks for long. One replica at a time runs a round,
//! under the `replicron.retention` lease that the scheduler takes.

use std::time::Duration;

use tracing::warn;

use crate::db::Store;

/// Rows per delete.
const BATCH: i64 = 500;

/// Deletes every finished run older than `older_than`, batch after batch;
/// returns how many were deleted (a batch that fails ends the round).
pub(crate) async fn prune(store: &Store, older_than: Duration) -> usize {
    let mut deleted = 0;
    loop {
        match store.prune_runs(older_than, BATCH).await {
            Ok(n) => {
                deleted += n;
                if (n as i64) < BATCH {
                    return deleted;
                }
            }
            Err(e) => {
                warn!("history retention stopped after {deleted} rows: {e}");
                return deleted;
            }
        }
        // Let the database breathe between batches.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
