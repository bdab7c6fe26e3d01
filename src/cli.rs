//! The command line: argument parsing, logging set-up, and one function per
//! subcommand. Errors end here: they are printed with their whole chain and
//! mapped to the exit status (0 success, 1 runtime failure, 2 invalid usage
//! or config).

use std::path::PathBuf;

use anyhow::Context as _;
use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Parser, Subcommand, ValueEnum};

use std::sync::Arc;

use crate::config::{Config, ConfigError, Environment};
use crate::daemon;
use crate::db::Pool;
use crate::history::{self, RunFilter, RunRecord, RunStatus};
use crate::lease;
use crate::schedule::SystemClock;
use crate::telemetry::{self, Liveness};

/// A cron daemon for replicated services: each scheduled instant runs once
/// across all replicas.
#[derive(Debug, Parser)]
#[command(name = "replicron", version, about, long_about = None)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground.
    Run(RunArgs),
    /// Validate the config and print each job's next instants.
    Check(CheckArgs),
    /// Apply pending database migrations.
    Migrate(ConfigArg),
    /// Show each job's next instant, lease holder, last run, and stuck leases.
    Status(StatusArgs),
    /// List recorded runs, newest first.
    History(HistoryArgs),
    /// Run JOB once now, through its lease, on this host.
    Trigger(JobArgs),
    /// End JOB's lease (the operator's tool for a stuck lease).
    Unlock(UnlockArgs),
    /// Run a command while holding a lease: a distributed flock(1).
    Exec(ExecArgs),
    /// Print crontabs (files or folders) as one replicron TOML.
    ImportCrontab(ImportArgs),
    /// Print a shell completion script.
    Completions(CompletionArgs),
    /// Print the man page.
    Man,
    /// Kill the daemon's jobs when it dies (started by the daemon, not by people).
    #[command(hide = true)]
    Guard,
}

/// `--config FILE`, shared by every command that reads the job file.
#[derive(Debug, clap::Args)]
pub struct ConfigArg {
    /// The job file.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        env = crate::config::CONFIG_ENV,
        default_value = crate::config::DEFAULT_CONFIG_PATH
    )]
    pub config: PathBuf,
}

impl std::ops::Deref for ConfigArg {
    type Target = PathBuf;

    fn deref(&self) -> &PathBuf {
        &self.config
    }
}

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job file.
    #[command(flatten)]
    pub config: ConfigArg,
    /// This replica's id in leases and history; unique per process.
    /// Default: `<hostname>:<pid>:<random>`.
    #[arg(long, value_name = "ID")]
    pub instance_id: Option<String>,
}

/// Arguments of `check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The job file.
    #[command(flatten)]
    pub config: ConfigArg,
    /// List instants after this time (RFC 3339). Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_rfc3339)]
    pub from: Option<DateTime<Utc>>,
    /// How many instants to list per job.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub count: usize,
}

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The job file.
    #[command(flatten)]
    pub config: ConfigArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

/// `--config FILE JOB`.
#[derive(Debug, clap::Args)]
pub struct JobArgs {
    /// The job file.
    #[command(flatten)]
    pub config: ConfigArg,
    /// The job.
    pub job: String,
}

/// Arguments of `unlock`.
#[derive(Debug, clap::Args)]
pub struct UnlockArgs {
    /// The job file.
    #[command(flatten)]
    pub config: ConfigArg,
    /// The job (or `exec` lock) whose lease to end.
    pub job: String,
    /// End it even though its holder's run is still recorded `running`
    /// (the holder then loses the lease and stops that run).
    #[arg(long)]
    pub force: bool,
}

/// Arguments of `exec`.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The job file.
    #[command(flatten)]
    pub config: ConfigArg,
    /// The lease to hold; runs are recorded in history under this name.
    #[arg(long, value_name = "NAME")]
    pub lock: String,
    /// Give up if the lease is not had within this long (default: wait).
    #[arg(long, value_name = "DUR", value_parser = parse_wait)]
    pub wait: Option<std::time::Duration>,
    /// Run at most once per KEY across the fleet; later callers wait for
    /// that run and exit with its status.
    #[arg(long, value_name = "KEY")]
    pub once: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Arguments of `import-crontab`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// Crontab files (`-` for stdin) and folders such as /etc/cron.d/ (every
    /// file in it that cron reads), merged into one config.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Lines name a user after the schedule (`/etc/crontab`, `/etc/cron.d`);
    /// by default each file's own lines tell, and guesses are reported.
    #[arg(long, value_name = "BOOL")]
    pub user_column: Option<bool>,
}

/// Arguments of `completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell.
    pub shell: clap_complete::Shell,
}

fn parse_wait(text: &str) -> Result<std::time::Duration, String> {
    crate::config::parse_duration(text, crate::config::Zero::Allowed)
}

/// Arguments of `history`.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// The job file.
    #[command(flatten)]
    pub config: ConfigArg,
    /// Only this job's runs.
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Only runs with this status (running, succeeded, failed, timed_out,
    /// lost_lock, killed, abandoned, error).
    #[arg(long, value_name = "STATUS", value_parser = parse_status)]
    pub status: Option<RunStatus>,
    /// Only the `exec --once` runs of this KEY.
    #[arg(long, value_name = "KEY")]
    pub once_key: Option<String>,
    /// At most this many runs.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: u32,
    /// Output format; `json` is an array of objects with the columns of
    /// `replicron_runs`, output included.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

/// How listings are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// JSON for programs.
    Json,
}

fn parse_status(text: &str) -> Result<RunStatus, String> {
    text.parse()
}

fn parse_rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{e}: expected RFC 3339, such as 2027-03-28T00:00:00Z"))
}

/// The status the process ends with: 0 success, 1 runtime failure, 2
/// invalid usage or config, or a run's own exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitCode(pub u8);

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
    let cli = Cli::parse();
    if let Command::Guard = cli.command {
        crate::runner::guard();
        return ExitCode::SUCCESS;
    }
    // The daemon tells what it does; a one-off command speaks only of trouble.
    let default_level = if matches!(cli.command, Command::Run(_)) {
        "info"
    } else {
        "warn"
    };
    init_logging(cli.log_format, default_level);
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

/// Output cut short by its reader (`replicron man | head`) is no failure.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(colour_wanted()).try_init(),
        LogFormat::Json => builder
            .with_ansi(false)
            .json()
            .flatten_event(true)
            .try_init(),
    };
}

/// Colour only for a person at a terminal: never into a file, a pipe or
/// the journal, and never when `NO_COLOR` is set (no-color.org).
fn colour_wanted() -> bool {
    use std::io::IsTerminal as _;
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    Ok(Config::load(path, &Environment::from_process())?)
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check(args) => check(&args),
        Command::Migrate(args) => migrate(&args),
        Command::Run(args) => run(&args),
        Command::History(args) => history(&args),
        Command::Status(args) => status(&args),
        Command::Trigger(args) => trigger(&args),
        Command::Unlock(args) => unlock(&args),
        Command::Exec(args) => exec(&args),
        Command::ImportCrontab(args) => import_crontab(&args),
        Command::Completions(args) => {
            use clap::CommandFactory as _;
            let mut script = Vec::new();
            clap_complete::generate(args.shell, &mut Cli::command(), "replicron", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            use clap::CommandFactory as _;
            std::io::Write::write_all(
                &mut std::io::stdout(),
                crate::man::render(&Cli::command()).as_bytes(),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Guard => {
            crate::runner::guard();
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let (from, clock_note) = match args.from {
        Some(from) => (from, None),
        None if args.count == 0 => (Utc::now(), None),
        None => now_for_check(&config),
    };
    let enabled = config.enabled_jobs().count();
    println!(
        "{}: valid; {} job{} ({enabled} enabled); database {}",
        config.path.display(),
        config.jobs.len(),
        if config.jobs.len() == 1 { "" } else { "s" },
        config.database.url
    );
    if let Some(note) = clock_note {
        println!("{note}");
    }
    for job in &config.jobs {
        println!();
        let state = if job.enabled { "" } else { " (disabled)" };
        println!("job {:?}{state}", job.name);
        println!("  schedule  {}", job.schedule.expression());
        println!("  zone      {}", job.schedule.zone());
        println!(
            "  next {} after {}:",
            args.count,
            from.to_rfc3339_opts(SecondsFormat::Millis, true)
        );
        for instant in job.schedule.upcoming(from, args.count) {
            let local = instant.with_timezone(&job.schedule.zone());
            println!(
                "    {}  {}",
                instant.to_rfc3339_opts(SecondsFormat::Secs, false),
                local.to_rfc3339_opts(SecondsFormat::Secs, false)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// "Now" for `check`: the database's clock, as the daemon fires on it. A
/// SQLite file's clock is this host's (and `check` does not create the
/// file); an unreachable server is no error for a check.
fn now_for_check(config: &Config) -> (DateTime<Utc>, Option<String>) {
    if config.database.url.backend() == crate::config::Backend::Sqlite {
        return (Utc::now(), None);
    }
    let estimate = crate::db::establish(&config.database.url).and_then(|mut conn| {
        crate::db::clock::estimate_offset(&mut conn, &SystemClock, 3)
            .map_err(|e| crate::db::DbError::query("reading the database clock", e))
    });
    match estimate {
        Ok(estimate) => (
            Utc::now() + estimate.offset,
            Some(format!(
                "now is read from the database's clock (this host's clock is {} from it)",
                daemon::clock::describe(estimate)
            )),
        ),
        Err(e) => (
            Utc::now(),
            Some(format!(
                "now is read from this host's clock (the database's cannot be read: {e})"
            )),
        ),
    }
}

fn migrate(args: &ConfigArg) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let pool = Pool::open(&config.database.url, 1)?;
    let applied = pool.migrate()?;
    println!(
        "{}: {applied} migration{} applied",
        config.database.url,
        if applied == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}

fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let instance = match &args.instance_id {
        Some(id) if id.trim().is_empty() || id.len() > 255 => {
            anyhow::bail!("--instance-id must be 1 to 255 characters")
        }
        Some(id) => id.clone(),
        None => daemon::default_instance_id(),
    };
    let pool = Pool::open(&config.database.url, config.database.pool_size)
        .context("opening the database")?;
    let applied = pool.migrate()?;
    if applied > 0 {
        tracing::info!(applied, "database migrated");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("replicron")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let handle = telemetry::install();
        let liveness = Arc::new(Liveness::new());
        tokio::spawn(telemetry::heartbeat(liveness.clone()));
        tokio::spawn(telemetry::upkeep(handle.clone()));
        if let Some(listen) = config.daemon.metrics_listen {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("listening on {listen} for /metrics and /healthz"))?;
            tracing::info!(%listen, "serving /metrics and /healthz");
            tokio::spawn(telemetry::serve(listener, handle, liveness.clone()));
        }
        let (phase_tx, phase) = tokio::sync::watch::channel(daemon::Phase::Running);
        tokio::spawn(daemon::drive_shutdown(
            phase_tx,
            config.daemon.shutdown_grace,
        ));
        let (reload_tx, reloads) = tokio::sync::mpsc::channel(4);
        tokio::spawn(daemon::watch_reloads(args.config.to_path_buf(), reload_tx));
        daemon::run(daemon::Daemon {
            config,
            pool,
            instance,
            clock: Arc::new(SystemClock),
            phase,
            reloads,
            liveness,
        })
        .await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Opens a one-connection pool for a command that reads or writes a little.
/// Such a command never changes the schema: an unmigrated database (or a
/// SQLite file that does not exist) is an error that says to migrate.
fn open_for_command(config: &Config) -> anyhow::Result<Pool> {
    let url = &config.database.url;
    if url.backend() == crate::config::Backend::Sqlite
        && !std::path::Path::new(url.connection_string()).exists()
    {
        anyhow::bail!(
            "no database at {url}: run `replicron migrate --config {}` (or start `replicron run`) first",
            config.path.display()
        );
    }
    let pool = Pool::open(url, 1)?;
    crate::db::migrate::check_migrated(&mut *pool.get()?)
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    Ok(pool)
}

fn history(args: &HistoryArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let pool = open_for_command(&config)?;
    let filter = RunFilter {
        job: args.job.clone(),
        status: args.status,
        once_key: args.once_key.clone(),
        limit: i64::from(args.limit),
    };
    let rows = history::list_runs(&mut *pool.get()?, &filter)
        .map_err(|e| crate::db::DbError::query("reading the run history", e))?;
    let records: Vec<RunRecord> = rows.into_iter().map(RunRecord::from).collect();
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&records)?),
        OutputFormat::Table => {
            // The KEY column only where there are `exec --once` runs.
            let keys = records.iter().any(|r| r.once_key.is_some());
            let mut headers = vec![
                "ID",
                "JOB",
                "SCHEDULED_AT",
                "ATTEMPT",
                "STATUS",
                "EXIT",
                "DURATION",
                "INSTANCE",
            ];
            if keys {
                headers.push("KEY");
            }
            print_table(
                &headers,
                records.iter().map(|r| {
                    let mut row = vec![
                        r.id.to_string(),
                        r.job.clone(),
                        r.scheduled_at.clone(),
                        r.attempt.to_string(),
                        r.status.clone(),
                        r.exit_code.map_or("-".to_string(), |c| c.to_string()),
                        run_duration(r),
                        r.instance.clone(),
                    ];
                    if keys {
                        row.push(r.once_key.clone().unwrap_or_default());
                    }
                    row
                }),
            )
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_duration(record: &RunRecord) -> String {
    let parse = |t: &str| DateTime::parse_from_rfc3339(t).ok();
    let seconds = |from: &str, to: &str| {
        let ms = (parse(to)? - parse(from)?).num_milliseconds().max(0);
        Some(format!("{}.{:03}s", ms / 1000, ms % 1000))
    };
    match (&record.finished_at, &record.confirmed_at) {
        (Some(end), _) => seconds(&record.started_at, end).unwrap_or_else(|| "-".to_string()),
        // Its holder vanished: the end is not known, only that the run
        // lasted until its lease was last confirmed.
        (None, Some(confirmed)) if record.status != RunStatus::Running.as_str() => format!(
            "unknown (≥{})",
            seconds(&record.started_at, confirmed).unwrap_or_default()
        ),
        (None, None) if record.status != RunStatus::Running.as_str() => "unknown".to_string(),
        _ => "-".to_string(),
    }
}

fn print_table(headers: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

/// A mistake in how a command was called: exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

fn find_job<'c>(config: &'c Config, name: &str) -> anyhow::Result<&'c crate::config::Job> {
    config.job(name).ok_or_else(|| {
        UsageError(format!("{}: no job named {name:?}", config.path.display())).into()
    })
}

/// A runtime for a command, with SIGINT/SIGTERM stopping what it runs.
fn command_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn exit_code_of(outcome: Option<&daemon::Outcome>) -> ExitCode {
    match outcome {
        Some(daemon::Outcome {
            status: RunStatus::Succeeded,
            ..
        }) => ExitCode::SUCCESS,
        Some(daemon::Outcome {
            status: RunStatus::Failed,
            exit_code: Some(code),
            ..
        }) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1).max(1)),
        _ => ExitCode::from(1),
    }
}

fn describe(outcome: Option<&daemon::Outcome>) -> String {
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

/// The last lines of a run's output, indented, for `trigger`.
fn output_tail(output: &str, lines: usize) -> String {
    let all: Vec<&str> = output.lines().collect();
    let shown = &all[all.len().saturating_sub(lines)..];
    let mut text = String::new();
    if all.len() > shown.len() {
        text.push_str(&format!(
            "  … ({} earlier lines in `replicron history`)\n",
            all.len() - shown.len()
        ));
    }
    for line in shown {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

fn trigger(args: &JobArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let job = find_job(&config, &args.job)?.clone();
    let pool = open_for_command(&config)?;
    let runtime = command_runtime()?;
    let grace = config.daemon.shutdown_grace;
    let triggered = runtime.block_on(async {
        let (phase_tx, phase) = tokio::sync::watch::channel(daemon::Phase::Running);
        tokio::spawn(daemon::drive_shutdown(phase_tx, grace));
        daemon::run_once(
            pool,
            job,
            daemon::default_instance_id(),
            Arc::new(SystemClock),
            phase,
        )
        .await
    })?;
    match triggered {
        daemon::Triggered::Ran(outcome) => {
            println!("{}: {}", args.job, describe(outcome.as_ref()));
            if let Some(outcome) = outcome.as_ref().filter(|o| o.status != RunStatus::Error) {
                print!("{}", output_tail(&outcome.output, 20));
            }
            Ok(exit_code_of(outcome.as_ref()))
        }
        daemon::Triggered::NotClaimed => {
            eprintln!(
                "replicron: {} is running elsewhere (its lease is held); not triggered",
                args.job
            );
            Ok(ExitCode::from(1))
        }
    }
}

fn exec(args: &ExecArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let name = &args.lock;
    if !crate::config::is_valid_job_name(name) || name.starts_with(crate::config::RESERVED_PREFIX) {
        return Err(UsageError(format!(
            "invalid lock name {name:?}: use 1 to 64 characters from A-Z a-z 0-9 _ . : - (not starting with {:?})",
            crate::config::RESERVED_PREFIX
        ))
        .into());
    }
    if args.once.is_some() && name.len() > 40 {
        return Err(UsageError(format!(
            "with --once, the lock name {name:?} must be at most 40 characters"
        ))
        .into());
    }
    let pool = open_for_command(&config)?;
    let runtime = command_runtime()?;
    let request = daemon::ExecRequest {
        name: name.clone(),
        args: args.command.clone(),
        wait: args.wait,
        once: args.once.clone(),
        defaults: config.defaults.clone(),
        instance: daemon::default_instance_id(),
    };
    let grace = config.daemon.shutdown_grace;
    let executed = runtime.block_on(async {
        let (phase_tx, phase) = tokio::sync::watch::channel(daemon::Phase::Running);
        tokio::spawn(daemon::drive_shutdown(phase_tx, grace));
        daemon::exec(pool, request, Arc::new(SystemClock), phase).await
    })?;
    Ok(match executed {
        daemon::Executed::Ran(outcome) => {
            if !matches!(
                outcome.as_ref().map(|o| o.status),
                Some(RunStatus::Succeeded | RunStatus::Failed)
            ) {
                eprintln!("replicron: {name}: {}", describe(outcome.as_ref()));
            }
            exit_code_of(outcome.as_ref())
        }
        daemon::Executed::RanElsewhere(outcome) => {
            eprintln!(
                "replicron: {name}: already run for this key elsewhere: {}",
                describe(outcome.as_ref())
            );
            exit_code_of(outcome.as_ref())
        }
        daemon::Executed::NotAcquired => {
            eprintln!(
                "replicron: lock {name:?} not acquired within {}",
                humantime::format_duration(args.wait.unwrap_or_default())
            );
            ExitCode::from(1)
        }
    })
}

fn unlock(args: &UnlockArgs) -> anyhow::Result<ExitCode> {
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
    let running = history::latest_run(&mut conn, &args.job)
        .map_err(|e| query("reading the history", e))?
        .filter(|run| run.fence == lock.fence && run.status == RunStatus::Running.as_str());
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

fn import_crontab(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    use crate::crontab::{self, ImportError};
    let refused = |error: ImportError| -> anyhow::Error {
        match error {
            ImportError::Read { .. } => error.into(),
            ImportError::NotACrontab { .. } | ImportError::Nothing(_) => {
                UsageError(error.to_string()).into()
            }
        }
    };
    let collected = crontab::files::collect(&args.files).map_err(refused)?;
    let host = crontab::Host::from_system();
    let import = crontab::import(&collected.sources, args.user_column, &host).map_err(refused)?;
    print!("{}", import.toml);
    let notes: Vec<&crontab::Note> = collected.notes.iter().chain(&import.notes).collect();
    for note in &notes {
        eprintln!("{note}");
    }
    let what = match collected.sources.as_slice() {
        [one] => one.name.clone(),
        all => format!("{} files", all.len()),
    };
    eprintln!(
        "{what}: {} job(s) imported, {} line(s) to look at",
        import.jobs,
        notes.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// This host's clock against the database's, in `status`.
#[derive(Debug, serde::Serialize)]
struct ClockStatus {
    /// How far this host's clock is ahead of the database's (negative: behind).
    host_ahead_seconds: f64,
    /// The estimate's error bound.
    error_seconds: f64,
    /// The database's time when `status` read it.
    database_now: String,
}

/// One row of `status`.
#[derive(Debug, serde::Serialize)]
struct JobStatus {
    job: String,
    enabled: Option<bool>,
    next: Option<String>,
    lease_held: bool,
    locked_by: Option<String>,
    lock_until: Option<String>,
    fence: i64,
    last_run: Option<RunRecord>,
    problem: Option<String>,
}

fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let pool = open_for_command(&config)?;
    let mut conn = pool.get()?;
    let query = |what: &str, e| crate::db::DbError::query(what, e);
    let now = lease::database_now(&mut conn).map_err(|e| query("reading the database clock", e))?;
    let offset = crate::db::clock::estimate_offset(&mut conn, &SystemClock, 5)
        .map_err(|e| query("reading the database clock", e))?;
    let locks = lease::list_locks(&mut conn).map_err(|e| query("reading the leases", e))?;
    let instances =
        crate::registry::list_instances(&mut conn).map_err(|e| query("reading the replicas", e))?;
    let mut names: Vec<String> = config.jobs.iter().map(|j| j.name.clone()).collect();
    for lock in &locks {
        let own =
            lock.name.starts_with(crate::config::RESERVED_PREFIX) || lock.name.contains(".once.");
        if !own && !names.contains(&lock.name) {
            names.push(lock.name.clone());
        }
    }
    let mut rows = Vec::new();
    for name in names {
        let job = config.job(&name);
        let lock = locks.iter().find(|l| l.name == name);
        let last =
            history::latest_run(&mut conn, &name).map_err(|e| query("reading the history", e))?;
        let held = lock.is_some_and(|l| l.lock_until.and_utc() > now);
        let problem = stuck(job, lock, last.as_ref(), held, now, &instances)
            .or_else(|| failed(last.as_ref()));
        rows.push(JobStatus {
            job: name.clone(),
            enabled: job.map(|j| j.enabled),
            next: job
                .filter(|j| j.enabled)
                .and_then(|j| j.schedule.next_after(now))
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true)),
            lease_held: held,
            locked_by: lock.and_then(|l| l.locked_by.clone()),
            lock_until: lock.map(|l| history::rfc3339(l.lock_until)),
            fence: lock.map_or(0, |l| l.fence),
            last_run: last.map(RunRecord::from),
            problem,
        });
    }
    let stuck_count = rows.iter().filter(|r| r.problem.is_some()).count();
    let clock = ClockStatus {
        host_ahead_seconds: -(offset.offset.num_microseconds().unwrap_or(0) as f64) / 1e6,
        error_seconds: offset.error.as_secs_f64(),
        database_now: now.to_rfc3339_opts(SecondsFormat::Millis, true),
    };
    match args.format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "clock": clock, "jobs": rows }))?
        ),
        OutputFormat::Table => {
            println!(
                "database time {}; this host's clock is {} from it\n",
                clock.database_now,
                daemon::clock::describe(offset)
            );
            print_table(
                &["JOB", "NEXT", "LEASE", "LAST RUN", "PROBLEM"],
                rows.iter().map(|r| {
                    let lease = if r.lease_held {
                        format!(
                            "held by {} until {}",
                            r.locked_by.as_deref().unwrap_or("?"),
                            r.lock_until.as_deref().unwrap_or("?")
                        )
                    } else {
                        "free".to_string()
                    };
                    let last = r.last_run.as_ref().map_or("never".to_string(), |run| {
                        format!("{} at {} on {}", run.status, run.started_at, run.instance)
                    });
                    let next = match (r.enabled, &r.next) {
                        (None, _) => "not in config".to_string(),
                        (Some(false), _) => "disabled".to_string(),
                        (Some(true), next) => next.clone().unwrap_or_else(|| "-".to_string()),
                    };
                    vec![
                        r.job.clone(),
                        next,
                        lease,
                        last,
                        r.problem.clone().unwrap_or_default(),
                    ]
                }),
            )
        }
    }
    Ok(if stuck_count > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether the job's last run ended badly: an operator should look.
fn failed(last: Option<&history::RunRow>) -> Option<String> {
    let run = last?;
    let status: RunStatus = run.status.parse().ok()?;
    let bad = matches!(
        status,
        RunStatus::Failed
            | RunStatus::TimedOut
            | RunStatus::LostLock
            | RunStatus::Abandoned
            | RunStatus::Error
    );
    bad.then(|| {
        let how = match run.exit_code {
            Some(code) => format!("{status} (exit {code})"),
            None => status.to_string(),
        };
        format!(
            "FAILED: last run {} {how} at {} on {}; `replicron history --job {}` shows its output",
            run.id,
            history::rfc3339(run.started_at),
            run.instance,
            run.job
        )
    })
}

/// Why a job's lease looks stuck, if it does (see README, "status").
fn stuck(
    job: Option<&crate::config::Job>,
    lock: Option<&lease::LockRow>,
    last: Option<&history::RunRow>,
    held: bool,
    now: DateTime<Utc>,
    instances: &[crate::registry::Instance],
) -> Option<String> {
    let holder = last.and_then(|run| instances.iter().find(|i| i.row.id == run.instance));
    let lock = lock?;
    let current = last.filter(|run| run.fence == lock.fence);
    let running = current.filter(|run| run.status == RunStatus::Running.as_str());
    match (held, running) {
        (true, Some(run)) => {
            let job = job?;
            let allowed = job.timeout + job.kill_grace + job.lock_at_most_for;
            let age = (now - run.started_at.and_utc())
                .to_std()
                .unwrap_or_default();
            (age > allowed).then(|| {
                format!(
                    "STUCK: running {} (timeout {}); its holder may be frozen",
                    humantime::format_duration(std::time::Duration::from_secs(age.as_secs())),
                    humantime::format_duration(job.timeout)
                )
            })
        }
        (true, None) => {
            let locked_at = lock.locked_at?.and_utc();
            let expected = job.map_or(std::time::Duration::ZERO, |j| {
                j.lock_at_least_for + j.retry_backoff * j.retries
            }) + std::time::Duration::from_secs(60);
            let age = (now - locked_at).to_std().unwrap_or_default();
            (age > expected).then(|| {
                "STUCK: lease held with no run recorded running; `replicron unlock` ends it"
                    .to_string()
            })
        }
        (false, Some(run)) => {
            let ended = (now - lock.lock_until.and_utc())
                .to_std()
                .unwrap_or_default();
            let ended = humantime::format_duration(std::time::Duration::from_secs(ended.as_secs()));
            Some(match holder {
                // The holder runs on: it finds its lease gone when it next
                // confirms it, and stops the run (recorded lost_lock).
                Some(alive) if alive.alive => format!(
                    "LEASE ENDED: run {} is recorded running, but its lease ended {ended} ago (unlocked, or lost); \
                     its holder is alive ({}) and stops the run when it next confirms the lease",
                    run.id, run.instance
                ),
                Some(gone) => format!(
                    "ORPHANED: run {} is recorded running, its lease ended {ended} ago, and its holder {} \
                     was last seen at {}: it vanished; the next claim marks the run abandoned",
                    run.id,
                    run.instance,
                    history::rfc3339(gone.row.last_seen)
                ),
                None => format!(
                    "ORPHANED: run {} is recorded running, its lease ended {ended} ago, and its holder {} \
                     is not a running replica; the next claim marks the run abandoned",
                    run.id, run.instance
                ),
            })
        }
        (false, None) => None,
    }
}
