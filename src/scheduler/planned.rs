//! One-time runs asked for ahead: `replicron trigger JOB --at TIME` and the
//! API's trigger with `at`. Each is a row of `replicron_planned_runs` (its
//! job, its instant, its parameters, who asked), so that whichever replicas
//! run then see it: every replica that has the job reads the rows due soon,
//! sleeps until the instant by the database's clock, and claims it as it
//! claims a scheduled instant, through the job's lease: one replica wins
//! and runs it (recorded `manual`, with its parameters), and deletes the
//! row. A row nobody could claim in time is caught up if the job's
//! `catch_up` covers it, else recorded `missed` (and notified) and deleted.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use diesel::prelude::*;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::engine::Engine;
use super::job::Job;
use super::tick::{self, Attempt, Cause, Patience};
use crate::db::clock::{DbNow, to_db_time};
use crate::db::schema::replicron_planned_runs::dsl as planned;
use crate::db::schema::replicron_runs::dsl as runs;
use crate::db::{DbError, Store};
use crate::history::{Params, Trigger};
use crate::schedule::fmt_instant;

/// How often a replica reads the rows: it reads those due within twice
/// this, and sleeps until each one's instant.
pub(crate) const POLL: Duration = Duration::from_secs(5);

/// The longest one sleep toward an instant: the database's clock is read
/// again after it.
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// A row of `replicron_planned_runs`.
#[derive(Clone, Debug, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = crate::db::schema::replicron_planned_runs)]
pub(crate) struct PlannedRow {
    /// Its id.
    pub id: i64,
    /// Its job.
    pub job: String,
    /// Its instant.
    pub run_at: NaiveDateTime,
    /// The parameters given, as a JSON object.
    pub params: Option<String>,
    /// Who asked.
    pub requested_by: String,
    /// When.
    pub requested_at: NaiveDateTime,
}

/// Records a one-time run of `job` at `at` with `params` (no secret's
/// value among them), asked for by `by`: its id, or `None` if one is
/// already planned for that job and instant.
pub(crate) async fn plan(
    store: &Store,
    job: &str,
    at: DateTime<Utc>,
    params: &Params,
    by: &str,
) -> Result<Option<i64>, DbError> {
    let (job, by) = (job.to_string(), by.to_string());
    let params = crate::history::params_column(params, &[]);
    let at = to_db_time(at);
    store
        .call("recording the one-time run", move |conn| {
            let inserted = diesel::insert_into(planned::replicron_planned_runs)
                .values((
                    planned::job.eq(&job),
                    planned::run_at.eq(at),
                    planned::params.eq(&params),
                    planned::requested_by.eq(&by),
                    planned::requested_at.eq(DbNow),
                ))
                .execute(conn);
            match inserted {
                Ok(_) => {}
                Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    _,
                )) => return Ok(None),
                Err(e) => return Err(e),
            }
            planned::replicron_planned_runs
                .select(planned::id)
                .filter(planned::job.eq(&job))
                .filter(planned::run_at.eq(at))
                .first(conn)
                .map(Some)
        })
        .await
}

/// The rows whose instant is at or before `until`, oldest first.
pub(crate) async fn due(store: &Store, until: DateTime<Utc>) -> Result<Vec<PlannedRow>, DbError> {
    let until = to_db_time(until);
    store
        .call("reading the one-time runs", move |conn| {
            planned::replicron_planned_runs
                .filter(planned::run_at.le(until))
                .select(PlannedRow::as_select())
                .order((planned::run_at, planned::id))
                .load(conn)
        })
        .await
}

/// Every row, oldest instant first: the one-time runs to come.
pub(crate) async fn list(store: &Store) -> Result<Vec<PlannedRow>, DbError> {
    due(store, crate::db::clock::far_future().and_utc()).await
}

/// Deletes row `id`: its instant was claimed, or recorded.
async fn forget(store: &Store, id: i64) {
    let deleted = store
        .call("deleting the one-time run", move |conn| {
            diesel::delete(planned::replicron_planned_runs.filter(planned::id.eq(id))).execute(conn)
        })
        .await;
    if let Err(e) = deleted {
        // Its instant cannot run twice: its claim refuses it.
        debug!(id, "the one-time run's row stays: {e}");
    }
}

/// Reads the rows every [`POLL`] and runs each of this replica's jobs'
/// at its instant, until `stop` resolves; then waits for the runs it
/// started (and drops those still waiting for their instant). A row still
/// there well after its instant, whose task here has ended (its claim was
/// not answered in time), is taken up again: caught up, or recorded missed.
pub(crate) async fn serve_forever(
    engine: Arc<Engine>,
    jobs: watch::Receiver<Vec<Arc<Job>>>,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut taken: HashMap<i64, JoinHandle<()>> = HashMap::new();
    let mut others: Vec<JoinHandle<()>> = Vec::new();
    let window = TimeDelta::from_std(POLL * 2).unwrap_or(TimeDelta::seconds(10));
    loop {
        if engine.health.is_up() {
            let now = engine.clock.now();
            match due(&engine.store, now + window).await {
                Ok(rows) => {
                    // A row gone was claimed or recorded: its task is done
                    // with it, or about to be.
                    let ids: HashSet<i64> = rows.iter().map(|row| row.id).collect();
                    let gone: Vec<i64> = taken
                        .keys()
                        .filter(|id| !ids.contains(id))
                        .copied()
                        .collect();
                    for id in gone {
                        if let Some(task) = taken.remove(&id) {
                            others.push(task);
                        }
                    }
                    others.retain(|task| !task.is_finished());
                    for row in rows {
                        let job = jobs.borrow().iter().find(|j| *j.name == row.job).cloned();
                        // A job this replica does not run is left to those
                        // that do.
                        let Some(job) = job else { continue };
                        if let Some(task) = taken.get(&row.id) {
                            let due_at = job.schedule.start_of(row.run_at.and_utc());
                            let stale = now - due_at > tick::late_limit(&job) + window;
                            if !task.is_finished() || !stale {
                                continue;
                            }
                        }
                        taken.insert(row.id, tokio::spawn(run_one(engine.clone(), job, row)));
                    }
                }
                Err(e) => debug!("the one-time runs were not read this round: {e}"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = &mut stop => break,
        }
    }
    for task in taken.into_values().chain(others) {
        let _ = task.await;
    }
}

/// Sleeps until `row`'s instant by the database's clock, then claims and
/// runs it; or, if it is too late for that, catches it up or records it
/// missed.
async fn run_one(engine: Arc<Engine>, job: Arc<Job>, row: PlannedRow) {
    let instant = row.run_at.and_utc();
    let mut draining = std::pin::pin!(tick::draining(engine.phase.clone()));
    loop {
        let left = instant - engine.clock.now();
        let Ok(left) = left.to_std() else { break };
        if left.is_zero() {
            break;
        }
        tokio::select! {
            biased;
            () = &mut draining => return,
            () = tokio::time::sleep(left.min(MAX_SLEEP)) => {}
        }
    }
    let params = Arc::new(params_of(&job, &row));
    // Recorded `manual` however late it starts (caught up, too): the run
    // was asked for, with its parameters.
    let cause = Cause {
        trigger: Trigger::Manual,
        params: Some(params),
        ..Cause::default()
    };
    let late = engine.clock.now() - job.schedule.start_of(instant);
    if late > tick::late_limit(&job) {
        let catch_up = TimeDelta::from_std(job.settings.catch_up).unwrap_or(TimeDelta::MAX);
        if late > catch_up {
            missed(&engine, &job, &row).await;
            return;
        }
    }
    match tick::attempt(&engine, &job, instant, cause, Patience::OnTime).await {
        Attempt::Won(run) => {
            info!(job = %job.name, instant = %fmt_instant(instant), requested_by = %row.requested_by, "running a one-time run");
            forget(&engine.store, row.id).await;
            let _ = run.task.await;
        }
        // Another replica has the instant (or a later one of the job's):
        // the row is done with.
        Attempt::Lost => forget(&engine.store, row.id).await,
        Attempt::Paused { .. } => {
            info!(job = %job.name, instant = %fmt_instant(instant), "a one-time run of a paused job is not run, as any instant of it");
            forget(&engine.store, row.id).await;
        }
        Attempt::Overrun { .. } => {
            warn!(job = %job.name, instant = %fmt_instant(instant), "a one-time run came while the job's run was going: an overrun, not run");
            forget(&engine.store, row.id).await;
        }
        // Not claimed here (too late, the database's answer): another
        // replica may, or the row is recorded missed once it is too late
        // for any.
        Attempt::Skipped => {}
    }
}

/// The parameters of `row`'s run: the job's defaults, under those given.
fn params_of(job: &Job, row: &PlannedRow) -> Params {
    let mut params = (*job.default_params).clone();
    params.extend(crate::history::params_of(row.params.as_deref()));
    params
}

/// Records `row`'s instant missed (unless it has a run) and notifies it,
/// then deletes the row.
async fn missed(engine: &Engine, job: &Job, row: &PlannedRow) {
    let (name, me, instant) = (
        job.name.to_string(),
        engine.instance.clone(),
        row.run_at.and_utc(),
    );
    let recorded = engine
        .store
        .call("recording a missed one-time run", move |conn| {
            let ran: bool = diesel::select(diesel::dsl::exists(
                runs::replicron_runs
                    .filter(runs::job.eq(&name))
                    .filter(runs::scheduled_at.eq(to_db_time(instant))),
            ))
            .get_result(conn)?;
            if ran {
                return Ok(None);
            }
            crate::history::record_missed(conn, &name, instant, &me)
        })
        .await;
    match recorded {
        Ok(Some(id)) => {
            crate::telemetry::missed(&job.name, 1);
            warn!(job = %job.name, instant = %fmt_instant(instant), requested_by = %row.requested_by, "a one-time run no replica claimed in time: recorded missed");
            super::missed::tell_missed(engine, &job.name, instant, id);
        }
        Ok(None) => {}
        Err(e) => {
            warn!(job = %job.name, instant = %fmt_instant(instant), "a missed one-time run could not be recorded; its row stays: {e}");
            return;
        }
    }
    forget(&engine.store, row.id).await;
}
