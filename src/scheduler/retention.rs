//! History retention across the fleet: now and then one replica (whichever
//! wins the `replicron.retention` lease) deletes the history and the audit
//! log older than `history_retention`, off the tick loops.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::db::health::Health;
use crate::db::{DbError, Store};
use crate::history::retention;
use crate::lease::Claim;

/// The lease row of the retention task (job names may not use the prefix).
pub(crate) const LEASE: &str = "replicron.retention";
/// How often a replica tries to prune.
const EVERY: Duration = Duration::from_secs(600);
/// The retention lease: the longest a round may take before another
/// replica may start one.
const LEASE_FOR: Duration = Duration::from_secs(300);

/// Prunes now and then until the task is aborted.
pub(crate) async fn prune_forever(
    store: Store,
    health: Arc<Health>,
    instance: String,
    older_than: Duration,
) {
    // Not at once: replicas that start together need not all try.
    tokio::time::sleep(
        Duration::from_secs(30) + Duration::from_millis(rand::random::<u64>() % 30_000),
    )
    .await;
    let mut every = tokio::time::interval(EVERY);
    loop {
        every.tick().await;
        if health.is_up()
            && let Err(e) = prune_once(&store, &instance, older_than).await
        {
            warn!("history retention skipped this round: {e}");
        }
    }
}

/// One round: claim the retention lease, delete, release. Returns how many
/// rows were deleted (0 if another replica had the lease).
async fn prune_once(store: &Store, instance: &str, older_than: Duration) -> Result<usize, DbError> {
    let Claim::Won(held) = store.claim_now(LEASE, instance, LEASE_FOR).await? else {
        debug!("another replica prunes the history this round");
        return Ok(0);
    };
    let deleted = retention::prune(store, older_than).await;
    let audited = retention::prune_audit(store, older_than).await;
    // Pauses that ended before the oldest history kept cover no instant
    // the check for missed instants or `verify` still looks at.
    if let Err(e) = store
        .call("pruning old pauses", move |conn| {
            crate::lease::prune_pauses(conn, older_than)
        })
        .await
    {
        warn!("pruning old pauses failed: {e}");
    }
    // The rows of `overlap = "allow"` jobs' instants as old as the oldest
    // history kept: no claim asks for such an instant.
    if let Err(e) = store
        .call("pruning old instant rows", move |conn| {
            crate::lease::prune_instant_rows(conn, older_than)
        })
        .await
    {
        warn!("pruning old instant rows failed: {e}");
    }
    // The places in line of runs whose replicas died waiting for a shared
    // lock or a limit (a waiter deletes its own).
    if let Err(e) = store
        .call("pruning old places in line", |conn| {
            crate::lease::queue::prune_waiter_rows(conn, Duration::from_secs(3600))
        })
        .await
    {
        warn!("pruning old places in line failed: {e}");
    }
    let _ = store.release(held, Duration::ZERO).await;
    if deleted > 0 || audited > 0 {
        info!(deleted, audit_rows = audited, retention = %humantime::format_duration(older_than), "pruned old history");
    }
    Ok(deleted)
}
