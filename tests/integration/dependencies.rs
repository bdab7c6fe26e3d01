//! Dependent jobs and calendars across a fleet of three real processes, on
//! every backend. The evidence is what the jobs' bodies wrote themselves:
//! `start|end JOB NANOS INSTANT REPLICA` lines.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{Replica, TestDb, backend_test, fleet_of_three, history_json, wait_until};

/// The shell body of job `job`: records its start and end in `records`,
/// runs `busy`, and exits with `exit` (a shell word: `0`, or `$((…))`).
fn body(records: &std::path::Path, job: &str, busy: &str, exit: &str) -> String {
    format!(
        "echo \"start {job} $(date +%s%N) $REPLICRON_SCHEDULED_AT $REPLICRON_INSTANCE\" >> {0}; \
         sleep {busy}; \
         echo \"end {job} $(date +%s%N) $REPLICRON_SCHEDULED_AT $REPLICRON_INSTANCE\" >> {0}; \
         exit {exit}",
        records.display()
    )
}

/// One body's record.
#[derive(Clone, Debug)]
struct Ran {
    start: u128,
    end: Option<u128>,
    replica: String,
}

/// The bodies' records: job → instant → each run of it.
fn runs(records: &std::path::Path) -> BTreeMap<String, BTreeMap<String, Vec<Ran>>> {
    let text = std::fs::read_to_string(records).unwrap_or_default();
    let mut runs: BTreeMap<String, BTreeMap<String, Vec<Ran>>> = BTreeMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [what, job, nanos, instant, replica] = words[..] else {
            continue;
        };
        let Ok(nanos) = nanos.parse::<u128>() else {
            continue;
        };
        let of_instant = runs
            .entry(job.to_string())
            .or_default()
            .entry(instant.to_string())
            .or_default();
        match what {
            "start" => of_instant.push(Ran {
                start: nanos,
                end: None,
                replica: replica.to_string(),
            }),
            "end" => {
                if let Some(run) = of_instant.iter_mut().rev().find(|r| r.replica == replica) {
                    run.end = Some(nanos);
                }
            }
            _ => {}
        }
    }
    runs
}

backend_test! {
    /// Three replicas: a chain a → b → c of per-second jobs, a fan-in
    /// (a, d) → e where d fails at odd seconds, a job after d's failures,
    /// and a per-second job whose calendar excludes today. By the bodies'
    /// own records: every link ran once per instant of its parent, with
    /// the parent's instant, after the parent's body ended; e only at the
    /// instants where a and d both succeeded; the excluded job never, and
    /// nothing of it is recorded (no `missed` row either).
    fn a_chain_and_a_fan_in_run_each_link_once_in_order(db: &TestDb) {
        db.migrate();
        let records = db.dir().join("bodies.out");
        let mut today = chrono::Utc::now();
        if *today.format("%H:%M").to_string() >= *"23:58" {
            // The calendar's date must stay today for the whole test.
            std::thread::sleep((today.date_naive().succ_opt().expect("tomorrow").and_hms_opt(0, 0, 5).expect("time").and_utc() - today).to_std().expect("ahead"));
            today = chrono::Utc::now();
        }
        let odd_fails = "$(( $(date -d \"$REPLICRON_SCHEDULED_AT\" +%s) % 2 ))";
        let jobs = format!(
            "[defaults]\nmissed_after = \"2s\"\nlock_at_most_for = \"20s\"\n\n\
             [[calendar]]\nname = \"today\"\ndates = [\"{today}\"]\n\n\
             [[job]]\nname = \"a\"\nschedule = \"* * * * * *\"\ncommand = '{a}'\n\n\
             [[job]]\nname = \"b\"\nafter = [\"a\"]\ncommand = '{b}'\n\n\
             [[job]]\nname = \"c\"\nafter = [\"b\"]\ncommand = '{c}'\n\n\
             [[job]]\nname = \"d\"\nschedule = \"* * * * * *\"\ncommand = '{d}'\n\n\
             [[job]]\nname = \"e\"\nafter = [\"a\", \"d\"]\ncommand = '{e}'\n\n\
             [[job]]\nname = \"after-failure\"\nafter = {{ jobs = [\"d\"], on = [\"failed\"] }}\ncommand = '{f}'\n\n\
             [[job]]\nname = \"holiday\"\nschedule = \"* * * * * *\"\nskip_on = [\"today\"]\ncommand = '{h}'\n",
            today = today.format("%Y-%m-%d"),
            a = body(&records, "a", "0.1", "0"),
            b = body(&records, "b", "0.1", "0"),
            c = body(&records, "c", "0.1", "0"),
            d = body(&records, "d", "0.1", odd_fails),
            e = body(&records, "e", "0.1", "0"),
            f = body(&records, "after-failure", "0.1", "0"),
            h = body(&records, "holiday", "0.1", "0"),
        );
        let config = db.config(&jobs);
        let replicas = fleet_of_three(&config);
        wait_until("twelve instants of a, through to c", Duration::from_secs(60), || {
            runs(&records).get("c").map_or(0, BTreeMap::len) >= 12
        });
        drop(replicas);
        let runs = runs(&records);
        let written = std::fs::read_to_string(&records).unwrap_or_default();
        let of = |job: &str| runs.get(job).cloned().unwrap_or_default();
        let (a, b, d, e, failure) = (of("a"), of("b"), of("d"), of("e"), of("after-failure"));
        // The instants whose whole chain had time to run: all but the
        // last two seconds of a's, and none after c's latest (a loaded
        // host's replicas run the chain's hops late).
        let c_latest = of("c").keys().next_back().cloned().unwrap_or_default();
        let settled: Vec<&String> = a
            .keys()
            .rev()
            .skip(2)
            .filter(|instant| **instant <= c_latest)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        assert!(settled.len() >= 8, "{written}");
        for (child, parent, instants) in [
            ("b", &a, &settled),
            ("c", &b, &settled),
        ] {
            let children = of(child);
            for instant in instants.iter() {
                let runs = children.get(*instant).unwrap_or_else(|| panic!("{child} did not run {instant}: {written}"));
                assert_eq!(runs.len(), 1, "{child} ran {instant} {} times: {written}", runs.len());
                let parent_end = parent[*instant][0].end.expect("the parent ended");
                assert!(runs[0].start >= parent_end, "{child} at {instant} started before its parent ended: {written}");
            }
            for (instant, runs) in &children {
                assert_eq!(runs.len(), 1, "{child} ran {instant} {} times: {written}", runs.len());
                assert!(parent.contains_key(instant), "{child} ran {instant}, which its parent did not: {written}");
            }
        }
        let even = |instant: &str| {
            chrono::DateTime::parse_from_rfc3339(instant).expect("instant").timestamp() % 2 == 0
        };
        for (instant, runs) in &e {
            assert_eq!(runs.len(), 1, "e ran {instant} twice: {written}");
            assert!(even(instant) && d.contains_key(instant) && a.contains_key(instant), "e ran {instant}: {written}");
            let ends = [a[instant][0].end, d[instant][0].end];
            assert!(ends.iter().all(|end| end.is_some_and(|end| runs[0].start >= end)), "e at {instant} started before a parent ended: {written}");
        }
        for (instant, runs) in &failure {
            assert_eq!(runs.len(), 1, "after-failure ran {instant} twice: {written}");
            assert!(!even(instant), "after-failure ran {instant}, which d did not fail: {written}");
        }
        let both: Vec<&String> = settled.iter().copied().filter(|i| even(i) && d.contains_key(*i)).collect();
        assert!(!both.is_empty(), "{written}");
        for instant in both {
            assert!(e.contains_key(instant), "e did not run {instant}: {written}");
        }
        assert!(failure.len() >= 3, "{written}");
        assert!(!runs.contains_key("holiday"), "an excluded instant ran: {written}");
        assert_eq!(history_json(&config, "holiday"), Vec::<serde_json::Value>::new(), "an excluded instant was recorded");
        // The history links each run to its parents' runs.
        let history = history_json(&config, "e");
        let ids = |job: &str| -> BTreeMap<String, i64> {
            history_json(&config, job)
                .into_iter()
                .filter(|r| r["status"] == "succeeded")
                .map(|r| (r["scheduled_at"].as_str().unwrap_or_default().to_string(), r["id"].as_i64().unwrap_or_default()))
                .collect()
        };
        let (a_ids, d_ids) = (ids("a"), ids("d"));
        assert!(!history.is_empty());
        // d's failures leave e's instant recorded, not run.
        for run in history.iter().filter(|r| r["status"] != "succeeded") {
            let at = run["scheduled_at"].as_str().unwrap_or_default();
            let decided = history.iter().any(|r| r["scheduled_at"] == at && r["status"] != "missed");
            let parents_ran = a.contains_key(at) && d.contains_key(at);
            if run["status"] == "missed" && (e.contains_key(at) || decided || !parents_ran) {
                // Claimed later than its missed_after (replicas starved on
                // a loaded host, as they start): recorded missed, and then
                // run or recorded skipped; or a parent's instant was
                // missed, and so is the dependent's.
                continue;
            }
            assert!(run["status"] == "skipped" && !even(at), "{run}");
            assert_eq!(run["triggered_by"], "dependency", "{run}");
        }
        let failed_d: Vec<&String> = settled.iter().copied().filter(|i| !even(i) && d.contains_key(*i)).collect();
        assert!(!failed_d.is_empty(), "{written}");
        for instant in failed_d {
            let rows: Vec<&serde_json::Value> = history
                .iter()
                .filter(|r| r["scheduled_at"] == instant.as_str() && r["status"] != "missed")
                .collect();
            assert_eq!(rows.len(), 1, "e at {instant}: {rows:?}");
            assert_eq!(rows[0]["status"], "skipped", "{rows:?}");
        }
        for run in history.iter().filter(|r| r["status"] == "succeeded") {
            assert_eq!(run["triggered_by"], "dependency", "{run}");
            let at = run["scheduled_at"].as_str().unwrap_or_default();
            let mut want = vec![a_ids[at], d_ids[at]];
            want.sort();
            assert_eq!(run["parent_runs"], serde_json::json!(want), "{run}");
        }
        // status shows the chain.
        let (_, status, _) = crate::support::run(&config, &["status"]);
        let line = status.lines().find(|l| l.starts_with("e ")).unwrap_or_else(|| panic!("{status}"));
        assert!(line.contains("after a, d"), "{status}");
    }
}

backend_test! {
    /// A job due every 2 s and one after it, on three replicas. When a's
    /// run is recorded succeeded, the replica that ran it is killed
    /// (SIGKILL): b still runs that instant once, on another replica. The
    /// replica that ran a could have read a's end first and claimed b
    /// itself before the kill (its read every 250 ms may fall in the
    /// moment between a's record and the kill): then b's instant is
    /// claimed once all the same, and, once b's lease the dead replica
    /// held has run out and b runs again, the kill is tried again on a
    /// later instant, up to three times.
    fn killing_the_replica_that_ran_the_parent_at_its_end_still_runs_the_child_once(db: &TestDb) {
        db.migrate();
        let records = db.dir().join("bodies.out");
        let jobs = format!(
            "[defaults]\nlock_at_most_for = \"6s\"\nmissed_after = \"3s\"\n\n\
             [[job]]\nname = \"a\"\nschedule = \"*/2 * * * * *\"\ncommand = '{a}'\n\n\
             [[job]]\nname = \"b\"\nafter = [\"a\"]\ncommand = '{b}'\n",
            a = body(&records, "a", "0.3", "0"),
            b = body(&records, "b", "0.2", "0"),
        );
        let config = db.config(&jobs);
        let mut replicas: Vec<Option<Replica>> = fleet_of_three(&config).into_iter().map(Some).collect();
        let mut proven = None;
        for _ in 0..3 {
            // The next instant of a that starts from now on.
            let seen = runs(&records).get("a").map_or(0, BTreeMap::len);
            wait_until("a's next run", Duration::from_secs(20), || {
                runs(&records).get("a").map_or(0, BTreeMap::len) > seen
            });
            let a = runs(&records)["a"].clone();
            let (instant, run) = a.iter().next_back().map(|(i, r)| (i.clone(), r[0].clone())).expect("a run");
            let victim = run.replica.clone();
            // Its row says succeeded: kill the replica that ran it.
            wait_until("a's run recorded", Duration::from_secs(10), || {
                history_json(&config, "a")
                    .iter()
                    .any(|r| r["scheduled_at"] == instant.as_str() && r["status"] == "succeeded")
            });
            let index: usize = victim.trim_start_matches('r').parse().expect("r0, r1 or r2");
            let mut replica = replicas[index].take().expect("alive");
            replica.signal(nix::sys::signal::Signal::SIGKILL);
            let _ = replica.wait_exit(Duration::from_secs(10));
            drop(replica);
            // b's instant: once, whoever ran it.
            crate::support::wait_until_or(
                "b's run of the instant",
                Duration::from_secs(30),
                || {
                    runs(&records).get("b").is_some_and(|b| b.get(&instant).is_some_and(|r| r.iter().any(|r| r.end.is_some())))
                        || history_json(&config, "b").iter().any(|r| r["scheduled_at"] == instant.as_str())
                },
                || {
                    let logs: Vec<String> = replicas.iter().flatten().map(Replica::log_text).collect();
                    format!(
                        "instant {instant}, victim {victim}\na: {:?}\nb: {:?}\n{}",
                        history_json(&config, "a"),
                        history_json(&config, "b"),
                        logs.join("\n----\n")
                    )
                },
            );
            std::thread::sleep(Duration::from_secs(1));
            let written = std::fs::read_to_string(&records).unwrap_or_default();
            let b_runs = runs(&records).get("b").and_then(|b| b.get(&instant).cloned()).unwrap_or_default();
            assert!(b_runs.len() <= 1, "b ran {instant} twice: {written}");
            let rows: Vec<serde_json::Value> = history_json(&config, "b")
                .into_iter()
                .filter(|r| r["scheduled_at"] == instant.as_str())
                .collect();
            assert!(rows.len() <= 1, "{rows:?}");
            if let [run] = &b_runs[..]
                && run.replica != victim
            {
                wait_until("b's row ends", Duration::from_secs(10), || {
                    history_json(&config, "b")
                        .iter()
                        .any(|r| r["scheduled_at"] == instant.as_str() && r["status"] == "succeeded")
                });
                proven = Some((instant, victim, run.replica.clone()));
                break;
            }
            // The victim claimed b before it died: its lease of b holds b's
            // instants off (overruns) until it runs out. Start a replica in
            // its place, wait for b to run a later instant, and try again.
            replicas[index] = Some(Replica::start(&config, &victim, None, &[]));
            replicas[index].as_ref().expect("started").wait_for_log("replicron started", Duration::from_secs(30));
            wait_until("b runs again", Duration::from_secs(30), || {
                history_json(&config, "b").iter().any(|r| {
                    r["status"] == "succeeded" && r["scheduled_at"].as_str().is_some_and(|at| at > instant.as_str())
                })
            });
        }
        let (instant, victim, runner) = proven.expect("in three tries, the replica that ran a died before reading its end");
        assert_ne!(victim, runner);
        // And every instant of b, before and after, ran at most once.
        std::thread::sleep(Duration::from_secs(3));
        drop(replicas);
        let written = std::fs::read_to_string(&records).unwrap_or_default();
        for (at, runs) in runs(&records).get("b").cloned().unwrap_or_default() {
            assert_eq!(runs.len(), 1, "b ran {at} {} times: {written}", runs.len());
        }
        let _ = instant;
    }
}

/// The instants (RFC 3339, as the history prints them) at which every one
/// of `jobs` has a `succeeded` row.
fn all_succeeded(config: &std::path::Path, jobs: &[&str]) -> Vec<String> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for job in jobs {
        for row in history_json(config, job) {
            if row["status"] == "succeeded" {
                *count
                    .entry(row["scheduled_at"].as_str().unwrap_or_default().to_string())
                    .or_default() += 1;
            }
        }
    }
    count
        .into_iter()
        .filter(|(_, n)| *n == jobs.len())
        .map(|(at, _)| at)
        .collect()
}

/// `job`'s rows by instant: each instant's statuses.
fn statuses(config: &std::path::Path, job: &str) -> BTreeMap<String, Vec<String>> {
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in history_json(config, job) {
        by.entry(row["scheduled_at"].as_str().unwrap_or_default().to_string())
            .or_default()
            .push(row["status"].as_str().unwrap_or_default().to_string());
    }
    by
}

/// Holds every write of `db`'s lease and run tables off for `span`, on a
/// thread of its own, while reads pass (MariaDB: `LOCK TABLES … READ`;
/// PostgreSQL: EXCLUSIVE mode). Only this test's database stalls: a
/// server-wide `FLUSH TABLES WITH READ LOCK` would stall every other
/// test's database on the shared server too.
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn stall(db: &TestDb, span: Duration) -> std::thread::JoinHandle<()> {
    use diesel::connection::SimpleConnection;
    let (sql, release) = match db.kind {
        crate::databases::Kind::Postgres => (
            "BEGIN; LOCK TABLE replicron_locks, replicron_runs IN EXCLUSIVE MODE",
            "COMMIT",
        ),
        _ => (
            "LOCK TABLES replicron_locks READ, replicron_runs READ",
            "UNLOCK TABLES",
        ),
    };
    let mut conn = db.raw();
    std::thread::spawn(move || {
        conn.batch_execute(sql).expect("stall");
        std::thread::sleep(span);
        conn.batch_execute(release).expect("release");
    })
}

/// Two per-second parents and a fan-in after them, on two replicas. The
/// lease and run tables take no write for 14 s: when it does again, the parents' ends
/// of the instants held back arrive together. They are a backlog, not
/// overruns of the child's first run: in the fault-free time after the
/// stall, the child has a run (or a recorded skip) for every instant at
/// which both parents succeeded, nothing `missed`, and it ran most of them.
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn a_fan_ins_backlog_after_a_stall_is_run(db: &TestDb) {
    db.migrate();
    let quick = "true";
    let jobs = format!(
        "[defaults]\nlock_at_most_for = \"30s\"\n\n\
         [[job]]\nname = \"sec1\"\nschedule = \"* * * * * *\"\ncommand = \"{quick}\"\n\n\
         [[job]]\nname = \"sec2\"\nschedule = \"* * * * * *\"\ncommand = \"{quick}\"\n\n\
         [[job]]\nname = \"child1\"\nafter = [\"sec1\", \"sec2\"]\ncommand = \"{quick}\"\n",
    );
    let config = db.config(&jobs);
    let replicas: Vec<Replica> = ["r0", "r1"]
        .iter()
        .map(|id| Replica::start(&config, id, None, &[]))
        .collect();
    for replica in &replicas {
        replica.wait_for_log("replicron started", Duration::from_secs(30));
    }
    wait_until("the child's first runs", Duration::from_secs(30), || {
        history_json(&config, "child1")
            .iter()
            .filter(|r| r["status"] == "succeeded")
            .count()
            >= 3
    });
    let first = history_json(&config, "child1")
        .iter()
        .filter_map(|r| r["scheduled_at"].as_str().map(str::to_string))
        .min()
        .expect("a run");
    stall(db, Duration::from_secs(14))
        .join()
        .expect("the stall");
    let healed = chrono::Utc::now();
    let until = (healed + chrono::TimeDelta::seconds(15))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    // Every instant until 15 s after the stall at which both parents
    // succeeded has the child's row.
    let accounted = || {
        let both = all_succeeded(&config, &["sec1", "sec2"]);
        let child = statuses(&config, "child1");
        both.iter().any(|at| *at > until)
            && both
                .iter()
                .filter(|at| **at >= first && **at <= until)
                .all(|at| child.contains_key(at))
    };
    crate::support::wait_until_or(
        "a row of the child for each instant",
        Duration::from_secs(45),
        accounted,
        || {
            format!(
                "both: {:?}\nchild: {:?}\n{}",
                all_succeeded(&config, &["sec1", "sec2"]),
                statuses(&config, "child1"),
                replicas
                    .iter()
                    .map(Replica::log_text)
                    .collect::<Vec<_>>()
                    .join("\n----\n")
            )
        },
    );
    drop(replicas);
    let both = all_succeeded(&config, &["sec1", "sec2"]);
    let child = statuses(&config, "child1");
    let judged: Vec<&String> = both
        .iter()
        .filter(|at| **at >= first && **at <= until)
        .collect();
    assert!(judged.len() >= 15, "{judged:?}");
    let mut ran = 0;
    for at in &judged {
        let rows = &child[*at];
        assert_eq!(rows.len(), 1, "{at}: {rows:?}");
        assert!(
            rows[0] == "succeeded" || rows[0] == "skipped",
            "{at}: {rows:?}"
        );
        ran += usize::from(rows[0] == "succeeded");
    }
    // Most of the backlog runs (the old code ran none of it); an instant
    // whose parents ended while a loaded machine's run of the child was
    // really going is a recorded overrun, checked above.
    assert!(
        ran * 2 >= judged.len(),
        "ran {ran} of {}: {child:?}",
        judged.len()
    );
}

#[cfg(feature = "mysql")]
#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn a_fan_ins_backlog_after_a_stall_is_run_mysql() {
    a_fan_ins_backlog_after_a_stall_is_run(&TestDb::mysql());
}

#[cfg(feature = "postgres")]
#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn a_fan_ins_backlog_after_a_stall_is_run_postgres() {
    a_fan_ins_backlog_after_a_stall_is_run(&TestDb::postgres());
}

backend_test! {
    /// A per-second parent and two children whose runs take 2.5 s, on two
    /// replicas: `s` (overlap "skip") and `q` (overlap "queue"). Every
    /// instant of the parent has exactly one row of each child: a run, or
    /// `skipped` for an instant whose parent ended while the child's run
    /// went (for `q`, all but the one that waited). `q` keeps no backlog.
    /// `verify` holds each child against its parent's runs: clean, then
    /// an instant whose row is taken away is `unaccounted`.
    fn a_childs_overruns_are_recorded_and_its_queue_is_bounded(db: &TestDb) {
        db.migrate();
        let records = db.dir().join("bodies.out");
        let jobs = format!(
            "[defaults]\nlock_at_most_for = \"30s\"\nmissed_after = \"10s\"\n\n\
             [[job]]\nname = \"p\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\n\
             [[job]]\nname = \"s\"\nafter = [\"p\"]\ncommand = '{s}'\n\n\
             [[job]]\nname = \"q\"\nafter = [\"p\"]\noverlap = \"queue\"\ncommand = '{q}'\n",
            s = body(&records, "s", "2.5", "0"),
            q = body(&records, "q", "2.5", "0"),
        );
        let config = db.config(&jobs);
        let replicas: Vec<Replica> = ["r0", "r1"].iter().map(|id| Replica::start(&config, id, None, &[])).collect();
        for replica in &replicas {
            replica.wait_for_log("replicron started", Duration::from_secs(30));
        }
        wait_until("eighteen instants of p", Duration::from_secs(40), || {
            all_succeeded(&config, &["p"]).len() >= 18
        });
        // The instants judged: up to the sixteenth of p. Each child is done
        // with them within two of its runs, unless it keeps a backlog.
        let parent: Vec<String> = all_succeeded(&config, &["p"]).into_iter().take(16).collect();
        let settled = || {
            let (s, q) = (statuses(&config, "s"), statuses(&config, "q"));
            let first = |rows: &BTreeMap<String, Vec<String>>| rows.keys().next().cloned().unwrap_or_default();
            let (fs, fq) = (first(&s), first(&q));
            parent.iter().all(|at| (*at < fs || s.contains_key(at)) && (*at < fq || q.contains_key(at)))
                && !s.is_empty()
                && !q.is_empty()
        };
        crate::support::wait_until_or("a row of each child for each instant", Duration::from_secs(40), settled, || {
            format!("p: {parent:?}\ns: {:?}\nq: {:?}", statuses(&config, "s"), statuses(&config, "q"))
        });
        // From the first instant both children have a row of.
        let first = ["s", "q"]
            .iter()
            .filter_map(|job| statuses(&config, job).keys().next().cloned())
            .max()
            .expect("a child's row");
        let written = std::fs::read_to_string(&records).unwrap_or_default();
        for child in ["s", "q"] {
            let rows = statuses(&config, child);
            let mut skipped = 0;
            for at in parent.iter().filter(|at| **at >= first) {
                // An instant claimed later than its `missed_after` (a
                // loaded machine) is recorded missed and then run.
                let of: Vec<&String> = rows[at].iter().filter(|s| *s != "missed").collect();
                assert_eq!(of.len(), 1, "{child} at {at}: {:?}", rows[at]);
                assert!(["succeeded", "running", "skipped"].contains(&of[0].as_str()), "{child} at {at}: {of:?}");
                skipped += usize::from(of[0] == "skipped");
            }
            assert!(skipped >= 4, "{child}: {rows:?}");
            // By the bodies: never two at once, each instant once.
            let ran = runs(&records).get(child).cloned().unwrap_or_default();
            let mut spans: Vec<(u128, u128)> = Vec::new();
            for (at, of) in &ran {
                assert_eq!(of.len(), 1, "{child} ran {at} twice: {written}");
                spans.push((of[0].start, of[0].end.unwrap_or(u128::MAX)));
            }
            spans.sort();
            assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{child} overlapped: {written}");
        }
        // verify: the children against their parent's runs.
        let (from, to) = (first.clone(), parent[parent.len() - 1].clone());
        let verify = |job: &str| {
            crate::support::run(&config, &["verify", "--from", &from, "--to", &to, "--job", job, "--format", "json"])
        };
        for child in ["s", "q"] {
            let (code, out, err) = verify(child);
            assert_eq!(code, 0, "{child}: {out}{err}");
        }
        // With the fleet stopped, nothing records a missing row: one taken
        // away is unaccounted once its instant has settled.
        drop(replicas);
        let gone = history_json(&config, "s")
            .into_iter()
            .find(|r| r["status"] == "succeeded" && r["scheduled_at"].as_str().is_some_and(|at| at > from.as_str() && at < to.as_str()))
            .expect("a run of s");
        let mut conn = db.raw();
        diesel::connection::SimpleConnection::batch_execute(
            &mut conn,
            &format!(
                "DELETE FROM replicron_run_parents WHERE run_id = {id}; DELETE FROM replicron_runs WHERE id = {id}",
                id = gone["id"]
            ),
        )
        .expect("delete");
        wait_until("verify judges the instant", Duration::from_secs(40), || verify("s").0 == 1);
        let (code, out, err) = verify("s");
        assert_eq!(code, 1, "{out}{err}");
        let report: serde_json::Value = serde_json::from_str(&out).expect("json");
        let found: Vec<(String, String)> = report["violations"]
            .as_array()
            .expect("violations")
            .iter()
            .map(|v| (v["kind"].as_str().unwrap_or("").to_string(), v["instant"].as_str().unwrap_or("").to_string()))
            .collect();
        assert_eq!(found, [("unaccounted".to_string(), gone["scheduled_at"].as_str().unwrap_or("").to_string())], "{out}");
    }
}
