//! Claims of the jobs due at one instant, batched: every job loop of a
//! replica that wakes at the same instant hands its claim to this one task,
//! which claims them all with one conditional UPDATE (per lease length) and
//! one read, records the starts of the runs it won with one INSERT … SELECT
//! and one read, and marks their vanished predecessors abandoned with one
//! more UPDATE: a handful of statements per replica per instant instead of
//! several per job. Each row is claimed under exactly the conditions of a
//! single claim; only the round trips are shared.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};

use super::job::Job;
use crate::db::{DbError, Store};
use crate::history::OnAbandoned;
use crate::lease::{self, Claim, Lease};

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
        // The job loops of one instant wake together: let them all queue.
        loop {
            let before = batch.len();
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            while let Ok(request) = receiver.try_recv() {
                batch.push(request);
            }
            if batch.len() == before {
                break;
            }
        }
        let mut by_instant: HashMap<DateTime<Utc>, Vec<Request>> = HashMap::new();
        for request in batch {
            by_instant.entry(request.instant).or_default().push(request);
        }
        for (instant, requests) in by_instant {
            let jobs: Vec<(String, Duration)> = requests
                .iter()
                .map(|r| (r.job.clone(), r.lease_for))
                .collect();
            let (me, on_abandoned) = (instance.clone(), on_abandoned.clone());
            let outcome = store
                .run(move |conn| claim_and_record(conn, &jobs, &me, instant, &on_abandoned))
                .await;
            match outcome {
                Ok(claims) => {
                    for (request, claimed) in requests.into_iter().zip(claims) {
                        let _ = request.reply.send(Ok(claimed));
                    }
                }
                Err(e) => {
                    for request in requests {
                        let _ = request.reply.send(Err(DbError::shared(&e)));
                    }
                }
            }
        }
    }
}

fn claim_and_record(
    conn: &mut crate::db::DbConnection,
    jobs: &[(String, Duration)],
    instance: &str,
    instant: DateTime<Utc>,
    on_abandoned: &OnAbandoned,
) -> Result<Vec<Claimed>, DbError> {
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
    // The leases are won; if recording fails here, each run records its
    // own start (and the journal marks the abandoned runs) instead.
    let mut ids: HashMap<String, i64> = HashMap::new();
    if !won.is_empty() {
        if let Ok(rows) = lease::runs::record_leased_runs_started(conn, &won, instance, instant, 1)
        {
            ids = rows.into_iter().collect();
        }
        if !ids.is_empty() {
            let recorded: Vec<&str> = won
                .iter()
                .copied()
                .filter(|j| ids.contains_key(*j))
                .collect();
            if let Ok(marked) = lease::runs::mark_abandoned_behind_leases(conn, &recorded)
                && !marked.is_empty()
            {
                tracing::warn!(
                    runs = marked.len(),
                    "marked runs of vanished holders abandoned"
                );
                on_abandoned(&marked);
            }
        }
    }
    Ok(claims
        .into_iter()
        .map(|claim| match claim {
            Claim::Won(lease) => {
                let id = ids.get(&lease.job).copied();
                Claimed::Won(lease, id)
            }
            not_won => Claimed::NotWon(not_won),
        })
        .collect())
}
