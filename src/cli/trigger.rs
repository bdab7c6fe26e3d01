//! `replicron trigger JOB`: runs a job once now from this host, through its
//! lease, recorded like any run; prints how it ended and its output's tail.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    ConfigArg, ExitCode, command_runtime, describe, exit_code_of, find_job, load, open_for_command,
};
use crate::db::Store;
use crate::history::RunStatus;
use crate::lease::Claim;
use crate::runner::Guard;
use crate::schedule::SystemClock;
use crate::scheduler::engine::Engine;
use crate::scheduler::{Job, Phase, Plan, Recording, Work};
use crate::telemetry::Liveness;

/// `--config FILE JOB`.
#[derive(Debug, clap::Args)]
pub(crate) struct JobArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The job.
    pub(crate) job: String,
}

/// The last lines of a run's output, indented, for `trigger`.
fn output_tail(output: &str, lines: usize) -> String {
    let all: Vec<&str> = output.lines().collect();
    let shown = &all[all.len().saturating_sub(lines)..];
    let mut text = String::new();
    if all.len() > shown.len() {
        text.push_str(&format!(
            "  … ({} earlier lines in `replicron history`)\n",
            all.len() - shown.len()
        ));
    }
    for line in shown {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

pub(super) fn trigger(args: &JobArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let job = find_job(&config, &args.job)?.clone();
    let pool = open_for_command(&config)?;
    let runtime = command_runtime()?;
    let grace = config.daemon.shutdown_grace;
    let ran = runtime.block_on(async {
        let (phase_tx, phase) = watch::channel(Phase::Running);
        tokio::spawn(super::run::drive_shutdown(phase_tx, grace));
        let guard = Arc::new(Guard::start().map_err(crate::Error::Guard)?);
        let engine = Engine::start(
            Store::new(pool),
            crate::scheduler::default_instance_id(),
            Arc::new(SystemClock),
            phase,
            Arc::new(Liveness::new()),
            Some(guard),
        );
        let job = Job::from_config(&job);
        engine
            .store
            .ensure_rows(vec![job.name().to_string()])
            .await?;
        // The instant is the database's now: a run beside no other.
        let claimed = engine
            .store
            .claim_now(job.name(), &engine.instance, job.settings.lock_at_most_for)
            .await?;
        let ran = match (claimed, Work::of(&job)) {
            (Claim::Won(lease), Some(work)) => {
                let plan = Plan {
                    work,
                    lease,
                    recording: Recording::default(),
                    claimed: Instant::now(),
                    first_run: None,
                    ended: None,
                };
                Some(crate::scheduler::execute::execute(engine.clone(), plan).await)
            }
            _ => None,
        };
        let unwritten = engine.journal.flush(Duration::from_secs(10)).await;
        for write in &unwritten {
            tracing::error!("history write not recorded before exit: {write}");
        }
        Ok::<_, crate::Error>(ran)
    })?;
    match ran {
        Some(outcome) => {
            println!("{}: {}", args.job, describe(outcome.as_ref()));
            if let Some(outcome) = outcome.as_ref().filter(|o| o.status != RunStatus::Error) {
                print!("{}", output_tail(&outcome.output, 20));
            }
            Ok(exit_code_of(outcome.as_ref()))
        }
        None => {
            eprintln!(
                "replicron: {} is running elsewhere (its lease is held); not triggered",
                args.job
            );
            Ok(ExitCode::from(1))
        }
    }
}
