//! The lease statements as async calls through the [`Store`].

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Claim, Lease, LockRow};
use crate::db::{DbError, Store};

impl Store {
    /// [`super::extend`]: `false` means the lease was lost.
    pub(crate) async fn extend(&self, lease: Lease, length: Duration) -> Result<bool, DbError> {
        self.call("extending the lease", move |conn| {
            super::extend(conn, &lease, length)
        })
        .await
    }

    /// [`super::release`]: `false` means the lease was no longer this one.
    pub(crate) async fn release(&self, lease: Lease, at_least: Duration) -> Result<bool, DbError> {
        self.call("releasing the lease", move |conn| {
            super::release(conn, &lease, at_least)
        })
        .await
    }

    /// [`Store::release`], tried again on a fresh connection while the
    /// database cannot be reached, until `deadline`.
    pub(crate) async fn release_until(
        &self,
        lease: Lease,
        at_least: Duration,
        deadline: tokio::time::Instant,
    ) -> Result<bool, DbError> {
        self.call_until("releasing the lease", deadline, move |conn| {
            super::release(conn, &lease, at_least)
        })
        .await
    }

    /// [`super::claim_with`] of `instant`, heeding pauses.
    pub(crate) async fn claim(
        &self,
        job: &str,
        instance: &str,
        instant: DateTime<Utc>,
        length: Duration,
    ) -> Result<Claim, DbError> {
        let (job, instance) = (job.to_string(), instance.to_string());
        self.call("claiming the lease", move |conn| {
            super::claim_with(
                conn,
                &job,
                &instance,
                instant,
                length,
                super::Pauses::Heeded,
                super::Nonce::new(),
            )
        })
        .await
    }

    /// [`super::take_up_unanswered`].
    pub(crate) async fn take_up_unanswered(
        &self,
        job: &str,
        instance: &str,
        instant: DateTime<Utc>,
        nonce: super::Nonce,
        length: Duration,
    ) -> Result<super::Committed, DbError> {
        let (job, instance) = (job.to_string(), instance.to_string());
        self.call("asking whether a claim committed", move |conn| {
            super::take_up_unanswered(conn, &job, &instance, instant, nonce, length)
        })
        .await
    }

    /// [`super::claim_at_database_now`].
    pub(crate) async fn claim_now(
        &self,
        job: &str,
        instance: &str,
        length: Duration,
    ) -> Result<Claim, DbError> {
        let (job, instance) = (job.to_string(), instance.to_string());
        self.call("claiming the lease", move |conn| {
            super::claim_at_database_now(conn, &job, &instance, length)
        })
        .await
    }

    /// [`super::ensure_rows`] of `jobs`; how many were created.
    pub(crate) async fn ensure_rows(&self, jobs: Vec<String>) -> Result<usize, DbError> {
        self.call("creating lease rows", move |conn| {
            let names: Vec<&str> = jobs.iter().map(String::as_str).collect();
            super::ensure_rows(conn, &names)
        })
        .await
    }

    /// [`super::earlier_instant_waits`].
    pub(crate) async fn earlier_instant_waits(
        &self,
        job: &str,
        instant: DateTime<Utc>,
    ) -> Result<bool, DbError> {
        let job = job.to_string();
        self.call("reading the job's waiting instants", move |conn| {
            super::earlier_instant_waits(conn, &job, instant)
        })
        .await
    }

    /// [`super::find_lock`].
    pub(crate) async fn find_lock(&self, job: &str) -> Result<Option<LockRow>, DbError> {
        let job = job.to_string();
        self.call("reading the lease", move |conn| {
            super::find_lock(conn, &job)
        })
        .await
    }

    /// [`super::enqueue`].
    pub(crate) async fn enqueue(&self, job: &str, instant: DateTime<Utc>) -> Result<bool, DbError> {
        let job = job.to_string();
        self.call("queueing the instant", move |conn| {
            super::enqueue(conn, &job, instant)
        })
        .await
    }

    /// [`super::request_stop`].
    pub(crate) async fn request_stop(&self, job: &str, fence: i64) -> Result<bool, DbError> {
        let job = job.to_string();
        self.call("asking the running run to stop", move |conn| {
            super::request_stop(conn, &job, fence)
        })
        .await
    }

    /// [`super::stop_requested`].
    pub(crate) async fn stop_requested(&self, job: &str, fence: i64) -> Result<bool, DbError> {
        let job = job.to_string();
        self.call("reading whether the run was replaced", move |conn| {
            super::stop_requested(conn, &job, fence)
        })
        .await
    }

    /// [`super::is_held`].
    pub(crate) async fn is_held(&self, job: &str) -> Result<bool, DbError> {
        let job = job.to_string();
        self.call("reading the lease", move |conn| super::is_held(conn, &job))
            .await
    }

    /// [`super::all_pauses_between`].
    pub(crate) async fn all_pauses_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<(String, chrono::NaiveDateTime, chrono::NaiveDateTime)>, DbError> {
        self.call("reading the pauses", move |conn| {
            super::all_pauses_between(conn, from, to)
        })
        .await
    }

    /// [`super::paused_jobs`].
    pub(crate) async fn paused_jobs(&self, jobs: Vec<String>) -> Result<Vec<String>, DbError> {
        self.call("reading which jobs are paused", move |conn| {
            let names: Vec<&str> = jobs.iter().map(String::as_str).collect();
            super::paused_jobs(conn, &names)
        })
        .await
    }

    /// [`super::database_now`].
    pub(crate) async fn database_now(&self) -> Result<DateTime<Utc>, DbError> {
        self.call("reading the database clock", crate::db::clock::database_now)
            .await
    }

    /// [`super::list_locks`].
    pub(crate) async fn list_locks(&self) -> Result<Vec<LockRow>, DbError> {
        self.call("reading the leases", super::list_locks).await
    }

    /// [`super::pause`] of `job` (its row created if missing).
    pub(crate) async fn pause(
        &self,
        job: &str,
        until: Option<DateTime<Utc>>,
        by: String,
        reason: Option<String>,
    ) -> Result<(), DbError> {
        let job = job.to_string();
        self.call("pausing the job", move |conn| {
            super::ensure_rows(conn, &[job.as_str()])?;
            super::pause(conn, &job, until, &by, reason.as_deref()).map(|_| ())
        })
        .await
    }

    /// [`super::resume`]: `false` if it was not paused.
    pub(crate) async fn resume(&self, job: &str) -> Result<bool, DbError> {
        let job = job.to_string();
        self.call("resuming the job", move |conn| super::resume(conn, &job))
            .await
    }

    /// [`super::force_unlock`].
    pub(crate) async fn force_unlock(&self, job: &str) -> Result<bool, DbError> {
        let job = job.to_string();
        self.call("ending the lease", move |conn| {
            super::force_unlock(conn, &job)
        })
        .await
    }
}
