//! `on_abandon = "rerun"`: an instant whose run's holder died, or lost its
//! lease, mid-run runs again, as its next attempt, on the replica that
//! marked the run `abandoned` (`docs/design.md#reruns-of-abandoned-runs`).
//!
//! Only the replica whose statement marked a run `abandoned` hears of it:
//! the mark is an `UPDATE` of a row still `running`, which changes it
//! once. Its rerun is still claimed as any run is. It claims the job's
//! lease at the database's now (an `overlap = "allow"` job's: the
//! instant's own row), which it wins only once every earlier holder's
//! lease has ended: so under a higher fence than the dead holder's, and
//! never beside that holder's body, which its keeper and its guard stopped
//! before that lease could end. Under that lease it reads the instant's
//! history, and runs it again only if its latest attempt is still the one
//! marked (`abandoned`, or `lost_lock` if its holder was alive after all
//! and has recorded that since) and the instant was rerun fewer than
//! `max(retries, 1)` times. The attempt's start record is an `INSERT …
//! SELECT` from the lease row, and its number is the instant's next: two
//! replicas that both came to rerun the instant would run it once.
//!
//! An abandoned run that is not rerun (its job does not ask for it, its
//! reruns are spent, the scheduler stops first, the database failed) is
//! notified as `abandoned`, as it always was; one that is rerun is told
//! of by its rerun's ending instead.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{info, warn};

use super::abandoned::tell;
use super::engine::Engine;
use super::execute::{Plan, execute};
use super::run_lease::Hold;
use super::work::{Recording, Work};
use super::{Job, Phase};
use crate::backoff::Backoff;
use crate::config::{OnAbandon, Overlap, RunOn};
use crate::db::DbError;
use crate::history::{Params, RerunState, RunRow, RunStatus, Trigger};
use crate::lease::Claim;
use crate::schedule::fmt_instant;

/// Takes the runs this replica marks `abandoned` until the scheduler
/// drains: each one of a job of `jobs` (as they are then) that asks for
/// it is rerun, in a task of its own; any other is notified. Then every
/// row still to come is notified, and the reruns under way are waited
/// for (they end as any run does at shutdown).
pub(crate) async fn serve(engine: Arc<Engine>, jobs: watch::Receiver<Vec<Arc<Job>>>) {
    let Some(mut rows) = engine.abandoned.take() else {
        return;
    };
    let mut reruns = JoinSet::new();
    let stop = super::tick::draining(engine.phase.clone());
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(row) = rows.recv() => {
                let job = jobs
                    .borrow()
                    .iter()
                    .find(|job| &*job.name == row.job.as_str())
                    .filter(|job| reruns_abandoned(job))
                    .cloned();
                match job {
                    Some(job) => {
                        reruns.spawn(rerun(engine.clone(), job, row));
                    }
                    None => tell(&engine.notifier, &row),
                }
            }
            Some(_) = reruns.join_next(), if !reruns.is_empty() => {}
        }
    }
    rows.close();
    while let Ok(row) = rows.try_recv() {
        tell(&engine.notifier, &row);
    }
    while reruns.join_next().await.is_some() {}
}

/// Whether `job` runs its abandoned instants again: one run once across
/// the fleet on its own schedule (a dependent job's instants are its
/// parents', claimed in their order, which a claim at the database's now
/// would pass over).
fn reruns_abandoned(job: &Job) -> bool {
    job.settings.on_abandon == OnAbandon::Rerun && job.run_on == RunOn::One && job.after.is_none()
}

/// What became of a rerun.
#[derive(Debug, PartialEq, Eq)]
enum Rerun {
    /// It ran (its ending is notified as any run's).
    Ran,
    /// It is not to run, for this reason.
    Not(String),
}

/// Reruns the instant of `row`, which this replica just marked
/// `abandoned`, if the history still says so; else notifies the row.
async fn rerun(engine: Arc<Engine>, job: Arc<Job>, row: RunRow) {
    let why = match rerun_once(&engine, &job, &row).await {
        Ok(Rerun::Ran) => return,
        Ok(Rerun::Not(why)) => why,
        Err(e) => format!("the database failed: {e}"),
    };
    warn!(
        job = %row.job,
        instant = %fmt_instant(row.scheduled_at.and_utc()),
        run_id = row.id,
        attempt = row.attempt,
        "the abandoned run is not run again: {why}"
    );
    tell(&engine.notifier, &row);
}

/// Waits for the job's lease (claimed at the database's now, heeding a
/// pause and letting a due scheduled instant go first, as a backfill
/// does, and an instant that waits for the lease too), looks at the
/// instant's history under it, and reruns it.
async fn rerun_once(engine: &Arc<Engine>, job: &Job, row: &RunRow) -> Result<Rerun, DbError> {
    let Some(work) = Work::of(job) else {
        return Ok(Rerun::Not("the job has nothing to run".to_string()));
    };
    let instant = row.scheduled_at.and_utc();
    let allowed = allowed(job);
    // Spent already: told at once, without waiting for the lease.
    let state = engine.store.rerun_state(&job.name, instant).await?;
    if let Some(why) = refuse(&state, row.id, allowed) {
        return Ok(Rerun::Not(why));
    }
    let lease_row = match job.settings.overlap {
        Overlap::Allow(_) => crate::lease::instant_row(&job.name, instant),
        _ => job.name.to_string(),
    };
    engine.throttle.start(super::throttle::Kind::Retry).await;
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    let (lease, sent) = loop {
        if *engine.phase.borrow() != Phase::Running {
            return Ok(Rerun::Not("replicron is stopping".to_string()));
        }
        let lock = engine.store.find_lock(&job.name).await?;
        let now = engine.store.database_now().await?;
        // A pause, a scheduled instant due and not yet claimed, and an
        // instant waiting for the lease (`queue`, `replace`) go first: a
        // claim at the database's now would take their instants.
        let waits = lock.as_ref().is_some_and(|lock| {
            super::backfill::why_wait(job, lock, now, false).is_some() || lock.waiting().is_some()
        });
        if !waits {
            // The lease counts from when its claim was sent.
            let sent = Instant::now();
            if let Claim::Won(lease) = engine
                .store
                .claim_now(&lease_row, &engine.instance, job.settings.lock_at_most_for)
                .await?
            {
                break (lease, sent);
            }
        }
        tokio::time::sleep(backoff.next_pause()).await;
    };
    // Under the lease, the look: nobody else can rerun the instant now.
    let state = match engine.store.rerun_state(&job.name, instant).await {
        Ok(state) => state,
        Err(e) => {
            let _ = engine.store.release(lease, Duration::ZERO).await;
            return Err(e);
        }
    };
    let attempts = match (refuse(&state, row.id, allowed), state.latest) {
        (None, Some((_, attempts, _))) => attempts,
        (why, _) => {
            let _ = engine.store.release(lease, Duration::ZERO).await;
            return Ok(Rerun::Not(why.unwrap_or_default()));
        }
    };
    info!(
        job = %job.name,
        instant = %fmt_instant(instant),
        attempt = attempts + 1,
        fence = lease.fence,
        abandoned_fence = row.fence,
        "running the abandoned instant again"
    );
    let plan = Plan {
        work,
        hold: Hold::Fleet(lease),
        recording: Recording {
            instant: Some(instant),
            once_key: row.once_key.clone(),
            trigger: Trigger::Retry,
            params: params_of(job, row),
            attempts_before: attempts,
            previous_status: Some(RunStatus::Abandoned),
            ..Recording::default()
        },
        claimed: sent,
        first_run: None,
        going: None,
    };
    execute(engine.clone(), plan).await;
    Ok(Rerun::Ran)
}

/// How many times an instant of `job` is rerun at most: `retries`, and
/// at least once.
fn allowed(job: &Job) -> usize {
    job.settings.retries.max(1) as usize
}

/// Why the instant whose history is `state` is not rerun for its run
/// `marked`, with `allowed` reruns: `None` if it is.
fn refuse(state: &RerunState, marked: i64, allowed: usize) -> Option<String> {
    match state.latest {
        Some((id, _, RunStatus::Abandoned | RunStatus::LostLock)) if id == marked => {
            (state.reruns >= allowed).then(|| {
                format!(
                    "it was run again {} times already, as often as max(retries, 1) = {allowed} lets it",
                    state.reruns
                )
            })
        }
        Some((id, _, status)) if id == marked => Some(format!(
            "its replica was alive after all, and recorded its end: {status}"
        )),
        Some((id, attempt, status)) => Some(format!(
            "a later attempt of the instant, {attempt} (run {id}, {status}), ran it"
        )),
        None => Some("its rows are gone".to_string()),
    }
}

/// The parameters of the rerun of `row`: the ones it was given, over
/// those its instant gets (its schedule entry's, else the job's
/// defaults), but for its secret ones, which its row does not hold: those
/// take the instant's.
fn params_of(job: &Job, row: &RunRow) -> Arc<Params> {
    let mut params = (*job.params_at(row.scheduled_at.and_utc())).clone();
    for (name, value) in crate::history::params_of(row.params.as_deref()) {
        if !job.settings.secret_params.contains(&name) {
            params.insert(name, value);
        }
    }
    Arc::new(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(latest: Option<(i64, i32, RunStatus)>, reruns: usize) -> RerunState {
        RerunState { latest, reruns }
    }

    /// An abandoned attempt is rerun while the instant's reruns are fewer
    /// than allowed, and also once its holder, alive after all, recorded
    /// it `lost_lock`; never when a later attempt ran it, nor when the run
    /// ended otherwise.
    #[test]
    fn an_abandoned_attempt_is_rerun_as_often_as_allowed() {
        let abandoned = Some((7, 1, RunStatus::Abandoned));
        assert_eq!(refuse(&state(abandoned, 0), 7, 1), None);
        assert!(refuse(&state(abandoned, 1), 7, 1).is_some_and(|why| why.contains("1 times")));
        assert_eq!(
            refuse(&state(Some((9, 3, RunStatus::Abandoned)), 1), 9, 2),
            None
        );
        assert!(refuse(&state(Some((9, 3, RunStatus::Abandoned)), 2), 9, 2).is_some());
        assert_eq!(
            refuse(&state(Some((7, 1, RunStatus::LostLock)), 0), 7, 1),
            None
        );
        for status in [RunStatus::Succeeded, RunStatus::Failed, RunStatus::Killed] {
            assert!(refuse(&state(Some((7, 1, status)), 0), 7, 1).is_some());
        }
        assert!(
            refuse(&state(Some((8, 2, RunStatus::Running)), 1), 7, 1)
                .is_some_and(|why| why.contains("later attempt"))
        );
        assert!(refuse(&state(None, 0), 7, 1).is_some());
    }
}
