//! `replicron migrate`: applies the pending migrations, one replica at a
//! time across the cluster.

use super::{ConfigArg, ExitCode, load};
use crate::db::Pool;

pub(super) fn migrate(args: &ConfigArg) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let pool = Pool::connect(
        &config.database.url,
        1,
        std::sync::Arc::new(crate::schedule::SystemClock),
    )?;
    let applied = pool.migrate()?;
    println!(
        "{}: {applied} migration{} applied",
        config.database.url,
        if applied == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}
