//! A job as the scheduler runs it: its name, schedule and settings, and
//! its [`Action`], what a run does. An action is an async closure in a
//! service that embeds replicron ([`Job::run`]), or a child process for the
//! daemon (`runner::Process`). Every run gets a [`RunContext`]: the
//! instant it is for, its fence and attempt, and a stop signal that fires
//! when the run must end (its timeout, a lease that can no longer be
//! confirmed, shutdown).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;

use crate::config;
use crate::runner::{Action, FnAction, RunContext};
use crate::schedule::Schedule;

/// A job: a name, a schedule and what to run.
///
/// ```
/// # fn main() -> Result<(), replicron::Error> {
/// use std::time::Duration;
///
/// let job = replicron::Job::new("purge-sessions", "*/5 * * * *")?
///     .timezone("Europe/Berlin")?
///     .lock_at_most_for(Duration::from_secs(600))
///     .run(|ctx| async move {
///         println!("purging for {}", ctx.instant());
///         Ok::<(), std::io::Error>(())
///     });
/// # let _ = job;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Job {
    pub(crate) name: crate::config::name::JobName,
    pub(crate) schedule: Schedule,
    pub(crate) settings: JobSettings,
    pub(crate) action: Option<Arc<dyn Action>>,
    /// Once across the fleet (a job built in code always is), or on every
    /// replica.
    pub(crate) run_on: config::RunOn,
    /// A digest of the job's effective definition in the job file, compared
    /// across replicas (config drift); `None` for a job built in code,
    /// which has no job file to drift from (a service and a daemon may run
    /// the same job, defined each its own way).
    pub(crate) digest: Option<String>,
    /// What the job is, for telling a changed definition (at a reload, and
    /// across replicas): the whole definition for a job from a file, the
    /// name and schedule for one built in code.
    pub(crate) fingerprint: String,
    /// What a run given no parameters gets: each declared one's default
    /// (the scheduled runs').
    pub(crate) default_params: Arc<crate::history::Params>,
    /// The jobs whose runs' ends start its runs, if it has any (then its
    /// schedule has no instant of its own).
    pub(crate) after: Option<Arc<config::After>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule.expression())
            .field("zone", &self.schedule.zone())
            .finish_non_exhaustive()
    }
}

/// The settings every job has, with the defaults of the job file's
/// `[defaults]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JobSettings {
    pub(crate) lock_at_most_for: Duration,
    pub(crate) lock_at_least_for: Duration,
    pub(crate) timeout: Duration,
    pub(crate) kill_grace: Duration,
    pub(crate) catch_up: Duration,
    pub(crate) retries: u32,
    pub(crate) retry_backoff: Duration,
    /// Which exit codes of its process succeed, skip and are retried (a
    /// job of the job file; a job built in code has no exit code).
    pub(crate) exit_codes: config::exit_codes::ExitCodes,
    /// See [`Job::missed_after`]; `None`: the default.
    pub(crate) missed_after: Option<Duration>,
    /// See [`Job::warn_after`]; `None`: never.
    pub(crate) warn_after: Option<Duration>,
    /// See [`Job::late_after`]; `None`: never.
    pub(crate) late_after: Option<Duration>,
    /// The shared locks and limits a run takes a slot of after the job's
    /// own lease, in this order (by their rows' names, the same for every
    /// job, so that no two runs each hold one and wait for the other's).
    pub(crate) gates: Vec<Gate>,
    /// Where the job's notifications go (a job of the job file).
    pub(crate) notify: Option<Arc<crate::notify::Notify>>,
    /// What an instant that comes while its run is going does.
    pub(crate) overlap: config::Overlap,
    /// The parameters whose values are secrets (`secret_params`): given to
    /// the run, written `[redacted]` in its history rows.
    pub(crate) secret_params: Vec<String>,
    /// Among the waiters for a shared lock or a limit, higher goes first
    /// (then the older instant).
    pub(crate) priority: i32,
    /// What becomes of an instant whose run's holder died mid-run.
    pub(crate) on_abandon: config::OnAbandon,
}

/// A shared lock or a limit across jobs: lease rows, one per slot, of which
/// a run takes one beside its job's lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gate {
    /// `lock NAME` or `limit NAME`, as messages name it.
    pub(crate) label: String,
    /// Its slots' lease rows: one for a lock, `max_running` for a limit.
    pub(crate) rows: Vec<String>,
}

impl Gate {
    /// A shared lock: one slot.
    pub(crate) fn lock(name: &str) -> Gate {
        Gate {
            label: format!("lock {name}"),
            rows: vec![format!("{}{name}", config::LOCK_ROW_PREFIX)],
        }
    }

    /// The gates of a job of the job file, in the order every run takes
    /// them.
    fn of(job: &config::Job) -> Vec<Gate> {
        let mut gates: Vec<Gate> = job.locks.iter().map(|lock| Gate::lock(lock)).collect();
        gates.extend(job.limits.iter().map(|limit| Gate {
            label: format!("limit {}", limit.name),
            rows: limit.rows(),
        }));
        if let config::Overlap::Allow(max) = job.overlap {
            gates.push(Gate {
                label: format!("its {max} run slots (max_concurrent)"),
                rows: crate::lease::concurrent_rows(&job.name, max),
            });
        }
        gates.sort_by(|a, b| a.rows.cmp(&b.rows));
        gates
    }
}

impl JobSettings {
    /// How long after an instant nobody claimed it is recorded `missed`
    /// (zero: never): the job's setting, else the larger of a minute and a
    /// tenth of the job's interval.
    pub(crate) fn missed_after(&self, interval: Option<Duration>) -> Duration {
        self.missed_after.unwrap_or_else(|| {
            interval
                .map(|i| i / 10)
                .unwrap_or_default()
                .max(Duration::from_secs(60))
        })
    }
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            lock_at_most_for: config::DEFAULT_LOCK_AT_MOST_FOR,
            lock_at_least_for: config::DEFAULT_LOCK_AT_LEAST_FOR,
            timeout: config::DEFAULT_TIMEOUT,
            kill_grace: config::DEFAULT_KILL_GRACE,
            catch_up: config::DEFAULT_CATCH_UP,
            retries: config::DEFAULT_RETRIES,
            retry_backoff: config::DEFAULT_RETRY_BACKOFF,
            exit_codes: config::exit_codes::ExitCodes::default(),
            missed_after: None,
            warn_after: None,
            late_after: None,
            notify: None,
            gates: Vec::new(),
            overlap: config::Overlap::Skip,
            secret_params: Vec::new(),
            priority: 0,
            on_abandon: config::OnAbandon::Record,
        }
    }
}

impl Job {
    /// The params a run of `instant` gets when nobody gives it any: those
    /// of the schedule's expression it is an instant of (the first one
    /// written, when several share it), else each declared one's default.
    pub(crate) fn params_at(
        &self,
        instant: chrono::DateTime<chrono::Utc>,
    ) -> Arc<crate::history::Params> {
        self.schedule
            .params_at(instant)
            .unwrap_or_else(|| self.default_params.clone())
    }

    /// A job called `name` that fires on `schedule`: 5 fields as
    /// crontab(5), 6 with a leading seconds field, or a macro such as
    /// `@daily`; in UTC unless [`Job::timezone`] says otherwise. The name is
    /// the key of the job's lease row and history: 1 to 64 characters of
    /// `A-Z a-z 0-9 _ . : -`.
    pub fn new(name: &str, schedule: &str) -> Result<Job, crate::Error> {
        let parsed = config::name::JobName::parse(name)
            .map_err(|e| crate::Error::Config(format!("invalid job name {name:?}: {e}")))?;
        let schedule = Schedule::parse(schedule, Tz::UTC)
            .map_err(|e| crate::Error::Config(format!("job {name:?}: {e}")))?;
        if schedule.is_manual() {
            return Err(crate::Error::Config(format!(
                "job {name:?}: @manual runs only when asked, through replicron trigger, the API or \
                 the dashboard, which read the job file: a job built in code is run by calling it"
            )));
        }
        if schedule.is_at_start() {
            return Err(crate::Error::Config(format!(
                "job {name:?}: @reboot runs once per replica start, and a job built in code runs \
                 once across the fleet, which has no start of its own: run it where your service starts"
            )));
        }
        Ok(Job {
            run_on: config::RunOn::One,
            digest: None,
            fingerprint: format!("{name} {} {}", schedule.expression(), schedule.zone()),
            name: parsed,
            schedule,
            settings: JobSettings::default(),
            action: None,
            default_params: Arc::default(),
            after: None,
        })
    }

    /// Evaluates the schedule in `zone`, an IANA name such as
    /// `"Europe/Berlin"`, daylight saving included.
    pub fn timezone(mut self, zone: &str) -> Result<Job, crate::Error> {
        let tz: Tz = zone.parse().map_err(|_| {
            crate::Error::Config(format!(
                "job {:?}: unknown time zone {zone:?}: expected an IANA name such as \"Europe/Berlin\"",
                self.name
            ))
        })?;
        self.schedule = Schedule::parse(self.schedule.expression(), tz)
            .map_err(|e| crate::Error::Config(format!("job {:?}: {e}", self.name)))?;
        self.fingerprint = format!(
            "{} {} {}",
            self.name,
            self.schedule.expression(),
            self.schedule.zone()
        );
        Ok(self)
    }

    /// The lease's length (default 10 minutes): how long another replica
    /// waits before it may take the job over from a holder that died. While
    /// a run goes, its lease is kept alive every third of it; a run whose
    /// lease cannot be confirmed for two thirds of it is stopped.
    pub fn lock_at_most_for(mut self, length: Duration) -> Job {
        self.settings.lock_at_most_for = length;
        self
    }

    /// Keeps the lease at least this long after a run starts (default 0):
    /// instants that come meanwhile are not run.
    pub fn lock_at_least_for(mut self, length: Duration) -> Job {
        self.settings.lock_at_least_for = length;
        self
    }

    /// Stops a run after this long (default 1 hour): its stop signal fires
    /// and it is recorded `timed_out`.
    pub fn timeout(mut self, timeout: Duration) -> Job {
        self.settings.timeout = timeout;
        self
    }

    /// How long a run may take to end once told to stop (default 10 s);
    /// an async run still going is then dropped.
    pub fn kill_grace(mut self, grace: Duration) -> Job {
        self.settings.kill_grace = grace;
        self
    }

    /// Runs once, at start and when the database is back, the latest
    /// instant nobody claimed, if it is at most this old (default 0: off).
    pub fn catch_up(mut self, within: Duration) -> Job {
        self.settings.catch_up = within;
        self
    }

    /// Tries a failed or timed-out run again this often (default 0), under
    /// the same lease, after `backoff` each time.
    pub fn retries(mut self, retries: u32, backoff: Duration) -> Job {
        self.settings.retries = retries;
        self.settings.retry_backoff = backoff;
        self
    }

    /// An instant that no replica claimed is recorded `missed` in the
    /// history this long after its time, by one replica of the fleet (and
    /// counted in `replicron_missed_instants_total`). Default: the larger of
    /// a minute and a tenth of the job's interval; zero turns it off.
    pub fn missed_after(mut self, after: Duration) -> Job {
        self.settings.missed_after = Some(after);
        self
    }

    /// A run still going this long after its attempt started is told of
    /// once as `long_running` (logged, counted in
    /// `replicron_runs_long_running_total`, and notified where the job's
    /// notifications ask for it) and goes on; a retry of it is not told of
    /// again. Must be shorter than the timeout. Default: never; zero turns
    /// it off.
    pub fn warn_after(mut self, after: Duration) -> Job {
        self.settings.warn_after = Some(after).filter(|after| !after.is_zero());
        self
    }

    /// A run whose action starts more than this after it was due (its
    /// instant plus its jitter delay) is told of as `late_start` (logged,
    /// counted in `replicron_runs_late_start_total`, and notified where the
    /// job's notifications ask for it). Default: never; zero turns it off.
    pub fn late_after(mut self, after: Duration) -> Job {
        self.settings.late_after = Some(after).filter(|after| !after.is_zero());
        self
    }

    /// Runs an instant again whose run's replica died, or lost its lease,
    /// mid-run (default: it is only recorded `abandoned`, and notified).
    /// The replica that marks the run `abandoned` claims the job's lease
    /// anew, under a higher fence, once the dead holder's lease has ended,
    /// and runs the instant again as its next attempt
    /// ([`RunContext::attempt`], [`RunContext::previous_status`] is
    /// `abandoned`), up to `max(retries, 1)` times. The run's work then
    /// happens at least once, and the dead attempt may have done some of it:
    /// guard what it writes elsewhere with [`RunContext::fence`].
    pub fn rerun_abandoned(mut self) -> Job {
        self.settings.on_abandon = config::OnAbandon::Rerun;
        self
    }

    /// What a run does: an async function of its [`RunContext`]. `Ok` is
    /// recorded `succeeded`, an error `failed` with its text as the run's
    /// output; a panic is recorded `failed` and the scheduler goes on.
    pub fn run<F, Fut, E>(mut self, action: F) -> Job
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        self.action = Some(Arc::new(FnAction(action)));
        self
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A job of the job file: its command run as a child process.
    pub(crate) fn from_config(job: &config::Job) -> Job {
        Job::with_process(
            job,
            crate::runner::Process {
                command: job.command.clone(),
                env: job.env.clone(),
                working_dir: job.working_dir.clone(),
                output_limit: job.output_limit,
                output_files: job.output_files.clone(),
                inherit_stdio: false,
                hidden_env: job.hidden_env.clone(),
                run_as: job.run_as.clone(),
                secret_sources: job
                    .params
                    .iter()
                    .filter_map(|p| Some((p.name.clone(), p.source.clone()?)))
                    .collect(),
                secret_params: job.secret_params.clone(),
                secret_env: job
                    .secret_env
                    .iter()
                    .map(|(name, source)| (name.clone(), source.clone()))
                    .collect(),
                resources: job.resources,
            },
        )
    }

    /// A job of the job file run as `process`.
    fn with_process(job: &config::Job, process: crate::runner::Process) -> Job {
        Job {
            name: job.name.clone(),
            schedule: job.schedule.clone(),
            settings: JobSettings {
                lock_at_most_for: job.lock_at_most_for,
                lock_at_least_for: job.lock_at_least_for,
                timeout: job.timeout,
                kill_grace: job.kill_grace,
                catch_up: job.catch_up,
                retries: job.retries,
                retry_backoff: job.retry_backoff,
                exit_codes: job.exit_codes.clone(),
                missed_after: job.missed_after,
                warn_after: job.warn_after,
                late_after: job.late_after,
                notify: job.notify.clone(),
                gates: Gate::of(job),
                overlap: job.overlap,
                secret_params: job.secret_params.clone(),
                priority: job.priority,
                on_abandon: job.on_abandon,
            },
            action: Some(Arc::new(process)),
            run_on: job.run_on,
            digest: Some(crate::schedule::digest(&job.definition())),
            // The whole definition: any change to it is a change of the job.
            fingerprint: fingerprint(job),
            default_params: Arc::new(
                config::params::resolve(&job.name, &job.params, &[]).unwrap_or_default(),
            ),
            after: job.after.clone().map(Arc::new),
        }
    }

    /// Checks what the builder methods could not: durations and their order.
    pub(crate) fn validate(&self) -> Result<(), crate::Error> {
        let fail = |key: &str, message: String| {
            Err(crate::Error::Config(format!(
                "job {:?}, {key}: {message}",
                self.name
            )))
        };
        let s = &self.settings;
        for (key, value) in [
            ("lock_at_most_for", s.lock_at_most_for),
            ("timeout", s.timeout),
            ("kill_grace", s.kill_grace),
        ] {
            if value.is_zero() {
                return fail(key, "must be greater than zero".to_string());
            }
        }
        if let Some(warn_after) = s.warn_after.filter(|after| *after >= s.timeout) {
            return fail(
                "warn_after",
                format!(
                    "{} must be shorter than timeout ({}): it would never fire (the run is \
                     stopped first)",
                    humantime::format_duration(warn_after),
                    humantime::format_duration(s.timeout)
                ),
            );
        }
        if s.retries > 0 && s.retry_backoff.is_zero() {
            return fail("retry_backoff", "must be greater than zero".to_string());
        }
        if s.lock_at_least_for > s.lock_at_most_for {
            return fail(
                "lock_at_least_for",
                format!(
                    "{} is longer than lock_at_most_for ({})",
                    humantime::format_duration(s.lock_at_least_for),
                    humantime::format_duration(s.lock_at_most_for)
                ),
            );
        }
        if self.action.is_none() {
            return fail(
                "run",
                "the job has nothing to run: give it Job::run".to_string(),
            );
        }
        Ok(())
    }
}

/// A digest (SHA-256, hex) of `value`'s debug form, written straight into
/// the hash: the form of a parsed schedule runs to tens of kilobytes.
fn fingerprint(value: &impl std::fmt::Debug) -> String {
    use sha2::Digest as _;
    struct Hashing(sha2::Sha256);
    impl std::fmt::Write for Hashing {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.update(s.as_bytes());
            Ok(())
        }
    }
    let mut hashing = Hashing(sha2::Sha256::new());
    let _ = std::fmt::write(&mut hashing, format_args!("{value:?}"));
    hashing
        .0
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
