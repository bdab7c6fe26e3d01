//! `replicron pause JOB` and `replicron resume JOB`: a fleet-wide pause
//! stored in the job's lease row, which every replica's next claim reads
//! (no reload). A paused job's instants are neither run nor missed.

use chrono::{DateTime, Utc};

use super::{ConfigArg, ExitCode, UsageError, find_job, load, open_for_command};
use crate::db::DbError;
use crate::history;
use crate::lease;

/// Arguments of `pause`.
#[derive(Debug, clap::Args)]
pub(crate) struct PauseArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The job to pause on every replica.
    pub(crate) job: String,
    /// Why, shown by `status`.
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
}

/// `--until`'s time, which must be after `now` (the database's).
pub(crate) fn parse_future_until(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let until = parse_until(text, now)?;
    if until <= now {
        return Err(format!(
            "--until {text:?} is not in the future (the database's clock says {})",
            history::rfc3339(now.naive_utc())
        ));
    }
    Ok(until)
}

/// `--until`'s time: an RFC 3339 time, or a duration after `now`.
fn parse_until(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    match humantime::parse_duration(text) {
        Ok(after) => chrono::TimeDelta::from_std(after)
            .ok()
            .and_then(|after| now.checked_add_signed(after))
            .ok_or_else(|| format!("--until {text:?} is too far away")),
        Err(_) => Err(format!(
            "--until {text:?} is neither an RFC 3339 time (2026-12-01T06:00:00Z) nor a duration (2h, 30m)"
        )),
    }
}

/// Who pauses: the login name (`SUDO_USER` first) and this host.
fn who() -> String {
    let user = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown".to_string());
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string());
    format!("{user}@{host}")
}

pub(super) fn pause(args: &PauseArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    find_job(&config, &args.job)?;
    let pool = open_for_command(&config)?;
    let mut conn = pool.get()?;
    let query = |what: &str, e| DbError::query(what, e);
    let now = crate::db::clock::database_now(&mut conn)
        .map_err(|e| query("reading the database's clock", e))?;
    let until = match &args.until {
        Some(text) => Some(parse_future_until(text, now).map_err(UsageError)?),
        None => None,
    };
    lease::ensure_rows(&mut conn, &[args.job.as_str()])
        .map_err(|e| query("creating the lease row", e))?;
    lease::pause(&mut conn, &args.job, until, &who(), args.reason.as_deref())
        .map_err(|e| query("pausing the job", e))?;
    match until {
        Some(until) => println!(
            "{}: paused on every replica until {} (a run already going finishes)",
            args.job,
            history::rfc3339(until.naive_utc())
        ),
        None => println!(
            "{}: paused on every replica until `replicron resume {}` (a run already going finishes)",
            args.job, args.job
        ),
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn resume(args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    find_job(&config, &args.job)?;
    let pool = open_for_command(&config)?;
    let mut conn = pool.get()?;
    let resumed =
        lease::resume(&mut conn, &args.job).map_err(|e| DbError::query("resuming the job", e))?;
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
    use super::{parse_future_until, parse_until};
    use chrono::{TimeZone, Utc};

    #[test]
    fn until_is_a_time_or_a_duration_from_now() {
        let now = Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap();
        assert_eq!(
            parse_until("2026-12-01T06:00:00Z", now),
            Ok(Utc.with_ymd_and_hms(2026, 12, 1, 6, 0, 0).unwrap())
        );
        assert_eq!(
            parse_until("2026-12-01T07:00:00+01:00", now),
            Ok(Utc.with_ymd_and_hms(2026, 12, 1, 6, 0, 0).unwrap())
        );
        assert_eq!(
            parse_until("90m", now),
            Ok(Utc.with_ymd_and_hms(2026, 11, 24, 13, 30, 0).unwrap())
        );
        let past = parse_future_until("2026-11-24T11:00:00Z", now).unwrap_err();
        assert!(past.contains("not in the future"), "{past}");
        let error = parse_until("tomorrow", now).unwrap_err();
        assert!(
            error.contains("\"tomorrow\"") && error.contains("RFC 3339"),
            "{error}"
        );
    }
}
