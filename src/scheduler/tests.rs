//! The scheduler in process, with async jobs: on a paused tokio clock
//! (SQLite then reads the same virtual clock) hours of a schedule pass in
//! moments; on the real clock, a host clock that jumps does not start a run
//! early.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound as _, TimeDelta, Utc};

use super::{Job, Scheduler, SchedulerBuilder};
use crate::history::{RunRow, RunStatus, Trigger};
use crate::schedule::{Clock, TokioClock};
use crate::testing::{TestDb, runs_of};

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("valid test time")
        .with_timezone(&Utc)
}

/// The job file `text`, parsed as `jobs.toml`.
fn config_of(text: &str) -> crate::config::Config {
    crate::config::Config::parse(
        std::path::Path::new("jobs.toml"),
        text,
        &crate::config::Environment::default(),
    )
    .expect("config")
}

/// A replica `id` with one job, on `db` and the test's virtual `clock`.
fn replica_of(db: &TestDb, clock: &Arc<TokioClock>, id: &str, job: Job) -> SchedulerBuilder {
    Scheduler::builder(db.url.as_str())
        .clock(clock.clone())
        .instance_id(id)
        .job(job)
}

/// Builds two replicas and runs them side by side for `span` of the
/// paused clock.
async fn side_by_side(one: SchedulerBuilder, two: SchedulerBuilder, span: Duration) {
    let (one, two) = (
        one.build().await.expect("build"),
        two.build().await.expect("build"),
    );
    let (a, b) = tokio::join!(
        one.run_until(tokio::time::sleep(span)),
        two.run_until(tokio::time::sleep(span))
    );
    a.expect("runs");
    b.expect("runs");
}

/// A job that panics at every run, beside one that counts: each panic is
/// recorded `failed` with its message, the other job runs every instant,
/// and the scheduler stops cleanly. Ten minutes of a per-minute schedule,
/// on a paused clock.
#[tokio::test(start_paused = true)]
async fn a_panicking_job_is_recorded_failed_and_the_scheduler_goes_on() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let steady = Arc::new(AtomicUsize::new(0));
    let counted = steady.clone();
    let scheduler = Scheduler::builder(db.url.as_str())
        .clock(clock)
        .instance_id("solo")
        .job(
            Job::new("panics", "* * * * *")
                .expect("job")
                .run(|ctx| async move {
                    assert!(ctx.attempt() == 0, "the job broke at {}", ctx.instant());
                    Ok::<(), String>(())
                }),
        )
        // A closure that panics before it returns its future.
        .job(Job::new("panics-early", "* * * * *").expect("job").run(
            |ctx| -> std::future::Ready<Result<(), String>> {
                panic!("no future for {}", ctx.instant())
            },
        ))
        .job(Job::new("steady", "* * * * *").expect("job").run(move |_| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        }))
        .build()
        .await
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(10 * 60)))
        .await
        .expect("the scheduler outlives the panics");

    let panics = runs_of(&db, "panics");
    let instants: Vec<String> = panics
        .iter()
        .map(|r| r.scheduled_at.format("%H:%M").to_string())
        .collect();
    assert_eq!(
        instants,
        (1..=10).map(|m| format!("00:{m:02}")).collect::<Vec<_>>()
    );
    for row in &panics {
        assert_eq!(row.status, RunStatus::Failed, "{row:?}");
        assert!(row.finished_at.is_some(), "{row:?}");
        assert!(
            row.output.contains("panicked") && row.output.contains("the job broke at"),
            "{:?}",
            row.output
        );
    }
    let early = runs_of(&db, "panics-early");
    assert_eq!(early.len(), 10, "{early:?}");
    for row in &early {
        assert_eq!(row.status, RunStatus::Failed, "{row:?}");
        assert!(row.finished_at.is_some(), "{row:?}");
        assert!(row.output.contains("no future for"), "{:?}", row.output);
    }
    assert_eq!(steady.load(Ordering::SeqCst), 10);
    let steady_rows = runs_of(&db, "steady");
    assert_eq!(steady_rows.len(), 10);
    assert!(steady_rows.iter().all(|r| r.status == RunStatus::Succeeded));
}

/// Two replicas, one job whose first two attempts fail: its retries run on
/// the replica that won the instant, under the same lease (one fence), as
/// further attempts of the same instant, each after its backoff; the error's
/// text is each failed attempt's output. On a paused clock.
#[tokio::test(start_paused = true)]
async fn retries_run_under_one_lease_with_one_row_per_attempt() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = |id: &'static str| {
        replica_of(
            &db,
            &clock,
            id,
            Job::new("flaky", "*/5 * * * *")
                .expect("job")
                .retries(2, Duration::from_secs(10))
                .run(|ctx| async move {
                    if ctx.attempt() < 3 {
                        Err(format!("attempt {} found the API down", ctx.attempt()))
                    } else {
                        Ok(())
                    }
                }),
        )
        .build()
    };
    let (p, q) = (
        replica("p").await.expect("build"),
        replica("q").await.expect("build"),
    );
    let until = || tokio::time::sleep(Duration::from_secs(6 * 60));
    let (p, q) = tokio::join!(p.run_until(until()), q.run_until(until()));
    p.expect("p runs");
    q.expect("q runs");
    let rows = runs_of(&db, "flaky");
    let seen: Vec<(String, i32, RunStatus, String)> = rows
        .iter()
        .map(|r| {
            (
                r.scheduled_at.format("%H:%M").to_string(),
                r.attempt,
                r.status,
                r.output.clone(),
            )
        })
        .collect();
    let failed = |n: i32| {
        (
            "00:05".to_string(),
            n,
            RunStatus::Failed,
            format!("attempt {n} found the API down"),
        )
    };
    assert_eq!(
        seen,
        [
            failed(1),
            failed(2),
            ("00:05".to_string(), 3, RunStatus::Succeeded, String::new()),
        ]
    );
    assert!(
        rows.iter()
            .all(|r| r.instance == rows[0].instance && r.fence == rows[0].fence),
        "{rows:?}"
    );
    let triggers: Vec<Trigger> = rows.iter().map(|r| r.triggered_by).collect();
    assert_eq!(
        triggers,
        [Trigger::Schedule, Trigger::Retry, Trigger::Retry],
        "a retry says so"
    );
    let gap = rows[1].started_at - rows[0].finished_at.expect("ended");
    assert!(gap >= TimeDelta::seconds(10), "the backoff was {gap}");
}

/// Catch-up runs an instant nobody claimed only if the job's lease row
/// existed by then: a job new to the fleet has missed nothing, while a job
/// whose replicas were all down at its instant is caught up, once. On a
/// paused clock: an hour passes with no replica running.
#[tokio::test(start_paused = true)]
async fn catch_up_skips_what_came_before_the_job_existed() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = |id: &'static str| {
        replica_of(
            &db,
            &clock,
            id,
            Job::new("new-purge", "0 * * * *")
                .expect("job")
                .catch_up(Duration::from_secs(3600))
                .run(|_| async { Ok::<(), String>(()) }),
        )
        .build()
    };
    // 00:00 came 30 s before the job existed: not caught up.
    replica("first")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(30)))
        .await
        .expect("runs");
    assert!(runs_of(&db, "new-purge").is_empty());
    // No replica runs at 01:00; one starts at 01:00:30 and catches it up.
    tokio::time::sleep(Duration::from_secs(3600 - 60)).await;
    replica("second")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(60)))
        .await
        .expect("runs");
    let rows = runs_of(&db, "new-purge");
    let seen: Vec<(String, RunStatus, Trigger)> = rows
        .iter()
        .map(|r| {
            let at = r.scheduled_at.format("%H:%M").to_string();
            (at, r.status, r.triggered_by)
        })
        .collect();
    assert_eq!(
        seen,
        [("01:00".to_string(), RunStatus::Succeeded, Trigger::CatchUp)],
        "the caught-up run says so"
    );
}

/// After a fleet-wide outage, the check for missed instants records the
/// latest `MAX_RECORDED` instants of a job as `missed` and no more (the
/// rest are summed up in one log line), once: a later round records
/// nothing again. On a paused clock: 200 minutes pass with no replica.
#[tokio::test(start_paused = true)]
async fn a_long_outage_records_at_most_the_latest_hundred_misses() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = |id: &'static str| {
        replica_of(
            &db,
            &clock,
            id,
            Job::new("minutely", "* * * * *")
                .expect("job")
                .run(|_| async { Ok::<(), String>(()) }),
        )
        .build()
    };
    replica("before")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    tokio::time::sleep(Duration::from_secs(200 * 60)).await;
    replica("after")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(5 * 60)))
        .await
        .expect("runs");
    let rows = runs_of(&db, "minutely");
    let missed: Vec<DateTime<Utc>> = rows
        .iter()
        .filter(|r| r.status == RunStatus::Missed)
        .map(|r| r.scheduled_at.and_utc())
        .collect();
    assert_eq!(missed.len(), super::missed::MAX_RECORDED, "{missed:?}");
    // The latest ones: up to the minute before the replica came back.
    let last_ran_before = rows
        .iter()
        .filter(|r| r.status == RunStatus::Succeeded && r.instance == "before")
        .map(|r| r.scheduled_at.and_utc())
        .max()
        .expect("the first replica ran");
    let first_after = rows
        .iter()
        .filter(|r| r.status == RunStatus::Succeeded && r.instance == "after")
        .map(|r| r.scheduled_at.and_utc())
        .min()
        .expect("the second replica ran");
    assert!(
        missed
            .iter()
            .all(|t| *t > last_ran_before && *t < first_after)
    );
    assert_eq!(
        missed.iter().max().copied(),
        Some(first_after - TimeDelta::minutes(1)),
        "{missed:?}"
    );
}

/// Each run's job and two of its times (instant and start, or start and
/// end).
type Starts = Arc<Mutex<Vec<(String, DateTime<Utc>, DateTime<Utc>)>>>;

/// A host clock that a test can move under a running scheduler.
struct MovableClock {
    ahead: Mutex<TimeDelta>,
}

impl Clock for MovableClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + *self.ahead.lock().expect("clock")
    }
}

/// The host's clock jumps 700 ms ahead between two estimates of its offset:
/// the tick loop wakes early by the database's clock, the claim is refused
/// as "not yet" and tried again at the instant, so no run starts early and
/// none is lost. On the real clock, on SQLite (whose clock is the host's
/// real one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_refused_as_not_yet_runs_at_the_instant() {
    let db = TestDb::sqlite();
    // The database's clock stays the real one: the file's connections read
    // the system clock, the scheduler the movable one.
    drop(db.pool(1));
    let pool = crate::db::Pool::open(&db.url, 4).expect("pool");
    let clock = Arc::new(MovableClock {
        ahead: Mutex::new(TimeDelta::zero()),
    });
    let starts: Starts = Arc::default();
    let mut builder = Scheduler::builder(pool).clock(clock.clone());
    for n in 0..2 {
        let starts = starts.clone();
        builder = builder.job(
            Job::new(&format!("job-{n}"), "* * * * * *")
                .expect("job")
                .run(move |ctx| {
                    starts.lock().expect("starts").push((
                        ctx.job().to_string(),
                        ctx.instant(),
                        Utc::now(),
                    ));
                    async { Ok::<(), String>(()) }
                }),
        );
    }
    let scheduler = builder.build().await.expect("build");
    // The offset (zero) is estimated at start; the next estimate is 30 s
    // away. Jump then, and let 4 instants pass on the wrong clock.
    let jump = clock.clone();
    let window = Arc::new(Mutex::new(None));
    let window_set = window.clone();
    scheduler
        .run_until(async move {
            tokio::time::sleep(Duration::from_millis(1200)).await;
            *jump.ahead.lock().expect("clock") = TimeDelta::milliseconds(700);
            let start = Utc::now()
                .duration_trunc(TimeDelta::seconds(1))
                .expect("truncate")
                + TimeDelta::seconds(1);
            tokio::time::sleep(Duration::from_secs(4)).await;
            let end = Utc::now()
                .duration_trunc(TimeDelta::seconds(1))
                .expect("truncate")
                - TimeDelta::seconds(1);
            *window_set.lock().expect("window") = Some((start, end));
        })
        .await
        .expect("runs");
    let (start, end) = window.lock().expect("window").expect("set");
    let starts = starts.lock().expect("starts").clone();
    let mut count: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    for (job, instant, _) in &starts {
        *count.entry((job.clone(), *instant)).or_default() += 1;
    }
    let mut t = start;
    while t <= end {
        for n in 0..2 {
            assert_eq!(
                count.get(&(format!("job-{n}"), t)),
                Some(&1),
                "job-{n} at {t}: {starts:?}"
            );
        }
        t += TimeDelta::seconds(1);
    }
    let earliest = starts
        .iter()
        .map(|(_, instant, at)| (*at - *instant).as_seconds_f64() * 1000.0)
        .fold(f64::MAX, f64::min);
    assert!(
        earliest >= 0.0,
        "a run started {earliest:.1} ms before its instant"
    );
}

/// A job paused at 00:03:30 and resumed at 00:08:30 by an operator (the
/// lease row's columns, as `replicron pause`/`resume` write them): it runs
/// no instant of the pause, during it or after, and none of them is
/// recorded missed; it runs every instant before and after. On a paused
/// clock, with the check for missed instants running throughout.
#[tokio::test(start_paused = true)]
async fn a_paused_job_runs_and_misses_nothing_until_resumed() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let record = ran.clone();
    let scheduler = replica_of(
        &db,
        &clock,
        "solo",
        Job::new("minutely", "* * * * *")
            .expect("job")
            .run(move |ctx| {
                record.lock().expect("ran").push(ctx.instant());
                async { Ok::<(), String>(()) }
            }),
    )
    .build()
    .await
    .expect("build");
    let virtual_clock: Arc<dyn Clock> = clock.clone();
    let mut conn = crate::db::establish_with(&db.database_url(), &virtual_clock).expect("connect");
    let operator = async move {
        tokio::time::sleep(Duration::from_secs(3 * 60)).await;
        assert!(crate::lease::pause(&mut conn, "minutely", None, "ops@host", None).expect("pause"));
        tokio::time::sleep(Duration::from_secs(5 * 60)).await;
        assert!(crate::lease::resume(&mut conn, "minutely").expect("resume"));
        tokio::time::sleep(Duration::from_secs(4 * 60)).await;
    };
    scheduler.run_until(operator).await.expect("runs");
    let minute = |m: i64| utc("2027-03-01T00:00:00Z") + TimeDelta::minutes(m);
    let expected: Vec<DateTime<Utc>> = [1, 2, 3, 9, 10, 11, 12].into_iter().map(minute).collect();
    assert_eq!(*ran.lock().expect("ran"), expected);
    let rows = runs_of(&db, "minutely");
    assert!(
        rows.iter().all(|r| r.status == RunStatus::Succeeded),
        "a paused instant was recorded: {rows:?}"
    );
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
}

/// Two jobs sharing the lock `db` on a paused clock: `hog` runs 150 s at
/// each minute, `quick` wants the lock at each :30. `quick` waits for the
/// lock as an overrun waits (60 s) and is then recorded `skipped`, naming
/// the lock and its holder, and never runs while `hog` does.
#[tokio::test(start_paused = true)]
async fn a_job_whose_lock_stays_held_is_skipped_naming_the_lock_and_holder() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    // Each run's job, start and end.
    let spans: Starts = Arc::default();
    let job = |name: &'static str, schedule: &str, busy: Duration| {
        let (spans, clock) = (spans.clone(), clock.clone());
        let mut job = Job::new(name, schedule).expect("job").run(move |_| {
            let (spans, clock) = (spans.clone(), clock.clone());
            async move {
                let start = clock.now();
                tokio::time::sleep(busy).await;
                spans
                    .lock()
                    .expect("spans")
                    .push((name.to_string(), start, clock.now()));
                Ok::<(), String>(())
            }
        });
        job.settings.gates = vec![super::job::Gate::lock("db")];
        job.settings.timeout = Duration::from_secs(600);
        job
    };
    let scheduler = Scheduler::builder(db.url.as_str())
        .clock(clock.clone())
        .instance_id("solo")
        .job(job("hog", "0 * * * * *", Duration::from_secs(150)))
        .job(job("quick", "30 * * * * *", Duration::from_secs(1)))
        .build()
        .await
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(4 * 60)))
        .await
        .expect("runs");
    let spans = spans.lock().expect("spans").clone();
    for (a, a_start, a_end) in &spans {
        for (b, b_start, b_end) in &spans {
            if (a, a_start) != (b, b_start) {
                assert!(
                    a_end <= b_start || b_end <= a_start,
                    "{a} and {b} overlapped: {spans:?}"
                );
            }
        }
    }
    let quick = runs_of(&db, "quick");
    let skipped: Vec<&RunRow> = quick
        .iter()
        .filter(|r| r.status == RunStatus::Skipped)
        .collect();
    assert!(
        skipped
            .iter()
            .any(|r| r.output == "replicron: not run: lock db stayed held by solo for 60s\n"),
        "{quick:?}"
    );
    // The last one waits when the scheduler stops, and says so.
    assert!(
        skipped.iter().all(|r| r.output.contains("lock db")),
        "{quick:?}"
    );
    assert!(
        quick.iter().any(|r| r.status == RunStatus::Succeeded),
        "{quick:?}"
    );
}

/// Three jobs that take one limit of 2, each running 70 s at every minute,
/// on two replicas and a paused clock: never more than two bodies at once;
/// the limit's slots pass from run to run, so every job runs, and an
/// instant whose slot stayed taken for 60 s is recorded `skipped`, naming
/// the limit and its slots' holders.
#[tokio::test(start_paused = true)]
async fn a_limit_of_two_lets_two_of_three_jobs_run_at_once() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let limit = crate::config::Limit {
        name: "vendor".to_string(),
        max_running: 2,
    };
    let job = |name: &'static str| {
        let (spans, clock) = (spans.clone(), clock.clone());
        let mut job = Job::new(name, "0 * * * * *").expect("job").run(move |_| {
            let (spans, clock) = (spans.clone(), clock.clone());
            async move {
                let start = clock.now();
                tokio::time::sleep(Duration::from_secs(70)).await;
                spans
                    .lock()
                    .expect("spans")
                    .push((name.to_string(), start, clock.now()));
                Ok::<(), String>(())
            }
        });
        job.settings.gates = vec![super::job::Gate {
            label: "limit vendor".to_string(),
            rows: limit.rows(),
        }];
        job.settings.timeout = Duration::from_secs(600);
        job
    };
    let replica = |id: &str| {
        replica_of(&db, &clock, id, job("a"))
            .job(job("b"))
            .job(job("c"))
    };
    side_by_side(replica("one"), replica("two"), Duration::from_secs(6 * 60)).await;
    let spans = spans.lock().expect("spans").clone();
    let mut edges: Vec<(DateTime<Utc>, i32)> = spans
        .iter()
        .flat_map(|(_, start, end)| [(*start, 1), (*end, -1)])
        .collect();
    // An end and a start at one moment: the end first.
    edges.sort();
    let mut running = 0;
    let mut most = 0;
    for (_, step) in edges {
        running += step;
        most = most.max(running);
    }
    assert_eq!(most, 2, "{spans:?}");
    for name in ["a", "b", "c"] {
        assert!(
            spans.iter().any(|(job, _, _)| job == name),
            "{name} never ran: {spans:?}"
        );
    }
    let skipped: Vec<RunRow> = ["a", "b", "c"]
        .iter()
        .flat_map(|job| runs_of(&db, job))
        .filter(|r| r.status == RunStatus::Skipped)
        .collect();
    assert!(
        skipped.iter().any(|r| r
            .output
            .starts_with("replicron: not run: limit vendor stayed held by ")
            && r.output.ends_with(" for 60s\n")),
        "{skipped:?}"
    );
}

/// A job due every 10 s that takes a limit of one, which another job
/// holds for 100 s from 00:01: the waiter's run at 00:01:10 waits 60 s
/// and is recorded `skipped`, the next waits for the rest, and the
/// instants that came meanwhile are the waiting runs' overruns: the check
/// for missed instants records none of them `missed`. The run that got its
/// slot late keeps its claim's start, its end counting the wait. On a
/// paused clock, with the check running all along.
#[tokio::test(start_paused = true)]
async fn instants_while_a_run_waits_for_its_limit_are_overruns_not_missed() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let limit = crate::config::Limit {
        name: "vendor".to_string(),
        max_running: 1,
    };
    let job = |name: &'static str, schedule: &str, busy: u64| {
        let mut job = Job::new(name, schedule)
            .expect("job")
            .run(move |_| async move {
                tokio::time::sleep(Duration::from_secs(busy)).await;
                Ok::<(), String>(())
            });
        job.settings.gates = vec![super::job::Gate {
            label: "limit vendor".to_string(),
            rows: limit.rows(),
        }];
        job.settings.timeout = Duration::from_secs(600);
        job
    };
    replica_of(&db, &clock, "one", job("waiter", "*/10 * * * * *", 1))
        .job(job("hog", "0 1 * * * *", 100))
        .build()
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(6 * 60)))
        .await
        .expect("runs");
    let rows = runs_of(&db, "waiter");
    let missed: Vec<&RunRow> = rows
        .iter()
        .filter(|r| r.status == RunStatus::Missed)
        .collect();
    assert!(missed.is_empty(), "{missed:?}");
    assert!(
        rows.iter().any(
            |r| r.status == RunStatus::Skipped && r.output.contains("limit vendor stayed held")
        ),
        "{rows:?}"
    );
    // The run that had the slot when the hog let it go waited for it
    // since its claim.
    let waited = rows
        .iter()
        .filter(|r| r.status == RunStatus::Succeeded)
        .filter_map(|r| Some(r.finished_at? - r.started_at))
        .max()
        .expect("runs");
    assert!(waited >= TimeDelta::seconds(20), "{rows:?}");
    // The check did judge those instants: it recorded nothing else either.
    assert!(
        runs_of(&db, "hog")
            .iter()
            .all(|r| r.status != RunStatus::Missed),
        "{:?}",
        runs_of(&db, "hog")
    );
}

/// `overlap = "allow"` with one run slot, on two replicas and a paused
/// clock: a job due every 5 s whose runs take 12 s, so its instants wait
/// for the slot, several at once. They start in their order, each once.
#[tokio::test(start_paused = true)]
async fn an_allow_jobs_waiting_instants_start_in_their_order() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let replica = |id: &str| {
        let mut job = recording_job(
            "parallel",
            "*/5 * * * * *",
            Duration::from_secs(12),
            &clock,
            &spans,
        );
        job.settings.overlap = crate::config::Overlap::Allow(1);
        job.settings.gates = vec![super::job::Gate {
            label: "its 1 run slots (max_concurrent)".to_string(),
            rows: crate::lease::concurrent_rows("parallel", 1),
        }];
        job.settings.timeout = Duration::from_secs(600);
        replica_of(&db, &clock, id, job)
    };
    side_by_side(replica("one"), replica("two"), Duration::from_secs(4 * 60)).await;
    let mut spans = spans.lock().expect("spans").clone();
    spans.sort_by_key(|(_, start, _)| *start);
    assert!(spans.len() >= 15, "{spans:?}");
    let instants: Vec<&String> = spans.iter().map(|(instant, _, _)| instant).collect();
    let mut ordered = instants.clone();
    ordered.sort();
    ordered.dedup();
    assert_eq!(instants, ordered, "{spans:?}");
}

/// A connection for a test's own statements that reads the test's virtual
/// clock, as the scheduler's own SQLite connections do.
fn connect_at(db: &TestDb, clock: &Arc<TokioClock>) -> crate::db::DbConnection {
    let clock: Arc<dyn Clock> = clock.clone();
    crate::db::establish_with(&db.database_url(), &clock).expect("connect")
}

/// Replica `id` of a job due each minute that does nothing, with a
/// 2-minute lease.
fn minutely(db: &TestDb, clock: &Arc<TokioClock>, id: &str) -> SchedulerBuilder {
    replica_of(
        db,
        clock,
        id,
        Job::new("minutely", "* * * * *")
            .expect("job")
            .lock_at_most_for(Duration::from_secs(120))
            .run(|_| async { Ok::<(), String>(()) }),
    )
}

/// The instants of `job` recorded `missed`, as `HH:MM`, oldest first.
fn missed_minutes(db: &TestDb, job: &str) -> Vec<String> {
    runs_of(db, job)
        .iter()
        .filter(|r| r.status == RunStatus::Missed)
        .map(|r| r.scheduled_at.format("%H:%M").to_string())
        .collect()
}

/// Records attempt 1 of `job`'s `instant` as started at the instant by
/// `instance` under `fence`, as a replica that was then cut off or vanished
/// left it. With `abandoned` (its last confirmation), the row is also
/// marked `abandoned`, as the job's next claimant marks it. Returns its id.
fn run_left_by(
    conn: &mut crate::db::DbConnection,
    job: &str,
    instant: DateTime<Utc>,
    instance: &str,
    fence: i64,
    abandoned: Option<DateTime<Utc>>,
) -> i64 {
    use crate::db::schema::replicron_runs::dsl as runs;
    use diesel::prelude::*;
    let id = crate::history::record_run_started(
        conn,
        &crate::testing::new_run(job, instant, 1, instance, fence),
    )
    .expect("start");
    diesel::update(runs::replicron_runs.filter(runs::id.eq(id)))
        .set(runs::started_at.eq(instant.naive_utc()))
        .execute(conn)
        .expect("start time");
    if let Some(confirmed) = abandoned {
        diesel::update(runs::replicron_runs.filter(runs::id.eq(id)))
            .set((
                runs::status.eq(RunStatus::Abandoned),
                runs::confirmed_at.eq(Some(confirmed.naive_utc())),
            ))
            .execute(conn)
            .expect("abandon");
    }
    id
}

/// An `abandoned` run (its replica vanished, its end unknown) held its
/// job's lease at most until its lease could have run out after its last
/// confirmation: instants after that which nobody ran are recorded
/// `missed`, not taken for overruns of a run that never ends. On a paused
/// clock, no replica running for a while after the abandoned run.
#[tokio::test(start_paused = true)]
async fn instants_after_an_abandoned_runs_lease_are_missed_not_overruns() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = |id: &'static str| minutely(&db, &clock, id).build();
    replica("before")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    // 00:04 was claimed by a replica that then vanished: its row was marked
    // abandoned by the next claimant, its last confirmation at 00:04:10.
    run_left_by(
        &mut connect_at(&db, &clock),
        "minutely",
        utc("2027-03-01T00:04:00Z"),
        "vanished",
        99,
        Some(utc("2027-03-01T00:04:10Z")),
    );
    tokio::time::sleep(Duration::from_secs(16 * 60)).await;
    replica("after")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    let rows = runs_of(&db, "minutely");
    let missed: Vec<String> = rows
        .iter()
        .filter(|r| r.status == RunStatus::Missed)
        .map(|r| r.scheduled_at.format("%H:%M").to_string())
        .collect();
    // The abandoned run held the lease until 00:06:10 at most (its last
    // confirmation and the 2-minute lease): 00:05 and 00:06 were its
    // overruns; 00:07 on, up to the instant before the replica came back,
    // were missed.
    let first_after = rows
        .iter()
        .filter(|r| r.status == RunStatus::Succeeded && r.instance == "after")
        .map(|r| r.scheduled_at.and_utc())
        .min()
        .expect("the second replica ran");
    let expected: Vec<String> = (7..)
        .map(|m| utc("2027-03-01T00:00:00Z") + TimeDelta::minutes(m))
        .take_while(|t| *t < first_after)
        .map(|t| t.format("%H:%M").to_string())
        .collect();
    assert!(expected.len() >= 10, "{expected:?}");
    assert_eq!(missed, expected, "{rows:?}");
}

/// A check for missed instants that read a run as going, its holder still
/// holding the lease, took the instants after it for its overruns and moved
/// the job's mark past them. When the run is then marked `abandoned` (its
/// holder gone), its lease covered only its last confirmation plus
/// `lock_at_most_for`: marking it takes the mark back to that confirmation,
/// so the instants after its lease, which nobody ran, are recorded
/// `missed` (found by the suite's campaign: `verify` called two instants
/// unaccounted). On a paused clock.
#[tokio::test(start_paused = true)]
async fn marking_a_run_abandoned_takes_back_the_instants_taken_for_its_overruns() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = |id: &'static str| minutely(&db, &clock, id).build();
    replica("before")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    // 00:04 was claimed by a replica that then vanished, its run still
    // recorded going, its last confirmation at 00:04:10.
    let mut conn = connect_at(&db, &clock);
    run_left_by(
        &mut conn,
        "minutely",
        utc("2027-03-01T00:04:00Z"),
        "vanished",
        99,
        None,
    );
    {
        use crate::db::schema::replicron_runs::dsl as runs;
        use diesel::prelude::*;
        diesel::update(runs::replicron_runs.filter(runs::instance.eq("vanished")))
            .set(runs::confirmed_at.eq(Some(utc("2027-03-01T00:04:10Z").naive_utc())))
            .execute(&mut conn)
            .expect("confirmation");
    }
    tokio::time::sleep(Duration::from_secs(16 * 60)).await;
    // A check read the run as going and counted 00:05 to 00:20 as its
    // overruns: the mark is at 00:20.
    {
        use crate::db::schema::replicron_locks::dsl as locks;
        use diesel::prelude::*;
        diesel::update(locks::replicron_locks.filter(locks::name.eq("minutely")))
            .set(locks::missed_checked_until.eq(Some(utc("2027-03-01T00:20:00Z").naive_utc())))
            .execute(&mut conn)
            .expect("mark");
    }
    // The next claimant marks the run abandoned.
    let marked = crate::history::mark_abandoned(&mut conn, "minutely", 100).expect("abandon");
    assert_eq!(marked.len(), 1, "{marked:?}");
    let mark = crate::lease::find_lock(&mut conn, "minutely")
        .expect("read")
        .expect("row")
        .missed_checked_until
        .expect("mark")
        .and_utc();
    assert_eq!(
        mark,
        utc("2027-03-01T00:04:10Z"),
        "the mark goes back to the last confirmation"
    );
    replica("after")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    let rows = runs_of(&db, "minutely");
    let missed: Vec<String> = rows
        .iter()
        .filter(|r| r.status == RunStatus::Missed)
        .map(|r| r.scheduled_at.format("%H:%M").to_string())
        .collect();
    // Its lease ran out at 00:06:10 at most: 00:05 and 00:06 were its
    // overruns; 00:07 on, up to the first instant the replica ran, missed.
    let first_after = rows
        .iter()
        .filter(|r| r.status == RunStatus::Succeeded && r.instance == "after")
        .map(|r| r.scheduled_at.and_utc())
        .min()
        .expect("the second replica ran");
    let expected: Vec<String> = (7..)
        .map(|m| utc("2027-03-01T00:00:00Z") + TimeDelta::minutes(m))
        .take_while(|t| *t < first_after)
        .map(|t| t.format("%H:%M").to_string())
        .collect();
    assert!(expected.len() >= 13, "{expected:?}");
    assert_eq!(missed, expected, "{rows:?}");
}

/// A run whose first attempt failed and whose retry was abandoned before
/// any confirmation was recorded held its lease at most from the first
/// attempt's start (the claim) for `lock_at_most_for`, as `verify` judges
/// it: the retry's start is no confirmation. The instants after that are
/// recorded `missed`, not taken for the retry's overruns (found by the
/// fault campaign: `verify` called such an instant unaccounted). On a
/// paused clock.
#[tokio::test(start_paused = true)]
async fn an_abandoned_retry_held_the_lease_from_its_first_attempt() {
    use crate::db::schema::replicron_runs::dsl as runs;
    use diesel::prelude::*;
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = |id: &'static str| minutely(&db, &clock, id).build();
    replica("before")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    // 00:04: attempt 1 failed at 00:04:30; its retry started at 00:05:30
    // and was abandoned, nothing confirmed. The lease, claimed at 00:04,
    // ran out by 00:06.
    let mut conn = connect_at(&db, &clock);
    let first = run_left_by(
        &mut conn,
        "minutely",
        utc("2027-03-01T00:04:00Z"),
        "vanished",
        99,
        None,
    );
    diesel::update(runs::replicron_runs.filter(runs::id.eq(first)))
        .set((
            runs::status.eq(RunStatus::Failed),
            runs::finished_at.eq(Some(utc("2027-03-01T00:04:30Z").naive_utc())),
        ))
        .execute(&mut conn)
        .expect("failed");
    let retry = crate::history::record_run_started(
        &mut conn,
        &crate::testing::new_run("minutely", utc("2027-03-01T00:04:00Z"), 2, "vanished", 99),
    )
    .expect("retry");
    diesel::update(runs::replicron_runs.filter(runs::id.eq(retry)))
        .set((
            runs::started_at.eq(utc("2027-03-01T00:05:30Z").naive_utc()),
            runs::status.eq(RunStatus::Abandoned),
        ))
        .execute(&mut conn)
        .expect("abandoned");
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    replica("after")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    let missed = missed_minutes(&db, "minutely");
    assert!(!missed.contains(&"00:06".to_string()), "{missed:?}");
    assert!(missed.contains(&"00:07".to_string()), "{missed:?}");
}

/// An instant whose holder died (`abandoned`, nothing confirmed) and that
/// was run again later under a new lease (`on_abandon = "rerun"`): the
/// first run held the lease for `lock_at_most_for` from its claim, the
/// rerun from its own start. The instants between the two leases, which
/// nobody ran, are recorded `missed`: they were taken for overruns of one
/// span from the first run's start to the rerun's end (found by the fault
/// campaign: `verify` called such an instant unaccounted). On a paused
/// clock.
#[tokio::test(start_paused = true)]
async fn the_instants_between_an_abandoned_run_and_its_rerun_are_missed() {
    use crate::db::schema::replicron_runs::dsl as runs;
    use diesel::prelude::*;
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = |id: &'static str| minutely(&db, &clock, id).build();
    replica("before")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    // 00:04: claimed at 00:04 by a replica that died, nothing confirmed
    // (its lease ran out by 00:06); run again from 00:09:30 to 00:09:40
    // under a later lease.
    let mut conn = connect_at(&db, &clock);
    let first = run_left_by(
        &mut conn,
        "minutely",
        utc("2027-03-01T00:04:00Z"),
        "vanished",
        99,
        None,
    );
    diesel::update(runs::replicron_runs.filter(runs::id.eq(first)))
        .set(runs::status.eq(RunStatus::Abandoned))
        .execute(&mut conn)
        .expect("abandoned");
    let rerun = crate::history::record_run_started(
        &mut conn,
        &crate::testing::new_run("minutely", utc("2027-03-01T00:04:00Z"), 2, "rerunner", 100),
    )
    .expect("rerun");
    diesel::update(runs::replicron_runs.filter(runs::id.eq(rerun)))
        .set((
            runs::started_at.eq(utc("2027-03-01T00:09:30Z").naive_utc()),
            runs::finished_at.eq(Some(utc("2027-03-01T00:09:40Z").naive_utc())),
            runs::status.eq(RunStatus::Succeeded),
        ))
        .execute(&mut conn)
        .expect("rerun");
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    replica("after")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    let missed = missed_minutes(&db, "minutely");
    for overrun in ["00:05", "00:06"] {
        assert!(!missed.contains(&overrun.to_string()), "{missed:?}");
    }
    for between in ["00:07", "00:08", "00:09"] {
        assert!(missed.contains(&between.to_string()), "{missed:?}");
    }
}

/// Pausing a job that is paused already (a new reason or end), or pausing
/// it again soon after a resume, never turns an instant of an earlier pause
/// into a miss: no `missed` row, and nothing run, for any instant paused.
/// On a paused clock, with the check for missed instants running all along.
#[tokio::test(start_paused = true)]
async fn replacing_a_pause_keeps_its_instants_the_pauses() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let scheduler = replica_of(
        &db,
        &clock,
        "solo",
        Job::new("minutely", "* * * * *")
            .expect("job")
            .run(|_| async { Ok::<(), String>(()) }),
    )
    .build()
    .await
    .expect("build");
    let running =
        tokio::spawn(scheduler.run_until(tokio::time::sleep(Duration::from_secs(20 * 60))));
    let mut conn = connect_at(&db, &clock);
    let at = |text: &str| utc(&format!("2027-03-01T{text}Z"));
    let sleep_to = |clock: &Arc<TokioClock>, t: DateTime<Utc>| {
        let wait = (t - clock.now()).to_std().unwrap_or_default();
        tokio::time::sleep(wait)
    };
    // Paused at 00:02:30; its reason changed at 00:05:30.
    sleep_to(&clock, at("00:02:30")).await;
    assert!(crate::lease::pause(&mut conn, "minutely", None, "a@h", Some("first")).expect("pause"));
    sleep_to(&clock, at("00:05:30")).await;
    assert!(
        crate::lease::pause(&mut conn, "minutely", None, "b@h", Some("second")).expect("pause")
    );
    // Resumed at 00:08:10, paused again at 00:08:20 until 00:10:30.
    sleep_to(&clock, at("00:08:10")).await;
    assert!(crate::lease::resume(&mut conn, "minutely").expect("resume"));
    sleep_to(&clock, at("00:08:20")).await;
    assert!(
        crate::lease::pause(&mut conn, "minutely", Some(at("00:10:30")), "c@h", None)
            .expect("pause")
    );
    running.await.expect("task").expect("runs");
    let rows = runs_of(&db, "minutely");
    let paused_instants = |r: &&RunRow| {
        let t = r.scheduled_at.and_utc();
        t > at("00:02:30") && t < at("00:10:30")
    };
    let during: Vec<&RunRow> = rows.iter().filter(paused_instants).collect();
    assert!(
        during.is_empty(),
        "instants of the pauses ran or were missed: {during:?}"
    );
    assert!(
        rows.iter().all(|r| r.status == RunStatus::Succeeded),
        "{rows:?}"
    );
    // The job ran before and after.
    assert!(
        rows.iter()
            .any(|r| r.scheduled_at.and_utc() == at("00:02:00"))
    );
    assert!(
        rows.iter()
            .any(|r| r.scheduled_at.and_utc() == at("00:11:00"))
    );
}

/// The database is locked past the replica's wait for an answer while
/// instants come due: their claims go unanswered, and commit once the lock
/// is gone, after their callers stopped waiting. Such a claim records no
/// run that nobody starts (which the next claimant would mark abandoned);
/// its replica learns from the row that it committed, takes the lease up
/// again and runs the instant late. Every instant runs once, nothing is
/// abandoned or missed, and no row is left running. On the real clock,
/// with SQLite locked by another connection, and a replica that waits 300
/// ms for an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_commits_after_its_caller_gave_up_still_runs_once() {
    use diesel::connection::SimpleConnection;
    let db = TestDb::sqlite();
    let ran: Arc<Mutex<BTreeMap<DateTime<Utc>, usize>>> = Arc::default();
    let counted = ran.clone();
    let pool = db.pool(4).with_call_timeout(Duration::from_millis(300));
    let scheduler = Scheduler::builder(pool)
        .instance_id("solo")
        .job(
            Job::new("tick", "* * * * * *")
                .expect("job")
                .lock_at_most_for(Duration::from_secs(30))
                .run(move |ctx| {
                    let counted = counted.clone();
                    async move {
                        *counted
                            .lock()
                            .expect("runs")
                            .entry(ctx.instant())
                            .or_default() += 1;
                        Ok::<(), String>(())
                    }
                }),
        )
        .build()
        .await
        .expect("build");
    let started = Utc::now();
    let running = tokio::spawn(scheduler.run_until(tokio::time::sleep(Duration::from_secs(7))));
    // Lock the database from 1.7 s to 3.7 s: two instants come due meanwhile.
    let url = db.url.clone();
    let locker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1700));
        let path = url.trim_start_matches("sqlite://");
        let mut conn =
            <diesel::SqliteConnection as diesel::Connection>::establish(path).expect("connect");
        // Waits for a write in flight rather than failing on it.
        conn.batch_execute("PRAGMA busy_timeout = 5000; BEGIN IMMEDIATE")
            .expect("lock");
        std::thread::sleep(Duration::from_secs(2));
        conn.batch_execute("COMMIT").expect("unlock");
    });
    running.await.expect("task").expect("runs");
    locker.join().expect("locker");
    let rows = runs_of(&db, "tick");
    assert!(
        rows.iter().all(|r| r.status == RunStatus::Succeeded),
        "a row was left running, abandoned, missed or skipped: {rows:?}"
    );
    let ran = ran.lock().expect("runs").clone();
    assert!(
        ran.values().all(|n| *n == 1),
        "an instant ran twice: {ran:?}"
    );
    // Every instant from the first to the last that ran, the locked ones
    // included, ran once.
    let first = *ran.keys().next().expect("ran");
    let last = *ran.keys().last().expect("ran");
    assert!(first <= started + TimeDelta::seconds(2), "{ran:?}");
    let expected = (last - first).num_seconds() + 1;
    assert_eq!(ran.len() as i64, expected, "{ran:?}");
    assert!(last >= started + TimeDelta::seconds(5), "{ran:?}");
}

/// A run ends while the database is locked past the replica's wait for an
/// answer: the batch carrying its end fails, and the end is written alone
/// once the lock is gone. Meanwhile a check for missed instants took the
/// instants after the run for its overruns and moved the job's mark past
/// them (here, the lock's own transaction moves it). The end written alone
/// takes the mark back to the run's end, so those instants are judged
/// again (found by the fault campaign: two instants of a limited job after
/// a partition, neither run nor recorded). On the real clock, with SQLite
/// locked by another connection, and a replica that waits 300 ms for an
/// answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_written_after_its_batch_failed_takes_the_missed_mark_back() {
    use crate::db::schema::replicron_locks::dsl as locks;
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;
    let db = TestDb::sqlite();
    let far = utc("2099-01-01T00:00:00Z").naive_utc();
    let runs = Arc::new(AtomicUsize::new(0));
    let path = db.url.trim_start_matches("sqlite://").to_string();
    let locker: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    let pool = db.pool(4).with_call_timeout(Duration::from_millis(300));
    let scheduler = Scheduler::builder(pool)
        .instance_id("solo")
        .job(
            Job::new("tick", "* * * * * *")
                .expect("job")
                .lock_at_most_for(Duration::from_secs(30))
                .run({
                    let (runs, locker) = (runs.clone(), locker.clone());
                    move |_| {
                        let first = runs.fetch_add(1, Ordering::SeqCst) == 0;
                        let (path, locker) = (path.clone(), locker.clone());
                        async move {
                            if first {
                                // Lock the database as the run ends, and
                                // move the mark far ahead meanwhile.
                                let (locked, wait) = std::sync::mpsc::channel();
                                let thread = std::thread::spawn(move || {
                                    let mut conn = diesel::SqliteConnection::establish(&path)
                                        .expect("connect");
                                    conn.batch_execute(
                                        "PRAGMA busy_timeout = 5000; BEGIN IMMEDIATE",
                                    )
                                    .expect("lock");
                                    diesel::update(
                                        locks::replicron_locks.filter(locks::name.eq("tick")),
                                    )
                                    .set(locks::missed_checked_until.eq(Some(far)))
                                    .execute(&mut conn)
                                    .expect("mark");
                                    locked.send(()).expect("tell");
                                    std::thread::sleep(Duration::from_millis(1500));
                                    conn.batch_execute("COMMIT").expect("unlock");
                                });
                                wait.recv().expect("locked");
                                *locker.lock().expect("locker") = Some(thread);
                            }
                            Ok::<(), String>(())
                        }
                    }
                }),
        )
        .build()
        .await
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(5)))
        .await
        .expect("runs");
    locker
        .lock()
        .expect("locker")
        .take()
        .expect("the first run locked the database")
        .join()
        .expect("locker");
    let rows = runs_of(&db, "tick");
    let first = rows.iter().min_by_key(|r| r.scheduled_at).expect("a run");
    assert_eq!(first.status, RunStatus::Succeeded, "{rows:?}");
    let end = first.finished_at.expect("its end");
    let mut conn = db.connect();
    let mark = crate::lease::find_lock(&mut conn, "tick")
        .expect("read")
        .expect("row")
        .missed_checked_until
        .expect("mark");
    assert!(mark < far, "the mark stayed past the run's end: {mark}");
    assert_eq!(mark, end, "the mark goes back to the run's end: {rows:?}");
}

/// A run whose end is recorded late (its replica was cut off when the run
/// ended) held the lease meanwhile, so the job's next instants were its
/// overruns while its end was unknown. Once the end lands, the instants
/// after it that nobody ran are recorded `missed`: the check for missed
/// instants, which had gone past them, goes back to the run's end.
#[tokio::test(start_paused = true)]
async fn instants_after_a_late_recorded_end_are_missed_not_overruns() {
    use crate::db::schema::replicron_locks::dsl as locks;
    use diesel::prelude::*;
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = || {
        replica_of(
            &db,
            &clock,
            "here",
            Job::new("minutely", "* * * * *")
                .expect("job")
                .lock_at_most_for(Duration::from_secs(600))
                .missed_after(Duration::from_secs(20))
                .run(|_| async { Ok::<(), String>(()) }),
        )
        .build()
    };
    let run_for = |minutes: u64| {
        let replica = replica();
        async move {
            replica
                .await
                .expect("build")
                .run_until(tokio::time::sleep(Duration::from_secs(minutes * 60)))
                .await
                .expect("runs");
        }
    };
    run_for(3).await;
    // 00:04 is claimed by a replica that is then cut off: its run ends at
    // 00:04:10, but neither its end nor its release reaches the database.
    let id = {
        let mut conn = connect_at(&db, &clock);
        let id = run_left_by(
            &mut conn,
            "minutely",
            utc("2027-03-01T00:04:00Z"),
            "cut-off",
            99,
            None,
        );
        diesel::update(locks::replicron_locks.filter(locks::name.eq("minutely")))
            .set((
                locks::fence.eq(99_i64),
                locks::locked_by.eq(Some("cut-off")),
                locks::locked_at.eq(Some(utc("2027-03-01T00:04:00Z").naive_utc())),
                locks::last_scheduled_at.eq(Some(utc("2027-03-01T00:04:00Z").naive_utc())),
                locks::lock_until.eq(utc("2027-03-01T00:14:00Z").naive_utc()),
            ))
            .execute(&mut conn)
            .expect("lease");
        id
    };
    tokio::time::sleep(Duration::from_secs(60)).await;
    // The job's instants are overruns of the cut-off run meanwhile.
    run_for(4).await;
    // Its end and its release land at last.
    {
        let mut conn = connect_at(&db, &clock);
        crate::history::record_run_finished(
            &mut conn,
            id,
            &crate::history::RunFinish {
                status: RunStatus::Succeeded,
                exit_code: Some(0),
                output: String::new(),
                duration: Duration::from_secs(10),
                output_file: None,
            },
            true,
        )
        .expect("end");
        diesel::update(locks::replicron_locks.filter(locks::name.eq("minutely")))
            .set(locks::lock_until.eq(utc("2027-03-01T00:09:00Z").naive_utc()))
            .execute(&mut conn)
            .expect("release");
    }
    run_for(3).await;
    let rows = runs_of(&db, "minutely");
    let missed: Vec<String> = rows
        .iter()
        .filter(|r| r.status == RunStatus::Missed)
        .map(|r| r.scheduled_at.format("%H:%M").to_string())
        .collect();
    let first_after = rows
        .iter()
        .filter(|r| {
            r.status == RunStatus::Succeeded
                && r.scheduled_at.and_utc() > utc("2027-03-01T00:04:00Z")
        })
        .map(|r| r.scheduled_at.and_utc())
        .min()
        .expect("the job ran again");
    let expected: Vec<String> = (5..)
        .map(|m| utc("2027-03-01T00:00:00Z") + TimeDelta::minutes(m))
        .take_while(|t| *t < first_after)
        .map(|t| t.format("%H:%M").to_string())
        .collect();
    assert!(expected.len() >= 4, "{expected:?}");
    assert_eq!(missed, expected, "{rows:?}");
}

/// The check for missed instants starts where the job does: a fleet whose
/// first replica stopped right after creating the job's row, and whose
/// next came minutes later, has the instants between recorded `missed`
/// (an outage at a fleet's start is told like any other).
#[tokio::test(start_paused = true)]
async fn a_jobs_first_instants_are_checked_for_misses() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let replica = |id: &'static str| {
        replica_of(
            &db,
            &clock,
            id,
            Job::new("minutely", "* * * * *")
                .expect("job")
                .run(|_| async { Ok::<(), String>(()) }),
        )
        .build()
    };
    replica("first")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(1)))
        .await
        .expect("runs");
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    replica("next")
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    let missed = missed_minutes(&db, "minutely");
    assert_eq!(missed, ["00:01", "00:02", "00:03", "00:04", "00:05"]);
}

/// A run the check for missed instants counted as going, because its end
/// was not known, may end between the check's read and its move of the
/// mark. Its own rewind then finds the mark still before its end and
/// changes nothing, and the check moves the mark past the instants it took
/// for overruns: they would be neither run nor recorded missed (found by
/// the fault campaign: two per-second instants after a partition). The
/// check takes the mark back to the end it finds after its move.
#[test]
fn a_run_ending_while_the_check_runs_takes_the_mark_back() {
    use diesel::prelude::*;
    let db = TestDb::sqlite();
    drop(db.pool(1));
    let mut conn = db.connect();
    crate::lease::ensure_rows(&mut conn, &["tick"]).expect("row");
    let read = utc("2027-03-01T00:00:12Z");
    {
        use crate::db::schema::replicron_locks::dsl as locks;
        diesel::update(locks::replicron_locks.filter(locks::name.eq("tick")))
            .set(locks::missed_checked_until.eq(Some(read.naive_utc())))
            .execute(&mut conn)
            .expect("mark");
    }
    let id = run_left_by(
        &mut conn,
        "tick",
        utc("2027-03-01T00:00:13Z"),
        "cut-off",
        15,
        Some(utc("2027-03-01T00:00:13Z")),
    );
    // The check has read the mark (00:12) and the run without its end, and
    // took 00:14 and 00:15 for its overruns. Now the run's end lands: the
    // mark is still before it, so its rewind changes nothing.
    let finish = crate::history::RunFinish {
        status: RunStatus::Succeeded,
        exit_code: Some(0),
        output: String::new(),
        duration: Duration::from_millis(383),
        output_file: None,
    };
    assert!(crate::history::record_run_finished(&mut conn, id, &finish, true).expect("end"));
    // The check moves the mark to 00:20.
    super::missed::commit_checked(
        &mut conn,
        "tick",
        Some(read.naive_utc()),
        utc("2027-03-01T00:00:20Z"),
        &[id],
    )
    .expect("commit");
    let mark = crate::lease::find_lock(&mut conn, "tick")
        .expect("read")
        .expect("row")
        .missed_checked_until
        .expect("mark")
        .and_utc();
    let end = runs_of(&db, "tick")[0]
        .finished_at
        .expect("the run's end")
        .and_utc();
    assert!(end < utc("2027-03-01T00:00:20Z"), "{end}");
    assert_eq!(mark, end, "the next round checks again from the run's end");
}

/// A `@manual` job beside an hourly one, for an hour on a paused clock: it
/// never runs by itself, and none of its (non-existent) instants is
/// recorded missed, while the hourly job runs.
#[tokio::test(start_paused = true)]
async fn a_manual_job_never_fires_by_itself_and_is_never_missed() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = "[[job]]\nname = \"asked\"\nschedule = \"@manual\"\ncommand = \"true\"\n\
                params = [\"DAYS\"]\ncatch_up = \"1h\"\nmissed_after = \"1s\"\n";
    let config = config_of(&format!("[database]\nurl = {:?}\n\n{text}", db.url));
    let hourly = Arc::new(AtomicUsize::new(0));
    let counted = hourly.clone();
    let scheduler = Scheduler::builder(db.url.as_str())
        .clock(clock)
        .instance_id("solo")
        .job(Job::from_config(&config.jobs[0]))
        .job(Job::new("hourly", "0 * * * *").expect("job").run(move |_| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        }))
        .build()
        .await
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(3600)))
        .await
        .expect("runs");
    assert_eq!(hourly.load(Ordering::SeqCst), 1);
    assert_eq!(runs_of(&db, "asked"), Vec::<RunRow>::new());
}

/// The runs of jobs that record their instant, start and end on `clock`,
/// each running `busy` unless told to stop.
fn recording_job(
    name: &'static str,
    schedule: &str,
    busy: Duration,
    clock: &Arc<TokioClock>,
    spans: &Starts,
) -> Job {
    let (spans, clock) = (spans.clone(), clock.clone());
    Job::new(name, schedule).expect("job").run(move |ctx| {
        let (spans, clock) = (spans.clone(), clock.clone());
        async move {
            let start = clock.now();
            tokio::select! {
                () = tokio::time::sleep(busy) => {}
                () = ctx.cancelled() => {}
            }
            spans.lock().expect("spans").push((
                crate::schedule::fmt_instant(ctx.instant()),
                start,
                clock.now(),
            ));
            Ok::<(), String>(())
        }
    })
}

/// `overlap = "queue"` on two replicas and a paused clock: a job due each
/// minute that runs 150 s. The instant that comes while a run goes waits
/// and starts when it ends (the one after is an overrun), so the runs
/// follow each other with no gap and no overlap, each instant once.
#[tokio::test(start_paused = true)]
async fn a_queued_instant_starts_as_the_run_before_it_ends() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let replica = |id: &str| {
        let mut job = recording_job(
            "queued",
            "0 * * * * *",
            Duration::from_secs(150),
            &clock,
            &spans,
        );
        job.settings.overlap = crate::config::Overlap::Queue;
        job.settings.timeout = Duration::from_secs(600);
        replica_of(&db, &clock, id, job)
    };
    side_by_side(replica("one"), replica("two"), Duration::from_secs(11 * 60)).await;
    let spans = spans.lock().expect("spans").clone();
    let instants: Vec<&str> = spans.iter().map(|(i, _, _)| &i[14..16]).collect();
    // 01 runs to 03:30, while 02 waits (03 is an overrun: one waits);
    // 02 runs to 06:00, while 04 waits (05: an overrun); 04 to 08:30,
    // while 07 waits (06 came while 04 still waited); 07 to 11:00, while
    // 09 waits; 09 runs until the scheduler stops.
    assert_eq!(instants, ["01", "02", "04", "07", "09"], "{spans:?}");
    for pair in spans.windows(2) {
        let gap = pair[1].1 - pair[0].2;
        assert!(
            gap >= TimeDelta::zero() && gap < TimeDelta::milliseconds(100),
            "{pair:?}"
        );
    }
    let rows = runs_of(&db, "queued");
    let (last, before) = rows.split_last().expect("runs");
    assert!(
        before.iter().all(|r| r.status == RunStatus::Succeeded),
        "{rows:?}"
    );
    assert_eq!(
        last.status,
        RunStatus::Killed,
        "stopped with the scheduler: {rows:?}"
    );
}

/// `overlap = "replace"` on two replicas and a paused clock: a job due
/// each minute whose runs would take 10 minutes, with a 30 s lease. Each
/// instant stops the run before it at that run's next keep-alive; the old
/// body has ended before the new one starts, and the old run is recorded
/// `replaced`.
#[tokio::test(start_paused = true)]
async fn a_replacing_instant_stops_the_run_before_it() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let replica = |id: &str| {
        let mut job = recording_job(
            "latest",
            "0 * * * * *",
            Duration::from_secs(600),
            &clock,
            &spans,
        );
        job.settings.overlap = crate::config::Overlap::Replace;
        job.settings.lock_at_most_for = Duration::from_secs(30);
        job.settings.kill_grace = Duration::from_secs(2);
        job.settings.timeout = Duration::from_secs(1200);
        replica_of(&db, &clock, id, job)
    };
    side_by_side(
        replica("one"),
        replica("two"),
        Duration::from_secs(5 * 60 + 30),
    )
    .await;
    let spans = spans.lock().expect("spans").clone();
    assert!(spans.len() >= 4, "{spans:?}");
    for pair in spans.windows(2) {
        assert!(pair[0].2 <= pair[1].1, "overlapped: {pair:?}");
    }
    let rows = runs_of(&db, "latest");
    let replaced = rows
        .iter()
        .filter(|r| r.status == RunStatus::Replaced)
        .count();
    assert!(replaced >= 4, "{rows:?}");
    let mut instants: Vec<_> = rows.iter().map(|r| r.scheduled_at).collect();
    instants.dedup();
    assert_eq!(instants.len(), rows.len(), "an instant ran twice: {rows:?}");
}

/// `overlap = "queue"` or `"replace"` on two replicas and a paused clock:
/// a job due every 10 s whose runs take 25 s, whose first run starts 15 s
/// late (a claim that started no run held its lease until 00:01:15). The
/// instants that came before that late run started wait behind it
/// (`queue`) or replace it (`replace`), as any instant that comes while a
/// run of such a job goes: a run holds the job from its instant, not from
/// its start. They do not each wait for the run before them to end and
/// then start late in turn, so that the lateness, grown by the 15 s a run
/// outlasts its period at each instant, reached a minute and stayed there.
/// After the first run, lateness stays within one run (`queue`) or one
/// keep-alive (`replace`); each instant runs at most once, and runs never
/// overlap.
#[tokio::test(start_paused = true)]
async fn a_late_run_does_not_make_a_backlog_of_a_queue_or_replace_job() {
    for overlap in [
        crate::config::Overlap::Queue,
        crate::config::Overlap::Replace,
    ] {
        let db = TestDb::sqlite();
        let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
        let mut conn = connect_at(&db, &clock);
        crate::db::migrate::migrate(&mut conn, "test").expect("migrate");
        let planted = crate::lease::claim(
            &mut conn,
            "late",
            "vanished",
            utc("2027-03-01T00:00:50Z"),
            Duration::from_secs(25),
        )
        .expect("claim");
        assert!(
            matches!(planted, crate::lease::Claim::Won(_)),
            "{planted:?}"
        );
        let spans: Starts = Arc::default();
        let replica = |id: &str| {
            let mut job = recording_job(
                "late",
                "*/10 * * * * *",
                Duration::from_secs(25),
                &clock,
                &spans,
            );
            job.settings.overlap = overlap;
            job.settings.lock_at_most_for = Duration::from_secs(15);
            job.settings.kill_grace = Duration::from_secs(1);
            replica_of(&db, &clock, id, job)
        };
        side_by_side(replica("one"), replica("two"), Duration::from_secs(4 * 60)).await;
        let mut spans = spans.lock().expect("spans").clone();
        spans.sort_by_key(|span| span.1);
        let late: Vec<(String, i64)> = spans
            .iter()
            .map(|(instant, start, _)| {
                let instant = utc(instant);
                (
                    instant.format("%M:%S").to_string(),
                    (*start - instant).num_seconds(),
                )
            })
            .collect();
        assert_eq!(late[0].0, "01:00", "{overlap:?}: {late:?}");
        assert!((15..=18).contains(&late[0].1), "{overlap:?}: {late:?}");
        let bound = match overlap {
            crate::config::Overlap::Queue => 30,
            _ => 10,
        };
        let rows = rows_by_instant(&db, "late");
        assert!(
            late[1..].iter().all(|(_, late)| *late <= bound),
            "{overlap:?}: a run started more than {bound} s late: {late:?} {rows:?}"
        );
        assert!(late.len() >= 8, "{overlap:?}: {late:?}");
        for pair in spans.windows(2) {
            assert!(pair[0].2 <= pair[1].1, "{overlap:?}: overlapped: {pair:?}");
        }
        let mut instants: Vec<_> = runs_of(&db, "late")
            .iter()
            .filter(|r| r.status != RunStatus::Missed)
            .map(|r| (r.scheduled_at, r.attempt))
            .collect();
        let all = instants.len();
        instants.sort();
        instants.dedup();
        assert_eq!(instants.len(), all, "{overlap:?}: an instant ran twice");
    }
}

/// What a stopping loop had not reached: the instants after the last it
/// reached whose start had come, after one it reached but had not decided;
/// none older than the ticker still hands out (those were said skipped).
#[test]
fn a_stop_names_the_instants_its_loop_had_not_reached() {
    let job = Job::new("behind", "*/10 * * * * *").expect("job");
    let at = |hms: &str| utc(&format!("2027-03-01T{hms}Z"));
    let not_reached = |after, undecided, now| super::tick::not_reached(&job, after, undecided, now);
    assert_eq!(
        not_reached(at("00:01:10"), None, at("00:01:35")),
        Some((at("00:01:20"), at("00:01:30"), 2))
    );
    assert_eq!(
        not_reached(at("00:01:10"), Some(at("00:01:10")), at("00:01:35")),
        Some((at("00:01:10"), at("00:01:30"), 3))
    );
    assert_eq!(not_reached(at("00:01:30"), None, at("00:01:35")), None);
    assert_eq!(
        not_reached(at("00:00:00"), None, at("00:05:05")),
        Some((at("00:04:10"), at("00:05:00"), 6))
    );
}

/// A job of the job file with several schedules that share instants, on two
/// replicas and a paused clock: each instant of the union runs once, a
/// shared one too, and none is recorded missed.
#[tokio::test(start_paused = true)]
async fn several_schedules_run_each_instant_of_their_union_once() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[[job]]\nname = \"union\"\n\
         schedule = [\"*/2 * * * *\", \"*/3 * * * *\"]\ncommand = \"true\"\nmissed_after = \"5s\"\n",
        db.url
    );
    let config = config_of(&text);
    let ran: Arc<Mutex<Vec<DateTime<Utc>>>> = Arc::default();
    let replica = |id: &str| {
        let record = ran.clone();
        let job = Job::from_config(&config.jobs[0]).run(move |ctx| {
            record.lock().expect("ran").push(ctx.instant());
            async { Ok::<(), String>(()) }
        });
        replica_of(&db, &clock, id, job)
    };
    side_by_side(
        replica("one"),
        replica("two"),
        Duration::from_secs(12 * 60 + 20),
    )
    .await;
    let mut ran = ran.lock().expect("ran").clone();
    ran.sort();
    let minutes: Vec<u32> = ran.iter().map(chrono::Timelike::minute).collect();
    // Minutes 2..=12 divisible by 2 or 3: 6 and 12 in both, once each.
    assert_eq!(minutes, [2, 3, 4, 6, 8, 9, 10, 12]);
    let rows = runs_of(&db, "union");
    assert_eq!(rows.len(), 8, "{rows:?}");
    assert!(
        rows.iter().all(|r| r.status == RunStatus::Succeeded),
        "{rows:?}"
    );
}

/// A calendar and a window on two replicas and a paused clock, for an
/// hour and a half across midnight: the instants of the calendar's date
/// (in the job's zone) and those outside the window neither run nor are
/// recorded missed; the others run once each.
#[tokio::test(start_paused = true)]
async fn excluded_instants_neither_run_nor_are_missed() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T22:30:30Z")));
    // Berlin is UTC+1: its 2027-03-02 starts at 23:00 UTC.
    let text = format!(
        "[database]\nurl = {:?}\n\n[[calendar]]\nname = \"holiday\"\ndates = [\"2027-03-02\"]\n\
         [[job]]\nname = \"daily-work\"\nschedule = \"*/10 * * * *\"\ntimezone = \"Europe/Berlin\"\n\
         skip_on = [\"holiday\"]\ncommand = \"true\"\nmissed_after = \"5s\"\n\
         [[job]]\nname = \"windowed\"\nschedule = \"*/10 * * * *\"\n\
         not_before = \"2027-03-01T22:45:00Z\"\nnot_after = \"2027-03-01T23:15:00Z\"\n\
         command = \"true\"\nmissed_after = \"5s\"\n",
        db.url
    );
    let config = config_of(&text);
    type Ran = Arc<Mutex<Vec<(String, DateTime<Utc>)>>>;
    let ran: Ran = Arc::default();
    let replica = |id: &str| {
        let mut builder = Scheduler::builder(db.url.as_str())
            .clock(clock.clone())
            .instance_id(id);
        for job in &config.jobs {
            let (record, name) = (ran.clone(), job.name.to_string());
            builder = builder.job(Job::from_config(job).run(move |ctx| {
                record
                    .lock()
                    .expect("ran")
                    .push((name.clone(), ctx.instant()));
                async { Ok::<(), String>(()) }
            }));
        }
        builder
    };
    side_by_side(replica("one"), replica("two"), Duration::from_secs(90 * 60)).await;
    let mut ran = ran.lock().expect("ran").clone();
    ran.sort();
    let shown: Vec<String> = ran
        .iter()
        .map(|(job, t)| format!("{job} {}", t.format("%H:%M")))
        .collect();
    assert_eq!(
        shown,
        [
            "daily-work 22:40",
            "daily-work 22:50",
            "windowed 22:50",
            "windowed 23:00",
            "windowed 23:10",
        ]
    );
    for job in ["daily-work", "windowed"] {
        let rows = runs_of(&db, job);
        assert!(
            rows.iter().all(|r| r.status == RunStatus::Succeeded),
            "{job}: {rows:?}"
        );
    }
    assert_eq!(runs_of(&db, "daily-work").len(), 2);
    assert_eq!(runs_of(&db, "windowed").len(), 3);
}

/// Each run of a dependency test: its job, instant, start and end.
type Ran = Arc<Mutex<Vec<(String, DateTime<Utc>, DateTime<Utc>, DateTime<Utc>)>>>;

/// The replicas of a dependency test: `config`'s jobs, each run recording
/// its job, instant, start and end on `clock`, and taking `busy`.
fn dependent_replica(
    db: &TestDb,
    clock: &Arc<TokioClock>,
    id: &str,
    config: &crate::config::Config,
    ran: &Ran,
    fails: fn(&str, DateTime<Utc>) -> bool,
) -> SchedulerBuilder {
    let mut builder = Scheduler::builder(db.url.as_str())
        .clock(clock.clone())
        .instance_id(id);
    for job in &config.jobs {
        let (record, name, clock) = (ran.clone(), job.name.to_string(), clock.clone());
        builder = builder.job(Job::from_config(job).run(move |ctx| {
            let (record, name, clock) = (record.clone(), name.clone(), clock.clone());
            async move {
                let start = clock.now();
                tokio::time::sleep(Duration::from_millis(300)).await;
                record
                    .lock()
                    .expect("ran")
                    .push((name.clone(), ctx.instant(), start, clock.now()));
                if fails(&name, ctx.instant()) {
                    Err(format!("{name} fails"))
                } else {
                    Ok::<(), String>(())
                }
            }
        }));
    }
    builder
}

/// A chain a → b → c and a fan-in (a, d) → e on two replicas and a paused
/// clock, for six minutes of per-minute parents: every link runs once per
/// instant, after its parents' runs ended, with their instant; e only at
/// the instants where both a and d succeeded (d fails at odd minutes),
/// the others recorded `skipped`, upstream failed; no instant is recorded
/// missed.
#[tokio::test(start_paused = true)]
async fn dependent_jobs_run_once_per_instant_after_their_parents() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"* * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nafter = [\"a\"]\ncommand = \"true\"\n\
         [[job]]\nname = \"c\"\nafter = [\"b\"]\ncommand = \"true\"\n\
         [[job]]\nname = \"d\"\nschedule = \"* * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"e\"\nafter = [\"a\", \"d\"]\ncommand = \"true\"\n\
         [[job]]\nname = \"on-failure\"\nafter = {{ jobs = [\"d\"], on = [\"failed\"] }}\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let ran: Ran = Arc::default();
    // d fails at odd minutes: e runs at even ones, on-failure at odd ones.
    fn fails(job: &str, instant: DateTime<Utc>) -> bool {
        job == "d" && chrono::Timelike::minute(&instant) % 2 == 1
    }
    side_by_side(
        dependent_replica(&db, &clock, "one", &config, &ran, fails),
        dependent_replica(&db, &clock, "two", &config, &ran, fails),
        Duration::from_secs(6 * 60 + 20),
    )
    .await;
    let ran = ran.lock().expect("ran").clone();
    let runs_of_job = |job: &str| -> Vec<(DateTime<Utc>, DateTime<Utc>, DateTime<Utc>)> {
        let mut runs: Vec<_> = ran
            .iter()
            .filter(|r| r.0 == job)
            .map(|r| (r.1, r.2, r.3))
            .collect();
        runs.sort();
        runs
    };
    let minutes: Vec<DateTime<Utc>> = (1..=6)
        .map(|m| utc("2027-03-01T00:00:00Z") + TimeDelta::minutes(m))
        .collect();
    let odd: Vec<DateTime<Utc>> = minutes.iter().copied().step_by(2).collect();
    let even: Vec<DateTime<Utc>> = minutes.iter().copied().skip(1).step_by(2).collect();
    for (child, parent, expected) in [
        ("b", "a", &minutes),
        ("c", "b", &minutes),
        ("on-failure", "d", &odd),
        ("e", "d", &even),
    ] {
        let runs = runs_of_job(child);
        let parents: Vec<_> = runs_of_job(parent)
            .into_iter()
            .filter(|p| expected.contains(&p.0))
            .collect();
        let instants: Vec<DateTime<Utc>> = runs.iter().map(|r| r.0).collect();
        assert_eq!(
            &instants, expected,
            "{child}: one run per instant of {parent}"
        );
        for (run, parent_run) in runs.iter().zip(&parents) {
            assert_eq!(run.0, parent_run.0);
            assert!(
                run.1 >= parent_run.2,
                "{child} at {} started before {parent} ended",
                run.0
            );
            assert!(
                run.1 - parent_run.2 < TimeDelta::seconds(2),
                "{child} at {} started {} after {parent}",
                run.0,
                run.1 - parent_run.2
            );
        }
    }
    for (job, count) in [("b", 6), ("c", 6), ("on-failure", 3), ("e", 6)] {
        let rows = runs_of(&db, job);
        assert_eq!(rows.len(), count, "{job}: {rows:?}");
        assert!(
            rows.iter().all(|r| r.triggered_by == Trigger::Dependency),
            "{job}: {rows:?}"
        );
        // e's instants at which d failed are recorded, not run.
        let skipped = |r: &RunRow| {
            r.status == RunStatus::Skipped
                && r.output == "replicron: upstream failed: d ended failed\n"
                && odd.contains(&r.scheduled_at.and_utc())
        };
        assert!(
            rows.iter()
                .all(|r| r.status == RunStatus::Succeeded || job == "e" && skipped(r)),
            "{job}: {rows:?}"
        );
    }
    // Each dependent run is linked to the run it followed.
    let mut conn = db.connect();
    let b_rows = runs_of(&db, "b");
    let a_rows = runs_of(&db, "a");
    let links =
        crate::history::parents_of(&mut conn, &b_rows.iter().map(|r| r.id).collect::<Vec<_>>())
            .expect("links");
    for (b, a) in b_rows.iter().zip(&a_rows) {
        assert_eq!(links.get(&b.id), Some(&vec![a.id]), "{b:?}");
    }
    // A fan-in's run, to both parents' runs.
    let d_rows = runs_of(&db, "d");
    for e in runs_of(&db, "e") {
        if e.status == RunStatus::Skipped {
            continue;
        }
        let links = crate::history::parents_of(&mut conn, &[e.id]).expect("links");
        let a = a_rows
            .iter()
            .find(|r| r.scheduled_at == e.scheduled_at)
            .expect("a's run");
        let d = d_rows
            .iter()
            .find(|r| r.scheduled_at == e.scheduled_at)
            .expect("d's run");
        let mut want = vec![a.id, d.id];
        want.sort();
        assert_eq!(links.get(&e.id), Some(&want), "{e:?}");
    }
}

/// A parent's success whose dependent run no replica started in time (the
/// only replica stopped just after the parent ended, and came back two
/// minutes later) is recorded `missed` for the dependent job, once; the
/// instants after it run.
#[tokio::test(start_paused = true)]
async fn a_dependent_run_nobody_started_is_recorded_missed() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"*/2 * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nafter = [\"a\"]\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let ran: Ran = Arc::default();
    fn never(_: &str, _: DateTime<Utc>) -> bool {
        false
    }
    // a runs 00:02:00 to 00:02:00.3; the replica stops at 00:02:00.4,
    // before its next read of a's runs.
    let replica = dependent_replica(&db, &clock, "one", &config, &ran, never)
        .build()
        .await
        .expect("build");
    replica
        .run_until(tokio::time::sleep(Duration::from_millis(90_400)))
        .await
        .expect("runs");
    assert_eq!(runs_of(&db, "a").len(), 1);
    assert_eq!(runs_of(&db, "b"), Vec::new());
    tokio::time::sleep(Duration::from_secs(119)).await;
    // Back at 00:04:00 minus a bit: 00:04 and 00:06 run; 00:02 is missed.
    let replica = dependent_replica(&db, &clock, "one", &config, &ran, never)
        .build()
        .await
        .expect("build");
    replica
        .run_until(tokio::time::sleep(Duration::from_secs(150)))
        .await
        .expect("runs");
    let mut b_rows = runs_of(&db, "b");
    b_rows.sort_by_key(|r| r.scheduled_at);
    let b: Vec<(String, RunStatus, Trigger)> = b_rows
        .iter()
        .map(|r| {
            (
                r.scheduled_at.format("%H:%M").to_string(),
                r.status,
                r.triggered_by,
            )
        })
        .collect();
    assert_eq!(
        b,
        [
            ("00:02".to_string(), RunStatus::Missed, Trigger::Schedule),
            (
                "00:04".to_string(),
                RunStatus::Succeeded,
                Trigger::Dependency
            ),
            (
                "00:06".to_string(),
                RunStatus::Succeeded,
                Trigger::Dependency
            ),
        ]
    );
}

/// A parent's instant that no replica ran is recorded `missed` only its
/// `missed_after` later, which may be long after its dependent job's check
/// went past that instant: the dependent's instant is then recorded
/// `missed` too, never left neither run nor accounted for. The only
/// replica is away at a's 00:02 (no catch-up), and a's `missed_after` is
/// 3 minutes, b's 20 s.
#[tokio::test(start_paused = true)]
async fn a_parents_instant_recorded_missed_late_is_its_dependents_missed_too() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"* * * * *\"\nmissed_after = \"3m\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nafter = [\"a\"]\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let ran: Ran = Arc::default();
    fn never(_: &str, _: DateTime<Utc>) -> bool {
        false
    }
    // Up from 00:00:30 to 00:01:40: a and b run 00:01.
    let replica = dependent_replica(&db, &clock, "one", &config, &ran, never)
        .build()
        .await
        .expect("build");
    replica
        .run_until(tokio::time::sleep(Duration::from_secs(70)))
        .await
        .expect("runs");
    // Away over 00:02; back from 00:02:40 to 00:09:40.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let replica = dependent_replica(&db, &clock, "one", &config, &ran, never)
        .build()
        .await
        .expect("build");
    replica
        .run_until(tokio::time::sleep(Duration::from_secs(7 * 60)))
        .await
        .expect("runs");
    let statuses = |job: &str| -> Vec<(String, RunStatus)> {
        let mut rows = runs_of(&db, job);
        rows.sort_by_key(|r| r.scheduled_at);
        rows.iter()
            .map(|r| (r.scheduled_at.format("%H:%M").to_string(), r.status))
            .take(3)
            .collect()
    };
    let expected = [
        ("00:01".to_string(), RunStatus::Succeeded),
        ("00:02".to_string(), RunStatus::Missed),
        ("00:03".to_string(), RunStatus::Succeeded),
    ];
    assert_eq!(statuses("a"), expected);
    assert_eq!(statuses("b"), expected);
}

/// A parent's run recorded after the runs of its later instants (its
/// replica claimed it late, or its database node held the write) is not
/// passed over: the dependent job, which ran the later instant first, has
/// the earlier one recorded `missed` once its parent's run is seen, never
/// left neither run nor accounted for. On a paused clock, the parent's runs
/// written by the test as another replica would.
#[tokio::test(start_paused = true)]
async fn a_parent_run_recorded_late_is_missed_not_forgotten() {
    use crate::db::schema::replicron_runs::dsl as runs;
    use diesel::prelude::*;

    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"*/10 * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nafter = [\"a\"]\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let b = config.jobs.iter().find(|j| j.name == "b").expect("b");
    let replica = Scheduler::builder(db.url.as_str())
        .clock(clock.clone())
        .instance_id("one")
        .job(Job::from_config(b).run(|_| async { Ok::<(), String>(()) }))
        .build()
        .await
        .expect("build");
    // a's run of `instant`, ended `ended` after its start at `start`.
    let parent_ran = |instant: &str, start: &str| {
        let mut conn = db.connect();
        let id = run_left_by(&mut conn, "a", utc(instant), "elsewhere", 1, None);
        let start = utc(start);
        diesel::update(runs::replicron_runs.filter(runs::id.eq(id)))
            .set((
                runs::started_at.eq(start.naive_utc()),
                runs::finished_at.eq(Some((start + TimeDelta::seconds(1)).naive_utc())),
                runs::status.eq(RunStatus::Succeeded),
            ))
            .execute(&mut conn)
            .expect("end");
    };
    let writes = async {
        // 00:03:00's run is seen first; b runs it.
        tokio::time::sleep(Duration::from_secs(152)).await;
        parent_ran("2027-03-01T00:03:00Z", "2027-03-01T00:03:00Z");
        // 00:02:50's, claimed 8 s late, is seen only afterwards (its
        // node held the write), after the check for missed instants
        // went past 00:02:50.
        tokio::time::sleep(Duration::from_secs(13)).await;
        parent_ran("2027-03-01T00:02:50Z", "2027-03-01T00:02:58Z");
    };
    let (ran, ()) = tokio::join!(
        replica.run_until(tokio::time::sleep(Duration::from_secs(5 * 60))),
        writes
    );
    ran.expect("runs");
    let mut b_rows = runs_of(&db, "b");
    b_rows.sort_by_key(|r| r.scheduled_at);
    let b: Vec<(String, RunStatus)> = b_rows
        .iter()
        .map(|r| (r.scheduled_at.format("%H:%M:%S").to_string(), r.status))
        .collect();
    assert_eq!(
        b,
        [
            ("00:02:50".to_string(), RunStatus::Missed),
            ("00:03:00".to_string(), RunStatus::Succeeded),
        ]
    );
}

/// A library job runs inside its run's span, which its context carries:
/// with the embedding service's own OpenTelemetry layer, the context's
/// `traceparent()` names that span, the same for each attempt.
///
/// In a process of its own: `tracing` caches whether a span is wanted
/// across the threads of a process, and the other tests, with no
/// subscriber, race with this one's.
#[test]
fn a_library_job_has_its_runs_span_and_trace_context() {
    let me = std::env::current_exe().expect("the test binary");
    let output = std::process::Command::new(me)
        .args([
            "--exact",
            "scheduler::tests::library_span_child",
            "--ignored",
            "--test-threads=1",
        ])
        .output()
        .expect("run the test binary");
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).contains("1 passed"),
        "{:?}\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The child the test above starts (hence ignored on its own).
#[tokio::test(start_paused = true)]
#[ignore = "a child process of a_library_job_has_its_runs_span_and_trace_context, which runs it"]
async fn library_span_child() {
    use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("service")));
    let _subscriber = tracing::subscriber::set_default(subscriber);
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    /// The span's name, the context's traceparent, the span's own, the attempt.
    type Seen = (String, Option<String>, String, u32);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = seen.clone();
    let job = Job::new("traced", "* * * * *")
        .expect("job")
        .retries(1, Duration::from_secs(1))
        .run(move |ctx| {
            let record = record.clone();
            async move {
                let span = ctx.span();
                let name = span.metadata().map(|m| m.name().to_string());
                let context = span.context();
                let ids = context.span().span_context().clone();
                let expected = format!("00-{}-{}-01", ids.trace_id(), ids.span_id());
                record.lock().expect("seen").push((
                    name.unwrap_or_default(),
                    ctx.traceparent().map(str::to_string),
                    expected,
                    ctx.attempt(),
                ));
                if ctx.attempt() == 1 {
                    Err("once more".to_string())
                } else {
                    Ok(())
                }
            }
        });
    let replica = replica_of(&db, &clock, "a", job)
        .build()
        .await
        .expect("build");
    replica
        .run_until(tokio::time::sleep(Duration::from_secs(45)))
        .await
        .expect("runs");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (name, traceparent, expected, _) in &seen {
        assert_eq!(name, "run");
        assert_eq!(traceparent.as_deref(), Some(expected.as_str()));
    }
    assert_eq!(seen[0].1, seen[1].1, "both attempts are in one run span");
    assert_eq!(
        seen.iter().map(|s| s.3).collect::<Vec<_>>(),
        [1, 2],
        "{seen:?}"
    );
}

/// Records `job`'s run of `instant` as another replica would have:
/// started at `start`, ended `status` at `end`. Returns its id.
fn parent_ended(
    conn: &mut crate::db::DbConnection,
    job: &str,
    instant: DateTime<Utc>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    status: RunStatus,
) -> i64 {
    use crate::db::schema::replicron_runs::dsl as runs;
    use diesel::prelude::*;
    let id = run_left_by(conn, job, instant, "elsewhere", 1, None);
    diesel::update(runs::replicron_runs.filter(runs::id.eq(id)))
        .set((
            runs::started_at.eq(start.naive_utc()),
            runs::finished_at.eq(Some(end.naive_utc())),
            runs::status.eq(status),
        ))
        .execute(conn)
        .expect("end");
    id
}

/// A replica `id` of `config`'s dependent jobs `children` only (their
/// parents' runs are the test's to write), each run taking `busy` of the
/// paused clock.
fn children_replica(
    db: &TestDb,
    clock: &Arc<TokioClock>,
    id: &str,
    config: &crate::config::Config,
    children: &[&str],
    busy: Duration,
) -> SchedulerBuilder {
    let mut builder = Scheduler::builder(db.url.as_str())
        .clock(clock.clone())
        .instance_id(id);
    for job in config.jobs.iter().filter(|j| children.contains(&&*j.name)) {
        builder = builder.job(Job::from_config(job).run(move |_| async move {
            tokio::time::sleep(busy).await;
            Ok::<(), String>(())
        }));
    }
    builder
}

/// `job`'s rows by instant, as `(HH:MM:SS, status, output)`, in instant
/// order.
fn rows_by_instant(db: &TestDb, job: &str) -> Vec<(String, RunStatus, String)> {
    let mut rows = runs_of(db, job);
    rows.sort_by_key(|r| (r.scheduled_at, r.attempt));
    rows.iter()
        .map(|r| {
            (
                r.scheduled_at.format("%H:%M:%S").to_string(),
                r.status,
                r.output.clone(),
            )
        })
        .collect()
}

/// The seconds `00:00:SS` of `range`, formatted as `rows_by_instant` does.
fn seconds(range: std::ops::RangeInclusive<u32>) -> Vec<String> {
    range
        .map(|s| format!("00:{:02}:{:02}", s / 60, s % 60))
        .collect()
}

/// A fan-in (a, b) → c whose parents' ends for twenty instants arrive
/// together (the database held every write for twenty seconds): they are
/// a backlog, not overruns of c's first run. Two replicas run c at each
/// of those instants, once, in order. On a paused clock, the parents'
/// runs written by the test as the replicas that ran them would.
#[tokio::test(start_paused = true)]
async fn a_fan_ins_backlog_of_ends_that_came_together_runs_in_order() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"c\"\nafter = [\"a\", \"b\"]\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let writes = async {
        // The stall ends at 00:00:51: the runs of 00:00:31 to 00:00:50
        // all end then.
        tokio::time::sleep(Duration::from_secs(21)).await;
        let mut conn = connect_at(&db, &clock);
        let ended = utc("2027-03-01T00:00:50.900Z");
        for second in 31..=50 {
            let instant = utc("2027-03-01T00:00:00Z") + TimeDelta::seconds(second);
            for (k, job) in ["a", "b"].into_iter().enumerate() {
                let end = ended + TimeDelta::milliseconds(second + k as i64);
                parent_ended(&mut conn, job, instant, instant, end, RunStatus::Succeeded);
            }
        }
    };
    let busy = Duration::from_millis(200);
    let ((), ()) = tokio::join!(
        side_by_side(
            children_replica(&db, &clock, "one", &config, &["c"], busy),
            children_replica(&db, &clock, "two", &config, &["c"], busy),
            Duration::from_secs(60),
        ),
        writes
    );
    let c = rows_by_instant(&db, "c");
    let instants: Vec<String> = c.iter().map(|r| r.0.clone()).collect();
    assert_eq!(instants, seconds(31..=50), "{c:?}");
    assert!(
        c.iter().all(|r| r.1 == RunStatus::Succeeded),
        "every instant ran: {c:?}"
    );
    let mut rows = runs_of(&db, "c");
    rows.sort_by_key(|r| r.scheduled_at);
    assert!(
        rows.windows(2)
            .all(|w| w[0].finished_at <= Some(w[1].started_at)),
        "in order, one at a time: {rows:?}"
    );
}

/// A fan-in (a, b) → c where b's 00:02 was an overrun of its own (it has no
/// row, ever), and both parents' 00:03 were recorded `missed` after c's
/// loop had passed over 00:03: the check for missed instants records c's
/// 00:03 `missed` in time, not only once the wait for b's 00:02 row ends
/// five minutes later (found by the fault campaign: a fan-in's instants
/// unaccounted at its end). On a paused clock, the parents' rows written by
/// the test as the replicas that ran them would.
#[tokio::test(start_paused = true)]
async fn a_parents_overrun_does_not_hold_back_the_check_of_later_instants() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"* * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nschedule = \"* * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"c\"\nafter = [\"a\", \"b\"]\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let at = |hms: &str| utc(&format!("2027-03-01T{hms}Z"));
    let ended = |conn: &mut crate::db::DbConnection, job: &str, instant: &str| {
        let t = at(instant);
        parent_ended(
            conn,
            job,
            t,
            t + TimeDelta::milliseconds(100),
            t + TimeDelta::milliseconds(400),
            RunStatus::Succeeded,
        );
    };
    let writes = async {
        let mut conn = connect_at(&db, &clock);
        tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_secs(31)).await;
        ended(&mut conn, "a", "00:01:00");
        ended(&mut conn, "b", "00:01:00");
        tokio::time::sleep(Duration::from_secs(60)).await;
        // 00:02: a ran; b's was an overrun.
        ended(&mut conn, "a", "00:02:00");
        tokio::time::sleep(Duration::from_secs(60)).await;
        // 00:03: nobody ran it; 00:04 runs.
        tokio::time::sleep(Duration::from_secs(60)).await;
        ended(&mut conn, "a", "00:04:00");
        ended(&mut conn, "b", "00:04:00");
        // The parents' 00:03 are recorded missed after c passed it over.
        tokio::time::sleep(Duration::from_secs(25)).await;
        for job in ["a", "b"] {
            crate::history::record_missed(&mut conn, job, at("00:03:00"), "elsewhere")
                .expect("missed");
        }
    };
    let busy = Duration::from_millis(200);
    let (ran, ()) = tokio::join!(
        async {
            children_replica(&db, &clock, "one", &config, &["c"], busy)
                .build()
                .await
                .expect("build")
                .run_until(tokio::time::sleep(Duration::from_secs(6 * 60)))
                .await
        },
        writes
    );
    ran.expect("runs");
    // Up to 00:06:30: the wait for b's 00:02 would end only at 00:07.
    let c: Vec<(String, RunStatus)> = rows_by_instant(&db, "c")
        .into_iter()
        .map(|r| (r.0, r.1))
        .collect();
    assert_eq!(
        c,
        [
            ("00:01:00".to_string(), RunStatus::Succeeded),
            ("00:03:00".to_string(), RunStatus::Missed),
            ("00:04:00".to_string(), RunStatus::Succeeded),
        ],
    );
}

/// Writes `job`'s run of each second of `range` as it ends, 100 ms after
/// its instant, `succeeded` unless `fails` says otherwise; returns their
/// ids by instant.
async fn parent_runs_each_second(
    db: &TestDb,
    clock: &Arc<TokioClock>,
    jobs: &[&str],
    range: std::ops::RangeInclusive<i64>,
    fails: fn(&str, i64) -> bool,
) {
    let base = utc("2027-03-01T00:00:00Z");
    for second in range {
        let instant = base + TimeDelta::seconds(second);
        let end = instant + TimeDelta::milliseconds(100);
        tokio::time::sleep((end - clock.now()).to_std().unwrap_or_default()).await;
        let mut conn = connect_at(db, clock);
        for job in jobs {
            let status = if fails(job, second) {
                RunStatus::Failed
            } else {
                RunStatus::Succeeded
            };
            parent_ended(&mut conn, job, instant, instant, end, status);
        }
    }
}

/// A dependent job with the default `overlap = "skip"` whose run takes
/// 2.5 s, after a per-second parent, on two replicas: an instant whose
/// parent ended while its run was going is recorded `skipped` once, with
/// the reason; every other instant runs; none is missed or left without a
/// row.
#[tokio::test(start_paused = true)]
async fn a_dependent_instant_that_came_while_its_run_went_is_recorded_skipped() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"s\"\nafter = [\"a\"]\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let busy = Duration::from_millis(2500);
    let ((), ()) = tokio::join!(
        side_by_side(
            children_replica(&db, &clock, "one", &config, &["s"], busy),
            children_replica(&db, &clock, "two", &config, &["s"], busy),
            Duration::from_secs(70),
        ),
        parent_runs_each_second(&db, &clock, &["a"], 31..=42, |_, _| false)
    );
    let s = rows_by_instant(&db, "s");
    let instants: Vec<String> = s.iter().map(|r| r.0.clone()).collect();
    assert_eq!(instants, seconds(31..=42), "one row per instant: {s:?}");
    let skipped: Vec<_> = s.iter().filter(|r| r.1 == RunStatus::Skipped).collect();
    assert!(skipped.len() >= 6, "{s:?}");
    assert!(
        skipped.iter().all(|r| r
            .2
            .contains("overrun: a run of the job was going when its parents ended")),
        "{s:?}"
    );
    assert!(
        s.iter()
            .all(|r| matches!(r.1, RunStatus::Succeeded | RunStatus::Skipped)),
        "{s:?}"
    );
    // A run never overlaps the one before.
    let mut ran: Vec<RunRow> = runs_of(&db, "s")
        .into_iter()
        .filter(|r| r.status == RunStatus::Succeeded)
        .collect();
    ran.sort_by_key(|r| r.started_at);
    assert!(ran.len() >= 4, "{ran:?}");
    assert!(
        ran.windows(2)
            .all(|w| w[0].finished_at <= Some(w[1].started_at)),
        "{ran:?}"
    );
}

/// A parent that failed for good leaves its dependent jobs' instant
/// recorded `skipped`, `upstream failed`, once across two replicas, linked
/// to the failed run: for a single parent and for a fan-in whose other
/// parent succeeded. The instants it succeeded at run.
#[tokio::test(start_paused = true)]
async fn a_failed_parent_records_its_childs_instant_upstream_failed() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"u\"\nafter = [\"a\"]\ncommand = \"true\"\n\
         [[job]]\nname = \"f\"\nafter = [\"b\", \"a\"]\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let busy = Duration::from_millis(100);
    // a fails at odd seconds.
    let ((), ()) = tokio::join!(
        side_by_side(
            children_replica(&db, &clock, "one", &config, &["u", "f"], busy),
            children_replica(&db, &clock, "two", &config, &["u", "f"], busy),
            Duration::from_secs(60),
        ),
        parent_runs_each_second(&db, &clock, &["a", "b"], 31..=40, |job, second| {
            job == "a" && second % 2 == 1
        })
    );
    let a_rows = runs_of(&db, "a");
    let mut conn = db.connect();
    for child in ["u", "f"] {
        let rows = rows_by_instant(&db, child);
        let instants: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        assert_eq!(
            instants,
            seconds(31..=40),
            "{child}: one row each: {rows:?}"
        );
        for (i, row) in rows.iter().enumerate() {
            if i % 2 == 0 {
                assert_eq!(row.1, RunStatus::Skipped, "{child}: {row:?}");
                assert_eq!(
                    row.2, "replicron: upstream failed: a ended failed\n",
                    "{child}: {row:?}"
                );
            } else {
                assert_eq!(row.1, RunStatus::Succeeded, "{child}: {row:?}");
            }
        }
        for row in runs_of(&db, child) {
            assert_eq!(row.triggered_by, Trigger::Dependency, "{row:?}");
            let links = crate::history::parents_of(&mut conn, &[row.id]).expect("links");
            let a = a_rows
                .iter()
                .find(|r| r.scheduled_at == row.scheduled_at)
                .expect("a's run");
            assert!(
                links.get(&row.id).is_some_and(|l| l.contains(&a.id)),
                "{row:?} {links:?}"
            );
        }
    }
}

/// A dependent job with `overlap = "queue"` whose run takes 2.5 s, after
/// a per-second parent: at most one instant waits for a run; the others
/// whose parent ended while it went are recorded `skipped`. The backlog
/// stays bounded: the job is done soon after its parent stops.
#[tokio::test(start_paused = true)]
async fn a_queued_dependent_job_lets_one_instant_wait() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"a\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"q\"\nafter = [\"a\"]\noverlap = \"queue\"\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let busy = Duration::from_millis(2500);
    let ((), ()) = tokio::join!(
        side_by_side(
            children_replica(&db, &clock, "one", &config, &["q"], busy),
            children_replica(&db, &clock, "two", &config, &["q"], busy),
            Duration::from_secs(70),
        ),
        parent_runs_each_second(&db, &clock, &["a"], 31..=50, |_, _| false)
    );
    let q = rows_by_instant(&db, "q");
    let instants: Vec<String> = q.iter().map(|r| r.0.clone()).collect();
    assert_eq!(instants, seconds(31..=50), "one row per instant: {q:?}");
    let ran = q.iter().filter(|r| r.1 == RunStatus::Succeeded).count();
    let skipped: Vec<_> = q.iter().filter(|r| r.1 == RunStatus::Skipped).collect();
    assert!(ran <= 10, "{q:?}");
    assert!(
        skipped.len() >= 8
            && skipped
                .iter()
                .all(|r| r.2.contains("an earlier instant waited for it already")),
        "{q:?}"
    );
    // The last parent ended at 00:00:50.1: at most the run going then and
    // the one waiting come after.
    let last_end = runs_of(&db, "q")
        .iter()
        .filter_map(|r| r.finished_at)
        .max()
        .expect("ended");
    assert!(
        last_end.and_utc() < utc("2027-03-01T00:00:56Z"),
        "the backlog ran on until {last_end}: {q:?}"
    );
}

/// The rows of `job`, as (instant's `HH:MM`, attempt, status, output).
fn endings(db: &TestDb, job: &str) -> Vec<(String, i32, RunStatus, String)> {
    runs_of(db, job)
        .iter()
        .map(|r| {
            (
                r.scheduled_at.format("%H:%M").to_string(),
                r.attempt,
                r.status,
                r.output.clone(),
            )
        })
        .collect()
}

/// Whether `job`'s lease is free at the test's virtual now.
fn lease_free(db: &TestDb, clock: &Arc<TokioClock>, job: &str) -> bool {
    let row = crate::lease::find_lock(&mut connect_at(db, clock), job)
        .expect("lease row")
        .expect("the job has a lease row");
    row.lock_until.and_utc() <= clock.now()
}

/// What a stop leaves of an instant that waited for the job's run, alone
/// on its database.
const LEFT_BY_A_STOP: &str = "replicron: not run: replicron stopped while the instant waited for \
                              the job's run, and no other replica claimed it\n";

/// `overlap = "queue"` on one replica, stopped (gracefully) while an
/// instant waits for the run before it: the run goes on to its end within
/// the shutdown grace and is recorded `succeeded`, its lease is given
/// back, and the waiting instant, which no other replica can run, is
/// recorded `skipped`, saying why. On a paused clock.
#[tokio::test(start_paused = true)]
async fn a_graceful_stop_lets_the_run_a_queued_instant_waits_for_end() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let mut job = recording_job(
        "queued",
        "0 * * * * *",
        Duration::from_secs(90),
        &clock,
        &spans,
    );
    job.settings.overlap = crate::config::Overlap::Queue;
    let replica = replica_of(&db, &clock, "solo", job)
        .shutdown_grace(Duration::from_secs(60))
        .build()
        .await
        .expect("build");
    // 00:01's run goes until 00:02:30; 00:02 waits for it from 00:02:00.
    replica
        .run_until(tokio::time::sleep(Duration::from_secs(80)))
        .await
        .expect("runs");
    let spans = spans.lock().expect("spans").clone();
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].2 - spans[0].1, TimeDelta::seconds(90), "{spans:?}");
    assert_eq!(
        endings(&db, "queued"),
        [
            ("00:01".to_string(), 1, RunStatus::Succeeded, String::new()),
            (
                "00:02".to_string(),
                1,
                RunStatus::Skipped,
                LEFT_BY_A_STOP.to_string()
            ),
        ]
    );
    assert!(lease_free(&db, &clock, "queued"));
}

/// `overlap = "replace"` on one replica, stopped while an instant waits to
/// replace the run before it: that run is stopped for it, as asked, and
/// recorded `replaced`; the replacing instant, which no replica can run
/// now, is recorded `skipped`, saying why. Nothing is left `running`. On a
/// paused clock.
#[tokio::test(start_paused = true)]
async fn a_graceful_stop_records_the_run_being_replaced_and_its_replacement() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let mut job = recording_job(
        "latest",
        "0 * * * * *",
        Duration::from_secs(600),
        &clock,
        &spans,
    );
    job.settings.overlap = crate::config::Overlap::Replace;
    // Kept alive every 11 s: at 00:01:55, then 00:02:06, the first after
    // 00:02 asked the run to stop.
    job.settings.lock_at_most_for = Duration::from_secs(33);
    job.settings.kill_grace = Duration::from_secs(2);
    job.settings.timeout = Duration::from_secs(1200);
    let replica = replica_of(&db, &clock, "solo", job)
        .build()
        .await
        .expect("build");
    replica
        .run_until(tokio::time::sleep(Duration::from_secs(73)))
        .await
        .expect("runs");
    let rows = endings(&db, "latest");
    let statuses: Vec<(&str, RunStatus)> = rows.iter().map(|r| (&*r.0, r.2)).collect();
    assert_eq!(
        statuses,
        [
            ("00:01", RunStatus::Replaced),
            ("00:02", RunStatus::Skipped)
        ],
        "{rows:?}"
    );
    assert_eq!(rows[1].3, LEFT_BY_A_STOP, "{rows:?}");
    assert_eq!(spans.lock().expect("spans").len(), 1);
    assert!(lease_free(&db, &clock, "latest"));
}

/// `overlap = "queue"` on two replicas, one of which stops while an
/// instant waits for the run before it: the other runs that instant once
/// the run ends, wherever the run was, and nothing is recorded skipped.
/// On a paused clock.
#[tokio::test(start_paused = true)]
async fn a_queued_instant_is_left_to_the_replica_that_goes_on() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let replica = |id: &str| {
        let mut job = recording_job(
            "queued",
            "0 * * * * *",
            Duration::from_secs(90),
            &clock,
            &spans,
        );
        job.settings.overlap = crate::config::Overlap::Queue;
        replica_of(&db, &clock, id, job)
            .shutdown_grace(Duration::from_secs(120))
            .build()
    };
    let (one, two) = (
        replica("one").await.expect("build"),
        replica("two").await.expect("build"),
    );
    // 00:01 runs to 00:02:30 while 00:02 waits; `one` stops at 00:02:10,
    // `two` at 00:02:50, after 00:02 started (it ends by 00:04:50).
    let (a, b) = tokio::join!(
        one.run_until(tokio::time::sleep(Duration::from_secs(80))),
        two.run_until(tokio::time::sleep(Duration::from_secs(120)))
    );
    a.expect("one runs");
    b.expect("two runs");
    let rows = endings(&db, "queued");
    let ran: Vec<(&str, RunStatus)> = rows.iter().map(|r| (&*r.0, r.2)).collect();
    assert_eq!(
        ran,
        [
            ("00:01", RunStatus::Succeeded),
            ("00:02", RunStatus::Succeeded)
        ],
        "{rows:?}"
    );
    assert_eq!(
        runs_of(&db, "queued")[1].instance,
        "two",
        "the waiting instant ran on the replica that went on"
    );
    let spans = spans.lock().expect("spans").clone();
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert!(spans[0].2 <= spans[1].1, "overlapped: {spans:?}");
}

/// `overlap = "queue"` on two replicas. The holder of a run stops while
/// its run goes on (to its end, within the shutdown grace), before its
/// ticks reach the next instant; the other replica queues that instant
/// behind the run, then stops too, leaving it to the holder. The holder,
/// once its run has ended, decides it: recorded `skipped`, saying why, not
/// left unsaid (found by the fault campaign at its final stop, the holder's
/// ticks running late). On a paused clock.
#[tokio::test(start_paused = true)]
async fn an_instant_queued_by_another_replica_is_decided_by_the_holder_at_a_stop() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let replica = |id: &str| {
        let mut job = recording_job(
            "queued",
            "0 * * * * *",
            Duration::from_secs(90),
            &clock,
            &spans,
        );
        job.settings.overlap = crate::config::Overlap::Queue;
        replica_of(&db, &clock, id, job)
            .shutdown_grace(Duration::from_secs(120))
            .build()
    };
    // `holder` runs 00:01 to 00:02:30 and stops at 00:01:59; `waiter`
    // starts at 00:01:05, queues 00:02 and stops at 00:02:02.
    let (holder, waiter) = (
        replica("holder").await.expect("build"),
        replica("waiter").await.expect("build"),
    );
    let (a, b) = tokio::join!(
        holder.run_until(tokio::time::sleep(Duration::from_secs(69))),
        async {
            tokio::time::sleep(Duration::from_secs(15)).await;
            waiter
                .run_until(tokio::time::sleep(Duration::from_secs(57)))
                .await
        }
    );
    a.expect("holder runs");
    b.expect("waiter runs");
    let rows = endings(&db, "queued");
    let ran: Vec<(&str, RunStatus)> = rows.iter().map(|r| (&*r.0, r.2)).collect();
    assert_eq!(
        ran,
        [
            ("00:01", RunStatus::Succeeded),
            ("00:02", RunStatus::Skipped)
        ],
        "{rows:?}"
    );
    assert_eq!(rows[1].3, LEFT_BY_A_STOP, "{rows:?}");
    assert_eq!(runs_of(&db, "queued")[0].instance, "holder", "{rows:?}");
    assert_eq!(spans.lock().expect("spans").len(), 1);
}

/// `overlap = "queue"`: an instant that came after the run before the
/// waiting one ended, but before the waiting one's run started (its claim
/// waited for the lease to be given back), found the job's place taken
/// and is an overrun of the waiting run, which held the job from its
/// instant: not recorded `missed` (found by the fault campaign: a `queue`
/// instant recorded missed while one waited). On a paused clock, the two
/// runs written by the test as the replicas that ran them would.
#[tokio::test(start_paused = true)]
async fn an_instant_after_a_queued_one_waits_behind_it_and_is_not_missed() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    drop(db.pool(1));
    let mut conn = connect_at(&db, &clock);
    crate::lease::ensure_rows(&mut conn, &["q"]).expect("row");
    let at = |hms: &str| utc(&format!("2027-03-01T{hms}Z"));
    // 00:01:00 ran until 00:01:25; 00:01:10 waited for it and ran from
    // 00:01:35; 00:01:30 came in between.
    parent_ended(
        &mut conn,
        "q",
        at("00:01:00"),
        at("00:01:00.100"),
        at("00:01:25"),
        RunStatus::Succeeded,
    );
    parent_ended(
        &mut conn,
        "q",
        at("00:01:10"),
        at("00:01:35"),
        at("00:01:55"),
        RunStatus::Succeeded,
    );
    tokio::time::sleep(Duration::from_secs(150)).await;
    let mut job = Job::new("q", "*/10 * * * * *")
        .expect("job")
        .missed_after(Duration::from_secs(20))
        .run(|_| async { Ok::<(), String>(()) });
    job.settings.overlap = crate::config::Overlap::Queue;
    replica_of(&db, &clock, "here", job)
        .build()
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(60)))
        .await
        .expect("runs");
    let missed: Vec<String> = rows_by_instant(&db, "q")
        .into_iter()
        .filter(|r| r.1 == RunStatus::Missed)
        .map(|r| r.0)
        .collect();
    let overruns = ["00:01:20", "00:01:30", "00:01:40", "00:01:50"];
    assert!(
        overruns.iter().all(|t| !missed.contains(&t.to_string())),
        "an overrun was recorded missed: {missed:?}"
    );
    assert!(missed.contains(&"00:02:00".to_string()), "{missed:?}");
}

/// A run stopped (gracefully) in the pause before its retry: the failed
/// attempt stays its outcome, and the retry that was due is recorded
/// `skipped`, saying why, rather than never mentioned. On a paused clock.
#[tokio::test(start_paused = true)]
async fn a_graceful_stop_records_the_retry_it_cut_short() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let job = Job::new("flaky", "0 * * * * *")
        .expect("job")
        .retries(2, Duration::from_secs(60))
        .run(|_| async { Err::<(), String>("the API was down".to_string()) });
    let replica = replica_of(&db, &clock, "solo", job)
        .build()
        .await
        .expect("build");
    // 00:01's attempt 1 fails at once; its retry is due at 00:02:00.
    replica
        .run_until(tokio::time::sleep(Duration::from_secs(40)))
        .await
        .expect("runs");
    assert_eq!(
        endings(&db, "flaky"),
        [
            (
                "00:01".to_string(),
                1,
                RunStatus::Failed,
                "the API was down".to_string()
            ),
            (
                "00:01".to_string(),
                2,
                RunStatus::Skipped,
                "replicron: not run: replicron stopped during the pause before this retry\n"
                    .to_string()
            ),
        ]
    );
    assert!(lease_free(&db, &clock, "flaky"));
}

/// Runs that wait, at a graceful stop, for one of their `allow` job's run
/// slots or for a limit's: each is recorded `skipped`, naming what it
/// waited for, while the runs that hold them go on to their ends. On a
/// paused clock.
#[tokio::test(start_paused = true)]
async fn a_graceful_stop_records_the_runs_waiting_for_slots() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let spans: Starts = Arc::default();
    let mut allowed = recording_job(
        "allowed",
        "0 * * * * *",
        Duration::from_secs(90),
        &clock,
        &spans,
    );
    allowed.settings.overlap = crate::config::Overlap::Allow(1);
    allowed.settings.gates = vec![super::job::Gate {
        label: "its 1 run slots (max_concurrent)".to_string(),
        rows: crate::lease::concurrent_rows("allowed", 1),
    }];
    let limit = crate::config::Limit {
        name: "vendor".to_string(),
        max_running: 1,
    };
    let limited = |name: &'static str| {
        let mut job = recording_job(
            name,
            "30 * * * * *",
            Duration::from_secs(90),
            &clock,
            &spans,
        );
        job.settings.gates = vec![super::job::Gate {
            label: "limit vendor".to_string(),
            rows: limit.rows(),
        }];
        job
    };
    let replica = replica_of(&db, &clock, "solo", allowed)
        .job(limited("first"))
        .job(limited("second"))
        .shutdown_grace(Duration::from_secs(60))
        .build()
        .await
        .expect("build");
    // 00:01 of `allowed` holds its slot to 00:02:30, and 00:02 waits for
    // it; from 00:01:30, one of `first` and `second` holds the limit (to
    // 00:03:00), the other waits for it.
    replica
        .run_until(tokio::time::sleep(Duration::from_secs(80)))
        .await
        .expect("runs");
    let allowed = endings(&db, "allowed");
    let statuses: Vec<(&str, RunStatus)> = allowed.iter().map(|r| (&*r.0, r.2)).collect();
    assert_eq!(
        statuses,
        [
            ("00:01", RunStatus::Succeeded),
            ("00:02", RunStatus::Skipped)
        ],
        "{allowed:?}"
    );
    assert_eq!(
        allowed[1].3,
        "replicron: not run: replicron was stopping while it waited for its 1 run slots (max_concurrent)\n"
    );
    let limited: Vec<_> = ["first", "second"]
        .iter()
        .flat_map(|job| endings(&db, job))
        .collect();
    let mut statuses: Vec<RunStatus> = limited.iter().map(|r| r.2).collect();
    statuses.sort_by_key(|s| s.as_str());
    assert_eq!(
        statuses,
        [RunStatus::Skipped, RunStatus::Succeeded],
        "{limited:?}"
    );
    assert!(
        limited.iter().any(|r| r.3
            == "replicron: not run: replicron was stopping while it waited for limit vendor\n"),
        "{limited:?}"
    );
}

/// A dependent job with `overlap = "queue"`, stopped (gracefully) while
/// its next instant (its parent's next run has ended) waits for its run:
/// that run goes on to its end within the grace and is recorded, and the
/// waiting instant is recorded `skipped`, saying why. On a paused clock.
#[tokio::test(start_paused = true)]
async fn a_graceful_stop_lets_a_dependent_jobs_run_end_and_records_its_waiting_instant() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n\
         [[job]]\nname = \"parent\"\nschedule = \"* * * * *\"\ncommand = \"true\"\n\n\
         [[job]]\nname = \"child\"\nafter = [\"parent\"]\noverlap = \"queue\"\ncommand = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let mut builder = Scheduler::builder(db.url.as_str())
        .clock(clock.clone())
        .instance_id("solo")
        .shutdown_grace(Duration::from_secs(60));
    for job in &config.jobs {
        let busy = if &*job.name == "child" {
            Duration::from_secs(90)
        } else {
            Duration::from_millis(300)
        };
        builder = builder.job(Job::from_config(job).run(move |_| async move {
            tokio::time::sleep(busy).await;
            Ok::<(), String>(())
        }));
    }
    // The child's 00:01 runs to about 00:02:30; its 00:02 waits for it
    // from about 00:02:00.
    builder
        .build()
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(100)))
        .await
        .expect("runs");
    let rows = endings(&db, "child");
    let statuses: Vec<(&str, RunStatus)> = rows.iter().map(|r| (&*r.0, r.2)).collect();
    assert_eq!(
        statuses,
        [
            ("00:01", RunStatus::Succeeded),
            ("00:02", RunStatus::Skipped)
        ],
        "{rows:?}"
    );
    assert_eq!(rows[1].3, LEFT_BY_A_STOP, "{rows:?}");
    assert!(lease_free(&db, &clock, "child"));
}

/// Triggers in flight at a graceful stop, of an `overlap = "queue"` job:
/// the triggered run goes on to its end within the grace and is recorded
/// `succeeded`; a second trigger, waiting for it, is answered that the
/// job's lease is held (its caller hears it did not run). On a paused
/// clock.
#[tokio::test(start_paused = true)]
async fn a_graceful_stop_lets_a_triggered_run_end_and_answers_the_waiting_trigger() {
    use super::trigger::{Answer, Refusal, Request};
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let spans: Starts = Arc::default();
    // Due once a year: its runs here are the triggers'.
    let mut job = recording_job(
        "manual",
        "0 0 1 1 *",
        Duration::from_secs(90),
        &clock,
        &spans,
    );
    job.settings.overlap = crate::config::Overlap::Queue;
    let (triggers, requests) = tokio::sync::mpsc::channel(4);
    let scheduler = replica_of(&db, &clock, "solo", job.clone())
        .shutdown_grace(Duration::from_secs(120))
        .triggers(requests)
        .build()
        .await
        .expect("build");
    let running = tokio::spawn(scheduler.run_until(tokio::time::sleep(Duration::from_secs(20))));
    let mut answers = Vec::new();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (reply, answer) = tokio::sync::oneshot::channel();
        triggers
            .send(Request {
                job: job.clone(),
                force: false,
                params: Default::default(),
                reason: None,
                backfill: None,
                reply,
            })
            .await
            .expect("the scheduler takes triggers");
        answers.push(answer);
    }
    running.await.expect("joins").expect("runs");
    let mut told = Vec::new();
    for answer in answers {
        told.push(answer.await.expect("answered"));
    }
    assert!(matches!(told[0], Answer::Running(_)), "{told:?}");
    assert_eq!(told[1], Answer::Refused(Refusal::Held), "{told:?}");
    let rows = runs_of(&db, "manual");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].status, RunStatus::Succeeded, "{rows:?}");
    assert_eq!(rows[0].triggered_by, Trigger::Manual, "{rows:?}");
    let spans = spans.lock().expect("spans").clone();
    assert_eq!(spans[0].2 - spans[0].1, TimeDelta::seconds(90), "{spans:?}");
}

/// A run's job, instant, start and end.
type BeganRun = (String, DateTime<Utc>, DateTime<Utc>, DateTime<Utc>);

/// When each run of several jobs began and ended, by its instant.
type Began = Arc<Mutex<Vec<BeganRun>>>;

/// A job `name` due on `schedule` whose runs take `busy` and take a slot
/// of `limit`, recording (job, instant, start, end) in `began`.
fn limited_job(
    name: &'static str,
    schedule: &str,
    busy: Duration,
    limit: &crate::config::Limit,
    clock: &Arc<TokioClock>,
    began: &Began,
) -> Job {
    let (began, clock) = (began.clone(), clock.clone());
    let mut job = Job::new(name, schedule).expect("job").run(move |ctx| {
        let (began, clock) = (began.clone(), clock.clone());
        async move {
            let start = clock.now();
            tokio::time::sleep(busy).await;
            began
                .lock()
                .expect("runs")
                .push((name.to_string(), ctx.instant(), start, clock.now()));
            Ok::<(), String>(())
        }
    });
    job.settings.gates = vec![super::job::Gate {
        label: format!("limit {}", limit.name),
        rows: limit.rows(),
    }];
    job.settings.timeout = Duration::from_secs(600);
    job
}

/// The pairs of runs of `began` where one started before an older instant
/// of another job that had been waiting for over `slack` by then: the
/// older instant was passed over.
fn passed_over(began: &[BeganRun], slack: TimeDelta) -> Vec<String> {
    let mut found = Vec::new();
    for (job, instant, start, _) in began {
        for (other, earlier, its_start, _) in began {
            if other != job && earlier < instant && start < its_start && *earlier + slack < *start {
                found.push(format!(
                    "{job} {} started at {} before {other} {}, waiting since then, started at {}",
                    crate::schedule::fmt_instant(*instant),
                    crate::schedule::fmt_instant(*start),
                    crate::schedule::fmt_instant(*earlier),
                    crate::schedule::fmt_instant(*its_start),
                ));
            }
        }
    }
    found
}

/// Three jobs due every 5 s, each of whose runs takes 4 s, share a limit
/// of one on two replicas: more is asked of the limit than it gives, so
/// their runs wait for it. Its slot goes to the waiters in the order of
/// their instants, whichever replica's poll comes first: no run starts
/// while an older instant of another job waits, and each job gets its
/// turn. On a paused clock.
#[tokio::test(start_paused = true)]
async fn a_limits_slot_goes_to_the_waiter_whose_instant_is_oldest() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let began: Began = Arc::default();
    let limit = crate::config::Limit {
        name: "vendor".to_string(),
        max_running: 1,
    };
    let replica = |id: &str| {
        let job = |name| {
            limited_job(
                name,
                "*/5 * * * * *",
                Duration::from_secs(4),
                &limit,
                &clock,
                &began,
            )
        };
        replica_of(&db, &clock, id, job("a"))
            .job(job("b"))
            .job(job("c"))
    };
    side_by_side(replica("one"), replica("two"), Duration::from_secs(5 * 60)).await;
    let began = began.lock().expect("runs").clone();
    assert!(began.len() >= 60, "{began:?}");
    let passed = passed_over(&began, TimeDelta::milliseconds(500));
    assert!(passed.is_empty(), "{passed:#?}");
    for name in ["a", "b", "c"] {
        let runs = began.iter().filter(|(job, ..)| job == name).count();
        assert!(
            runs * 4 >= began.len(),
            "{name} ran {runs} of {}",
            began.len()
        );
    }
}

/// Waiters for a limit with priorities, and a backfill: a job with
/// `priority = 10` goes before an older instant of a job with none, and a
/// backfill's instant, however old, waits behind the scheduled ones. A
/// hog holds the limit of one from 00:01:00 to 00:01:30 while the others
/// come. On a paused clock.
#[tokio::test(start_paused = true)]
async fn a_limits_waiters_go_by_priority_and_a_backfill_waits_behind_the_schedule() {
    use super::trigger::{Answer, Backfill, Request};
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:50Z")));
    let began: Began = Arc::default();
    let limit = crate::config::Limit {
        name: "vendor".to_string(),
        max_running: 1,
    };
    let job = |name, schedule, busy| {
        limited_job(
            name,
            schedule,
            Duration::from_secs(busy),
            &limit,
            &clock,
            &began,
        )
    };
    let mut high = job("high", "10 1 * * * *", 5);
    high.settings.priority = 10;
    // Due once a year: its run here is the backfill's.
    let backfilled = job("backfilled", "0 0 1 1 *", 5);
    let (triggers, requests) = tokio::sync::mpsc::channel(4);
    let scheduler = replica_of(&db, &clock, "solo", job("hog", "0 1 * * * *", 30))
        .job(job("low", "5 1 * * * *", 5))
        .job(high)
        .job(job("later", "20 1 * * * *", 5))
        .job(backfilled.clone())
        .triggers(requests)
        .build()
        .await
        .expect("build");
    let running = tokio::spawn(scheduler.run_until(tokio::time::sleep(Duration::from_secs(100))));
    tokio::time::sleep(Duration::from_secs(25)).await;
    let (reply, answer) = tokio::sync::oneshot::channel();
    triggers
        .send(Request {
            job: backfilled,
            force: false,
            params: Default::default(),
            reason: None,
            backfill: Some(Backfill {
                from: utc("2027-01-01T00:00:00Z"),
                to: utc("2027-01-01T00:00:01Z"),
                instants: vec![utc("2027-01-01T00:00:00Z")],
                rerun_succeeded: false,
                limit: 10_000,
                priority: None,
            }),
            reply,
        })
        .await
        .expect("the scheduler takes triggers");
    assert_eq!(answer.await.expect("answered"), Answer::Backfilling(1));
    running.await.expect("joins").expect("runs");
    let mut began = began.lock().expect("runs").clone();
    began.sort_by_key(|(_, _, start, _)| *start);
    let order: Vec<(&str, String)> = began
        .iter()
        .map(|(job, _, start, _)| (job.as_str(), crate::schedule::fmt_instant(*start)))
        .collect();
    let names: Vec<&str> = order.iter().map(|(job, _)| *job).collect();
    assert_eq!(
        names,
        ["hog", "high", "low", "later", "backfilled"],
        "{order:?}"
    );
}

/// The runs of a test's jobs, by replica and instant.
type RanOn = Arc<Mutex<Vec<(String, DateTime<Utc>)>>>;

/// A replica `id` running `config`'s first job, its runs recorded in `ran`.
fn once_replica(
    db: &TestDb,
    clock: &Arc<TokioClock>,
    config: &crate::config::Config,
    id: &str,
    ran: &RanOn,
) -> SchedulerBuilder {
    let (record, me) = (ran.clone(), id.to_string());
    let job = Job::from_config(&config.jobs[0]).run(move |ctx| {
        record
            .lock()
            .expect("ran")
            .push((me.clone(), ctx.instant()));
        async { Ok::<(), String>(()) }
    });
    replica_of(db, clock, id, job)
}

/// A job written `at` one instant, on two replicas and a paused clock: it
/// runs once, at its instant, on one of them, recorded as a scheduled run
/// and not missed; two replicas started afterwards (its `catch_up` still
/// covers the instant) do not run it again, and its schedule has ended.
#[tokio::test(start_paused = true)]
async fn a_job_at_one_instant_runs_once_across_the_fleet_and_never_again() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[[job]]\nname = \"once\"\n\
         at = \"2027-03-01T01:05:00+01:00\"\ntimezone = \"Europe/Berlin\"\n\
         command = \"true\"\ncatch_up = \"1h\"\nmissed_after = \"5s\"\n",
        db.url
    );
    let config = config_of(&text);
    let ran: RanOn = Arc::default();
    side_by_side(
        once_replica(&db, &clock, &config, "one", &ran),
        once_replica(&db, &clock, &config, "two", &ran),
        Duration::from_secs(20 * 60),
    )
    .await;
    let instants: Vec<DateTime<Utc>> = ran.lock().expect("ran").iter().map(|r| r.1).collect();
    assert_eq!(instants, [utc("2027-03-01T00:05:00Z")]);
    let rows = runs_of(&db, "once");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].status, rows[0].triggered_by),
        (RunStatus::Succeeded, Trigger::Schedule)
    );
    assert!(config.jobs[0].schedule.has_ended(clock.now()));
    // The fleet restarts within the instant's catch_up: caught up, the
    // claim refuses an instant that ran.
    side_by_side(
        once_replica(&db, &clock, &config, "three", &ran),
        once_replica(&db, &clock, &config, "four", &ran),
        Duration::from_secs(10 * 60),
    )
    .await;
    assert_eq!(ran.lock().expect("ran").len(), 1, "ran again: {ran:?}");
    assert_eq!(runs_of(&db, "once").len(), 1);
}

/// A job written `at` an instant that came while no replica ran: the first
/// replica to start within its `catch_up` runs it once, although its lease
/// row is newer than the instant; with no catch-up it is recorded missed.
#[tokio::test(start_paused = true)]
async fn a_job_at_an_instant_nobody_ran_is_caught_up_once() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:10:00Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[[job]]\nname = \"late\"\n\
         at = \"2027-03-01T00:05:00Z\"\ncommand = \"true\"\ncatch_up = \"1h\"\n",
        db.url
    );
    let config = config_of(&text);
    let ran: RanOn = Arc::default();
    side_by_side(
        once_replica(&db, &clock, &config, "one", &ran),
        once_replica(&db, &clock, &config, "two", &ran),
        Duration::from_secs(5 * 60),
    )
    .await;
    let instants: Vec<DateTime<Utc>> = ran.lock().expect("ran").iter().map(|r| r.1).collect();
    assert_eq!(instants, [utc("2027-03-01T00:05:00Z")]);
    let rows = runs_of(&db, "late");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].triggered_by, Trigger::CatchUp);
}

/// A one-time run planned ahead (`trigger --at`) of a `@manual` job, on two
/// replicas and a paused clock: it runs once, at its instant, with the
/// parameters given over the job's defaults, recorded `manual`, and its row
/// is gone; one whose instant came while no replica ran, beyond the job's
/// `catch_up`, is recorded missed once.
#[tokio::test(start_paused = true)]
async fn a_one_time_run_planned_ahead_runs_once_across_the_fleet() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[[job]]\nname = \"asked\"\nschedule = \"@manual\"\n\
         command = \"true\"\nparams = [\"DAYS=7\", \"MODE=full\"]\n",
        db.url
    );
    let config = config_of(&text);
    let ran: RanOn = Arc::default();
    let (one, two) = (
        once_replica(&db, &clock, &config, "one", &ran)
            .build()
            .await
            .expect("build"),
        once_replica(&db, &clock, &config, "two", &ran)
            .build()
            .await
            .expect("build"),
    );
    let pool = crate::db::Pool::connect(&db.database_url(), 1, clock.clone()).expect("pool");
    let store = crate::db::Store::new(pool);
    let params: crate::history::Params = [("DAYS".to_string(), "30".to_string())].into();
    let at = utc("2027-03-01T00:07:00Z");
    let id = super::planned::plan(&store, "asked", at, &params, "tester@host")
        .await
        .expect("planned");
    assert!(id.is_some());
    // The same instant again is refused.
    assert_eq!(
        super::planned::plan(&store, "asked", at, &params, "tester@host")
            .await
            .expect("asked again"),
        None
    );
    // One whose instant is long past: nobody ran it, it is recorded missed.
    super::planned::plan(
        &store,
        "asked",
        utc("2027-02-28T00:00:00Z"),
        &params,
        "tester@host",
    )
    .await
    .expect("planned")
    .expect("a new row");
    let until = || tokio::time::sleep(Duration::from_secs(15 * 60));
    let (a, b) = tokio::join!(one.run_until(until()), two.run_until(until()));
    a.expect("one");
    b.expect("two");
    let instants: Vec<DateTime<Utc>> = ran.lock().expect("ran").iter().map(|r| r.1).collect();
    assert_eq!(instants, [at]);
    let rows = runs_of(&db, "asked");
    let seen: Vec<(String, RunStatus, Trigger)> = rows
        .iter()
        .map(|r| {
            (
                crate::schedule::fmt_instant(r.scheduled_at.and_utc()),
                r.status,
                r.triggered_by,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "2027-02-28T00:00:00.000Z".to_string(),
                RunStatus::Missed,
                Trigger::Schedule
            ),
            (
                "2027-03-01T00:07:00.000Z".to_string(),
                RunStatus::Succeeded,
                Trigger::Manual
            ),
        ]
    );
    let given = crate::history::params_of(rows[1].params.as_deref());
    assert_eq!(given.get("DAYS").map(String::as_str), Some("30"));
    assert_eq!(given.get("MODE").map(String::as_str), Some("full"));
    let left = super::planned::list(&store).await.expect("rows");
    assert!(left.is_empty(), "{left:?}");
}

/// What a run of a job that reruns its abandoned instants saw: its job,
/// instant (`HH:MM`), attempt, previous attempt's status, trigger and
/// fence.
type Seen = (String, String, u32, Option<&'static str>, &'static str, i64);

/// A job that reruns its abandoned instants (`on_abandon = "rerun"`) with
/// `retries`, recording each run into `seen`.
fn rerunning_job(name: &str, retries: u32, seen: &Arc<Mutex<Vec<Seen>>>) -> Job {
    let seen = seen.clone();
    Job::new(name, "* * * * *")
        .expect("job")
        .lock_at_most_for(Duration::from_secs(120))
        .retries(retries, Duration::from_secs(1))
        .rerun_abandoned()
        .run(move |ctx| {
            let seen = seen.clone();
            async move {
                seen.lock().expect("seen").push((
                    ctx.job().to_string(),
                    ctx.instant().format("%H:%M").to_string(),
                    ctx.attempt(),
                    ctx.previous_status(),
                    ctx.trigger(),
                    ctx.fence(),
                ));
                Ok::<(), String>(())
            }
        })
}

/// Leaves attempts `1..=attempts` of `job`'s `instant` as a holder cut
/// off mid-run leaves them: each earlier attempt `abandoned` under a fence
/// of its own (the last of them's a rerun's: a retry), the last one
/// `running` under `fence`, its lease still that holder's until
/// `lock_until`. Returns the last one's id.
fn cut_off_at(
    conn: &mut crate::db::DbConnection,
    job: &str,
    instant: DateTime<Utc>,
    (attempts, fence): (i32, i64),
    lock_until: DateTime<Utc>,
) -> i64 {
    use crate::db::schema::replicron_locks::dsl as locks;
    use crate::db::schema::replicron_runs::dsl as runs;
    use diesel::prelude::*;
    let mut last = 0;
    for attempt in 1..=attempts {
        let on = fence - i64::from(attempts - attempt);
        last = crate::history::record_run_started(
            conn,
            &crate::history::NewRun {
                job: job.into(),
                scheduled_at: instant,
                attempt,
                instance: "cut-off".into(),
                fence: on,
                once_key: None,
                scope: String::new(),
                lease_row: None,
                trigger: if attempt == 1 {
                    Trigger::Schedule
                } else {
                    Trigger::Retry
                },
                params: None,
            },
        )
        .expect("start");
        let status = if attempt == attempts {
            RunStatus::Running
        } else {
            RunStatus::Abandoned
        };
        diesel::update(runs::replicron_runs.filter(runs::id.eq(last)))
            .set((
                runs::started_at.eq(instant.naive_utc()),
                runs::status.eq(status),
                runs::confirmed_at.eq(Some((instant + TimeDelta::seconds(10)).naive_utc())),
            ))
            .execute(conn)
            .expect("the attempt's row");
    }
    diesel::update(locks::replicron_locks.filter(locks::name.eq(job)))
        .set((
            locks::fence.eq(fence),
            locks::locked_by.eq(Some("cut-off")),
            locks::locked_at.eq(Some(instant.naive_utc())),
            locks::last_scheduled_at.eq(Some(instant.naive_utc())),
            locks::lock_until.eq(lock_until.naive_utc()),
        ))
        .execute(conn)
        .expect("the cut-off holder's lease");
    last
}

/// `on_abandon = "rerun"`: the holder of 00:04 is cut off mid-run. Once
/// its lease has ended, the replica that claims the job next (00:06, of
/// two replicas) marks the run `abandoned` and runs 00:04 again, once, as
/// attempt 2 under a fence above the dead holder's, told its attempt, the
/// previous status `abandoned` and the trigger `retry`. A job whose
/// instant was rerun as often as `max(retries, 1)` lets already keeps it
/// abandoned: nothing runs it a third time. On a paused clock.
#[tokio::test(start_paused = true)]
async fn an_abandoned_instant_is_rerun_once_under_a_higher_fence() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let replica = |id: &'static str| {
        Scheduler::builder(db.url.as_str())
            .clock(clock.clone())
            .instance_id(id)
            .job(rerunning_job("reruns", 2, &seen))
            .job(rerunning_job("spent", 0, &seen))
    };
    replica("before")
        .build()
        .await
        .expect("build")
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60)))
        .await
        .expect("runs");
    let four = utc("2027-03-01T00:04:00Z");
    let lease_end = utc("2027-03-01T00:05:30Z");
    let (cut, spent) = {
        let mut conn = connect_at(&db, &clock);
        (
            cut_off_at(&mut conn, "reruns", four, (1, 99), lease_end),
            // Attempt 1 abandoned, attempt 2 its rerun, cut off in turn:
            // `retries = 0` lets one rerun, which it had.
            cut_off_at(&mut conn, "spent", four, (2, 99), lease_end),
        )
    };
    side_by_side(replica("p"), replica("q"), Duration::from_secs(6 * 60)).await;

    let rows = runs_of(&db, "reruns");
    let at_four: Vec<&RunRow> = rows
        .iter()
        .filter(|r| r.scheduled_at.and_utc() == four)
        .collect();
    assert_eq!(at_four.len(), 2, "{rows:?}");
    let (abandoned, rerun) = (at_four[0], at_four[1]);
    assert_eq!(
        (abandoned.id, abandoned.attempt, abandoned.status),
        (cut, 1, RunStatus::Abandoned),
        "{rows:?}"
    );
    assert_eq!(
        (rerun.attempt, rerun.status, rerun.triggered_by),
        (2, RunStatus::Succeeded, Trigger::Retry),
        "{rows:?}"
    );
    assert!(
        rerun.fence > 100 && ["p", "q"].contains(&rerun.instance.as_str()),
        "a fence above the dead holder's and its next claim's: {rerun:?}"
    );
    let seen = seen.lock().expect("seen").clone();
    let reran: Vec<&Seen> = seen.iter().filter(|s| s.1 == "00:04").collect();
    assert_eq!(
        reran,
        [&(
            "reruns".to_string(),
            "00:04".to_string(),
            2,
            Some("abandoned"),
            "retry",
            rerun.fence
        )],
        "{seen:?}"
    );
    // Every other run was a first attempt, told of no previous one.
    assert!(
        seen.iter()
            .filter(|s| s.1 != "00:04")
            .all(|s| s.2 == 1 && s.3.is_none() && s.4 == "schedule"),
        "{seen:?}"
    );
    // Both jobs ran on after it, each instant once.
    for job in ["reruns", "spent"] {
        let mut instants: Vec<&str> = seen
            .iter()
            .filter(|s| s.0 == job && s.1.as_str() >= "00:06")
            .map(|s| s.1.as_str())
            .collect();
        let count = instants.len();
        instants.dedup();
        assert!(count >= 3 && instants.len() == count, "{job}: {seen:?}");
    }
    let spent_rows = runs_of(&db, "spent");
    let spent_at_four: Vec<(i32, RunStatus)> = spent_rows
        .iter()
        .filter(|r| r.scheduled_at.and_utc() == four)
        .map(|r| (r.attempt, r.status))
        .collect();
    assert_eq!(
        spent_at_four,
        [(1, RunStatus::Abandoned), (2, RunStatus::Abandoned)],
        "{spent_rows:?}"
    );
    assert!(spent_rows.iter().any(|r| r.id == spent), "{spent_rows:?}");
}

/// An action that ends as a process that exits with `codes[attempt - 1]`
/// would (the last code again past the end), counting its attempts.
struct Exits {
    codes: Vec<i32>,
    attempts: Arc<AtomicUsize>,
}

impl crate::runner::Action for Exits {
    fn run(
        &self,
        ctx: crate::runner::RunContext,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = crate::runner::Ending> + Send>> {
        ctx.report_started(None);
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let at = (ctx.attempt() as usize).clamp(1, self.codes.len()) - 1;
        let code = self.codes[at];
        Box::pin(async move {
            crate::runner::Ending {
                how: if code == 0 {
                    crate::runner::Ended::Succeeded
                } else {
                    crate::runner::Ended::Failed
                },
                exit_code: Some(code),
                signal: None,
                output: format!("exiting {code}\n"),
                output_file: None,
            }
        })
    }
}

/// The job `job` of `config`, its process replaced by one that exits
/// with `codes`, one per attempt; and its count of attempts.
fn exiting(config: &crate::config::Config, job: &str, codes: &[i32]) -> (Job, Arc<AtomicUsize>) {
    let attempts = Arc::new(AtomicUsize::new(0));
    let mut built = Job::from_config(config.job(job).expect("the job"));
    built.action = Some(Arc::new(Exits {
        codes: codes.to_vec(),
        attempts: attempts.clone(),
    }));
    (built, attempts)
}

/// The exit-code rules, one instant each on a paused clock: exit 3 with
/// success_exit_codes = [0, 3] is recorded succeeded; exit 99 with
/// skip_exit_codes = [99] skipped, not retried though the job has retries;
/// with retry_on_exit_codes = [75], exits 75 are retried and the first
/// other failure is final. Each rule that decided is the last line of its
/// attempt's output. A job without the rules (exit 3) fails and is retried
/// as before, its output as its process left it.
#[tokio::test(start_paused = true)]
async fn exit_codes_decide_success_skip_and_retry() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = "[defaults]\nretries = 3\nretry_backoff = \"10s\"\n\n\
                [[job]]\nname = \"three\"\nschedule = \"*/5 * * * *\"\ncommand = \"exit 3\"\n\
                success_exit_codes = [0, 3]\n\n\
                [[job]]\nname = \"nothing\"\nschedule = \"*/5 * * * *\"\ncommand = \"exit 99\"\n\
                skip_exit_codes = [99]\n\n\
                [[job]]\nname = \"picky\"\nschedule = \"*/5 * * * *\"\ncommand = \"exit 75\"\n\
                retry_on_exit_codes = [75]\n\n\
                [[job]]\nname = \"plain\"\nschedule = \"*/5 * * * *\"\ncommand = \"exit 3\"\n\
                retries = 1\n";
    let config = config_of(&format!("[database]\nurl = {:?}\n\n{text}", db.url));
    let (three, threes) = exiting(&config, "three", &[3]);
    let (nothing, nothings) = exiting(&config, "nothing", &[99]);
    let (picky, pickies) = exiting(&config, "picky", &[75, 75, 2, 75]);
    let (plain, plains) = exiting(&config, "plain", &[3]);
    let scheduler = Scheduler::builder(db.url.as_str())
        .clock(clock)
        .instance_id("solo")
        .job(three)
        .job(nothing)
        .job(picky)
        .job(plain)
        .build()
        .await
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(6 * 60)))
        .await
        .expect("runs");
    let endings = |job: &str| -> Vec<(i32, RunStatus, Option<i32>, String)> {
        runs_of(&db, job)
            .into_iter()
            .map(|r| (r.attempt, r.status, r.exit_code, r.output))
            .collect()
    };
    assert_eq!(
        endings("three"),
        [(
            1,
            RunStatus::Succeeded,
            Some(3),
            "exiting 3\nreplicron: exit 3: success by success_exit_codes\n".to_string()
        )]
    );
    assert_eq!(threes.load(Ordering::SeqCst), 1);
    assert_eq!(
        endings("nothing"),
        [(
            1,
            RunStatus::Skipped,
            Some(99),
            "exiting 99\nreplicron: exit 99: skipped by skip_exit_codes\n".to_string()
        )]
    );
    assert_eq!(nothings.load(Ordering::SeqCst), 1, "a skip is not retried");
    let failed = |attempt: i32, code: i32, output: &str| {
        (attempt, RunStatus::Failed, Some(code), output.to_string())
    };
    assert_eq!(
        endings("picky"),
        [
            failed(1, 75, "exiting 75\n"),
            failed(2, 75, "exiting 75\n"),
            failed(
                3,
                2,
                "exiting 2\nreplicron: exit 2: not retried (retry_on_exit_codes = [75])\n"
            ),
        ]
    );
    assert_eq!(pickies.load(Ordering::SeqCst), 3, "75, 75, then 2 is final");
    assert_eq!(
        endings("plain"),
        [failed(1, 3, "exiting 3\n"), failed(2, 3, "exiting 3\n")]
    );
    assert_eq!(plains.load(Ordering::SeqCst), 2);
}

/// A parent whose process exits 99 with skip_exit_codes = [99], each
/// minute on a paused clock: its instants are recorded `skipped` and, as
/// for any parent that ended skipped, a dependent job that runs after its
/// successes records its instants `skipped` (upstream), while one whose
/// `on` lists `skipped` runs at each.
#[tokio::test(start_paused = true)]
async fn a_parent_skipped_by_its_exit_code_ends_skipped_for_its_dependents() {
    let db = TestDb::sqlite();
    let clock = Arc::new(TokioClock::starting_at(utc("2027-03-01T00:00:30Z")));
    let text = format!(
        "[database]\nurl = {:?}\n\n[defaults]\nmissed_after = \"20s\"\n\
         [[job]]\nname = \"p\"\nschedule = \"* * * * *\"\ncommand = \"exit 99\"\n\
         skip_exit_codes = [99]\nretries = 1\n\
         [[job]]\nname = \"on-success\"\nafter = [\"p\"]\ncommand = \"true\"\n\
         [[job]]\nname = \"on-skip\"\nafter = {{ jobs = [\"p\"], on = [\"succeeded\", \"skipped\"] }}\n\
         command = \"true\"\n",
        db.url
    );
    let config = config_of(&text);
    let (parent, attempts) = exiting(&config, "p", &[99]);
    let mut builder = Scheduler::builder(db.url.as_str())
        .clock(clock)
        .instance_id("solo")
        .job(parent);
    for name in ["on-success", "on-skip"] {
        let job = config.job(name).expect("the job");
        builder = builder.job(Job::from_config(job).run(|_| async { Ok::<(), String>(()) }));
    }
    let scheduler = builder.build().await.expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(3 * 60 + 20)))
        .await
        .expect("runs");
    let parent_rows = runs_of(&db, "p");
    assert_eq!(parent_rows.len(), 3, "{parent_rows:?}");
    assert!(
        parent_rows
            .iter()
            .all(|r| r.status == RunStatus::Skipped && r.attempt == 1),
        "{parent_rows:?}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 3, "a skip is not retried");
    let statuses = |job: &str| -> Vec<(RunStatus, String)> {
        runs_of(&db, job)
            .into_iter()
            .map(|r| (r.status, r.output))
            .collect()
    };
    let upstream = (
        RunStatus::Skipped,
        "replicron: upstream failed: p ended skipped\n".to_string(),
    );
    assert_eq!(statuses("on-success"), vec![upstream; 3]);
    assert_eq!(
        statuses("on-skip"),
        vec![(RunStatus::Succeeded, String::new()); 3]
    );
}
