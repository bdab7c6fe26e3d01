//! Runs whose holder died, with real replicas: an `overlap = "allow"` job's
//! runs, each held on its instant's own lease row, are marked `abandoned`
//! once those leases end, and told, on every backend; the shared lock and
//! limit slots they held free when their leases end; and, on MariaDB and
//! PostgreSQL through proxies that cut a replica off, a holder that gave
//! its lease up in an outage has its run marked abandoned, whether it then
//! records the run's end (the mark gives way to it) or is killed.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::proxy::Proxy;
use crate::support::{Kind, Replica, TestDb, backend_test, history_json, run, wait_until_or};

/// The jobs: `al` as a user wrote it (its runs overlap, two at once, a 6 s
/// lease, 5 s bodies every 2 s), and `gated`, of the same kind, which also
/// takes a lock and a limit of one (one body at a time across the fleet),
/// each body's start written to `gated.txt`. Abandoned runs are told to
/// `told.txt`.
fn jobs(dir: &Path) -> String {
    format!(
        "[notify]\non = [\"abandoned\"]\n\
         command = 'echo \"$REPLICRON_JOB $REPLICRON_EVENT $REPLICRON_RUN_ID\" >> {told}'\n\n\
         [[limit]]\nname = \"pool\"\nmax_running = 1\n\n\
         [[job]]\nname = \"al\"\nschedule = \"*/2 * * * * *\"\noverlap = \"allow\"\n\
         max_concurrent = 2\nlock_at_most_for = \"6s\"\ncommand = \"sleep 5\"\n\n\
         [[job]]\nname = \"gated\"\nschedule = \"*/2 * * * * *\"\noverlap = \"allow\"\n\
         max_concurrent = 2\nlock_at_most_for = \"6s\"\nlocks = [\"shared\"]\nlimits = [\"pool\"]\n\
         command = 'echo \"$(date +%s%N) $REPLICRON_INSTANCE\" >> {starts}; sleep 5'\n",
        told = dir.join("told.txt").display(),
        starts = dir.join("gated.txt").display()
    )
}

/// The ids of `job`'s rows recorded `running` by `instance`.
fn running(rows: &[Value], instance: &str) -> Vec<i64> {
    rows.iter()
        .filter(|r| r["status"] == "running" && r["instance"] == instance)
        .filter_map(|r| r["id"].as_i64())
        .collect()
}

/// The status of each of `ids` in `job`'s history.
fn statuses(config: &Path, job: &str, ids: &[i64]) -> Vec<String> {
    let rows = history_json(config, job);
    ids.iter()
        .map(|id| {
            rows.iter()
                .find(|r| r["id"] == *id)
                .and_then(|r| r["status"].as_str())
                .unwrap_or("none")
                .to_string()
        })
        .collect()
}

/// The history of both jobs and the replicas' logs, for a failed wait.
fn explain(config: &Path, replicas: &[&Replica]) -> String {
    let mut text = String::new();
    for job in ["al", "gated"] {
        text.push_str(&format!(
            "history of {job}: {:?}\n",
            history_json(config, job)
        ));
    }
    for replica in replicas {
        text.push_str(&format!("log of {}:\n{}\n", replica.id, replica.log_text()));
    }
    text
}

fn nanos_now() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos()
}

backend_test! {
    /// Two replicas; `a` is killed (SIGKILL) while it runs bodies of both
    /// jobs. Its runs are marked `abandoned` once their instants' leases
    /// end (a 6 s lease), each told once; `b` takes the lock and the limit
    /// slot `a`'s dead run held once its lease ends; `verify` finds no run
    /// left running; and after `b` stops, no row is `running`.
    fn a_dead_replicas_allow_runs_are_abandoned_and_their_gates_freed(db: &TestDb) {
        db.migrate();
        let config = db.config(&jobs(db.dir()));
        let a = Replica::start(&config, "a", None, &[]);
        let mut b = Replica::start(&config, "b", None, &[]);
        let explain = |replicas: &[&Replica]| explain(&config, replicas);
        let (mut al, mut gated) = (Vec::new(), Vec::new());
        wait_until_or(
            "a to run bodies of both jobs at once",
            Duration::from_secs(60),
            || {
                al = running(&history_json(&config, "al"), "a");
                gated = running(&history_json(&config, "gated"), "a");
                !al.is_empty() && !gated.is_empty()
            },
            || explain(&[&a, &b]),
        );
        let since = chrono::Utc::now() - chrono::TimeDelta::seconds(60);
        a.signal(Signal::SIGKILL);
        let (killed, killed_ns) = (Instant::now(), nanos_now());
        // What `a` had running when it died (read again: a run may have
        // ended in between).
        let al: Vec<i64> = running(&history_json(&config, "al"), "a");
        let gated: Vec<i64> = running(&history_json(&config, "gated"), "a");
        wait_until_or(
            "a's runs to be marked abandoned",
            Duration::from_secs(40),
            || {
                statuses(&config, "al", &al).iter().all(|s| s == "abandoned")
                    && statuses(&config, "gated", &gated).iter().all(|s| s == "abandoned")
            },
            || explain(&[&b]),
        );
        let marked_after = killed.elapsed();
        let told = db.dir().join("told.txt");
        wait_until_or(
            "each abandoned run to be told",
            Duration::from_secs(20),
            || {
                let told = std::fs::read_to_string(&told).unwrap_or_default();
                al.iter()
                    .map(|id| format!("al abandoned {id}"))
                    .chain(gated.iter().map(|id| format!("gated abandoned {id}")))
                    .all(|line| told.lines().filter(|l| *l == line).count() == 1)
            },
            || std::fs::read_to_string(&told).unwrap_or_default(),
        );
        // The lock and the limit slot held by a's dead run free when its
        // lease ends: b runs `gated` again, within a lease and an instant.
        let starts = db.dir().join("gated.txt");
        let b_started_after = || {
            std::fs::read_to_string(&starts)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.split_once(' '))
                .filter(|(_, who)| *who == "b")
                .filter_map(|(ns, _)| ns.parse::<u128>().ok())
                .find(|ns| *ns > killed_ns)
        };
        wait_until_or(
            "b to take the gates a's dead run held",
            Duration::from_secs(20),
            || b_started_after().is_some(),
            || explain(&[&b]),
        );
        let freed_after = Duration::from_nanos(
            u64::try_from(b_started_after().unwrap_or_default() - killed_ns).unwrap_or(u64::MAX),
        );
        // Freed when the dead run's lease ran out, not at some later sweep:
        // a bound with room for a loaded host.
        assert!(freed_after < Duration::from_secs(15), "{freed_after:?}");
        let (_, verdict, err) = run(
            &config,
            &["verify", "--from", &since.to_rfc3339(), "--to", &chrono::Utc::now().to_rfc3339(), "--format", "json"],
        );
        assert!(!verdict.contains("left_running"), "{verdict}{err}");
        b.signal(Signal::SIGTERM);
        assert!(b.wait_exit(Duration::from_secs(30)).is_some(), "b did not stop");
        for job in ["al", "gated"] {
            let rows = history_json(&config, job);
            assert!(rows.iter().all(|r| r["status"] != "running"), "{job}: {rows:?}");
        }
        eprintln!(
            "a's runs {al:?} of al and {gated:?} of gated marked abandoned {marked_after:?} after the kill; \
             b took their gates {freed_after:?} after it"
        );
    }
}

/// `al` alone, on two replicas each through a proxy of its own. The
/// holder of a run is cut off: it gives the run's lease up ("lease not
/// confirmed in time") and stops it; the other replica marks the run
/// `abandoned` once its instant's lease ends; restored, the holder records
/// the run's end, `lost_lock`, over the mark. Cut off again, it gives up
/// another run's lease and is killed: that run is marked `abandoned` too.
fn given_up_in_an_outage(kind: Kind) {
    let db = TestDb::new(kind);
    db.migrate();
    let jobs = jobs(db.dir());
    let proxies = [Proxy::start(db.server()), Proxy::start(db.server())];
    let replicas: Vec<Replica> = ["p", "q"]
        .iter()
        .zip(&proxies)
        .map(|(id, proxy)| {
            let config =
                db.config_named(&format!("jobs-{id}.toml"), &db.url_via(proxy.port), &jobs);
            Replica::start(&config, id, None, &[])
        })
        .collect();
    let direct = db.config(&jobs);
    let explain = || explain(&direct, &replicas.iter().collect::<Vec<_>>());
    let cut_off = |replica: &Replica, proxy: &Proxy| -> Vec<i64> {
        let mut held = Vec::new();
        wait_until_or(
            "a run of the replica",
            Duration::from_secs(30),
            || {
                held = running(&history_json(&direct, "al"), &replica.id);
                !held.is_empty()
            },
            explain,
        );
        let gave_up = replica.log_text().matches("giving it up").count();
        proxy.cut();
        wait_until_or(
            "the cut-off replica to give its run's lease up",
            Duration::from_secs(20),
            || replica.log_text().matches("giving it up").count() > gave_up,
            explain,
        );
        held
    };

    let held = cut_off(&replicas[0], &proxies[0]);
    wait_until_or(
        "the given-up runs to be marked abandoned",
        Duration::from_secs(40),
        || {
            statuses(&direct, "al", &held)
                .iter()
                .all(|s| s == "abandoned")
        },
        explain,
    );
    proxies[0].restore();
    wait_until_or(
        "the holder to record their ends over the mark",
        Duration::from_secs(40),
        || {
            statuses(&direct, "al", &held)
                .iter()
                .all(|s| s == "lost_lock")
        },
        explain,
    );

    let held_again = cut_off(&replicas[0], &proxies[0]);
    replicas[0].signal(Signal::SIGKILL);
    wait_until_or(
        "the killed holder's given-up runs to be marked abandoned",
        Duration::from_secs(40),
        || {
            statuses(&direct, "al", &held_again)
                .iter()
                .all(|s| s == "abandoned")
        },
        explain,
    );
    eprintln!(
        "{kind:?}: runs {held:?} marked abandoned, then lost_lock once their holder was back; \
         {held_again:?} abandoned after their holder was killed"
    );
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn an_allow_run_given_up_in_an_outage_is_abandoned_mysql() {
    given_up_in_an_outage(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn an_allow_run_given_up_in_an_outage_is_abandoned_postgres() {
    given_up_in_an_outage(Kind::Postgres);
}
