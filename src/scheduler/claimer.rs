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
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};

use super::job::Job;
use crate::db::{DbError, Store};
use crate::history::OnAbandoned;
use crate::lease::{self, Claim, Lease};

/// How long no claim must have come before a batch is closed.
const GATHER_QUIET: Duration = Duration::from_micros(150);
/// How long a batch may gather at most.
const GATHER_AT_MOST: Duration = Duration::from_millis(1);

/// What a claim through the batcher came to.
#[derive(Debug)]
pub(crate) enum Claimed {
    /// Won; the run's history row, if its start could be recorded in the
    /// batch (attempt 1).
    Won(Lease, Option<i64>),
    /// Not won: why, as [`Claim`] says (never [`Claim::Won`]).
    NotWon(Claim),
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
    let outcome = store
        .run(move |conn| claim_and_record(conn, &jobs, &instance, instant))
        .await;
    match outcome {
        Ok((claims, recorded)) => {
            for (request, claimed) in requests.into_iter().zip(claims) {
                let _ = request.reply.send(Ok(claimed));
            }
            if !recorded.is_empty() {
                let _ = store
                    .run(move |conn| mark_abandoned(conn, &recorded, &on_abandoned))
                    .await;
            }
        }
        Err(e) => {
            for request in requests {
                let _ = request.reply.send(Err(DbError::shared(&e)));
            }
        }
    }
}

/// Claims `jobs` at `instant` and records the start of each run won; the
/// leases are won whatever comes of the record: a run whose start is not
/// recorded here records its own. Returns the claims, and the jobs whose
/// start was recorded here.
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
) -> Result<(Vec<Claimed>, Vec<String>), DbError> {
    let refs: Vec<(&str, Duration)> = jobs.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let claims = lease::claim_many(conn, &refs, instance, instant)
        .map_err(|e| DbError::query(format!("claiming {} job(s) at {instant}", jobs.len()), e))?;
    let won: Vec<&str> = claims
        .iter()
        .filter_map(|c| match c {
            Claim::Won(lease) => Some(lease.job.as_str()),
            _ => None,
        })
        .collect();
    let mut ids: HashMap<String, i64> = HashMap::new();
    if !won.is_empty()
        && let Ok(rows) = lease::runs::record_leased_runs_started(conn, &won, instance, instant, 1)
    {
        ids = rows.into_iter().collect();
    }
    let recorded = won
        .iter()
        .filter(|j| ids.contains_key(**j))
        .map(|j| (*j).to_string())
        .collect();
    let claims = claims
        .into_iter()
        .map(|claim| match claim {
            Claim::Won(lease) => {
                let id = ids.get(&lease.job).copied();
                Claimed::Won(lease, id)
            }
            not_won => Claimed::NotWon(not_won),
        })
        .collect();
    Ok((claims, recorded))
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
