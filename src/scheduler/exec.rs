//! `exec`'s lease protocol: a command that runs while this process holds
//! a named lease (a distributed flock(1)), or at most once per key across
//! the fleet. `replicron exec` parses its arguments and prints what this
//! returns.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;
use tracing::info;

use super::engine::Engine;
use super::run_lease::Hold;
use super::{JobSettings, Outcome, Plan, Recording, Work};
use crate::backoff::Backoff;
use crate::config::{Command, Defaults};
use crate::db::DbError;
use crate::history::{RunFilter, RunStatus, Trigger};
use crate::lease::{self, Claim};
use crate::runner::Process;

/// What `exec` came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Executed {
    /// The command ran here and ended so.
    Ran(Option<Outcome>),
    /// With `--once`: another caller ran it; its recorded ending.
    RanElsewhere(Option<Outcome>),
    /// The lease could not be had within `--wait`.
    NotAcquired,
}

/// The command, run with this process's stdio under `[defaults]`' lease
/// settings; a lock holder runs as long as it needs (its lease is kept
/// alive), so it has no timeout to speak of.
pub(crate) fn work(name: &str, command: &[String], defaults: &Defaults) -> Work {
    Work {
        name: name.to_string(),
        settings: JobSettings {
            lock_at_most_for: defaults.lock_at_most_for,
            lock_at_least_for: defaults.lock_at_least_for,
            timeout: Duration::from_secs(100 * 365 * 86_400),
            kill_grace: defaults.kill_grace,
            catch_up: Duration::ZERO,
            retries: 0,
            retry_backoff: Duration::from_secs(1),
            exit_codes: Default::default(),
            missed_after: None,
            warn_after: None,
            late_after: None,
            notify: None,
            gates: Vec::new(),
            overlap: crate::config::Overlap::Skip,
            secret_params: Vec::new(),
            priority: 0,
            on_abandon: crate::config::OnAbandon::Record,
        },
        action: Arc::new(Process {
            command: Command::Exec {
                args: command.to_vec(),
            },
            env: Default::default(),
            working_dir: None,
            output_limit: 0,
            output_files: None,
            inherit_stdio: true,
            hidden_env: Vec::new(),
            run_as: None,
            secret_sources: Vec::new(),
            secret_params: Vec::new(),
            secret_env: Vec::new(),
            resources: Default::default(),
        }),
    }
}

/// Waits for the lease (claiming at the database's time, with backoff),
/// then runs.
pub(crate) async fn locked(
    engine: &Arc<Engine>,
    work: Work,
    wait: Option<Duration>,
) -> Result<Executed, DbError> {
    engine.store.ensure_rows(vec![work.name.clone()]).await?;
    let give_up = wait.map(|w| Instant::now() + w);
    let mut backoff =
        Backoff::new(Duration::from_millis(5), Duration::from_millis(200)).jitter(0.5);
    loop {
        // The lease counts from when its claim was sent.
        let sent = Instant::now();
        let claimed = engine
            .store
            .claim_now(&work.name, &engine.instance, work.settings.lock_at_most_for)
            .await?;
        if let Claim::Won(held) = claimed {
            info!(lock = %work.name, fence = held.fence, "lock acquired");
            let plan = Plan {
                work,
                hold: Hold::Fleet(held),
                recording: Recording {
                    trigger: Trigger::Manual,
                    ..Recording::default()
                },
                claimed: sent,
                first_run: None,
                going: None,
            };
            return Ok(Executed::Ran(
                super::execute::execute(engine.clone(), plan).await,
            ));
        }
        let pause = backoff.next_pause();
        if give_up.is_some_and(|at| Instant::now() + pause > at) {
            return Ok(Executed::NotAcquired);
        }
        tokio::time::sleep(pause).await;
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

/// `--once KEY`: the first caller runs it; the others wait for its run.
pub(crate) async fn once(engine: &Arc<Engine>, work: Work, key: &str) -> Result<Executed, DbError> {
    let instant = key_instant(key);
    let lease_name = lease::once_row(&work.name, instant);
    let lease_for = work.settings.lock_at_most_for;
    // Until someone has claimed the key (Won here, Taken elsewhere), keep
    // trying: a deadlock, or a row just created, decides nothing.
    let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(200));
    let (claimed, sent) = loop {
        // The lease counts from when its claim was sent.
        let sent = Instant::now();
        let claimed = engine
            .store
            .claim(&lease_name, &engine.instance, instant, lease_for)
            .await?;
        if matches!(claimed, Claim::Won(_) | Claim::Taken) {
            break (claimed, sent);
        }
        backoff.wait().await;
    };
    if let Claim::Won(held) = claimed {
        info!(lock = %work.name, key, "first caller for this key: running");
        // The lease row is the key's own, its instant only names the key:
        // the run is recorded under NAME at the time it starts, with KEY.
        let started = engine.store.database_now().await?;
        let plan = Plan {
            work,
            hold: Hold::Fleet(held),
            recording: Recording {
                instant: Some(started),
                once_key: Some(key.to_string()),
                trigger: Trigger::Manual,
                ..Recording::default()
            },
            claimed: sent,
            first_run: None,
            going: None,
        };
        return Ok(Executed::Ran(
            super::execute::execute(engine.clone(), plan).await,
        ));
    }
    // Another caller has it: wait for its run to end.
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        let mine = engine
            .store
            .list_runs(RunFilter {
                job: Some(work.name.clone()),
                status: None,
                once_key: Some(key.to_string()),
                limit: 1000,
                ..Default::default()
            })
            .await?;
        let held = engine.store.is_held(&lease_name).await?;
        if let Some(last) = mine.iter().max_by_key(|r| r.attempt)
            && last.status != RunStatus::Running
        {
            return Ok(Executed::RanElsewhere(Some(Outcome {
                status: last.status,
                exit_code: last.exit_code,
                output: last.output.clone(),
            })));
        }
        if !held && mine.iter().all(|r| r.status == RunStatus::Running) {
            // The key was claimed, its lease is gone and nothing ended: the
            // first caller vanished (before or after recording its start).
            // At most once means not again.
            return Ok(Executed::RanElsewhere(None));
        }
        backoff.wait().await;
    }
}
