//! `replicron run` as real processes: each scheduled instant runs exactly
//! once across replicas, through clock skew and `kill -9`; runs are timed
//! out, bounded in memory, and stopped cleanly at shutdown. Every scenario
//! runs on each backend (on SQLite the replicas share one file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use nix::sys::signal::Signal;

use crate::support::{Kind, Replica, TestDb, backend_test, history_json, process_alive};

/// A job line: `job instant instance start-epoch-ns`.
const RECORD: &str =
    r#"echo "$REPLICRON_JOB $REPLICRON_SCHEDULED_AT $REPLICRON_INSTANCE $(date +%s%N)" >> "$OUT""#;

struct Line {
    job: String,
    instant: DateTime<Utc>,
    instance: String,
    started_ns: i64,
}

fn read_lines(path: &Path) -> Vec<Line> {
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

fn second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::seconds(1)).expect("truncate")
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// 3 replicas, 20 jobs firing every second, 20 s. Checks every instant of
/// the window ran exactly once, and none twice anywhere. (Replicas whose
/// clocks are skewed: `database_time`.)
fn exactly_once(kind: Kind) {
    let db = TestDb::new(kind);
    let out = db.dir().join("runs.txt");
    let mut jobs = String::new();
    for n in 0..20 {
        jobs.push_str(&format!(
            "[[job]]\nname = \"job-{n:02}\"\nschedule = \"* * * * * *\"\ncommand = '{RECORD}'\nenv = {{ OUT = {out:?} }}\n\n"
        ));
    }
    let config = db.config(&jobs);

    let replicas: Vec<Replica> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| Replica::start(&config, id, None, &[]))
        .collect();
    for replica in &replicas {
        replica.wait_for_log("replicron started", Duration::from_secs(20));
    }
    let window_start = second(Utc::now()) + TimeDelta::seconds(2);
    std::thread::sleep(Duration::from_secs(20));
    // Seconds before the stop: a replica running late on a loaded host
    // has claimed the window's last instants before it drains.
    let window_end = second(Utc::now()) - TimeDelta::seconds(4);
    for replica in &replicas {
        replica.signal(Signal::SIGTERM);
    }
    let mut problems = String::new();
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
        for line in replica
            .log_text()
            .lines()
            .filter(|l| l.contains("\"WARN\"") || l.contains("\"ERROR\""))
        {
            problems.push_str(&format!("{}: {line}\n", replica.id));
        }
    }
    if !problems.is_empty() {
        eprintln!("warnings and errors of the replicas:\n{problems}");
    }

    let lines = read_lines(&out);
    let mut count: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    let mut by_instance: BTreeMap<String, usize> = BTreeMap::new();
    for line in &lines {
        *count.entry((line.job.clone(), line.instant)).or_default() += 1;
        *by_instance.entry(line.instance.clone()).or_default() += 1;
    }
    let duplicates: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "instants run more than once: {duplicates:?}"
    );
    let mut missed = Vec::new();
    let mut expected = 0;
    for n in 0..20 {
        let job = format!("job-{n:02}");
        let mut t = window_start;
        while t <= window_end {
            expected += 1;
            if !count.contains_key(&(job.clone(), t)) {
                missed.push((job.clone(), t));
            }
            t += TimeDelta::seconds(1);
        }
    }
    assert!(missed.is_empty(), "instants never run: {missed:?}");
    assert!(expected >= 20 * 11, "window too small: {expected}");

    // Lateness of job starts against their instants.
    assert!(
        by_instance.len() > 1,
        "every run on one replica: {by_instance:?}"
    );
    let mut late: Vec<f64> = lines
        .iter()
        .map(|l| (l.started_ns - l.instant.timestamp_nanos_opt().unwrap_or(0)) as f64 / 1e6)
        .collect();
    late.sort_by(f64::total_cmp);
    eprintln!(
        "{kind:?}: {} runs in the window of {expected} instants, 0 duplicates, 0 missed; \
         start lateness median {:.1} ms, p99 {:.1} ms, max {:.1} ms; runs per replica {by_instance:?}",
        lines.len(),
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        percentile(&late, 1.0)
    );
    // History agrees: one row per run, all succeeded.
    let rows = history_json(&config, "job-00");
    let in_file = lines.iter().filter(|l| l.job == "job-00").count();
    assert_eq!(rows.len(), in_file);
    assert!(rows.iter().all(|r| r["status"] == "succeeded"), "{rows:?}");
}

#[test]
fn three_replicas_run_each_instant_exactly_once_sqlite() {
    exactly_once(Kind::Sqlite);
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn three_replicas_run_each_instant_exactly_once_mysql() {
    exactly_once(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn three_replicas_run_each_instant_exactly_once_postgres() {
    exactly_once(Kind::Postgres);
}

/// `kill -9` of the replica running a long job: its job (and grandchild)
/// die within a second, that instant never runs again, a survivor runs the
/// later instants once the lease has expired, and the old run is marked
/// `abandoned`.
fn kill_the_holder(kind: Kind) {
    let db = TestDb::new(kind);
    let out = db.dir().join("runs.txt");
    let config = db.config(&format!(
        "[[job]]\nname = \"long\"\nschedule = \"*/2 * * * * *\"\nlock_at_most_for = \"3s\"\n\
         command = 'sleep 29 & echo \"$REPLICRON_SCHEDULED_AT $REPLICRON_INSTANCE $$ $!\" >> \"$OUT\"; wait'\n\
         env = {{ OUT = {out:?} }}\n"
    ));
    let mut replicas: Vec<Replica> = ["a", "b"]
        .iter()
        .map(|id| Replica::start(&config, id, None, &[]))
        .collect();
    let first = wait_for_lines(&out, 1, Duration::from_secs(15)).remove(0);
    let (instant, holder, shell_pid, sleep_pid) = first;
    let index = replicas
        .iter()
        .position(|r| r.id == holder)
        .expect("holder is a replica");
    let victim = replicas.remove(index);
    // Let its lease be confirmed (every second) before the holder dies.
    std::thread::sleep(Duration::from_millis(2500));
    let killed_at = Instant::now();
    victim.signal(Signal::SIGKILL);
    while process_alive(shell_pid) || process_alive(sleep_pid) {
        assert!(
            killed_at.elapsed() < Duration::from_secs(1),
            "the killed replica's job outlived it by a second"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let gone_after = killed_at.elapsed();
    drop(victim);

    let lines = wait_for_lines(&out, 2, Duration::from_secs(15));
    let (next_instant, survivor, _, _) = &lines[1];
    assert_ne!(survivor, &holder);
    assert!(
        *next_instant > instant,
        "{next_instant} is not after {instant}"
    );
    // The lease (3 s) had to expire first: the survivor could not start
    // the instant right after the killed one.
    let instants: Vec<_> = lines.iter().map(|l| l.0.clone()).collect();
    assert_eq!(
        instants.iter().filter(|i| **i == instant).count(),
        1,
        "{instants:?}"
    );

    let rows = history_json(&config, "long");
    let old = rows
        .iter()
        .find(|r| r["scheduled_at"] == instant)
        .unwrap_or_else(|| panic!("no history row for {instant}: {rows:?}"));
    assert_eq!(old["status"], "abandoned", "{rows:?}");
    assert_eq!(old["instance"], holder.as_str());
    // When it ended is not known: not invented, but bounded below by the
    // holder's last confirmation of its lease.
    assert!(old["finished_at"].is_null(), "{old}");
    let time = |key: &str| {
        DateTime::parse_from_rfc3339(old[key].as_str().unwrap_or_else(|| panic!("{key}: {old}")))
            .expect("rfc3339")
    };
    let confirmed_after = time("confirmed_at") - time("started_at");
    assert!(
        confirmed_after >= TimeDelta::seconds(1) && confirmed_after < TimeDelta::seconds(4),
        "{old}"
    );
    let table = crate::support::replicron(&[
        "history",
        "--config",
        config.to_str().expect("utf-8"),
        "--job",
        "long",
    ]);
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table
            .lines()
            .any(|l| l.contains("abandoned") && l.contains("unknown (≥")),
        "{table}"
    );
    eprintln!(
        "{kind:?}: the killed replica's job was gone {gone_after:?} after kill -9; {survivor} ran {next_instant} next"
    );
}

fn wait_for_lines(path: &Path, n: usize, timeout: Duration) -> Vec<(String, String, i32, i32)> {
    let deadline = Instant::now() + timeout;
    loop {
        let lines: Vec<(String, String, i32, i32)> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 4).then(|| {
                    (
                        f[0].to_string(),
                        f[1].to_string(),
                        f[2].parse().unwrap_or(0),
                        f[3].parse().unwrap_or(0),
                    )
                })
            })
            .collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "only {} lines in {path:?} after {timeout:?}",
            lines.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_of_the_holder_sqlite() {
    kill_the_holder(Kind::Sqlite);
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn kill_9_of_the_holder_mysql() {
    kill_the_holder(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn kill_9_of_the_holder_postgres() {
    kill_the_holder(Kind::Postgres);
}

/// Runs `body` with one replica of `jobs` on `db`.
fn with_one_replica(db: &TestDb, jobs: &str, body: impl Fn(&TestDb, &Path, &mut Replica)) {
    {
        let config = db.config(&jobs.replace("$DIR", &db.dir().display().to_string()));
        let mut replica = Replica::start(
            &config,
            "solo",
            None,
            &[("RUST_LOG", "info,replicron::job=warn")],
        );
        replica.wait_for_log("replicron started", Duration::from_secs(20));
        body(db, &config, &mut replica);
    }
}

fn wait_for_status(config: &Path, job: &str, timeout: Duration) -> serde_json::Value {
    let deadline = Instant::now() + timeout;
    loop {
        let rows = history_json(config, job);
        if let Some(done) = rows.iter().rev().find(|r| r["status"] != "running") {
            return done.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no finished run of {job} after {timeout:?}: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

backend_test! {
    fn a_timeout_kills_the_job_and_its_grandchild(db: &TestDb) {
        with_one_replica(
            db,
            "[[job]]\nname = \"slow\"\nschedule = \"*/2 * * * * *\"\ntimeout = \"1s\"\nkill_grace = \"1s\"\n\
             command = 'sh -c \"echo \\$\\$ > $DIR/child.pid; sleep 100 & echo \\$! > $DIR/grandchild.pid; sleep 100\"'\n",
            |db, config, _replica| {
                let row = wait_for_status(config, "slow", Duration::from_secs(10));
                assert_eq!(row["status"], "timed_out", "{row}");
                assert_eq!(row["exit_code"], serde_json::Value::Null);
                for file in ["child.pid", "grandchild.pid"] {
                    let pid: i32 = std::fs::read_to_string(db.dir().join(file))
                        .expect("pid file")
                        .trim()
                        .parse()
                        .expect("pid");
                    assert!(!process_alive(pid), "{file} {pid} survived the timeout");
                }
            },
        );
    }
}

backend_test! {
    fn two_hundred_megabytes_of_output_keep_memory_bounded(db: &TestDb) {
        with_one_replica(
            db,
            "[[job]]\nname = \"chatty\"\nschedule = \"*/2 * * * * *\"\noutput_limit = \"64KiB\"\n\
             command = 'yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456 | head -c 200000000; printf THE-END'\n",
            |_db, config, replica| {
                let mut peak_kib = 0_u64;
                // The memory is sampled every 20 ms; the history, read by a
                // process of its own, every half second.
                let deadline = Instant::now() + Duration::from_secs(120);
                let mut read_history = Instant::now();
                let row = loop {
                    if let Ok(status) =
                        std::fs::read_to_string(format!("/proc/{}/status", replica.pid()))
                    {
                        let rss = status
                            .lines()
                            .find(|l| l.starts_with("VmRSS:"))
                            .and_then(|l| l.split_whitespace().nth(1))
                            .and_then(|v| v.parse::<u64>().ok())
                            .unwrap_or(0);
                        peak_kib = peak_kib.max(rss);
                    }
                    if read_history.elapsed() >= Duration::from_millis(500) {
                        read_history = Instant::now();
                        let rows = history_json(config, "chatty");
                        if let Some(done) = rows.iter().rev().find(|r| r["status"] != "running") {
                            break done.clone();
                        }
                    }
                    assert!(Instant::now() < deadline, "the chatty run did not finish");
                    std::thread::sleep(Duration::from_millis(20));
                };
                assert_eq!(row["status"], "succeeded", "{row}");
                let output = row["output"].as_str().expect("output");
                assert_eq!(output.len(), 64 * 1024);
                // Exactly the last 64 KiB of what the job printed.
                let line = b"0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456\n";
                let total = 200_000_000_usize;
                let start = total + "THE-END".len() - 64 * 1024;
                let mut expected: Vec<u8> = (start..total).map(|i| line[i % line.len()]).collect();
                expected.extend_from_slice(b"THE-END");
                assert!(
                    output.as_bytes() == expected.as_slice(),
                    "{}",
                    &output[output.len() - 40..]
                );
                assert!(peak_kib < 50 * 1024, "daemon RSS peaked at {peak_kib} KiB");
                eprintln!("daemon RSS peak while a job printed 200 MB: {peak_kib} KiB");
            },
        );
    }
}

backend_test! {
    fn sigterm_lets_a_run_finish_within_the_grace(db: &TestDb) {
        with_one_replica(
            db,
            "[daemon]\nshutdown_grace = \"10s\"\n\n[[job]]\nname = \"finisher\"\nschedule = \"*/2 * * * * *\"\n\
             command = 'touch $DIR/started; sleep 2; echo done'\n",
            |db, config, replica| {
                let started = db.dir().join("started");
                let deadline = Instant::now() + Duration::from_secs(10);
                while !started.exists() {
                    assert!(Instant::now() < deadline, "the job never started");
                    std::thread::sleep(Duration::from_millis(10));
                }
                replica.signal(Signal::SIGTERM);
                let status = replica.wait_exit(Duration::from_secs(10)).expect("exits");
                assert!(status.success(), "{status:?}\n{}", replica.log_text());
                let rows = history_json(config, "finisher");
                assert_eq!(rows.len(), 1, "no new run after SIGTERM: {rows:?}");
                assert_eq!(rows[0]["status"], "succeeded");
                assert_eq!(rows[0]["output"], "done\n");
            },
        );
    }
}

backend_test! {
    fn sigterm_past_the_grace_records_killed(db: &TestDb) {
        with_one_replica(
            db,
            "[daemon]\nshutdown_grace = \"1s\"\n\n[[job]]\nname = \"stubborn\"\nschedule = \"*/2 * * * * *\"\n\
             kill_grace = \"1s\"\ncommand = 'touch $DIR/started; trap \"\" TERM; sleep 30'\n",
            |db, config, replica| {
                let started = db.dir().join("started");
                let deadline = Instant::now() + Duration::from_secs(10);
                while !started.exists() {
                    assert!(Instant::now() < deadline, "the job never started");
                    std::thread::sleep(Duration::from_millis(10));
                }
                let sent = Instant::now();
                replica.signal(Signal::SIGTERM);
                let status = replica.wait_exit(Duration::from_secs(15)).expect("exits");
                assert!(status.success(), "{status:?}\n{}", replica.log_text());
                let took = sent.elapsed();
                assert!(took < Duration::from_secs(8), "shutdown took {took:?}");
                let rows = history_json(config, "stubborn");
                assert_eq!(rows.len(), 1, "{rows:?}");
                assert_eq!(rows[0]["status"], "killed");
                assert!(rows[0]["finished_at"].is_string());
            },
        );
    }
}

backend_test! {
    /// `overlap = "queue"`, a body of 5 s due every 2 s, and SIGTERM as an
    /// instant waits for the run before it: the run goes on to its end
    /// and is recorded `succeeded`; the waiting instant, which no other
    /// replica can run, is recorded `skipped`, saying why; no row is left
    /// `running` and replicron exits 0.
    fn sigterm_lets_the_run_a_queued_instant_waits_for_finish(db: &TestDb) {
        with_one_replica(
            db,
            "[[job]]\nname = \"q\"\nschedule = \"*/2 * * * * *\"\noverlap = \"queue\"\n\
             command = 'echo \"start $REPLICRON_SCHEDULED_AT\" >> $DIR/out; sleep 5; echo \"end $REPLICRON_SCHEDULED_AT\" >> $DIR/out'\n",
            |db, config, replica| {
                replica.wait_for_log(
                    "queued: the instant waits for the running run to end",
                    Duration::from_secs(20),
                );
                replica.signal(Signal::SIGTERM);
                let status = replica.wait_exit(Duration::from_secs(30)).expect("exits");
                assert!(status.success(), "{status:?}\n{}", replica.log_text());
                let out = std::fs::read_to_string(db.dir().join("out")).expect("out");
                let mut rows = history_json(config, "q");
                rows.sort_by_key(|r| r["scheduled_at"].as_str().unwrap_or_default().to_string());
                let lines: Vec<&str> = out.lines().collect();
                assert_eq!(lines.len(), 2, "{out}{rows:?}");
                let ran = lines[0].strip_prefix("start ").expect("a start");
                assert_eq!(lines[1], format!("end {ran}"), "{out}");
                let statuses: Vec<(&str, &str)> = rows
                    .iter()
                    .map(|r| (r["scheduled_at"].as_str().unwrap_or("?"), r["status"].as_str().unwrap_or("?")))
                    .collect();
                assert_eq!(statuses.len(), 2, "{rows:?}");
                assert_eq!(statuses[0].1, "succeeded", "{rows:?}");
                assert_eq!(statuses[1].1, "skipped", "{rows:?}");
                assert!(statuses[0].0 < statuses[1].0, "{rows:?}");
                assert_eq!(
                    rows[1]["output"],
                    "replicron: not run: replicron stopped while the instant waited for the job's run, \
                     and no other replica claimed it\n",
                    "{rows:?}"
                );
            },
        );
    }
}

backend_test! {
    /// A job whose process is killed by SIGKILL, as the kernel's OOM killer
    /// kills one: each run is recorded `failed`, with no exit code and the
    /// signal named in its output, and the daemon goes on to run the next
    /// instants.
    fn a_job_killed_by_sigkill_is_recorded_failed_and_the_daemon_goes_on(db: &TestDb) {
        with_one_replica(
            db,
            "[[job]]\nname = \"hog\"\nschedule = \"* * * * * *\"\n\
             command = 'echo \"allocating at $REPLICRON_SCHEDULED_AT\"; kill -9 $$'\n",
            |_db, config, replica| {
                let deadline = Instant::now() + Duration::from_secs(20);
                let rows = loop {
                    let rows: Vec<serde_json::Value> = history_json(config, "hog")
                        .into_iter()
                        .filter(|r| r["status"] != "running")
                        .collect();
                    if rows.len() >= 3 {
                        break rows;
                    }
                    assert!(Instant::now() < deadline, "three runs did not end: {rows:?}");
                    std::thread::sleep(Duration::from_millis(100));
                };
                for row in &rows {
                    assert_eq!(row["status"], "failed", "{row}");
                    assert_eq!(row["exit_code"], serde_json::Value::Null, "{row}");
                    let output = row["output"].as_str().expect("output");
                    assert!(output.starts_with("allocating at "), "{output:?}");
                    assert!(
                        output.ends_with("\nreplicron: the process was killed by SIGKILL (9)\n"),
                        "{output:?}"
                    );
                }
                assert!(process_alive(replica.pid()), "{}", replica.log_text());
            },
        );
    }
}

backend_test! {
    fn runs_get_their_environment_and_working_dir(db: &TestDb) {
        with_one_replica(
            db,
            "[[job]]\nname = \"env-check\"\nschedule = \"* * * * * *\"\nworking_dir = \"/tmp\"\nenv = { GREETING = \"hi\" }\n\
             args = [\"/bin/sh\", \"-c\", \"echo $GREETING $PWD $REPLICRON_JOB $REPLICRON_ATTEMPT $REPLICRON_RUN_ID $REPLICRON_FENCE $REPLICRON_INSTANCE $REPLICRON_SCHEDULED_AT\"]\n",
            |_db, config, _replica| {
                let row = wait_for_status(config, "env-check", Duration::from_secs(10));
                let words: Vec<String> = row["output"]
                    .as_str()
                    .expect("output")
                    .split_whitespace()
                    .map(String::from)
                    .collect();
                assert_eq!(words.len(), 8, "{row}");
                assert_eq!(&words[..4], ["hi", "/tmp", "env-check", "1"]);
                assert_eq!(words[4], row["id"].to_string());
                assert_eq!(words[5], row["fence"].to_string());
                assert_eq!(words[6], "solo");
                assert_eq!(words[7], row["scheduled_at"].as_str().expect("instant"));
                let set: BTreeSet<&str> = ["solo"].into();
                assert!(set.contains(row["instance"].as_str().expect("instance")));
            },
        );
    }
}

/// A job does not see replicron's own settings: the database URL (and its
/// password), the config's path and every override, from the environment
/// of the daemon, unless the job sets one in its own `env`.
#[test]
fn jobs_do_not_inherit_replicrons_settings() {
    let db = TestDb::new(Kind::Sqlite);
    let config = db.config(
        "[[job]]\nname = \"dump\"\nschedule = \"* * * * * *\"\ncommand = 'env'\noutput_limit = \"1MiB\"\n\n\
         [[job]]\nname = \"own\"\nschedule = \"* * * * * *\"\nenv = { REPLICRON_POOL_SIZE = \"mine\" }\n\
         command = 'echo \"pool=$REPLICRON_POOL_SIZE url=${REPLICRON_DATABASE_URL:-unset}\"'\n",
    );
    let secret_url = format!("{}?password=Sup3rS3cret", db.url);
    let mut replica = Replica::start(
        &config,
        "scrubbed",
        None,
        &[
            ("REPLICRON_DATABASE_URL", secret_url.as_str()),
            ("REPLICRON_CONFIG", config.to_str().expect("utf-8")),
            ("REPLICRON_POOL_SIZE", "3"),
            ("REPLICRON_SHUTDOWN_GRACE", "5s"),
            ("REPLICRON_HISTORY_RETENTION", "7d"),
            ("SOMETHING_ELSE", "kept"),
        ],
    );
    replica.wait_for_log("replicron started", Duration::from_secs(20));
    let dump = wait_for_status(&config, "dump", Duration::from_secs(10));
    let own = wait_for_status(&config, "own", Duration::from_secs(10));
    replica.signal(Signal::SIGTERM);
    let _ = replica.wait_exit(Duration::from_secs(20));
    let env = dump["output"].as_str().expect("output");
    assert!(env.contains("SOMETHING_ELSE=kept"), "{env}");
    assert!(env.contains("REPLICRON_JOB=dump"), "{env}");
    for hidden in [
        "REPLICRON_DATABASE_URL",
        "REPLICRON_CONFIG",
        "REPLICRON_POOL_SIZE",
        "REPLICRON_SHUTDOWN_GRACE",
        "REPLICRON_HISTORY_RETENTION",
        "Sup3rS3cret",
    ] {
        assert!(!env.contains(hidden), "the job saw {hidden}:\n{env}");
    }
    assert_eq!(own["output"], "pool=mine url=unset\n");
}
