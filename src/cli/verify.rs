//! `replicron verify`: checks the fleet's history against the job file for
//! a range of instants, `[from, to)`, reading only. Every instant due ran exactly once or
//! is accounted for; no run started early, overlapped another of its job,
//! or is left running without a live lease. Exits 0 when clean, 1 on a
//! violation (or when the database cannot be read), 2 on bad input.

use std::io::{IsTerminal as _, Write as _};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::table::print_table;
use super::{
    ConfigArg, ExitCode, OutputFormat, UsageError, find_job, open_for_command, parse_rfc3339,
};
use crate::config::RunOn;
use crate::ops::verify::{Finding, Promise, Tally, Violation, gather, judge};
use crate::schedule::fmt_instant;

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct VerifyArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The first instant to check (RFC 3339, e.g. 2027-03-01T00:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = parse_rfc3339)]
    pub(crate) from: DateTime<Utc>,
    /// The end of the range, not included (RFC 3339), as for `backfill`;
    /// at most the database's now.
    #[arg(long, value_name = "TIME", value_parser = parse_rfc3339)]
    pub(crate) to: DateTime<Utc>,
    /// Only this job.
    #[arg(long, value_name = "NAME")]
    pub(crate) job: Option<String>,
    /// Output format; `json` is one object with each job's tally and every
    /// violation.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub(crate) format: OutputFormat,
}

/// A job of the file that was not checked, and why.
#[derive(Debug, Serialize)]
struct NotChecked {
    job: String,
    why: String,
}

/// The whole report, as `--format json` prints it.
#[derive(Debug, Serialize)]
struct Report {
    from: String,
    to: String,
    now: String,
    clean: bool,
    jobs: Vec<Tally>,
    not_checked: Vec<NotChecked>,
    violations: Vec<Violation>,
}

pub(super) fn verify(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let config = super::load_for_database(&args.config)?;
    if args.from >= args.to {
        return Err(UsageError(format!(
            "--from {} is not before --to {}",
            fmt_instant(args.from),
            fmt_instant(args.to)
        ))
        .into());
    }
    let jobs: Vec<&crate::config::Job> = match &args.job {
        Some(name) => {
            let job = find_job(&config, name)?;
            if !job.enabled {
                return Err(UsageError(format!(
                    "{}: job {name:?} is disabled: verify checks the jobs the replicas run",
                    config.path.display()
                ))
                .into());
            }
            vec![job]
        }
        None => config.jobs.iter().collect(),
    };
    // The range is half-open, `[from, to)`, as a backfill's: instants are
    // stored to the millisecond, so the last one checked is at most the
    // millisecond before `to`, and two ranges that meet check each instant
    // once.
    let last = args.to - chrono::TimeDelta::milliseconds(1);
    let pool = open_for_command(&config)?;
    let mut conn = pool.get()?;
    let mut not_checked = Vec::new();
    let mut tallies = Vec::new();
    let mut violations = Vec::new();
    let mut now = None;
    let progress = args.format == OutputFormat::Table && std::io::stderr().is_terminal();
    // The check for missed instants comes round as the replicas run it: every
    // half of the shortest `missed_after` of the file's jobs.
    let check_every = crate::scheduler::missed_check_period(
        config
            .jobs
            .iter()
            .filter(|j| j.enabled && j.run_on == RunOn::One)
            .map(|j| settings_of(j).missed_after(j.schedule.interval_after(Utc::now()))),
    );
    let total = jobs.len();
    for (n, job) in jobs.into_iter().enumerate() {
        let held = job.held().map(|why| format!("held: {why}"));
        let why = if let Some(held) = held {
            Some(held)
        } else if !job.enabled {
            Some("disabled".to_string())
        } else if job.run_on == RunOn::Every {
            Some("runs on every replica, each for itself".to_string())
        } else if job.schedule.is_at_start() {
            Some("@reboot: no instants".to_string())
        } else if job.schedule.is_manual() {
            Some("@manual: no instants, only triggered runs".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            not_checked.push(NotChecked {
                job: job.name.to_string(),
                why,
            });
            continue;
        }
        if progress {
            eprint!("\r\x1b[Kverify: {}/{total} {}", n + 1, job.name);
            let _ = std::io::stderr().flush();
        }
        let parents = job.after.as_ref().map(|a| a.names()).unwrap_or_default();
        let evidence = gather(&mut conn, &job.name, &parents, args.from, last).map_err(|e| {
            crate::db::DbError::query(format!("reading the history of {}", job.name), e)
        })?;
        now = Some(evidence.now);
        let promise = Promise {
            name: job.name.to_string(),
            schedule: job.schedule.clone(),
            lock_at_most_for: job.lock_at_most_for,
            lock_at_least_for: job.lock_at_least_for,
            missed_after: settings_of(job).missed_after(job.schedule.interval_after(evidence.now)),
            check_every,
            concurrent: match job.overlap {
                crate::config::Overlap::Allow(max) => max,
                _ => 1,
            },
            waits: matches!(
                job.overlap,
                crate::config::Overlap::Queue | crate::config::Overlap::Replace
            ),
            after: job.after.clone(),
        };
        let (tally, found) = judge(&promise, &evidence, args.from, last);
        tallies.push(tally);
        violations.extend(found);
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    violations.sort_by(|a, b| (a.kind, &a.job, &a.instant).cmp(&(b.kind, &b.job, &b.instant)));
    let report = Report {
        from: fmt_instant(args.from),
        to: fmt_instant(args.to),
        now: now.map(fmt_instant).unwrap_or_default(),
        clean: violations.is_empty(),
        jobs: tallies,
        not_checked,
        violations,
    };
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        OutputFormat::Table => print_report(&report),
    }
    Ok(if report.clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The settings of `job` that decide when its misses are recorded.
fn settings_of(job: &crate::config::Job) -> crate::scheduler::JobSettings {
    crate::scheduler::JobSettings {
        missed_after: job.missed_after,
        ..Default::default()
    }
}

fn print_report(report: &Report) {
    println!(
        "instants from {} up to {}, not included (the database's clock reads {})",
        report.from, report.to, report.now
    );
    print_table(
        &[
            "JOB",
            "DUE",
            "RAN",
            "RERUN",
            "MISSED",
            "SKIPPED",
            "PAUSED",
            "OVERRUN",
            "BEFORE_JOB",
            "PENDING",
            "UNACCOUNTED",
        ],
        report.jobs.iter().map(|t| {
            vec![
                t.job.clone(),
                t.due.to_string(),
                t.ran.to_string(),
                t.rerun.to_string(),
                t.missed.to_string(),
                t.skipped.to_string(),
                t.paused.to_string(),
                t.overrun.to_string(),
                t.before_job.to_string(),
                t.pending.to_string(),
                t.unaccounted.to_string(),
            ]
        }),
    );
    for skipped in &report.not_checked {
        println!("not checked: {} ({})", skipped.job, skipped.why);
    }
    if report.clean {
        println!("clean: every instant due ran exactly once or is accounted for");
        return;
    }
    println!();
    print_table(
        &["VIOLATION", "JOB", "INSTANT", "RUNS", "REPLICAS", "WHAT"],
        report.violations.iter().map(|v| {
            vec![
                v.kind.as_str().to_string(),
                v.job.clone(),
                v.instant.clone().unwrap_or_else(|| "-".to_string()),
                v.runs
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                v.replicas.join(","),
                v.message.clone(),
            ]
        }),
    );
    let unaccounted = report
        .violations
        .iter()
        .filter(|v| v.kind == Finding::Unaccounted)
        .count();
    println!(
        "{} violation(s){}",
        report.violations.len(),
        if unaccounted > 0 {
            format!(
                "; {unaccounted} instant(s) ran nowhere and were recorded nowhere: nobody was told"
            )
        } else {
            String::new()
        }
    );
}
