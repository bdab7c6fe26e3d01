//! The fleet as an operator sees it, in one read: each job's lease, pause,
//! latest runs and the problem to look at first; the shared locks and who
//! holds them; the replicas and how their definitions drifted. `status`
//! prints it and the dashboard and API show it: neither queries on its own.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::config::{Config, Job, LOCK_ROW_PREFIX, RESERVED_PREFIX};
use crate::db::{DbError, Store};
use crate::history::{RunBrief, RunRow, RunStatus, rfc3339};
use crate::lease::{LockRow, Pause};
use crate::registry::Instance;
use crate::schedule::{Offset, SystemClock};
use crate::scheduler::backfill::progress::{self, Progress, ProgressRow};
use crate::scheduler::drift::{self, Drift};

/// What one read of the fleet found.
#[derive(Debug)]
pub(crate) struct Fleet {
    /// The database's time when it was read.
    pub(crate) now: DateTime<Utc>,
    /// The job file's jobs in its order, then the lease rows of jobs no
    /// longer in it.
    pub(crate) jobs: Vec<JobState>,
    /// The shared locks the job file's jobs take, by name.
    pub(crate) locks: Vec<LockState>,
    /// The job file's limits across jobs, in its order.
    pub(crate) limits: Vec<LimitState>,
    /// Every registered replica.
    pub(crate) instances: Vec<Instance>,
    /// The jobs live replicas define differently.
    pub(crate) drift: BTreeMap<String, Drift>,
    /// The backfills in progress, by job.
    pub(crate) backfills: Vec<BackfillMark>,
}

/// A backfill in progress, as its job's mark (`scheduler::backfill::begin`)
/// says.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct BackfillMark {
    /// Its job.
    pub(crate) job: String,
    /// The process that runs it.
    pub(crate) by: Option<String>,
    /// When it began (RFC 3339).
    pub(crate) since: Option<String>,
    /// Its id, range and progress, as the process that runs it records
    /// them (none from a process of a release before them).
    #[serde(flatten)]
    pub(crate) progress: Option<Progress>,
}

/// The backfills in progress at `now`, by the lease rows `rows` and the
/// backfills' progress rows `progress`.
fn backfills(rows: &[LockRow], progress: &[ProgressRow], now: DateTime<Utc>) -> Vec<BackfillMark> {
    let prefix = crate::scheduler::backfill::in_progress_row("");
    rows.iter()
        .filter(|l| l.lock_until.and_utc() > now)
        .filter_map(|l| {
            let job = l.name.strip_prefix(&prefix)?.to_string();
            let progress = progress
                .iter()
                .find(|p| p.job == job && p.fence == l.fence)
                .map(Progress::from);
            Some(BackfillMark {
                job,
                by: l.locked_by.clone(),
                since: l
                    .locked_at
                    .map(|t| crate::schedule::fmt_instant(t.and_utc())),
                progress,
            })
        })
        .collect()
}

/// A registered replica, as the command line, the API and the dashboard
/// show it.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct ReplicaView {
    /// Its id.
    pub(crate) id: String,
    /// Its host.
    pub(crate) host: String,
    /// Its process id.
    pub(crate) pid: i64,
    /// Its replicron version.
    pub(crate) version: String,
    /// When it started.
    pub(crate) started_at: String,
    /// Its last heartbeat.
    pub(crate) last_seen: String,
    /// Heard from within the last 30 s.
    pub(crate) alive: bool,
    /// How far its host's clock is ahead of the database's, in seconds.
    pub(crate) clock_offset_seconds: Option<f64>,
    /// Where the other replicas reach its dashboard (`[web]
    /// advertise_url`), if it serves one.
    pub(crate) web_url: Option<String>,
    /// How it holds its runs to their resource limits (`cgroup v2` or
    /// `rlimits`), if it says.
    pub(crate) resource_limits: Option<String>,
}

impl From<&Instance> for ReplicaView {
    fn from(instance: &Instance) -> Self {
        let row = &instance.row;
        ReplicaView {
            id: row.id.clone(),
            host: row.host.clone(),
            pid: row.pid,
            version: row.version.clone(),
            started_at: rfc3339(row.started_at),
            last_seen: rfc3339(row.last_seen),
            alive: instance.alive,
            clock_offset_seconds: row.clock_offset_us.map(|us| us as f64 / 1e6),
            web_url: row.web_url.clone(),
            resource_limits: row.resource_limits.clone(),
        }
    }
}

/// One job as the fleet has it.
#[derive(Debug)]
pub(crate) struct JobState {
    /// Its name.
    pub(crate) name: String,
    /// Its lease row, if it has one yet.
    pub(crate) lock: Option<LockRow>,
    /// Whether its lease is held now.
    pub(crate) held: bool,
    /// Its fleet-wide pause, if it is paused now.
    pub(crate) pause: Option<Pause>,
    /// Its latest runs, newest first.
    pub(crate) recent: Vec<RunBrief>,
    /// What an operator should look at first, if anything.
    pub(crate) problem: Option<Problem>,
    /// For an `overlap = "allow"` job: how many of its run slots are held
    /// now (its runs going), and how many it has.
    pub(crate) running: Option<(usize, u32)>,
}

/// Whether a job's runs are late or long, by its `late_after` and
/// `warn_after`, from the history (the fleet's view): what `status`, the
/// dashboard and the API show beside the notifications.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub(crate) struct Alerts {
    /// Its last run is still running, longer than `warn_after` since its
    /// attempt's row started: for how many seconds.
    pub(crate) long_running_seconds: Option<f64>,
    /// Its last run, a scheduled first attempt, started more than
    /// `late_after` after it was due (its instant plus its jitter delay):
    /// by how many seconds.
    pub(crate) late_start_seconds: Option<f64>,
}

impl Alerts {
    /// What `last`, the newest run of `job`, says at `now`.
    pub(crate) fn of(job: Option<&Job>, last: Option<&RunBrief>, now: DateTime<Utc>) -> Alerts {
        let (Some(job), Some(last)) = (job, last) else {
            return Alerts::default();
        };
        let seconds = |d: chrono::TimeDelta| d.num_milliseconds() as f64 / 1000.0;
        let beyond = |after: Option<Duration>, d: chrono::TimeDelta| {
            after
                .and_then(|after| chrono::TimeDelta::from_std(after).ok())
                .filter(|after| d > *after)
                .map(|_| seconds(d))
        };
        let started = last.started_at.and_utc();
        let running = (last.status == RunStatus::Running).then(|| now - started);
        let due = job.schedule.start_of(last.scheduled_at.and_utc());
        let scheduled = last.triggered_by == crate::history::Trigger::Schedule && last.attempt == 1;
        Alerts {
            long_running_seconds: running.and_then(|d| beyond(job.warn_after, d)),
            late_start_seconds: scheduled
                .then(|| beyond(job.late_after, started - due))
                .flatten(),
        }
    }

    /// As the tables say it: `long-running 25m`, `started 3m late`.
    pub(crate) fn describe(&self) -> Option<String> {
        let human = |s: f64| humantime::format_duration(Duration::from_secs(s as u64)).to_string();
        let said: Vec<String> = [
            self.long_running_seconds
                .map(|s| format!("long-running {}", human(s))),
            self.late_start_seconds
                .map(|s| format!("started {} late", human(s))),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!said.is_empty()).then(|| said.join(", "))
    }
}

/// A shared lock of the jobs.
#[derive(Debug)]
pub(crate) struct LockState {
    /// Its name in the job file.
    pub(crate) lock: String,
    /// The jobs that take it.
    pub(crate) jobs: Vec<String>,
    /// Who holds it now, and until when unless extended or released.
    pub(crate) held: Option<(Option<String>, NaiveDateTime)>,
}

/// A limit across jobs, and who holds its slots.
#[derive(Clone, Debug)]
pub(crate) struct LimitState {
    /// Its name in the job file.
    pub(crate) limit: String,
    /// How many runs it lets run at once.
    pub(crate) max_running: u32,
    /// The jobs that take it.
    pub(crate) jobs: Vec<String>,
    /// Its slots held now: by whom, and until when unless extended or
    /// released.
    pub(crate) held: Vec<(Option<String>, NaiveDateTime)>,
}

impl JobState {
    /// Its last run.
    pub(crate) fn last(&self) -> Option<&RunBrief> {
        self.recent.first()
    }

    /// Its next instant after `now`, and that instant's start (a jittered
    /// job's is later): none for a job not in the file, disabled, or paused
    /// until resumed; a paused job's first at or after its pause's end.
    pub(crate) fn next(
        &self,
        job: Option<&Job>,
        now: DateTime<Utc>,
    ) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let job = job.filter(|j| j.enabled && j.held().is_none())?;
        let after = match &self.pause {
            Some(Pause { until: None, .. }) => return None,
            Some(Pause {
                until: Some(until), ..
            }) => *until - chrono::TimeDelta::milliseconds(1),
            None => now,
        };
        let next = job.schedule.next_after(after)?;
        Some((next, job.schedule.start_of(next)))
    }
}

/// Reads the fleet: every job's state (or only job `only`'s) with its
/// `recent` latest runs (at least one), the shared locks and the replicas.
pub(crate) async fn read(
    store: &Store,
    config: &Config,
    recent: usize,
    only: Option<&str>,
) -> Result<Fleet, DbError> {
    let now = store.database_now().await?;
    let rows = store.list_locks().await?;
    let (instances, drift) = replicas(store).await?;
    let mut names = job_names(config, &rows);
    if let Some(only) = only {
        names.retain(|name| name == only);
    }
    let mut runs: BTreeMap<String, Vec<RunBrief>> = store
        .recent_briefs(names.clone(), recent.max(1) as i64)
        .await?
        .into_iter()
        .collect();
    let jobs = names
        .into_iter()
        .map(|name| {
            let recent = runs.remove(&name).unwrap_or_default();
            let lock = rows.iter().find(|l| l.name == name).cloned();
            let held = lock.as_ref().is_some_and(|l| l.lock_until.and_utc() > now);
            let pause = lock.as_ref().and_then(|l| l.pause_at(now));
            let problem = Seen {
                job: config.job(&name),
                lock: lock.as_ref(),
                last: recent.first(),
                held,
                now,
                instances: &instances,
            }
            .problem(drift.get(&name));
            let running = config.job(&name).and_then(|job| match job.overlap {
                crate::config::Overlap::Allow(max) => {
                    let slots = crate::lease::concurrent_rows(&job.name, max);
                    let held = rows
                        .iter()
                        .filter(|l| slots.contains(&l.name) && l.lock_until.and_utc() > now)
                        .count();
                    Some((held, max))
                }
                _ => None,
            });
            JobState {
                running,
                name,
                lock,
                held,
                pause,
                recent,
                problem,
            }
        })
        .collect();
    Ok(Fleet {
        now,
        jobs,
        locks: shared_locks(config, &rows, now),
        limits: limits(config, &rows, now),
        instances,
        drift,
        backfills: backfills(&rows, &progress::list(store).await?, now),
    })
}

/// This host's clock against the database's, from `samples` round trips.
pub(crate) async fn clock_offset(store: &Store, samples: usize) -> Result<Offset, DbError> {
    store
        .call("reading the database clock", move |conn| {
            crate::db::clock::estimate_offset(conn, &SystemClock, samples)
        })
        .await
}

/// The last run of each of `fleet`'s jobs with its output, in the order of
/// its jobs: one statement for all of them.
pub(crate) async fn with_output(
    store: &Store,
    fleet: &Fleet,
) -> Result<Vec<Option<RunRow>>, DbError> {
    let ids: Vec<i64> = fleet
        .jobs
        .iter()
        .filter_map(|job| job.last())
        .map(|run| run.id)
        .collect();
    let mut found: BTreeMap<i64, RunRow> = store
        .find_runs(ids)
        .await?
        .into_iter()
        .map(|run| (run.id, run))
        .collect();
    Ok(fleet
        .jobs
        .iter()
        .map(|job| job.last().and_then(|last| found.remove(&last.id)))
        .collect())
}

/// Every registered replica, and the jobs live ones define differently.
pub(crate) async fn replicas(
    store: &Store,
) -> Result<(Vec<Instance>, BTreeMap<String, Drift>), DbError> {
    let instances = store.list_instances().await?;
    let drift = drift::among(&instances);
    Ok((instances, drift))
}

/// The shared locks the jobs of `config` take, each with its jobs and its
/// holder in `rows` at `now`.
fn shared_locks(config: &Config, rows: &[LockRow], now: DateTime<Utc>) -> Vec<LockState> {
    let mut shared: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for job in &config.jobs {
        for lock in &job.locks {
            shared.entry(lock).or_default().push(job.name.to_string());
        }
    }
    shared
        .into_iter()
        .map(|(lock, jobs)| {
            let row_name = format!("{LOCK_ROW_PREFIX}{lock}");
            let held = rows
                .iter()
                .find(|l| l.name == row_name)
                .filter(|l| l.lock_until.and_utc() > now)
                .map(|l| (l.locked_by.clone(), l.lock_until));
            LockState {
                lock: lock.to_string(),
                jobs,
                held,
            }
        })
        .collect()
}

/// The limits of `config`, each with its jobs and its slots' holders in
/// `rows` at `now`.
fn limits(config: &Config, rows: &[LockRow], now: DateTime<Utc>) -> Vec<LimitState> {
    config
        .limits
        .iter()
        .map(|limit| {
            let slots = limit.rows();
            LimitState {
                limit: limit.name.clone(),
                max_running: limit.max_running,
                jobs: config
                    .jobs
                    .iter()
                    .filter(|j| j.limits.iter().any(|l| l.name == limit.name))
                    .map(|j| j.name.to_string())
                    .collect(),
                held: rows
                    .iter()
                    .filter(|l| slots.contains(&l.name) && l.lock_until.and_utc() > now)
                    .map(|l| (l.locked_by.clone(), l.lock_until))
                    .collect(),
            }
        })
        .collect()
}

/// The jobs an operator sees: those of the job file in its order, then the
/// lease rows of jobs no longer in it (not replicron's own rows, nor those
/// of `exec` locks).
fn job_names(config: &Config, locks: &[LockRow]) -> Vec<String> {
    let mut names: Vec<String> = config.jobs.iter().map(|j| j.name.to_string()).collect();
    for lock in locks {
        let own = lock.name.starts_with(RESERVED_PREFIX) || crate::lease::is_once_row(&lock.name);
        if !own && !names.contains(&lock.name) {
            names.push(lock.name.clone());
        }
    }
    names
}

/// What one job's diagnosis reads.
#[derive(Clone, Copy)]
struct Seen<'a> {
    /// The job, as the job file defines it (none: no longer in the file).
    job: Option<&'a Job>,
    /// Its lease row.
    lock: Option<&'a LockRow>,
    /// Its last run.
    last: Option<&'a RunBrief>,
    /// Whether its lease is held at `now`.
    held: bool,
    /// The database's now.
    now: DateTime<Utc>,
    /// The replicas the registry knows.
    instances: &'a [Instance],
}

impl Seen<'_> {
    /// What an operator should look at for the job, the first that
    /// applies: a stuck or orphaned lease, a definition that drifted
    /// between replicas, a last run that ended badly.
    fn problem(&self, drift: Option<&Drift>) -> Option<Problem> {
        self.job
            .filter(|job| job.enabled)
            .and_then(crate::config::Job::held)
            .map(Problem::Held)
            .or_else(|| self.stuck())
            .or_else(|| drift.map(|drift| Problem::Drift(drift.describe())))
            .or_else(|| failed(self.last))
    }

    /// Why a job's lease looks stuck, if it does (see the book, "Command line", `status`).
    fn stuck(&self) -> Option<Problem> {
        let Seen {
            job,
            lock,
            last,
            held,
            now,
            instances,
        } = *self;
        // An `allow` job's runs hold their instants' leases, not the job's.
        if job.is_some_and(|j| matches!(j.overlap, crate::config::Overlap::Allow(_))) {
            return None;
        }
        let holder = last.and_then(|run| instances.iter().find(|i| i.row.id == run.instance));
        let lock = lock?;
        let current = last.filter(|run| run.fence == lock.fence);
        let running = current.filter(|run| run.status == RunStatus::Running);
        let seconds = |d: Duration| Duration::from_secs(d.as_secs());
        match (held, running) {
            (true, Some(run)) => {
                let job = job?;
                let allowed = job.timeout + job.kill_grace + job.lock_at_most_for;
                let age = (now - run.started_at.and_utc())
                    .to_std()
                    .unwrap_or_default();
                (age > allowed).then(|| Problem::Overdue {
                    run: run.id,
                    running: seconds(age),
                    timeout: job.timeout,
                })
            }
            (true, None) => {
                let locked_at = lock.locked_at?.and_utc();
                let expected = job.map_or(Duration::ZERO, |j| {
                    j.lock_at_least_for + j.retry_backoff * j.retries
                }) + Duration::from_secs(60);
                let age = (now - locked_at).to_std().unwrap_or_default();
                (age > expected).then_some(Problem::HeldWithoutRun)
            }
            (false, Some(run)) => {
                let ended = (now - lock.lock_until.and_utc())
                    .to_std()
                    .unwrap_or_default();
                let ended = seconds(ended);
                let (run_id, instance) = (run.id, run.instance.clone());
                Some(match holder {
                    // The holder runs on: it finds its lease gone when it next
                    // confirms it, and stops the run (recorded lost_lock).
                    Some(alive) if alive.alive => Problem::LeaseEnded {
                        run: run_id,
                        instance,
                        ended,
                    },
                    Some(gone) => Problem::Orphaned {
                        run: run_id,
                        instance,
                        ended,
                        last_seen: Some(gone.row.last_seen),
                    },
                    None => Problem::Orphaned {
                        run: run_id,
                        instance,
                        ended,
                        last_seen: None,
                    },
                })
            }
            (false, None) => None,
        }
    }
}

/// What an operator should look at first for a job: the command line, the
/// API and the dashboard show it as its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// A run held its lease past its timeout, kill grace and lease: its
    /// holder may be frozen.
    Overdue {
        run: i64,
        running: Duration,
        timeout: Duration,
    },
    /// The lease is held with no run recorded running, longer than a run's
    /// retries and `lock_at_least_for` explain.
    HeldWithoutRun,
    /// A run is recorded running but its lease ended; its holder is alive
    /// and stops it when it next confirms the lease.
    LeaseEnded {
        run: i64,
        instance: String,
        ended: Duration,
    },
    /// A run is recorded running, its lease ended, and its holder vanished
    /// (last seen then) or is no replica the registry knows (`None`).
    Orphaned {
        run: i64,
        instance: String,
        ended: Duration,
        last_seen: Option<NaiveDateTime>,
    },
    /// A calendar the job names cannot be read (here): it is not run
    /// until the file is fixed and the daemon reloaded.
    Held(String),
    /// Live replicas define the job differently: how.
    Drift(String),
    /// The last run ended badly.
    Failed {
        run: i64,
        job: String,
        status: RunStatus,
        exit_code: Option<i32>,
        started_at: NaiveDateTime,
        instance: String,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let human = humantime::format_duration;
        match self {
            Problem::Overdue {
                running, timeout, ..
            } => write!(
                f,
                "STUCK: running {} (timeout {}); its holder may be frozen",
                human(*running),
                human(*timeout)
            ),
            Problem::HeldWithoutRun => f.write_str(
                "STUCK: lease held with no run recorded running; `replicron unlock` ends it",
            ),
            Problem::LeaseEnded {
                run,
                instance,
                ended,
            } => write!(
                f,
                "LEASE ENDED: run {run} is recorded running, but its lease ended {} ago (unlocked, or lost); \
                 its holder is alive ({instance}) and stops the run when it next confirms the lease",
                human(*ended)
            ),
            Problem::Orphaned {
                run,
                instance,
                ended,
                last_seen: Some(last_seen),
            } => write!(
                f,
                "ORPHANED: run {run} is recorded running, its lease ended {} ago, and its holder {instance} \
                 was last seen at {}: it vanished; the next claim marks the run abandoned",
                human(*ended),
                rfc3339(*last_seen)
            ),
            Problem::Orphaned {
                run,
                instance,
                ended,
                last_seen: None,
            } => write!(
                f,
                "ORPHANED: run {run} is recorded running, its lease ended {} ago, and its holder {instance} \
                 is not a running replica; the next claim marks the run abandoned",
                human(*ended)
            ),
            Problem::Held(why) => write!(
                f,
                "HELD: {why}; it does not run until the file is fixed and the daemon reloaded (SIGHUP)"
            ),
            Problem::Drift(how) => write!(f, "DRIFT: live replicas define it differently: {how}"),
            Problem::Failed {
                run,
                job,
                status,
                exit_code,
                started_at,
                instance,
            } => {
                write!(f, "FAILED: last run {run} {status}")?;
                if let Some(code) = exit_code {
                    write!(f, " (exit {code})")?;
                }
                write!(
                    f,
                    " at {} on {instance}; `replicron history --job {job}` shows its output",
                    rfc3339(*started_at)
                )
            }
        }
    }
}

impl Problem {
    /// The run it names, if it names one.
    pub(crate) fn run(&self) -> Option<i64> {
        match self {
            Problem::Overdue { run, .. }
            | Problem::LeaseEnded { run, .. }
            | Problem::Orphaned { run, .. }
            | Problem::Failed { run, .. } => Some(*run),
            Problem::HeldWithoutRun | Problem::Held(_) | Problem::Drift(_) => None,
        }
    }

    /// Its text for the dashboard, which links it to its run (or the
    /// job's runs) rather than naming a command to see them.
    pub(crate) fn headline(&self) -> String {
        match self {
            Problem::Failed {
                run,
                status,
                exit_code,
                started_at,
                instance,
                ..
            } => {
                let code = exit_code.map_or(String::new(), |code| format!(" (exit {code})"));
                format!(
                    "FAILED: last run {run} {status}{code} at {} on {instance}",
                    rfc3339(*started_at)
                )
            }
            Problem::HeldWithoutRun => {
                "STUCK: lease held with no run recorded running; the job's page unlocks it"
                    .to_string()
            }
            Problem::Overdue { run, .. } => format!("run {run}: {self}"),
            other => other.to_string(),
        }
    }
}

/// As its text, in JSON.
impl serde::Serialize for Problem {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Whether the job's last run ended badly: an operator should look.
fn failed(last: Option<&RunBrief>) -> Option<Problem> {
    let run = last?;
    let bad = matches!(
        run.status,
        RunStatus::Failed
            | RunStatus::TimedOut
            | RunStatus::LostLock
            | RunStatus::Abandoned
            | RunStatus::Error
    );
    bad.then(|| Problem::Failed {
        run: run.id,
        job: run.job.clone(),
        status: run.status,
        exit_code: run.exit_code,
        started_at: run.started_at,
        instance: run.instance.clone(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};

    use super::{Alerts, Problem, Seen};
    use crate::config::{Config, Environment};
    use crate::history::{RunBrief, RunStatus};
    use crate::lease::LockRow;
    use crate::registry::{Instance, InstanceRow};

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z")
            .expect("time")
            .with_timezone(&Utc)
    }

    fn ago(seconds: i64) -> NaiveDateTime {
        (now() - TimeDelta::seconds(seconds)).naive_utc()
    }

    fn config() -> Config {
        let text = "[database]\nurl = \"sqlite:///tmp/replicron-fleet-test.db\"\n\n\
                    [[job]]\nname = \"report\"\nschedule = \"0 * * * *\"\ncommand = \"true\"\n\
                    timeout = \"10m\"\nlock_at_most_for = \"5m\"\nkill_grace = \"10s\"\n";
        Config::parse(Path::new("jobs.toml"), text, &Environment::default()).expect("valid")
    }

    fn lock(until: i64, fence: i64) -> LockRow {
        LockRow {
            name: "report".to_string(),
            lock_until: ago(-until),
            locked_at: Some(ago(3600)),
            locked_by: Some("r1".to_string()),
            last_scheduled_at: Some(ago(3600)),
            fence,
            created_at: None,
            missed_checked_until: None,
            paused_at: None,
            paused_until: None,
            paused_by: None,
            paused_reason: None,
            claim_nonce: None,
            queued_for: None,
            stop_fence: None,
        }
    }

    fn run(status: RunStatus, fence: i64, started: i64) -> RunBrief {
        RunBrief {
            id: 7,
            job: "report".to_string(),
            scheduled_at: ago(started),
            attempt: 1,
            instance: "r1".to_string(),
            fence,
            started_at: ago(started),
            finished_at: (status != RunStatus::Running).then(|| ago(started - 1)),
            status,
            exit_code: (status == RunStatus::Failed).then_some(3),
            confirmed_at: None,
            once_key: None,
            triggered_by: Default::default(),
            params: None,
            output_file: None,
        }
    }

    /// A running run past `warn_after` is long-running, one under it is
    /// not, nor a finished one; a scheduled first attempt that started more
    /// than `late_after` after its instant plus jitter started late, one on
    /// time did not, nor a manual run nor a retry, however late.
    #[test]
    fn long_and_late_runs_are_shown_from_the_history() {
        let text = "[database]\nurl = \"sqlite:///tmp/replicron-fleet-test.db\"\n\n\
                    [[job]]\nname = \"report\"\nschedule = \"0 * * * *\"\ncommand = \"true\"\n\
                    warn_after = \"20m\"\nlate_after = \"2m\"\n";
        let config =
            Config::parse(Path::new("jobs.toml"), text, &Environment::default()).expect("valid");
        let job = config.job("report");
        let of = |run: &RunBrief| Alerts::of(job, Some(run), now());
        assert_eq!(
            of(&run(RunStatus::Running, 1, 25 * 60)).long_running_seconds,
            Some(1500.0)
        );
        assert_eq!(of(&run(RunStatus::Running, 1, 15 * 60)), Alerts::default());
        assert_eq!(
            of(&run(RunStatus::Succeeded, 1, 25 * 60)),
            Alerts::default()
        );
        let mut late = run(RunStatus::Succeeded, 1, 600);
        late.scheduled_at = ago(600 + 180);
        assert_eq!(of(&late).late_start_seconds, Some(180.0));
        assert_eq!(of(&late).describe().as_deref(), Some("started 3m late"));
        let mut on_time = late.clone();
        on_time.scheduled_at = ago(600 + 60);
        assert_eq!(of(&on_time), Alerts::default());
        let mut manual = late.clone();
        manual.triggered_by = crate::history::Trigger::Manual;
        assert_eq!(of(&manual), Alerts::default());
        let mut retry = late.clone();
        retry.attempt = 2;
        assert_eq!(of(&retry), Alerts::default());
        assert_eq!(
            Alerts::of(config.job("report"), None, now()),
            Alerts::default()
        );
    }

    fn replica(alive: bool) -> Instance {
        Instance {
            row: InstanceRow {
                id: "r1".to_string(),
                host: "h1".to_string(),
                pid: 1,
                version: "0".to_string(),
                started_at: ago(7200),
                last_seen: ago(if alive { 1 } else { 600 }),
                job_digests: None,
                clock_offset_us: None,
                web_url: None,
                resource_limits: None,
            },
            alive,
        }
    }

    /// Each problem an operator is shown, and none for a healthy job: a
    /// run held past its timeout, a lease held with no run, a run whose
    /// lease ended while its holder lives, one whose holder vanished, and a
    /// failed last run.
    #[test]
    fn each_problem_is_named_and_a_healthy_job_has_none() {
        let config = config();
        let job = config.job("report");
        let diagnose = |lock: &LockRow, last: Option<&RunBrief>, replicas: &[Instance]| {
            let held = lock.lock_until.and_utc() > now();
            Seen {
                job,
                lock: Some(lock),
                last,
                held,
                now: now(),
                instances: replicas,
            }
            .problem(None)
        };
        let alive = [replica(true)];
        let ok = run(RunStatus::Succeeded, 4, 3600);
        assert_eq!(diagnose(&lock(-10, 4), Some(&ok), &alive), None);
        let going = run(RunStatus::Running, 4, 60);
        assert_eq!(diagnose(&lock(240, 4), Some(&going), &alive), None);

        let stuck = run(RunStatus::Running, 4, 3600);
        assert!(matches!(
            diagnose(&lock(240, 4), Some(&stuck), &alive),
            Some(Problem::Overdue { running, .. }) if running.as_secs() == 3600
        ));
        let text = diagnose(&lock(240, 4), Some(&stuck), &alive)
            .expect("stuck")
            .to_string();
        assert!(text.starts_with("STUCK: running 1h"), "{text}");
        let text = diagnose(&lock(240, 4), Some(&ok), &alive)
            .expect("held, no run")
            .to_string();
        assert!(text.contains("lease held with no run"), "{text}");
        let text = diagnose(&lock(-30, 4), Some(&going), &alive)
            .expect("ended")
            .to_string();
        assert!(text.starts_with("LEASE ENDED: run 7"), "{text}");
        let text = diagnose(&lock(-30, 4), Some(&going), &[replica(false)])
            .expect("gone")
            .to_string();
        assert!(
            text.starts_with("ORPHANED: run 7") && text.contains("last seen"),
            "{text}"
        );
        let text = diagnose(&lock(-30, 4), Some(&going), &[])
            .expect("unknown")
            .to_string();
        assert!(text.contains("is not a running replica"), "{text}");
        let failed = run(RunStatus::Failed, 4, 3600);
        let text = diagnose(&lock(-10, 4), Some(&failed), &alive)
            .expect("failed")
            .to_string();
        assert!(
            text.starts_with("FAILED: last run 7 failed (exit 3)"),
            "{text}"
        );
    }
}
