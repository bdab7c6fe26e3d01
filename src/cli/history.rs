//! `replicron history`: the recorded runs, newest first, as a table or JSON.

use chrono::DateTime;

use super::table::print_table;
use super::{ConfigArg, ExitCode, OutputFormat, open_for_command, parse_status};
use crate::history::{self, RunFilter, RunRecord, RunStatus};

/// Arguments of `history`.
#[derive(Debug, clap::Args)]
pub(crate) struct HistoryArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// Only this job's runs.
    #[arg(long, value_name = "NAME")]
    pub(crate) job: Option<String>,
    /// Only runs with this status (running, succeeded, failed, timed_out,
    /// lost_lock, killed, abandoned, error, missed, skipped).
    #[arg(long, value_name = "STATUS", value_parser = parse_status)]
    pub(crate) status: Option<RunStatus>,
    /// Only the `exec --once` runs of this KEY.
    #[arg(long, value_name = "KEY")]
    pub(crate) once_key: Option<String>,
    /// At most this many runs.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub(crate) limit: u32,
    /// Output format; `json` is an array of objects with the columns of
    /// `replicron_runs`, output included.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub(crate) format: OutputFormat,
    /// Print run RUN's whole output instead (a job with `output_store =
    /// "files"`): what it printed to stdout to stdout, and to stderr to
    /// stderr, in order; from this host's file, or from the replica that
    /// keeps it (through its dashboard's address).
    #[arg(long, value_name = "RUN", conflicts_with_all = ["job", "status", "once_key"])]
    pub(crate) output: Option<i64>,
}

pub(super) fn history(args: &HistoryArgs) -> anyhow::Result<ExitCode> {
    let config = super::load_for_database(&args.config)?;
    let pool = open_for_command(&config)?;
    if let Some(id) = args.output {
        return whole_output(&config, &pool, id);
    }
    let filter = RunFilter {
        job: args.job.clone(),
        status: args.status,
        once_key: args.once_key.clone(),
        limit: i64::from(args.limit),
        ..Default::default()
    };
    let rows = history::list_runs(&mut *pool.get()?, &filter)
        .map_err(|e| crate::db::DbError::query("reading the run history", e))?;
    let mut records: Vec<RunRecord> = rows.into_iter().map(RunRecord::from).collect();
    history::with_parents(&mut *pool.get()?, &mut records);
    history::with_reasons(&mut *pool.get()?, &mut records);
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&records)?),
        OutputFormat::Table => {
            // The KEY column only where there are `exec --once` runs, the
            // PARAMS column only where some run was given parameters.
            let keys = records.iter().any(|r| r.once_key.is_some());
            let params = records.iter().any(|r| !r.params.is_empty());
            let reasons = records.iter().any(|r| r.reason.is_some());
            let mut headers = vec![
                "ID",
                "JOB",
                "SCHEDULED_AT",
                "ATTEMPT",
                "STATUS",
                "EXIT",
                "DURATION",
                "INSTANCE",
                "TRIGGER",
            ];
            if keys {
                headers.push("KEY");
            }
            if params {
                headers.push("PARAMS");
            }
            if reasons {
                headers.push("REASON");
            }
            print_table(
                &headers,
                records.iter().map(|r| {
                    let mut row = vec![
                        r.id.to_string(),
                        r.job.clone(),
                        r.scheduled_at.clone(),
                        r.attempt.to_string(),
                        r.status.to_string(),
                        r.exit_code.map_or("-".to_string(), |c| c.to_string()),
                        run_duration(r),
                        r.instance.clone(),
                        trigger_text(r),
                    ];
                    if keys {
                        row.push(r.once_key.clone().unwrap_or_default());
                    }
                    if params {
                        row.push(params_text(&r.params));
                    }
                    if reasons {
                        row.push(r.reason.clone().unwrap_or_default());
                    }
                    row
                }),
            )
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What started a run; for a dependency, after which parents' runs
/// (`dependency after #12 #15`).
fn trigger_text(run: &RunRecord) -> String {
    let mut text = run.triggered_by.to_string();
    if !run.parent_runs.is_empty() {
        let ids: Vec<String> = run.parent_runs.iter().map(|id| format!("#{id}")).collect();
        text.push_str(&format!(" after {}", ids.join(" ")));
    }
    text
}

/// A run's parameters as `NAME=VALUE` words, a value with a space or a
/// quote quoted.
fn params_text(params: &crate::history::Params) -> String {
    params
        .iter()
        .map(|(name, value)| {
            if value.is_empty() || value.contains([' ', '"', '\'', '\t', '\n']) {
                format!("{name}={value:?}")
            } else {
                format!("{name}={value}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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
        (None, Some(confirmed)) if record.status != RunStatus::Running => format!(
            "unknown (≥{})",
            seconds(&record.started_at, confirmed).unwrap_or_default()
        ),
        (None, None) if record.status != RunStatus::Running => "unknown".to_string(),
        _ => "-".to_string(),
    }
}

/// `history --output RUN`: the run's whole output, each stream to its own.
fn whole_output(
    config: &crate::config::Config,
    pool: &crate::db::Pool,
    id: i64,
) -> anyhow::Result<ExitCode> {
    use crate::ops::output::{self, Whereabouts};
    use crate::runner::kept::{self, Extent};
    let run = history::find_brief(&mut *pool.get()?, id)
        .map_err(|e| crate::db::DbError::query("reading the run", e))?
        .ok_or_else(|| anyhow::anyhow!("no run {id}"))?;
    let (read, failed) = match output::whereabouts(&run, config) {
        Whereabouts::Here(path) => {
            let file = std::fs::File::open(&path)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
            print_kept(file, &path.display().to_string())
        }
        Whereabouts::NotKept => {
            eprintln!("replicron: {}", output::not_kept(&run));
            return Ok(ExitCode::from(1));
        }
        Whereabouts::There { file } => match fetch(pool, &run) {
            Ok(answer) => print_kept(answer, &format!("run {id}'s output from {}", run.instance)),
            Err(why) => {
                eprintln!(
                    "replicron: {}",
                    output::out_of_reach(&run, file.as_deref(), &why)
                );
                return Ok(ExitCode::from(1));
            }
        },
    };
    if let Some(e) = failed {
        return Err(e.into());
    }
    match read {
        Ok(Extent::Whole) => Ok(ExitCode::SUCCESS),
        Ok(Extent::Cut) if run.status == RunStatus::Running => Ok(ExitCode::SUCCESS),
        Ok(Extent::Cut) => {
            eprintln!(
                "replicron: run {id}'s file ends early, where its replica stopped writing it (it died, or its disk filled)"
            );
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(anyhow::anyhow!("reading {}: {e}", kept::FORMAT)),
    }
}

/// Writes a kept file's records read from `reader` (named `name`), each to
/// its stream: how the read ended, and the error of a write that failed
/// (a reader that went away: `| head`).
fn print_kept(
    reader: impl std::io::Read,
    name: &str,
) -> (
    std::io::Result<crate::runner::kept::Extent>,
    Option<std::io::Error>,
) {
    use std::io::Write as _;
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    let (mut stdout, mut stderr) = (stdout.lock(), stderr.lock());
    let mut failed = None;
    let read = crate::runner::kept::read_from(reader, name, |stream, bytes| {
        let written = match stream {
            crate::runner::output::Stream::Stdout => stdout.write_all(bytes),
            crate::runner::output::Stream::Stderr => stderr.write_all(bytes),
        };
        match written {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    });
    if failed.is_none()
        && let Err(e) = stdout.flush()
    {
        failed = Some(e);
    }
    (read, failed)
}

/// How long the replica that keeps a run's output has to send it.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Asks run `run`'s replica for its kept file (`GET
/// /api/v1/runs/{id}/output?format=gzip` at its advertised address): the
/// answer's body, as it comes; why not, if it cannot be had.
fn fetch(pool: &crate::db::Pool, run: &history::RunBrief) -> Result<impl std::io::Read, String> {
    let mut conn = pool.get().map_err(|e| e.to_string())?;
    let (url, host) = crate::registry::web_url_of(&mut conn, &run.instance)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "its replica, {}, is gone or serves no dashboard (it reads the file only on its host)",
                run.instance
            )
        })?;
    drop(conn);
    let authority = url
        .strip_prefix("http://")
        .unwrap_or(&url)
        .trim_end_matches('/');
    if crate::web::live::is_loopback(authority) && host != crate::registry::this_host() {
        return Err(format!(
            "its replica, {}, listens on a loopback address ({url}) of another host, {host}: set [web] advertise_url on it to an address this host reaches",
            run.instance
        ));
    }
    let address = format!(
        "{}/api/v1/runs/{}/output?format=gzip",
        url.trim_end_matches('/'),
        run.id
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(FETCH_TIMEOUT))
        .http_status_as_error(false)
        .user_agent(concat!("replicron/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let unreachable = |why: String| {
        format!(
            "its replica, {} on {host}, does not answer at {url}: {why}",
            run.instance
        )
    };
    let mut answer = agent
        .get(&address)
        .call()
        .map_err(|e| unreachable(e.to_string()))?;
    if answer.status() != 200 {
        let status = answer.status();
        let text = answer.body_mut().read_to_string().unwrap_or_default();
        return Err(format!(
            "its replica, {} on {host}, answered {status}: {}",
            run.instance,
            text.trim()
        ));
    }
    let header = |name: &str| {
        answer
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if header(crate::web::live::RUN_HEADER) != Some(run.id.to_string())
        || !header("content-type").is_some_and(|t| t.starts_with("application/gzip"))
    {
        return Err(unreachable(format!(
            "what answers there is not replicron's output of run {}",
            run.id
        )));
    }
    Ok(answer.into_body().into_reader())
}
