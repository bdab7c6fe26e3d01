//! `replicron exec --lock NAME -- CMD…`: a distributed flock(1). CMD runs
//! while this process holds the lease NAME (claimed at the database's
//! time, kept alive like any run's), with this process's stdio, recorded in
//! history under NAME, and its exit status is returned. With `--once KEY`
//! the command runs at most once per KEY across the fleet: the first caller
//! runs it, the others wait for that run and return its recorded status.

use std::time::Duration;

use super::{
    ConfigArg, ExitCode, UsageError, command_runtime, describe, exit_code_of, load,
    open_for_command, parse_wait,
};
use crate::db::audit::{Action, Actor, Entry, Outcome};
use crate::history::RunStatus;
use crate::scheduler::exec::{self, Executed};

/// Arguments of `exec`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExecArgs {
    /// The job file (for the database and `[defaults]`).
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The lease to hold; runs are recorded in history under this name.
    #[arg(long, value_name = "NAME")]
    pub(crate) lock: String,
    /// Give up if the lease is not had within this long (default: wait).
    #[arg(long, value_name = "DUR", value_parser = parse_wait)]
    pub(crate) wait: Option<Duration>,
    /// Run at most once per KEY across the fleet; later callers wait for
    /// that run and exit with its status.
    #[arg(long, value_name = "KEY")]
    pub(crate) once: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

pub(super) fn exec(args: &ExecArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let name = &args.lock;
    if let Err(e) = crate::config::name::JobName::parse(name) {
        return Err(UsageError(format!("invalid lock name {name:?}: {e}")).into());
    }
    if args.once.is_some() && name.len() > 40 {
        return Err(UsageError(format!(
            "with --once, the lock name {name:?} must be at most 40 characters"
        ))
        .into());
    }
    let pool = open_for_command(&config)?;
    let runtime = command_runtime()?;
    let grace = config.daemon.shutdown_grace;
    // The program, not its arguments: they may hold secrets.
    let entry = Entry::new(Action::Exec, name)
        .arg("once", args.once.clone())
        .arg(
            "wait",
            args.wait.map(|w| humantime::format_duration(w).to_string()),
        )
        .arg("program", args.command.first().cloned());
    let executed = runtime.block_on(async {
        let engine = super::run::one_off_engine(pool, grace)?;
        let work = exec::work(name, &args.command, &config.defaults);
        let executed = match &args.once {
            Some(key) => exec::once(&engine, work, key).await,
            None => exec::locked(&engine, work, args.wait).await,
        };
        let outcome = match &executed {
            Ok(Executed::Ran(outcome)) => {
                Outcome::Done(format!("ran here: {}", describe(outcome.as_ref())))
            }
            Ok(Executed::RanElsewhere(outcome)) => Outcome::Refused(format!(
                "already run for this key elsewhere: {}",
                describe(outcome.as_ref())
            )),
            Ok(Executed::NotAcquired) => Outcome::Refused(format!(
                "lock {name:?} not acquired within {}",
                humantime::format_duration(args.wait.unwrap_or_default())
            )),
            Err(e) => Outcome::Refused(e.to_string()),
        };
        engine.store.audit(&Actor::cli(), entry, outcome).await;
        let unwritten = engine.journal.flush(Duration::from_secs(10)).await;
        for write in &unwritten {
            tracing::error!("history write not recorded before exit: {write}");
        }
        Ok::<_, crate::Error>(executed?)
    })?;
    crate::telemetry::traces::shutdown();
    Ok(match executed {
        Executed::Ran(outcome) => {
            if !matches!(
                outcome.as_ref().map(|o| o.status),
                Some(RunStatus::Succeeded | RunStatus::Failed)
            ) {
                eprintln!("replicron: {name}: {}", describe(outcome.as_ref()));
            }
            exit_code_of(outcome.as_ref())
        }
        Executed::RanElsewhere(outcome) => {
            eprintln!(
                "replicron: {name}: already run for this key elsewhere: {}",
                describe(outcome.as_ref())
            );
            exit_code_of(outcome.as_ref())
        }
        Executed::NotAcquired => {
            eprintln!(
                "replicron: lock {name:?} not acquired within {}",
                humantime::format_duration(args.wait.unwrap_or_default())
            );
            ExitCode::from(1)
        }
    })
}
