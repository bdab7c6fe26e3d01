//! Claims of the jobs due at one instant, batched: every job loop of a
//! replica that wakes at the same instant hands its claim to this one task,
//! which claims them all with one conditional UPDATE (per lease length) and
//! one read, records the starts of the runs it won with one INSERT … SELECT
//! and one read, answers the job loops (their runs start), and only then
//! marks their vanished predecessors abandoned with one more read: a
//! handful of statements per replica per instant instead of several per
//! job, and no more on the way to a run's start than claiming and recording
//! it. Each row is claimed under exactly the conditions of a single claim;
//! only the round trips are shared.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::job::Job;
use crate::db::{DbError, Store};
use crate::history::OnAbandoned;
use crate::lease::{self, Claim, Lease, Nonce};

/// How long no claim must have come before a batch is closed.
const GATHER_QUIET: Duration = Duration::from_micros(150);
/// How long a batch may gather at most.
const GATHER_AT_MOST: Duration = Duration::from_millis(1);

/// What a claim through the batcher came to.
#[derive(Debug)]
pub(crate) enum Claimed {
    /// Won.
    Won {
        /// The lease.
        lease: Lease,
        /// The run's history row, if its start could be recorded in the
        /// batch (attempt 1).
        run: Option<i64>,
        /// When the claim statement was sent, on the monotonic clock: the
        /// lease is counted from here (the database counts it from when the
        /// statement began, which is no earlier), never from the answer.
        sent: Instant,
    },
    /// Not won: why, as [`Claim`] says (never [`Claim::Won`]).
    NotWon(Claim),
    /// The database could not be heard (the connection or the server died,
    /// or no answer came in time): the claim may have committed all the
    /// same.
    Unanswered(Unanswered),
}

/// A claim whose answer was lost. Its nonce tells, once the database
/// answers again, whether it committed.
#[derive(Debug)]
pub(crate) struct Unanswered {
    /// The claim statement's nonce.
    pub(crate) nonce: Nonce,
    /// When it was sent.
    pub(crate) sent: Instant,
    /// Why there is no answer.
    pub(crate) error: DbError,
    /// Becomes `true` once the statement's call has returned (it may go on
    /// after its caller stopped waiting): only then does the row tell the
    /// claim's fate.
    returned: watch::Receiver<bool>,
}

impl Unanswered {
    /// Waits until the claim's call has returned, at most until `deadline`;
    /// `false` if it has not.
    pub(crate) async fn returned_by(&mut self, deadline: Instant) -> bool {
        let returned = self.returned.wait_for(|returned| *returned);
        matches!(
            tokio::time::timeout_at(deadline, returned).await,
            Ok(Ok(_)) | Ok(Err(_))
        )
    }

    /// A claim whose answer came, but too late to hold its lease in time:
    /// like one whose answer was lost, its lease is confirmed again before
    /// anything runs.
    pub(crate) fn late(lease: &Lease, sent: Instant) -> Unanswered {
        let (_, returned) = watch::channel(true);
        Unanswered {
            nonce: Nonce(lease.nonce),
            sent,
            error: DbError::Task("the claim was answered too late".to_string()),
            returned,
        }
    }
}

/// Tells its watchers when dropped, however the call it lives in ends.
struct Returned(watch::Sender<bool>);

impl Drop for Returned {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

struct Request {
    job: String,
    lease_for: Duration,
    instant: DateTime<Utc>,
    reply: oneshot::Sender<Result<Claimed, DbError>>,
}

/// The handle job loops claim through.
#[derive(Clone)]
pub(crate) struct Claimer {
    requests: mpsc::UnboundedSender<Request>,
}

impl Claimer {
    /// Starts the batching task for `instance`.
    pub(crate) fn start(store: Store, instance: String, on_abandoned: OnAbandoned) -> Claimer {
        let (requests, receiver) = mpsc::unbounded_channel();
        tokio::spawn(batcher(store, instance, receiver, on_abandoned));
        Claimer { requests }
    }

    /// Claims `instant` of `job`.
    pub(crate) async fn claim(
        &self,
        job: &Job,
        instant: DateTime<Utc>,
    ) -> Result<Claimed, DbError> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            job: job.name.clone(),
            lease_for: job.settings.lock_at_most_for,
            instant,
            reply,
        };
        if self.requests.send(request).is_err() {
            return Err(DbError::Task("the claim batcher is gone".to_string()));
        }
        answer.await.unwrap_or_else(|_| {
            Err(DbError::Task(
                "the claim batcher dropped a claim".to_string(),
            ))
        })
    }
}

async fn batcher(
    store: Store,
    instance: String,
    mut receiver: mpsc::UnboundedReceiver<Request>,
    on_abandoned: OnAbandoned,
) {
    while let Some(first) = receiver.recv().await {
        let mut batch = vec![first];
        // The job loops of one instant wake together (the alarm rings for
        // all of them at once) and each hands its claim in a moment later:
        // gather until none has come for a quiet spell, or for at most a
        // millisecond, yielding meanwhile so that they run.
        let first_at = std::time::Instant::now();
        let mut last_arrival = first_at;
        loop {
            tokio::task::yield_now().await;
            let before = batch.len();
            while let Ok(request) = receiver.try_recv() {
                batch.push(request);
            }
            let now = std::time::Instant::now();
            if batch.len() > before {
                last_arrival = now;
            } else if now - last_arrival >= GATHER_QUIET || now - first_at >= GATHER_AT_MOST {
                break;
            }
        }
        let mut by_instant: HashMap<DateTime<Utc>, Vec<Request>> = HashMap::new();
        for request in batch {
            by_instant.entry(request.instant).or_default().push(request);
        }
        // Each batch on its own task (and pool connection): a claim that
        // came after its instant's batch closed does not wait for it.
        for (instant, requests) in by_instant {
            let (store, me, on_abandoned) = (store.clone(), instance.clone(), on_abandoned.clone());
            tokio::spawn(claim_batch(store, me, instant, requests, on_abandoned));
        }
    }
}

/// Claims and records one batch, answers its requests, then marks the runs
/// of vanished holders abandoned.
async fn claim_batch(
    store: Store,
    instance: String,
    instant: DateTime<Utc>,
    requests: Vec<Request>,
    on_abandoned: OnAbandoned,
) {
    let jobs: Vec<(String, Duration)> = requests
        .iter()
        .map(|r| (r.job.clone(), r.lease_for))
        .collect();
    let nonce = Nonce::new();
    // Set when nobody waits for the answer any more: a claim that commits
    // after that gives its leases back at once instead of recording runs
    // nobody will start (the job loops ask the rows what became of it).
    let abandoned = Arc::new(AtomicBool::new(false));
    let (returned, returned_rx) = watch::channel(false);
    let sent = Instant::now();
    let outcome = {
        let abandoned = abandoned.clone();
        store
            .run(move |conn| {
                let _returned = Returned(returned);
                claim_and_record(conn, &jobs, &instance, instant, nonce, &abandoned)
            })
            .await
    };
    match outcome {
        Ok((claims, ids)) => {
            let recorded: Vec<String> = ids.keys().cloned().collect();
            for (request, claim) in requests.into_iter().zip(claims) {
                let claimed = match claim {
                    Claim::Won(lease) => {
                        let run = ids.get(&lease.job).copied();
                        Claimed::Won { lease, run, sent }
                    }
                    not_won => Claimed::NotWon(not_won),
                };
                let _ = request.reply.send(Ok(claimed));
            }
            if !recorded.is_empty() {
                let _ = store
                    .run(move |conn| mark_abandoned(conn, &recorded, &on_abandoned))
                    .await;
            }
        }
        Err(e) => {
            abandoned.store(true, Ordering::SeqCst);
            for request in requests {
                let answer = if e.is_unreachable() {
                    Ok(Claimed::Unanswered(Unanswered {
                        nonce,
                        sent,
                        error: DbError::shared(&e),
                        returned: returned_rx.clone(),
                    }))
                } else {
                    Err(DbError::shared(&e))
                };
                let _ = request.reply.send(answer);
            }
        }
    }
}

/// Claims `jobs` at `instant` with `nonce` and records the start of each
/// run won; the leases are won whatever comes of the record: a run whose
/// start is not recorded here records its own. Returns the claims, and the
/// run ids of the jobs whose start was recorded here. If its caller stopped waiting
/// (`abandoned`) by the time the claim returns, the leases won are given
/// back at once and nothing is recorded.
///
/// Two commits, not one transaction: a transaction would hold the claimed
/// rows' locks, and the shared locks its `INSERT … SELECT` takes on them,
/// until the record commits, and at 1,000 per-second jobs on three replicas
/// the other replicas' claims queued and deadlocked behind them (a third
/// of the instants were missed).
fn claim_and_record(
    conn: &mut crate::db::DbConnection,
    jobs: &[(String, Duration)],
    instance: &str,
    instant: DateTime<Utc>,
    nonce: Nonce,
    abandoned: &AtomicBool,
) -> Result<(Vec<Claim>, HashMap<String, i64>), DbError> {
    let refs: Vec<(&str, Duration)> = jobs.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let claims = lease::claim_many(conn, &refs, instance, instant, nonce)
        .map_err(|e| DbError::query(format!("claiming {} job(s) at {instant}", jobs.len()), e))?;
    let won: Vec<&Lease> = claims
        .iter()
        .filter_map(|c| match c {
            Claim::Won(lease) => Some(lease),
            _ => None,
        })
        .collect();
    if abandoned.load(Ordering::SeqCst) {
        for lease in won {
            let _ = lease::release(conn, lease, Duration::ZERO);
        }
        return Err(DbError::Task(
            "the claim returned after its caller stopped waiting".to_string(),
        ));
    }
    let mut ids: HashMap<String, i64> = HashMap::new();
    if !won.is_empty()
        && let Ok(rows) = lease::runs::record_leased_runs_started(conn, &won, nonce, 1)
    {
        ids = rows.into_iter().collect();
    }
    Ok((claims, ids))
}

/// Marks abandoned the runs of vanished holders of the leases of `jobs`
/// (whose new runs are recorded). A failure leaves them to the next run of
/// the job recorded here: its sweep finds every older one still running.
fn mark_abandoned(
    conn: &mut crate::db::DbConnection,
    jobs: &[String],
    on_abandoned: &OnAbandoned,
) -> Result<(), DbError> {
    let jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
    if let Ok(marked) = lease::runs::mark_abandoned_behind_leases(conn, &jobs)
        && !marked.is_empty()
    {
        tracing::warn!(
            runs = marked.len(),
            "marked runs of vanished holders abandoned"
        );
        on_abandoned(&marked);
    }
    Ok(())
}
