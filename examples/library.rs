//! The library's smallest use: the book's chapter "The library" shows the
//! parts between the ANCHOR lines, so the snippet there always compiles.
//!
//! ```sh
//! DATABASE_URL=postgres://… cargo run --example library --features postgres
//! ```

// ANCHOR: uses
use std::time::Duration;

use replicron::{Job, Scheduler};
// ANCHOR_END: uses

/// What the job does: here, nothing.
async fn purge(_before: chrono::DateTime<chrono::Utc>) -> Result<(), std::io::Error> {
    Ok(())
}

/// Resolves when the service is asked to stop.
async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

/// The snippet: one job, scheduled until the service stops. Written at the
/// left margin, as the book shows it.
#[rustfmt::skip]
async fn schedule(url: &str) -> Result<(), Box<dyn std::error::Error>> {
// ANCHOR: snippet
let scheduler = Scheduler::builder(url) // or a replicron::Pool
    .instance_id("api-7") // optional
    .job(
        Job::new("purge-sessions", "*/5 * * * *")?
            .timezone("Europe/Berlin")?
            .lock_at_most_for(Duration::from_secs(600))
            .run(move |ctx| async move {
                // ctx.instant(), ctx.fence(), ctx.attempt(), ctx.cancelled()
                purge(ctx.instant()).await
            }),
    )
    .build()
    .await?; // connects, migrates, registers the replica
scheduler.run_until(shutdown_signal()).await?;
// ANCHOR_END: snippet
Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite://library.db".into());
    schedule(&url).await
}
