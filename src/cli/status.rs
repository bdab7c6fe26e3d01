//! `replicron status`: each job's next instant, lease and last run, and
//! what looks wrong (a failed last run, a stuck lease, a run whose lease
//! ended), with this host's clock against the database's, and the
//! database's settings under which it can lose a claim it acknowledged.

use chrono::SecondsFormat;

use super::table::print_table;
use super::{ConfigArg, ExitCode, OutputFormat, open_for_command};
use crate::history::{RunRecord, rfc3339};
use crate::ops::fleet;

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

/// A limit across jobs, in `status`.
#[derive(Debug, serde::Serialize)]
struct LimitStatus {
    limit: String,
    max_running: u32,
    /// The jobs that take it.
    jobs: Vec<String>,
    /// How many of its slots are held now.
    running: usize,
    /// Who holds them.
    held_by: Vec<String>,
}

impl LimitStatus {
    fn of(limit: &fleet::LimitState) -> LimitStatus {
        LimitStatus {
            limit: limit.limit.clone(),
            max_running: limit.max_running,
            jobs: limit.jobs.clone(),
            running: limit.held.len(),
            held_by: limit
                .held
                .iter()
                .map(|(by, _)| by.clone().unwrap_or_else(|| "?".to_string()))
                .collect(),
        }
    }
}

/// One row of `status`.
#[derive(Debug, serde::Serialize)]
struct JobStatus {
    job: String,
    enabled: Option<bool>,
    next: Option<String>,
    /// Whether it runs only when asked (`@manual`): no next instant.
    manual: bool,
    /// Why it is held (a calendar it names cannot be read here), if it is:
    /// no next instant, and no run.
    held: Option<String>,
    /// Whether its window has closed (`not_after` has passed), or its one
    /// instant (`at`) has come: no next instant.
    ended: bool,
    /// The one instant of a job written `at`, whether to come or past.
    once: Option<String>,
    /// The jobs whose runs' ends start its runs (`after`).
    after: Vec<String>,
    /// What an instant that comes while its run is going does.
    overlap: Option<String>,
    /// The instant waiting for its running run (`overlap = "queue"` or
    /// `"replace"`), if one does.
    waiting: Option<String>,
    /// For an `overlap = "allow"` job: how many of its runs are going.
    running: Option<usize>,
    lease_held: bool,
    locked_by: Option<String>,
    lock_until: Option<String>,
    fence: i64,
    paused: Option<PauseStatus>,
    last_run: Option<RunRecord>,
    /// Whether its last run is long-running or started late.
    #[serde(flatten)]
    alerts: fleet::Alerts,
    problem: Option<fleet::Problem>,
}

/// The start throttle and the fleet's backfill bound.
#[derive(Debug, serde::Serialize)]
struct Throttle {
    /// The most catch-up, backfill and retry runs a replica starts per
    /// second.
    max_starts_per_second: u32,
    /// The most instants the backfills in progress have left, together.
    max_backfill_instants: u64,
    /// The instants the backfills in progress have left now.
    backfill_instants_left: i64,
}

/// A one-time run planned with `trigger --at`, not yet claimed.
#[derive(Debug, serde::Serialize)]
struct PlannedRun {
    id: i64,
    job: String,
    at: String,
    requested_by: String,
    requested_at: String,
}

/// All `status` says, as its JSON gives it.
#[derive(Debug, serde::Serialize)]
struct Report {
    clock: ClockStatus,
    jobs: Vec<JobStatus>,
    locks: Vec<LockStatus>,
    limits: Vec<LimitStatus>,
    backfills: Vec<fleet::BackfillMark>,
    /// The one-time runs planned (`trigger --at`), oldest instant first.
    planned: Vec<PlannedRun>,
    /// `[daemon]`'s bounds on backfills and catch-up, as this file sets
    /// them.
    throttle: Throttle,
    replicas: Vec<fleet::ReplicaView>,
    /// The server's settings under which a commit it acknowledged, a claim
    /// among them, can be lost.
    durability: Vec<crate::db::durability::Risk>,
}

pub(super) fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let config = super::load_for_database(&args.config)?;
    let store = crate::db::Store::new(open_for_command(&config)?);
    let (fleet, offset, lasts, durability, planned) =
        super::command_runtime()?.block_on(async {
            let fleet = fleet::read(&store, &config, 1, None).await?;
            let offset = fleet::clock_offset(&store, 5).await?;
            let lasts = fleet::with_output(&store, &fleet).await?;
            let durability = store
                .call(
                    "reading the server's durability settings",
                    crate::db::durability::risks,
                )
                .await?;
            let planned = crate::scheduler::planned::list(&store).await?;
            anyhow::Ok((fleet, offset, lasts, durability, planned))
        })?;
    let report = Report {
        clock: ClockStatus {
            host_ahead_seconds: -(offset.offset.num_microseconds().unwrap_or(0) as f64) / 1e6,
            error_seconds: offset.error.as_secs_f64(),
            database_now: fleet.now.to_rfc3339_opts(SecondsFormat::Millis, true),
        },
        jobs: job_rows(&config, &fleet, lasts),
        locks: fleet.locks.iter().map(LockStatus::of).collect(),
        limits: fleet.limits.iter().map(LimitStatus::of).collect(),
        backfills: fleet.backfills.clone(),
        planned: planned
            .into_iter()
            .map(|row| PlannedRun {
                id: row.id,
                job: row.job,
                at: rfc3339(row.run_at),
                requested_by: row.requested_by,
                requested_at: rfc3339(row.requested_at),
            })
            .collect(),
        throttle: Throttle {
            max_starts_per_second: config.daemon.max_starts_per_second,
            max_backfill_instants: config.daemon.max_backfill_instants,
            backfill_instants_left: fleet
                .backfills
                .iter()
                .filter_map(|b| b.progress.as_ref())
                .map(|p| (p.total - p.done).max(0))
                .sum(),
        },
        replicas: fleet
            .instances
            .iter()
            .map(fleet::ReplicaView::from)
            .collect(),
        durability,
    };
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        OutputFormat::Table => {
            println!(
                "database time {}; this host's clock is {} from it\n",
                report.clock.database_now,
                crate::scheduler::clock_sync::describe(offset)
            );
            println!(
                "catch-up, backfill and retry runs start at most {} a second per replica; backfills in progress have {} of at most {} instants left\n",
                report.throttle.max_starts_per_second,
                report.throttle.backfill_instants_left,
                report.throttle.max_backfill_instants
            );
            for run in &report.planned {
                println!(
                    "one-time run {} of {} planned at {} by {}",
                    run.id, run.job, run.at, run.requested_by
                );
            }
            if !report.planned.is_empty() {
                println!();
            }
            if !report.durability.is_empty() {
                println!(
                    "WARNING: the database may lose a commit it acknowledged, a claim among them:"
                );
                for risk in &report.durability {
                    println!("  {risk}");
                }
                println!();
            }
            print_tables(&report);
        }
    }
    Ok(if report.jobs.iter().any(|r| r.problem.is_some()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Each job's row, with its last run (`lasts`, in the fleet's order).
fn job_rows(
    config: &crate::config::Config,
    fleet: &fleet::Fleet,
    lasts: Vec<Option<crate::history::RunRow>>,
) -> Vec<JobStatus> {
    let now = fleet.now;
    fleet
        .jobs
        .iter()
        .zip(lasts)
        .map(|(state, last)| {
            let job = config.job(&state.name);
            let lock = state.lock.as_ref();
            JobStatus {
                job: state.name.clone(),
                enabled: job.map(|j| j.enabled),
                // As the dashboard says it: none while paused until resumed,
                // the first after a pause's end.
                next: state
                    .next(job, now)
                    .map(|(t, _)| t.to_rfc3339_opts(SecondsFormat::Secs, true)),
                manual: job.is_some_and(|j| j.schedule.is_manual()),
                held: job.filter(|j| j.enabled).and_then(crate::config::Job::held),
                ended: job.is_some_and(|j| j.schedule.has_ended(now)),
                once: job
                    .and_then(|j| j.schedule.once_at())
                    .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true)),
                after: job
                    .and_then(|j| j.after.as_ref())
                    .map(|a| a.names())
                    .unwrap_or_default(),
                overlap: job.map(|j| j.overlap.to_string()),
                waiting: lock.and_then(|l| l.waiting()).map(rfc3339),
                running: state.running.map(|(n, _)| n),
                lease_held: state.held,
                locked_by: lock.and_then(|l| l.locked_by.clone()),
                lock_until: lock.map(|l| rfc3339(l.lock_until)),
                fence: lock.map_or(0, |l| l.fence),
                paused: state.pause.as_ref().map(|pause| PauseStatus {
                    by: pause.by.clone(),
                    since: pause.since.map(rfc3339),
                    until: pause.until.map(|u| rfc3339(u.naive_utc())),
                    reason: pause.reason.clone(),
                    text: pause.to_string(),
                }),
                alerts: fleet::Alerts::of(job, state.last(), now),
                last_run: last.map(RunRecord::from),
                problem: state.problem.clone(),
            }
        })
        .collect()
}

impl LockStatus {
    fn of(lock: &fleet::LockState) -> LockStatus {
        LockStatus {
            lock: lock.lock.clone(),
            jobs: lock.jobs.clone(),
            held_by: lock.held.as_ref().and_then(|(by, _)| by.clone()),
            held_until: lock.held.as_ref().map(|(_, until)| rfc3339(*until)),
        }
    }
}

/// The jobs' table, the shared locks' (if any) and the replicas'.
fn print_tables(report: &Report) {
    print_table(
        &["JOB", "NEXT", "LEASE", "LAST RUN", "PROBLEM"],
        report.jobs.iter().map(|r| {
            let lease = if r.lease_held {
                format!(
                    "held by {} until {}",
                    r.locked_by.as_deref().unwrap_or("?"),
                    r.lock_until.as_deref().unwrap_or("?")
                )
            } else {
                "free".to_string()
            };
            let lease = match (r.running, &r.overlap) {
                (Some(running), Some(overlap)) => format!("{running} running ({overlap})"),
                _ => lease,
            };
            let lease = match &r.waiting {
                Some(waiting) => format!("{lease}; {waiting} waits for it"),
                None => lease,
            };
            let last = r.last_run.as_ref().map_or("never".to_string(), |run| {
                format!("{} at {} on {}", run.status, run.started_at, run.instance)
            });
            let last = match r.alerts.describe() {
                Some(alerts) => format!("{last} ({})", alerts.to_uppercase()),
                None => last,
            };
            let next = match (r.enabled, &r.next) {
                (_, _) if r.paused.is_some() => {
                    format!("PAUSED: {}", r.paused.as_ref().map_or("", |p| &p.text))
                }
                (None, _) => "not in config".to_string(),
                (Some(false), _) => "disabled".to_string(),
                (Some(true), _) if r.held.is_some() => "HELD".to_string(),
                (Some(true), None) if r.manual => "manual (trigger)".to_string(),
                (Some(true), None) if r.ended => match &r.once {
                    Some(once) => format!("ended (once, at {once})"),
                    None => "ended (its not_after has passed)".to_string(),
                },
                (Some(true), Some(next)) if r.once.is_some() => format!("{next} (once)"),
                (Some(true), None) if !r.after.is_empty() => {
                    format!("after {}", r.after.join(", "))
                }
                (Some(true), next) => next.clone().unwrap_or_else(|| "-".to_string()),
            };
            vec![
                r.job.clone(),
                next,
                lease,
                last,
                r.problem
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            ]
        }),
    );
    if !report.locks.is_empty() {
        println!();
        print_table(
            &["LOCK", "JOBS", "HELD BY"],
            report.locks.iter().map(|l| {
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
    if !report.backfills.is_empty() {
        println!();
        print_table(
            &["BACKFILL", "OF", "RUN BY", "SINCE", "DONE", "FAILED", "AT"],
            report.backfills.iter().map(|b| {
                let p = b.progress.as_ref();
                vec![
                    p.map(|p| p.id.to_string()).unwrap_or_default(),
                    b.job.clone(),
                    b.by.clone().unwrap_or_default(),
                    b.since.clone().unwrap_or_default(),
                    p.map(|p| format!("{}/{}", p.done, p.total))
                        .unwrap_or_default(),
                    p.map(|p| p.failed.to_string()).unwrap_or_default(),
                    p.and_then(|p| p.current.clone()).unwrap_or_default(),
                ]
            }),
        );
    }
    if !report.limits.is_empty() {
        println!();
        print_table(
            &["LIMIT", "JOBS", "RUNNING", "HELD BY"],
            report.limits.iter().map(|l| {
                vec![
                    l.limit.clone(),
                    l.jobs.join(", "),
                    format!("{} of {}", l.running, l.max_running),
                    l.held_by.join(", "),
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
            "LIMITS",
        ],
        report.replicas.iter().map(|r| {
            vec![
                r.id.clone(),
                r.host.clone(),
                r.pid.to_string(),
                r.version.clone(),
                if r.alive { "alive" } else { "STALE" }.to_string(),
                r.last_seen.clone(),
                r.clock_offset_seconds
                    .map_or("?".to_string(), |s| format!("{:+.3}s ahead", s)),
                match r.resource_limits.as_deref() {
                    Some("rlimits") => "rlimits (no cpu_max)".to_string(),
                    Some(via) => via.to_string(),
                    None => "-".to_string(),
                },
            ]
        }),
    );
}
