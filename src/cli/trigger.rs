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
    /// Run it once at TIME (RFC 3339 with an offset, to come) instead of
    /// now: stored in the database, so that whichever replica runs then
    /// claims it at TIME, once across the fleet; the command returns at once.
    #[arg(long, value_name = "TIME", value_parser = super::parse_rfc3339, conflicts_with = "force")]
    pub(crate) at: Option<chrono::DateTime<chrono::Utc>>,
    /// A parameter the job declares (`params`), passed to the run as an
    /// environment variable; repeat for each.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub(crate) params: Vec<String>,
    /// Parameters, one `NAME=VALUE` a line (`#` comments and blank lines
    /// left out), read from FILE, or from stdin for `-`: a secret given so
    /// is not in the command line that `ps` shows.
    #[arg(long = "param-file", value_name = "FILE")]
    pub(crate) param_file: Option<std::path::PathBuf>,
    /// Why: recorded in the audit log and the run's history, and given to
    /// the run as REPLICRON_REASON (at most 500 characters, one line).
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
}

/// The `NAME=VALUE` lines of `--param-file`.
fn param_lines(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    use std::io::Read;
    let mut text = String::new();
    let read = if path == std::path::Path::new("-") {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|mut file| file.read_to_string(&mut text))
    };
    read.map_err(|e| UsageError(format!("--param-file {}: {e}", path.display())))?;
    Ok(text
        .lines()
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect())
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
    // Checked before the run is started: a refused parameter runs
    // nothing, and is recorded as refused (its values as the audit log
    // writes any: only a declared, non-secret one's in clear).
    let mut args_given = args.params.clone();
    if let Some(path) = &args.param_file {
        args_given.extend(param_lines(path)?);
    }
    let given = args_given
        .iter()
        .map(|arg| crate::config::params::split(arg))
        .collect::<Result<Vec<_>, _>>();
    let params = given
        .clone()
        .and_then(|given| crate::config::params::resolve(&job.name, &job.params, &given))
        .map_err(|e| e.to_string())
        .and_then(|params| {
            crate::ops::actions::check_reason(args.reason.as_deref())
                .map(|reason| (params, reason))
                .map_err(|e| e.to_string())
        });
    let (params, reason) = match params {
        Ok(checked) => checked,
        Err(why) => {
            let pairs = given.unwrap_or_default();
            // A reason refused is not written (nor is one given with
            // refused parameters: the trigger did not happen).
            let entry = crate::ops::actions::trigger_entry(
                &job,
                args.force,
                pairs.iter().map(|(name, value)| (name, value)),
            );
            // The refusal stands whether or not its row can be written.
            if let Ok(pool) = open_for_command(&config) {
                let store = crate::db::Store::new(pool);
                command_runtime()?.block_on(store.audit(
                    &Actor::cli(),
                    entry,
                    Outcome::Refused(why.clone()),
                ));
            }
            return Err(UsageError(why).into());
        }
    };
    let pool = open_for_command(&config)?;
    let runtime = command_runtime()?;
    if let Some(at) = args.at {
        let store = crate::db::Store::new(pool);
        let planned = runtime.block_on(crate::ops::actions::trigger_at(
            &store,
            &Actor::cli(),
            &job,
            at,
            &params,
        ));
        return match planned {
            Ok(id) => {
                println!(
                    "{}: planned once at {} (one-time run {id}): the replica that runs then claims it, once across the fleet",
                    args.job,
                    crate::schedule::fmt_instant(at)
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(crate::ops::actions::Refused::Invalid(why)) => Err(UsageError(why).into()),
            Err(e) => Err(e.into()),
        };
    }
    let grace = config.daemon.shutdown_grace;
    let entry =
        crate::ops::actions::trigger_entry(&job, args.force, &params).arg("reason", reason.clone());
    let ran = runtime.block_on(async {
        let engine = super::one_off_engine_for(pool, grace, &job)?;
        // Started only once its row is in the audit log.
        let row = engine
            .store
            .audit_ahead(&Actor::cli(), &entry)
            .await
            .map_err(|e| {
                crate::Error::Database(Box::new(crate::ops::actions::Refused::Unaudited(e)))
            })?;
        let started = crate::scheduler::trigger::start(
            engine.clone(),
            &Job::from_config(&job),
            args.force,
            params,
            reason.map(std::sync::Arc::from),
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
        engine.store.audit_settle(row, outcome).await;
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
