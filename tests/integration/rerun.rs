//! `on_abandon = "rerun"` with real replicas, on every backend: the holder
//! of a run is killed (SIGKILL) mid-run; once its lease has ended, the
//! other replica marks the run `abandoned` and runs its instant again, once,
//! as attempt 2 under a higher fence, after the dead body's last word (its
//! guard killed it), told `REPLICRON_PREVIOUS_STATUS=abandoned` and
//! `REPLICRON_TRIGGER=retry`; `verify` counts it a rerun, not a duplicate,
//! and the rerun run is not notified as abandoned.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, history_json, run, wait_until_or};

/// `slow` every 6 s, a 3 s lease, a body of 1.5 s that writes a line at
/// its start, every 250 ms and at its end to `bodies.txt`: `EVENT INSTANT
/// ATTEMPT PREVIOUS FENCE INSTANCE TRIGGER NS`. Abandoned runs are told to
/// `told.txt`.
fn jobs(dir: &Path) -> String {
    format!(
        "[notify]\non = [\"abandoned\"]\n\
         command = 'echo \"$REPLICRON_JOB $REPLICRON_EVENT $REPLICRON_RUN_ID\" >> {told}'\n\n\
         [[job]]\nname = \"slow\"\nschedule = \"*/6 * * * * *\"\nlock_at_most_for = \"3s\"\n\
         on_abandon = \"rerun\"\n\
         command = '''r() {{ echo \"$1 $REPLICRON_SCHEDULED_AT $REPLICRON_ATTEMPT ${{REPLICRON_PREVIOUS_STATUS:-none}} $REPLICRON_FENCE $REPLICRON_INSTANCE $REPLICRON_TRIGGER $(date +%s%N)\" >> {bodies}; }}; \
         r start; i=0; while [ $i -lt 6 ]; do sleep 0.25; r tick; i=$((i+1)); done; r end'''\n",
        told = dir.join("told.txt").display(),
        bodies = dir.join("bodies.txt").display(),
    )
}

/// One line a body wrote.
#[derive(Debug, Clone)]
struct Line {
    event: String,
    instant: String,
    attempt: i64,
    previous: String,
    fence: i64,
    instance: String,
    trigger: String,
    ns: u128,
}

fn lines(dir: &Path) -> Vec<Line> {
    std::fs::read_to_string(dir.join("bodies.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() == 8).then_some(())?;
            Some(Line {
                event: f[0].to_string(),
                instant: f[1].to_string(),
                attempt: f[2].parse().ok()?,
                previous: f[3].to_string(),
                fence: f[4].parse().ok()?,
                instance: f[5].to_string(),
                trigger: f[6].to_string(),
                ns: f[7].parse().ok()?,
            })
        })
        .collect()
}

/// The rows of `slow` at `instant`, by attempt.
fn rows_at(config: &Path, instant: &str) -> Vec<Value> {
    let mut rows: Vec<Value> = history_json(config, "slow")
        .into_iter()
        .filter(|r| r["scheduled_at"] == instant)
        .collect();
    rows.sort_by_key(|r| r["attempt"].as_i64());
    rows
}

backend_test! {
    /// Two replicas; `a` is killed while it runs a body of `slow`: `b`
    /// reruns that instant once, as attempt 2, under a higher fence, after
    /// the dead body was last heard from.
    fn a_killed_holders_instant_is_rerun_once_by_the_other_replica(db: &TestDb) {
        db.migrate();
        let config = db.config(&jobs(db.dir()));
        let mut a = Replica::start(&config, "a", None, &[]);
        let mut b = Replica::start(&config, "b", None, &[]);
        let explain = |replicas: &[&Replica]| {
            let mut text = format!("history: {:?}\nbodies: {:?}\n", history_json(&config, "slow"), lines(db.dir()));
            for replica in replicas {
                text.push_str(&format!("log of {}:\n{}\n", replica.id, replica.log_text()));
            }
            text
        };
        let since = chrono::Utc::now() - chrono::TimeDelta::seconds(60);
        // A body of a's, going.
        let mut killed: Option<Line> = None;
        wait_until_or(
            "a to run a body of slow",
            Duration::from_secs(90),
            || {
                let all = lines(db.dir());
                killed = all
                    .iter()
                    .filter(|l| l.event == "start" && l.instance == "a")
                    .find(|start| {
                        !all.iter().any(|l| {
                            l.event == "end" && l.instant == start.instant && l.fence == start.fence
                        })
                    })
                    .cloned();
                killed.is_some()
            },
            || explain(&[&a, &b]),
        );
        a.signal(Signal::SIGKILL);
        let _ = a.wait_exit(Duration::from_secs(10));
        let killed = killed.expect("a body of a's");
        let instant = killed.instant.clone();
        wait_until_or(
            "b to rerun the killed body's instant",
            Duration::from_secs(40),
            || {
                let rows = rows_at(&config, &instant);
                rows.len() == 2 && rows[1]["status"] == "succeeded"
            },
            || explain(&[&b]),
        );
        let rows = rows_at(&config, &instant);
        assert_eq!(rows[0]["status"], "abandoned", "{rows:?}");
        assert_eq!(rows[0]["instance"], "a", "{rows:?}");
        assert_eq!(rows[0]["fence"].as_i64(), Some(killed.fence), "{rows:?}");
        assert_eq!(rows[1]["attempt"], 2, "{rows:?}");
        assert_eq!(rows[1]["instance"], "b", "{rows:?}");
        assert_eq!(rows[1]["triggered_by"], "retry", "{rows:?}");
        let fence = rows[1]["fence"].as_i64().expect("a fence");
        assert!(fence > killed.fence + 1, "above the dead holder's and b's claim's: {rows:?}");
        // The bodies: the rerun, once, told what it is; after the dead
        // body's last line.
        let all = lines(db.dir());
        let of_instant: Vec<&Line> = all.iter().filter(|l| l.instant == instant).collect();
        let starts: Vec<&&Line> = of_instant.iter().filter(|l| l.event == "start").collect();
        assert_eq!(starts.len(), 2, "{of_instant:?}");
        let rerun = starts[1];
        assert_eq!(
            (rerun.attempt, rerun.previous.as_str(), rerun.trigger.as_str(), rerun.fence, rerun.instance.as_str()),
            (2, "abandoned", "retry", fence, "b"),
            "{of_instant:?}"
        );
        let dead_last = of_instant
            .iter()
            .filter(|l| l.fence == killed.fence)
            .map(|l| l.ns)
            .max()
            .expect("the dead body's lines");
        assert!(
            of_instant.iter().all(|l| l.fence == killed.fence || l.ns > dead_last),
            "two bodies at once: {of_instant:?}"
        );
        assert!(
            !of_instant.iter().any(|l| l.fence == killed.fence && l.event == "end"),
            "the killed body ran to its end: {of_instant:?}"
        );
        // Every other body was a first attempt.
        assert!(
            all.iter()
                .filter(|l| l.instant != instant)
                .all(|l| l.attempt == 1 && l.previous == "none"),
            "{all:?}"
        );
        // verify: a rerun, no duplicate.
        let (_, verdict, err) = run(
            &config,
            &["verify", "--from", &since.to_rfc3339(), "--to", &chrono::Utc::now().to_rfc3339(), "--format", "json"],
        );
        let report: Value = serde_json::from_str(&verdict).unwrap_or(Value::Null);
        let slow = report["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["job"] == "slow"))
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(slow["rerun"], 1, "{verdict}{err}");
        assert!(!verdict.contains("\"duplicate\""), "{verdict}{err}");
        b.signal(Signal::SIGTERM);
        assert!(b.wait_exit(Duration::from_secs(30)).is_some(), "b did not stop");
        // The rerun instant's abandoned run is not told as abandoned: its
        // rerun took its place.
        let told = std::fs::read_to_string(db.dir().join("told.txt")).unwrap_or_default();
        let abandoned_id = rows[0]["id"].as_i64().expect("an id");
        assert!(
            !told.lines().any(|l| l == format!("slow abandoned {abandoned_id}")),
            "{told}"
        );
    }
}
