//! replicron runs cron jobs exactly once per scheduled instant across the
//! replicas of a service: at each instant every replica races for the
//! job's lease row in a shared database (SQLite, MariaDB/MySQL or
//! PostgreSQL), and only the one whose conditional `UPDATE` changed the row
//! runs it. It is a daemon (`replicron run`, jobs are commands in a TOML
//! file) and this library, for services that run their own async functions
//! as jobs.
//!
//! # Use it as a library
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), replicron::Error> {
//! # let dir = tempfile::tempdir().expect("a temporary folder");
//! # let url = format!("sqlite://{}", dir.path().join("cron.db").display());
//! use std::time::Duration;
//!
//! use replicron::{Job, Scheduler};
//!
//! let scheduler = Scheduler::builder(url.as_str()) // "postgres://…", or a replicron::Pool
//!     .instance_id("api-7")
//!     .job(
//!         Job::new("purge-sessions", "*/5 * * * * *")? // every 5 seconds
//!             .timezone("Europe/Berlin")?
//!             .lock_at_most_for(Duration::from_secs(60))
//!             .run(|ctx| async move {
//!                 // ctx.instant() is the run's identity, the same on every
//!                 // replica; ctx.fence() guards writes against a holder that
//!                 // lost its lease; ctx.cancelled() fires when the run must stop.
//!                 println!("purging sessions for {}", ctx.instant());
//!                 Ok::<(), std::io::Error>(())
//!             }),
//!     )
//!     .build()
//!     .await?;
//! // Run until shutdown: here, for a few seconds.
//! scheduler
//!     .run_until(tokio::time::sleep(Duration::from_secs(6)))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Every replica builds the same jobs against the same database. Each run
//! is recorded in the table `replicron_runs` (`succeeded` when the function
//! returns `Ok`, `failed` with the error's text when it returns `Err` or
//! panics, `timed_out` after its timeout, `lost_lock` when its lease could
//! not be kept); the lease protocol, retries, timeouts, catch-up and
//! metrics are the daemon's. A library replica and a daemon replica on the
//! same database never run the same instant twice.
//!
//! # How the pieces fit
//!
//! Data flows one way: the job file is read by `config` (the daemon's), each
//! job's instants come from `schedule`, the `scheduler`'s tick loops claim
//! them through `lease` (claims, keep-alive) and run them through `runner`
//! (child processes and their guard) or an async function, and `history`
//! records every run. `db` is the connection, the pool, the typed async
//! store, the database's health and the SQL that differs by backend;
//! `registry` is the replicas; `telemetry` is metrics and systemd; `web` is
//! the dashboard, the JSON API and `/metrics` over HTTP;
//! `cli` is the command line on top. `docs/design.md` is the contract.
//!
//! Error policy: library modules return small `thiserror` enums or
//! `QueryResult`; [`Error`] is what the public API returns; `anyhow` is used
//! at the edge (the command line), where an error is printed with its whole
//! chain and mapped to an exit status.

#![deny(missing_docs)]
// Without the `daemon` feature the library still compiles the job file's
// types, child processes and notifications the scheduler is written
// against; only the daemon reaches them.
#![cfg_attr(not(feature = "daemon"), expect(dead_code, unused_imports))]

#[cfg(not(any(feature = "sqlite", feature = "mysql", feature = "postgres")))]
compile_error!(
    "replicron needs at least one database backend: enable the `sqlite`, `mysql` or `postgres` feature"
);

mod backoff;
#[cfg(feature = "daemon")]
#[doc(hidden)]
pub mod cli;
mod config;
#[cfg(feature = "daemon")]
mod crontab;
mod db;
mod error;
mod history;
mod lease;
mod notify;
#[cfg(feature = "daemon")]
mod ops;
mod registry;
mod run;
mod runner;
mod schedule;
mod scheduler;
mod secrets;
mod telemetry;
#[cfg(test)]
mod testing;
mod text;
#[cfg(feature = "daemon")]
mod web;

pub use self::db::Pool;
pub use self::error::Error;
pub use self::scheduler::{Database, Job, RunContext, Scheduler, SchedulerBuilder};
