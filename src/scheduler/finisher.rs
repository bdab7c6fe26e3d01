//! The ends of runs and the releases of their leases, batched: every run
//! of a replica hands its end record, and then its lease's release, to one
//! of two lanes, which writes whatever has come in one statement (one per
//! lease length for the releases) and answers. At most two writes of each
//! kind are in flight, and what comes meanwhile goes in the next, so a
//! lone run's end waits for nothing, and a thousand runs that end within a
//! second cost a few dozen statements instead of two thousand.
//!
//! A batch changes nothing about what is written: each row gets its own
//! values and, for a release, its own fence check, in a statement that
//! writes every row or none. A batch that fails is not retried here: each
//! of its runs is answered with the error and writes its own end, or
//! release, as it would have alone (on fresh connections, then through the
//! journal), so a failure loses no row, and a row written twice is written
//! the same.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::db::{DbError, Store};
use crate::history::RunFinish;
use crate::lease::Lease;

/// The most rows one statement writes.
const MOST_ROWS: usize = 500;
/// The most output one end statement carries, in bytes (well under the
/// servers' packet limits).
const MOST_OUTPUT: usize = 4 << 20;

/// How many writes of each kind may be in flight at once: a write that
/// waits (on a row lock, a slow commit) holds up the next batch no longer
/// than the other's round trip.
const IN_FLIGHT: usize = 2;

/// The handle runs write their ends and releases through.
#[derive(Clone)]
pub(crate) struct Finisher {
    ends: mpsc::UnboundedSender<End>,
    releases: mpsc::UnboundedSender<Release>,
}

impl Finisher {
    /// Starts the writing tasks.
    pub(crate) fn start(store: Store) -> Finisher {
        let (ends, ends_rx) = mpsc::unbounded_channel();
        let (releases, releases_rx) = mpsc::unbounded_channel();
        tokio::spawn(lane(store.clone(), ends_rx, write_ends));
        tokio::spawn(lane(store, releases_rx, write_releases));
        Finisher { ends, releases }
    }

    /// Records that run `id` ended with `finish`. On `Err` the end may or
    /// may not have been written: the caller writes it alone.
    pub(crate) async fn end(&self, id: i64, finish: RunFinish) -> Result<(), DbError> {
        let (reply, answer) = oneshot::channel();
        if self.ends.send((id, finish, reply)).is_err() {
            return Err(gone());
        }
        answer.await.unwrap_or_else(|_| Err(gone()))
    }

    /// Releases `lease`, held on for `at_least` after its claim; `false`
    /// if it was no longer the row's. On `Err` it may or may not have been
    /// released.
    pub(crate) async fn release(&self, lease: Lease, at_least: Duration) -> Result<bool, DbError> {
        let (reply, answer) = oneshot::channel();
        if self.releases.send((lease, at_least, reply)).is_err() {
            return Err(gone());
        }
        answer.await.unwrap_or_else(|_| Err(gone()))
    }
}

fn gone() -> DbError {
    DbError::Task("the task writing runs' ends is gone".to_string())
}

/// Takes whatever requests have come and writes them with `write`, on a
/// task of its own, once one of [`IN_FLIGHT`] slots is free.
async fn lane<R, F, Fut>(store: Store, mut receiver: mpsc::UnboundedReceiver<R>, write: F)
where
    R: Send + 'static,
    F: Fn(Store, Vec<R>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    while let Some(first) = receiver.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while let Ok(request) = receiver.try_recv() {
            batch.push(request);
        }
        let write = write(store.clone(), batch);
        tokio::spawn(async move {
            write.await;
            drop(slot);
        });
    }
}

type End = (i64, RunFinish, oneshot::Sender<Result<(), DbError>>);

async fn write_ends(store: Store, mut ends: Vec<End>) {
    while !ends.is_empty() {
        let mut take = 0;
        let mut bytes = 0;
        while take < ends.len()
            && take < MOST_ROWS
            && (take == 0 || bytes + ends[take].1.output.len() <= MOST_OUTPUT)
        {
            bytes += ends[take].1.output.len();
            take += 1;
        }
        let rest = ends.split_off(take);
        let (rows, replies): (Vec<(i64, RunFinish)>, Vec<_>) = ends
            .into_iter()
            .map(|(id, finish, reply)| ((id, finish), reply))
            .unzip();
        let result = store
            .run(move |conn| {
                let refs: Vec<(i64, &RunFinish)> = rows.iter().map(|(id, f)| (*id, f)).collect();
                crate::history::record_runs_finished(conn, &refs).map_err(|e| {
                    DbError::query(format!("recording the ends of {} run(s)", refs.len()), e)
                })
            })
            .await;
        for reply in replies {
            let _ = reply.send(result.as_ref().map(|_| ()).map_err(DbError::shared));
        }
        ends = rest;
    }
}

type ReleaseReply = oneshot::Sender<Result<bool, DbError>>;
type Release = (Lease, Duration, ReleaseReply);

async fn write_releases(store: Store, releases: Vec<Release>) {
    let mut groups: HashMap<(String, Duration), Vec<(Lease, ReleaseReply)>> = HashMap::new();
    for (lease, at_least, reply) in releases {
        groups
            .entry((lease.instance.clone(), at_least))
            .or_default()
            .push((lease, reply));
    }
    for ((_, at_least), mut group) in groups {
        while !group.is_empty() {
            let rest = group.split_off(group.len().min(MOST_ROWS));
            let (leases, replies): (Vec<Lease>, Vec<_>) = group.into_iter().unzip();
            let result = store
                .run(move |conn| {
                    let refs: Vec<&Lease> = leases.iter().collect();
                    crate::lease::release_many(conn, &refs, at_least).map_err(|e| {
                        DbError::query(format!("releasing {} lease(s)", refs.len()), e)
                    })
                })
                .await;
            match result {
                Ok(ours) => {
                    for (reply, ours) in replies.into_iter().zip(ours) {
                        let _ = reply.send(Ok(ours));
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(DbError::shared(&e)));
                    }
                }
            }
            group = rest;
        }
    }
}
