//! The command line: the arguments every command shares (one `--config`),
//! logging, the runtime helper, and one file per command. Errors end here:
//! they are printed with their whole chain and mapped to the exit status
//! (0 success, 1 runtime failure, 2 invalid usage or config).

mod audit;
mod backfill;
mod check;
mod exec;
mod history;
mod import;
mod man;
mod migrate;
pub(crate) mod pause;
mod run;
pub(crate) mod status;
mod table;
mod trigger;
mod unlock;
mod verify;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{Config, ConfigError, Environment};
use crate::db::Pool;
use crate::history::RunStatus;
use crate::schedule::SystemClock;
use crate::scheduler::Outcome;

/// A cron daemon for replicated services: each scheduled instant runs once
/// across all replicas.
#[derive(Debug, Parser)]
#[command(name = "replicron", version, about, long_about = None)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// The command.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the daemon in the foreground.
    Run(run::RunArgs),
    /// Validate the config and print each job's next instants.
    Check(check::CheckArgs),
    /// Apply pending database migrations.
    Migrate(ConfigArg),
    /// Show each job's next instant, lease holder, last run, and stuck leases,
    /// and the database's settings that can lose a claim.
    Status(status::StatusArgs),
    /// List recorded runs, newest first.
    History(history::HistoryArgs),
    /// List operator actions (the audit log), newest first.
    Audit(audit::AuditArgs),
    /// Run JOB once now, through its lease, on this host.
    Trigger(trigger::JobArgs),
    /// Run every instant of JOB in a past range once, in order.
    Backfill(backfill::BackfillArgs),
    /// End JOB's lease (the operator's tool for a stuck lease).
    Unlock(unlock::UnlockArgs),
    /// Pause JOB on every replica, until resumed or --until.
    Pause(pause::PauseArgs),
    /// Resume a paused JOB on every replica.
    Resume(pause::ResumeArgs),
    /// Check the history against the job file: every instant due ran once or
    /// is accounted for.
    Verify(verify::VerifyArgs),
    /// Run a command while holding a lease: a distributed flock(1).
    Exec(exec::ExecArgs),
    /// Print crontabs (files or folders) as one replicron TOML.
    ImportCrontab(import::ImportArgs),
    /// Print a shell completion script.
    Completions(CompletionArgs),
    /// Print the man page.
    Man(ManArgs),
    /// Kill the daemon's jobs when it dies (started by the daemon, not by people).
    #[command(hide = true)]
    Guard,
}

/// `man`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {
    /// Print the job file's keys as Markdown instead (the book's configuration reference).
    #[arg(long)]
    keys_markdown: bool,
}

/// `--config FILE`, shared by every command that reads the job file.
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArg {
    /// The job file.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        env = crate::config::CONFIG_ENV,
        default_value = crate::config::DEFAULT_CONFIG_PATH
    )]
    pub(crate) config: PathBuf,
}

impl std::ops::Deref for ConfigArg {
    type Target = PathBuf;

    fn deref(&self) -> &PathBuf {
        &self.config
    }
}

/// Arguments of `completions`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompletionArgs {
    /// The shell.
    pub(crate) shell: clap_complete::Shell,
}

fn parse_wait(text: &str) -> Result<std::time::Duration, String> {
    crate::config::parse_duration(text, crate::config::Zero::Allowed)
}

/// How listings are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// JSON for programs.
    Json,
}

fn parse_status(text: &str) -> Result<RunStatus, String> {
    text.parse()
}

fn parse_rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    let at = DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{e}: expected RFC 3339, such as 2027-03-28T00:00:00Z"))?;
    crate::db::clock::storable(at)?;
    Ok(at)
}

/// The status the process ends with: 0 success, 1 runtime failure, 2
/// invalid usage or config, or a run's own exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitCode(pub(crate) u8);

impl ExitCode {
    /// Exit status 0.
    pub const SUCCESS: ExitCode = ExitCode(0);
}

impl From<u8> for ExitCode {
    fn from(code: u8) -> Self {
        ExitCode(code)
    }
}

/// Ends the process with `code`, once stdout and stderr are flushed.
///
/// libpq keeps per-thread OpenSSL and Kerberos state whose destructors run as
/// each thread that used a connection ends, and `exit` runs those libraries'
/// atexit clean-up: when a runtime thread is still ending while the main
/// thread exits, the two race and the process dies of SIGSEGV after its work
/// is done (reproduced by a loop that queries PostgreSQL over TLS from a
/// runtime's blocking threads and returns from `main`: about one exit in
/// four crashed; none with this exit). By the time this is called every run is
/// recorded, the output is flushed below and the pools are closed, so the
/// process ends without running the atexit handlers.
pub fn exit(code: ExitCode) -> ! {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    #[expect(
        unsafe_code,
        reason = "the only way to end without the atexit handlers"
    )]
    // SAFETY: `_exit` takes no pointers and ends the process at once; Rust's
    // buffered standard streams were flushed above.
    unsafe {
        libc::_exit(i32::from(code.0))
    }
}

/// Entry point of the binary; the caller ends the process with [`exit`].
pub fn main() -> ExitCode {
    // As PID 1, a fork before anything else: the parent stays PID 1, to
    // reap orphans and pass signals on; the child goes on as the command.
    crate::runner::pid1::init_if_pid1();
    // The guard before anything else: it is meant to stay small, and the
    // argument parser alone would touch a megabyte of code and heap.
    let mut args = std::env::args_os().skip(1);
    if let (Some(command), None) = (args.next(), args.next())
        && command == crate::runner::GUARD_COMMAND
    {
        crate::runner::guard();
        return ExitCode::SUCCESS;
    }
    // No other thread exists yet: nothing before has started one.
    let protected = crate::secrets::protect();
    let cli = Cli::parse();
    // The daemon's guard, forked while this process is small and alone
    // (and after the environment block is scrubbed: it shares the block).
    if matches!(cli.command, Command::Run(_))
        && let Err(e) = crate::runner::fork_early_guard()
    {
        eprintln!("replicron: cannot fork the guard process ({e}); it is started later");
    }
    if !matches!(
        cli.command,
        Command::Run(_) | Command::Exec(_) | Command::Backfill(_) | Command::Trigger(_)
    ) {
        end_on_closed_pipe();
    }
    // The daemon tells what it does; a one-off command speaks only of trouble.
    let default_level = if matches!(cli.command, Command::Run(_)) {
        "info"
    } else {
        "warn"
    };
    // Traces of runs, for the commands that run jobs: `[telemetry]` is read
    // here (the file is read again, and its errors told, by the command).
    let telemetry = match &cli.command {
        Command::Run(run::RunArgs { config, .. })
        | Command::Exec(exec::ExecArgs { config, .. }) => {
            Config::load(config, &Environment::from_process())
                .map(|c| c.telemetry)
                .unwrap_or_default()
        }
        _ => Default::default(),
    };
    if let Err(problem) = init_logging(cli.log_format, default_level, &telemetry) {
        eprintln!("replicron: traces: {problem}");
        return ExitCode::from(2);
    }
    for problem in &protected.problems {
        tracing::warn!("{problem}");
    }
    if !protected.credentials.is_empty() && matches!(cli.command, Command::Run(_)) {
        tracing::info!(
            "read from systemd credentials (never passed on to jobs): {}",
            protected.credentials.join(", ")
        );
    }
    match dispatch(cli) {
        Ok(code) => code,
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("replicron: {error:#}");
            if error.downcast_ref::<ConfigError>().is_some()
                || error.downcast_ref::<UsageError>().is_some()
            {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// A command whose reader goes away (`replicron history | head`) ends
/// quietly, as `ls | head` does: SIGPIPE's default action, which Rust's
/// runtime replaces with an error that `println!` turns into a panic. Not
/// for the commands that run jobs while they print (the daemon, `exec`,
/// `backfill`, `trigger`): those must record their runs whoever reads
/// them, and a notification command that does not read the output on its
/// stdin must not end them.
fn end_on_closed_pipe() {
    #[expect(
        unsafe_code,
        reason = "signal(2) is how a signal's default action is restored"
    )]
    // SAFETY: no other thread exists yet, and SIG_DFL installs no handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Output cut short by its reader (`replicron man | head`) is no failure.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// The libraries whose debug and trace lines may hold a secret.
const QUIET_TARGETS: [&str; 4] = ["ureq", "ureq_proto", "rustls", "opentelemetry_otlp"];

/// Log lines to stderr, filtered by `RUST_LOG`; with traces configured,
/// the runs' spans to OpenTelemetry too, whatever `RUST_LOG` says.
fn init_logging(
    format: LogFormat,
    default_level: &str,
    telemetry: &crate::config::TelemetryConfig,
) -> Result<(), String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // The HTTP client logs whole URLs at debug (a webhook's, with its
    // ${SECRET} filled in) and headers at trace (the OTLP receiver's API
    // key): never below info, whatever RUST_LOG asks.
    for quiet in QUIET_TARGETS {
        if let Ok(directive) = format!("{quiet}=info").parse() {
            filter = filter.add_directive(directive);
        }
    }
    let traces = crate::telemetry::traces::layer(telemetry)?;
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.with_ansi(colour_wanted()).boxed(),
        // A run's span fields (job, instant, fence, run id, attempt) at
        // the top level of each line, as the line's own fields are.
        LogFormat::Json => logs
            .with_ansi(false)
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(crate::telemetry::logs::FlatJson)
            .boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(traces)
        .with(logs.with_filter(filter))
        .try_init();
    Ok(())
}

/// Colour only for a person at a terminal: never into a file, a pipe or
/// the journal, and never when `NO_COLOR` is set (no-color.org).
fn colour_wanted() -> bool {
    use std::io::IsTerminal as _;
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

/// Reads the job file; what is wrong but stops nothing is logged.
fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    let config = Config::load(path, &Environment::from_process())?;
    warn_of(&config);
    Ok(config)
}

/// Reads the job file for a command that needs only the database: a
/// broken file is logged, with each of its errors, and the command goes on
/// with what could be read ([`Config::load_for_database`]).
fn load_for_database(path: &std::path::Path) -> anyhow::Result<Config> {
    let config = Config::load_for_database(path, &Environment::from_process())?;
    if config.broken {
        tracing::warn!(
            "{}: the job file has errors; going on with its database and the jobs that could be read",
            path.display()
        );
    }
    warn_of(&config);
    Ok(config)
}

/// Refuses `config` where a job of it is written `at` an instant already
/// past by more than its `catch_up` and the database does not show that
/// the fleet had the job before it ([`Config::refuse_past_instants`]). A
/// database that cannot be read shows nothing: the instant is refused.
fn refuse_past_instants(config: &Config) -> anyhow::Result<()> {
    if config.past_instants.is_empty() {
        return Ok(());
    }
    let url = &config.database.url;
    // `check` creates no SQLite file: none is a database that knows nothing.
    let absent = url.backend() == crate::db::Backend::Sqlite
        && !std::path::Path::new(url.connection_string()).exists();
    let mut conn = if absent {
        None
    } else {
        crate::db::establish(url).ok()
    };
    config.refuse_past_instants(|job, instant| {
        conn.as_mut()
            .is_some_and(|conn| crate::lease::knew_before(conn, job, instant).unwrap_or(false))
    })?;
    Ok(())
}

/// Logs the config's warnings, each with its file and line.
pub(crate) fn warn_of(config: &Config) {
    for warning in &config.warnings {
        tracing::warn!("{}", warning.located(&config.path));
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check(args) => check::check(&args),
        Command::Migrate(args) => migrate::migrate(&args),
        Command::Run(args) => run::run(&args),
        Command::History(args) => history::history(&args),
        Command::Audit(args) => audit::audit(&args),
        Command::Status(args) => status::status(&args),
        Command::Trigger(args) => trigger::trigger(&args),
        Command::Backfill(args) => backfill::backfill(&args),
        Command::Unlock(args) => unlock::unlock(&args),
        Command::Pause(args) => pause::pause(&args),
        Command::Resume(args) => pause::resume(&args),
        Command::Exec(args) => exec::exec(&args),
        Command::Verify(args) => verify::verify(&args),
        Command::ImportCrontab(args) => import::import_crontab(&args),
        Command::Completions(args) => {
            use clap::CommandFactory as _;
            let mut script = Vec::new();
            clap_complete::generate(args.shell, &mut Cli::command(), "replicron", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(args) => {
            use clap::CommandFactory as _;
            let text = if args.keys_markdown {
                man::keys_markdown()
            } else {
                man::render(&Cli::command())
            };
            std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Guard => {
            crate::runner::guard();
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens a one-connection pool for a command that reads or writes a little.
/// Such a command never changes the schema: an unmigrated database (or a
/// SQLite file that does not exist) is an error that says to migrate.
fn open_for_command(config: &Config) -> anyhow::Result<Pool> {
    let url = &config.database.url;
    if url.backend() == crate::db::Backend::Sqlite
        && !std::path::Path::new(url.connection_string()).exists()
    {
        anyhow::bail!(
            "no database at {url}: run `replicron migrate --config {}` (or start `replicron run`) first",
            config.path.display()
        );
    }
    let pool = Pool::connect(url, 1, Arc::new(SystemClock))?;
    crate::db::migrate::check_migrated(&mut *pool.get()?)
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    Ok(pool)
}

/// A mistake in how a command was called: exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(String);

fn find_job<'c>(config: &'c Config, name: &str) -> anyhow::Result<&'c crate::config::Job> {
    config.job(name).ok_or_else(|| {
        UsageError(format!("{}: no job named {name:?}", config.path.display())).into()
    })
}

/// For an action on a job's lease row (`pause`, `resume`): the job must be
/// in the file. In a broken file, a job whose definition is among its
/// errors counts, and any job does where no job could be read at all.
fn expect_job(config: &Config, name: &str) -> anyhow::Result<()> {
    let label = format!("{name:?}");
    let named = |job: &str| {
        config
            .warnings
            .iter()
            .any(|w| w.job.as_deref() == Some(job))
    };
    if config.broken
        && (named(&label)
            || (config.jobs.is_empty() && !config.warnings.iter().any(|w| w.job.is_some())))
    {
        return Ok(());
    }
    find_job(config, name).map(|_| ())
}

/// A job that runs from the command line (`trigger`, `backfill`) must not
/// be held: its calendar could not be read.
fn runnable<'c>(config: &'c Config, name: &str) -> anyhow::Result<&'c crate::config::Job> {
    let job = find_job(config, name)?;
    match job.held() {
        Some(why) => Err(ConfigError {
            path: config.path.clone(),
            diagnostics: vec![crate::config::Diagnostic {
                file: None,
                line: None,
                job: Some(format!("{name:?}")),
                key: None,
                message: format!("held, not run: {why}"),
            }],
        }
        .into()),
        None => Ok(job),
    }
}

/// A runtime for a command, with SIGINT/SIGTERM stopping what it runs.
fn command_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// How long a command that ran a job waits, before it exits, for the
/// history writes still queued.
const JOURNAL_FLUSH: std::time::Duration = std::time::Duration::from_secs(10);
/// How long it then waits for the job's notifications (each delivery has
/// its own `timeout` and retries; this bounds them all, as the daemon's
/// stop does).
const NOTIFY_FLUSH: std::time::Duration = std::time::Duration::from_secs(15);

/// Before a command that ran `job` exits: its history written, then its
/// notifications sent, each within its bound; what is left is logged.
async fn flush_before_exit(engine: &crate::scheduler::engine::Engine, job: &str) {
    let unwritten = engine.journal.flush(JOURNAL_FLUSH).await;
    for write in &unwritten {
        tracing::error!("history write not recorded before exit: {write}");
    }
    let unsent = engine.notifier.flush(NOTIFY_FLUSH).await;
    if unsent > 0 {
        tracing::error!(
            "{unsent} notification(s) of {job} not sent before exit: their webhook or command did not answer within {}",
            humantime::format_duration(NOTIFY_FLUSH)
        );
    }
}

/// An engine for a command that runs `job` from this host: the job's
/// notifications are sent, as the daemon sends them.
fn one_off_engine_for(
    pool: Pool,
    grace: std::time::Duration,
    job: &crate::config::Job,
) -> Result<Arc<crate::scheduler::engine::Engine>, crate::Error> {
    let engine = run::one_off_engine(pool, grace)?;
    engine
        .notifier
        .set_jobs([(&*job.name, job.notify.as_ref())]);
    Ok(engine)
}

fn exit_code_of(outcome: Option<&Outcome>) -> ExitCode {
    match outcome {
        Some(Outcome {
            status: RunStatus::Succeeded,
            ..
        }) => ExitCode::SUCCESS,
        // Skipped by its exit code (skip_exit_codes): nothing to do.
        Some(Outcome {
            status, exit_code, ..
        }) if crate::config::exit_codes::skipped_by_code(*status, *exit_code) => ExitCode::SUCCESS,
        Some(Outcome {
            status: RunStatus::Failed,
            exit_code: Some(code),
            ..
        }) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1).max(1)),
        _ => ExitCode::from(1),
    }
}

fn describe(outcome: Option<&Outcome>) -> String {
    match outcome {
        Some(o) => match o.exit_code {
            Some(code) => format!("{} (exit {code})", o.status),
            // Could not start: the output says why (no such command, …).
            None if o.status == RunStatus::Error => {
                format!(
                    "{}: {}",
                    o.status,
                    o.output.trim().trim_start_matches("replicron: ")
                )
            }
            None => o.status.to_string(),
        },
        None => "not started: its start could not be recorded".to_string(),
    }
}

#[cfg(test)]
mod tests;
