//! `replicron trigger JOB`: runs a job once now from this host, through its
//! lease, recorded like any run; prints how it ended and its output's tail.

use super::{
    ConfigArg, ExitCode, UsageError, command_runtime, describe, exit_code_of, load,
    open_for_command,
};
use crate::db::audit::{Actor, Outcome};
use crate::history::RunStatus;
use crate::scheduler::Job;
use crate::scheduler::trigger::{Refusal, Started};

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
    /// A parameter the job declares (`params`), passed to the run as an
    /// environment variable; repeat for each.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub(crate) params: Vec<String>,
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
    crate::runner::users::check_host(&config)?;
    let job = super::runnable(&config, &args.job)?.clone();
    // Checked before anything touches the database: a refused parameter
    // runs nothing and records nothing.
    let params = args
        .params
        .iter()
        .map(|arg| crate::config::params::split(arg))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|given| crate::config::params::resolve(&job.name, &job.params, &given))
        .map_err(|e| UsageError(e.to_string()))?;
    let pool = open_for_command(&config)?;
    let runtime = command_runtime()?;
    let grace = config.daemon.shutdown_grace;
    let entry = crate::ops::actions::trigger_entry(&job, args.force, &params);
    let ran = runtime.block_on(async {
        let engine = super::one_off_engine_for(pool, grace, &job)?;
        let started = crate::scheduler::trigger::start(
            engine.clone(),
            &Job::from_config(&job),
            args.force,
            params,
        )
        .await;
        let outcome = match &started {
            Ok(Started::Running { fence, .. }) => {
                Outcome::Done(format!("started here under lease fence {fence}"))
            }
            Ok(Started::Refused(Refusal::Paused(pause))) => Outcome::Refused(format!(
                "{} is {pause}; add --force to run it anyway",
                job.name
            )),
            Ok(Started::Refused(Refusal::Held)) => Outcome::Refused(format!(
                "{} is running elsewhere (its lease is held)",
                job.name
            )),
            Ok(Started::Refused(Refusal::NotRunnable)) => {
                Outcome::Refused(format!("{} has nothing to run here", job.name))
            }
            Err(e) => Outcome::Refused(e.to_string()),
        };
        engine.store.audit(&Actor::cli(), entry, outcome).await;
        let ran = match started? {
            Started::Running { handle, .. } => handle.await.ok(),
            Started::Refused(Refusal::Paused(pause)) => return Ok(Err(pause)),
            Started::Refused(Refusal::Held | Refusal::NotRunnable) => None,
        };
        super::flush_before_exit(&engine, &job.name).await;
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
