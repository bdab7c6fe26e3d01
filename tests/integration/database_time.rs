//! Time on real databases: replicas whose clocks are skewed fire at the
//! database's instant (never before it), a database that stalls delays
//! instants without losing them, and a session time zone changes nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use nix::sys::signal::Signal;

use crate::support::{Kind, Replica, TestDb, history_json};

/// A job line: `job instant instance start-ns`, the start read by a `date`
/// that no skew reaches (libfaketime is taken out of its environment).
pub(crate) const RECORD_UNSKEWED: &str = r#"echo "$REPLICRON_JOB $REPLICRON_SCHEDULED_AT $REPLICRON_INSTANCE $(env -u LD_PRELOAD -u FAKETIME date +%s%N)" >> "$OUT""#;

/// One run as the job recorded it.
pub(crate) struct Line {
    pub job: String,
    pub instant: DateTime<Utc>,
    pub instance: String,
    pub started_ns: i64,
}

impl Line {
    /// How long after its instant the run started, in ms (negative: early).
    pub(crate) fn late_ms(&self) -> f64 {
        (self.started_ns - self.instant.timestamp_nanos_opt().unwrap_or(0)) as f64 / 1e6
    }
}

/// The runs a job file of `RECORD_UNSKEWED` lines holds.
pub(crate) fn read_lines(path: &Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.len(), 4, "malformed line {line:?}");
            Line {
                job: f[0].to_string(),
                instant: DateTime::parse_from_rfc3339(f[1])
                    .expect("instant")
                    .with_timezone(&Utc),
                instance: f[2].to_string(),
                started_ns: f[3].parse().expect("start time"),
            }
        })
        .collect()
}

/// `jobs` per-second jobs named `job-NN` recording into `out`.
pub(crate) fn per_second_jobs(jobs: usize, out: &Path) -> String {
    (0..jobs)
        .map(|n| {
            format!(
                "[[job]]\nname = \"job-{n:02}\"\nschedule = \"* * * * * *\"\ncommand = '{RECORD_UNSKEWED}'\nenv = {{ OUT = {out:?} }}\n\n"
            )
        })
        .collect()
}

pub(crate) fn second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::seconds(1)).expect("truncate")
}

pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Every instant of `jobs` per-second jobs in `[from, to]` ran exactly once.
pub(crate) fn assert_each_instant_once(
    lines: &[Line],
    jobs: usize,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> usize {
    let mut count: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    for line in lines {
        *count.entry((line.job.clone(), line.instant)).or_default() += 1;
    }
    let duplicates: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "instants run more than once: {duplicates:?}"
    );
    let mut missed = Vec::new();
    let mut expected = 0;
    for n in 0..jobs {
        let job = format!("job-{n:02}");
        let mut t = from;
        while t <= to {
            expected += 1;
            if !count.contains_key(&(job.clone(), t)) {
                missed.push((job.clone(), t));
            }
            t += TimeDelta::seconds(1);
        }
    }
    assert!(missed.is_empty(), "instants never run: {missed:?}");
    expected
}

/// Three replicas whose clocks are +0 s, +3 s and −3 s off, 10 per-second
/// jobs for 20 s: every instant runs once, and none starts before its
/// instant by the database's clock, as the job itself measures it with a
/// clock no skew reaches. A few milliseconds are allowed for measuring.
fn skewed_replicas(kind: Kind) {
    if crate::support::libfaketime().is_none() {
        eprintln!("skipped: libfaketime is not installed");
        return;
    }
    let db = TestDb::new(kind);
    let out = db.dir().join("runs.txt");
    let config = db.config(&per_second_jobs(10, &out));
    let replicas: Vec<Replica> = [
        ("zero", None),
        ("ahead", Some("+3s")),
        ("behind", Some("-3s")),
    ]
    .iter()
    .map(|(id, skew)| Replica::start(&config, id, *skew, &[]))
    .collect();
    for replica in &replicas {
        replica.wait_for_log("replicron started", Duration::from_secs(20));
    }
    // The window starts late enough that no replica's clock, however
    // wrong, could have claimed an instant in it before the replicas ran.
    let window_start = second(Utc::now()) + TimeDelta::seconds(5);
    std::thread::sleep(Duration::from_secs(23));
    // Seconds before the stop: a replica running late on a loaded host
    // has claimed the window's last instants before it drains.
    let window_end = second(Utc::now()) - TimeDelta::seconds(4);
    for replica in &replicas {
        replica.signal(Signal::SIGTERM);
    }
    for mut replica in replicas {
        let status = replica
            .wait_exit(Duration::from_secs(30))
            .expect("replica exits after SIGTERM");
        assert!(
            status.success(),
            "replica {} exited {status:?}:\n{}",
            replica.id,
            replica.log_text()
        );
    }
    let lines: Vec<Line> = read_lines(&out)
        .into_iter()
        .filter(|l| l.instant >= window_start && l.instant <= window_end)
        .collect();
    let mut wins: BTreeMap<String, usize> = BTreeMap::new();
    for line in &lines {
        *wins.entry(line.instance.clone()).or_default() += 1;
    }
    let mut late: Vec<f64> = lines.iter().map(Line::late_ms).collect();
    late.sort_by(f64::total_cmp);
    let shares: Vec<String> = wins
        .iter()
        .map(|(who, n)| {
            format!(
                "{who} {n} ({:.0} %)",
                100.0 * *n as f64 / lines.len() as f64
            )
        })
        .collect();
    eprintln!(
        "{kind:?}, replicas at +0 s, +3 s, -3 s: {} runs; wins {}; start after the instant by the database's clock: \
         min {:.1} ms, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        lines.len(),
        shares.join(", "),
        percentile(&late, 0.0),
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        percentile(&late, 1.0),
    );
    let expected = assert_each_instant_once(&lines, 10, window_start, window_end);
    assert!(expected >= 10 * 14, "window too small: {expected}");
    if kind == Kind::Sqlite {
        // SQLite's clock is the clock of the process that asks: replicas
        // sharing a file share one host's clock, so a skew between them
        // exists only under libfaketime, and then SQLite's clock has it too.
        eprintln!("SQLite: the database's clock is each replica's own; not-early is not checked");
        return;
    }
    // Firing at the database's instant, a fast host no longer wins every
    // race (before, it won all of them, each about 3 s early).
    let ahead = wins.get("ahead").copied().unwrap_or_default();
    assert!(
        ahead * 10 < lines.len() * 9,
        "the replica 3 s ahead won {ahead} of {} claims",
        lines.len()
    );
    let early: Vec<String> = lines
        .iter()
        .filter(|l| l.late_ms() < -2.0)
        .map(|l| {
            format!(
                "{} {} by {} {:.1} ms early",
                l.job,
                l.instant,
                l.instance,
                -l.late_ms()
            )
        })
        .collect();
    assert!(
        early.is_empty(),
        "runs started before their instant:\n{}",
        early.join("\n")
    );
}

#[test]
#[cfg_attr(replicron_no_faketime, ignore = "needs Debian's faketime")]
fn skewed_replicas_fire_on_the_database_clock_sqlite() {
    skewed_replicas(Kind::Sqlite);
}

#[test]
#[cfg_attr(
    any(replicron_no_mysql_server, replicron_no_faketime),
    ignore = "needs REPLICRON_TEST_MYSQL_URL and Debian's faketime"
)]
fn skewed_replicas_fire_on_the_database_clock_mysql() {
    skewed_replicas(Kind::Mysql);
}

#[test]
#[cfg_attr(
    any(replicron_no_postgres_server, replicron_no_faketime),
    ignore = "needs REPLICRON_TEST_POSTGRES_URL and Debian's faketime"
)]
fn skewed_replicas_fire_on_the_database_clock_postgres() {
    skewed_replicas(Kind::Postgres);
}

/// Holds a lock on `replicron_locks` that every claim needs for `hold`,
/// from another connection: the database stalls, without an error.
fn stall_claims(db: &TestDb, hold: Duration) {
    use diesel::connection::SimpleConnection;
    let mut conn = db.raw();
    let seconds = hold.as_secs_f64();
    match db.kind {
        Kind::Mysql => conn
            .batch_execute(&format!(
                "LOCK TABLES replicron_locks WRITE; DO SLEEP({seconds}); UNLOCK TABLES;"
            ))
            .expect("lock the lease table"),
        Kind::Postgres => conn
            .batch_execute(&format!(
                "BEGIN; LOCK TABLE replicron_locks IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep({seconds}); COMMIT;"
            ))
            .expect("lock the lease table"),
        Kind::Sqlite => unreachable!("a stall needs a server"),
    }
}

/// One replica, 3 per-second jobs; the lease table is locked for 5 s. The
/// claims wait, then every instant of every job runs exactly once, late
/// where it must be; none is skipped as an overrun.
fn stall(kind: Kind) {
    let db = TestDb::new(kind);
    let out = db.dir().join("runs.txt");
    let config = db.config(&per_second_jobs(3, &out));
    let mut replica = Replica::start(&config, "solo", None, &[]);
    replica.wait_for_log("replicron started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(2300));
    let window_start = second(Utc::now()) + TimeDelta::seconds(1);
    let stalled_at = Utc::now();
    stall_claims(&db, Duration::from_secs(5));
    let stall_ended = Utc::now();
    std::thread::sleep(Duration::from_secs(6));
    let window_end = second(Utc::now()) - TimeDelta::seconds(2);
    // A replica running late on a loaded host claims the window's last
    // instants before it drains.
    std::thread::sleep(Duration::from_secs(2));
    replica.signal(Signal::SIGTERM);
    let status = replica.wait_exit(Duration::from_secs(30)).expect("exits");
    assert!(status.success(), "{status:?}\n{}", replica.log_text());
    let log = replica.log_text();
    let lines: Vec<Line> = read_lines(&out)
        .into_iter()
        .filter(|l| l.instant >= window_start && l.instant <= window_end)
        .collect();
    let mut per_second: BTreeMap<DateTime<Utc>, usize> = BTreeMap::new();
    let mut t = window_start;
    while t <= window_end {
        per_second.insert(t, lines.iter().filter(|l| l.instant == t).count());
        t += TimeDelta::seconds(1);
    }
    let counts: Vec<String> = per_second
        .iter()
        .map(|(t, n)| format!("{}:{n}", t.format("%S")))
        .collect();
    let late_max = lines.iter().map(Line::late_ms).fold(0.0, f64::max);
    eprintln!(
        "{kind:?}: stall {}..{}; runs per second (second:runs of 3 jobs) {}; latest start {:.0} ms after its instant",
        stalled_at.format("%S%.3f"),
        stall_ended.format("%S%.3f"),
        counts.join(" "),
        late_max
    );
    let overruns: Vec<&str> = log.lines().filter(|l| l.contains("overrun")).collect();
    assert!(
        overruns.is_empty(),
        "instants skipped as overruns:\n{}",
        overruns.join("\n")
    );
    assert_each_instant_once(&lines, 3, window_start, window_end);
    assert!(
        late_max > 3000.0,
        "the stall delayed nothing: {late_max} ms"
    );
    let rows = history_json(&config, "job-00");
    assert!(rows.iter().all(|r| r["status"] == "succeeded"), "{rows:?}");
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn a_stalled_database_delays_instants_without_losing_them_mysql() {
    stall(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn a_stalled_database_delays_instants_without_losing_them_postgres() {
    stall(Kind::Postgres);
}

/// One replica on a server whose default time zone is not UTC: a
/// per-second job runs each instant once, and the history's times and the
/// lease's end are UTC, within a second of the job's own clock.
fn a_replica_on_a_zoned_server(url: &str, dir: &Path, zone: &str) {
    let out = dir.join("runs.txt");
    let config = dir.join("jobs.toml");
    std::fs::write(
        &config,
        format!("[database]\nurl = {url:?}\n\n{}", per_second_jobs(1, &out)),
    )
    .expect("config");
    let mut replica = Replica::start(&config, "zoned", None, &[]);
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    let window_start = second(Utc::now()) + TimeDelta::seconds(1);
    std::thread::sleep(Duration::from_secs(4));
    let window_end = second(Utc::now()) - TimeDelta::seconds(1);
    let status_at = Utc::now();
    let status = crate::support::replicron(&[
        "status",
        "--config",
        config.to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    replica.signal(Signal::SIGTERM);
    assert!(
        replica
            .wait_exit(Duration::from_secs(30))
            .is_some_and(|s| s.success())
    );
    let lines: Vec<Line> = read_lines(&out)
        .into_iter()
        .filter(|l| l.instant >= window_start && l.instant <= window_end)
        .collect();
    assert_each_instant_once(&lines, 1, window_start, window_end);
    let rows = history_json(&config, "job-00");
    for line in &lines {
        let stamp = line
            .instant
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let row = rows
            .iter()
            .find(|r| r["scheduled_at"] == stamp.as_str())
            .unwrap_or_else(|| panic!("no history row for {stamp}: {rows:?}"));
        let time = |key: &str| {
            DateTime::parse_from_rfc3339(row[key].as_str().expect("time"))
                .expect("rfc3339")
                .with_timezone(&Utc)
        };
        let job_start = DateTime::from_timestamp_nanos(line.started_ns);
        assert!(
            (time("started_at") - job_start).abs() < TimeDelta::seconds(1),
            "started_at {} is not the job's start {job_start} in UTC",
            row["started_at"]
        );
        assert!(time("finished_at") >= time("started_at"), "{row}");
    }
    let until = status["jobs"][0]["lock_until"]
        .as_str()
        .expect("lock_until");
    let until = DateTime::parse_from_rfc3339(until)
        .expect("rfc3339")
        .with_timezone(&Utc);
    // Released (it ended about when `status` read it), or held by a run
    // going then (for the default lock_at_most_for of 10 minutes): either
    // way in UTC, not an hour or more away.
    let near = |t: DateTime<Utc>| (until - t).abs() < TimeDelta::seconds(30);
    assert!(
        near(status_at) || near(status_at + TimeDelta::seconds(600)),
        "the lease ends at {until}, read at {status_at}: not in UTC"
    );
    eprintln!(
        "a server in {zone}: {} instants once each; history and lease times in UTC",
        lines.len()
    );
}

#[test]
#[cfg_attr(
    replicron_no_private_mariadb,
    ignore = "needs Debian's mariadb-server and rsync"
)]
fn a_berlin_session_changes_no_time_mysql() {
    let Some(server) = crate::cluster::Server::start(&[]) else {
        return;
    };
    server.load_time_zones();
    server
        .node
        .execute("SET GLOBAL time_zone = 'Europe/Berlin'; CREATE DATABASE zoned");
    let dir = tempfile::tempdir().expect("temp dir");
    a_replica_on_a_zoned_server(&server.node.url("zoned"), dir.path(), "Europe/Berlin");
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn a_new_york_session_changes_no_time_postgres() {
    let db = TestDb::new(Kind::Postgres);
    let name = db
        .url
        .rsplit('/')
        .next()
        .expect("database name")
        .to_string();
    use diesel::connection::SimpleConnection;
    db.raw()
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET TimeZone = 'America/New_York'"
        ))
        .expect("set the database's time zone");
    a_replica_on_a_zoned_server(&db.url, db.dir(), "America/New_York");
}
