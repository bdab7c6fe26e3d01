//! History retention: rows older than `[daemon] history_retention` are
//! deleted in small batches, by one replica at a time (whichever wins the
//! `replicron.retention` lease), off the tick loops.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::Shared;
use crate::db::DbError;
use crate::history;
use crate::lease::{self, Claim};

/// The lease row of the retention task (job names may not use the prefix).
pub const LEASE: &str = "replicron.retention";
/// How often a replica tries to prune.
const EVERY: Duration = Duration::from_secs(600);
/// Rows per delete: small, so that no statement holds locks for long.
const BATCH: i64 = 500;
/// The retention lease: the longest a round may take before another
/// replica may start one.
const LEASE_FOR: Duration = Duration::from_secs(300);

/// Prunes now and then until the task is aborted.
pub async fn prune_forever(shared: Arc<Shared>, older_than: Duration) {
    // Not at once: replicas that start together need not all try.
    tokio::time::sleep(
        Duration::from_secs(30) + Duration::from_millis(rand::random::<u64>() % 30_000),
    )
    .await;
    let mut every = tokio::time::interval(EVERY);
    loop {
        every.tick().await;
        if shared.health.is_up()
            && let Err(e) = prune_once(&shared, older_than).await
        {
            shared.health.report_error(&e);
            warn!("history retention skipped this round: {e}");
        }
    }
}

/// One round: claim the retention lease, delete batch after batch, release.
/// Returns how many rows were deleted (0 if another replica had the lease).
pub async fn prune_once(shared: &Shared, older_than: Duration) -> Result<usize, DbError> {
    let me = shared.instance.clone();
    let claimed = shared
        .pool
        .run_blocking(move |conn| {
            lease::claim_at_database_now(conn, LEASE, &me, LEASE_FOR)
                .map_err(|e| DbError::query("claiming the retention lease", e))
        })
        .await?;
    let Claim::Won(held) = claimed else {
        debug!("another replica prunes the history this round");
        return Ok(0);
    };
    let mut deleted = 0;
    loop {
        let batch = shared
            .pool
            .run_blocking(move |conn| {
                history::prune_runs(conn, older_than, BATCH)
                    .map_err(|e| DbError::query("pruning the history", e))
            })
            .await;
        match batch {
            Ok(n) => {
                deleted += n;
                if (n as i64) < BATCH {
                    break;
                }
            }
            Err(e) => {
                warn!("history retention stopped after {deleted} rows: {e}");
                break;
            }
        }
        // Let the database breathe between batches.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let release = held.clone();
    let _ = shared
        .pool
        .run_blocking(move |conn| {
            lease::release(conn, &release, Duration::ZERO)
                .map_err(|e| DbError::query("releasing the retention lease", e))
        })
        .await;
    if deleted > 0 {
        info!(deleted, retention = %humantime::format_duration(older_than), "pruned old history");
    }
    Ok(deleted)
}
