//! The history statements as async calls through the [`Store`].

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{NewRun, RunBrief, RunFilter, RunRow};
use crate::db::{DbError, Store};

impl Store {
    /// [`super::record_run_started`]: the new run's id.
    pub(crate) async fn record_run_started(&self, run: NewRun) -> Result<i64, DbError> {
        self.call("recording the run's start", move |conn| {
            super::record_run_started(conn, &run)
        })
        .await
    }

    /// [`super::record_unrun`].
    pub(crate) async fn record_unrun(
        &self,
        run: NewRun,
        output: String,
    ) -> Result<Option<i64>, DbError> {
        self.call("recording an instant that did not run", move |conn| {
            super::record_unrun(conn, &run, &output)
        })
        .await
    }

    /// [`super::restart_run`].
    pub(crate) async fn restart_run(&self, id: i64) -> Result<usize, DbError> {
        self.call("recording the run's start", move |conn| {
            super::restart_run(conn, id)
        })
        .await
    }

    /// [`super::backfill_state`].
    pub(crate) async fn backfill_state(
        &self,
        job: &str,
        instant: DateTime<Utc>,
    ) -> Result<super::BackfillState, DbError> {
        let job = job.to_string();
        self.call("reading the instant's runs", move |conn| {
            super::backfill_state(conn, &job, instant)
        })
        .await
    }

    /// [`super::rerun_state`].
    pub(crate) async fn rerun_state(
        &self,
        job: &str,
        instant: DateTime<Utc>,
    ) -> Result<super::RerunState, DbError> {
        let job = job.to_string();
        self.call("reading the instant's runs", move |conn| {
            super::rerun_state(conn, &job, instant)
        })
        .await
    }

    /// [`super::set_trigger`].
    pub(crate) async fn set_trigger(
        &self,
        id: i64,
        trigger: super::Trigger,
    ) -> Result<usize, DbError> {
        self.call("recording what started the run", move |conn| {
            super::set_trigger(conn, id, trigger)
        })
        .await
    }

    /// [`super::set_params`].
    pub(crate) async fn set_params(&self, id: i64, params: String) -> Result<usize, DbError> {
        self.call("recording the run's parameters", move |conn| {
            super::set_params(conn, id, &params)
        })
        .await
    }

    /// [`super::runs_after`].
    pub(crate) async fn runs_after(
        &self,
        jobs: Vec<String>,
        after: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<super::RunBrief>, DbError> {
        self.call("reading the parents' runs", move |conn| {
            super::runs_after(conn, &jobs, after, limit)
        })
        .await
    }

    /// Fills each record's `parent_runs` (none where they cannot be read:
    /// a listing is not refused for them).
    pub(crate) async fn with_parents(&self, records: &mut [super::RunRecord]) {
        let ids = super::dependent_ids(records);
        if ids.is_empty() {
            return;
        }
        if let Ok(parents) = self
            .call("reading the parents' runs of runs", move |conn| {
                super::parents_of(conn, &ids)
            })
            .await
        {
            super::attach_parents(records, parents);
        }
    }

    /// Fills each record's `reason` (none where they cannot be read: a
    /// listing is not refused for them).
    pub(crate) async fn with_reasons(&self, records: &mut [super::RunRecord]) {
        let ids = super::reasoned_ids(records);
        if ids.is_empty() {
            return;
        }
        if let Ok(reasons) = self
            .call("reading why runs were started", move |conn| {
                super::reasons_of(conn, &ids)
            })
            .await
        {
            super::attach_reasons(records, reasons);
        }
    }

    /// [`super::record_reason`].
    pub(crate) async fn record_reason(
        &self,
        id: i64,
        reason: std::sync::Arc<str>,
    ) -> Result<usize, DbError> {
        self.call("recording why the run was started", move |conn| {
            super::record_reason(conn, id, &reason)
        })
        .await
    }

    /// [`super::link_parents`].
    pub(crate) async fn link_parents(&self, id: i64, parents: Vec<i64>) -> Result<usize, DbError> {
        self.call(
            "recording the parents' runs that started the run",
            move |conn| super::link_parents(conn, id, &parents),
        )
        .await
    }

    /// [`super::latest_attempt`].
    pub(crate) async fn latest_attempt(
        &self,
        job: &str,
        instant: DateTime<Utc>,
        fence: i64,
    ) -> Result<Option<RunRow>, DbError> {
        let job = job.to_string();
        self.call("reading the previous run", move |conn| {
            super::latest_attempt(conn, &job, instant, fence)
        })
        .await
    }

    /// [`super::last_successes`].
    pub(crate) async fn last_successes(
        &self,
        jobs: Vec<String>,
    ) -> Result<Vec<(String, Option<chrono::NaiveDateTime>)>, DbError> {
        self.call("reading the jobs' last successes", move |conn| {
            super::last_successes(conn, &jobs)
        })
        .await
    }

    /// [`super::list_runs`].
    pub(crate) async fn list_runs(&self, filter: RunFilter) -> Result<Vec<RunRow>, DbError> {
        self.call("reading the history", move |conn| {
            super::list_runs(conn, &filter)
        })
        .await
    }

    /// [`super::prune_runs`].
    pub(crate) async fn prune_runs(
        &self,
        older_than: Duration,
        batch: i64,
    ) -> Result<usize, DbError> {
        self.call("pruning the history", move |conn| {
            super::prune_runs(conn, older_than, batch)
        })
        .await
    }

    /// [`super::list_briefs`].
    pub(crate) async fn list_briefs(&self, filter: RunFilter) -> Result<Vec<RunBrief>, DbError> {
        self.call("reading the history", move |conn| {
            super::list_briefs(conn, &filter)
        })
        .await
    }

    /// [`super::search::search`].
    pub(crate) async fn search_runs(
        &self,
        search: super::search::RunSearch,
    ) -> Result<Vec<RunBrief>, DbError> {
        self.call("reading the history", move |conn| {
            super::search::search(conn, &search)
        })
        .await
    }

    /// [`super::search::window`].
    pub(crate) async fn run_window(
        &self,
        job: &str,
        from: chrono::NaiveDateTime,
        cap: i64,
    ) -> Result<super::search::Window, DbError> {
        let job = job.to_string();
        self.call("reading the job's runs", move |conn| {
            super::search::window(conn, &job, from, cap)
        })
        .await
    }

    /// [`super::recent_briefs`].
    pub(crate) async fn recent_briefs(
        &self,
        jobs: Vec<String>,
        count: i64,
    ) -> Result<Vec<(String, Vec<RunBrief>)>, DbError> {
        self.call("reading the history", move |conn| {
            super::recent_briefs(conn, &jobs, count)
        })
        .await
    }

    /// [`super::find_run`].
    pub(crate) async fn find_run(&self, id: i64) -> Result<Option<RunRow>, DbError> {
        self.call("reading the history", move |conn| super::find_run(conn, id))
            .await
    }

    /// [`super::find_brief`].
    pub(crate) async fn find_brief(&self, id: i64) -> Result<Option<RunBrief>, DbError> {
        self.call("reading the history", move |conn| {
            super::find_brief(conn, id)
        })
        .await
    }

    /// [`super::find_runs`].
    pub(crate) async fn find_runs(&self, ids: Vec<i64>) -> Result<Vec<RunRow>, DbError> {
        self.call("reading the history", move |conn| {
            super::find_runs(conn, &ids)
        })
        .await
    }

    /// [`super::runs_left`].
    pub(crate) async fn runs_left(
        &self,
        ids: Vec<i64>,
    ) -> Result<std::collections::HashMap<i64, bool>, DbError> {
        self.call("reading which runs are left", move |conn| {
            super::runs_left(conn, &ids)
        })
        .await
    }

    /// [`super::running_under`].
    pub(crate) async fn running_under(
        &self,
        job: &str,
        fence: i64,
    ) -> Result<Option<RunRow>, DbError> {
        let job = job.to_string();
        self.call("reading the history", move |conn| {
            super::running_under(conn, &job, fence)
        })
        .await
    }
}
