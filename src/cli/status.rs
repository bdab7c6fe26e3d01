//! `replicron status`: each job's next instant, lease and last run, and
//! what looks wrong (a failed last run, a stuck lease, a run whose lease
//! ended), with this host's clock against the database's.

use chrono::{DateTime, SecondsFormat, Utc};

use super::table::print_table;
use super::{ConfigArg, ExitCode, OutputFormat, load, open_for_command};
use crate::history::{self, RunRecord, RunStatus};
use crate::lease;
use crate::schedule::SystemClock;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub(crate) format: OutputFormat,
}

/// This host's clock against the database's, in `status`.
#[derive(Debug, serde::Serialize)]
struct ClockStatus {
    /// How far this host's clock is ahead of the database's (negative: behind).
    host_ahead_seconds: f64,
    /// The estimate's error bound.
    error_seconds: f64,
    /// The database's time when `status` read it.
    database_now: String,
}

/// A job's fleet-wide pause, in `status`.
#[derive(Debug, serde::Serialize)]
struct PauseStatus {
    by: Option<String>,
    since: Option<String>,
    /// `None`: until resumed.
    until: Option<String>,
    reason: Option<String>,
    /// As the table shows it.
    #[serde(skip)]
    text: String,
}

/// A registered replica, in `status`.
#[derive(Debug, serde::Serialize)]
struct ReplicaStatus {
    id: String,
    host: String,
    pid: i64,
    version: String,
    started_at: String,
    last_seen: String,
    /// Heard from within the last 30 s.
    alive: bool,
    /// How far its host's clock is ahead of the database's.
    clock_offset_seconds: Option<f64>,
}

/// A shared lock of the jobs, in `status`.
#[derive(Debug, serde::Serialize)]
struct LockStatus {
    lock: String,
    /// The jobs that take it.
    jobs: Vec<String>,
    /// Who holds it now, if anyone.
    held_by: Option<String>,
    /// Until when, unless extended or released.
    held_until: Option<String>,
}

/// One row of `status`.
#[derive(Debug, serde::Serialize)]
struct JobStatus {
    job: String,
    enabled: Option<bool>,
    next: Option<String>,
    lease_held: bool,
    locked_by: Option<String>,
    lock_until: Option<String>,
    fence: i64,
    paused: Option<PauseStatus>,
    last_run: Option<RunRecord>,
    problem: Option<String>,
}

pub(super) fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let pool = open_for_command(&config)?;
    let mut conn = pool.get()?;
    let query = |what: &str, e| crate::db::DbError::query(what, e);
    let now = crate::db::clock::database_now(&mut conn)
        .map_err(|e| query("reading the database clock", e))?;
    let offset = crate::db::clock::estimate_offset(&mut conn, &SystemClock, 5)
        .map_err(|e| query("reading the database clock", e))?;
    let locks = lease::list_locks(&mut conn).map_err(|e| query("reading the leases", e))?;
    let instances =
        crate::registry::list_instances(&mut conn).map_err(|e| query("reading the replicas", e))?;
    let drifted = crate::scheduler::drift::among(&instances);
    let names = job_names(&config, &locks);
    let mut rows = Vec::new();
    for name in names {
        let job = config.job(&name);
        let lock = locks.iter().find(|l| l.name == name);
        let last =
            history::latest_run(&mut conn, &name).map_err(|e| query("reading the history", e))?;
        let held = lock.is_some_and(|l| l.lock_until.and_utc() > now);
        let brief = last.as_ref().map(history::RunBrief::from);
        let problem = problem(
            job,
            lock,
            brief.as_ref(),
            held,
            now,
            &instances,
            drifted.get(&name),
        );
        rows.push(JobStatus {
            job: name.clone(),
            enabled: job.map(|j| j.enabled),
            next: job
                .filter(|j| j.enabled)
                .and_then(|j| j.schedule.next_after(now))
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true)),
            lease_held: held,
            locked_by: lock.and_then(|l| l.locked_by.clone()),
            lock_until: lock.map(|l| history::rfc3339(l.lock_until)),
            fence: lock.map_or(0, |l| l.fence),
            paused: lock.and_then(|l| {
                let until = l.paused_at_time(now.naive_utc())?;
                Some(PauseStatus {
                    by: l.paused_by.clone(),
                    since: l.paused_at.map(history::rfc3339),
                    until: until.map(|u| history::rfc3339(u.naive_utc())),
                    reason: l.paused_reason.clone(),
                    text: l.describe_pause(until),
                })
            }),
            last_run: last.map(RunRecord::from),
            problem,
        });
    }
    let stuck_count = rows.iter().filter(|r| r.problem.is_some()).count();
    let mut shared: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for job in &config.jobs {
        for lock in &job.locks {
            shared.entry(lock).or_default().push(job.name.clone());
        }
    }
    let lock_rows: Vec<LockStatus> = shared
        .into_iter()
        .map(|(lock, jobs)| {
            let row_name = format!("{}{lock}", crate::config::LOCK_ROW_PREFIX);
            let held = locks
                .iter()
                .find(|l| l.name == row_name)
                .filter(|l| l.lock_until.and_utc() > now);
            LockStatus {
                lock: lock.to_string(),
                jobs,
                held_by: held.and_then(|l| l.locked_by.clone()),
                held_until: held.map(|l| history::rfc3339(l.lock_until)),
            }
        })
        .collect();
    let replicas: Vec<ReplicaStatus> = instances
        .iter()
        .map(|i| ReplicaStatus {
            id: i.row.id.clone(),
            host: i.row.host.clone(),
            pid: i.row.pid,
            version: i.row.version.clone(),
            started_at: history::rfc3339(i.row.started_at),
            last_seen: history::rfc3339(i.row.last_seen),
            alive: i.alive,
            clock_offset_seconds: i.row.clock_offset_us.map(|us| us as f64 / 1e6),
        })
        .collect();
    let clock = ClockStatus {
        host_ahead_seconds: -(offset.offset.num_microseconds().unwrap_or(0) as f64) / 1e6,
        error_seconds: offset.error.as_secs_f64(),
        database_now: now.to_rfc3339_opts(SecondsFormat::Millis, true),
    };
    match args.format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "clock": clock, "jobs": rows, "locks": lock_rows, "replicas": replicas })
            )?
        ),
        OutputFormat::Table => {
            println!(
                "database time {}; this host's clock is {} from it\n",
                clock.database_now,
                crate::scheduler::clock_sync::describe(offset)
            );
            print_table(
                &["JOB", "NEXT", "LEASE", "LAST RUN", "PROBLEM"],
                rows.iter().map(|r| {
                    let lease = if r.lease_held {
                        format!(
                            "held by {} until {}",
                            r.locked_by.as_deref().unwrap_or("?"),
                            r.lock_until.as_deref().unwrap_or("?")
                        )
                    } else {
                        "free".to_string()
                    };
                    let last = r.last_run.as_ref().map_or("never".to_string(), |run| {
                        format!("{} at {} on {}", run.status, run.started_at, run.instance)
                    });
                    let next = match (r.enabled, &r.next) {
                        (_, _) if r.paused.is_some() => {
                            format!("PAUSED: {}", r.paused.as_ref().map_or("", |p| &p.text))
                        }
                        (None, _) => "not in config".to_string(),
                        (Some(false), _) => "disabled".to_string(),
                        (Some(true), next) => next.clone().unwrap_or_else(|| "-".to_string()),
                    };
                    vec![
                        r.job.clone(),
                        next,
                        lease,
                        last,
                        r.problem.clone().unwrap_or_default(),
                    ]
                }),
            );
            if !lock_rows.is_empty() {
                println!();
                print_table(
                    &["LOCK", "JOBS", "HELD BY"],
                    lock_rows.iter().map(|l| {
                        vec![
                            l.lock.clone(),
                            l.jobs.join(", "),
                            match (&l.held_by, &l.held_until) {
                                (Some(by), Some(until)) => format!("{by} until {until}"),
                                _ => "free".to_string(),
                            },
                        ]
                    }),
                );
            }
            println!();
            print_table(
                &[
                    "REPLICA",
                    "HOST",
                    "PID",
                    "VERSION",
                    "STATE",
                    "LAST SEEN",
                    "CLOCK",
                ],
                replicas.iter().map(|r| {
                    vec![
                        r.id.clone(),
                        r.host.clone(),
                        r.pid.to_string(),
                        r.version.clone(),
                        if r.alive { "alive" } else { "STALE" }.to_string(),
                        r.last_seen.clone(),
                        r.clock_offset_seconds
                            .map_or("?".to_string(), |s| format!("{:+.3}s ahead", s)),
                    ]
                }),
            );
        }
    }
    Ok(if stuck_count > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The jobs `status` shows: those of the job file in its order, then the
/// lease rows of jobs no longer in it (not replicron's own rows, nor those
/// of `exec` locks).
pub(crate) fn job_names(config: &crate::config::Config, locks: &[lease::LockRow]) -> Vec<String> {
    let mut names: Vec<String> = config.jobs.iter().map(|j| j.name.clone()).collect();
    for lock in locks {
        let own =
            lock.name.starts_with(crate::config::RESERVED_PREFIX) || lock.name.contains(".once.");
        if !own && !names.contains(&lock.name) {
            names.push(lock.name.clone());
        }
    }
    names
}

/// What an operator should look at for a job, the first that applies: a
/// stuck or orphaned lease, a definition that drifted between replicas, a
/// last run that ended badly.
pub(crate) fn problem(
    job: Option<&crate::config::Job>,
    lock: Option<&lease::LockRow>,
    last: Option<&history::RunBrief>,
    held: bool,
    now: DateTime<Utc>,
    instances: &[crate::registry::Instance],
    drift: Option<&crate::scheduler::drift::Drift>,
) -> Option<String> {
    stuck(job, lock, last, held, now, instances)
        .or_else(|| {
            drift.map(|drift| {
                format!(
                    "DRIFT: live replicas define it differently: {}",
                    drift.describe()
                )
            })
        })
        .or_else(|| failed(last))
}

/// Whether the job's last run ended badly: an operator should look.
fn failed(last: Option<&history::RunBrief>) -> Option<String> {
    let run = last?;
    let status = run.status;
    let bad = matches!(
        status,
        RunStatus::Failed
            | RunStatus::TimedOut
            | RunStatus::LostLock
            | RunStatus::Abandoned
            | RunStatus::Error
    );
    bad.then(|| {
        let how = match run.exit_code {
            Some(code) => format!("{status} (exit {code})"),
            None => status.to_string(),
        };
        format!(
            "FAILED: last run {} {how} at {} on {}; `replicron history --job {}` shows its output",
            run.id,
            history::rfc3339(run.started_at),
            run.instance,
            run.job
        )
    })
}

/// Why a job's lease looks stuck, if it does (see README, "status").
fn stuck(
    job: Option<&crate::config::Job>,
    lock: Option<&lease::LockRow>,
    last: Option<&history::RunBrief>,
    held: bool,
    now: DateTime<Utc>,
    instances: &[crate::registry::Instance],
) -> Option<String> {
    let holder = last.and_then(|run| instances.iter().find(|i| i.row.id == run.instance));
    let lock = lock?;
    let current = last.filter(|run| run.fence == lock.fence);
    let running = current.filter(|run| run.status == RunStatus::Running);
    match (held, running) {
        (true, Some(run)) => {
            let job = job?;
            let allowed = job.timeout + job.kill_grace + job.lock_at_most_for;
            let age = (now - run.started_at.and_utc())
                .to_std()
                .unwrap_or_default();
            (age > allowed).then(|| {
                format!(
                    "STUCK: running {} (timeout {}); its holder may be frozen",
                    humantime::format_duration(std::time::Duration::from_secs(age.as_secs())),
                    humantime::format_duration(job.timeout)
                )
            })
        }
        (true, None) => {
            let locked_at = lock.locked_at?.and_utc();
            let expected = job.map_or(std::time::Duration::ZERO, |j| {
                j.lock_at_least_for + j.retry_backoff * j.retries
            }) + std::time::Duration::from_secs(60);
            let age = (now - locked_at).to_std().unwrap_or_default();
            (age > expected).then(|| {
                "STUCK: lease held with no run recorded running; `replicron unlock` ends it"
                    .to_string()
            })
        }
        (false, Some(run)) => {
            let ended = (now - lock.lock_until.and_utc())
                .to_std()
                .unwrap_or_default();
            let ended = humantime::format_duration(std::time::Duration::from_secs(ended.as_secs()));
            Some(match holder {
                // The holder runs on: it finds its lease gone when it next
                // confirms it, and stops the run (recorded lost_lock).
                Some(alive) if alive.alive => format!(
                    "LEASE ENDED: run {} is recorded running, but its lease ended {ended} ago (unlocked, or lost); \
                     its holder is alive ({}) and stops the run when it next confirms the lease",
                    run.id, run.instance
                ),
                Some(gone) => format!(
                    "ORPHANED: run {} is recorded running, its lease ended {ended} ago, and its holder {} \
                     was last seen at {}: it vanished; the next claim marks the run abandoned",
                    run.id,
                    run.instance,
                    history::rfc3339(gone.row.last_seen)
                ),
                None => format!(
                    "ORPHANED: run {} is recorded running, its lease ended {ended} ago, and its holder {} \
                     is not a running replica; the next claim marks the run abandoned",
                    run.id, run.instance
                ),
            })
        }
        (false, None) => None,
    }
}
