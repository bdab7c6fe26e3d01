//! The job file: TOML in, a validated [`Config`] out.
//!
//! Loading has two stages. The serde layer ([`raw`]) accepts what TOML may
//! say, with `deny_unknown_fields` and the position of every value. The
//! validation ([`check`]) turns it into typed values (schedules, zones, durations,
//! sizes, the database URL) and collects *every* problem it finds, each
//! naming the file, the line, the job and the key, so that `replicron check`
//! can report them all at once. Nothing past this module sees a string that
//! should have been parsed.

mod check;
pub(crate) mod exit_codes;
pub(crate) mod keys;
pub(crate) mod name;
pub(crate) mod notify;
pub(crate) mod params;
mod raw;
pub(crate) mod resources;
#[cfg(test)]
mod tests;
mod value;

pub(crate) use self::check::dependent_upcoming;
pub(crate) use crate::telemetry::trace_config::TelemetryConfig;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;

pub(crate) use self::value::{Zero, parse_duration, parse_size};
pub(crate) use crate::db::DatabaseUrl;
use crate::schedule::Schedule;

/// The environment variable that overrides `[database] url`.
pub(crate) const DATABASE_URL_ENV: &str = "REPLICRON_DATABASE_URL";

/// The longest job name, so that it fits every backend's key column.
pub(crate) const MAX_JOB_NAME_LEN: usize = 64;

/// The lowest and highest `priority` a job may have.
pub(crate) const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;

/// The default of `[daemon] max_backfill_instants`.
pub(crate) const DEFAULT_MAX_BACKFILL_INSTANTS: u64 = 10_000;

/// The default of `[daemon] max_starts_per_second`.
pub(crate) const DEFAULT_STARTS_PER_SECOND: u32 = 50;

/// A validated configuration.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The file it was read from.
    pub(crate) path: PathBuf,
    /// `[database]`.
    pub(crate) database: DatabaseConfig,
    /// `[daemon]`.
    pub(crate) daemon: DaemonConfig,
    /// `[web]`.
    pub(crate) web: WebConfig,
    /// `[telemetry]`.
    pub(crate) telemetry: TelemetryConfig,
    /// `[defaults]`, as applied to jobs (and to `replicron exec`).
    pub(crate) defaults: Defaults,
    /// Every `[[job]]`, in file order, enabled or not.
    pub(crate) jobs: Vec<Job>,
    /// Every `[[limit]]`, in file order.
    pub(crate) limits: Vec<Limit>,
    /// Every `[[calendar]]`, in file order.
    pub(crate) calendars: Vec<std::sync::Arc<crate::schedule::calendar::Calendar>>,
    /// What is wrong but stops nothing, in file order: a calendar that
    /// cannot be read (its jobs are held), a job that can never fire.
    pub(crate) warnings: Vec<Diagnostic>,
    /// The jobs written `at` an instant already past by more than their
    /// `catch_up`: refused by `check` and `run` unless the database shows
    /// the fleet had the job before its instant, or ran or recorded it
    /// ([`Config::refuse_past_instants`]).
    pub(crate) past_instants: Vec<PastInstant>,
    /// Whether the file has errors, and this is only the part of it that
    /// could be read ([`Config::load_for_database`]).
    pub(crate) broken: bool,
    /// The files `include` read, in the order their jobs were merged.
    pub(crate) included: Vec<PathBuf>,
    /// The file each job of an included file came from, by job name
    /// (a job of the job file itself is not listed).
    pub(crate) job_files: BTreeMap<String, PathBuf>,
}

/// The lease and stop settings of `[defaults]`, for runs that are not
/// configured jobs (`replicron exec`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Defaults {
    /// Lease length.
    pub(crate) lock_at_most_for: Duration,
    /// Minimum lease after a start.
    pub(crate) lock_at_least_for: Duration,
    /// Between SIGTERM and SIGKILL.
    pub(crate) kill_grace: Duration,
    /// Output tail kept.
    pub(crate) output_limit: u64,
}

/// `[database]`.
#[derive(Clone, Debug)]
pub(crate) struct DatabaseConfig {
    /// Where the leases and the history live.
    pub(crate) url: DatabaseUrl,
    /// The most connections one replica opens.
    pub(crate) pool_size: u32,
}

/// `[daemon]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DaemonConfig {
    /// On SIGTERM, how long running jobs may finish before they are stopped.
    pub(crate) shutdown_grace: Duration,
    /// Where `/metrics` and `/healthz` are served, if anywhere.
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// History rows older than this are deleted.
    pub(crate) history_retention: Duration,
    /// The most instants the fleet's backfills in progress have left.
    pub(crate) max_backfill_instants: u64,
    /// The most catch-up, backfill and retry runs a replica starts per
    /// second.
    pub(crate) max_starts_per_second: u32,
    /// Where the runs of jobs with `output_store = "files"` keep their
    /// whole output: absolute (a relative one is taken from the job file's
    /// folder at load).
    pub(crate) output_dir: PathBuf,
}

/// `output_store = "files"`: where and how much of each run's whole output
/// a job keeps, beside the tail its history row holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OutputFiles {
    /// `[daemon] output_dir`.
    pub(crate) dir: PathBuf,
    /// `output_retention`: files older than this are deleted.
    pub(crate) retention: Duration,
    /// `output_max`: one run's file, and the job's files together, at most.
    pub(crate) max: u64,
}

/// `[web]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WebConfig {
    /// The variables holding the bearer tokens that allow actions, each
    /// with its name (`token_env`'s is [`DEFAULT_TOKEN_NAME`]), in name
    /// order.
    pub(crate) tokens: Vec<TokenEnv>,
    /// Where browsers reach the dashboard through a reverse proxy.
    pub(crate) public_url: Option<PublicUrl>,
    /// Where the other replicas reach this one's listener, `http://HOST[:PORT]`
    /// (unset: from the listen address and the host name).
    pub(crate) advertise_url: Option<String>,
    /// The session cookie's name.
    pub(crate) cookie_name: String,
    /// The session cookie's path.
    pub(crate) cookie_path: String,
    /// Whether the session cookie is `Secure` (sent over https only).
    pub(crate) cookie_secure: bool,
    /// The reverse proxies whose `X-Forwarded-For` names the client.
    pub(crate) trusted_proxies: Vec<std::net::IpAddr>,
}

/// `[web] public_url`: the origin browsers reach the dashboard at, through
/// a reverse proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PublicUrl {
    /// `scheme://host[:port]` (the scheme's own port left out), as
    /// browsers send it in `Origin`.
    pub(crate) origin: String,
    /// `host[:port]`, as a proxy that passes it on sends it in `Host`.
    pub(crate) host: String,
    /// `https`: the session cookie is `Secure`.
    pub(crate) secure: bool,
}

impl PublicUrl {
    /// Reads `text`: `http://` or `https://`, a host, a port if any, and no
    /// path, query or user.
    pub(crate) fn parse(text: &str) -> Result<PublicUrl, String> {
        let text = text.trim();
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("{text:?} is not a URL: write https://HOST[:PORT]"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => "443",
            "http" => "80",
            _ => return Err(format!("{text:?}: the scheme must be https or http")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
            return Err(format!(
                "{text:?} must be an origin, https://HOST[:PORT], with no path, query or user: the dashboard is served at the root of its host"
            ));
        }
        let host = rest.to_ascii_lowercase();
        // An IPv6 address is bracketed: its port follows the bracket.
        let split = match host.strip_prefix('[') {
            Some(v6) => v6
                .split_once(']')
                .map(|(address, after)| (format!("[{address}]"), after.strip_prefix(':'))),
            None => Some(match host.split_once(':') {
                Some((name, port)) => (name.to_string(), Some(port)),
                None => (host.clone(), None),
            }),
        };
        let Some((name, port)) = split.filter(|(name, _)| name.len() > 2 || !name.starts_with('['))
        else {
            return Err(format!("{text:?}: the host is not readable"));
        };
        if name.is_empty() || port.is_some_and(|p| p.parse::<u16>().is_err()) {
            return Err(format!("{text:?}: the host or its port is not readable"));
        }
        let host = match port {
            Some(port) if port != default_port => format!("{name}:{port}"),
            _ => name,
        };
        Ok(PublicUrl {
            origin: format!("{scheme}://{host}"),
            host,
            secure: scheme == "https",
        })
    }
}

/// The name of the token of `[web] token_env`, which the audit log and a
/// session record as who acted.
pub(crate) const DEFAULT_TOKEN_NAME: &str = "default";

/// `[web] token_env` or an entry of `[web] tokens`: the token's name, the
/// variable that holds it, and its line in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TokenEnv {
    /// The token's name.
    pub(crate) name: String,
    /// The key that set it: `web.token_env` or `web.tokens.NAME`.
    pub(crate) key: String,
    /// The variable.
    pub(crate) var: String,
    /// Its line in the file.
    pub(crate) line: Option<usize>,
    /// What it may do, and to which jobs.
    pub(crate) grant: Grant,
}

/// What a token may do (`[web] tokens`' `can`). `read` is every token's:
/// a token that may act on a job may read what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Right {
    /// See the jobs, their runs and the audit log.
    Read,
    /// Trigger a run.
    Trigger,
    /// Start and cancel a backfill.
    Backfill,
    /// Pause and resume.
    Pause,
    /// End a lease.
    Unlock,
    /// Every right.
    Admin,
}

impl Right {
    /// Every right, in the order the documentation lists them.
    pub(crate) const ALL: [Right; 6] = [
        Right::Read,
        Right::Trigger,
        Right::Backfill,
        Right::Pause,
        Right::Unlock,
        Right::Admin,
    ];

    /// Its name in the job file, the API's errors and the audit log.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Trigger => "trigger",
            Right::Backfill => "backfill",
            Right::Pause => "pause",
            Right::Unlock => "unlock",
            Right::Admin => "admin",
        }
    }

    /// The right named `text`.
    pub(crate) fn parse(text: &str) -> Option<Right> {
        Right::ALL.into_iter().find(|r| r.as_str() == text.trim())
    }
}

impl fmt::Display for Right {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token's rights and the jobs they reach: a plain `[web] tokens`
/// entry's and `token_env`'s are [`Grant::full`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The rights given, as written (in [`Right::ALL`]'s order).
    pub(crate) can: Vec<Right>,
    /// The patterns of the jobs it reaches (`*` any run of characters,
    /// `?` one); `None`: every job.
    pub(crate) jobs: Option<Vec<String>>,
}

impl Grant {
    /// Every right, on every job.
    pub(crate) fn full() -> Grant {
        Grant {
            can: vec![Right::Admin],
            jobs: None,
        }
    }

    /// Whether it gives `right` (`read` is implied by any other, `admin`
    /// gives every one).
    pub(crate) fn allows(&self, right: Right) -> bool {
        right == Right::Read || self.can.contains(&Right::Admin) || self.can.contains(&right)
    }

    /// Whether it reaches the job (or lease row) `name`.
    pub(crate) fn reaches(&self, name: &str) -> bool {
        self.jobs
            .as_ref()
            .is_none_or(|patterns| patterns.iter().any(|p| glob_matches(p, name)))
    }
}

/// A token as the daemon holds it: its name, its value and its grant. Its
/// `Debug` leaves the value out.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token {
    /// Its name, the audit log's who.
    pub(crate) name: String,
    /// The secret.
    pub(crate) value: String,
    /// What it may do.
    pub(crate) grant: Grant,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("grant", &self.grant)
            .finish_non_exhaustive()
    }
}

/// Whether `pattern` may be one of a token's `jobs`: 1 to 64 characters of
/// a job name's (`A-Z a-z 0-9 _ . : -`) and the wildcards `*` and `?`.
pub(crate) fn is_job_glob(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern.len() <= MAX_JOB_NAME_LEN
        && pattern
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-' | '*' | '?'))
}

/// Whether `name` matches `pattern`, whose `*` is any run of characters
/// (none too) and `?` any one character.
pub(crate) fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The last `*` seen and where in `name` it was tried: on a mismatch it
    // takes one more character.
    let (mut i, mut j, mut star): (usize, usize, Option<(usize, usize)>) = (0, 0, None);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((at, from)) = star {
            i = at + 1;
            j = from + 1;
            star = Some((at, from + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The session cookie's name unless `[web] cookie_name` says otherwise.
pub(crate) const DEFAULT_COOKIE: &str = "replicron_session";

/// Whether `name` may name a token of `[web] tokens`.
pub(crate) fn is_token_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The shortest token `[web] token_env` may hold.
const MIN_TOKEN_LEN: usize = 16;

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            tokens: Vec::new(),
            public_url: None,
            advertise_url: None,
            cookie_name: DEFAULT_COOKIE.to_string(),
            cookie_path: "/".to_string(),
            cookie_secure: false,
            trusted_proxies: Vec::new(),
        }
    }
}

impl WebConfig {
    /// Each token's name, value and grant, the values from the process
    /// environment: an error names the variables (never their values) that
    /// are unset or too short.
    pub(crate) fn tokens(&self, path: &Path) -> Result<Vec<Token>, ConfigError> {
        let mut tokens = Vec::new();
        let mut diagnostics = Vec::new();
        for token_env in &self.tokens {
            match token_env.value() {
                Ok(value) => tokens.push(Token {
                    name: token_env.name.clone(),
                    value,
                    grant: token_env.grant.clone(),
                }),
                Err(problem) => diagnostics.push(Diagnostic {
                    file: None,
                    line: token_env.line,
                    job: None,
                    key: Some(token_env.key.clone()),
                    message: problem,
                }),
            }
        }
        if diagnostics.is_empty() {
            Ok(tokens)
        } else {
            Err(ConfigError {
                path: path.to_path_buf(),
                diagnostics,
            })
        }
    }
}

impl TokenEnv {
    /// The token, or what is wrong with its variable (never its value).
    fn value(&self) -> Result<String, String> {
        let token_env = self;
        let value = std::env::var(&token_env.var).unwrap_or_default();
        let problem = if value.trim().is_empty() {
            format!(
                "{} is not set in replicron's environment: actions need its token",
                token_env.var
            )
        } else if value.trim().len() < MIN_TOKEN_LEN {
            format!(
                "the token in {} is shorter than {MIN_TOKEN_LEN} characters: use a random one (`openssl rand -hex 32`)",
                token_env.var
            )
        } else {
            return Ok(value.trim().to_string());
        };
        Err(problem)
    }
}

/// What a job executes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
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
pub(crate) struct Job {
    /// Unique name; the key of its lease row and its history.
    pub(crate) name: name::JobName,
    /// When it fires, in its time zone.
    pub(crate) schedule: Schedule,
    /// What it runs.
    pub(crate) command: Command,
    /// Extra environment variables.
    pub(crate) env: BTreeMap<String, String>,
    /// Environment variables read from files at each run's start
    /// (`secret_env`): where each is read from, never its value.
    pub(crate) secret_env: BTreeMap<String, params::SecretSource>,
    /// The working directory of its process, if set.
    pub(crate) working_dir: Option<PathBuf>,
    /// A disabled job is validated but never scheduled.
    pub(crate) enabled: bool,
    /// Lease length: the safety net if a holder dies.
    pub(crate) lock_at_most_for: Duration,
    /// The lease is kept at least this long after a run starts.
    pub(crate) lock_at_least_for: Duration,
    /// A run is stopped after this long.
    pub(crate) timeout: Duration,
    /// Between SIGTERM and SIGKILL.
    pub(crate) kill_grace: Duration,
    /// A missed instant at most this old is run at start; zero turns it off.
    pub(crate) catch_up: Duration,
    /// How many bytes of output tail are kept in history.
    pub(crate) output_limit: u64,
    /// Where and how much of each run's whole output it keeps in files
    /// (`output_store = "files"`), if it does.
    pub(crate) output_files: Option<OutputFiles>,
    /// How many times a failed or timed-out run is retried under its lease.
    pub(crate) retries: u32,
    /// The pause before each retry.
    pub(crate) retry_backoff: Duration,
    /// Which exit codes succeed, skip, and are retried.
    pub(crate) exit_codes: exit_codes::ExitCodes,
    /// An instant no replica claimed this long after its time is recorded
    /// `missed`; `None`: the larger of a minute and a tenth of the job's
    /// interval; zero: never.
    pub(crate) missed_after: Option<Duration>,
    /// A run still going this long after its attempt started is notified
    /// once as `long_running`, and goes on; `None`: never.
    pub(crate) warn_after: Option<Duration>,
    /// A run whose action starts more than this after it was due (its
    /// instant plus its jitter delay) is notified as `late_start`; `None`:
    /// never.
    pub(crate) late_after: Option<Duration>,
    /// Where its notifications go, if anywhere.
    pub(crate) notify: Option<std::sync::Arc<notify::Notify>>,
    /// Variables of replicron's environment its runs do not see (the ones
    /// notifications read secrets from).
    pub(crate) hidden_env: Vec<String>,
    /// The user (and group) its runs run as, if not replicron's own.
    pub(crate) run_as: Option<RunAs>,
    /// Once across the fleet, or on every replica.
    pub(crate) run_on: RunOn,
    /// Shared locks its runs hold beside the job's own lease, sorted and
    /// without repeats: no two jobs sharing one run at once.
    pub(crate) locks: Vec<String>,
    /// The parameters a run may be given, in the file's order.
    pub(crate) params: Vec<params::Param>,
    /// The parameters whose values are secrets: the audit log writes them
    /// redacted.
    pub(crate) secret_params: Vec<String>,
    /// The limits across jobs its runs take a slot of, sorted by name.
    pub(crate) limits: Vec<Limit>,
    /// What an instant that comes while its run is going does.
    pub(crate) overlap: Overlap,
    /// Among the waiters for a shared lock or a limit, higher goes first
    /// (then the older instant); 0 unless set.
    pub(crate) priority: i32,
    /// What becomes of an instant whose run's holder died mid-run.
    pub(crate) on_abandon: OnAbandon,
    /// The jobs whose runs' ends start its runs (`after`), if any: then it
    /// has no schedule of its own.
    pub(crate) after: Option<After>,
    /// What its runs may use of the host (`memory_max`, `cpu_max`,
    /// `tasks_max`, `nofile_max`).
    pub(crate) resources: resources::Resources,
}

/// A dependent job's `after`: its parents, and the endings of a parent's
/// instant that start its run (every parent's, for a fan-in).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct After {
    /// Its parents, in the file's order.
    pub(crate) parents: Vec<Parent>,
    /// The endings that count (`succeeded` unless `on` says otherwise).
    pub(crate) on: Vec<crate::run::RunStatus>,
}

/// A parent of a dependent job, with what tells when its instant has
/// ended for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Parent {
    /// Its name.
    pub(crate) name: String,
    /// Its schedule: which instants are its.
    pub(crate) schedule: Schedule,
    /// How many times a failed run of it is retried, and the pause
    /// before each: a failed attempt before the last may be followed by
    /// another.
    pub(crate) retries: u32,
    pub(crate) retry_backoff: Duration,
    /// Which of its failures are retried (`retry_on_exit_codes`).
    pub(crate) exit_codes: exit_codes::ExitCodes,
}

impl After {
    /// The parents' names.
    pub(crate) fn names(&self) -> Vec<String> {
        self.parents.iter().map(|p| p.name.clone()).collect()
    }
}

impl Job {
    /// Why the job is held, if it is: a calendar it names could not be
    /// read. A held job never runs; the others run as usual.
    pub(crate) fn held(&self) -> Option<String> {
        let rules = self.schedule.rules();
        rules
            .skip_on
            .iter()
            .chain(&rules.only_on)
            .find_map(|calendar| {
                calendar
                    .why_unreadable()
                    .map(|why| format!("calendar {:?} cannot be read: {why}", calendar.name()))
            })
    }

    /// The job's effective definition, as replicas compare it (config
    /// drift): everything that decides when, where and how it runs, with
    /// `[defaults]` applied. Not where it is in the file, and not where its
    /// notifications go (their secrets may differ per host).
    pub(crate) fn definition(&self) -> String {
        format!(
            "name={:?} schedule={:?} zone={} jitter={} enabled={} run_on={:?} command={:?} env={:?} \
             working_dir={:?} user={:?} group={:?} lock_at_most_for={:?} lock_at_least_for={:?} \
             timeout={:?} kill_grace={:?} catch_up={:?} output_limit={} retries={} \
             retry_backoff={:?} missed_after={:?} locks={:?} params={:?} limits={:?} overlap={}{}{}{}{}{}{}{}",
            self.name,
            self.schedule.expression(),
            self.schedule.zone(),
            self.schedule.jitter().num_milliseconds(),
            self.enabled,
            self.run_on,
            self.command,
            self.env,
            self.working_dir,
            self.run_as.as_ref().map(|r| &r.user),
            self.run_as.as_ref().and_then(|r| r.group.as_ref()),
            self.lock_at_most_for,
            self.lock_at_least_for,
            self.timeout,
            self.kill_grace,
            self.catch_up,
            self.output_limit,
            self.retries,
            self.retry_backoff,
            self.missed_after,
            self.locks,
            self.params
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            self.limits
                .iter()
                .map(|l| format!("{}={}", l.name, l.max_running))
                .collect::<Vec<_>>(),
            self.overlap,
            // Only where set: a job without them compares as before.
            // (A dependent job's parents are in its schedule's expression.)
            if *self.schedule.rules() == crate::schedule::Rules::default() {
                String::new()
            } else {
                format!(" rules={:?}", self.schedule.rules())
            },
            self.after
                .as_ref()
                .map_or_else(String::new, |after| format!(" on={:?}", after.on)),
            if self.priority == 0 {
                String::new()
            } else {
                format!(" priority={}", self.priority)
            },
            // Where each secret is read from, never its value.
            if self.secret_env.is_empty() {
                String::new()
            } else {
                let sources: Vec<String> = self
                    .secret_env
                    .iter()
                    .map(|(name, source)| format!("{name}={source}"))
                    .collect();
                format!(" secret_env={sources:?}")
            },
            if self.on_abandon == OnAbandon::Record {
                String::new()
            } else {
                format!(" on_abandon={}", self.on_abandon)
            },
            if self.exit_codes.is_default() {
                String::new()
            } else {
                format!(" exit_codes={:?}", self.exit_codes)
            },
            if self.resources.is_empty() {
                String::new()
            } else {
                format!(" {}", self.resources)
            },
        )
    }
}

/// What an instant that comes while the job's run is going does
/// (`overlap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Overlap {
    /// An overrun: not run.
    #[default]
    Skip,
    /// It waits for the run to end (at most one instant waits).
    Queue,
    /// The running run is stopped, and the instant runs once it is.
    Replace,
    /// Up to this many runs of the job at once.
    Allow(u32),
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overlap::Skip => f.write_str("skip"),
            Overlap::Queue => f.write_str("queue"),
            Overlap::Replace => f.write_str("replace"),
            Overlap::Allow(n) => write!(f, "allow {n}"),
        }
    }
}

/// What becomes of an instant whose run's holder died, or lost its lease,
/// mid-run (`on_abandon`): the run is marked `abandoned` by the job's next
/// claimant either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum OnAbandon {
    /// It stays abandoned, and is notified: at most once.
    #[default]
    Record,
    /// The replica that marks it runs the instant again, as its next
    /// attempt under a new lease, up to `max(retries, 1)` times: at least
    /// once.
    Rerun,
}

impl OnAbandon {
    /// The policy named `name` in the job file.
    pub(crate) fn parse(name: &str) -> Option<OnAbandon> {
        match name {
            "record" => Some(OnAbandon::Record),
            "rerun" => Some(OnAbandon::Rerun),
            _ => None,
        }
    }
}

impl fmt::Display for OnAbandon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnAbandon::Record => f.write_str("record"),
            OnAbandon::Rerun => f.write_str("rerun"),
        }
    }
}

/// Where a job's instants run (`run_on`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum RunOn {
    /// On one replica per instant, through the job's lease.
    #[default]
    One,
    /// On each replica at each instant, with no fleet lease (per-host
    /// work: log rotation, a local cache); never beside itself on a host.
    Every,
}

/// A job's `user` and `group`: its runs drop to this user, with its
/// supplementary groups, home, `USER`, `LOGNAME` and `HOME`, before they
/// exec (as `/etc/crontab` and `cron.d` lines do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunAs {
    /// A user name or numeric id.
    pub(crate) user: String,
    /// A group name or numeric id; the user's primary group if unset.
    pub(crate) group: Option<String>,
    /// The line of `user` in the job file, for errors.
    pub(crate) line: Option<usize>,
}

/// The environment variable that names the job file, for every command's
/// `--config`.
pub(crate) const CONFIG_ENV: &str = "REPLICRON_CONFIG";
/// The job file when neither `--config` nor `REPLICRON_CONFIG` names one.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "/etc/replicron/jobs.toml";

/// Overrides `[database] pool_size`.
pub(crate) const POOL_SIZE_ENV: &str = "REPLICRON_POOL_SIZE";
/// Overrides `[daemon] shutdown_grace`.
pub(crate) const SHUTDOWN_GRACE_ENV: &str = "REPLICRON_SHUTDOWN_GRACE";
/// Overrides `[daemon] metrics_listen`.
pub(crate) const METRICS_LISTEN_ENV: &str = "REPLICRON_METRICS_LISTEN";
/// Overrides `[daemon] history_retention`.
pub(crate) const HISTORY_RETENTION_ENV: &str = "REPLICRON_HISTORY_RETENTION";

/// Every environment variable that overrides a `[database]` or `[daemon]`
/// key, with the key: one file can serve replicas that differ only here
/// (their metrics ports, say). These, and [`CONFIG_ENV`], are replicron's
/// own settings and are never passed on to jobs.
pub(crate) const ENV_OVERRIDES: [(&str, &str); 5] = [
    (DATABASE_URL_ENV, "[database] url"),
    (POOL_SIZE_ENV, "[database] pool_size"),
    (SHUTDOWN_GRACE_ENV, "[daemon] shutdown_grace"),
    (METRICS_LISTEN_ENV, "[daemon] metrics_listen"),
    (HISTORY_RETENTION_ENV, "[daemon] history_retention"),
];

/// replicron's own settings in its environment (the database URL and its
/// password among them), which no job and no notifier command inherits.
pub(crate) fn daemon_env_vars() -> impl Iterator<Item = &'static str> {
    ENV_OVERRIDES
        .iter()
        .map(|(var, _)| *var)
        .chain([CONFIG_ENV])
}

/// `[database] pool_size` unless set.
pub(crate) const DEFAULT_POOL_SIZE: u32 = 8;
/// `[daemon] shutdown_grace` unless set.
pub(crate) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// `[daemon] history_retention` unless set.
pub(crate) const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// Where the config is read in: the environment's overrides of
/// [`ENV_OVERRIDES`], which win over the file.
#[derive(Clone, Debug, Default)]
pub(crate) struct Environment {
    values: BTreeMap<&'static str, String>,
}

impl Environment {
    /// Reads the overrides from the process environment; an empty variable
    /// counts as unset.
    pub(crate) fn from_process() -> Self {
        let mut env = Environment::default();
        for (var, _) in ENV_OVERRIDES {
            if let Ok(value) = std::env::var(var) {
                env = env.with(var, value);
            }
        }
        env
    }

    /// This environment with `var` (one of [`ENV_OVERRIDES`]) set to `value`.
    pub(crate) fn with(mut self, var: &'static str, value: impl Into<String>) -> Self {
        let value = value.into();
        if !value.trim().is_empty() {
            self.values.insert(var, value);
        }
        self
    }

    /// The value of `var`, if set.
    pub(crate) fn get(&self, var: &str) -> Option<&str> {
        self.values.get(var).map(String::as_str)
    }
}

/// One problem found in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Diagnostic {
    /// The included file it is in; `None`: the job file itself.
    pub(crate) file: Option<PathBuf>,
    /// 1-based line of the offending value, where it has one.
    pub(crate) line: Option<usize>,
    /// The job, by name (or by position when it has no usable name).
    pub(crate) job: Option<String>,
    /// The key, with its table for keys outside a job (`defaults.timeout`).
    pub(crate) key: Option<String>,
    /// What is wrong.
    pub(crate) message: String,
}

/// A job written `at` an instant already past by more than its `catch_up`
/// when the file was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PastInstant {
    /// The job.
    pub(crate) job: String,
    /// Its instant.
    pub(crate) instant: chrono::DateTime<chrono::Utc>,
    /// The error it is, where the database does not excuse it.
    pub(crate) problem: Diagnostic,
}

/// Everything wrong with a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfigError {
    /// The file.
    pub(crate) path: PathBuf,
    /// Each problem, in file order.
    pub(crate) diagnostics: Vec<Diagnostic>,
}

impl Diagnostic {
    /// The order problems are told in: the job file's first, then each
    /// included file's, each by line.
    pub(crate) fn order(a: &Diagnostic, b: &Diagnostic) -> std::cmp::Ordering {
        (&a.file, a.line.unwrap_or(0)).cmp(&(&b.file, b.line.unwrap_or(0)))
    }

    /// `FILE:LINE: job J, key K: message`, as each problem is printed.
    pub(crate) fn located(&self, path: &Path) -> String {
        let mut text = self.file.as_deref().unwrap_or(path).display().to_string();
        if let Some(line) = self.line {
            text.push_str(&format!(":{line}"));
        }
        text.push_str(": ");
        match (&self.job, &self.key) {
            (Some(job), Some(key)) => text.push_str(&format!("job {job}, key {key:?}: ")),
            (Some(job), None) => text.push_str(&format!("job {job}: ")),
            (None, Some(key)) => text.push_str(&format!("key {key:?}: ")),
            (None, None) => {}
        }
        text.push_str(&self.message);
        text
    }
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
            write!(f, "{}", diagnostic.located(&self.path))?;
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
    pub(crate) fn load(path: &Path, env: &Environment) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            diagnostics: vec![Diagnostic {
                file: None,
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
    pub(crate) fn parse(path: &Path, text: &str, env: &Environment) -> Result<Config, ConfigError> {
        let (config, diagnostics) = check::check(path, text, env);
        match config {
            Some(config) if diagnostics.is_empty() => Ok(config),
            _ => Err(ConfigError {
                path: path.to_path_buf(),
                diagnostics,
            }),
        }
    }

    /// The enabled jobs.
    pub(crate) fn enabled_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.iter().filter(|job| job.enabled)
    }

    /// The enabled jobs that are not held: those the daemon runs.
    pub(crate) fn runnable_jobs(&self) -> impl Iterator<Item = &Job> {
        self.enabled_jobs().filter(|job| job.held().is_none())
    }

    /// What can be read of the file at `path` for a command that needs
    /// only the database (`status`, `history`, `pause`, …): the whole
    /// config if it is valid; otherwise the part that is (the database
    /// and the jobs that could be read), its errors moved to its
    /// warnings. With TOML that cannot be read, or no file at all, only
    /// the database `REPLICRON_DATABASE_URL` names. `Err` where no
    /// database can be found.
    pub(crate) fn load_for_database(path: &Path, env: &Environment) -> Result<Config, ConfigError> {
        let error = match Config::load(path, env) {
            Ok(config) => return Ok(config),
            Err(error) => error,
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let partial = check::check(path, &text, env)
            .0
            .or_else(|| check::check(path, "", env).0);
        let Some(mut partial) = partial else {
            return Err(error);
        };
        partial.warnings.extend(error.diagnostics);
        partial.warnings.sort_by(Diagnostic::order);
        partial.warnings.dedup();
        partial.broken = true;
        Ok(partial)
    }

    /// The file the job called `name` is written in: the job file, or the
    /// included file it came from.
    pub(crate) fn job_file(&self, name: &str) -> &Path {
        self.job_files
            .get(name)
            .map_or(&self.path, PathBuf::as_path)
    }

    /// The job called `name`.
    pub(crate) fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|job| job.name == name)
    }

    /// Refuses the file if an enabled job is written `at` an instant
    /// already past by more than its `catch_up`, unless `seen` says the
    /// fleet knew the job before that instant or has a run of it recorded
    /// (the instant ran, or was recorded missed, and the job has ended):
    /// such a job would never run. `seen` answers from the database.
    pub(crate) fn refuse_past_instants(
        &self,
        mut seen: impl FnMut(&str, chrono::DateTime<chrono::Utc>) -> bool,
    ) -> Result<(), ConfigError> {
        let mut diagnostics: Vec<Diagnostic> = self
            .past_instants
            .iter()
            .filter(|past| self.job(&past.job).is_some_and(|job| job.enabled))
            .filter(|past| !seen(&past.job, past.instant))
            .map(|past| past.problem.clone())
            .collect();
        if diagnostics.is_empty() {
            return Ok(());
        }
        diagnostics.sort_by(Diagnostic::order);
        Err(ConfigError {
            path: self.path.clone(),
            diagnostics,
        })
    }
}

/// The lease row of shared lock NAME is `replicron.lock.NAME`.
pub(crate) const LOCK_ROW_PREFIX: &str = "replicron.lock.";

/// The lease rows of limit NAME's slots are `replicron.limit.NAME.1` to
/// `replicron.limit.NAME.N`.
pub(crate) const LIMIT_ROW_PREFIX: &str = "replicron.limit.";

/// The most runs of one job `overlap = "allow"` may let run at once.
pub(crate) const MAX_CONCURRENT: u32 = 1000;

/// The most runs a limit may let run at once.
pub(crate) const MAX_LIMIT_RUNNING: u32 = 1000;

/// A limit across jobs (`[[limit]]`): at most `max_running` runs of the
/// jobs that take it run at once, fleet-wide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Limit {
    /// Its name, as jobs' `limits` write it.
    pub(crate) name: String,
    /// How many runs of its jobs may run at once.
    pub(crate) max_running: u32,
}

impl Limit {
    /// The lease rows of its slots.
    pub(crate) fn rows(&self) -> Vec<String> {
        (1..=self.max_running)
            .map(|slot| format!("{LIMIT_ROW_PREFIX}{}.{slot}", self.name))
            .collect()
    }
}

/// Lease names with this prefix are replicron's own (history retention).
pub(crate) const RESERVED_PREFIX: &str = "replicron.";

/// The most retries a job may ask for.
pub(crate) const MAX_RETRIES: u32 = 100;

/// `lock_at_most_for` unless set.
pub(crate) const DEFAULT_LOCK_AT_MOST_FOR: Duration = Duration::from_secs(600);
/// `lock_at_least_for` unless set.
pub(crate) const DEFAULT_LOCK_AT_LEAST_FOR: Duration = Duration::ZERO;
/// `timeout` unless set.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
/// `kill_grace` unless set.
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);
/// `catch_up` unless set: off.
pub(crate) const DEFAULT_CATCH_UP: Duration = Duration::ZERO;
/// `output_limit` unless set.
pub(crate) const DEFAULT_OUTPUT_LIMIT: u64 = 64 * 1024;
/// `[daemon] output_dir` unless set: under the package's and the image's
/// state folder.
pub(crate) const DEFAULT_OUTPUT_DIR: &str = "/var/lib/replicron/output";
/// `output_retention` unless set.
pub(crate) const DEFAULT_OUTPUT_RETENTION: Duration = Duration::from_secs(14 * 86_400);
/// `output_max` unless set.
pub(crate) const DEFAULT_OUTPUT_MAX: u64 = 1 << 30;
/// The most `output_limit` may be.
pub(crate) const MAX_OUTPUT_LIMIT: u64 = 16 * 1024 * 1024;
/// `shell` unless set.
pub(crate) const DEFAULT_SHELL: &str = "/bin/sh";
/// `retries` unless set.
pub(crate) const DEFAULT_RETRIES: u32 = 0;
/// `retry_backoff` unless set.
pub(crate) const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(10);
