//! `replicron pause JOB` and `replicron resume JOB`: a fleet-wide pause
//! stored in the job's lease row, which every replica's next claim reads
//! (no reload). A paused job's instants are neither run nor missed.

use super::{ConfigArg, ExitCode, UsageError, open_for_command};
use crate::db::audit::Actor;
use crate::history::rfc3339;
use crate::ops::actions::{self, Refused};

/// Arguments of `pause`.
#[derive(Debug, clap::Args)]
pub(crate) struct PauseArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The job to pause on every replica.
    pub(crate) job: String,
    /// Why, shown by `status` and recorded in the audit log (at most 500
    /// characters, one line).
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
    /// Resume by itself at this time: RFC 3339 (`2026-12-01T06:00:00Z`) or
    /// a duration from now (`2h`, `30m`). Without it, until `resume`.
    #[arg(long, value_name = "TIME")]
    pub(crate) until: Option<String>,
}

/// Arguments of `resume`.
#[derive(Debug, clap::Args)]
pub(crate) struct ResumeArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The paused job.
    pub(crate) job: String,
    /// Why, recorded in the audit log (at most 500 characters, one line).
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
}

pub(super) fn pause(args: &PauseArgs) -> anyhow::Result<ExitCode> {
    let config = super::load_for_database(&args.config)?;
    super::expect_job(&config, &args.job)?;
    let store = crate::db::Store::new(open_for_command(&config)?);
    let paused = super::command_runtime()?.block_on(actions::pause(
        &store,
        &Actor::cli(),
        &args.job,
        args.until.as_deref(),
        args.reason.clone(),
    ));
    match paused {
        Ok(Some(until)) => println!(
            "{}: paused on every replica until {} (a run already going finishes)",
            args.job,
            rfc3339(until.naive_utc())
        ),
        Ok(None) => println!(
            "{}: paused on every replica until `replicron resume {}` (a run already going finishes)",
            args.job, args.job
        ),
        Err(Refused::Db(e)) => return Err(e.into()),
        Err(unaudited @ Refused::Unaudited(_)) => return Err(unaudited.into()),
        Err(refused) => return Err(UsageError(refused.to_string()).into()),
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn resume(args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    let config = super::load_for_database(&args.config)?;
    super::expect_job(&config, &args.job)?;
    let store = crate::db::Store::new(open_for_command(&config)?);
    let resumed = super::command_runtime()?.block_on(actions::resume(
        &store,
        &Actor::cli(),
        &args.job,
        args.reason.clone(),
    ));
    let resumed = match resumed {
        Ok(resumed) => resumed,
        Err(refused @ Refused::Invalid(_)) => return Err(UsageError(refused.to_string()).into()),
        Err(refused) => return Err(refused.into()),
    };
    if resumed {
        println!(
            "{}: resumed; its next instant runs (the instants of the pause do not)",
            args.job
        );
    } else {
        println!("{}: not paused", args.job);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    #[test]
    fn since_is_bounded_to_what_is_stored() {
        use crate::web::data::parse_since;
        let now = Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap();
        assert_eq!(
            parse_since("1h", now).map(|t| t.and_utc()),
            Ok(Utc.with_ymd_and_hms(2026, 11, 24, 11, 0, 0).unwrap())
        );
        // Before anything stored: everything is since then.
        for old in ["999999h", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z"] {
            assert_eq!(
                parse_since(old, now).map(|t| t.and_utc().timestamp()),
                Ok(0),
                "{old}"
            );
        }
        let error = parse_since("9999-12-31T12:00:00Z", now).unwrap_err();
        assert!(error.contains("latest time"), "{error}");
    }
}
