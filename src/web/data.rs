//! What the dashboard and the API show, read through the [`Store`] (the
//! same statements as `status` and `history`) and shaped once for both.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Serialize;

use crate::config::{Command, Config, RunOn};
use crate::db::{DbError, Store};
use crate::history::{RunFilter, RunRecord, rfc3339};
use crate::ops::fleet;
use crate::registry::Instance;

/// A job: its definition and its state across the fleet.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct JobView {
    /// Its name.
    pub(crate) name: String,
    /// Whether the job file defines it (a lease row may outlive its job).
    pub(crate) in_config: bool,
    /// Whether it is scheduled (`enabled = false`: never).
    pub(crate) enabled: bool,
    /// Its definition, when the job file has it.
    pub(crate) definition: Option<Definition>,
    /// Its next instant (UTC, RFC 3339).
    pub(crate) next_instant: Option<String>,
    /// Whether its window has closed (`not_after` has passed): it has no
    /// next instant.
    pub(crate) ended: bool,
    /// When that instant's run starts (the instant plus its jitter), in
    /// the job's time zone, RFC 3339 with the zone's offset.
    pub(crate) next_start: Option<String>,
    /// Seconds from the database's now to the next start.
    pub(crate) next_start_in_seconds: Option<f64>,
    /// Its fleet-wide pause, if paused now.
    pub(crate) paused: Option<PauseView>,
    /// Its lease.
    pub(crate) lease: LeaseView,
    /// The instant waiting for its running run (`overlap = "queue"` or
    /// `"replace"`), if one does (UTC, RFC 3339).
    pub(crate) waiting_instant: Option<String>,
    /// For an `overlap = "allow"` job: how many of its runs are going.
    pub(crate) running_runs: Option<usize>,
    /// Its newest run, without output.
    pub(crate) last_run: Option<RunRecord>,
    /// Whether that run is long-running or started late.
    #[serde(flatten)]
    pub(crate) alerts: fleet::Alerts,
    /// Live replicas that define it differently ("r1 has 1a2b…; r2 has …").
    pub(crate) drift: Option<String>,
    /// What an operator should look at, as `status` says it.
    pub(crate) problem: Option<fleet::Problem>,
    /// Its newest runs, newest first, for the dashboard's chart.
    #[serde(skip)]
    pub(crate) recent: Vec<RunRecord>,
}

/// A job's definition, as the job file gives it (secrets in URLs hidden,
/// environment values never shown).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Definition {
    /// The cron expression or macro; several entries joined by ` | `,
    /// each with its own time zone and params in parentheses.
    pub(crate) schedule: String,
    /// Its time zone.
    pub(crate) timezone: String,
    /// What it runs: the shell line, or the program and its arguments.
    pub(crate) command: String,
    /// `one` (once across the fleet) or `every` (on each replica).
    pub(crate) run_on: &'static str,
    /// The shared locks it takes.
    pub(crate) locks: Vec<String>,
    /// The limits across jobs it takes a slot of, as `NAME (N at once)`.
    pub(crate) limits: Vec<String>,
    /// The names of the extra environment variables it sets.
    pub(crate) env: Vec<String>,
    /// Its `secret_env`: each variable's source (`file:/PATH`,
    /// `credential:NAME`), never its value.
    pub(crate) secret_env: BTreeMap<String, String>,
    /// The user it runs as, if not replicron's.
    pub(crate) user: Option<String>,
    /// Seconds after which a run is stopped.
    pub(crate) timeout_seconds: f64,
    /// The lease's length, in seconds.
    pub(crate) lock_at_most_for_seconds: f64,
    /// The longest delay of a run after its instant, in seconds.
    pub(crate) jitter_seconds: f64,
    /// A run still going this long after its attempt started is told of
    /// as `long_running`, in seconds (`None`: never).
    pub(crate) warn_after_seconds: Option<f64>,
    /// A run starting more than this after it was due is told of as
    /// `late_start`, in seconds (`None`: never).
    pub(crate) late_after_seconds: Option<f64>,
    /// Retries of a failed run.
    pub(crate) retries: u32,
    /// The parameters a triggered run may be given.
    pub(crate) params: Vec<ParamView>,
    /// What an instant that comes while its run is going does: `skip`,
    /// `queue`, `replace` or `allow N`.
    pub(crate) overlap: String,
    /// The jobs whose runs' ends start its runs (`after`); empty for a job
    /// on a schedule.
    pub(crate) after: Vec<String>,
    /// The endings of its parents' runs that start its runs.
    pub(crate) after_on: Vec<String>,
    /// The jobs that run after it.
    pub(crate) dependents: Vec<String>,
    /// Calendars whose dates it has no instant on.
    pub(crate) skip_on: Vec<String>,
    /// Calendars on whose dates alone it has instants (empty: every date).
    pub(crate) only_on: Vec<String>,
    /// No instant before this (RFC 3339, UTC).
    pub(crate) not_before: Option<String>,
    /// No instant after this (RFC 3339, UTC).
    pub(crate) not_after: Option<String>,
    /// What a fixed time in a spring-forward gap does: `shift` or `skip`.
    pub(crate) dst_gap: &'static str,
    /// What a fixed time a fall-back repeats does: `first`, `last` or
    /// `both`.
    pub(crate) dst_repeat: &'static str,
}

/// A declared parameter.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ParamView {
    /// Its name.
    pub(crate) name: String,
    /// Its default, unless it is secret (`None` too when it has none).
    pub(crate) default: Option<String>,
    /// Whether it has a default (`false`: a trigger must give it).
    pub(crate) has_default: bool,
    /// Whether it is one of `secret_params`, whose default is never shown.
    pub(crate) secret: bool,
}

/// A job's pause.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PauseView {
    /// Who paused it.
    pub(crate) by: Option<String>,
    /// Since when.
    pub(crate) since: Option<String>,
    /// Until when; `None`: until resumed.
    pub(crate) until: Option<String>,
    /// Why.
    pub(crate) reason: Option<String>,
}

/// A job's lease.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct LeaseView {
    /// Whether a replica holds it now.
    pub(crate) held: bool,
    /// The last replica to claim it.
    pub(crate) holder: Option<String>,
    /// When the lease ends (or ended).
    pub(crate) until: Option<String>,
    /// Its fencing token.
    pub(crate) fence: i64,
}

/// A replica, with the jobs it defines differently from most live
/// replicas.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct InstanceView {
    #[serde(flatten)]
    pub(crate) replica: fleet::ReplicaView,
    /// The jobs it defines differently from most live replicas.
    pub(crate) drifted_jobs: Vec<String>,
}

/// Everything the overview shows, read at one database time.
#[derive(Debug)]
pub(crate) struct Overview {
    /// The database's now.
    pub(crate) now: DateTime<Utc>,
    /// Every job.
    pub(crate) jobs: Vec<JobView>,
    /// Every registered replica.
    pub(crate) instances: Vec<InstanceView>,
    /// The backfills in progress across the fleet (only the job's, for
    /// one job).
    pub(crate) backfills: Vec<fleet::BackfillMark>,
}

/// What [`overview`] reads of each job's history.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Recent {
    /// The newest run only.
    Last,
    /// The newest this many (the dashboard's chart).
    Runs(i64),
}

/// How many runs the dashboard's chart shows per job.
pub(crate) const CHART_RUNS: i64 = 50;

fn command_text(command: &Command) -> String {
    let text = match command {
        Command::Shell { command, .. } => command.clone(),
        Command::Exec { args } => args
            .iter()
            .map(|a| {
                if a.contains([' ', '"', '\'']) {
                    format!("{a:?}")
                } else {
                    a.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
    };
    crate::db::redact(&text)
}

fn definition(config: &Config, job: &crate::config::Job) -> Definition {
    let rules = job.schedule.rules();
    let names = |calendars: &[std::sync::Arc<crate::schedule::calendar::Calendar>]| {
        calendars.iter().map(|c| c.name().to_string()).collect()
    };
    Definition {
        after: job.after.as_ref().map(|a| a.names()).unwrap_or_default(),
        after_on: job
            .after
            .as_ref()
            .map(|a| a.on.iter().map(|s| s.as_str().to_string()).collect())
            .unwrap_or_default(),
        dependents: config
            .jobs
            .iter()
            .filter(|other| {
                other
                    .after
                    .as_ref()
                    .is_some_and(|a| a.parents.iter().any(|p| p.name == *job.name))
            })
            .map(|other| other.name.to_string())
            .collect(),
        skip_on: names(&rules.skip_on),
        only_on: names(&rules.only_on),
        not_before: rules.not_before.map(crate::schedule::fmt_instant),
        not_after: rules.not_after.map(crate::schedule::fmt_instant),
        dst_gap: rules.dst_gap.word(),
        dst_repeat: rules.dst_repeat.word(),
        schedule: job.schedule.expression().to_string(),
        timezone: job.schedule.zone().name().to_string(),
        command: command_text(&job.command),
        run_on: match job.run_on {
            RunOn::One => "one",
            RunOn::Every => "every",
        },
        locks: job.locks.clone(),
        limits: job
            .limits
            .iter()
            .map(|l| format!("{} ({} at once)", l.name, l.max_running))
            .collect(),
        env: job.env.keys().cloned().collect(),
        secret_env: job
            .secret_env
            .iter()
            .map(|(name, source)| (name.clone(), source.to_string()))
            .collect(),
        user: job.run_as.as_ref().map(|r| r.user.clone()),
        timeout_seconds: job.timeout.as_secs_f64(),
        lock_at_most_for_seconds: job.lock_at_most_for.as_secs_f64(),
        jitter_seconds: job.schedule.jitter().num_milliseconds() as f64 / 1000.0,
        warn_after_seconds: job.warn_after.map(|d| d.as_secs_f64()),
        late_after_seconds: job.late_after.map(|d| d.as_secs_f64()),
        retries: job.retries,
        overlap: job.overlap.to_string(),
        params: job
            .params
            .iter()
            .map(|p| {
                let secret = job.secret_params.contains(&p.name);
                ParamView {
                    name: p.name.clone(),
                    default: p.default.clone().filter(|_| !secret),
                    has_default: p.default.is_some(),
                    secret,
                }
            })
            .collect(),
    }
}

fn instance_view(instance: &Instance, drifted: &BTreeMap<String, Vec<String>>) -> InstanceView {
    InstanceView {
        replica: fleet::ReplicaView::from(instance),
        drifted_jobs: drifted.get(&instance.row.id).cloned().unwrap_or_default(),
    }
}

/// Each replica, with the jobs whose definition it does not share with
/// the most live replicas.
fn drifted_by_replica(
    drift: &BTreeMap<String, crate::scheduler::drift::Drift>,
) -> BTreeMap<String, Vec<String>> {
    let mut drifted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (job, d) in drift {
        for (_, replicas) in d.groups.iter().skip(1) {
            for replica in replicas {
                drifted
                    .entry(replica.clone())
                    .or_default()
                    .push(job.clone());
            }
        }
    }
    drifted
}

/// Every registered replica.
pub(crate) async fn instances(store: &Store) -> Result<Vec<InstanceView>, DbError> {
    let (instances, drift) = fleet::replicas(store).await?;
    let drifted = drifted_by_replica(&drift);
    Ok(instances
        .iter()
        .map(|i| instance_view(i, &drifted))
        .collect())
}

/// Reads every job's state (the config's jobs, then lease rows of jobs no
/// longer in it), or only job `only`'s, the replicas, and each job's
/// `recent` runs.
pub(crate) async fn overview(
    store: &Store,
    config: &Config,
    recent: Recent,
    only: Option<&str>,
) -> Result<Overview, DbError> {
    let count = match recent {
        Recent::Last => 1,
        Recent::Runs(n) => n.max(1) as usize,
    };
    let fleet = fleet::read(store, config, count, only).await?;
    let drifted = drifted_by_replica(&fleet.drift);
    Ok(Overview {
        now: fleet.now,
        jobs: fleet
            .jobs
            .iter()
            .map(|state| job_view(config, state, &fleet.drift, fleet.now))
            .collect(),
        instances: fleet
            .instances
            .iter()
            .map(|i| instance_view(i, &drifted))
            .collect(),
        backfills: fleet
            .backfills
            .into_iter()
            .filter(|b| only.is_none_or(|only| b.job == only))
            .collect(),
    })
}

fn job_view(
    config: &Config,
    state: &fleet::JobState,
    drift: &BTreeMap<String, crate::scheduler::drift::Drift>,
    now: DateTime<Utc>,
) -> JobView {
    let job = config.job(&state.name);
    let next = state.next(job, now);
    let lock = state.lock.as_ref();
    JobView {
        name: state.name.clone(),
        in_config: job.is_some(),
        enabled: job.is_some_and(|j| j.enabled),
        definition: job.map(|job| definition(config, job)),
        ended: job.is_some_and(|j| j.schedule.has_ended(now)),
        next_instant: next.map(|(next, _)| crate::schedule::fmt_instant(next)),
        next_start: job.zip(next).map(|(j, (_, start))| {
            start
                .with_timezone(&j.schedule.zone())
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
        }),
        next_start_in_seconds: next
            .map(|(_, start)| (start - now).num_milliseconds() as f64 / 1000.0),
        paused: state.pause.as_ref().map(|pause| PauseView {
            by: pause.by.clone(),
            since: pause.since.map(rfc3339),
            until: pause.until.map(crate::schedule::fmt_instant),
            reason: pause.reason.clone(),
        }),
        running_runs: state.running.map(|(n, _)| n),
        waiting_instant: lock
            .and_then(|l| l.waiting())
            .map(|w| crate::schedule::fmt_instant(w.and_utc())),
        lease: lock.map_or_else(LeaseView::default, |l| LeaseView {
            held: state.held,
            holder: l.locked_by.clone(),
            until: (l.fence > 0).then(|| rfc3339(l.lock_until)),
            fence: l.fence,
        }),
        last_run: state.last().map(RunRecord::from),
        alerts: fleet::Alerts::of(job, state.last(), now),
        drift: drift.get(&state.name).map(|d| d.describe()),
        problem: state.problem.clone(),
        recent: state.recent.iter().map(RunRecord::from).collect(),
    }
}

/// A page of runs, newest first.
#[derive(Debug, Serialize)]
pub(crate) struct RunPage {
    /// The runs, without output.
    pub(crate) runs: Vec<RunRecord>,
    /// Pass as `cursor` for the next (older) page; `None` on the last.
    pub(crate) next_cursor: Option<String>,
}

/// The runs matching `filter` (whose `limit` is the page's size).
pub(crate) async fn runs(store: &Store, mut filter: RunFilter) -> Result<RunPage, DbError> {
    // One more than the page: whether another page follows.
    let limit = filter.limit.max(0) as usize;
    filter.limit += 1;
    let mut briefs = store.list_briefs(filter).await?;
    let more = briefs.len() > limit;
    briefs.truncate(limit);
    let next_cursor = more
        .then(|| briefs.last().map(|r| r.id.to_string()))
        .flatten();
    let mut runs: Vec<RunRecord> = briefs.iter().map(RunRecord::from).collect();
    store.with_parents(&mut runs).await;
    Ok(RunPage { runs, next_cursor })
}

/// A page of the audit log: `entries`, newest first, and the cursor of the
/// next page if there is one.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct AuditPage {
    /// The rows.
    pub(crate) entries: Vec<crate::db::audit::AuditRecord>,
    /// Pass as `cursor` for the next page.
    pub(crate) next_cursor: Option<String>,
}

/// The page of the audit log `filter` asks for.
pub(crate) async fn audit(
    store: &Store,
    mut filter: crate::db::audit::AuditFilter,
) -> Result<AuditPage, DbError> {
    // One more than the page: whether another page follows.
    let limit = filter.limit.max(0) as usize;
    filter.limit += 1;
    let mut rows = store.list_audit(filter).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = more
        .then(|| rows.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(AuditPage {
        entries: rows.into_iter().map(Into::into).collect(),
        next_cursor,
    })
}

/// A since time: RFC 3339, or a duration before `now` (`1h`, `30m`).
pub(crate) fn parse_since(text: &str, now: DateTime<Utc>) -> Result<NaiveDateTime, String> {
    let since = match DateTime::parse_from_rfc3339(text) {
        Ok(at) => at.with_timezone(&Utc),
        Err(_) => humantime::parse_duration(text)
            .ok()
            .and_then(|d| chrono::TimeDelta::from_std(d).ok())
            .and_then(|d| now.checked_sub_signed(d))
            .ok_or_else(|| {
                format!(
                    "since={text:?} is neither an RFC 3339 time (2026-12-01T06:00:00Z) nor a duration (1h, 30m)"
                )
            })?,
    };
    // Older than anything stored: every run is since then.
    if since.timestamp() < 0 {
        return Ok(DateTime::UNIX_EPOCH.naive_utc());
    }
    crate::db::clock::storable(since).map_err(|e| format!("since={text:?}: {e}"))?;
    Ok(since.naive_utc())
}
