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
pub mod clock;
mod execute;
mod flock;
pub mod health;
pub mod journal;
mod keeper;
mod retention;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use self::claimer::Claimed;
use self::clock::ClockSync;
pub use self::execute::Outcome;
pub use self::flock::{ExecRequest, Executed, exec};
use self::health::{DbState, Health};
use self::journal::Journal;
use crate::config::{Config, Job};
use crate::db::{DbError, Pool};
use crate::history::{self, RunStatus};
use crate::lease::{self, Claim};
use crate::registry;
use crate::runner::Guard;
use crate::schedule::{Clock, DatabaseClock, LATE_LIMIT, Ticker};
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
    /// The instance id is taken, or could not be registered.
    #[error(transparent)]
    Register(#[from] crate::registry::RegisterError),
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
    let me = registry::Me::new(&instance);
    let registering = me.clone();
    let taken_over = pool
        .run_blocking(move |conn| Ok(registry::register(conn, &registering)))
        .await??;
    if let Some(previous) = taken_over {
        info!(instance = %me.id, previous_pid = previous.pid, previous_host = %previous.host, "took over the instance id of a replica that is gone");
    }
    let created = ensure_rows(&pool, &jobs).await?;
    // The tick loops fire on the database's clock, estimated before they start.
    let database_clock = Arc::new(DatabaseClock::new(clock));
    let mut clock_sync = ClockSync::new(database_clock.clone(), pool.clone());
    match clock_sync.sync().await {
        Ok(estimate) => info!(host_ahead_by = %clock::describe(estimate), "database clock read"),
        Err(e) => {
            warn!("cannot read the database's clock yet, firing on this host's until it can: {e}")
        }
    }
    let shared = Shared::start(
        pool.clone(),
        instance,
        database_clock,
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
        tokio::spawn(clock_sync.run(shared.health.clone(), draining(phase.clone()))),
        tokio::spawn(heartbeat(pool.clone(), me.clone(), shared.health.clone())),
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
    let leaving = me.clone();
    if let Err(e) = pool
        .run_blocking(move |conn| {
            registry::deregister(conn, &leaving)
                .map_err(|e| DbError::query("leaving the registry", e))
        })
        .await
    {
        warn!("could not remove this replica from the registry; it goes stale by itself: {e}");
    }
    info!(instance = %shared.instance, unwritten = unwritten.len(), "replicron stopped");
    Ok(())
}

fn start_loop(shared: &Arc<Shared>, job: Arc<Job>) -> Loop {
    telemetry::register_job(&job.name);
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

/// Says every [`registry::HEARTBEAT_EVERY`] that this replica is alive; warns
/// loudly if its row was taken over by another process with its id.
async fn heartbeat(pool: Pool, me: registry::Me, health: Arc<Health>) {
    let mut every = tokio::time::interval(registry::HEARTBEAT_EVERY);
    let mut said = false;
    loop {
        every.tick().await;
        let beating = me.clone();
        match pool
            .run_blocking(move |conn| {
                registry::heartbeat(conn, &beating).map_err(|e| DbError::query("heartbeat", e))
            })
            .await
        {
            Ok(true) => {
                health.report_ok();
                said = false;
            }
            Ok(false) if !said => {
                error!(instance = %me.id, "another process has taken over this replica's instance id: leases and history can no longer tell the two apart; stop one of them");
                said = true;
            }
            Ok(false) => {}
            Err(e) => health.report_error(&e),
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
        Claim::Won(lease) => Triggered::Ran(
            execute::execute(
                shared.clone(),
                job,
                lease,
                Instant::now(),
                None,
                None,
                execute::Recording::default(),
            )
            .await,
        ),
        Claim::Taken | Claim::Held(_) | Claim::NotYet { .. } | Claim::Contended => {
            Triggered::NotClaimed
        }
    };
    let unwritten = shared.journal.flush(JOURNAL_FLUSH_TIMEOUT).await;
    for write in &unwritten {
        error!("history write not recorded before exit: {write}");
    }
    Ok(status)
}

/// What `trigger` came to.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// A run this replica started: when it claimed it and, once its last
/// attempt's process has ended, when that was (both by the database's
/// clock). An instant that comes while it is recorded and released is no
/// overrun: only one that came while it was going.
struct Current {
    task: JoinHandle<()>,
    claimed_at: DateTime<Utc>,
    ended: Arc<OnceLock<DateTime<Utc>>>,
}

impl Current {
    fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Whether the run was going at `instant`.
    fn was_going_at(&self, instant: DateTime<Utc>) -> bool {
        self.claimed_at < instant && self.ended.get().is_none_or(|end| *end > instant)
    }
}

async fn job_loop(shared: Arc<Shared>, job: Arc<Job>, mut retired: watch::Receiver<bool>) {
    let mut current: Option<Current> = None;
    let mut overrun_reported = false;
    let mut health = shared.health.subscribe();
    let mut ticker = Ticker::new(job.schedule.clone(), shared.clock.clone());
    let stop = |retired: &mut watch::Receiver<bool>| {
        let (phase, retired) = (shared.phase.clone(), retired.clone());
        async move {
            let mut retired = retired;
            tokio::select! {
                () = draining(phase) => {}
                _ = retired.wait_for(|retired| *retired) => {}
            }
        }
    };
    if let Some((instant, run)) = catch_up(&shared, &job).await {
        current = run;
        ticker = Ticker::resuming_after(job.schedule.clone(), shared.clock.clone(), instant);
    }
    loop {
        let instant = tokio::select! {
            biased;
            () = stop(&mut retired) => break,
            changed = health.changed() => {
                if changed.is_err() {
                    break;
                }
                let state = *health.borrow_and_update();
                if state == DbState::Up && current.as_ref().is_none_or(|run| !run.is_running()) {
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
        if let Some(skipped) = ticker.take_skipped() {
            telemetry::skipped(&job.name, "too_late", skipped.count);
            warn!(
                job = %job.name,
                first = %fmt_instant(skipped.first),
                last = %fmt_instant(skipped.last),
                count = skipped.count,
                "instants skipped: more than {}s late when this replica got to them (it was blocked, or its clock stepped)",
                LATE_LIMIT.num_seconds()
            );
        }
        if !shared.health.is_up() {
            telemetry::skipped(&job.name, "database_down", 1);
            debug!(job = %job.name, instant = %fmt_instant(instant), "skipped: the database is unreachable");
            continue;
        }
        if let Some(run) = current.as_mut().filter(|run| run.is_running()) {
            if run.was_going_at(instant) {
                telemetry::overrun(&job.name);
                if !overrun_reported {
                    warn!(
                        job = %job.name,
                        instant = %fmt_instant(instant),
                        running_since = %fmt_instant(run.claimed_at),
                        "overrun: the job's previous run was still going at this instant; its instants are skipped until it ends"
                    );
                    overrun_reported = true;
                }
                continue;
            }
            // The run started after this instant came due (this replica was
            // blocked: a stall, a slow claim), or it had ended and is being
            // recorded and released. The instant waits for it.
            let deadline = deadline_for(&shared, instant);
            tokio::select! {
                biased;
                () = stop(&mut retired) => break,
                () = tokio::time::sleep_until(deadline) => {
                    skip_too_late(&job, instant, "the job's previous run, started late, was still going");
                    continue;
                }
                _ = &mut run.task => {}
            }
            // Its task is over (and awaited): nothing left to wait for.
            current = None;
        }
        match attempt(&shared, &job, instant).await {
            Attempt::Won(run) => {
                current = Some(run);
                overrun_reported = false;
            }
            Attempt::Overrun { since } if !overrun_reported => {
                warn!(
                    job = %job.name,
                    instant = %fmt_instant(instant),
                    running_since = %fmt_instant(since),
                    "overrun: the job's lease is held by a run that was going at this instant; its instants are skipped until it ends"
                );
                overrun_reported = true;
            }
            Attempt::Lost => overrun_reported = false,
            Attempt::Overrun { .. } | Attempt::Skipped => {}
        }
    }
    if let Some(run) = current {
        let _ = run.task.await;
    }
}

/// The latest moment an instant may still be claimed: [`LATE_LIMIT`] after
/// it, by the database's clock, as a point on the monotonic clock.
fn deadline_for(shared: &Shared, instant: DateTime<Utc>) -> Instant {
    let left = (instant + LATE_LIMIT - shared.clock.now())
        .to_std()
        .unwrap_or_default();
    Instant::now() + left
}

fn skip_too_late(job: &Job, instant: DateTime<Utc>, why: &str) {
    telemetry::skipped(&job.name, "too_late", 1);
    warn!(
        job = %job.name,
        instant = %fmt_instant(instant),
        "instant skipped: not claimable within {}s of its time: {why}",
        LATE_LIMIT.num_seconds()
    );
}

/// Catch-up (SPEC §4): the latest instant at or before now, if it is at
/// most `catch_up` old, is claimed; the claim itself refuses it if it ran
/// already. Returns the instant and its run, if won.
async fn catch_up(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
) -> Option<(DateTime<Utc>, Option<Current>)> {
    let instant = catch_up_instant(job, shared.clock.now())?;
    // A job the fleet has just been given has missed nothing: only instants
    // after its lease row was created are caught up.
    let name = job.name.clone();
    let row = shared
        .pool
        .run_blocking(move |conn| {
            lease::find_lock(conn, &name).map_err(|e| DbError::query("reading the lease", e))
        })
        .await;
    match row {
        Ok(Some(row))
            if row
                .created_at
                .is_some_and(|created| instant < created.and_utc()) =>
        {
            debug!(job = %job.name, instant = %fmt_instant(instant), "no catch-up: the instant came before the job was added");
            return None;
        }
        Ok(_) => {}
        Err(e) => {
            shared.health.report_error(&e);
            return None;
        }
    }
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

/// What became of one instant on this replica.
enum Attempt {
    /// Won: the run.
    Won(Current),
    /// Another replica has it (or a later one).
    Lost,
    /// The lease was held by a run that was going at the instant, or by
    /// `lock_at_least_for`: an overrun.
    Overrun {
        /// When that run was claimed.
        since: DateTime<Utc>,
    },
    /// Not claimed for another reason, logged where it was found.
    Skipped,
}

/// Claims `instant` of `job`; on a win, starts the run.
///
/// A claim the database refuses as not yet due (this replica's clock is
/// ahead of the database's) is tried again when it is; a contended one at
/// once. A lease held by a run claimed after the instant came (it started
/// late), or by one that had ended before the instant but whose release has
/// not landed, is waited for until the instant is [`LATE_LIMIT`] old. A
/// lease held by a run that was going at the instant, or on purpose by
/// `lock_at_least_for`, makes the instant an overrun.
async fn attempt(shared: &Arc<Shared>, job: &Arc<Job>, instant: DateTime<Utc>) -> Attempt {
    let deadline = deadline_for(shared, instant);
    let mut delay = Duration::from_millis(10);
    let mut wait = |reason: &str| {
        if *shared.phase.borrow() != Phase::Running {
            return None;
        }
        if Instant::now() + delay > deadline {
            skip_too_late(job, instant, reason);
            return None;
        }
        let pause = delay;
        delay = (delay * 2).min(Duration::from_millis(250));
        Some(pause)
    };
    loop {
        let claimed = shared.claimer.claim(job, instant).await;
        if claimed.is_ok() {
            shared.health.report_ok();
        }
        let pause = match claimed {
            Ok(Claimed::Won(lease, run_id)) => {
                telemetry::claim(&job.name, true);
                let claimed_at = shared.clock.now();
                let ended = Arc::new(OnceLock::new());
                let run = execute::execute(
                    shared.clone(),
                    job.clone(),
                    lease,
                    Instant::now(),
                    run_id,
                    Some(ended.clone()),
                    execute::Recording::default(),
                );
                return Attempt::Won(Current {
                    task: tokio::spawn(async move {
                        run.await;
                    }),
                    claimed_at,
                    ended,
                });
            }
            Ok(Claimed::NotWon(Claim::Won(_) | Claim::Taken)) => {
                telemetry::claim(&job.name, false);
                debug!(job = %job.name, instant = %fmt_instant(instant), "claim lost");
                return Attempt::Lost;
            }
            Ok(Claimed::NotWon(Claim::NotYet { wait })) => {
                debug!(job = %job.name, instant = %fmt_instant(instant), wait_ms = wait.as_millis() as u64, "not yet due by the database's clock");
                wait.min(MAX_NOT_YET_WAIT) + Duration::from_millis(1)
            }
            Ok(Claimed::NotWon(Claim::Contended)) => {
                debug!(job = %job.name, instant = %fmt_instant(instant), "claim contended; claiming again");
                match wait("claims kept being contended") {
                    Some(_) => Duration::from_millis(1),
                    None => return Attempt::Skipped,
                }
            }
            Ok(Claimed::NotWon(Claim::Held(holder))) => {
                match holder.claimed_at.filter(|since| *since < instant) {
                    // Claimed after the instant came: a run that started
                    // late; the instant waits for it.
                    None => {
                        match wait("the job's lease stayed held by a run that started after it") {
                            Some(pause) => pause,
                            None => return Attempt::Skipped,
                        }
                    }
                    Some(since) => {
                        if held_on_purpose(job, &holder, since) {
                            telemetry::overrun(&job.name);
                            return Attempt::Overrun { since };
                        }
                        match was_going_at(shared, job, &holder, instant).await {
                            Ok(true) => {
                                telemetry::overrun(&job.name);
                                return Attempt::Overrun { since };
                            }
                            // Its run had ended: its release has not landed yet.
                            Ok(false) => {
                                match wait("the release of the job's previous run did not land") {
                                    Some(pause) => pause,
                                    None => return Attempt::Skipped,
                                }
                            }
                            Err(e) => {
                                shared.health.report_error(&e);
                                telemetry::skipped(&job.name, "error", 1);
                                warn!(job = %job.name, instant = %fmt_instant(instant), "instant skipped on this replica: {e}");
                                return Attempt::Skipped;
                            }
                        }
                    }
                }
            }
            Err(e) => {
                shared.health.report_error(&e);
                if e.is_unreachable() {
                    // Said once by the health state; a claim whose answer
                    // was lost may still have been committed.
                    debug!(job = %job.name, instant = %fmt_instant(instant), "claim not answered: {e}");
                } else {
                    telemetry::skipped(&job.name, "error", 1);
                    warn!(job = %job.name, instant = %fmt_instant(instant), "instant skipped on this replica: {e}");
                }
                return Attempt::Skipped;
            }
        };
        tokio::time::sleep(pause).await;
    }
}

/// Whether a lease claimed at `since` is held only because of
/// `lock_at_least_for`: released, it ends at `claimed_at +
/// lock_at_least_for`; unreleased, it ends a whole `lock_at_most_for` after
/// its last confirmation.
fn held_on_purpose(job: &Job, holder: &lease::Holder, since: DateTime<Utc>) -> bool {
    let at_least = chrono::TimeDelta::from_std(job.lock_at_least_for).unwrap_or_default();
    !job.lock_at_least_for.is_zero() && holder.until <= since + at_least
}

/// How long the history may say a lease's run is still going before that
/// is believed: its end record lands a moment after the run ends, and after
/// a stall (this replica's instant is already late) all the writes the stall
/// held back land together.
const END_RECORD_PATIENCE: Duration = Duration::from_millis(250);
const END_RECORD_PATIENCE_AFTER_STALL: Duration = Duration::from_secs(3);

/// Whether the run holding `holder`'s lease was going at `instant`, by its
/// history: it ended (its last attempt, with no retry to come) before the
/// instant, or it did not.
async fn was_going_at(
    shared: &Shared,
    job: &Job,
    holder: &lease::Holder,
    instant: DateTime<Utc>,
) -> Result<bool, DbError> {
    let Some(held_instant) = holder.instant else {
        return Ok(true);
    };
    let late = (shared.clock.now() - instant).to_std().unwrap_or_default();
    let patience = if late > Duration::from_secs(1) {
        END_RECORD_PATIENCE_AFTER_STALL
    } else {
        END_RECORD_PATIENCE
    };
    let give_up = Instant::now() + patience;
    loop {
        let (name, fence) = (job.name.clone(), holder.fence);
        let row = shared
            .pool
            .run_blocking(move |conn| {
                history::latest_attempt(conn, &name, held_instant, fence)
                    .map_err(|e| DbError::query("reading the previous run", e))
            })
            .await?;
        let ended = row.and_then(|run| {
            let status: RunStatus = run.status.parse().ok()?;
            let retry_to_come = matches!(status, RunStatus::Failed | RunStatus::TimedOut)
                && run.attempt <= job.retries as i32;
            let finished = run.finished_at?;
            (status != RunStatus::Running && !retry_to_come).then(|| finished.and_utc())
        });
        match ended {
            Some(end) => return Ok(end > instant),
            None if Instant::now() >= give_up => return Ok(true),
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The longest pause before claiming again an instant the database said is
/// not yet due: a wrong offset is corrected by the next estimate.
const MAX_NOT_YET_WAIT: Duration = Duration::from_secs(5);

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
