//! Telling of a run that goes on, without stopping it: one whose action
//! started more than `late_after` after it was due (`late_start`), and one
//! still going `warn_after` after its attempt started (`long_running`).
//!
//! The replica that holds the run tells of both, so each is told once
//! across the fleet: logged, counted in `replicron_runs_late_start_total`
//! and `replicron_runs_long_running_total`, and sent where the job's
//! notifications ask for the event.
//!
//! - `late_start`: measured when the action starts (a process once it is
//!   spawned), from its instant plus the job's jitter delay (a dependent
//!   job's run: from its parents' end); only for a run its schedule or its
//!   parents started, at its first attempt (a catch-up, manual or backfill
//!   run, or a retry, is late by design).
//! - `long_running`: counted from the start of each attempt's action, and
//!   told once per run: an attempt that runs past it is told of, and a
//!   retry of the same instant that does again is not.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::{Instrument, warn};

use super::engine::Engine;
use super::work::Work;
use crate::history::{RunStatus, Trigger};
use crate::notify::{Event, Notice, Told};
use crate::telemetry;

/// What one run has told of: `long_running` is told once per run, across
/// its attempts.
#[derive(Debug, Default)]
pub(crate) struct RunAlerts {
    long_running_told: Arc<AtomicBool>,
}

/// The attempt whose action just started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Started {
    /// Its history row.
    pub(crate) run_id: i64,
    /// Its number (1: the first).
    pub(crate) attempt: u32,
    /// The instant its rows are for.
    pub(crate) instant: DateTime<Utc>,
    /// What started the run.
    pub(crate) trigger: Trigger,
    /// How long after it was due the action started.
    pub(crate) late: Duration,
}

/// Watches an attempt for `warn_after`; dropped when the attempt ends,
/// which ends the watch untold.
#[derive(Debug)]
pub(crate) struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl RunAlerts {
    /// An attempt's action started: tells of a late start if it is one,
    /// and watches the attempt for `warn_after` (until the [`Watch`] is
    /// dropped) unless an earlier attempt of the run was told of.
    pub(crate) fn started(
        &self,
        engine: &Arc<Engine>,
        job: &Work,
        started: Started,
    ) -> Option<Watch> {
        let settings = &job.settings;
        let on_time = matches!(started.trigger, Trigger::Schedule | Trigger::Dependency);
        if let Some(late_after) = settings.late_after
            && on_time
            && started.attempt == 1
            && started.late > late_after
        {
            warn!(
                late_ms = started.late.as_millis() as u64,
                late_after = %humantime::format_duration(late_after),
                "the run started late"
            );
            telemetry::late_start(&job.name);
            engine.notifier.event(
                notice(engine, &job.name, Event::LateStart, &started, None).late_by(started.late),
            );
        }
        let warn_after = settings.warn_after?;
        if self.long_running_told.load(Ordering::SeqCst) {
            return None;
        }
        let (engine, told, name) = (
            engine.clone(),
            self.long_running_told.clone(),
            job.name.clone(),
        );
        let task = async move {
            tokio::time::sleep(warn_after).await;
            if told.swap(true, Ordering::SeqCst) {
                return;
            }
            warn!(
                warn_after = %humantime::format_duration(warn_after),
                "the run is still going after warn_after; it goes on"
            );
            telemetry::long_running(&name);
            engine.notifier.event(notice(
                &engine,
                &name,
                Event::LongRunning,
                &started,
                Some(warn_after),
            ));
        };
        Some(Watch(tokio::spawn(task.in_current_span())))
    }
}

/// The notice of `event` for the attempt `started`, which is still running.
fn notice(
    engine: &Engine,
    job: &str,
    event: Event,
    started: &Started,
    running_for: Option<Duration>,
) -> Notice {
    Notice::new(
        event,
        Told {
            job,
            instant: started.instant,
            status: RunStatus::Running,
            exit_code: None,
            attempt: started.attempt as i32,
            instance: &engine.instance,
            duration: running_for,
            output: "",
            history_id: Some(started.run_id),
        },
    )
    .started_by(started.trigger)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use chrono::{DateTime, TimeDelta, Utc};

    use crate::history::{RunRow, RunStatus};
    use crate::notify::Notify;
    use crate::run::Event;
    #[cfg(feature = "sqlite")]
    use crate::schedule::TokioClock;
    use crate::scheduler::{Job, Scheduler};
    use crate::testing::{TestDb, backend_test, runs_of};

    /// How often `metric` counted `job` in this process.
    fn counted(metric: &str, job: &str) -> u64 {
        let text = crate::telemetry::install().render();
        let prefix = format!("{metric}{{job=\"{job}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map_or(0, |n| n.trim().parse().expect("a count"))
    }

    /// Two replicas; a job whose attempts run 30 minutes each, the first
    /// failing and its retry succeeding, with `warn_after` 20 minutes, and
    /// one that runs 5 minutes with the same. The slow run is told of once
    /// (by the replica that holds it, not once per replica nor per
    /// attempt), and is not stopped: both its attempts run to their end.
    /// The fast run is never told of. On a paused clock.
    #[cfg(feature = "sqlite")]
    #[tokio::test(start_paused = true)]
    async fn a_long_run_is_told_of_once_and_goes_on() {
        let _ = crate::telemetry::install();
        let db = TestDb::sqlite();
        let clock = Arc::new(TokioClock::starting_at(
            DateTime::parse_from_rfc3339("2027-03-01T00:59:30Z")
                .expect("time")
                .with_timezone(&Utc),
        ));
        let minutes = |m: u64| Duration::from_secs(m * 60);
        let replica = |id: &'static str| {
            Scheduler::builder(db.url.as_str())
                .clock(clock.clone())
                .instance_id(id)
                .job(
                    Job::new("alerts-slow", "0 * * * *")
                        .expect("job")
                        .warn_after(minutes(20))
                        .timeout(minutes(45))
                        .retries(1, minutes(1))
                        .run(|ctx| async move {
                            tokio::time::sleep(Duration::from_secs(30 * 60)).await;
                            if ctx.attempt() == 1 {
                                Err("the first attempt fails".to_string())
                            } else {
                                Ok(())
                            }
                        }),
                )
                .job(
                    Job::new("alerts-fast", "0 * * * *")
                        .expect("job")
                        .warn_after(minutes(20))
                        .run(|_| async {
                            tokio::time::sleep(Duration::from_secs(5 * 60)).await;
                            Ok::<(), String>(())
                        }),
                )
                .build()
        };
        let (p, q) = (
            replica("p").await.expect("build"),
            replica("q").await.expect("build"),
        );
        let until = || tokio::time::sleep(minutes(70));
        let (p, q) = tokio::join!(p.run_until(until()), q.run_until(until()));
        p.expect("p runs");
        q.expect("q runs");

        let slow = runs_of(&db, "alerts-slow");
        let seen: Vec<(i32, RunStatus)> = slow.iter().map(|r| (r.attempt, r.status)).collect();
        assert_eq!(
            seen,
            [(1, RunStatus::Failed), (2, RunStatus::Succeeded)],
            "{slow:?}"
        );
        for row in &slow {
            let ran = row.finished_at.expect("ended") - row.started_at;
            assert!(ran >= TimeDelta::minutes(30), "stopped early: {row:?}");
        }
        assert_eq!(
            counted("replicron_runs_long_running_total", "alerts-slow"),
            1
        );
        let fast = runs_of(&db, "alerts-fast");
        assert_eq!(fast.len(), 2, "{fast:?}");
        assert_eq!(
            counted("replicron_runs_long_running_total", "alerts-fast"),
            0
        );
    }

    /// `long_running` and `late_start` sent to a command that appends
    /// `EVENT JOB RUN_ID INSTANCE LATE_SECONDS` to `out`.
    fn notify_to(out: &std::path::Path) -> Arc<Notify> {
        Arc::new(Notify {
            on: BTreeSet::from([Event::LongRunning, Event::LateStart]),
            command: Some(crate::config::Command::Shell {
                shell: "/bin/sh".to_string(),
                command: format!(
                    "echo \"$REPLICRON_EVENT $REPLICRON_JOB $REPLICRON_RUN_ID $REPLICRON_INSTANCE \
                     $REPLICRON_LATE_SECONDS\" >> {out:?}"
                ),
            }),
            ..Notify::default()
        })
    }

    /// Holds every write to the database (`replicron_locks`, where claims
    /// go) for `stall`, from `at` on.
    fn stall_database(
        db: &TestDb,
        at: DateTime<Utc>,
        stall: Duration,
    ) -> std::thread::JoinHandle<()> {
        use diesel::connection::SimpleConnection;
        let mut conn = db.raw();
        let (lock, unlock) = match db.url.split_once("://").map(|(scheme, _)| scheme) {
            Some("mysql") => ("LOCK TABLES replicron_locks WRITE", "UNLOCK TABLES"),
            Some("postgres") => (
                "BEGIN; LOCK TABLE replicron_locks IN ACCESS EXCLUSIVE MODE",
                "COMMIT",
            ),
            _ => ("PRAGMA busy_timeout = 5000; BEGIN IMMEDIATE", "COMMIT"),
        };
        std::thread::spawn(move || {
            std::thread::sleep((at - Utc::now()).to_std().unwrap_or_default());
            conn.batch_execute(lock).expect("lock");
            std::thread::sleep(stall);
            conn.batch_execute(unlock).expect("unlock");
        })
    }

    backend_test! {
        /// On the real clock: a job whose runs take 2.5 s with `warn_after`
        /// 1 s has each run told of once, with its replica and run id, and
        /// the run goes on to succeed; one whose runs take 0.1 s is never
        /// told of. A job with `late_after` 1 s whose claim waits on a
        /// database stalled for 2 s from just before its instant is told of
        /// once, at that instant, as `late_start`; its instants on time are
        /// not.
        fn long_and_late_runs_are_notified_once_each(db: &TestDb) {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(long_and_late(db));
        }
    }

    /// Each run's instant and when its action started.
    type Starts = Arc<Mutex<Vec<(DateTime<Utc>, DateTime<Utc>)>>>;

    async fn long_and_late(db: &TestDb) {
        let _ = crate::telemetry::install();
        let kind = format!("{:?}", db.kind).to_lowercase();
        let (slow, fast, late) = (
            format!("alerts-slow-{kind}"),
            format!("alerts-fast-{kind}"),
            format!("alerts-late-{kind}"),
        );
        let out = db.dir().join("notices.txt");
        let starts: Starts = Arc::default();
        let mut slow_job = Job::new(&slow, "*/4 * * * * *")
            .expect("job")
            .warn_after(Duration::from_secs(1))
            .timeout(Duration::from_secs(10))
            .run(|_| async {
                tokio::time::sleep(Duration::from_millis(2500)).await;
                Ok::<(), String>(())
            });
        slow_job.settings.notify = Some(notify_to(&out));
        let mut fast_job = Job::new(&fast, "* * * * * *")
            .expect("job")
            .warn_after(Duration::from_secs(1))
            .run(|_| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<(), String>(())
            });
        fast_job.settings.notify = Some(notify_to(&out));
        let recorded = starts.clone();
        let mut late_job = Job::new(&late, "*/3 * * * * *")
            .expect("job")
            .late_after(Duration::from_secs(1))
            .run(move |ctx| {
                recorded
                    .lock()
                    .expect("starts")
                    .push((ctx.instant(), Utc::now()));
                async { Ok::<(), String>(()) }
            });
        late_job.settings.notify = Some(notify_to(&out));
        let scheduler = Scheduler::builder(db.url.as_str())
            .instance_id("solo")
            .job(slow_job)
            .job(fast_job)
            .job(late_job)
            .build()
            .await
            .expect("build");
        // The first instant of the late job at least 2 s away; the
        // database stalls from 0.3 s before it to 1.7 s after.
        let now = Utc::now();
        let mut instant = now + TimeDelta::seconds(2);
        instant =
            DateTime::from_timestamp(instant.timestamp() + (3 - instant.timestamp() % 3) % 3, 0)
                .expect("time");
        if instant < now + TimeDelta::seconds(2) {
            instant += TimeDelta::seconds(3);
        }
        let stall = stall_database(
            db,
            instant - TimeDelta::milliseconds(300),
            Duration::from_secs(2),
        );
        let until = (instant + TimeDelta::seconds(5) - Utc::now())
            .to_std()
            .expect("ahead");
        scheduler
            .run_until(tokio::time::sleep(until))
            .await
            .expect("runs");
        stall.join().expect("stalled");

        let notices = std::fs::read_to_string(&out).unwrap_or_default();
        let lines: Vec<Vec<&str>> = notices.lines().map(|l| l.split(' ').collect()).collect();
        let told = |event: &str, job: &str| -> Vec<i64> {
            lines
                .iter()
                .filter(|l| l[0] == event && l[1] == job)
                .map(|l| {
                    assert_eq!(l[3], "solo", "{notices}");
                    l[2].parse().expect("a run id")
                })
                .collect()
        };

        let slow_runs = runs_of(db, &slow);
        assert!(!slow_runs.is_empty(), "the slow job never ran");
        let ended: Vec<&RunRow> = slow_runs
            .iter()
            .filter(|r| r.finished_at.is_some())
            .collect();
        for row in &ended {
            assert_eq!(row.status, RunStatus::Succeeded, "{row:?}");
        }
        let mut ids: Vec<i64> = slow_runs.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        let mut told_slow = told("long_running", &slow);
        told_slow.sort_unstable();
        assert_eq!(told_slow, ids, "each slow run once: {notices}");
        assert_eq!(
            counted("replicron_runs_long_running_total", &slow),
            ids.len() as u64
        );
        assert!(told("long_running", &fast).is_empty(), "{notices}");
        assert_eq!(counted("replicron_runs_long_running_total", &fast), 0);

        let starts = starts.lock().expect("starts").clone();
        let late_starts: Vec<DateTime<Utc>> = starts
            .iter()
            .filter(|(due, at)| *at - *due > TimeDelta::seconds(1))
            .map(|(due, _)| *due)
            .collect();
        assert_eq!(late_starts, [instant], "{starts:?}");
        assert!(
            starts.iter().any(|(due, _)| *due > instant),
            "no instant after the stall ran: {starts:?}"
        );
        let late_runs = runs_of(db, &late);
        let late_run = late_runs
            .iter()
            .find(|r| r.scheduled_at.and_utc() == instant)
            .expect("the late run's row");
        assert_eq!(told("late_start", &late), [late_run.id], "{notices}");
        let late_seconds: f64 = lines
            .iter()
            .find(|l| l[0] == "late_start")
            .and_then(|l| l.get(4))
            .and_then(|s| s.parse().ok())
            .expect("REPLICRON_LATE_SECONDS");
        assert!(late_seconds > 1.0, "{notices}");
        assert_eq!(counted("replicron_runs_late_start_total", &late), 1);
    }
}
