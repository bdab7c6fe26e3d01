//! A run's rows in `replicron_runs`, owned in one place: each attempt's row
//! as it starts (attempt 1's recorded by the claim batch, when it was),
//! attempt 1's start moved to after its shared locks were taken, each end
//! (written now, or left to the journal, which retries it until it lands),
//! the ending of an attempt whose process never started, and the `skipped`
//! row of an instant that could not run. It also marks the runs of the
//! lease's vanished holders `abandoned` when the claim batch did not.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{debug, error, warn};

use super::engine::Engine;
use super::fmt_instant;
use super::run_lease::Hold;
use super::work::{Outcome, Recording, Work};
use crate::db::DbError;
use crate::history::journal::Write;
use crate::history::{NewRun, RunFinish, RunStatus, Trigger};
use crate::telemetry;

/// How long a run's end is tried again on fresh connections before the
/// journal takes it.
const END_RECORD_RETRIES: Duration = Duration::from_secs(2);

/// The rows of one run of a lease's instant.
pub(crate) struct RunRows<'e> {
    engine: &'e Engine,
    /// Attempt 1's row; a retry's differs in its attempt only.
    row: NewRun,
    /// Attempt 1's id, when the claim batch recorded it.
    first: Option<i64>,
    /// Attempts the instant had before this run: attempt N's row is
    /// numbered `attempts_before + N`.
    attempts_before: i32,
    /// The job's `missed_after`, or its least (60 s) where the schedule
    /// sets it.
    missed_after: Duration,
    /// The parents' runs whose ends started it (a dependent job's run).
    parent_runs: Vec<i64>,
    /// Why an operator started it, recorded beside each attempt's row.
    reason: Option<std::sync::Arc<str>>,
    /// The run's span, which the rows' ids are recorded on.
    span: tracing::Span,
    /// How long attempt 1, recorded at the claim, waited for its shared
    /// locks and limits: its end counts from its start, so the wait too.
    waited: std::sync::Mutex<Duration>,
    /// The values of its secret parameters, masked in the output it keeps.
    secrets: Vec<String>,
    /// Whether its schedule's entry gave it its params: recorded beside
    /// attempt 1, which the claim batch writes without them.
    params_from_schedule: bool,
}

/// What identifies an attempt that ran, for the notice of its instant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempted {
    pub(crate) run_id: i64,
    pub(crate) attempt: i32,
    pub(crate) duration: Duration,
    pub(crate) instant: DateTime<Utc>,
}

impl<'e> RunRows<'e> {
    /// The rows of `work`'s run under `hold`, recorded as `recording`
    /// says; `first` is attempt 1's, if the claim recorded it. Made in
    /// the run's span.
    pub(crate) fn new(
        engine: &'e Engine,
        work: &Work,
        hold: &Hold,
        recording: &Recording,
        first: Option<i64>,
    ) -> Self {
        RunRows {
            engine,
            row: NewRun {
                job: work.name.clone(),
                scheduled_at: recording.instant.unwrap_or(hold.instant()),
                attempt: 1,
                instance: engine.instance.clone(),
                fence: hold.fence(),
                once_key: recording.once_key.clone(),
                scope: match hold {
                    Hold::Fleet(_) => String::new(),
                    Hold::Here(_) => engine.instance.clone(),
                },
                lease_row: hold.row().map(str::to_string),
                trigger: recording.trigger,
                params: crate::history::params_column(
                    &recording.params,
                    &work.settings.secret_params,
                ),
            },
            first,
            attempts_before: recording.attempts_before,
            missed_after: work.settings.missed_after(None),
            parent_runs: recording.parent_runs.clone(),
            reason: recording.reason.clone(),
            span: tracing::Span::current(),
            waited: std::sync::Mutex::default(),
            secrets: work
                .settings
                .secret_params
                .iter()
                .filter_map(|name| recording.params.get(name).cloned())
                .collect(),
            params_from_schedule: recording.params_from_schedule,
        }
    }

    /// The run's span.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The number its row gives the run's `attempt`th attempt: after the
    /// instant's earlier attempts (a backfill's or a rerun's run).
    pub(crate) fn attempt_number(&self, attempt: u32) -> i32 {
        self.attempts_before + attempt as i32
    }

    /// The instant its rows are for (an `exec --once` run's: its start).
    pub(crate) fn instant(&self) -> DateTime<Utc> {
        self.row.scheduled_at
    }

    /// Marks the runs that earlier holders of the job's own lease row left
    /// `running` `abandoned`, through the journal: the claim batch does it
    /// for the runs it records, so only when it recorded none. A run held
    /// on its instant's row (`overlap = "allow"`) marks instead the job's
    /// runs whose instants' leases have ended, in a task of its own: no
    /// later claim of their rows would.
    pub(crate) fn abandon_earlier(&self) {
        let Some(row) = self.row.lease_row.as_deref() else {
            return;
        };
        if row.starts_with(crate::lease::INSTANT_ROW_PREFIX) {
            let (store, job) = (self.engine.store.clone(), self.row.job.clone());
            let on_abandoned = self.engine.on_abandoned.clone();
            tokio::spawn(async move {
                let swept = job.clone();
                match store
                    .call("marking abandoned runs", move |conn| {
                        crate::lease::runs::mark_abandoned_behind_instants(conn, &swept)
                    })
                    .await
                {
                    Ok(marked) if !marked.is_empty() => {
                        warn!(job = %job, runs = marked.len(), "marked runs of a vanished holder abandoned: their instants' leases ended");
                        on_abandoned(&marked);
                    }
                    Ok(_) => {}
                    // The job's next instant's claimant sweeps again.
                    Err(e) => {
                        debug!(job = %job, "the runs of vanished holders could not be looked for: {e}")
                    }
                }
            });
        } else if self.first.is_none() && row == self.row.job {
            self.engine.journal.push(Write::Abandoned {
                job: self.row.job.clone(),
                fence: self.row.fence,
            });
        }
    }

    /// Attempt 1, recorded by the claim batch as the schedule's, says what
    /// started it when that was something else (catch-up, a one-time run),
    /// and the parameters of a one-time run or of a schedule's entry.
    pub(crate) async fn record_trigger(&self) {
        let Some(id) = self.first else {
            return;
        };
        if self.row.trigger != Trigger::Schedule
            && let Err(e) = self.engine.store.set_trigger(id, self.row.trigger).await
        {
            warn!(job = %self.row.job, run_id = id, "what started the run could not be recorded: {e}");
        }
        if let Some(params) = self
            .row
            .params
            .clone()
            .filter(|_| self.row.trigger == Trigger::Manual || self.params_from_schedule)
            && let Err(e) = self.engine.store.set_params(id, params).await
        {
            warn!(job = %self.row.job, run_id = id, "the run's parameters could not be recorded: {e}");
        }
    }

    /// Attempt 1, recorded at the claim, waited `waited` for its shared
    /// locks and limits. Its row keeps its start: the run was going,
    /// holding the job's lease, while it waited (the instants that came
    /// meanwhile are its overruns, not misses), and its end, measured from
    /// that start, counts the wait, so that a run that waited does not
    /// look ended before it ran.
    pub(crate) fn waited_for_gates(&self, waited: Duration) {
        if self.first.is_some() {
            *self
                .waited
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = waited;
        }
    }

    /// The row of attempt `attempt` as it starts (attempt 1's from the
    /// claim, if it recorded it); `None`, logged, if it could not be
    /// recorded: nothing may run without a record.
    pub(crate) async fn start(&self, attempt: u32) -> Option<i64> {
        match self.record(attempt).await {
            Ok(id) => {
                if !self.parent_runs.is_empty()
                    && let Err(e) = self
                        .engine
                        .store
                        .link_parents(id, self.parent_runs.clone())
                        .await
                {
                    warn!(job = %self.row.job, run_id = id, "the parents' runs that started the run could not be recorded: {e}");
                }
                if let Some(reason) = &self.reason
                    && let Err(e) = self.engine.store.record_reason(id, reason.clone()).await
                {
                    warn!(job = %self.row.job, run_id = id, "why the run was started could not be recorded: {e}");
                }
                Some(id)
            }
            Err(e) => {
                error!(job = %self.row.job, instant = %fmt_instant(self.row.scheduled_at), attempt, "run not started, its start could not be recorded: {e}");
                None
            }
        }
    }

    async fn record(&self, attempt: u32) -> Result<i64, DbError> {
        match self.first {
            Some(id) if attempt == 1 => Ok(id),
            _ => {
                self.engine
                    .store
                    .record_run_started(NewRun {
                        attempt: self.attempt_number(attempt),
                        trigger: self.row.trigger.of_attempt(attempt),
                        ..self.row.clone()
                    })
                    .await
            }
        }
    }

    /// Records that run `id`'s lease was confirmed now, through the
    /// journal: a run whose end is never recorded (its replica vanished)
    /// is bounded by its last confirmation.
    pub(crate) fn confirmed(&self, id: i64) {
        self.engine.journal.push(Write::Confirmed {
            job: self.row.job.clone(),
            id,
        });
    }

    /// Records how run `id` ended, before anything else is done with its
    /// lease: the next claimant's sweep must find the run ended, not still
    /// `running` under an older fence, which it would mark `abandoned` (and
    /// tell) though its holder released the lease in good order. An end
    /// the database does not take now goes to the journal, which retries
    /// it until it lands.
    ///
    /// `ended` is when the run ended, on the monotonic clock. The check for
    /// missed instants only judges instants `missed_after` old, so an end
    /// written well within that of the run's end cannot be behind the
    /// check's mark, and is written with the ends of other runs in one
    /// statement. One that lands later (a batch held up by a stalled
    /// database, or written alone after a batch failed) takes the mark back
    /// to the run's end, if a check went past it meanwhile.
    pub(crate) async fn finish(&self, id: i64, finish: RunFinish, ended: Instant) {
        self.finish_at(id, finish, Some(ended)).await;
    }

    /// [`Self::finish`]; `ended` is `None` for an attempt that started
    /// nothing, whose row's end is its start: however soon after deciding
    /// that its end is written, its row may have stood `running` for longer
    /// than a check for missed instants waits (its replica was cut off
    /// between the two), so it is written alone, taking the mark back.
    async fn finish_at(&self, id: i64, mut finish: RunFinish, ended: Option<Instant>) {
        let engine = self.engine;
        if self.first == Some(id) {
            finish.duration += *self
                .waited
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if let std::borrow::Cow::Owned(masked) =
            crate::text::mask_secrets(&finish.output, &self.secrets)
        {
            finish.output = masked;
        }
        // With the ends of the runs that end with it, unless it may be late
        // (its missed-instant check is its own); alone if that fails.
        let in_time =
            |ended: Option<Instant>| ended.is_some_and(|e| e.elapsed() < self.missed_after / 2);
        if in_time(ended) {
            match engine.finisher.end(id, finish.clone()).await {
                Ok(()) if in_time(ended) => return,
                Ok(()) => {
                    // The batch landed late (a stalled database): a check
                    // for missed instants may have taken the instants after
                    // the run's end for its overruns meanwhile.
                    let job = self.row.job.clone();
                    let deadline = Instant::now() + END_RECORD_RETRIES;
                    if let Err(e) = engine
                        .store
                        .call_until(
                            "taking the missed mark back to a run's end",
                            deadline,
                            move |conn| {
                                crate::history::rewind_missed_check_to_ended(conn, &job, &[id])
                            },
                        )
                        .await
                    {
                        // Written again through the journal, which takes
                        // the mark back with it.
                        debug!(job = %self.row.job, run_id = id, "the run's end goes to the journal again: {e}");
                        engine.journal.push(Write::Finished {
                            job: self.row.job.clone(),
                            id,
                            finish,
                        });
                    }
                    return;
                }
                Err(e) => {
                    debug!(job = %self.row.job, run_id = id, "the run's end is written alone: {e}")
                }
            }
        }
        let write = Write::Finished {
            job: self.row.job.clone(),
            id,
            finish: finish.clone(),
        };
        // Tried again on a fresh connection for a moment (a dead pooled
        // connection fails once on its own), then left to the journal.
        let deadline = Instant::now() + END_RECORD_RETRIES;
        if let Err(e) = engine
            .store
            .call_until("recording a run's end", deadline, move |conn| {
                // Alone, it may land late whatever it was when the run ended
                // (the batch it was in failed on a stalled database): it
                // takes back a mark that went past its end.
                crate::history::record_run_finished(conn, id, &finish, true)
            })
            .await
        {
            // The journal's retries say the rest (and the health state).
            debug!(job = %self.row.job, run_id = id, "the run's end goes to the journal: {e}");
            engine.journal.push(write);
        }
    }

    /// Records attempt `attempt` (row `run_id`) ended with `status`
    /// without its process having started, and counts it.
    pub(crate) async fn unstarted(
        &self,
        run_id: i64,
        attempt: u32,
        status: RunStatus,
        output: String,
    ) -> (Outcome, Attempted) {
        self.finish_at(
            run_id,
            RunFinish {
                status,
                exit_code: None,
                output: output.clone(),
                duration: Duration::ZERO,
                output_file: None,
            },
            None,
        )
        .await;
        telemetry::run_finished(
            &self.row.job,
            status,
            Duration::ZERO,
            self.engine.clock.now(),
        );
        (
            Outcome {
                status,
                exit_code: None,
                output,
            },
            Attempted {
                run_id,
                attempt: self.attempt_number(attempt),
                duration: Duration::ZERO,
                instant: self.row.scheduled_at,
            },
        )
    }

    /// Records the instant `skipped` (a shared lock stayed held, or a
    /// dependent job's instant is not to run), as attempt 1, linked to the
    /// parents' runs whose ends it follows.
    pub(crate) async fn skipped(&self, why: &str) -> Option<(Outcome, Attempted)> {
        let instant = self.row.scheduled_at;
        let run_id = self.start(1).await?;
        warn!(job = %self.row.job, instant = %fmt_instant(instant), run_id, "instant skipped: {why}");
        Some(
            self.unstarted(run_id, 1, RunStatus::Skipped, format!("replicron: {why}\n"))
                .await,
        )
    }
}
