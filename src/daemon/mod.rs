//! The daemon: one tick loop per enabled job, tying the schedule, the lease,
//! the runner and the history together.
//!
//! For each job: sleep until its next instant T (computed from the config
//! alone, so every replica derives the same T), claim T, and on a win run it
//! in its own task ([`execute`]); on a loss do nothing. Runs of different
//! jobs proceed concurrently. A job never overlaps itself: the lease is held
//! for as long as its run lasts, kept alive by a [`keeper`], so an instant
//! that comes meanwhile is an overrun, on every replica.
//!
//! While the database is unreachable ([`health`]) nothing is claimed and
//! nothing runs; when it answers again, catch-up applies. A run's end is
//! written through the [`journal`], which retries until it lands.
//!
//! SIGHUP reloads the config: added jobs get lease rows and loops, removed
//! jobs stop being scheduled, changed jobs use their new definition from
//! their next instant; running runs are left to finish. An invalid new
//! config is reported and the old one keeps running. One replica at a time
//! deletes history past `history_retention`, under a lease of its own.
//!
//! Shutdown is broadcast through a [`Phase`] channel: `Draining` stops the
//! tick loops and lets runs finish; `Stopping` stops the runs that remain
//! (recorded `killed`). Every run still records its end and releases its
//! lease, and the journal is flushed.

mod claimer;
mod execute;
mod flock;
pub mod health;
pub mod journal;
mod keeper;
mod retention;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use self::claimer::Claimed;
pub use self::execute::Outcome;
pub use self::flock::{ExecRequest, Executed, exec};
use self::health::{DbState, Health};
use self::journal::Journal;
use crate::config::{Config, Job};
use crate::db::{DbError, Pool};
use crate::lease::{self, Claim};
use crate::runner::Guard;
use crate::schedule::{Clock, Ticker};
use crate::telemetry::{self, Liveness};

/// Where the daemon is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Claiming and running.
    Running,
    /// No new claims; running jobs may finish.
    Draining,
    /// Running jobs are stopped: SIGTERM then SIGKILL after their
    /// `kill_grace`, or SIGKILL at once when `immediate`.
    Stopping {
        /// A second signal: no grace.
        immediate: bool,
    },
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The database refused the start-up statements.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The guard process could not be started.
    #[error("cannot start the guard process: {0}")]
    Guard(#[source] std::io::Error),
}

/// What every task of the daemon shares.
pub(crate) struct Shared {
    pool: Pool,
    guard: Guard,
    claimer: claimer::Claimer,
    health: Arc<Health>,
    journal: Journal,
    instance: String,
    clock: Arc<dyn Clock>,
    phase: watch::Receiver<Phase>,
    /// Runs use this process's stdio (`exec`) instead of being captured.
    inherit_stdio: bool,
}

/// How long the journal may take at shutdown to write what it holds.
const JOURNAL_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The default instance id: `<hostname>:<pid>:<random>`, unique per process.
pub fn default_instance_id() -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string());
    format!(
        "{host}:{}:{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

/// Everything `run` needs.
pub struct Daemon {
    /// The validated config.
    pub config: Config,
    /// A migrated pool.
    pub pool: Pool,
    /// This replica's id.
    pub instance: String,
    /// Where time comes from.
    pub clock: Arc<dyn Clock>,
    /// Shutdown, from [`drive_shutdown`].
    pub phase: watch::Receiver<Phase>,
    /// New valid configs, from [`watch_reloads`].
    pub reloads: mpsc::Receiver<Config>,
    /// Beats for `/healthz` and the systemd watchdog.
    pub liveness: Arc<Liveness>,
}

/// A running job loop.
struct Loop {
    job: Arc<Job>,
    retire: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl Shared {
    /// The pieces every run needs, for a daemon or a one-off command.
    async fn start(
        pool: Pool,
        instance: String,
        clock: Arc<dyn Clock>,
        phase: watch::Receiver<Phase>,
        liveness: Arc<Liveness>,
        inherit_stdio: bool,
    ) -> Result<Arc<Shared>, DaemonError> {
        let guard = Guard::start().map_err(DaemonError::Guard)?;
        let health = Arc::new(Health::new(liveness));
        let journal = Journal::start(pool.clone(), health.clone());
        Ok(Arc::new(Shared {
            claimer: claimer::Claimer::start(pool.clone(), instance.clone()),
            pool,
            guard,
            health,
            journal,
            instance,
            clock,
            phase,
            inherit_stdio,
        }))
    }
}

/// Creates the lease rows of `jobs` that do not exist yet.
async fn ensure_rows(pool: &Pool, jobs: &[Arc<Job>]) -> Result<usize, DbError> {
    let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    pool.run_blocking(move |conn| {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        lease::ensure_rows(conn, &names).map_err(|e| DbError::query("creating lease rows", e))
    })
    .await
}

/// Runs the daemon until `phase` leaves `Running` and every run has ended.
pub async fn run(daemon: Daemon) -> Result<(), DaemonError> {
    let Daemon {
        config,
        pool,
        instance,
        clock,
        phase,
        mut reloads,
        liveness,
    } = daemon;
    let jobs: Vec<Arc<Job>> = config.enabled_jobs().cloned().map(Arc::new).collect();
    let created = ensure_rows(&pool, &jobs).await?;
    let shared = Shared::start(
        pool.clone(),
        instance,
        clock,
        phase.clone(),
        liveness,
        false,
    )
    .await?;
    info!(
        instance = %shared.instance,
        database = %pool.url(),
        jobs = jobs.len(),
        lease_rows_created = created,
        "replicron started"
    );
    let background = [
        {
            let (health, stop) = (shared.health.clone(), draining(phase.clone()));
            let pool = pool.clone();
            tokio::spawn(async move { health.probe(pool, stop).await })
        },
        tokio::spawn(retention::prune_forever(
            shared.clone(),
            config.daemon.history_retention,
        )),
    ];
    let mut loops: Vec<Loop> = jobs
        .into_iter()
        .map(|job| start_loop(&shared, job))
        .collect();
    let mut retired: Vec<JoinHandle<()>> = Vec::new();
    let mut current = config;
    crate::telemetry::notify_systemd("ready");
    loop {
        tokio::select! {
            () = draining(phase.clone()) => break,
            Some(new) = reloads.recv() => {
                if let Err(e) = reload(&shared, &mut loops, &mut retired, &current, &new).await {
                    error!("the new config could not be applied, the old one keeps running: {e}");
                } else {
                    current = new;
                }
                crate::telemetry::notify_systemd("ready");
            }
        }
    }
    crate::telemetry::notify_systemd("stopping");
    for handle in loops.into_iter().map(|l| l.handle).chain(retired) {
        if let Err(e) = handle.await {
            error!("a job loop failed: {e}");
        }
    }
    for task in background {
        task.abort();
    }
    let unwritten = shared.journal.flush(JOURNAL_FLUSH_TIMEOUT).await;
    for write in &unwritten {
        error!("history write not recorded before exit: {write}");
    }
    info!(instance = %shared.instance, unwritten = unwritten.len(), "replicron stopped");
    Ok(())
}

fn start_loop(shared: &Arc<Shared>, job: Arc<Job>) -> Loop {
    let (retire, retired) = watch::channel(false);
    let handle = tokio::spawn(job_loop(shared.clone(), job.clone(), retired));
    Loop {
        job,
        retire,
        handle,
    }
}

/// Applies a new config: added jobs get rows and loops, removed ones are
/// retired, changed ones restart with their new definition. Loops being
/// retired let their current run finish.
async fn reload(
    shared: &Arc<Shared>,
    loops: &mut Vec<Loop>,
    retired: &mut Vec<JoinHandle<()>>,
    old: &Config,
    new: &Config,
) -> Result<(), DbError> {
    if old.database.url != new.database.url || old.database.pool_size != new.database.pool_size {
        warn!("[database] changed: it takes effect at the next restart");
    }
    if old.daemon.shutdown_grace != new.daemon.shutdown_grace
        || old.daemon.metrics_listen != new.daemon.metrics_listen
    {
        warn!("[daemon] shutdown_grace and metrics_listen take effect at the next restart");
    }
    let wanted: Vec<Arc<Job>> = new.enabled_jobs().cloned().map(Arc::new).collect();
    let added: Vec<Arc<Job>> = wanted
        .iter()
        .filter(|job| !loops.iter().any(|l| l.job.name == job.name))
        .cloned()
        .collect();
    ensure_rows(&shared.pool, &added).await?;
    let (mut kept, mut changed, mut removed) = (0, 0, 0);
    let mut next = Vec::new();
    for current in loops.drain(..) {
        match wanted.iter().find(|job| job.name == current.job.name) {
            Some(job) if **job == *current.job => {
                kept += 1;
                next.push(current);
            }
            Some(job) => {
                changed += 1;
                let _ = current.retire.send(true);
                retired.push(current.handle);
                next.push(start_loop(shared, job.clone()));
            }
            None => {
                removed += 1;
                let _ = current.retire.send(true);
                retired.push(current.handle);
            }
        }
    }
    for job in &added {
        next.push(start_loop(shared, job.clone()));
    }
    *loops = next;
    retired.retain(|handle| !handle.is_finished());
    info!(
        added = added.len(),
        changed,
        removed,
        unchanged = kept,
        "config reloaded"
    );
    Ok(())
}

/// On SIGHUP, re-reads `path`: a valid config is sent to the daemon; an
/// invalid one is reported with all its errors, and the old one stays.
pub async fn watch_reloads(path: std::path::PathBuf, reloads: mpsc::Sender<Config>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        error!("cannot listen for SIGHUP: reloading is off");
        return;
    };
    while hangups.recv().await.is_some() {
        crate::telemetry::notify_systemd("reloading");
        info!(config = %path.display(), "SIGHUP: reloading the config");
        match Config::load(&path, &crate::config::Environment::from_process()) {
            Ok(config) => {
                if reloads.send(config).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                for line in e.to_string().lines() {
                    error!("{line}");
                }
                error!("the new config is invalid; the old one keeps running");
                crate::telemetry::notify_systemd("ready");
            }
        }
    }
}

/// Runs `job` once now, through its lease, in this process: `replicron
/// trigger`. The instant is the database's current time.
pub async fn run_once(
    pool: Pool,
    job: Job,
    instance: String,
    clock: Arc<dyn Clock>,
    phase: watch::Receiver<Phase>,
) -> Result<Triggered, DaemonError> {
    let job = Arc::new(job);
    ensure_rows(&pool, std::slice::from_ref(&job)).await?;
    let shared = Shared::start(
        pool.clone(),
        instance,
        clock,
        phase,
        Arc::new(Liveness::new()),
        false,
    )
    .await?;
    let (name, me, lease_for) = (
        job.name.clone(),
        shared.instance.clone(),
        job.lock_at_most_for,
    );
    let claimed = pool
        .run_blocking(move |conn| {
            lease::claim_at_database_now(conn, &name, &me, lease_for)
                .map_err(|e| DbError::query("claiming the job", e))
        })
        .await?;
    let status = match claimed {
        Claim::Won(lease) => {
            Triggered::Ran(execute::execute(shared.clone(), job, lease, Instant::now(), None).await)
        }
        Claim::Taken | Claim::Held => Triggered::NotClaimed,
    };
    let unwritten = shared.journal.flush(JOURNAL_FLUSH_TIMEOUT).await;
    for write in &unwritten {
        error!("history write not recorded before exit: {write}");
    }
    Ok(status)
}

/// What `trigger` came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Triggered {
    /// The job's lease is held (a run is going) or a later instant was
    /// claimed meanwhile: nothing ran.
    NotClaimed,
    /// It ran; the last attempt ended so (or was never recorded: `None`).
    Ran(Option<Outcome>),
}

/// Waits until the phase is no longer `Running`.
async fn draining(mut phase: watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p != Phase::Running).await;
}

async fn job_loop(shared: Arc<Shared>, job: Arc<Job>, mut retired: watch::Receiver<bool>) {
    let mut current: Option<JoinHandle<()>> = None;
    let mut overrun_reported = false;
    let mut health = shared.health.subscribe();
    let mut ticker = Ticker::new(job.schedule.clone(), shared.clock.clone());
    if let Some((instant, run)) = catch_up(&shared, &job).await {
        current = run;
        ticker = Ticker::resuming_after(job.schedule.clone(), shared.clock.clone(), instant);
    }
    loop {
        let instant = tokio::select! {
            biased;
            () = draining(shared.phase.clone()) => break,
            () = async { let _ = retired.wait_for(|retired| *retired).await; } => break,
            changed = health.changed() => {
                if changed.is_err() {
                    break;
                }
                let state = *health.borrow_and_update();
                if state == DbState::Up && current.as_ref().is_none_or(JoinHandle::is_finished) {
                    // Back from an outage: the missed instants are catch-up's.
                    ticker = Ticker::new(job.schedule.clone(), shared.clock.clone());
                    if let Some((instant, run)) = catch_up(&shared, &job).await {
                        current = run;
                        ticker = Ticker::resuming_after(job.schedule.clone(), shared.clock.clone(), instant);
                    }
                }
                continue;
            }
            instant = ticker.tick() => match instant {
                Some(instant) => instant,
                None => break,
            },
        };
        if !shared.health.is_up() {
            telemetry::skipped_database_down(&job.name);
            debug!(job = %job.name, instant = %fmt_instant(instant), "skipped: the database is unreachable");
            continue;
        }
        let outcome = if current.as_ref().is_some_and(|run| !run.is_finished()) {
            telemetry::overrun(&job.name);
            Attempt::Overrun
        } else {
            attempt(&shared, &job, instant).await
        };
        match outcome {
            Attempt::Won(run) => {
                current = Some(run);
                overrun_reported = false;
            }
            Attempt::Overrun if !overrun_reported => {
                warn!(job = %job.name, instant = %fmt_instant(instant), "overrun: the job's lease is held by a run still going; its instants are skipped until it ends");
                overrun_reported = true;
            }
            Attempt::Lost => overrun_reported = false,
            Attempt::Overrun | Attempt::Failed => {}
        }
    }
    if let Some(run) = current {
        let _ = run.await;
    }
}

/// Catch-up (SPEC §4): the latest instant at or before now, if it is at
/// most `catch_up` old, is claimed; the claim itself refuses it if it ran
/// already. Returns the instant and its run, if won.
async fn catch_up(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
) -> Option<(DateTime<Utc>, Option<JoinHandle<()>>)> {
    let instant = catch_up_instant(job, shared.clock.now())?;
    let run = match attempt(shared, job, instant).await {
        Attempt::Won(run) => {
            info!(job = %job.name, instant = %fmt_instant(instant), "catching up a missed instant");
            Some(run)
        }
        _ => None,
    };
    Some((instant, run))
}

/// The instant catch-up may claim: the latest one at or before `now`, if it
/// is at most `catch_up` old.
fn catch_up_instant(job: &Job, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if job.catch_up.is_zero() {
        return None;
    }
    let instant = job.schedule.latest_at_or_before(now)?;
    let age = (now - instant).to_std().ok()?;
    (age <= job.catch_up).then_some(instant)
}

pub(crate) fn fmt_instant(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// How long an unclaimed instant waits for a held lease at most. A short
/// run of an earlier instant (a replica whose clock is behind, or one that
/// fired a moment before) ends in moments; a true overrun does not.
const MAX_CLAIM_PATIENCE: Duration = Duration::from_secs(5);

/// What became of one instant on this replica.
enum Attempt {
    /// Won: the run's task.
    Won(JoinHandle<()>),
    /// Another replica has it (or a later one).
    Lost,
    /// The lease stayed held: an overrun.
    Overrun,
    /// A database error: skipped on this replica.
    Failed,
}

/// Claims `instant` of `job`; on a win, starts the run. While the lease is
/// held by a run of an earlier instant, the claim is retried until the
/// lease ends, the instant is taken, or patience runs out before the next
/// instant.
async fn attempt(shared: &Arc<Shared>, job: &Arc<Job>, instant: DateTime<Utc>) -> Attempt {
    let until_next = job
        .schedule
        .next_after(instant)
        .and_then(|next| (next - instant).to_std().ok())
        .unwrap_or(MAX_CLAIM_PATIENCE);
    let give_up = Instant::now() + until_next.mul_f64(0.8).min(MAX_CLAIM_PATIENCE);
    let mut delay = Duration::from_millis(10);
    loop {
        match shared.claimer.claim(job, instant).await {
            Ok(Claimed::Won(lease, run_id)) => {
                shared.health.report_ok();
                telemetry::claim(&job.name, true);
                let run =
                    execute::execute(shared.clone(), job.clone(), lease, Instant::now(), run_id);
                return Attempt::Won(tokio::spawn(async move {
                    run.await;
                }));
            }
            Ok(Claimed::Taken) => {
                shared.health.report_ok();
                telemetry::claim(&job.name, false);
                debug!(job = %job.name, instant = %fmt_instant(instant), "claim lost");
                return Attempt::Lost;
            }
            Ok(Claimed::Held)
                if Instant::now() + delay < give_up && *shared.phase.borrow() == Phase::Running =>
            {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(250));
            }
            Ok(Claimed::Held) => {
                telemetry::overrun(&job.name);
                return Attempt::Overrun;
            }
            Err(e) => {
                shared.health.report_error(&e);
                if !e.is_unreachable() {
                    warn!(job = %job.name, instant = %fmt_instant(instant), "instant skipped on this replica: {e}");
                }
                return Attempt::Failed;
            }
        }
    }
}

/// Drives the phase from SIGTERM/SIGINT: the first signal drains, and after
/// `grace` stops what is still running; a second signal stops at once.
pub async fn drive_shutdown(phase: watch::Sender<Phase>, grace: Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot listen for SIGTERM/SIGINT");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    info!(grace = %humantime::format_duration(grace), "shutting down: no new runs; running jobs may finish");
    let _ = phase.send(Phase::Draining);
    let grace_over = tokio::time::sleep(grace);
    tokio::pin!(grace_over);
    loop {
        tokio::select! {
            () = &mut grace_over, if *phase.borrow() == Phase::Draining => {
                let _ = phase.send(Phase::Stopping { immediate: false });
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    warn!("second signal: stopping running jobs now");
    let _ = phase.send(Phase::Stopping { immediate: true });
}
