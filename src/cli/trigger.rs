//! `replicron trigger JOB`: runs a job once now from this host, through its
//! lease, recorded like any run; prints how it ended and its output's tail.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    ConfigArg, ExitCode, command_runtime, describe, exit_code_of, find_job, load, open_for_command,
};
use crate::history::RunStatus;
use crate::lease::Claim;
use crate::scheduler::{Job, Plan, Recording, Work};

/// `--config FILE JOB`.
#[derive(Debug, clap::Args)]
pub(crate) struct JobArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The job.
    pub(crate) job: String,
    /// Run it even though it is paused (`replicron pause`).
    #[arg(long)]
    pub(crate) force: bool,
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

/// "paused by … since … until …: reason", for messages.
pub(super) fn describe_pause(
    row: &crate::lease::LockRow,
    until: Option<chrono::DateTime<chrono::Utc>>,
) -> String {
    let mut text = format!(
        "paused by {} since {}",
        row.paused_by.as_deref().unwrap_or("?"),
        row.paused_at
            .map_or_else(|| "?".to_string(), crate::history::rfc3339)
    );
    match until {
        Some(until) => text.push_str(&format!(
            " until {}",
            crate::history::rfc3339(until.naive_utc())
        )),
        None => text.push_str(" until resumed"),
    }
    if let Some(reason) = row.paused_reason.as_deref().filter(|r| !r.is_empty()) {
        text.push_str(&format!(" ({reason})"));
    }
    text
}

pub(super) fn trigger(args: &JobArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    config.check_host()?;
    let job = find_job(&config, &args.job)?.clone();
    let pool = open_for_command(&config)?;
    let runtime = command_runtime()?;
    let grace = config.daemon.shutdown_grace;
    let ran = runtime.block_on(async {
        let engine = super::run::one_off_engine(pool, grace)?;
        let job = Job::from_config(&job);
        engine
            .store
            .ensure_rows(vec![job.name().to_string()])
            .await?;
        if !args.force
            && let Some(row) = engine.store.find_lock(job.name()).await?
        {
            let now = engine.store.database_now().await?.naive_utc();
            if let Some(until) = row.paused_at_time(now) {
                return Ok(Err(describe_pause(&row, until)));
            }
        }
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
        Ok::<_, crate::Error>(Ok(ran))
    })?;
    let ran = match ran {
        Ok(ran) => ran,
        Err(paused) => {
            eprintln!(
                "replicron: {} is {paused}; add --force to run it anyway",
                args.job
            );
            return Ok(ExitCode::from(1));
        }
    };
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
