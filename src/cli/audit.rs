//! `replicron audit`: the audit log, every operator action, newest first,
//! as a table or JSON.

use super::table::print_table;
use super::{ConfigArg, ExitCode, OutputFormat, UsageError, open_for_command};
use crate::db::audit::{Action, AuditFilter, AuditRecord};

/// Arguments of `audit`.
#[derive(Debug, clap::Args)]
pub(crate) struct AuditArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// Only actions on this job (or `exec` lock, or instance id).
    #[arg(long, value_name = "NAME")]
    pub(crate) job: Option<String>,
    /// Only this action.
    #[arg(long, value_enum, value_name = "ACTION")]
    pub(crate) action: Option<Action>,
    /// Only this Unix user (or whoever ran the command through sudo), or
    /// this token's name.
    #[arg(long, value_name = "WHO")]
    pub(crate) who: Option<String>,
    /// Only actions at or after this time: RFC 3339, or a duration ago
    /// (`1h`, `7d`).
    #[arg(long, value_name = "TIME")]
    pub(crate) since: Option<String>,
    /// Only actions before this time: RFC 3339, or a duration ago.
    #[arg(long, value_name = "TIME")]
    pub(crate) until: Option<String>,
    /// At most this many rows.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub(crate) limit: u32,
    /// Output format; `json` is an array of objects with the columns of
    /// `replicron_audit`, the arguments as an object.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub(crate) format: OutputFormat,
}

pub(super) fn audit(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    let config = super::load_for_database(&args.config)?;
    let store = crate::db::Store::new(open_for_command(&config)?);
    let rows = super::command_runtime()?.block_on(async {
        let now = store.database_now().await?;
        let time = |text: &Option<String>, flag: &str| match text {
            None => Ok(None),
            Some(text) => crate::web::data::parse_since(text, now)
                .map(Some)
                .map_err(|e| UsageError(format!("--{flag}: {}", e.replacen("since=", "", 1)))),
        };
        let filter = AuditFilter {
            job: args.job.clone(),
            action: args.action,
            who: args.who.clone(),
            since: time(&args.since, "since")?,
            until: time(&args.until, "until")?,
            before_id: None,
            limit: i64::from(args.limit),
            jobs: None,
        };
        anyhow::Ok(store.list_audit(filter).await?)
    })?;
    let records: Vec<AuditRecord> = rows.into_iter().map(AuditRecord::from).collect();
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&records)?),
        OutputFormat::Table => print_table(
            &[
                "ID", "AT", "VIA", "WHO", "FROM", "ACTION", "JOB", "ARGS", "RESULT", "DETAIL",
            ],
            records.iter().map(|r| {
                vec![
                    r.id.to_string(),
                    r.acted_at.clone(),
                    r.via.clone(),
                    match &r.sudo_user {
                        Some(sudo) => format!("{} ({})", r.who, crate::db::audit::sudo_claim(sudo)),
                        None => r.who.clone(),
                    },
                    match &r.address {
                        Some(address) => format!("{address} via {}", r.host),
                        None => r.host.clone(),
                    },
                    r.action.clone(),
                    r.job.clone().unwrap_or_else(|| "-".to_string()),
                    r.args_text(),
                    r.result.clone(),
                    r.detail.clone().unwrap_or_default(),
                ]
            }),
        ),
    }
    Ok(ExitCode::SUCCESS)
}
