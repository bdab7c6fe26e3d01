//! The integration tests: one binary that drives the real `replicron`
//! executable and real databases (SQLite, and MariaDB/MySQL and PostgreSQL
//! where `scripts/test` provides them).

#[path = "../support/databases.rs"]
mod databases;

mod abandoned;
mod audit;
mod backends;
mod backfill;
mod burst;
mod campaign;
mod check;
mod cluster;
#[cfg(feature = "sqlite")]
mod commands;
mod daemon;
mod dashboard;
mod database_time;
mod dependencies;
mod durability;
mod exitcodes;
mod failover;
mod faults;
mod fleet;
mod galera;
mod history;
mod hooks;
mod import;
mod include;
mod library;
mod limits;
mod live;
mod nginx;
mod notify;
mod once;
mod operate;
mod pid1;
mod proxy;
mod rerun;
mod resources;
mod run_control;
mod runs_view;
mod schedule_entries;
mod secret_env;
mod secrets;
mod support;
mod timeline;
mod tokens;
mod traces;
mod verify;
mod web;
mod whole_output;
