//! The job file: TOML in, a validated [`Config`] out.
//!
//! Loading has two stages. The serde layer ([`raw`]) accepts what TOML may
//! say, with `deny_unknown_fields` and the position of every value. The
//! validation here turns it into typed values (schedules, zones, durations,
//! sizes, the database URL) and collects *every* problem it finds, each
//! naming the file, the line, the job and the key, so that `replicron check`
//! can report them all at once. Nothing past this module sees a string that
//! should have been parsed.

pub mod keys;
mod raw;
#[cfg(test)]
mod tests;
mod url;
mod value;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;
use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use self::raw::{RawDaemon, RawDatabase, RawJob, RawSettings};
pub use self::url::{Backend, DatabaseUrl, redact};
pub use self::value::{Zero, parse_duration, parse_size};
use crate::schedule::Schedule;

/// The environment variable that overrides `[database] url`.
pub const DATABASE_URL_ENV: &str = "REPLICRON_DATABASE_URL";

/// The longest job name, so that it fits every backend's key column.
pub const MAX_JOB_NAME_LEN: usize = 64;

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it was read from.
    pub path: PathBuf,
    /// `[database]`.
    pub database: DatabaseConfig,
    /// `[daemon]`.
    pub daemon: DaemonConfig,
    /// `[defaults]`, as applied to jobs (and to `replicron exec`).
    pub defaults: Defaults,
    /// Every `[[job]]`, in file order, enabled or not.
    pub jobs: Vec<Job>,
}

/// The lease and stop settings of `[defaults]`, for runs that are not
/// configured jobs (`replicron exec`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// Lease length.
    pub lock_at_most_for: Duration,
    /// Minimum lease after a start.
    pub lock_at_least_for: Duration,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Output tail kept.
    pub output_limit: u64,
}

/// `[database]`.
#[derive(Clone, Debug)]
pub struct DatabaseConfig {
    /// Where the leases and the history live.
    pub url: DatabaseUrl,
    /// The most connections one replica opens.
    pub pool_size: u32,
}

/// `[daemon]`.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// On SIGTERM, how long running jobs may finish before they are stopped.
    pub shutdown_grace: Duration,
    /// Where `/metrics` and `/healthz` are served, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// History rows older than this are deleted.
    pub history_retention: Duration,
}

/// What a job executes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `shell -c command`.
    Shell {
        /// The shell, `/bin/sh` unless configured.
        shell: String,
        /// The command line handed to the shell.
        command: String,
    },
    /// A program and its arguments, executed without a shell.
    Exec {
        /// `args[0]` is the program.
        args: Vec<String>,
    },
}

/// One validated `[[job]]`, with `[defaults]` applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Unique name; the key of its lease row and its history.
    pub name: String,
    /// When it fires, in its time zone.
    pub schedule: Schedule,
    /// What it runs.
    pub command: Command,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// The working directory of its process, if set.
    pub working_dir: Option<PathBuf>,
    /// A disabled job is validated but never scheduled.
    pub enabled: bool,
    /// Lease length: the safety net if a holder dies.
    pub lock_at_most_for: Duration,
    /// The lease is kept at least this long after a run starts.
    pub lock_at_least_for: Duration,
    /// A run is stopped after this long.
    pub timeout: Duration,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// A missed instant at most this old is run at start; zero turns it off.
    pub catch_up: Duration,
    /// How many bytes of output tail are kept in history.
    pub output_limit: u64,
    /// How many times a failed or timed-out run is retried under its lease.
    pub retries: u32,
    /// The pause before each retry.
    pub retry_backoff: Duration,
}

/// The environment variable that names the job file, for every command's
/// `--config`.
pub const CONFIG_ENV: &str = "REPLICRON_CONFIG";
/// The job file when neither `--config` nor `REPLICRON_CONFIG` names one.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/replicron/jobs.toml";

/// Overrides `[database] pool_size`.
pub const POOL_SIZE_ENV: &str = "REPLICRON_POOL_SIZE";
/// Overrides `[daemon] shutdown_grace`.
pub const SHUTDOWN_GRACE_ENV: &str = "REPLICRON_SHUTDOWN_GRACE";
/// Overrides `[daemon] metrics_listen`.
pub const METRICS_LISTEN_ENV: &str = "REPLICRON_METRICS_LISTEN";
/// Overrides `[daemon] history_retention`.
pub const HISTORY_RETENTION_ENV: &str = "REPLICRON_HISTORY_RETENTION";

/// Every environment variable that overrides a `[database]` or `[daemon]`
/// key, with the key: one file can serve replicas that differ only here
/// (their metrics ports, say). These, and [`CONFIG_ENV`], are replicron's
/// own settings and are never passed on to jobs.
pub const ENV_OVERRIDES: [(&str, &str); 5] = [
    (DATABASE_URL_ENV, "[database] url"),
    (POOL_SIZE_ENV, "[database] pool_size"),
    (SHUTDOWN_GRACE_ENV, "[daemon] shutdown_grace"),
    (METRICS_LISTEN_ENV, "[daemon] metrics_listen"),
    (HISTORY_RETENTION_ENV, "[daemon] history_retention"),
];

/// `[database] pool_size` unless set.
pub const DEFAULT_POOL_SIZE: u32 = 8;
/// `[daemon] shutdown_grace` unless set.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// `[daemon] history_retention` unless set.
pub const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// Where the config is read in: the environment's overrides of
/// [`ENV_OVERRIDES`], which win over the file.
#[derive(Clone, Debug, Default)]
pub struct Environment {
    values: BTreeMap<&'static str, String>,
}

impl Environment {
    /// Reads the overrides from the process environment; an empty variable
    /// counts as unset.
    pub fn from_process() -> Self {
        let mut env = Environment::default();
        for (var, _) in ENV_OVERRIDES {
            if let Ok(value) = std::env::var(var) {
                env = env.with(var, value);
            }
        }
        env
    }

    /// This environment with `var` (one of [`ENV_OVERRIDES`]) set to `value`.
    pub fn with(mut self, var: &'static str, value: impl Into<String>) -> Self {
        let value = value.into();
        if !value.trim().is_empty() {
            self.values.insert(var, value);
        }
        self
    }

    /// The value of `var`, if set.
    pub fn get(&self, var: &str) -> Option<&str> {
        self.values.get(var).map(String::as_str)
    }
}

/// A `[database]` or `[daemon]` value and where it came from.
enum Given<'v> {
    File(Range<usize>, &'v str),
    Env(&'static str, &'v str),
}

impl<'v> Given<'v> {
    /// The environment's value of `var`, else the file's.
    fn of(
        env: &'v Environment,
        var: &'static str,
        file: Option<&'v Spanned<String>>,
    ) -> Option<Self> {
        match (env.get(var), file) {
            (Some(value), _) => Some(Given::Env(var, value)),
            (None, Some(file)) => Some(Given::File(file.span(), file.get_ref())),
            (None, None) => None,
        }
    }

    fn text(&self) -> &'v str {
        match self {
            Given::File(_, text) | Given::Env(_, text) => text,
        }
    }
}

/// One problem found in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based line of the offending value, where it has one.
    pub line: Option<usize>,
    /// The job, by name (or by position when it has no usable name).
    pub job: Option<String>,
    /// The key, with its table for keys outside a job (`defaults.timeout`).
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// Everything wrong with a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// Each problem, in file order.
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.diagnostics.len();
        writeln!(
            f,
            "{}: {count} error{} in config",
            self.path.display(),
            if count == 1 { "" } else { "s" }
        )?;
        for (i, diagnostic) in self.diagnostics.iter().enumerate() {
            write!(f, "{}", self.path.display())?;
            if let Some(line) = diagnostic.line {
                write!(f, ":{line}")?;
            }
            write!(f, ": ")?;
            match (&diagnostic.job, &diagnostic.key) {
                (Some(job), Some(key)) => write!(f, "job {job}, key {key:?}: ")?,
                (Some(job), None) => write!(f, "job {job}: ")?,
                (None, Some(key)) => write!(f, "key {key:?}: ")?,
                (None, None) => {}
            }
            write!(f, "{}", diagnostic.message)?;
            if i + 1 < count {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path, env: &Environment) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            diagnostics: vec![Diagnostic {
                line: None,
                job: None,
                key: None,
                message: format!("cannot read the config file: {e}"),
            }],
        })?;
        Config::parse(path, &text, env)
    }

    /// Validates `text` as if read from `path` (used for messages and to
    /// resolve a relative SQLite path).
    pub fn parse(path: &Path, text: &str, env: &Environment) -> Result<Config, ConfigError> {
        let mut checker = Checker {
            text,
            diagnostics: Vec::new(),
        };
        let config = checker.config(path, env);
        checker.diagnostics.sort_by_key(|d| d.line.unwrap_or(0));
        match config {
            Some(config) if checker.diagnostics.is_empty() => Ok(config),
            _ => Err(ConfigError {
                path: path.to_path_buf(),
                diagnostics: checker.diagnostics,
            }),
        }
    }

    /// The enabled jobs.
    pub fn enabled_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.iter().filter(|job| job.enabled)
    }

    /// The job called `name`.
    pub fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|job| job.name == name)
    }
}

/// Lease names with this prefix are replicron's own (history retention).
pub const RESERVED_PREFIX: &str = "replicron.";

/// Whether `name` may name a job (and so a lease row).
pub fn is_valid_job_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_JOB_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

/// How errors name a job before it is validated: by its name where it has
/// a plausible one, else by its position.
fn job_label(entry: &Spanned<DeValue<'_>>, index: usize) -> String {
    if let DeValue::Table(table) = entry.get_ref()
        && let Some(DeValue::String(name)) = table.get("name").map(Spanned::get_ref)
        && is_valid_job_name(name)
    {
        return format!("{name:?}");
    }
    format!("#{}", index + 1)
}

/// The built-in defaults, as SPEC §2 writes them.
#[derive(Clone, Debug)]
struct Settings {
    timezone: Tz,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
    timeout: Duration,
    kill_grace: Duration,
    catch_up: Duration,
    output_limit: u64,
    shell: String,
    retries: u32,
    retry_backoff: Duration,
}

/// The most retries a job may ask for.
pub const MAX_RETRIES: u32 = 100;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            timezone: Tz::UTC,
            lock_at_most_for: Duration::from_secs(600),
            lock_at_least_for: Duration::ZERO,
            timeout: Duration::from_secs(3600),
            kill_grace: Duration::from_secs(10),
            catch_up: Duration::ZERO,
            output_limit: 64 * 1024,
            shell: "/bin/sh".to_string(),
            retries: 0,
            retry_backoff: Duration::from_secs(10),
        }
    }
}

/// Where a diagnostic belongs: a job (by label) or a top-level table.
#[derive(Clone, Copy)]
enum Scope<'a> {
    Table(&'a str),
    Job(&'a str),
}

impl Scope<'_> {
    /// The table a top-level scope names.
    fn table(self) -> &'static str {
        match self {
            Scope::Table("database") => "database",
            Scope::Table("daemon") => "daemon",
            Scope::Table(_) => "defaults",
            Scope::Job(_) => "job",
        }
    }

    fn job(self) -> Option<String> {
        match self {
            Scope::Job(label) => Some(label.to_string()),
            Scope::Table(_) => None,
        }
    }

    fn key(self, key: &str) -> String {
        match self {
            Scope::Table(table) => format!("{table}.{key}"),
            Scope::Job(_) => key.to_string(),
        }
    }
}

struct Checker<'t> {
    text: &'t str,
    diagnostics: Vec<Diagnostic>,
}

impl<'t> Checker<'t> {
    fn line(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn report(
        &mut self,
        span: Option<Range<usize>>,
        scope: Option<Scope<'_>>,
        key: Option<&str>,
        message: impl Into<String>,
    ) {
        let line = span.map(|span| self.line(&span));
        self.diagnostics.push(Diagnostic {
            line,
            job: scope.and_then(Scope::job),
            key: match (scope, key) {
                (Some(scope), Some(key)) => Some(scope.key(key)),
                (None, Some(key)) => Some(key.to_string()),
                _ => None,
            },
            message: message.into(),
        });
    }

    fn config(&mut self, path: &Path, env: &Environment) -> Option<Config> {
        let text = self.text;
        let (root, errors) = DeTable::parse_recoverable(text);
        if !errors.is_empty() {
            for error in errors {
                let message = error.message().trim().to_string();
                self.report(error.span(), None, None, format!("invalid TOML: {message}"));
            }
            return None;
        }
        let root = root.into_inner();

        let mut database = RawDatabase::default();
        let mut daemon = RawDaemon::default();
        let mut defaults = RawSettings::default();
        let mut jobs: Vec<(Range<usize>, RawJob)> = Vec::new();
        for (key, value) in root {
            let key_span = key.span();
            match key.get_ref().as_ref() {
                "database" => {
                    database = self
                        .table(value, Scope::Table("database"))
                        .unwrap_or_default()
                }
                "daemon" => {
                    daemon = self
                        .table(value, Scope::Table("daemon"))
                        .unwrap_or_default()
                }
                "defaults" => {
                    defaults = self
                        .table(value, Scope::Table("defaults"))
                        .unwrap_or_default()
                }
                "job" => {
                    let span = value.span();
                    match value.into_inner() {
                        DeValue::Array(array) => {
                            for (index, entry) in array.into_iter().enumerate() {
                                let entry_span = entry.span();
                                let label = job_label(&entry, index);
                                if let Some(job) = self.table(entry, Scope::Job(&label)) {
                                    jobs.push((entry_span, job));
                                }
                            }
                        }
                        _ => self.report(
                            Some(span),
                            None,
                            Some("job"),
                            "jobs are written as [[job]] tables",
                        ),
                    }
                }
                other => self.report(
                    Some(key_span),
                    None,
                    Some(other),
                    "unknown top-level key: expected [database], [daemon], [defaults] or [[job]]",
                ),
            }
        }

        let database = self.database(database, path, env);
        let daemon = self.daemon(daemon, env);
        let defaults = self.settings(defaults, &Settings::default(), Scope::Table("defaults"));
        let mut names = HashSet::new();
        let jobs: Vec<Job> = jobs
            .into_iter()
            .enumerate()
            .filter_map(|(index, (span, raw))| self.job(index, span, raw, &defaults, &mut names))
            .collect();
        Some(Config {
            path: path.to_path_buf(),
            database: database?,
            daemon,
            defaults: Defaults {
                lock_at_most_for: defaults.lock_at_most_for,
                lock_at_least_for: defaults.lock_at_least_for,
                kill_grace: defaults.kill_grace,
                output_limit: defaults.output_limit,
            },
            jobs,
        })
    }

    /// Deserializes one table through the serde layer. A key that fails is
    /// reported and removed, and the rest is tried again, so that every bad
    /// key of a table is reported, not only the first.
    fn table<T: for<'de> Deserialize<'de>>(
        &mut self,
        value: Spanned<DeValue<'_>>,
        scope: Scope<'_>,
    ) -> Option<T> {
        let span = value.span();
        let mut table = match value.into_inner() {
            DeValue::Table(table) => table,
            _ => {
                let name = match scope {
                    Scope::Table(name) => name,
                    Scope::Job(_) => "job",
                };
                self.report(Some(span), None, Some(name), "expected a table");
                return None;
            }
        };
        loop {
            let attempt =
                ValueDeserializer::from(Spanned::new(span.clone(), DeValue::Table(table.clone())));
            match T::deserialize(attempt) {
                Ok(parsed) => return Some(parsed),
                Err(error) => {
                    let at = error.span().unwrap_or(span.clone());
                    let culprit = table
                        .iter()
                        .find(|(k, v)| {
                            let start = k.span().start;
                            let end = v.span().end.max(k.span().end);
                            (start..end.max(start + 1)).contains(&at.start)
                        })
                        .map(|(k, _)| k.clone());
                    let message = error.message().trim().to_string();
                    match culprit {
                        Some(key) => {
                            self.report(
                                Some(key.span()),
                                Some(scope),
                                Some(key.get_ref()),
                                message,
                            );
                            table.remove(&key);
                        }
                        None => {
                            self.report(Some(at), Some(scope), None, message);
                            return None;
                        }
                    }
                }
            }
        }
    }

    /// Reports a problem with a value, where it came from: a line of the
    /// file, or an environment variable.
    fn report_given(&mut self, given: &Given<'_>, scope: Scope<'_>, key: &str, message: String) {
        match given {
            Given::File(span, _) => {
                self.report(Some(span.clone()), Some(scope), Some(key), message)
            }
            Given::Env(var, _) => self.report(
                None,
                None,
                Some(var),
                format!(
                    "{message} (set in the environment, where it overrides [{}] {key})",
                    scope.table()
                ),
            ),
        }
    }

    fn database(
        &mut self,
        raw: RawDatabase,
        path: &Path,
        env: &Environment,
    ) -> Option<DatabaseConfig> {
        let scope = Scope::Table("database");
        let pool_text = raw
            .pool_size
            .as_ref()
            .map(|s| Spanned::new(s.span(), s.get_ref().to_string()));
        let pool_size = match Given::of(env, POOL_SIZE_ENV, pool_text.as_ref()) {
            None => DEFAULT_POOL_SIZE,
            Some(given) => match given.text().trim().parse::<u32>() {
                Ok(n) if (1..=1000).contains(&n) => n,
                _ => {
                    let message =
                        format!("pool_size must be between 1 and 1000, not {}", given.text());
                    self.report_given(&given, scope, "pool_size", message);
                    DEFAULT_POOL_SIZE
                }
            },
        };
        let url = match Given::of(env, DATABASE_URL_ENV, raw.url.as_ref()) {
            Some(given) => {
                // A relative SQLite path is taken from the file's folder, or
                // from the working directory for one from the environment.
                let base = match given {
                    Given::File(..) => path.parent().map(Path::to_path_buf).unwrap_or_default(),
                    Given::Env(..) => std::env::current_dir().unwrap_or_default(),
                };
                match DatabaseUrl::parse(given.text(), &base) {
                    Ok(url) => Some(url),
                    Err(message) => {
                        self.report_given(&given, scope, "url", message);
                        None
                    }
                }
            }
            None => {
                self.report(
                    None,
                    Some(scope),
                    Some("url"),
                    format!(
                        "no database URL: set [database] url or {DATABASE_URL_ENV} \
                         (there is no local default, so that a fleet never runs every job on every replica)"
                    ),
                );
                None
            }
        };
        Some(DatabaseConfig {
            url: url?,
            pool_size,
        })
    }

    fn daemon(&mut self, raw: RawDaemon, env: &Environment) -> DaemonConfig {
        let scope = Scope::Table("daemon");
        let duration =
            |checker: &mut Self, var, file: Option<&Spanned<String>>, key: &str, default| {
                let Some(given) = Given::of(env, var, file) else {
                    return default;
                };
                match parse_duration(given.text(), Zero::Rejected) {
                    Ok(duration) => duration,
                    Err(message) => {
                        checker.report_given(&given, scope, key, message);
                        default
                    }
                }
            };
        let shutdown_grace = duration(
            self,
            SHUTDOWN_GRACE_ENV,
            raw.shutdown_grace.as_ref(),
            "shutdown_grace",
            DEFAULT_SHUTDOWN_GRACE,
        );
        let history_retention = duration(
            self,
            HISTORY_RETENTION_ENV,
            raw.history_retention.as_ref(),
            "history_retention",
            DEFAULT_HISTORY_RETENTION,
        );
        let metrics_listen = Given::of(env, METRICS_LISTEN_ENV, raw.metrics_listen.as_ref())
            .and_then(|given| match given.text().trim().parse::<SocketAddr>() {
                Ok(addr) => Some(addr),
                Err(_) => {
                    let message = format!(
                        "invalid listen address {:?}: expected IP:PORT such as \"127.0.0.1:9187\"",
                        given.text()
                    );
                    self.report_given(&given, scope, "metrics_listen", message);
                    None
                }
            });
        DaemonConfig {
            shutdown_grace,
            metrics_listen,
            history_retention,
        }
    }

    /// Parses a duration key if present; `None` when absent or invalid (and
    /// then reported).
    fn duration(
        &mut self,
        value: Option<&Spanned<String>>,
        scope: Scope<'_>,
        key: &str,
        zero: Zero,
    ) -> Option<Duration> {
        let value = value?;
        match parse_duration(value.get_ref(), zero) {
            Ok(duration) => Some(duration),
            Err(message) => {
                self.report(Some(value.span()), Some(scope), Some(key), message);
                None
            }
        }
    }

    /// Applies `raw` over `base`; invalid values are reported and the base
    /// value kept, so that one mistake is reported once.
    fn settings(&mut self, raw: RawSettings, base: &Settings, scope: Scope<'_>) -> Settings {
        let mut settings = base.clone();
        if let Some(zone) = &raw.timezone {
            match zone.get_ref().parse::<Tz>() {
                Ok(tz) => settings.timezone = tz,
                Err(_) => self.report(
                    Some(zone.span()),
                    Some(scope),
                    Some("timezone"),
                    format!(
                        "unknown time zone {:?}: expected an IANA name such as \"UTC\" or \"Europe/Berlin\"",
                        zone.get_ref()
                    ),
                ),
            }
        }
        let durations = [
            (
                &raw.lock_at_most_for,
                "lock_at_most_for",
                Zero::Rejected,
                &mut settings.lock_at_most_for,
            ),
            (
                &raw.lock_at_least_for,
                "lock_at_least_for",
                Zero::Allowed,
                &mut settings.lock_at_least_for,
            ),
            (
                &raw.timeout,
                "timeout",
                Zero::Rejected,
                &mut settings.timeout,
            ),
            (
                &raw.kill_grace,
                "kill_grace",
                Zero::Rejected,
                &mut settings.kill_grace,
            ),
            (
                &raw.catch_up,
                "catch_up",
                Zero::Allowed,
                &mut settings.catch_up,
            ),
            (
                &raw.retry_backoff,
                "retry_backoff",
                Zero::Rejected,
                &mut settings.retry_backoff,
            ),
        ];
        for (value, key, zero, slot) in durations {
            if let Some(parsed) = self.duration(value.as_ref(), scope, key, zero) {
                *slot = parsed;
            }
        }
        if let Some(limit) = &raw.output_limit {
            match parse_size(limit.get_ref()) {
                Ok(bytes) => settings.output_limit = bytes,
                Err(message) => self.report(
                    Some(limit.span()),
                    Some(scope),
                    Some("output_limit"),
                    message,
                ),
            }
        }
        if let Some(retries) = &raw.retries {
            match u32::try_from(*retries.get_ref()) {
                Ok(n) if n <= MAX_RETRIES => settings.retries = n,
                _ => self.report(
                    Some(retries.span()),
                    Some(scope),
                    Some("retries"),
                    format!(
                        "retries must be between 0 and {MAX_RETRIES}, not {}",
                        retries.get_ref()
                    ),
                ),
            }
        }
        if let Some(shell) = &raw.shell {
            if shell.get_ref().trim().is_empty() {
                self.report(
                    Some(shell.span()),
                    Some(scope),
                    Some("shell"),
                    "shell must not be empty",
                );
            } else {
                settings.shell = shell.get_ref().clone();
            }
        }
        // Checked where either side is written, so that a mistake in
        // [defaults] is reported once and not again for every job.
        if (raw.lock_at_least_for.is_some() || raw.lock_at_most_for.is_some())
            && settings.lock_at_least_for > settings.lock_at_most_for
        {
            let (span, key) = match &raw.lock_at_least_for {
                Some(v) => (v.span(), "lock_at_least_for"),
                None => (
                    raw.lock_at_most_for
                        .as_ref()
                        .map(Spanned::span)
                        .unwrap_or_default(),
                    "lock_at_most_for",
                ),
            };
            self.report(
                Some(span),
                Some(scope),
                Some(key),
                format!(
                    "lock_at_least_for ({}) is longer than lock_at_most_for ({})",
                    humantime::format_duration(settings.lock_at_least_for),
                    humantime::format_duration(settings.lock_at_most_for)
                ),
            );
        }
        settings
    }

    fn job(
        &mut self,
        index: usize,
        span: Range<usize>,
        mut raw: RawJob,
        defaults: &Settings,
        names: &mut HashSet<String>,
    ) -> Option<Job> {
        let position = format!("#{}", index + 1);
        let name = match &raw.name {
            None => {
                self.report(
                    Some(span.clone()),
                    Some(Scope::Job(&position)),
                    Some("name"),
                    "a job needs a name",
                );
                None
            }
            Some(name) if !is_valid_job_name(name.get_ref()) => {
                self.report(
                    Some(name.span()),
                    Some(Scope::Job(&position)),
                    Some("name"),
                    format!(
                        "invalid job name {:?}: use 1 to {MAX_JOB_NAME_LEN} characters from A-Z a-z 0-9 _ . : -",
                        name.get_ref()
                    ),
                );
                None
            }
            Some(name) if name.get_ref().starts_with(RESERVED_PREFIX) => {
                self.report(
                    Some(name.span()),
                    Some(Scope::Job(&position)),
                    Some("name"),
                    format!("job names starting with {RESERVED_PREFIX:?} are reserved for replicron's own leases"),
                );
                None
            }
            Some(name) if !names.insert(name.get_ref().clone()) => {
                let label = format!("{:?}", name.get_ref());
                self.report(
                    Some(name.span()),
                    Some(Scope::Job(&label)),
                    Some("name"),
                    "duplicate job name: another [[job]] above has the same name",
                );
                None
            }
            Some(name) => Some(name.get_ref().clone()),
        };
        let label = match &raw.name {
            Some(n) if is_valid_job_name(n.get_ref()) => format!("{:?}", n.get_ref()),
            _ => position,
        };
        let scope = Scope::Job(&label);

        let settings = self.settings(raw.take_settings(), defaults, scope);
        let schedule = match &raw.schedule {
            None => {
                self.report(
                    Some(span.clone()),
                    Some(scope),
                    Some("schedule"),
                    "a job needs a schedule",
                );
                None
            }
            Some(expression) => match Schedule::parse(expression.get_ref(), settings.timezone) {
                Ok(schedule) => Some(schedule),
                Err(message) => {
                    self.report(
                        Some(expression.span()),
                        Some(scope),
                        Some("schedule"),
                        message,
                    );
                    None
                }
            },
        };
        let command = match (raw.command, raw.args) {
            (Some(command), None) if command.get_ref().trim().is_empty() => {
                self.report(
                    Some(command.span()),
                    Some(scope),
                    Some("command"),
                    "command must not be empty",
                );
                None
            }
            (Some(command), None) => Some(Command::Shell {
                shell: settings.shell.clone(),
                command: command.into_inner(),
            }),
            (None, Some(args)) if args.get_ref().first().is_none_or(|a| a.is_empty()) => {
                self.report(
                    Some(args.span()),
                    Some(scope),
                    Some("args"),
                    "args must start with the program to run",
                );
                None
            }
            (None, Some(args)) => Some(Command::Exec {
                args: args.into_inner(),
            }),
            (Some(command), Some(_)) => {
                self.report(
                    Some(command.span()),
                    Some(scope),
                    Some("command"),
                    "command and args are exclusive: use command for a shell line, args to run a program directly",
                );
                None
            }
            (None, None) => {
                self.report(
                    Some(span.clone()),
                    Some(scope),
                    Some("command"),
                    "a job needs either command (run by the shell) or args (run directly)",
                );
                None
            }
        };
        if let Some(env) = &raw.env {
            for key in env.get_ref().keys() {
                if key.is_empty() || key.contains('=') || key.contains('\0') {
                    self.report(
                        Some(env.span()),
                        Some(scope),
                        Some("env"),
                        format!("invalid environment variable name {key:?}"),
                    );
                }
            }
        }
        let working_dir = raw.working_dir.map(|dir| PathBuf::from(dir.into_inner()));
        Some(Job {
            name: name?,
            schedule: schedule?,
            command: command?,
            env: raw.env.map(Spanned::into_inner).unwrap_or_default(),
            working_dir,
            enabled: raw.enabled.is_none_or(Spanned::into_inner),
            lock_at_most_for: settings.lock_at_most_for,
            lock_at_least_for: settings.lock_at_least_for,
            timeout: settings.timeout,
            kill_grace: settings.kill_grace,
            catch_up: settings.catch_up,
            output_limit: settings.output_limit,
            retries: settings.retries,
            retry_backoff: settings.retry_backoff,
        })
    }
}
