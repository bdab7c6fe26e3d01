//! replicron as a library: schedulers embedded in this test process share
//! the jobs and the database with a `replicron run` daemon, and each
//! instant still runs once; an async job whose lease cannot be kept is
//! cancelled before the lease ends, and recorded `lost_lock`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nix::sys::signal::Signal;
use replicron::{Job, RunContext, Scheduler};
use tokio::sync::watch;

use crate::database_time::{Line, assert_each_instant_once, per_second_jobs, read_lines};
use crate::proxy::Proxy;
use crate::support::{Kind, Replica, TestDb, backend_test, history_json};

const JOBS: usize = 3;

/// Appends a run's line, in the daemon jobs' format, to `out`.
fn record(out: &Path, ctx: &RunContext) -> std::io::Result<()> {
    let started_ns = Utc::now().timestamp_nanos_opt().unwrap_or(0);
    let line = format!(
        "{} {} {} {started_ns}\n",
        ctx.job(),
        ctx.instant()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ctx.instance()
    );
    // One write of one short line with O_APPEND: lines of concurrent
    // writers (the daemon's shells too) do not interleave.
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(out)?
        .write_all(line.as_bytes())
}

/// The jobs of `per_second_jobs`, as async functions recording to `out`.
fn library_jobs(out: &Path) -> Vec<Job> {
    (0..JOBS)
        .map(|n| {
            let out: Arc<PathBuf> = Arc::new(out.to_path_buf());
            Job::new(&format!("job-{n:02}"), "* * * * * *")
                .expect("a valid job")
                .run(move |ctx| {
                    let out = out.clone();
                    async move { record(&out, &ctx) }
                })
        })
        .collect()
}

fn second(t: DateTime<Utc>) -> DateTime<Utc> {
    chrono::DurationRound::duration_trunc(t, TimeDelta::seconds(1)).expect("truncate")
}

backend_test! {
    /// Three schedulers in this process and one daemon, on the same three
    /// per-second jobs: the schedulers alone for 2 s, then with the daemon
    /// for 6 s, then the daemon alone for 3 s. Every instant of the whole
    /// window runs exactly once, through both hand-overs and the race
    /// between the two kinds of replica, and both kinds run some.
    fn library_and_daemon_replicas_run_each_instant_once(db: &TestDb) {
        let out = db.dir().join("runs.txt");
        let config = db.config(&per_second_jobs(JOBS, &out));
        db.migrate();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (stop_tx, stop) = watch::channel(false);
        let libraries: Vec<_> = (1..=3)
            .map(|n| {
                let (url, out, mut stop) = (db.url.clone(), out.clone(), stop.clone());
                runtime.spawn(async move {
                    let mut builder = Scheduler::builder(url).instance_id(format!("library-{n}"));
                    for job in library_jobs(&out) {
                        builder = builder.job(job);
                    }
                    let scheduler = builder.build().await?;
                    scheduler
                        .run_until(async move {
                            let _ = stop.wait_for(|s| *s).await;
                        })
                        .await
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        let window_start = second(Utc::now()) + TimeDelta::seconds(1);
        std::thread::sleep(Duration::from_secs(3));
        let mut daemon = Replica::start(&config, "daemon", None, &[]);
        daemon.wait_for_log("replicron started", Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(6));
        let _ = stop_tx.send(true);
        for library in libraries {
            runtime
                .block_on(library)
                .expect("joined")
                .expect("a library scheduler runs and stops cleanly");
        }
        std::thread::sleep(Duration::from_secs(3));
        let window_end = second(Utc::now()) - TimeDelta::seconds(1);
        // A replica running late on a loaded host claims the window's
        // last instants before it drains.
        std::thread::sleep(Duration::from_secs(2));
        daemon.signal(Signal::SIGTERM);
        let status = daemon.wait_exit(Duration::from_secs(30)).expect("exits");
        assert!(status.success(), "{status:?}\n{}", daemon.log_text());

        let lines: Vec<Line> = read_lines(&out)
            .into_iter()
            .filter(|l| l.instant >= window_start && l.instant <= window_end)
            .collect();
        let expected = assert_each_instant_once(&lines, JOBS, window_start, window_end);
        let mut by_instance: BTreeMap<&str, usize> = BTreeMap::new();
        for line in &lines {
            *by_instance.entry(line.instance.as_str()).or_default() += 1;
        }
        eprintln!(
            "{:?}: {expected} instants, each once; runs per replica {by_instance:?}",
            db.kind
        );
        assert!(
            by_instance.contains_key("daemon")
                && by_instance.keys().any(|who| who.starts_with("library")),
            "the daemon and the library replicas did not both run: {by_instance:?}"
        );
        for job in 0..JOBS {
            let job = format!("job-{job:02}");
            let rows = history_json(&config, &job);
            let ran = read_lines(&out).iter().filter(|l| l.job == job).count();
            assert_eq!(rows.len(), ran, "one history row per run of {job}");
            assert!(rows.iter().all(|r| r["status"] == "succeeded"), "{rows:?}");
        }
    }
}

/// One job scheduled in this process by an embedded scheduler (instance
/// `embedded`), on a runtime of its own.
struct Embedded {
    runtime: tokio::runtime::Runtime,
    stop: watch::Sender<bool>,
    scheduler: tokio::task::JoinHandle<Result<(), replicron::Error>>,
}

impl Embedded {
    fn start(url: String, job: Job) -> Embedded {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (stop_tx, mut stop) = watch::channel(false);
        let scheduler = runtime.spawn(async move {
            let scheduler = Scheduler::builder(url)
                .instance_id("embedded")
                .job(job)
                .build()
                .await?;
            scheduler
                .run_until(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        });
        Embedded {
            runtime,
            stop: stop_tx,
            scheduler,
        }
    }

    /// The first value `watch` takes, within `within`.
    fn first<T: Clone>(
        &self,
        watch: &mut watch::Receiver<Option<T>>,
        within: Duration,
        what: &str,
    ) -> T {
        self.runtime.block_on(async {
            tokio::time::timeout(within, watch.wait_for(Option::is_some))
                .await
                .unwrap_or_else(|_| panic!("{what}: not within {within:?}"))
                .expect("watch")
                .clone()
                .expect("some")
        })
    }

    /// Stops the scheduler; it must stop cleanly.
    fn stop(self) {
        self.stop.send_replace(true);
        self.runtime
            .block_on(self.scheduler)
            .expect("joined")
            .expect("the scheduler ran and stopped cleanly");
    }
}

/// Run `id` among `rows` (`history --format json`).
fn run_row(rows: &[serde_json::Value], id: i64) -> &serde_json::Value {
    rows.iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no row {id}: {rows:?}"))
}

/// An async job is running when the database becomes unreachable (a proxy
/// between the scheduler and the server cuts every connection). Its lease
/// of 4 s cannot be confirmed: the run's cancellation fires two thirds of
/// a lease after it was claimed, well before the lease ends, and once the
/// database is back the run is recorded `lost_lock`, with the job's error
/// as output.
fn cancelled_when_the_lease_is_lost(kind: Kind) {
    let db = TestDb::new(kind);
    db.migrate();
    let proxy = Proxy::start(db.server());
    let url = db.url_via(proxy.port);
    let lease = Duration::from_secs(4);
    let (started_tx, mut started) = watch::channel(None::<(DateTime<Utc>, i64)>);
    let (cancelled_tx, mut cancelled) = watch::channel(None::<DateTime<Utc>>);
    let (started_tx, cancelled_tx) = (Arc::new(started_tx), Arc::new(cancelled_tx));
    let job = Job::new("long", "* * * * * *")
        .expect("a valid job")
        .lock_at_most_for(lease)
        .run(move |ctx| {
            let (started_tx, cancelled_tx) = (started_tx.clone(), cancelled_tx.clone());
            async move {
                // Only the first run waits; the others end at once.
                if started_tx.borrow().is_some() {
                    return Ok(());
                }
                started_tx.send_replace(Some((ctx.instant(), ctx.run_id())));
                ctx.cancelled().await;
                cancelled_tx.send_replace(Some(Utc::now()));
                Err("stopped: the lease was lost")
            }
        });
    let embedded = Embedded::start(url, job);
    let (instant, run_id) =
        embedded.first(&mut started, Duration::from_secs(20), "the job started");
    std::thread::sleep(Duration::from_millis(300));
    let cut_at = Utc::now();
    proxy.cut();
    let cancelled_at = embedded.first(&mut cancelled, lease * 2, "the run was cancelled");
    let after_cut = (cancelled_at - cut_at).as_seconds_f64();
    let lease_ends = instant + TimeDelta::from_std(lease).expect("lease");
    eprintln!(
        "{kind:?}: cut {:.1} s into the run; cancelled {after_cut:.2} s after the cut, {:.2} s before the lease ended",
        (cut_at - instant).as_seconds_f64(),
        (lease_ends - cancelled_at).as_seconds_f64()
    );
    // Given up two thirds of a lease after its last confirmation (the
    // claim), so that the run can end before the lease does: within five
    // sixths of it.
    let stopped_by = instant + TimeDelta::from_std(lease * 5 / 6).expect("lease");
    assert!(
        cancelled_at < stopped_by,
        "cancelled at {cancelled_at}, after {stopped_by} (the lease ends at {lease_ends})"
    );
    std::thread::sleep(Duration::from_secs(1));
    proxy.restore();
    std::thread::sleep(Duration::from_secs(3));
    embedded.stop();
    let config = db.config("");
    let rows = history_json(&config, "long");
    let row = run_row(&rows, run_id);
    assert_eq!(row["status"], "lost_lock", "{row}");
    assert!(
        row["output"]
            .as_str()
            .is_some_and(|o| o.contains("the lease was lost")),
        "{row}"
    );
    assert!(
        rows.iter()
            .any(|r| r["status"] == "succeeded" && r["id"].as_i64() > Some(run_id)),
        "the job ran again once the database was back: {rows:?}"
    );
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn an_async_job_is_cancelled_when_its_lease_is_lost_mysql() {
    cancelled_when_the_lease_is_lost(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn an_async_job_is_cancelled_when_its_lease_is_lost_postgres() {
    cancelled_when_the_lease_is_lost(Kind::Postgres);
}

/// Whether `job`'s lease is held at the database's now, and its fence.
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn lease_of(db: &TestDb, job: &str) -> (bool, i64) {
    use crate::databases::RawConnection;
    use diesel::RunQueryDsl;

    #[derive(diesel::QueryableByName)]
    struct Lease {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        held: i32,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        fence: i64,
    }
    let now = match db.kind {
        Kind::Mysql => "UTC_TIMESTAMP(3)",
        _ => "(clock_timestamp() AT TIME ZONE 'UTC')",
    };
    let query = diesel::sql_query(format!(
        "SELECT CASE WHEN lock_until > {now} THEN 1 ELSE 0 END AS held, fence \
         FROM replicron_locks WHERE name = '{job}'"
    ));
    let lease: Lease = match db.raw() {
        #[cfg(feature = "mysql")]
        RawConnection::Mysql(mut conn) => query.get_result(&mut conn),
        #[cfg(feature = "postgres")]
        RawConnection::Postgres(mut conn) => query.get_result(&mut conn),
        #[cfg(feature = "sqlite")]
        RawConnection::Sqlite(_) => panic!("a server backend only"),
    }
    .expect("the lease row");
    (lease.held == 1, lease.fence)
}

/// A run's lease is released only once its end is in the history. A
/// transaction of the test holds the run's row locked while the run ends:
/// its lease stays held for as long, so no later claim can find the run
/// `running` under an older fence and mark it `abandoned` (and tell) though
/// it ended in good order. Then the row is let go: the run is recorded
/// `succeeded`, and nothing is marked abandoned.
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn released_after_its_end_is_recorded(kind: Kind) {
    use diesel::connection::SimpleConnection;

    let db = TestDb::new(kind);
    db.migrate();
    let (started_tx, mut started) = watch::channel(None::<i64>);
    let (end_tx, end) = watch::channel(false);
    let started_tx = Arc::new(started_tx);
    let job = Job::new("quick", "* * * * * *")
        .expect("a valid job")
        .run(move |ctx| {
            let (started_tx, mut end) = (started_tx.clone(), end.clone());
            async move {
                // Only the first run waits for the test; the others end at once.
                if started_tx.borrow().is_none() {
                    started_tx.send_replace(Some(ctx.run_id()));
                    let _ = end.wait_for(|e| *e).await;
                }
                Ok::<(), String>(())
            }
        });
    let embedded = Embedded::start(db.url.clone(), job);
    let run_id = embedded.first(&mut started, Duration::from_secs(20), "the job started");
    let (held, fence) = lease_of(&db, "quick");
    assert!(held, "the run's lease is held while it runs");

    let mut locker = db.raw();
    locker
        .batch_execute(&format!(
            "BEGIN; SELECT id FROM replicron_runs WHERE id = {run_id} FOR UPDATE"
        ))
        .expect("lock the run's row");
    end_tx.send_replace(true);
    // Long enough for the run to end and, were it released, for the next
    // instants to be claimed.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        lease_of(&db, "quick"),
        (true, fence),
        "the lease was released (or claimed again) before the run's end was recorded"
    );
    locker.batch_execute("COMMIT").expect("let the row go");
    std::thread::sleep(Duration::from_secs(3));
    embedded.stop();

    let config = db.config("");
    let rows = history_json(&config, "quick");
    let first = run_row(&rows, run_id);
    assert_eq!(first["status"], "succeeded", "{first}");
    assert!(rows.iter().all(|r| r["status"] == "succeeded"), "{rows:?}");
    assert!(
        rows.iter().any(|r| r["id"].as_i64() > Some(run_id)),
        "the job ran again once its end was recorded: {rows:?}"
    );
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn a_runs_lease_is_released_after_its_end_is_recorded_mysql() {
    released_after_its_end_is_recorded(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn a_runs_lease_is_released_after_its_end_is_recorded_postgres() {
    released_after_its_end_is_recorded(Kind::Postgres);
}
