//! `replicron backfill JOB --from T1 --to T2`: runs every instant of JOB in
//! `[T1, T2)` that has no succeeded run, in order, each with its own
//! instant, from this host (`scheduler::backfill`). Shows its progress (a
//! bar on a terminal, a line per instant otherwise); interrupted (Ctrl-C
//! finishes the instant that is running first) and started again, it goes
//! on where it stopped, and runs again what did not succeed.

use chrono::{DateTime, Utc};
use std::io::{IsTerminal as _, Write as _};

use super::{
    ConfigArg, ExitCode, UsageError, command_runtime, describe, load, open_for_command,
    parse_rfc3339,
};
use crate::db::audit::{Action, Actor, Entry, Outcome};
use crate::schedule::fmt_instant;
use crate::scheduler::Job;
use crate::scheduler::backfill::{self, CONFIRM_ABOVE, Step};

/// Arguments of `backfill`.
#[derive(Debug, clap::Args)]
pub(crate) struct BackfillArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// The job (with --cancel and a backfill's id, it may be left out).
    #[arg(required_unless_present = "cancel")]
    pub(crate) job: Option<String>,
    /// The first instant of the range (RFC 3339, e.g. 2027-03-01T00:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = parse_rfc3339, required_unless_present = "cancel")]
    pub(crate) from: Option<DateTime<Utc>>,
    /// The end of the range, not included (RFC 3339); at most the
    /// database's now.
    #[arg(long, value_name = "TIME", value_parser = parse_rfc3339, required_unless_present = "cancel")]
    pub(crate) to: Option<DateTime<Utc>>,
    /// Cancel the backfill of JOB in progress, or the backfill ID (`status`
    /// lists them), wherever it runs: it starts no further instant (the
    /// one running goes on to its end).
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "", conflicts_with_all = ["from", "to", "dry_run", "rerun_succeeded", "with_dependents"])]
    pub(crate) cancel: Option<String>,
    /// Skip the instants that have a succeeded run: what a backfill does
    /// (kept for scripts that say so).
    #[arg(long, hide = true, conflicts_with = "rerun_succeeded")]
    pub(crate) only_missing: bool,
    /// Run again the instants that have a succeeded run too.
    #[arg(long)]
    pub(crate) rerun_succeeded: bool,
    /// After each instant of JOB that succeeded (now or before), run each
    /// job that runs after it (`after`) at that instant, once, in order
    /// (a fan-in's once every parent succeeded there).
    #[arg(long)]
    pub(crate) with_dependents: bool,
    /// Say, per instant, how it ran before and what would run, and run
    /// nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Run more than 10,000 instants.
    #[arg(long)]
    pub(crate) yes: bool,
    /// Run it even though the job is paused.
    #[arg(long)]
    pub(crate) force: bool,
    /// Wait for shared locks and limits as the job's scheduled runs do (at
    /// the job's priority, or at N), older instants first: without it the
    /// backfill's instants wait behind every run that is not a backfill's.
    #[arg(long, value_name = "N", num_args = 0..=1, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1000..=1000))]
    pub(crate) priority: Option<Option<i32>>,
    /// Why: recorded in the audit log and in each of its runs' history,
    /// and given to each run as REPLICRON_REASON (at most 500 characters,
    /// one line).
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
}

pub(super) fn backfill(args: &BackfillArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let usage = |text: String| -> anyhow::Result<ExitCode> { Err(UsageError(text).into()) };
    let reason = match crate::ops::actions::check_reason(args.reason.as_deref()) {
        Ok(reason) => reason,
        Err(refused) => return usage(refused.to_string()),
    };
    if let Some(id) = &args.cancel {
        let id = match id.trim() {
            "" => None,
            text => match text.parse::<i64>() {
                Ok(id) if id > 0 => Some(id),
                _ => {
                    return usage(format!(
                        "--cancel {text:?}: expected a backfill's id, a number (`replicron status` lists them), or JOB --cancel"
                    ));
                }
            },
        };
        if id.is_none() && args.job.is_none() {
            return usage("--cancel needs a JOB, or a backfill's id".to_string());
        }
        return cancel(&config, args.job.as_deref(), id, reason);
    }
    let Some(name) = &args.job else {
        return usage("a backfill needs a JOB".to_string());
    };
    let job = super::runnable(&config, name)?.clone();
    let (Some(from), Some(to)) = (args.from, args.to) else {
        return usage("a backfill needs --from and --to".to_string());
    };
    if let Err(refused) = backfill::check_range(&job, from, to) {
        return usage(refused.to_string());
    }
    crate::runner::users::check_host(&config)?;
    let pool = open_for_command(&config)?;
    let runtime = command_runtime()?;
    let store = crate::db::Store::new(pool.clone());
    let entry = Entry::new(Action::Backfill, &job.name)
        .arg("from", crate::history::rfc3339(from.naive_utc()))
        .arg("to", crate::history::rfc3339(to.naive_utc()))
        .arg("rerun_succeeded", args.rerun_succeeded)
        .arg("with_dependents", args.with_dependents)
        .arg("force", args.force)
        .arg("yes", args.yes)
        .arg("reason", reason.clone());
    let reason: Option<std::sync::Arc<str>> = reason.map(std::sync::Arc::from);
    // A refusal from here on is recorded in the audit log (a dry run is
    // no action).
    let refuse = |text: String| -> anyhow::Result<ExitCode> {
        if !args.dry_run {
            runtime.block_on(store.audit(
                &Actor::cli(),
                entry.clone(),
                Outcome::Refused(text.clone()),
            ));
        }
        usage(text)
    };
    let now = crate::db::clock::database_now(&mut *pool.get()?)
        .map_err(|e| crate::db::DbError::query("reading the database's time", e))?;
    if let Err(refused) = backfill::check_past(to, now) {
        return refuse(refused.to_string());
    }
    let instants = backfill::instants(&job.schedule, from, to, CONFIRM_ABOVE * 100 + 1);
    if instants.is_empty() {
        eprintln!(
            "replicron: {} has no instant in [{}, {})",
            job.name,
            fmt_instant(from),
            fmt_instant(to)
        );
        return Ok(ExitCode::SUCCESS);
    }
    if instants.len() > CONFIRM_ABOVE && !args.yes {
        return refuse(format!(
            "{}: [{}, {}) holds {}{} instants, more than {CONFIRM_ABOVE}: add --yes to run them all",
            job.name,
            fmt_instant(from),
            fmt_instant(to),
            if instants.len() > CONFIRM_ABOVE * 100 {
                "over "
            } else {
                ""
            },
            instants.len().min(CONFIRM_ABOVE * 100)
        ));
    }
    let key = backfill::key(from, to);
    let grace = config.daemon.shutdown_grace;
    let scheduled = backfill::as_backfilled(&Job::from_config(&job));
    let options = backfill::Options {
        rerun_succeeded: args.rerun_succeeded,
        force: args.force,
        priority: args.priority.map(|given| given.unwrap_or(job.priority)),
    };
    // Each dependent job, as a backfill runs it, and its parents.
    let dependents: Vec<(Job, Vec<String>)> = if args.with_dependents {
        backfill::dependents(&config, &job.name)
            .into_iter()
            .map(|child| {
                let parents = child.after.as_ref().map(|a| a.names()).unwrap_or_default();
                (backfill::as_backfilled(&Job::from_config(child)), parents)
            })
            .collect()
    } else {
        Vec::new()
    };
    let (failed, cancelled) = runtime.block_on(async {
        let engine = super::run::one_off_engine(pool, grace)?;
        engine.throttle.set(config.daemon.max_starts_per_second);
        // The job's notifications, and its dependents', are sent as the
        // daemon sends them.
        let children = if args.with_dependents {
            backfill::dependents(&config, &job.name)
        } else {
            Vec::new()
        };
        engine.notifier.set_jobs(
            std::iter::once(&job)
                .chain(children.iter().copied())
                .map(|j| (&*j.name, j.notify.as_ref())),
        );
        if !args.force
            && let Some(row) = engine.store.find_lock(&job.name).await?
            && let Some(pause) = row.pause_at(engine.store.database_now().await?)
        {
            let text = format!("{} is {pause}; add --force to backfill it anyway", job.name);
            if !args.dry_run {
                store.audit(&Actor::cli(), entry.clone(), Outcome::Refused(text.clone())).await;
            }
            return Err(UsageError(text).into());
        }
        if args.dry_run {
            for instant in &instants {
                let state = engine.store.backfill_state(&job.name, *instant).await?;
                let decision = backfill::decide(&state, options);
                println!("{}  {decision}", fmt_instant(*instant));
                for (child, _) in &dependents {
                    let state = engine.store.backfill_state(&child.name, *instant).await?;
                    let decision = backfill::decide(&state, options);
                    println!(
                        "{}    then {}, once {} has succeeded: {decision}",
                        fmt_instant(*instant),
                        child.name,
                        job.name
                    );
                }
            }
            return Ok::<_, anyhow::Error>((0, false));
        }
        let begin = backfill::progress::Begin {
            from,
            to,
            total: instants.len(),
            limit: config.daemon.max_backfill_instants,
        };
        let mut in_progress = match backfill::begin(&engine, &Job::from_config(&job), &begin).await? {
            Ok(in_progress) => in_progress,
            Err(refused) => {
                let text = refused.to_string();
                store.audit(&Actor::cli(), entry.clone(), Outcome::Refused(text.clone())).await;
                return Err(UsageError(text).into());
            }
        };
        let started = format!(
            "backfill {} of {} instants started from this host",
            in_progress.id,
            instants.len()
        );
        store.audit(&Actor::cli(), entry.clone(), Outcome::Done(started)).await;
        let mut progress = Progress::new(instants.len());
        let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = interrupted.clone();
        let lease = scheduled.settings.lock_at_most_for;
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nreplicron: interrupted: stopping after the instant that is running (run the same backfill again to go on)");
                watch.store(true, std::sync::atomic::Ordering::SeqCst);
                // A second Ctrl-C ends it at once.
                if tokio::signal::ctrl_c().await.is_ok() {
                    tracing::warn!(
                        "backfill ended at once: the instant that was running is left to be marked abandoned, and the job's lease stays held for up to {}; run the same backfill again to run it",
                        humantime::format_duration(lease)
                    );
                    std::process::exit(130);
                }
            }
        });
        let mut failed = 0;
        let mut cancelled = false;
        for instant in &instants {
            if interrupted.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            if in_progress.cancelled(&engine).await? {
                cancelled = true;
                break;
            }
            in_progress.running(&engine, *instant).await;
            let step = backfill::run_instant(&engine, &scheduled, *instant, &key, options, Vec::new(), reason.clone()).await?;
            let succeeded = step.succeeded();
            let ended_well = step.ended_well();
            let mut what = match &step {
                Step::Ran(before, outcome) => {
                    if !ended_well {
                        failed += 1;
                    }
                    match before {
                        Some(before) => format!("{} (ran before: {before})", describe(outcome.as_ref())),
                        None => describe(outcome.as_ref()),
                    }
                }
                Step::Succeeded => "skipped: it succeeded before".to_string(),
                Step::Stopped => break,
            };
            for (child, parents) in dependents.iter().filter(|_| succeeded) {
                let Some(parent_runs) = backfill::parents_succeeded(&engine, parents, *instant).await? else {
                    what.push_str(&format!("; {}: not run: not every parent of it succeeded", child.name));
                    continue;
                };
                let step = backfill::run_instant(&engine, child, *instant, &key, options, parent_runs, reason.clone()).await?;
                let done = match &step {
                    Step::Ran(_, outcome) => {
                        if !step.ended_well() {
                            failed += 1;
                        }
                        describe(outcome.as_ref())
                    }
                    Step::Succeeded => "skipped: it succeeded before".to_string(),
                    Step::Stopped => break,
                };
                what.push_str(&format!("; {}: {done}", child.name));
            }
            progress.step(*instant, &what);
            in_progress.through(&engine, ended_well).await;
        }
        progress.finish();
        in_progress.end(&engine).await;
        if cancelled {
            eprintln!(
                "replicron: the backfill was cancelled; {} of {} instants were not started",
                instants.len() - progress.done,
                instants.len()
            );
        }
        super::flush_before_exit(&engine, &job.name).await;
        Ok((failed, cancelled))
    })?;
    Ok(if cancelled {
        ExitCode::from(1)
    } else if failed == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "replicron: {failed} instant(s) of the backfill did not succeed; `replicron history --job {}` has them",
            job.name
        );
        ExitCode::from(1)
    })
}

/// `backfill JOB --cancel` and `backfill --cancel ID`: ends the lease of
/// the backfill in progress, so that it starts no further instant; exit 1
/// if none was.
fn cancel(
    config: &crate::config::Config,
    job: Option<&str>,
    id: Option<i64>,
    reason: Option<String>,
) -> anyhow::Result<ExitCode> {
    let pool = open_for_command(config)?;
    let runtime = command_runtime()?;
    let store = crate::db::Store::new(pool);
    runtime.block_on(async {
        let cancelled = backfill::cancel_by(&store, job, id).await?;
        let (outcome, code) = match cancelled.result {
            Ok(text) => {
                println!("{text}");
                (Outcome::Done(text), ExitCode::SUCCESS)
            }
            Err(text) => {
                eprintln!("replicron: {text}");
                (Outcome::Refused(text), ExitCode::from(1))
            }
        };
        let entry = Entry::new(Action::Backfill, cancelled.job.as_deref().unwrap_or(""))
            .arg("cancel", true)
            .arg("id", id)
            .arg("reason", reason);
        store.audit(&Actor::cli(), entry, outcome).await;
        Ok(code)
    })
}

/// A bar on a terminal, a line per instant otherwise.
struct Progress {
    total: usize,
    done: usize,
    bar: bool,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress {
            total,
            done: 0,
            bar: std::io::stderr().is_terminal(),
        }
    }

    fn step(&mut self, instant: DateTime<Utc>, what: &str) {
        self.done += 1;
        if self.bar {
            let width = 30;
            let filled = self.done * width / self.total.max(1);
            eprint!(
                "\r[{}{}] {}/{} {} {}\x1b[K",
                "#".repeat(filled),
                ".".repeat(width - filled),
                self.done,
                self.total,
                fmt_instant(instant),
                what
            );
            let _ = std::io::stderr().flush();
        } else {
            println!(
                "{}/{} {}  {what}",
                self.done,
                self.total,
                fmt_instant(instant)
            );
        }
    }

    fn finish(&self) {
        if self.bar {
            eprintln!();
        }
    }
}
