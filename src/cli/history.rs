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
}

pub(super) fn history(args: &HistoryArgs) -> anyhow::Result<ExitCode> {
    let config = super::load_for_database(&args.config)?;
    let pool = open_for_command(&config)?;
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
