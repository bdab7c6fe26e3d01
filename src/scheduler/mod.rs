//! The scheduler: one tick loop per job claiming its instants through the
//! lease and running the ones it wins, and the tasks that keep a replica
//! honest (the database's health, its clock offset, its registry heartbeat,
//! history retention). It is the library's heart: a service embeds it with
//! jobs that are async functions, and the daemon is one user of it, with
//! jobs that are child processes.
//!
//! Shutdown goes through a [`Phase`]: `Draining` stops the tick loops and
//! lets runs finish; `Stopping` tells the runs that remain to stop
//! (recorded `killed`). Every run still records its end and releases its
//! lease, and the journal is flushed, before [`Scheduler::run_until`]
//! returns. `docs/design.md#the-life-of-a-run` and
//! `docs/design.md#failure-handling` describe what these loops guarantee.

mod abandoned;
pub(crate) mod after;
mod alerts;
pub(crate) mod backfill;
mod claimer;
pub(crate) mod clock_sync;
pub(crate) mod drift;
pub(crate) mod engine;
pub(crate) mod exec;
pub(crate) mod execute;
mod finisher;
mod job;
mod missed;
pub(crate) mod planned;
mod rerun;
mod retention;
mod run_lease;
mod run_rows;
pub(crate) mod throttle;
mod tick;
pub(crate) mod trigger;
mod unanswered;
mod work;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use self::clock_sync::ClockSync;
use self::engine::Engine;
pub(crate) use self::execute::Plan;
pub use self::job::Job;
pub(crate) use self::job::JobSettings;
pub(crate) use self::missed::check_period as missed_check_period;
pub(crate) use self::work::{Outcome, Recording, Work};
use crate::config::{self, DatabaseUrl};
use crate::db::audit;
use crate::db::{Pool, Store};
use crate::registry;
use crate::runner::Guard;
pub use crate::runner::RunContext;
use crate::schedule::{Clock, DatabaseClock, SystemClock, fmt_instant};
use crate::telemetry::{self, Liveness};

/// Where a scheduler's leases and history live: a database URL, or a
/// [`Pool`] the service already has.
#[derive(Debug)]
pub struct Database(DatabaseSource);

#[derive(Debug)]
enum DatabaseSource {
    Url(String),
    Parsed(DatabaseUrl),
    Pool(Pool),
}

impl Database {
    /// A URL the job file's validation has parsed already.
    pub(crate) fn parsed(url: DatabaseUrl) -> Self {
        Database(DatabaseSource::Parsed(url))
    }
}

impl From<&str> for Database {
    fn from(url: &str) -> Self {
        Database(DatabaseSource::Url(url.to_string()))
    }
}

impl From<String> for Database {
    fn from(url: String) -> Self {
        Database(DatabaseSource::Url(url))
    }
}

impl From<Pool> for Database {
    fn from(pool: Pool) -> Self {
        Database(DatabaseSource::Pool(pool))
    }
}

// The library's way to open a pool. It returns the library's error, so it
// lives here, above the database layer, rather than beside the pool.
impl Pool {
    /// Opens a pool of at most `size` connections to `url` and checks that
    /// one connection can be made, so that a wrong URL fails here, clearly
    /// (and without its password). The backend must have been compiled in
    /// (cargo features `sqlite`, `mysql`, `postgres`).
    pub fn open(url: &str, size: u32) -> Result<Pool, crate::Error> {
        let cwd = std::env::current_dir().unwrap_or_default();
        let url = DatabaseUrl::parse(url, &cwd).map_err(crate::Error::Config)?;
        Ok(Pool::connect(&url, size, Arc::new(SystemClock))?)
    }
}

/// Where the scheduler is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Claiming and running.
    Running,
    /// No new claims; running jobs may finish.
    Draining,
    /// Running jobs are told to stop (`immediate`: a process gets SIGKILL at
    /// once).
    Stopping { immediate: bool },
}

/// How long the notifications still queued may take to go out at shutdown.
const NOTIFY_FLUSH_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a check for missed instants under way may take to finish at
/// shutdown (and give its lease back).
const MISSED_ROUND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the journal may take at shutdown to write what it holds.
const JOURNAL_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds a [`Scheduler`]: see [`Scheduler::builder`].
#[must_use = "a builder does nothing until built"]
pub struct SchedulerBuilder {
    database: Database,
    instance_id: Option<String>,
    jobs: Vec<Job>,
    pool_size: u32,
    shutdown_grace: Duration,
    history_retention: Duration,
    starts_per_second: u32,
    migrate: bool,
    clock: Arc<dyn Clock>,
    process_guard: bool,
    liveness: Option<Arc<Liveness>>,
    notify_systemd: bool,
    triggers: Option<mpsc::Receiver<trigger::Request>>,
}

impl std::fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("database", &self.database)
            .field("instance_id", &self.instance_id)
            .field("jobs", &self.jobs)
            .finish_non_exhaustive()
    }
}

impl SchedulerBuilder {
    /// This replica's id in leases and history; unique per process (a
    /// second process with the id of a live replica is refused). Default:
    /// `<hostname>:<pid>:<random>`.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Adds a job.
    pub fn job(mut self, job: Job) -> Self {
        self.jobs.push(job);
        self
    }

    /// The most database connections (default 8), when the scheduler opens
    /// its own pool from a URL.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// At shutdown, how long running jobs may finish before they are told
    /// to stop (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// History rows older than this are deleted, by one replica at a time
    /// (default 30 days).
    pub fn history_retention(mut self, retention: Duration) -> Self {
        self.history_retention = retention;
        self
    }

    /// The most catch-up, backfill and retry runs it starts per second
    /// (`[daemon] max_starts_per_second`, default 50).
    pub fn max_starts_per_second(mut self, per_second: u32) -> Self {
        self.starts_per_second = per_second;
        self
    }

    /// Whether [`SchedulerBuilder::build`] applies pending migrations
    /// (default: it does, one replica at a time across the cluster).
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// The host's clock (the system's unless a test gives a virtual one;
    /// a SQLite database then reads it too).
    #[cfg(all(test, feature = "sqlite"))]
    pub(crate) fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Starts the guard process that kills the runs' process groups if this
    /// process dies: for jobs that are child processes (the daemon's).
    pub(crate) fn process_guard(mut self, on: bool) -> Self {
        self.process_guard = on;
        self
    }

    /// Runs of jobs now, outside their schedule (the dashboard's trigger).
    pub(crate) fn triggers(mut self, triggers: mpsc::Receiver<trigger::Request>) -> Self {
        self.triggers = Some(triggers);
        self
    }

    /// Beats for `/healthz` and systemd's watchdog.
    pub(crate) fn liveness(mut self, liveness: Arc<Liveness>) -> Self {
        self.liveness = Some(liveness);
        self
    }

    /// Tells systemd, if it started this process as a `Type=notify`
    /// service, when the jobs' loops are up (`READY=1`) and when the
    /// scheduler stops (`STOPPING=1`). Off by default: a service that
    /// embeds replicron usually says ready itself, once all of its own
    /// parts are up.
    ///
    /// The rest of what the daemon turns on is not for a library: its
    /// process guard kills the process groups of child-process jobs if the
    /// daemon dies (an async job dies with its process anyway), and its
    /// `/metrics` listener serves the metrics that a service records with
    /// its own `metrics` exporter.
    pub fn notify_systemd(mut self, on: bool) -> Self {
        self.notify_systemd = on;
        self
    }

    /// Opens the database (and migrates it), checks the jobs, and registers
    /// this replica. Fails on an invalid job or a duplicate job name, a
    /// database that cannot be reached, or an instance id that a live
    /// replica uses.
    pub async fn build(self) -> Result<Scheduler, crate::Error> {
        let mut names = std::collections::HashSet::new();
        for job in &self.jobs {
            job.validate()?;
            if !names.insert(job.name.clone()) {
                return Err(crate::Error::Config(format!(
                    "two jobs are named {:?}: job names are unique",
                    job.name
                )));
            }
        }
        let instance = match self.instance_id {
            Some(id) if id.trim().is_empty() || id.len() > 255 => {
                return Err(crate::Error::Config(
                    "an instance id has 1 to 255 characters".to_string(),
                ));
            }
            Some(id) => id,
            None => default_instance_id(),
        };
        let (source, clock) = (self.database.0, self.clock);
        let source = match source {
            DatabaseSource::Url(url) => {
                let cwd = std::env::current_dir().unwrap_or_default();
                DatabaseSource::Parsed(
                    DatabaseUrl::parse(&url, &cwd).map_err(crate::Error::Config)?,
                )
            }
            source => source,
        };
        let me = registry::Me::new(&instance);
        // A replica started while its database is down (a host booting
        // before it, a restart during a failover) waits for it a while
        // rather than exit: the fleet keeps its replicas.
        let give_up_at = tokio::time::Instant::now() + START_PATIENCE;
        let mut backoff =
            crate::backoff::Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
        let mut told = false;
        let store = loop {
            let started = open_store(&source, self.pool_size, &clock, self.migrate, &me).await;
            match started {
                Ok(store) => break store,
                Err(crate::Error::Database(e))
                    if e.downcast_ref::<crate::db::DbError>()
                        .is_some_and(waits_for) =>
                {
                    let pause = backoff.next_pause();
                    if tokio::time::Instant::now() + pause > give_up_at {
                        return Err(crate::Error::Database(e));
                    }
                    if !told {
                        warn!(
                            "the database does not answer; waiting up to {}s for it: {e}",
                            START_PATIENCE.as_secs()
                        );
                        told = true;
                    }
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        };
        let guard = if self.process_guard {
            Some(Arc::new(Guard::start().map_err(crate::Error::Guard)?))
        } else {
            None
        };
        Ok(Scheduler {
            store,
            me,
            jobs: self.jobs,
            clock,
            guard,
            liveness: self.liveness.unwrap_or_default(),
            shutdown_grace: self.shutdown_grace,
            history_retention: self.history_retention,
            starts_per_second: self.starts_per_second,
            notify_systemd: self.notify_systemd,
            triggers: self.triggers,
            sent: crate::notify::SentLog::default(),
        })
    }
}

/// How long a replica waits at start for a database that does not answer.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// Whether a failure to start is one worth waiting out: the database could
/// not be reached. A refused login, an unknown database or a failed
/// migration is said at once.
fn waits_for(e: &crate::db::DbError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    e.is_unreachable()
        && ![
            "denied",
            "authentication",
            "does not exist",
            "unknown database",
        ]
        .iter()
        .any(|refusal| text.contains(refusal))
}

/// Connects (or takes the given pool), migrates if asked, and registers
/// this replica.
async fn open_store(
    source: &DatabaseSource,
    size: u32,
    clock: &Arc<dyn Clock>,
    migrate: bool,
    me: &registry::Me,
) -> Result<Store, crate::Error> {
    let pool = match source {
        DatabaseSource::Pool(pool) => pool.clone(),
        DatabaseSource::Parsed(url) => {
            let (url, clock) = (url.clone(), clock.clone());
            tokio::task::spawn_blocking(move || Pool::connect(&url, size, clock))
                .await
                .map_err(|e| crate::Error::Internal(e.to_string()))??
        }
        DatabaseSource::Url(_) => unreachable!("parsed before"),
    };
    if migrate {
        let migrating = pool.clone();
        let applied = tokio::task::spawn_blocking(move || migrating.migrate())
            .await
            .map_err(|e| crate::Error::Internal(e.to_string()))??;
        if applied > 0 {
            info!(applied, "database migrated");
        }
    }
    let store = Store::new(pool);
    if let Some(previous) = store.register(me.clone()).await? {
        info!(instance = %me.id, previous_pid = previous.pid, previous_host = %previous.host, "took over the instance id of a replica that is gone");
    }
    Ok(store)
}

/// Runs jobs exactly once per scheduled instant across every replica that
/// shares its database.
///
/// Every replica builds the same jobs; at each instant of a job they race
/// for the job's lease row, and only the winner runs it. See the crate's
/// documentation for a whole service.
pub struct Scheduler {
    store: Store,
    me: registry::Me,
    jobs: Vec<Job>,
    clock: Arc<dyn Clock>,
    guard: Option<Arc<Guard>>,
    liveness: Arc<Liveness>,
    shutdown_grace: Duration,
    history_retention: Duration,
    starts_per_second: u32,
    notify_systemd: bool,
    triggers: Option<mpsc::Receiver<trigger::Request>>,
    sent: crate::notify::SentLog,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("instance", &self.me.id)
            .field("jobs", &self.jobs)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A builder for a scheduler on `database`: a URL (`sqlite://path`,
    /// `mysql://…`, `postgres://…`) or a [`Pool`].
    pub fn builder(database: impl Into<Database>) -> SchedulerBuilder {
        SchedulerBuilder {
            database: database.into(),
            instance_id: None,
            jobs: Vec::new(),
            pool_size: config::DEFAULT_POOL_SIZE,
            shutdown_grace: config::DEFAULT_SHUTDOWN_GRACE,
            history_retention: config::DEFAULT_HISTORY_RETENTION,
            starts_per_second: crate::config::DEFAULT_STARTS_PER_SECOND,
            migrate: true,
            clock: Arc::new(SystemClock),
            process_guard: false,
            liveness: None,
            notify_systemd: false,
            triggers: None,
        }
    }

    /// This replica's id in leases and history.
    pub fn instance_id(&self) -> &str {
        &self.me.id
    }

    /// Says, in the registry, where this replica's dashboard is reached.
    pub(crate) async fn publish_web_url(&self, url: String) -> Result<(), crate::db::DbError> {
        self.store.set_web_url(self.me.clone(), url).await.map(drop)
    }

    /// The database, for the dashboard and the API.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The notifications this scheduler sends, for the dashboard and the
    /// API.
    pub(crate) fn notifications(&self) -> crate::notify::SentLog {
        self.sent.clone()
    }

    /// Runs the jobs until `shutdown` resolves; then stops claiming, lets
    /// running jobs finish for the shutdown grace, tells the ones still
    /// going to stop, records every run's end, and returns.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), crate::Error> {
        let (phase_tx, phase) = watch::channel(Phase::Running);
        let grace = self.shutdown_grace;
        let driver = tokio::spawn(async move {
            shutdown.await;
            let _ = phase_tx.send(Phase::Draining);
            tokio::time::sleep(grace).await;
            let _ = phase_tx.send(Phase::Stopping { immediate: false });
            // Kept until the loops are gone, so the phase stays readable.
            phase_tx.closed().await;
        });
        let (_reload_tx, reloads) = mpsc::channel(1);
        let result = self.run(phase, reloads).await;
        driver.abort();
        result
    }

    /// Runs the jobs until `phase` leaves `Running` and every run has ended,
    /// replacing the jobs with each set `reloads` sends.
    pub(crate) async fn run(
        self,
        phase: watch::Receiver<Phase>,
        mut reloads: mpsc::Receiver<Vec<Job>>,
    ) -> Result<(), crate::Error> {
        let Scheduler {
            store,
            me,
            jobs,
            clock,
            guard,
            liveness,
            shutdown_grace: _,
            history_retention,
            starts_per_second,
            notify_systemd,
            triggers,
            sent,
        } = self;
        let mut triggers = triggers.unwrap_or_else(|| mpsc::channel(1).1);
        let mut triggered: Vec<JoinHandle<()>> = Vec::new();
        let jobs: Vec<Arc<Job>> = jobs.into_iter().map(Arc::new).collect();
        let created = store
            .ensure_rows(jobs.iter().map(|j| j.name.to_string()).collect())
            .await?;
        // The tick loops fire on the database's clock, estimated before
        // they start.
        let database_clock = Arc::new(DatabaseClock::new(clock));
        let engine = Engine::start(
            store,
            me.id.clone(),
            database_clock.clone(),
            phase.clone(),
            (liveness, sent),
            guard,
        );
        engine.throttle.set(starts_per_second);
        // The engine's store: every call tells the engine's health how it
        // went.
        let store = engine.store.clone();
        let mut clock_sync = ClockSync::new(database_clock.clone(), store.clone());
        match clock_sync.sync().await {
            Ok(estimate) => {
                info!(host_ahead_by = %clock_sync::describe(estimate), "database clock read")
            }
            Err(e) => {
                warn!(
                    "cannot read the database's clock yet, firing on this host's until it can: {e}"
                )
            }
        }
        warn_of_lossy_replication(&store, &jobs).await;
        crate::db::durability::warn_of_risks(&store).await;
        let stop = || tick::draining(phase.clone());
        let background = [
            {
                let (health, store, stop) = (engine.health.clone(), store.clone(), stop());
                tokio::spawn(async move { health.probe(store, stop).await })
            },
            tokio::spawn(retention::prune_forever(
                store.clone(),
                engine.health.clone(),
                engine.instance.clone(),
                history_retention,
            )),
            tokio::spawn(clock_sync.run(engine.health.clone(), stop())),
        ];
        let (published, watched) = watch::channel(Vec::new());
        let mut loops = Loops {
            published,
            ..Loops::default()
        };
        seed_last_successes(&engine, &jobs).await;
        // Drift is known before the first claim: a replica that starts with
        // a minority definition of a job never claims it.
        let mut registration = Registration {
            me: me.clone(),
            clock: database_clock,
            said: false,
        };
        registration.beat(&engine, &jobs).await;
        let job_count = jobs.len();
        for job in jobs {
            loops.start(&engine, job);
        }
        loops.publish(&engine);
        // Said once its jobs are scheduled, their series registered and
        // their last successes read: what a reader of "started" may rely on.
        info!(
            instance = %engine.instance,
            database = %store.pool().url(),
            jobs = job_count,
            lease_rows_created = created,
            "replicron started"
        );
        let pauses = tokio::spawn(watch_pauses(engine.clone(), watched.clone()));
        let heartbeats = tokio::spawn(registration.beat_forever(engine.clone(), watched.clone()));
        let planned = tokio::spawn(planned::serve_forever(
            engine.clone(),
            watched.clone(),
            stop(),
        ));
        let reruns = tokio::spawn(rerun::serve(engine.clone(), watched.clone()));
        let mut missed = tokio::spawn(missed::check_forever(engine.clone(), watched, stop()));
        if notify_systemd {
            telemetry::notify_systemd(telemetry::SystemdState::Ready);
        }
        loop {
            tokio::select! {
                () = stop() => break,
                Some(new) = reloads.recv() => {
                    match loops.reload(&engine, new).await {
                        Ok(()) => loops.publish(&engine),
                        Err(e) => {
                            error!("the new jobs could not be applied, the old ones keep running: {e}");
                            let entry = audit::Entry::fleet(audit::Action::Reload);
                            let why = format!("the new jobs could not be applied: {e}");
                            engine.store.audit(&audit::Actor::daemon(), entry, audit::Outcome::Refused(why)).await;
                        }
                    }
                    if notify_systemd {
                        telemetry::notify_systemd(telemetry::SystemdState::Ready);
                    }
                }
                Some(request) = triggers.recv() => {
                    triggered.retain(|run| !run.is_finished());
                    triggered.push(tokio::spawn(trigger::answer(engine.clone(), request)));
                }
            }
        }
        if notify_systemd {
            telemetry::notify_systemd(telemetry::SystemdState::Stopping);
        }
        loops.join().await;
        for run in triggered {
            let _ = run.await;
        }
        let _ = planned.await;
        // The reruns of abandoned instants under way end as any run does.
        if let Err(e) = reruns.await {
            error!("the reruns of abandoned instants failed: {e}");
        }
        pauses.abort();
        heartbeats.abort();
        if tokio::time::timeout(MISSED_ROUND_TIMEOUT, &mut missed)
            .await
            .is_err()
        {
            missed.abort();
        }
        engine.notifier.flush(NOTIFY_FLUSH_TIMEOUT).await;
        for task in background {
            task.abort();
        }
        let unwritten = engine.journal.flush(JOURNAL_FLUSH_TIMEOUT).await;
        for write in &unwritten {
            error!("history write not recorded before exit: {write}");
        }
        if let Err(e) = store.deregister(me).await {
            warn!("could not remove this replica from the registry; it goes stale by itself: {e}");
        }
        info!(instance = %engine.instance, unwritten = unwritten.len(), "replicron stopped");
        Ok(())
    }
}

/// Sets each job's last-success gauge from the history, before its loop
/// starts (so no run of this replica can have set a later one). Only a
/// metric: an error is logged and the gauge starts at 0.
async fn seed_last_successes(engine: &Engine, jobs: &[Arc<Job>]) {
    if jobs.is_empty() {
        return;
    }
    let names = jobs.iter().map(|job| job.name.to_string()).collect();
    match engine.store.last_successes(names).await {
        Ok(found) => {
            for (job, at) in found {
                if let Some(at) = at {
                    telemetry::last_success(&job, at.and_utc());
                }
            }
        }
        Err(e) => debug!("the jobs' last successes were not read for the metrics: {e}"),
    }
}

/// How often the jobs' pause gauges are read from their lease rows (the
/// claims themselves heed a pause at once).
const PAUSES_READ_EVERY: Duration = Duration::from_secs(10);

/// Keeps each job's `replicron_job_paused` gauge true to its lease row.
async fn watch_pauses(engine: Arc<Engine>, jobs: watch::Receiver<Vec<Arc<Job>>>) {
    let mut every = tokio::time::interval(PAUSES_READ_EVERY);
    loop {
        every.tick().await;
        let names: Vec<String> = jobs
            .borrow()
            .iter()
            .map(|job| job.name.to_string())
            .collect();
        if names.is_empty() {
            continue;
        }
        match engine.store.paused_jobs(names.clone()).await {
            Ok(paused) => {
                for name in &names {
                    telemetry::paused(name, paused.contains(name));
                }
            }
            Err(e) => debug!("which jobs are paused was not read for the metrics: {e}"),
        }
    }
}

/// The running tick loops, one per job, and those retired by a reload that
/// still finish a run.
#[derive(Default)]
struct Loops {
    running: Vec<Loop>,
    retired: Vec<JoinHandle<()>>,
    /// The running jobs, for the tasks that follow them (the check for
    /// missed instants).
    published: watch::Sender<Vec<Arc<Job>>>,
}

/// A running job loop.
struct Loop {
    job: Arc<Job>,
    retire: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl Loops {
    fn start(&mut self, engine: &Arc<Engine>, job: Arc<Job>) {
        telemetry::register_job(&job.name);
        let now = engine.clock.now();
        telemetry::schedule(
            &job.name,
            job.schedule.next_after(now),
            job.schedule.interval_after(now),
        );
        let (retire, retired) = watch::channel(false);
        let handle = if job.after.is_some() {
            tokio::spawn(after::dependent_loop(engine.clone(), job.clone(), retired))
        } else {
            tokio::spawn(tick::job_loop(engine.clone(), job.clone(), retired))
        };
        self.running.push(Loop {
            job,
            retire,
            handle,
        });
    }

    /// Applies a new set of jobs: added ones get rows and loops, removed
    /// ones are retired, changed ones (by their definition's fingerprint)
    /// restart with it; a retired loop lets its current run finish.
    async fn reload(&mut self, engine: &Arc<Engine>, wanted: Vec<Job>) -> Result<(), crate::Error> {
        let wanted: Vec<Arc<Job>> = wanted.into_iter().map(Arc::new).collect();
        let added: Vec<Arc<Job>> = wanted
            .iter()
            .filter(|job| !self.running.iter().any(|l| l.job.name == job.name))
            .cloned()
            .collect();
        engine
            .store
            .ensure_rows(added.iter().map(|j| j.name.to_string()).collect())
            .await?;
        let (mut kept, mut changed, mut removed) = (0, Vec::new(), Vec::new());
        for current in std::mem::take(&mut self.running) {
            match wanted.iter().find(|job| job.name == current.job.name) {
                Some(job) if job.fingerprint == current.job.fingerprint => {
                    kept += 1;
                    self.running.push(current);
                }
                Some(job) => {
                    changed.push(job.name.to_string());
                    let _ = current.retire.send(true);
                    self.retired.push(current.handle);
                    self.start(engine, job.clone());
                }
                None => {
                    removed.push(current.job.name.to_string());
                    let _ = current.retire.send(true);
                    self.retired.push(current.handle);
                }
            }
        }
        seed_last_successes(engine, &added).await;
        for job in &added {
            self.start(engine, job.clone());
        }
        self.retired.retain(|handle| !handle.is_finished());
        info!(
            added = added.len(),
            changed = changed.len(),
            removed = removed.len(),
            unchanged = kept,
            "config reloaded"
        );
        if !(added.is_empty() && changed.is_empty() && removed.is_empty()) {
            let added: Vec<String> = added.iter().map(|j| j.name.to_string()).collect();
            let detail = format!(
                "{} added, {} changed, {} removed, {kept} unchanged",
                added.len(),
                changed.len(),
                removed.len()
            );
            let entry = audit::Entry::fleet(audit::Action::Reload)
                .arg("signal", "SIGHUP")
                .arg("added", added)
                .arg("changed", changed)
                .arg("removed", removed);
            engine
                .store
                .audit(&audit::Actor::daemon(), entry, audit::Outcome::Done(detail))
                .await;
        }
        Ok(())
    }

    /// Tells the notifier and the missed-instant check which jobs run now.
    fn publish(&self, engine: &Engine) {
        engine.notifier.set_jobs(
            self.running
                .iter()
                .map(|l| (&*l.job.name, l.job.settings.notify.as_ref())),
        );
        self.published
            .send_replace(self.running.iter().map(|l| l.job.clone()).collect());
    }

    /// Waits for every loop (and its run) to end.
    async fn join(self) {
        for handle in self
            .running
            .into_iter()
            .map(|l| l.handle)
            .chain(self.retired)
        {
            if let Err(e) = handle.await {
                error!("a job loop failed: {e}");
            }
        }
    }
}

/// How often a replica in the minority for a job looks again.
const MINORITY_RECHECK: Duration = Duration::from_secs(1);

/// The registry's side of this replica: each heartbeat says it is alive,
/// which jobs it runs (their digests) and how its clock stands, prunes
/// replicas long gone, and compares the live replicas' job definitions;
/// it warns loudly if its row was taken over by another process with its
/// id.
struct Registration {
    me: registry::Me,
    clock: Arc<DatabaseClock>,
    /// Whether "another process took the id" was said already.
    said: bool,
}

impl Registration {
    /// One heartbeat, for `jobs` (this replica's running jobs).
    async fn beat(&mut self, engine: &Engine, jobs: &[Arc<Job>]) {
        let beat = registry::Beat {
            job_digests: drift::digests_of(jobs.iter().map(|job| &**job)),
            clock_offset_us: self
                .clock
                .offset()
                .and_then(|o| o.offset.num_microseconds())
                .map(|db_minus_host| -db_minus_host),
            resource_limits: crate::runner::resources::published(),
        };
        // A failure is the store's to tell; the next beat tries again.
        if let Ok((mine, instances)) = engine.store.heartbeat(self.me.clone(), beat.clone()).await {
            if mine {
                self.said = false;
            } else if !self.said {
                error!(instance = %self.me.id, "another process has taken over this replica's instance id: leases and history can no longer tell the two apart; stop one of them");
                self.said = true;
            }
            let names: Vec<String> = jobs.iter().map(|job| job.name.to_string()).collect();
            engine.claimer.set_fleet(claimer::Fleet::of(
                &self.me.id,
                &beat.job_digests,
                &instances,
            ));
            let drifted = drift::assess(&self.me.id, &beat.job_digests, &instances);
            engine.drift.update(&names, drifted);
        }
    }

    /// A heartbeat every [`registry::HEARTBEAT_EVERY`], for the jobs `jobs`
    /// publishes; every [`MINORITY_RECHECK`] while this replica is in the
    /// minority for a job, so that it claims again soon after the majority
    /// is gone (a rolling deploy's old replicas leaving).
    async fn beat_forever(mut self, engine: Arc<Engine>, jobs: watch::Receiver<Vec<Arc<Job>>>) {
        loop {
            let pause = if engine.drift.any_minority() {
                MINORITY_RECHECK
            } else {
                registry::HEARTBEAT_EVERY
            };
            tokio::time::sleep(pause).await;
            let current = jobs.borrow().clone();
            self.beat(&engine, &current).await;
        }
    }
}

/// The default instance id: `<hostname>:<pid>:<random>`, unique per process.
pub(crate) fn default_instance_id() -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string());
    format!(
        "{host}:{}:{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

/// On SQLite, whose clock a test can make virtual.
#[cfg(all(test, feature = "sqlite"))]
mod tests;

/// Warns at start when the database streams to a standby that may not have
/// every commit and some job catches up: after a failover to it, a claim
/// committed only on the old primary is lost, and catch-up may run its
/// instant a second time.
async fn warn_of_lossy_replication(store: &Store, jobs: &[Arc<Job>]) {
    let catching_up: Vec<&str> = jobs
        .iter()
        .filter(|job| !job.settings.catch_up.is_zero())
        .map(|job| &*job.name)
        .collect();
    if catching_up.is_empty() {
        return;
    }
    match store
        .call(
            "reading the server's replication",
            crate::db::replication::standbys,
        )
        .await
    {
        Ok(Some(standbys)) if standbys.may_lose_commits() => warn!(
            asynchronous_standbys = standbys.asynchronous,
            synchronous_standbys = standbys.synchronous,
            synchronous_commit = %standbys.commit,
            jobs = %catching_up.join(","),
            "the database streams to standbys that may lack its latest commits: after a failover to one, a claim committed only on the old primary is lost, and a job with catch_up may run that instant a second time; use synchronous_commit = remote_apply with a synchronous standby, or catch_up = \"0s\""
        ),
        Ok(_) => {}
        Err(e) => debug!("the server's replication could not be read: {e}"),
    }
}
