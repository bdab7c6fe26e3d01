//! `replicron exec`: a distributed flock(1). The command runs while this
//! process holds the lease named NAME (kept alive like any run's), is
//! recorded in history under NAME, and its exit status is returned. With
//! `--once KEY` the command runs at most once per KEY across the fleet: the
//! first caller runs it, the others wait for that run and return its status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

use super::execute::{self, Outcome};
use super::{DaemonError, Phase, Shared, ensure_rows};
use crate::config::{Command, Defaults, Job};
use crate::db::{DbError, Pool};
use crate::history::{self, RunFilter, RunStatus};
use crate::lease::{self, Claim};
use crate::schedule::{Clock, Schedule};

/// What `exec` was asked.
pub struct ExecRequest {
    /// The lease (and history) name.
    pub name: String,
    /// The program and its arguments.
    pub args: Vec<String>,
    /// How long to wait for the lease; `None` waits as long as it takes.
    pub wait: Option<Duration>,
    /// Run at most once per this key across the fleet.
    pub once: Option<String>,
    /// Lease settings from `[defaults]`.
    pub defaults: Defaults,
    /// This caller's instance id.
    pub instance: String,
}

/// What `exec` came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Executed {
    /// The command ran here and ended so.
    Ran(Option<Outcome>),
    /// With `--once`: another caller ran it; its recorded ending.
    RanElsewhere(Option<Outcome>),
    /// The lease could not be had within `--wait`.
    NotAcquired,
}

/// Runs `request` under its lease.
pub async fn exec(
    pool: Pool,
    request: ExecRequest,
    clock: Arc<dyn Clock>,
    phase: watch::Receiver<Phase>,
) -> Result<Executed, DaemonError> {
    let job = Arc::new(Job {
        name: request.name.clone(),
        schedule: Schedule::parse("@yearly", chrono_tz::UTC)
            .map_err(|e| DbError::Task(e.to_string()))?,
        command: Command::Exec {
            args: request.args.clone(),
        },
        env: BTreeMap::new(),
        working_dir: None,
        enabled: true,
        lock_at_most_for: request.defaults.lock_at_most_for,
        lock_at_least_for: request.defaults.lock_at_least_for,
        // A lock holder runs as long as it needs; its lease is kept alive.
        timeout: Duration::from_secs(100 * 365 * 86_400),
        kill_grace: request.defaults.kill_grace,
        catch_up: Duration::ZERO,
        output_limit: 0,
        retries: 0,
        retry_backoff: Duration::from_secs(1),
    });
    let liveness = Arc::new(crate::telemetry::Liveness::new());
    let shared = Shared::start(
        pool.clone(),
        request.instance.clone(),
        clock,
        phase,
        liveness,
        true,
    )
    .await?;
    let outcome = match &request.once {
        Some(key) => once(&shared, &job, key).await?,
        None => locked(&shared, &job, request.wait).await?,
    };
    let unwritten = shared.journal.flush(super::JOURNAL_FLUSH_TIMEOUT).await;
    for write in &unwritten {
        tracing::error!("history write not recorded before exit: {write}");
    }
    Ok(outcome)
}

/// Waits for the lease (polling with backoff), then runs.
async fn locked(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    wait: Option<Duration>,
) -> Result<Executed, DaemonError> {
    ensure_rows(&shared.pool, std::slice::from_ref(job)).await?;
    let give_up = wait.map(|w| Instant::now() + w);
    let mut pause = Duration::from_millis(5);
    loop {
        let (name, me, lease_for) = (
            job.name.clone(),
            shared.instance.clone(),
            job.lock_at_most_for,
        );
        let claimed = shared
            .pool
            .run_blocking(move |conn| {
                lease::claim_at_database_now(conn, &name, &me, lease_for)
                    .map_err(|e| DbError::query("claiming the lock", e))
            })
            .await?;
        match claimed {
            Claim::Won(held) => {
                info!(lock = %job.name, fence = held.fence, "lock acquired");
                return Ok(Executed::Ran(
                    execute::execute(
                        shared.clone(),
                        job.clone(),
                        held,
                        Instant::now(),
                        None,
                        None,
                        execute::Recording::default(),
                    )
                    .await,
                ));
            }
            Claim::Taken | Claim::Held(_) | Claim::NotYet { .. } | Claim::Contended => {}
        }
        if give_up.is_some_and(|at| Instant::now() + pause > at) {
            return Ok(Executed::NotAcquired);
        }
        // Jittered, so that waiters do not knock in step.
        tokio::time::sleep(pause.mul_f64(0.5 + rand::random::<f64>())).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// The instant that names KEY: fixed per key, so that its lease row's
/// `last_scheduled_at` remembers forever that it ran.
fn key_instant(key: &str) -> DateTime<Utc> {
    // FNV-1a: stable across builds and platforms.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let base = DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z")
        .map_or(DateTime::<Utc>::UNIX_EPOCH, |t| t.with_timezone(&Utc));
    base + TimeDelta::milliseconds((hash % 100_000_000_000) as i64)
}

/// `--once KEY`: the first caller runs it; the others wait for that run.
async fn once(shared: &Arc<Shared>, job: &Arc<Job>, key: &str) -> Result<Executed, DaemonError> {
    let instant = key_instant(key);
    let lease_name = format!("{}.once.{:x}", job.name, instant.timestamp_millis());
    let (name, me, lease_for) = (
        lease_name.clone(),
        shared.instance.clone(),
        job.lock_at_most_for,
    );
    // Until someone has claimed the key (Won here, Taken elsewhere), keep
    // trying: a deadlock or a lease held by nobody's claim of this key
    // decides nothing.
    let mut pause = Duration::from_millis(5);
    let claimed = loop {
        let (name, me) = (name.clone(), me.clone());
        let claimed = shared
            .pool
            .run_blocking(move |conn| {
                lease::claim(conn, &name, &me, instant, lease_for)
                    .map_err(|e| DbError::query("claiming the once-lock", e))
            })
            .await?;
        if matches!(claimed, Claim::Won(_) | Claim::Taken) {
            break claimed;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    };
    if let Claim::Won(held) = claimed {
        info!(lock = %job.name, key, "first caller for this key: running");
        // The lease row is the key's own, its instant only names the key:
        // the run is recorded under NAME at the time it starts, with KEY.
        let started = shared
            .pool
            .run_blocking(|conn| {
                lease::database_now(conn)
                    .map_err(|e| DbError::query("reading the database clock", e))
            })
            .await?;
        let recording = execute::Recording {
            instant: Some(started),
            once_key: Some(key.to_string()),
        };
        return Ok(Executed::Ran(
            execute::execute(
                shared.clone(),
                job.clone(),
                held,
                Instant::now(),
                None,
                None,
                recording,
            )
            .await,
        ));
    }
    // Another caller has it: wait for its run to end.
    let mut pause = Duration::from_millis(50);
    loop {
        let (name, lease_name, key) = (job.name.clone(), lease_name.clone(), key.to_string());
        let (mine, held) = shared
            .pool
            .run_blocking(move |conn| {
                let rows = history::list_runs(
                    conn,
                    &RunFilter {
                        job: Some(name),
                        status: None,
                        once_key: Some(key),
                        limit: 1000,
                    },
                )
                .map_err(|e| DbError::query("reading the history", e))?;
                let held = lease::is_held(conn, &lease_name)
                    .map_err(|e| DbError::query("reading the lock", e))?;
                Ok((rows, held))
            })
            .await?;
        if let Some(last) = mine.iter().max_by_key(|r| r.attempt)
            && last.status != RunStatus::Running.as_str()
        {
            let status = last.status.parse().unwrap_or(RunStatus::Error);
            return Ok(Executed::RanElsewhere(Some(Outcome {
                status,
                exit_code: last.exit_code,
                output: last.output.clone(),
            })));
        }
        if !held && mine.iter().all(|r| r.status == RunStatus::Running.as_str()) {
            // The key was claimed, its lease is gone and nothing ended: the
            // first caller vanished (before or after recording its start).
            // At most once means not again.
            return Ok(Executed::RanElsewhere(None));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}
