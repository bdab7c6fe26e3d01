//! replicron: a cron daemon for replicated services.
//!
//! Every replica loads the same [`config`]. For each job the [`schedule`]
//! computes the same instants on every replica; at each one the daemon races
//! the other replicas for the job's lease row through the [`db`] layer, and
//! the winner runs the job and records the run in history. Data flows one
//! way: config → schedule → daemon → lease → runner → history; the [`cli`]
//! sits on top and maps every command to those pieces.
//!
//! Error policy: library modules return small `thiserror` enums or
//! `QueryResult`; `anyhow` is used at the edge (the command line), where an
//! error is printed with its whole chain and mapped to an exit status.

#[cfg(not(any(feature = "sqlite", feature = "mysql", feature = "postgres")))]
compile_error!(
    "replicron needs at least one database backend: enable the `sqlite`, `mysql` or `postgres` feature"
);

pub mod cli;
pub mod config;
pub mod crontab;
pub mod daemon;
pub mod db;
pub mod history;
pub mod lease;
pub mod man;
pub mod registry;
pub mod runner;
pub mod schedule;
pub mod telemetry;
