//! Faults, on MariaDB and PostgreSQL, with real replicas connected through
//! proxies that the tests cut: a partitioned holder, a database outage, a
//! frozen holder, and retries. No instant may run twice, no run may overlap
//! another of its job, and no run may go unrecorded.

use std::collections::BTreeMap;
use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Timelike, Utc};
use nix::sys::signal::Signal;

use crate::proxy::Proxy;
use crate::support::{Kind, Replica, TestDb, history_json, wait_until_or};

/// A job that beats every 0.2 s for about `seconds`: `instance instant ns`.
fn heartbeat_job(name: &str, schedule: &str, lease: &str, seconds: u32, out: &Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\nlock_at_most_for = \"{lease}\"\n\
         command = 'for i in $(seq {}); do echo \"$REPLICRON_INSTANCE $REPLICRON_SCHEDULED_AT $(date +%s%N)\" >> \"$OUT\"; sleep 0.2; done'\n\
         env = {{ OUT = {out:?} }}\n\n",
        seconds * 5
    )
}

/// Two replicas, "p" and "q", each reaching the database through a proxy
/// of its own.
fn replicas_through_proxies(db: &TestDb, jobs: &str) -> ([Proxy; 2], Vec<Replica>) {
    let proxies = [Proxy::start(db.server()), Proxy::start(db.server())];
    let replicas = ["p", "q"]
        .iter()
        .zip(&proxies)
        .map(|(id, proxy)| {
            let config = db.config_named(&format!("jobs-{id}.toml"), &db.url_via(proxy.port), jobs);
            Replica::start(&config, id, None, &[])
        })
        .collect();
    (proxies, replicas)
}

/// Heartbeats by run: (instance, instant) → (first ns, last ns).
fn runs_of(out: &Path) -> BTreeMap<(String, String), (i64, i64)> {
    let mut runs: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    for line in std::fs::read_to_string(out).unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            continue;
        }
        let ns: i64 = f[2].parse().expect("ns");
        let entry = runs
            .entry((f[0].to_string(), f[1].to_string()))
            .or_insert((ns, ns));
        entry.0 = entry.0.min(ns);
        entry.1 = entry.1.max(ns);
    }
    runs
}

/// Asserts that no two runs' heartbeats interleave, and returns the runs
/// in start order.
fn assert_no_overlap(out: &Path) -> Vec<((String, String), (i64, i64))> {
    let mut runs: Vec<_> = runs_of(out).into_iter().collect();
    runs.sort_by_key(|(_, (first, _))| *first);
    for pair in runs.windows(2) {
        let ((a, (_, a_last)), (b, (b_first, _))) = (&pair[0], &pair[1]);
        assert!(
            a_last < b_first,
            "run {a:?} was still beating {} ms after run {b:?} started",
            (a_last - b_first) / 1_000_000
        );
    }
    runs
}

/// The job's history and every replica's log, for a failed wait.
fn explain(config: &Path, job: &str, replicas: &[Replica]) -> String {
    let mut text = format!("history: {:?}\n", history_json(config, job));
    for replica in replicas {
        text.push_str(&format!("log of {}:\n{}\n", replica.id, replica.log_text()));
    }
    text
}

fn status_of(config: &Path, job: &str, instant: &str) -> Vec<String> {
    history_json(config, job)
        .iter()
        .filter(|r| r["scheduled_at"] == instant)
        .map(|r| r["status"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The holder's connection is cut 2 s into a 20 s run with a 6 s lease: it
/// stops its job before the lease can expire, the other replica runs the
/// next instants without overlap, and the holder records `lost_lock` once it
/// can reach the database again.
fn partition_of_the_holder(kind: Kind) {
    let db = TestDb::new(kind);
    let out = db.dir().join("beats.txt");
    let jobs = heartbeat_job("long", "*/2 * * * * *", "6s", 20, &out);
    let (proxies, replicas) = replicas_through_proxies(&db, &jobs);
    let direct = db.config("");
    let explain = || explain(&direct, "long", &replicas);
    wait_until_or(
        "a first heartbeat",
        Duration::from_secs(15),
        || !runs_of(&out).is_empty(),
        explain,
    );
    let ((holder, instant), _) = runs_of(&out).into_iter().next().expect("a run");
    let index = replicas
        .iter()
        .position(|r| r.id == holder)
        .expect("holder");
    sleep(Duration::from_secs(2));
    let cut_ns = Utc::now().timestamp_nanos_opt().expect("now");
    proxies[index].cut();

    // The other replica takes over once the lease has expired.
    wait_until_or(
        "the other replica to run the job",
        Duration::from_secs(20),
        || runs_of(&out).keys().any(|(who, _)| *who != holder),
        explain,
    );
    let runs = runs_of(&out);
    let (_, holder_last) = runs[&(holder.clone(), instant.clone())];
    let stopped_after = Duration::from_nanos(u64::try_from(holder_last - cut_ns).unwrap_or(0));
    assert!(
        stopped_after < Duration::from_secs(6),
        "the holder's job beat for {stopped_after:?} after the cut"
    );
    proxies[index].restore();
    wait_until_or(
        "the holder to record lost_lock",
        Duration::from_secs(30),
        || status_of(&direct, "long", &instant) == ["lost_lock"],
        explain,
    );
    let runs = assert_no_overlap(&out);
    eprintln!(
        "{kind:?}: partitioned holder {holder} stopped its job {stopped_after:?} after the cut; \
         {} runs, no overlap; {instant} recorded lost_lock",
        runs.len()
    );
    drop(replicas);
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn a_partitioned_holder_stops_before_its_lease_expires_mysql() {
    partition_of_the_holder(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn a_partitioned_holder_stops_before_its_lease_expires_postgres() {
    partition_of_the_holder(Kind::Postgres);
}

/// `sec min hour dom month *` for `t`: a schedule that fires once, at `t`.
fn once_at(t: DateTime<Utc>) -> String {
    format!(
        "{} {} {} {} {} *",
        t.second(),
        t.minute(),
        t.hour(),
        t.format("%-d"),
        t.format("%-m")
    )
}

/// All connections cut for 15 s during per-second jobs: nothing runs twice,
/// runs that ended during the outage are recorded after it, and catch-up
/// runs the instant missed in the outage when `catch_up` allows.
fn database_outage(kind: Kind) {
    let db = TestDb::new(kind);
    let out = db.dir().join("ticks.txt");
    // The cut falls 1.5 s into a run of the slow job (every 4 s, 3 s long),
    // which therefore ends during the outage.
    let slow_instant = (Utc::now() + TimeDelta::seconds(5))
        .duration_trunc(TimeDelta::seconds(4))
        .expect("truncate")
        + TimeDelta::seconds(4);
    let cut_at = slow_instant + TimeDelta::milliseconds(1500);
    let (missed, restore_at) = (
        cut_at + TimeDelta::milliseconds(4500),
        cut_at + TimeDelta::seconds(15),
    );
    let jobs = format!(
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\n\
         command = 'echo \"$REPLICRON_SCHEDULED_AT $REPLICRON_INSTANCE\" >> \"$OUT\"'\nenv = {{ OUT = {out:?} }}\n\n\
         [[job]]\nname = \"slow\"\nschedule = \"*/4 * * * * *\"\ncommand = 'sleep 3; echo done'\n\n\
         [[job]]\nname = \"caught\"\nschedule = \"{once}\"\ncatch_up = \"1m\"\ncommand = 'echo caught'\n\n\
         [[job]]\nname = \"missed\"\nschedule = \"{once}\"\ncatch_up = \"5s\"\ncommand = 'echo missed'\n\n",
        once = once_at(missed)
    );
    let (proxies, replicas) = replicas_through_proxies(&db, &jobs);
    let sleep_until = |t: DateTime<Utc>| {
        if let Ok(wait) = (t - Utc::now()).to_std() {
            sleep(wait);
        }
    };
    sleep_until(cut_at);
    for proxy in &proxies {
        proxy.cut();
    }
    sleep_until(restore_at);
    for proxy in &proxies {
        proxy.restore();
    }
    sleep(Duration::from_secs(6));
    for replica in &replicas {
        replica.signal(Signal::SIGTERM);
    }
    let mut logs = String::new();
    for mut replica in replicas {
        assert!(
            replica
                .wait_exit(Duration::from_secs(30))
                .is_some_and(|s| s.success()),
            "{}",
            replica.log_text()
        );
        logs.push_str(&replica.log_text());
    }
    // The instants skipped during the outage are said, in one line per
    // job once the database answers again.
    assert!(
        logs.lines()
            .any(|l| l.contains("while the database was unreachable")
                && l.contains("\"job\":\"tick\"")),
        "no replica said which instants it skipped:\n{logs}"
    );

    // No instant twice.
    let mut seen = BTreeMap::new();
    for line in std::fs::read_to_string(&out).unwrap_or_default().lines() {
        let instant = line.split_whitespace().next().unwrap_or("").to_string();
        *seen.entry(instant).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "instants run twice: {twice:?}");
    let direct = db.config("");
    // Every run of the slow job is recorded as ended; those that ended
    // during the outage too.
    let slow = history_json(&direct, "slow");
    assert!(!slow.is_empty());
    let unfinished: Vec<_> = slow.iter().filter(|r| r["finished_at"].is_null()).collect();
    assert!(
        unfinished.is_empty(),
        "runs left without an end: {unfinished:?}"
    );
    let in_outage = slow
        .iter()
        .filter(|r| {
            let finished = DateTime::parse_from_rfc3339(r["finished_at"].as_str().unwrap_or(""))
                .map(|t| t.with_timezone(&Utc));
            finished.is_ok_and(|f| f > cut_at && f < restore_at)
        })
        .count();
    assert!(in_outage >= 1, "no run ended during the outage: {slow:?}");
    assert!(slow.iter().all(|r| r["status"] == "succeeded"), "{slow:?}");
    // Catch-up: within 1 m, the missed instant runs once; within 5 s it does not.
    let missed_at = missed.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    assert_eq!(status_of(&direct, "caught", &missed_at), ["succeeded"]);
    assert!(status_of(&direct, "missed", &missed_at).is_empty());
    let in_window = seen
        .keys()
        .filter(|t| DateTime::parse_from_rfc3339(t).is_ok_and(|t| t > cut_at && t < restore_at));
    eprintln!(
        "{kind:?}: 15 s outage: {} tick instants ran, 0 twice ({} inside the outage, run before the cut was noticed); \
         {in_outage} slow runs ended during the outage and were recorded after; the missed instant was caught up once",
        seen.len(),
        in_window.count()
    );
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn a_database_outage_loses_no_record_and_runs_nothing_twice_mysql() {
    database_outage(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn a_database_outage_loses_no_record_and_runs_nothing_twice_postgres() {
    database_outage(Kind::Postgres);
}

/// The holder is frozen (SIGSTOP) past its 3 s lease, then woken: its job
/// was stopped before the other replica started, and it does not record a
/// success for the run whose lease it lost.
fn stalled_holder(kind: Kind) {
    let db = TestDb::new(kind);
    let out = db.dir().join("beats.txt");
    let config = db.config(&heartbeat_job("long", "*/2 * * * * *", "3s", 10, &out));
    let replicas: Vec<Replica> = ["p", "q"]
        .iter()
        .map(|id| Replica::start(&config, id, None, &[]))
        .collect();
    let explain = || explain(&config, "long", &replicas);
    wait_until_or(
        "a first heartbeat",
        Duration::from_secs(15),
        || !runs_of(&out).is_empty(),
        explain,
    );
    let ((holder, instant), _) = runs_of(&out).into_iter().next().expect("a run");
    let frozen = replicas.iter().find(|r| r.id == holder).expect("holder");
    sleep(Duration::from_secs(1));
    frozen.signal(Signal::SIGSTOP);
    wait_until_or(
        "the other replica to run the job",
        Duration::from_secs(20),
        || runs_of(&out).keys().any(|(who, _)| *who != holder),
        explain,
    );
    sleep(Duration::from_secs(2));
    frozen.signal(Signal::SIGCONT);
    wait_until_or(
        "the woken holder to record lost_lock",
        Duration::from_secs(20),
        || status_of(&config, "long", &instant) == ["lost_lock"],
        explain,
    );
    let runs = assert_no_overlap(&out);
    eprintln!(
        "{kind:?}: frozen holder {holder}: {} runs, no overlap; {instant} recorded lost_lock",
        runs.len()
    );
    drop(replicas);
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn a_frozen_holder_neither_overlaps_nor_records_success_mysql() {
    stalled_holder(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn a_frozen_holder_neither_overlaps_nor_records_success_postgres() {
    stalled_holder(Kind::Postgres);
}

/// The job's lease row is locked (`SELECT … FOR UPDATE`) from just before
/// an instant until past the lease's end: both replicas' claims wait in
/// the server, and the one that wins gets its answer after its 3 s lease
/// has run out in the database (MariaDB counts it from when the statement
/// began). The winner counts its lease from when it sent the claim, so it
/// takes the lease up again before it runs the instant, late; the next
/// instant is an overrun, not a second run beside the first.
fn claim_answered_after_its_lease(kind: Kind) {
    let db = TestDb::new(kind);
    let out = db.dir().join("beats.txt");
    let config = db.config(&heartbeat_job("long", "*/4 * * * * *", "3s", 2, &out));
    let replicas: Vec<Replica> = ["p", "q"]
        .iter()
        .map(|id| Replica::start(&config, id, None, &[]))
        .collect();
    let explain = || explain(&config, "long", &replicas);
    wait_until_or(
        "a first heartbeat",
        Duration::from_secs(20),
        || !runs_of(&out).is_empty(),
        explain,
    );
    // The first instant at least 2 s ahead.
    let now = Utc::now();
    let instant = (now + TimeDelta::seconds(2))
        .duration_trunc(TimeDelta::seconds(4))
        .expect("truncate")
        + TimeDelta::seconds(4);
    let sleep_until = |t: DateTime<Utc>| {
        if let Ok(wait) = (t - Utc::now()).to_std() {
            sleep(wait);
        }
    };
    sleep_until(instant - TimeDelta::milliseconds(300));
    let mut conn = db.raw();
    diesel::connection::SimpleConnection::batch_execute(
        &mut conn,
        "BEGIN; SELECT * FROM replicron_locks WHERE name = 'long' FOR UPDATE",
    )
    .expect("lock the row");
    sleep_until(instant + TimeDelta::milliseconds(3500));
    diesel::connection::SimpleConnection::batch_execute(&mut conn, "COMMIT").expect("unlock");
    sleep_until(instant + TimeDelta::seconds(10));
    let runs = assert_no_overlap(&out);
    let held = chrono::SecondsFormat::Millis;
    let late = instant.to_rfc3339_opts(held, true);
    assert!(
        runs.iter().any(|((_, at), _)| *at == late),
        "the instant whose claim waited did not run: {runs:?}\n{}",
        explain()
    );
    assert_eq!(
        status_of(&config, "long", &late),
        ["succeeded"],
        "{}",
        explain()
    );
    let logs: String = replicas.iter().map(Replica::log_text).collect();
    assert!(
        logs.contains("confirming the lease again"),
        "no replica noticed its claim came back late:\n{logs}"
    );
    eprintln!(
        "{kind:?}: a claim answered 3.5 s late ran its instant once, late, under a lease taken up again; {} runs, no overlap",
        runs.len()
    );
    drop(replicas);
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn a_claim_answered_after_its_lease_ran_out_runs_alone_mysql() {
    claim_answered_after_its_lease(Kind::Mysql);
}
