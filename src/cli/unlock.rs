//! `replicron unlock JOB`: ends a stuck lease (the operator's tool); asks
//! for `--force` while the holder's run is recorded running.

use super::{ConfigArg, ExitCode, open_for_command};
use crate::db::audit::Actor;
use crate::ops::actions::{self, Refused, Unlocked};

/// Arguments of `unlock`.
#[derive(Debug, clap::Args)]
pub(crate) struct UnlockArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The job (or `exec` lock) whose lease to end.
    pub(crate) job: String,
    /// End it even though its holder's run is still recorded `running`
    /// (the holder then loses the lease and stops that run).
    #[arg(long)]
    pub(crate) force: bool,
    /// Why, recorded in the audit log (at most 500 characters, one line).
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
}

pub(super) fn unlock(args: &UnlockArgs) -> anyhow::Result<ExitCode> {
    if args.job.starts_with(crate::config::RESERVED_PREFIX) {
        return Err(super::UsageError(Refused::Reserved(args.job.clone()).to_string()).into());
    }
    let config = super::load_for_database(&args.config)?;
    let store = crate::db::Store::new(open_for_command(&config)?);
    match super::command_runtime()?.block_on(actions::unlock(
        &store,
        &Actor::cli(),
        &args.job,
        args.force,
        args.reason.clone(),
    )) {
        Ok(Unlocked::NotHeld) => println!("{}: not held", args.job),
        Ok(Unlocked::Ended { holder, fence }) => println!(
            "{}: lease of {} (fence {fence}) ended",
            args.job,
            holder.as_deref().unwrap_or("?"),
        ),
        Err(Refused::NoRow(job)) => {
            eprintln!("replicron: {job:?} has no lease row");
            return Ok(ExitCode::from(1));
        }
        Err(refused @ Refused::Running { .. }) => {
            eprintln!(
                "replicron: {refused}; add --force to end the lease anyway (that run is then stopped by its holder)"
            );
            return Ok(ExitCode::from(1));
        }
        Err(Refused::Db(e)) => return Err(e.into()),
        Err(unaudited @ Refused::Unaudited(_)) => return Err(unaudited.into()),
        Err(refused) => return Err(super::UsageError(refused.to_string()).into()),
    }
    Ok(ExitCode::SUCCESS)
}
