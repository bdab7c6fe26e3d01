//! Claims whose answer was lost, or came too late. A claim sent just as
//! the connection or the server died may have committed without this
//! replica hearing of it: left alone, its instant would run nowhere and its
//! lease would hold the job for a whole `lock_at_most_for`. Each claim
//! statement writes its own nonce into the lease row, so once the database
//! answers again (any node of a cluster) the replica reads the row and
//! knows: if the row holds the nonce, the claim committed and nobody has
//! claimed the job since, so the lease is taken up again and the instant
//! runs, late (within [`LATE_LIMIT`]), or, too late for that, is recorded
//! `skipped` and the lease given back at once. A claim that did not commit
//! is made again. A claim that answered, but only after a third of its
//! lease had passed, has its lease confirmed the same way before its run
//! starts.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Phase;
use super::claimer::Unanswered;
use super::engine::Engine;
use super::fmt_instant;
use super::job::Job;
use crate::backoff::Backoff;
use crate::history::{NewRun, RunStatus};
use crate::lease::{Committed, Lease, Nonce};
use crate::notify::{Event, Notice, Told};
use crate::schedule::LATE_LIMIT;
use crate::telemetry;

/// What became of such a claim.
pub(super) enum Settled {
    /// It committed and its lease is this replica's again, confirmed at
    /// `sent`: the instant runs, under `run` if its start was recorded.
    Won {
        lease: Lease,
        run: Option<i64>,
        sent: Instant,
    },
    /// It did not commit: the instant may be claimed again.
    Retry,
    /// Another replica claimed the instant, or a later one.
    Lost,
    /// The instant does not run here: it was recorded, or the check for
    /// missed instants records it.
    Skipped,
}

/// Learns what became of `claim`, a claim of `instant` of `job`, and takes
/// its lease up again if it committed. `deadline` is the last moment the
/// instant may still start.
pub(super) async fn settle(
    engine: &Arc<Engine>,
    job: &Arc<Job>,
    instant: DateTime<Utc>,
    mut claim: Unanswered,
    deadline: Instant,
) -> Settled {
    // The row tells the claim's fate only once its statement has returned:
    // a statement that waits in the server (a stall) may still commit.
    if !claim.returned_by(deadline).await {
        warn!(
            job = %job.name,
            instant = %fmt_instant(instant),
            "the claim's call has not returned within {}s of its instant: if it commits, it gives its lease back at once, and the check for missed instants records the instant",
            LATE_LIMIT.num_seconds()
        );
        return Settled::Skipped;
    }
    let lease_for = job.settings.lock_at_most_for;
    // Past the lease it would have had, there is nothing to give back; the
    // check for missed instants records what did not run.
    let ask_until = deadline.max(claim.sent + lease_for);
    // While the database does not answer, the job's other instants must
    // still be seen (and told skipped for the outage): past this, asking
    // goes on in the background, and the instant does not run.
    let hand_off_at = deadline.min(Instant::now() + HAND_OFF_AFTER);
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        if *engine.phase.borrow() != Phase::Running {
            return Settled::Skipped;
        }
        match ask(engine, job, instant, claim.nonce).await {
            Ok((committed, sent)) => {
                return conclude(engine, job, instant, committed, sent, Some(deadline)).await;
            }
            Err(e) => {
                let pause = backoff.next_pause();
                if Instant::now() + pause <= hand_off_at {
                    tokio::time::sleep(pause).await;
                    continue;
                }
                if Instant::now() + pause > ask_until {
                    cannot_learn(job, instant, &e);
                } else {
                    warn!(
                        job = %job.name,
                        instant = %fmt_instant(instant),
                        "the database does not answer whether the claim committed: the instant does not run; asking goes on, and if it did commit, its lease is given back and the instant recorded skipped: {e}"
                    );
                    tokio::spawn(follow_up(
                        engine.clone(),
                        job.clone(),
                        instant,
                        claim.nonce,
                        ask_until,
                        backoff,
                    ));
                }
                return Settled::Skipped;
            }
        }
    }
}

/// How long [`settle`] asks a database that does not answer before it
/// leaves the question to [`follow_up`]. Longer than a Galera cluster takes
/// to evict a dead node (`evs.suspect_timeout`, 5 s, and the view change),
/// during which every write waits, plus a wait for one of the pool's
/// connections (5 s), which those writes hold meanwhile: a claim found
/// committed by then still runs, late, rather than being recorded skipped.
const HAND_OFF_AFTER: Duration = Duration::from_secs(15);

/// Asks the database what became of the claim with `nonce`, taking its
/// lease up again if it committed: the answer, and when it was asked for.
async fn ask(
    engine: &Engine,
    job: &Job,
    instant: DateTime<Utc>,
    nonce: Nonce,
) -> Result<(Committed, Instant), crate::db::DbError> {
    let sent = Instant::now();
    let committed = engine
        .store
        .take_up_unanswered(
            &job.name,
            &engine.instance,
            instant,
            nonce,
            job.settings.lock_at_most_for,
        )
        .await?;
    Ok((committed, sent))
}

fn cannot_learn(job: &Job, instant: DateTime<Utc>, e: &dyn std::fmt::Display) {
    warn!(
        job = %job.name,
        instant = %fmt_instant(instant),
        "whether the claim committed could not be learnt: if it did, its lease runs out by itself, and the check for missed instants records the instant: {e}"
    );
}

/// Goes on asking, after [`settle`] has given the instant up, until
/// `ask_until`: a claim found committed has its lease given back at once
/// and its instant recorded `skipped`.
async fn follow_up(
    engine: Arc<Engine>,
    job: Arc<Job>,
    instant: DateTime<Utc>,
    nonce: Nonce,
    ask_until: Instant,
    mut backoff: Backoff,
) {
    loop {
        if *engine.phase.borrow() != Phase::Running {
            return;
        }
        match ask(&engine, &job, instant, nonce).await {
            Ok((committed, sent)) => {
                conclude(&engine, &job, instant, committed, sent, None).await;
                return;
            }
            Err(e) => {
                let pause = backoff.next_pause();
                if Instant::now() + pause > ask_until {
                    cannot_learn(&job, instant, &e);
                    return;
                }
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Acts on what became of the claim: a lease held again runs its instant
/// if `deadline` (the last moment it may start) has not passed, and is
/// otherwise given back with the instant recorded `skipped`. Without a
/// deadline the instant does not run here whatever the answer.
async fn conclude(
    engine: &Engine,
    job: &Job,
    instant: DateTime<Utc>,
    committed: Committed,
    sent: Instant,
    deadline: Option<Instant>,
) -> Settled {
    let in_time = deadline.is_some_and(|deadline| Instant::now() < deadline);
    match committed {
        Committed::No if in_time => Settled::Retry,
        Committed::No => Settled::Skipped,
        Committed::Taken => Settled::Lost,
        Committed::Held(lease) => {
            let run = match engine
                .store
                .latest_attempt(&job.name, instant, lease.fence)
                .await
            {
                Ok(Some(row)) if row.attempt == 1 && row.status == RunStatus::Running => {
                    Some(row.id)
                }
                Ok(Some(_)) => {
                    // It ran (and ended) under this lease already: its
                    // own replica heard after all.
                    release(engine, job, &lease).await;
                    return Settled::Skipped;
                }
                Ok(None) => None,
                Err(e) => {
                    debug!(job = %job.name, instant = %fmt_instant(instant), "the run's row could not be read: {e}");
                    release(engine, job, &lease).await;
                    return Settled::Skipped;
                }
            };
            if in_time {
                // Its start was recorded at the claim: it starts now, and
                // the instants that came meanwhile wait for it rather than
                // count as its overruns.
                if let Some(id) = run
                    && let Err(e) = engine.store.restart_run(id).await
                {
                    debug!(job = %job.name, run_id = id, "the run's start could not be recorded again: {e}");
                    release(engine, job, &lease).await;
                    return Settled::Skipped;
                }
                info!(
                    job = %job.name,
                    instant = %fmt_instant(instant),
                    fence = lease.fence,
                    "the claim had committed: its lease is taken up again and the instant runs late"
                );
                return Settled::Won { lease, run, sent };
            }
            let why = if deadline.is_some() {
                format!(
                    "not run: its claim's answer was lost, and the claim was found committed more than {}s after the instant",
                    LATE_LIMIT.num_seconds()
                )
            } else {
                "not run: its claim's answer was lost, and the claim was found committed only after the replica had given the instant up".to_string()
            };
            record(
                engine,
                job,
                instant,
                lease.fence,
                true,
                &why,
                telemetry::Skip::Unanswered,
            )
            .await;
            release(engine, job, &lease).await;
            Settled::Skipped
        }
        Committed::Superseded { fence } => {
            record(
                engine,
                job,
                instant,
                fence,
                false,
                "not run: its claim's answer was lost, and its lease ran out before the database answered again",
                telemetry::Skip::Unanswered,
            )
            .await;
            Settled::Skipped
        }
    }
}

/// Records `instant`, claimed under `fence` but not run, `skipped` (counted
/// as `skip`), and tells of it.
pub(super) async fn record(
    engine: &Engine,
    job: &Job,
    instant: DateTime<Utc>,
    fence: i64,
    held: bool,
    why: &str,
    skip: telemetry::Skip,
) {
    let run = NewRun {
        job: job.name.to_string(),
        scheduled_at: instant,
        attempt: 1,
        instance: engine.instance.clone(),
        fence,
        once_key: None,
        scope: String::new(),
        lease_row: held.then(|| job.name.to_string()),
        trigger: Default::default(),
        params: None,
    };
    let output = format!("replicron: {why}\n");
    telemetry::skipped(&job.name, skip, 1);
    warn!(job = %job.name, instant = %fmt_instant(instant), fence, "instant skipped: {why}");
    match engine.store.record_unrun(run, output.clone()).await {
        Ok(Some(id)) => {
            engine.notifier.event(Notice::new(
                Event::Skipped,
                Told {
                    attempt: 1,
                    output: &output,
                    ..Told::unrun(&job.name, instant, RunStatus::Skipped, &engine.instance, id)
                },
            ));
        }
        Ok(None) => {}
        Err(e) => {
            warn!(job = %job.name, instant = %fmt_instant(instant), "the skipped instant could not be recorded; the check for missed instants records it: {e}");
        }
    }
}

/// Gives a lease taken up again back at once.
async fn release(engine: &Engine, job: &Job, lease: &Lease) {
    if let Err(e) = engine.store.release(lease.clone(), Duration::ZERO).await {
        warn!(job = %job.name, "the lease could not be given back; it ends by itself: {e}");
    }
}
