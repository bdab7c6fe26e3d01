//! `replicron check`: validates the job file and prints each job's next
//! instants, from the database's "now" where a server answers.

use chrono::{DateTime, SecondsFormat, Utc};

use super::{ConfigArg, ExitCode, parse_rfc3339};
use crate::config::Config;
use crate::schedule::{Excluded, Schedule, SystemClock};

/// Arguments of `check`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// List instants after this time (RFC 3339). Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_rfc3339)]
    pub(crate) from: Option<DateTime<Utc>>,
    /// How many instants to list per job.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub(crate) count: usize,
}

pub(super) fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config, &crate::config::Environment::from_process())?;
    super::refuse_past_instants(&config)?;
    for warning in &config.warnings {
        eprintln!("warning: {}", warning.located(&config.path));
    }
    crate::runner::users::check_host(&config)?;
    if let Some(note) = crate::runner::resources::check_note(&config) {
        eprintln!("warning: {note}");
    }
    // `run` refuses to start without the token; here (often a shell
    // without the unit's environment) that is only said.
    if let Err(e) = config.web.tokens(&config.path) {
        for line in e.to_string().lines().skip(1) {
            eprintln!("warning: {}", line.trim());
        }
    }
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
    for included in &config.included {
        println!("included {}", included.display());
    }
    if let Some(note) = clock_note {
        println!("{note}");
    }
    for calendar in &config.calendars {
        if let Some(why) = calendar.why_unreadable() {
            println!("calendar {:?}: CANNOT BE READ: {why}", calendar.name());
            continue;
        }
        let next: Vec<String> = calendar
            .dates_from(from.date_naive())
            .take(5)
            .map(|d| d.to_string())
            .collect();
        println!(
            "calendar {:?}: {} date{}; next {}",
            calendar.name(),
            calendar.len(),
            if calendar.len() == 1 { "" } else { "s" },
            if next.is_empty() {
                "none".to_string()
            } else {
                next.join(" ")
            }
        );
    }
    for job in &config.jobs {
        println!();
        let state = if job.enabled { "" } else { " (disabled)" };
        println!("job {:?}{state}", job.name);
        // Where each job is written, once the jobs come from several files.
        if !config.included.is_empty() {
            println!("  file      {}", config.job_file(&job.name).display());
        }
        println!("  schedule  {}", job.schedule.expression());
        println!("  zone      {}", job.schedule.zone());
        let jitter = job.schedule.jitter();
        // When a jittered instant's run starts (nothing without a jitter).
        let starts = |instant: chrono::DateTime<chrono::Utc>| {
            if jitter.is_zero() {
                String::new()
            } else {
                format!(
                    "  starts {}",
                    job.schedule
                        .start_of(instant)
                        .to_rfc3339_opts(SecondsFormat::Millis, true)
                )
            }
        };
        if !jitter.is_zero() {
            println!(
                "  jitter    {} (each run starts at its instant plus a delay in [0, jitter))",
                humantime::format_duration(jitter.to_std().unwrap_or_default())
            );
        }
        if let Some(after) = job.warn_after {
            println!(
                "  warn      after {} (a run still going then is told of once as long_running; it goes on)",
                humantime::format_duration(after)
            );
        }
        if let Some(after) = job.late_after {
            println!(
                "  late      after {} (a run starting later than that after it was due is told of as late_start)",
                humantime::format_duration(after)
            );
        }
        if !job.locks.is_empty() {
            println!("  locks     {}", job.locks.join(" "));
        }
        if !job.limits.is_empty() {
            let limits: Vec<String> = job
                .limits
                .iter()
                .map(|l| format!("{} ({} at once)", l.name, l.max_running))
                .collect();
            println!("  limits    {}", limits.join(" "));
        }
        if !job.resources.is_empty() {
            println!("  resources {}", job.resources);
        }
        if !job.params.is_empty() {
            let params: Vec<String> = job.params.iter().map(ToString::to_string).collect();
            println!("  params    {}", params.join(" "));
        }
        if !job.secret_env.is_empty() {
            // Where each is read from: the values are never printed.
            let sources: Vec<String> = job
                .secret_env
                .iter()
                .map(|(name, source)| format!("{name}={source}"))
                .collect();
            println!(
                "  secrets   {} (read at each run's start)",
                sources.join(" ")
            );
        }
        if let Some(why) = job.held() {
            println!("  HELD      {why}: the daemon does not run it");
            continue;
        }
        if job.schedule.is_manual() {
            println!("  runs only when triggered (replicron trigger, the API, the dashboard)");
            continue;
        }
        print_rules(&job.schedule, from);
        if let Some(after) = &job.after {
            let on: Vec<&str> = after.on.iter().map(|s| s.as_str()).collect();
            println!(
                "  after     {} (once for each instant at which {} ended {})",
                after.names().join(", "),
                if after.parents.len() > 1 {
                    "every one of them"
                } else {
                    "it"
                },
                on.join(" or ")
            );
            let instants =
                crate::config::dependent_upcoming(&config.jobs, &job.name, from, args.count);
            println!(
                "  next {} after {} (its parents' instants; it runs after their runs end):",
                args.count,
                from.to_rfc3339_opts(SecondsFormat::Millis, true)
            );
            for instant in instants {
                println!(
                    "    {}  {}",
                    instant.to_rfc3339_opts(SecondsFormat::Secs, false),
                    instant
                        .with_timezone(&job.schedule.zone())
                        .to_rfc3339_opts(SecondsFormat::Secs, false)
                );
            }
            continue;
        }
        if job.schedule.is_at_start() {
            println!("  runs once at each start of a replica");
            continue;
        }
        if let Some(instant) = job.schedule.once_at() {
            let local = instant.with_timezone(&job.schedule.zone());
            let mut line = format!(
                "  once at   {}  {}",
                instant.to_rfc3339_opts(SecondsFormat::Secs, false),
                local.to_rfc3339_opts(SecondsFormat::Secs, false)
            );
            if let Some(excluded) = job.schedule.excluded(instant) {
                line.push_str(&format!("  excluded: {excluded}: it never runs"));
            } else if instant <= from {
                line.push_str(&format!(
                    "  ended: its one instant came before {}",
                    from.to_rfc3339_opts(SecondsFormat::Millis, true)
                ));
            } else {
                line.push_str(&starts(instant));
            }
            println!("{line}");
            continue;
        }
        println!(
            "  next {} after {}:",
            args.count,
            from.to_rfc3339_opts(SecondsFormat::Millis, true)
        );
        for (instant, excluded) in job.schedule.upcoming_marked(from, args.count) {
            let local = instant.with_timezone(&job.schedule.zone());
            let mut line = format!(
                "    {}  {}",
                instant.to_rfc3339_opts(SecondsFormat::Secs, false),
                local.to_rfc3339_opts(SecondsFormat::Secs, false)
            );
            if let Some(excluded) = excluded {
                line.push_str(&match excluded {
                    Excluded::SkipOn(_) | Excluded::NotOn(_) => {
                        format!(
                            "  excluded: {excluded} (every instant of {})",
                            local.date_naive()
                        )
                    }
                    Excluded::BeforeWindow => {
                        format!("  excluded: {excluded} (and every instant before it)")
                    }
                    Excluded::AfterWindow => {
                        format!("  excluded: {excluded}, as every instant after it: the job ends")
                    }
                });
                println!("{line}");
                continue;
            }
            line.push_str(&starts(instant));
            println!("{line}");
        }
    }
    // A calendar that cannot be read stops no daemon (its jobs are held),
    // but it is an error to fix: the file does not say what it means.
    let held: Vec<String> = config
        .enabled_jobs()
        .filter(|job| job.held().is_some())
        .map(|job| format!("{:?}", &*job.name))
        .collect();
    if !held.is_empty() {
        eprintln!(
            "replicron: {}: a calendar cannot be read: the daemon would hold (never run) {}",
            config.path.display(),
            held.join(", ")
        );
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// What bounds `schedule`'s instants beside its expressions: its window,
/// calendars, and what its daylight-saving policy makes of its zone's next
/// transition.
fn print_rules(schedule: &Schedule, from: DateTime<Utc>) {
    let rules = schedule.rules();
    let at = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    match (rules.not_before, rules.not_after) {
        (None, None) => {}
        (from_, to) => println!(
            "  window    {} to {}{}",
            from_.map_or_else(|| "any time".to_string(), at),
            to.map_or_else(|| "no end".to_string(), at),
            if schedule.has_ended(from) {
                ": ended, no instant after it"
            } else {
                ""
            }
        ),
    }
    let names = |calendars: &[std::sync::Arc<crate::schedule::calendar::Calendar>]| {
        calendars
            .iter()
            .map(|c| format!("{:?}", c.name()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if !rules.skip_on.is_empty() {
        println!(
            "  skip_on   {} (no instant on their dates, in the job's zone; none missed)",
            names(&rules.skip_on)
        );
    }
    if !rules.only_on.is_empty() {
        println!(
            "  only_on   {} (instants only on their dates, in the job's zone)",
            names(&rules.only_on)
        );
    }
    if let Some(lines) = schedule.next_transition(from) {
        for line in lines {
            println!("  dst       {line}");
        }
    }
}

/// "Now" for `check`: the database's clock, as the daemon fires on it. A
/// SQLite file's clock is this host's (and `check` does not create the
/// file); an unreachable server is no error for a check.
fn now_for_check(config: &Config) -> (DateTime<Utc>, Option<String>) {
    if config.database.url.backend() == crate::db::Backend::Sqlite {
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
                crate::scheduler::clock_sync::describe(estimate)
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
