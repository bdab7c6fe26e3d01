//! `replicron unlock JOB`: ends a stuck lease (the operator's tool); asks
//! for `--force` while the holder's run is recorded running.

use super::{ConfigArg, ExitCode, load, open_for_command};
use crate::history;
use crate::lease;

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
}

pub(super) fn unlock(args: &UnlockArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let pool = open_for_command(&config)?;
    let mut conn = pool.get()?;
    let query = |what: &str, e| crate::db::DbError::query(what, e);
    let Some(lock) =
        lease::find_lock(&mut conn, &args.job).map_err(|e| query("reading the lease", e))?
    else {
        eprintln!("replicron: {:?} has no lease row", args.job);
        return Ok(ExitCode::from(1));
    };
    if !lease::is_held(&mut conn, &args.job).map_err(|e| query("reading the lease", e))? {
        println!("{}: not held", args.job);
        return Ok(ExitCode::SUCCESS);
    }
    let running = history::running_under(&mut conn, &args.job, lock.fence)
        .map_err(|e| query("reading the history", e))?;
    if let Some(run) = &running
        && !args.force
    {
        eprintln!(
            "replicron: {} is held by {} whose run {} (started {}) is still recorded running; \
             add --force to end the lease anyway (that run is then stopped by its holder)",
            args.job,
            run.instance,
            run.id,
            history::rfc3339(run.started_at)
        );
        return Ok(ExitCode::from(1));
    }
    lease::force_unlock(&mut conn, &args.job).map_err(|e| query("ending the lease", e))?;
    println!(
        "{}: lease of {} (fence {}) ended",
        args.job,
        lock.locked_by.as_deref().unwrap_or("?"),
        lock.fence
    );
    Ok(ExitCode::SUCCESS)
}
