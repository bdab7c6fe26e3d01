//! The serde layer of the config file: what TOML may say, with the position
//! of every value, before anything is interpreted.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

type S<T> = Spanned<T>;

/// `[database]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub url: Option<S<String>>,
    pub pool_size: Option<S<i64>>,
}

/// `[daemon]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    pub shutdown_grace: Option<S<String>>,
    pub metrics_listen: Option<S<String>>,
    pub history_retention: Option<S<String>>,
    pub max_backfill_instants: Option<S<i64>>,
    pub max_starts_per_second: Option<S<i64>>,
    pub output_dir: Option<S<String>>,
}

/// `[web]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWeb {
    pub token_env: Option<S<String>>,
    pub tokens: Option<S<std::collections::BTreeMap<String, S<RawToken>>>>,
    pub public_url: Option<S<String>>,
    pub advertise_url: Option<S<String>>,
    pub cookie_name: Option<S<String>>,
    pub cookie_path: Option<S<String>>,
    pub cookie_secure: Option<S<bool>>,
    pub trusted_proxies: Option<S<Vec<String>>>,
}

/// An entry of `[web] tokens`: the variable of a token with every right,
/// or a table that says which rights, on which jobs.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "an environment variable's name (\"OPS_TOKEN\"), or { env = \"CI_TOKEN\", can = [\"trigger\", \"backfill\"], jobs = [\"deploy-*\"] } with env, can (read, trigger, backfill, pause, unlock, admin) and, if any, jobs"
)]
pub(super) enum RawToken {
    Var(String),
    Scoped(RawScopedToken),
}

/// `{ env = "CI_TOKEN", can = ["trigger"], jobs = ["deploy-*"] }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScopedToken {
    pub env: String,
    pub can: Option<Vec<String>>,
    pub jobs: Option<Vec<String>>,
}

/// `[telemetry]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub endpoint: Option<S<String>>,
    pub protocol: Option<S<String>>,
    pub service_name: Option<S<String>>,
    pub sample_ratio: Option<S<f64>>,
    pub trace_url: Option<S<String>>,
}

/// The keys a job may take from `[defaults]` or set itself.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    pub timezone: Option<S<String>>,
    pub lock_at_most_for: Option<S<String>>,
    pub lock_at_least_for: Option<S<String>>,
    pub timeout: Option<S<String>>,
    pub kill_grace: Option<S<String>>,
    pub catch_up: Option<S<String>>,
    pub output_limit: Option<S<String>>,
    pub output_store: Option<S<String>>,
    pub output_retention: Option<S<String>>,
    pub output_max: Option<S<String>>,
    pub shell: Option<S<String>>,
    pub retries: Option<S<i64>>,
    pub retry_backoff: Option<S<String>>,
    pub success_exit_codes: Option<S<Vec<i64>>>,
    pub skip_exit_codes: Option<S<Vec<i64>>>,
    pub retry_on_exit_codes: Option<S<Vec<i64>>>,
    pub missed_after: Option<S<String>>,
    pub jitter: Option<S<String>>,
    pub warn_after: Option<S<String>>,
    pub late_after: Option<S<String>>,
    pub overlap: Option<S<String>>,
    pub max_concurrent: Option<S<i64>>,
    pub dst_gap: Option<S<String>>,
    pub dst_repeat: Option<S<String>>,
    pub memory_max: Option<S<String>>,
    pub cpu_max: Option<S<String>>,
    pub tasks_max: Option<S<i64>>,
    pub nofile_max: Option<S<i64>>,
}

/// A job's `schedule`: one expression, or several whose instants are the
/// union, each a string or a table with its own time zone and params.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a cron expression or macro, or an array of them, each a string or a table \
                 { cron = \"...\", timezone = \"...\", params = { NAME = \"value\" } } \
                 (\"0 9 * * 1-5\" or [\"0 9 * * 1-5\", { cron = \"0 9 * * 1-5\", timezone = \"Europe/Berlin\" }])"
)]
pub(super) enum RawSchedule {
    One(String),
    Several(Vec<RawScheduleEntry>),
}

/// One expression of `schedule = [...]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawScheduleEntry {
    Expression(String),
    Table(RawScheduleTable),
}

/// `{ cron = "0 9 * * 1-5", timezone = "America/New_York", params = { region = "us" } }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScheduleTable {
    cron: String,
    timezone: Option<String>,
    params: Option<std::collections::BTreeMap<String, String>>,
}

impl RawSchedule {
    /// The schedule it writes, in `zone` (the job's) where an expression
    /// names none of its own.
    pub(super) fn parse(&self, zone: chrono_tz::Tz) -> Result<crate::schedule::Schedule, String> {
        use crate::schedule::{Entry, Schedule};
        match self {
            RawSchedule::One(expression) => Schedule::parse(expression, zone),
            RawSchedule::Several(entries) => {
                let entries = entries
                    .iter()
                    .enumerate()
                    .map(|(n, entry)| match entry {
                        RawScheduleEntry::Expression(cron) => Ok(Entry::plain(cron, zone)),
                        RawScheduleEntry::Table(table) => {
                            let own = match &table.timezone {
                                None => None,
                                Some(name) => Some(name.parse::<chrono_tz::Tz>().map_err(|_| {
                                    format!(
                                        "schedule entry {}: timezone {name:?} is not an IANA time zone \
                                         (such as \"Europe/Berlin\" or \"UTC\")",
                                        n + 1
                                    )
                                })?),
                            };
                            Ok(Entry {
                                cron: table.cron.clone(),
                                zone: own.unwrap_or(zone),
                                own_zone: own.is_some(),
                                params: table.params.clone(),
                            })
                        }
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Schedule::parse_all(&entries)
            }
        }
    }
}

/// A job's `after`: its parents, or its parents and the endings of theirs
/// it runs after.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "the jobs it runs after, as [\"extract\"], or { jobs = [\"extract\"], on = [\"succeeded\", \"failed\"] }"
)]
pub(super) enum RawAfter {
    Jobs(Vec<String>),
    Table(RawAfterTable),
}

/// `after = { jobs = [...], on = [...] }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAfterTable {
    pub jobs: Vec<String>,
    pub on: Option<Vec<String>>,
}

/// One `[[limit]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub name: Option<S<String>>,
    pub max_running: Option<S<i64>>,
}

/// One `[[calendar]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCalendar {
    pub name: Option<S<String>>,
    pub dates: Option<S<Vec<String>>>,
    pub ics: Option<S<String>>,
}

/// `[notify]`, and a job's own `notify` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotify {
    pub on: Option<S<Vec<String>>>,
    pub webhook: Option<S<String>>,
    pub webhook_headers: Option<S<BTreeMap<String, String>>>,
    pub command: Option<S<RawCommand>>,
    pub ping_url: Option<S<String>>,
    pub timeout: Option<S<String>>,
    pub retries: Option<S<i64>>,
}

/// A notifier command: a shell line, or a program and its arguments.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawCommand {
    Line(String),
    Args(Vec<String>),
}

/// One `[[job]]`. The settings keys repeat [`RawSettings`] because serde's
/// `flatten` cannot be combined with `deny_unknown_fields`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub name: Option<S<String>>,
    pub schedule: Option<S<RawSchedule>>,
    pub at: Option<S<String>>,
    pub after: Option<S<RawAfter>>,
    pub command: Option<S<String>>,
    pub args: Option<S<Vec<String>>>,
    pub env: Option<S<BTreeMap<String, String>>>,
    pub secret_env: Option<S<BTreeMap<String, String>>>,
    pub working_dir: Option<S<String>>,
    pub enabled: Option<S<bool>>,
    pub timezone: Option<S<String>>,
    pub lock_at_most_for: Option<S<String>>,
    pub lock_at_least_for: Option<S<String>>,
    pub timeout: Option<S<String>>,
    pub kill_grace: Option<S<String>>,
    pub catch_up: Option<S<String>>,
    pub output_limit: Option<S<String>>,
    pub output_store: Option<S<String>>,
    pub output_retention: Option<S<String>>,
    pub output_max: Option<S<String>>,
    pub shell: Option<S<String>>,
    pub retries: Option<S<i64>>,
    pub retry_backoff: Option<S<String>>,
    pub success_exit_codes: Option<S<Vec<i64>>>,
    pub skip_exit_codes: Option<S<Vec<i64>>>,
    pub retry_on_exit_codes: Option<S<Vec<i64>>>,
    pub missed_after: Option<S<String>>,
    pub jitter: Option<S<String>>,
    pub warn_after: Option<S<String>>,
    pub late_after: Option<S<String>>,
    pub overlap: Option<S<String>>,
    pub max_concurrent: Option<S<i64>>,
    pub dst_gap: Option<S<String>>,
    pub dst_repeat: Option<S<String>>,
    pub memory_max: Option<S<String>>,
    pub cpu_max: Option<S<String>>,
    pub tasks_max: Option<S<i64>>,
    pub nofile_max: Option<S<i64>>,
    pub not_before: Option<S<String>>,
    pub not_after: Option<S<String>>,
    pub skip_on: Option<S<Vec<String>>>,
    pub only_on: Option<S<Vec<String>>>,
    pub user: Option<S<String>>,
    pub group: Option<S<String>>,
    pub run_on: Option<S<String>>,
    pub locks: Option<S<Vec<String>>>,
    pub params: Option<S<Vec<String>>>,
    pub secret_params: Option<S<Vec<String>>>,
    pub limits: Option<S<Vec<String>>>,
    pub priority: Option<S<i64>>,
    pub on_abandon: Option<S<String>>,
    pub notify: Option<S<RawNotify>>,
}

impl RawJob {
    /// Splits off the keys that override `[defaults]`.
    pub(super) fn take_settings(&mut self) -> RawSettings {
        RawSettings {
            timezone: self.timezone.take(),
            lock_at_most_for: self.lock_at_most_for.take(),
            lock_at_least_for: self.lock_at_least_for.take(),
            timeout: self.timeout.take(),
            kill_grace: self.kill_grace.take(),
            catch_up: self.catch_up.take(),
            output_limit: self.output_limit.take(),
            output_store: self.output_store.take(),
            output_retention: self.output_retention.take(),
            output_max: self.output_max.take(),
            shell: self.shell.take(),
            retries: self.retries.take(),
            retry_backoff: self.retry_backoff.take(),
            success_exit_codes: self.success_exit_codes.take(),
            skip_exit_codes: self.skip_exit_codes.take(),
            retry_on_exit_codes: self.retry_on_exit_codes.take(),
            missed_after: self.missed_after.take(),
            jitter: self.jitter.take(),
            warn_after: self.warn_after.take(),
            late_after: self.late_after.take(),
            overlap: self.overlap.take(),
            max_concurrent: self.max_concurrent.take(),
            dst_gap: self.dst_gap.take(),
            dst_repeat: self.dst_repeat.take(),
            memory_max: self.memory_max.take(),
            cpu_max: self.cpu_max.take(),
            tasks_max: self.tasks_max.take(),
            nofile_max: self.nofile_max.take(),
        }
    }
}
