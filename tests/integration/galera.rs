//! replicron on a multi-primary cluster: a private 3-node MariaDB Galera
//! cluster with each replica on a different node (its URL lists the other
//! nodes after its own). Replicas started at the same moment all start
//! (the migrations run once, one replica at a time); a database left
//! half-migrated heals; killing a node while claims are in flight runs
//! no instant twice and loses none; and after every node is killed at
//! once and the cluster bootstrapped again from the most advanced, the
//! replicas claim again without a restart and run no instant twice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use nix::sys::signal::Signal;

use crate::cluster::Galera;
use crate::database_time::{Line, per_second_jobs, read_lines};
use crate::support::Replica;

/// One config per node, for database `name`, in `dir`: each replica's URL
/// lists its own node first, then the others, so that a replica whose
/// node dies goes on through another.
fn configs(cluster: &Galera, dir: &Path, name: &str, jobs: &str) -> Vec<PathBuf> {
    let nodes = cluster.nodes.len();
    (0..nodes)
        .map(|i| {
            let path = dir.join(format!("{name}-node{}.toml", i + 1));
            let hosts: Vec<String> = (0..nodes)
                .map(|k| format!("127.0.0.1:{}", cluster.nodes[(i + k) % nodes].port))
                .collect();
            let url = format!("mysql://root@{}/{name}", hosts.join(","));
            std::fs::write(&path, format!("[database]\nurl = {url:?}\n\n{jobs}"))
                .expect("write config");
            path
        })
        .collect()
}

/// Waits until every replica has started, failing at once if one exits.
fn wait_all_started(replicas: &mut [Replica], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    for replica in replicas.iter_mut() {
        while !replica.log_text().contains("replicron started") {
            if let Some(status) = replica.wait_exit(Duration::ZERO) {
                panic!(
                    "replica {} exited {status} before starting:\n{}",
                    replica.id,
                    replica.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "replica {} did not start within {timeout:?}:\n{}",
                replica.id,
                replica.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Stops every replica; returns their logs.
fn stop_all(replicas: Vec<Replica>) -> String {
    for replica in &replicas {
        replica.signal(Signal::SIGTERM);
    }
    let mut logs = String::new();
    for mut replica in replicas {
        let status = replica
            .wait_exit(Duration::from_secs(40))
            .expect("replica exits after SIGTERM");
        assert!(
            status.success(),
            "replica {} exited {status:?}:\n{}",
            replica.id,
            replica.log_text()
        );
        logs.push_str(&format!(
            "--- log of {}\n{}",
            replica.id,
            replica.log_text()
        ));
    }
    logs
}

/// Five times, three replicas start at the same moment on a fresh
/// database, each on its own node: all of them start.
fn simultaneous_starts(cluster: &Galera, dir: &Path) {
    let jobs = "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n";
    for round in 1..=5 {
        let name = format!("starts{round}");
        cluster.nodes[0].execute(&format!("CREATE DATABASE {name}"));
        let configs = configs(cluster, dir, &name, jobs);
        let mut replicas: Vec<Replica> = configs
            .iter()
            .enumerate()
            .map(|(i, config)| Replica::start(config, &format!("s{round}-{}", i + 1), None, &[]))
            .collect();
        wait_all_started(&mut replicas, Duration::from_secs(60));
        let migrated = replicas
            .iter()
            .filter(|r| r.log_text().contains("database migrated"))
            .count();
        assert_eq!(
            migrated, 1,
            "round {round}: one replica migrates, the others wait"
        );
        let _ = stop_all(replicas);
        eprintln!("Galera round {round}: 3 replicas started at once on 3 nodes, all started");
    }
}

/// The tables exist, the version rows do not (a start cut short between
/// them): the next start finishes the migrations and says so.
fn half_applied_heals(cluster: &Galera, dir: &Path) {
    cluster.nodes[0].execute("CREATE DATABASE healing");
    let configs = configs(cluster, dir, "healing", "");
    let migrate =
        crate::support::replicron(&["migrate", "--config", configs[0].to_str().expect("utf-8")]);
    assert!(
        migrate.status.success(),
        "{:?}",
        crate::support::text(&migrate)
    );
    cluster.nodes[1].execute("DELETE FROM healing.__diesel_schema_migrations");
    let mut replicas = vec![Replica::start(&configs[2], "healer", None, &[])];
    wait_all_started(&mut replicas, Duration::from_secs(60));
    let log = replicas[0].log_text();
    assert!(log.contains("half-applied"), "{log}");
    let _ = stop_all(replicas);
    eprintln!("Galera: a half-migrated database healed on the next start");
}

/// How many per-second jobs the fleets of the crash phases run.
const JOBS: usize = 10;

/// Three replicas `{prefix}1`…`{prefix}3`, one per node, running [`JOBS`]
/// per-second jobs under `defaults` on a fresh database `name`, started:
/// the file their runs are recorded in, their configs, and the replicas.
fn per_second_fleet(
    cluster: &Galera,
    dir: &Path,
    name: &str,
    defaults: &str,
    prefix: &str,
) -> (PathBuf, Vec<PathBuf>, Vec<Replica>) {
    cluster.nodes[0].execute(&format!("CREATE DATABASE {name}"));
    let out = dir.join(format!("{name}-runs.txt"));
    let jobs = format!("[defaults]\n{defaults}\n{}", per_second_jobs(JOBS, &out));
    let configs = configs(cluster, dir, name, &jobs);
    let mut replicas: Vec<Replica> = configs
        .iter()
        .enumerate()
        .map(|(i, config)| {
            Replica::start(
                config,
                &format!("{prefix}{}", i + 1),
                None,
                &[("RUST_LOG", "info")],
            )
        })
        .collect();
    wait_all_started(&mut replicas, Duration::from_secs(60));
    (out, configs, replicas)
}

/// How many times each job's instant ran, by its recorded lines.
fn runs_per_instant(lines: &[Line]) -> BTreeMap<(String, DateTime<Utc>), usize> {
    let mut count = BTreeMap::new();
    for line in lines {
        *count.entry((line.job.clone(), line.instant)).or_default() += 1;
    }
    count
}

fn second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::seconds(1)).expect("truncate")
}

/// Three replicas, 10 per-second jobs with a 10 s lease, each replica on
/// its own node but able to reach the others; node 3 is killed (SIGKILL)
/// 8 ms after a whole second, while the replicas' claims of that instant
/// are in flight or have just committed. Galera then blocks commits while
/// it evicts the node (`evs.suspect_timeout`, 5 s): the claims wait in the
/// cluster, come back with their leases still good (the lease outlasts the
/// eviction), and their instants run late. An instant that waited behind
/// them may lose its race to the next instant's claim, and is then recorded
/// missed, or is an overrun of a late run that started before it and was
/// still going at it. The replica on the killed node asks another node what became of
/// its claims: one that committed is taken up again and run, late, even
/// when the answers wait out the eviction and its pool's connections are
/// all taken by the other questions. No instant runs twice, and none is
/// lost (neither run nor recorded).
fn kill_a_node_mid_run(cluster: &mut Galera, dir: &Path) {
    let (out, configs, replicas) = per_second_fleet(
        cluster,
        dir,
        "killing",
        "lock_at_most_for = \"10s\"\nmissed_after = \"3s\"\n",
        "g",
    );
    let window_start = second(Utc::now()) + TimeDelta::seconds(2);
    std::thread::sleep(Duration::from_secs(6));
    // 8 ms into a second: the claims of its instant are on their way, or
    // have just committed.
    let kill_at = second(Utc::now()) + TimeDelta::milliseconds(1008);
    if let Ok(wait) = (kill_at - Utc::now()).to_std() {
        std::thread::sleep(wait);
    }
    let killed_at = Utc::now();
    cluster.nodes[2].kill();
    std::thread::sleep(Duration::from_secs(20));
    // Old enough for the check for missed instants (3 s, every 1.5 s) to
    // have recorded what did not run.
    let window_end = second(Utc::now()) - TimeDelta::seconds(7);
    let logs = stop_all(replicas);
    // Every replica's log of the kill, kept for reading after a pass too.
    let _ = std::fs::write(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/galera-kill.log"),
        &logs,
    );

    let lines: Vec<Line> = read_lines(&out);
    let count = runs_per_instant(&lines);
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "instants run twice: {twice:?}");
    // What the killed node's replica said of its claims in flight, and of
    // those it found committed.
    let g3_log = logs.split("--- log of g3").nth(1).unwrap_or_default();
    let said = |start: &str| -> BTreeSet<(String, DateTime<Utc>)> {
        g3_log
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with(start)))
            .filter_map(|l| {
                let at = DateTime::parse_from_rfc3339(l["instant"].as_str()?).ok()?;
                Some((l["job"].as_str()?.to_string(), at.with_timezone(&Utc)))
            })
            .collect()
    };
    let in_flight = said("claim not answered");
    let taken_up = said("the claim had committed");
    let mut expected = 0;
    let mut lost = Vec::new();
    for n in 0..JOBS {
        let job = format!("job-{n:02}");
        let mut t = window_start;
        while t <= window_end {
            expected += 1;
            if !count.contains_key(&(job.clone(), t)) {
                lost.push((job.clone(), t));
            }
            t += TimeDelta::seconds(1);
        }
    }
    // An instant that waited behind the late ones can lose its race to
    // the next instant's claim (a lease row takes no instant older than
    // its last): it is then recorded missed, not lost. Or a late run of an
    // earlier instant, started before it, was still going at it: an
    // overrun, skipped by design (and counted so by `verify`). Lost is an
    // instant neither run nor accounted for so.
    let lost_jobs: BTreeSet<String> = lost.iter().map(|(job, _)| job.clone()).collect();
    let lost_history: Vec<serde_json::Value> = lost_jobs
        .iter()
        .flat_map(|job| crate::support::history_json(&configs[0], job))
        .collect();
    let time = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let overruns: BTreeSet<(String, DateTime<Utc>)> = lost
        .iter()
        .filter(|(job, t)| {
            lost_history.iter().any(|r| {
                r["job"].as_str() == Some(job.as_str())
                    && r["status"] != "missed"
                    && time(&r["started_at"]).is_some_and(|start| start <= *t)
                    && time(&r["finished_at"]).is_some_and(|end| end > *t)
            })
        })
        .cloned()
        .collect();
    let overran = overruns.len();
    lost.retain(|l| !overruns.contains(l));
    let recorded_missed: BTreeSet<(String, DateTime<Utc>)> = lost_history
        .iter()
        .filter(|r| r["status"] == "missed")
        .filter_map(|r| {
            let at = DateTime::parse_from_rfc3339(r["scheduled_at"].as_str()?).ok()?;
            Some((r["job"].as_str()?.to_string(), at.with_timezone(&Utc)))
        })
        .collect();
    let missed_not_run = lost.iter().filter(|l| recorded_missed.contains(*l)).count();
    lost.retain(|l| !recorded_missed.contains(l));
    let late_after_kill: Vec<f64> = lines
        .iter()
        .filter(|l| l.instant >= killed_at - TimeDelta::seconds(1))
        .map(Line::late_ms)
        .collect();
    let latest = late_after_kill.iter().copied().fold(0.0, f64::max);
    let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for line in &lines {
        *per_replica.entry(line.instance.as_str()).or_default() += 1;
    }
    let instants = |set: &BTreeSet<(String, DateTime<Utc>)>| {
        set.iter()
            .map(|(_, t)| t.format("%H:%M:%S").to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(" ")
    };
    eprintln!(
        "Galera, node 3 killed at {}: {expected} instants in the window, {} runs, 0 twice, {} neither run nor accounted for, {missed_not_run} not run and recorded missed, {overran} overruns of a late run; \
         claims in flight when g3 lost its node: {} ({}), of which found committed and run late: {}; \
         latest start after the kill {latest:.0} ms after its instant; runs per replica {per_replica:?}",
        killed_at.format("%H:%M:%S%.3f"),
        lines.len(),
        lost.len(),
        in_flight.len(),
        instants(&in_flight),
        taken_up.len(),
    );
    if !lost.is_empty() {
        let millis = |t: &DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        // The lines that tell what became of the lost instants: every
        // warning, and every line naming one of them.
        let relevant: Vec<&str> = logs
            .lines()
            .filter(|l| {
                l.starts_with("---")
                    || l.contains("WARN")
                    || l.contains("ERROR")
                    || lost.iter().any(|(job, t)| {
                        l.contains(&format!("\"job\":\"{job}\"")) && l.contains(&millis(t))
                    })
            })
            .collect();
        let jobs: BTreeSet<&str> = lost.iter().map(|(job, _)| job.as_str()).collect();
        let history: Vec<String> = jobs
            .iter()
            .flat_map(|job| crate::support::history_json(&configs[0], job))
            .filter(|r| {
                r["scheduled_at"]
                    .as_str()
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .is_some_and(|t| {
                        let t = t.with_timezone(&Utc);
                        t >= killed_at - TimeDelta::seconds(2)
                            && t <= killed_at + TimeDelta::seconds(10)
                    })
            })
            .map(|r| r.to_string())
            .collect();
        // The verdict last: a log shown from its end shows it first.
        let verdict = format!(
            "node 3 killed at {}; instants lost: {lost:?}; claims g3 had in flight: {in_flight:?}; found committed and run: {taken_up:?}",
            millis(&killed_at)
        );
        let saved =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/galera-failure.log");
        let _ = std::fs::write(
            &saved,
            format!(
                "{logs}\nhistory around the kill:\n{}\n{verdict}\n",
                history.join("\n")
            ),
        );
        panic!(
            "{}\nhistory around the kill:\n{}\n(all logs in {})\n{verdict}",
            relevant.join("\n"),
            history.join("\n"),
            saved.display()
        );
    }
    assert!(
        per_replica.contains_key("g1") && per_replica.contains_key("g2"),
        "{per_replica:?}"
    );
}

/// Three replicas run 10 per-second jobs (catching up for a minute) when
/// every node is SIGKILLed within a second: the cluster is bootstrapped
/// again from the most advanced node (by `grastate.dat`'s seqno, or
/// `mariadbd --wsrep-recover`), and the others rejoin by state transfer.
/// The replicas, never restarted, claim again once it is back: no instant
/// runs twice, before the crash, in the outage's catch-up or after, and
/// from 15 s after the cluster is back every instant runs.
fn crash_the_whole_cluster(cluster: &mut Galera, dir: &Path) {
    // The node the previous phase killed comes back first: every node is
    // up when all are killed.
    cluster.nodes[2].rejoin(Duration::from_secs(120));
    let (out, _, mut replicas) = per_second_fleet(
        cluster,
        dir,
        "crashing",
        "lock_at_most_for = \"10s\"\nmissed_after = \"3s\"\ncatch_up = \"1m\"\n",
        "w",
    );
    std::thread::sleep(Duration::from_secs(5));
    let crash_started = Instant::now();
    let crashed_at = Utc::now();
    cluster.crash_all();
    let crash_took = crash_started.elapsed();
    assert!(crash_took < Duration::from_secs(1), "{crash_took:?}");
    let (first, seqnos) = cluster.recover_all(Duration::from_secs(180));
    let back_at = Utc::now();
    let from = second(back_at) + TimeDelta::seconds(15);
    crate::support::wait_until(
        "every job runs again after the cluster is back",
        Duration::from_secs(90),
        || {
            let lines = read_lines(&out);
            (0..JOBS).all(|n| {
                let job = format!("job-{n:02}");
                lines
                    .iter()
                    .any(|l| l.job == job && l.instant >= from + TimeDelta::seconds(5))
            })
        },
    );
    std::thread::sleep(Duration::from_secs(5));
    let to = second(Utc::now()) - TimeDelta::seconds(2);
    for replica in &mut replicas {
        assert!(
            replica.wait_exit(Duration::ZERO).is_none(),
            "replica {} exited after the cluster's crash:\n{}",
            replica.id,
            replica.log_text()
        );
    }
    let logs = stop_all(replicas);
    let _ = std::fs::write(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/galera-whole-crash.log"),
        &logs,
    );
    let lines = read_lines(&out);
    let count = runs_per_instant(&lines);
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "instants run twice: {twice:?}");
    let mut lost = Vec::new();
    for n in 0..JOBS {
        let job = format!("job-{n:02}");
        let mut t = from;
        while t <= to {
            if !count.contains_key(&(job.clone(), t)) {
                lost.push(format!("{job} {}", t.format("%H:%M:%S")));
            }
            t += TimeDelta::seconds(1);
        }
    }
    assert!(
        lost.is_empty(),
        "instants not run after the cluster came back at {}: {lost:?}",
        back_at.format("%H:%M:%S%.3f")
    );
    let caught_up = lines
        .iter()
        .filter(|l| l.instant > crashed_at && l.instant < back_at)
        .count();
    eprintln!(
        "Galera, every node killed within {crash_took:?} at {}: seqnos {seqnos:?}, bootstrapped from node {}, back after {:.1} s; {} runs, none twice, {caught_up} of them instants of the outage caught up; every instant from {} to {} ran",
        crashed_at.format("%H:%M:%S%.3f"),
        first + 1,
        (back_at - crashed_at).num_milliseconds() as f64 / 1000.0,
        lines.len(),
        from.format("%H:%M:%S"),
        to.format("%H:%M:%S"),
    );
}

#[test]
#[cfg_attr(
    replicron_no_galera,
    ignore = "needs Debian's mariadb-server, galera-4 and rsync"
)]
fn galera_three_nodes_three_replicas() {
    let _heavy = crate::support::heavy();
    let Some(mut cluster) = Galera::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    simultaneous_starts(&cluster, dir.path());
    half_applied_heals(&cluster, dir.path());
    kill_a_node_mid_run(&mut cluster, dir.path());
    crash_the_whole_cluster(&mut cluster, dir.path());
}
