//! replicron on a multi-primary cluster: a private 3-node MariaDB Galera
//! cluster with each replica on a different node. Replicas started at the
//! same moment all start (the migrations run once, one replica at a time);
//! a database left half-migrated heals; and killing a node mid-run runs no
//! instant twice and loses none but those under a lease the killed node's
//! replica held.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use nix::sys::signal::Signal;

use crate::cluster::Galera;
use crate::database_time::{Line, per_second_jobs, read_lines};
use crate::support::Replica;

/// One config per node, for database `name`, in `dir`.
fn configs(cluster: &Galera, dir: &Path, name: &str, jobs: &str) -> Vec<PathBuf> {
    cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let path = dir.join(format!("{name}-node{}.toml", i + 1));
            std::fs::write(
                &path,
                format!("[database]\nurl = {:?}\n\n{jobs}", node.url(name)),
            )
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

fn second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::seconds(1)).expect("truncate")
}

/// Three replicas, 10 per-second jobs with a 3 s lease; node 3 is killed
/// (SIGKILL) mid-run. Galera then blocks commits while it evicts the node:
/// the instants wait and run late. No instant runs twice; an instant that
/// did not run at all must be within a few seconds of the kill, and be one
/// the replica on the killed node was claiming as its node died (the
/// cluster may commit such a claim without the replica hearing it won), or
/// have come while a lease that replica took just before the kill was
/// still held: the lease of a run it started (its release could not reach
/// the cluster) or of a claim it had in flight, committed unheard.
fn kill_a_node_mid_run(cluster: &mut Galera, dir: &Path) {
    const JOBS: usize = 10;
    cluster.nodes[0].execute("CREATE DATABASE killing");
    let out = dir.join("killing-runs.txt");
    let jobs = format!(
        "[defaults]\nlock_at_most_for = \"3s\"\n\n{}",
        per_second_jobs(JOBS, &out)
    );
    let configs = configs(cluster, dir, "killing", &jobs);
    let mut replicas: Vec<Replica> = configs
        .iter()
        .enumerate()
        .map(|(i, config)| {
            Replica::start(
                config,
                &format!("g{}", i + 1),
                None,
                &[("RUST_LOG", "info")],
            )
        })
        .collect();
    wait_all_started(&mut replicas, Duration::from_secs(60));
    let window_start = second(Utc::now()) + TimeDelta::seconds(2);
    std::thread::sleep(Duration::from_secs(6));
    let killed_at = Utc::now();
    cluster.nodes[2].kill();
    std::thread::sleep(Duration::from_secs(16));
    let window_end = second(Utc::now()) - TimeDelta::seconds(2);
    let logs = stop_all(replicas);

    let lines: Vec<Line> = read_lines(&out);
    let mut count: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    for line in &lines {
        *count.entry((line.job.clone(), line.instant)).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "instants run twice: {twice:?}");
    // Only instants around the kill may be lost at all.
    let around_kill = |t: DateTime<Utc>| {
        t >= killed_at - TimeDelta::seconds(1) && t <= killed_at + TimeDelta::seconds(8)
    };
    // The claims the killed node's replica had in flight when its node
    // died: the cluster may have committed them before the node went,
    // without the replica hearing it won. Those instants are its, as if it
    // had died right after winning them: not run again.
    let g3_log = logs.split("--- log of g3").nth(1).unwrap_or_default();
    let in_flight: BTreeSet<(String, DateTime<Utc>)> = g3_log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("claim not answered"))
        })
        .filter_map(|l| {
            let at = DateTime::parse_from_rfc3339(l["instant"].as_str()?).ok()?;
            Some((l["job"].as_str()?.to_string(), at.with_timezone(&Utc)))
        })
        .collect();
    // The leases the killed node's replica may have held as its node died:
    // those of the runs it started just before, and those of its claims in
    // flight. Such a lease was never released; it holds its job for the
    // lease's 3 s (and the cluster's pause while it evicts the node).
    let held_by_killed: BTreeSet<(String, DateTime<Utc>)> = lines
        .iter()
        .filter(|l| {
            l.instance == "g3"
                && l.instant >= killed_at - TimeDelta::seconds(2)
                && l.instant <= killed_at
        })
        .map(|l| (l.job.clone(), l.instant))
        .chain(in_flight.iter().cloned())
        .collect();
    let (mut expected, mut missed, mut unexplained) = (0, Vec::new(), Vec::new());
    for n in 0..JOBS {
        let job = format!("job-{n:02}");
        let mut t = window_start;
        while t <= window_end {
            expected += 1;
            if !count.contains_key(&(job.clone(), t)) {
                missed.push((job.clone(), t));
                let explained = around_kill(t)
                    && (0..=4).any(|back| {
                        held_by_killed.contains(&(job.clone(), t - TimeDelta::seconds(back)))
                    });
                if !explained {
                    unexplained.push((job.clone(), t));
                }
            }
            t += TimeDelta::seconds(1);
        }
    }
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
    eprintln!(
        "Galera, node 3 killed at {}: {expected} instants in the window, {} runs, 0 twice, {} not run \
         (all under a lease or an in-flight claim of the killed node's replica: {}; claims in flight \
         when it lost its node: {}); latest start after the kill {latest:.0} ms after its \
         instant; runs per replica {per_replica:?}",
        killed_at.format("%H:%M:%S%.3f"),
        lines.len(),
        missed.len(),
        unexplained.is_empty(),
        in_flight
            .iter()
            .map(|(_, t)| t.format("%H:%M:%S").to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(" ")
    );
    if !unexplained.is_empty() {
        let millis = |t: &DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        // The lines that tell what became of the lost instants: every
        // warning, and every line naming one of them.
        let relevant: Vec<&str> = logs
            .lines()
            .filter(|l| {
                l.starts_with("---")
                    || l.contains("WARN")
                    || l.contains("ERROR")
                    || unexplained.iter().any(|(job, t)| {
                        l.contains(&format!("\"job\":\"{job}\"")) && l.contains(&millis(t))
                    })
            })
            .collect();
        // Each lost instant's job's history from the kill on.
        let jobs: BTreeSet<&str> = unexplained.iter().map(|(job, _)| job.as_str()).collect();
        let history: Vec<String> = jobs
            .iter()
            .flat_map(|job| crate::support::history_json(&configs[0], job))
            .filter(|r| {
                r["scheduled_at"]
                    .as_str()
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .is_some_and(|t| around_kill(t.with_timezone(&Utc)))
            })
            .map(|r| r.to_string())
            .collect();
        let status = crate::support::replicron(&[
            "status",
            "--config",
            configs[0].to_str().expect("utf-8"),
            "--format",
            "json",
        ]);
        // The verdict last: a log shown from its end shows it first.
        let verdict = format!(
            "node 3 killed at {}; instants lost that no lease or claim of the killed node's \
             replica covered: {unexplained:?}; claims it had in flight: {in_flight:?}; runs it \
             started just before: {:?}",
            millis(&killed_at),
            held_by_killed.difference(&in_flight).collect::<Vec<_>>()
        );
        let saved =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/galera-failure.log");
        let _ = std::fs::write(
            &saved,
            format!(
                "{logs}\nstatus: {}\nhistory around the kill:\n{}\n{verdict}\n",
                String::from_utf8_lossy(&status.stdout),
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

#[test]
#[cfg_attr(
    replicron_no_galera,
    ignore = "needs Debian's mariadb-server, galera-4 and rsync"
)]
fn galera_three_nodes_three_replicas() {
    let Some(mut cluster) = Galera::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    simultaneous_starts(&cluster, dir.path());
    half_applied_heals(&cluster, dir.path());
    kill_a_node_mid_run(&mut cluster, dir.path());
}
