//! A burst shared by the fleet, on every backend: three replicas whose
//! jobs are all due at one instant each run a share of it, every instant
//! runs once, and the share of a replica killed while the registry still
//! lists it is stolen by the others.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nix::sys::signal::Signal;

use crate::database_time::{Line, read_lines};
use crate::support::{Replica, TestDb, backend_test, wait_until, wait_until_or};

const JOBS: usize = 45;
/// A run's line, `job instant instance 0`, written by the shell alone.
const RECORD: &str =
    r#"echo "$REPLICRON_JOB $REPLICRON_SCHEDULED_AT $REPLICRON_INSTANCE 0" >> "$OUT""#;
/// The bursts come every this many seconds.
const EVERY: i64 = 5;

/// `JOBS` jobs due together every [`EVERY`] seconds, recording into `out`;
/// a lease left by a killed replica ends within 3 s, before the next burst.
fn burst_jobs(out: &Path) -> String {
    let defaults = "[defaults]\nlock_at_most_for = \"3s\"\n\n".to_string();
    defaults
        + &(0..JOBS)
            .map(|n| {
                format!(
                    "[[job]]\nname = \"job-{n:02}\"\nschedule = \"*/{EVERY} * * * * *\"\n\
                 command = '{RECORD}'\nenv = {{ OUT = {out:?} }}\n\n"
                )
            })
            .collect::<String>()
}

/// The first burst instant at or after `t`.
fn burst_at_or_after(t: DateTime<Utc>) -> DateTime<Utc> {
    let secs = t.timestamp();
    let next = (secs + EVERY - 1).div_euclid(EVERY) * EVERY;
    DateTime::from_timestamp(next, 0).expect("a time")
}

/// The lines of `burst`, by replica; panics if a job ran twice there.
fn shares(lines: &[Line], burst: DateTime<Utc>) -> BTreeMap<String, usize> {
    let mut jobs: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_replica: BTreeMap<String, usize> = BTreeMap::new();
    for line in lines.iter().filter(|l| l.instant == burst) {
        *jobs.entry(&line.job).or_default() += 1;
        *by_replica.entry(line.instance.clone()).or_default() += 1;
    }
    let twice: Vec<_> = jobs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "run twice at {burst}: {twice:?}");
    by_replica
}

/// Waits until every job of `burst` has run.
fn wait_for_burst(out: &Path, burst: DateTime<Utc>, replicas: &[Replica]) {
    wait_until_or(
        &format!("every job of the burst at {burst}"),
        Duration::from_secs(30),
        || {
            read_lines(out)
                .iter()
                .filter(|l| l.instant == burst)
                .count()
                >= JOBS
        },
        || {
            let mut logs: String = replicas.iter().map(Replica::log_text).collect();
            logs.push_str(&format!("{:?}", shares(&read_lines(out), burst)));
            logs
        },
    );
}

backend_test! {
    /// Three replicas, 45 jobs due every 5 s. Once each has heard of the
    /// others (a heartbeat after the last one started), each runs at least
    /// half its fair share (15 of 90) of two bursts. Then one is killed:
    /// the registry lists it live for 30 s more, and its share of the next
    /// bursts is stolen by the two others. Every job of every burst runs
    /// exactly once throughout.
    fn a_burst_is_shared_by_the_replicas_and_a_killed_ones_share_is_stolen(db: &TestDb) {
        let out = db.dir().join("runs.txt");
        let config = db.config(&burst_jobs(&out));
        db.migrate();
        let mut replicas: Vec<Replica> = ["r0", "r1", "r2"]
            .iter()
            .map(|id| Replica::start(&config, id, None, &[]))
            .collect();
        for replica in &replicas {
            replica.wait_for_log("replicron started", Duration::from_secs(30));
        }
        // Each replica beats every 10 s: by then every one knows all three.
        let known = Utc::now() + TimeDelta::seconds(11);
        let first = burst_at_or_after(known);
        let shared = [first, first + TimeDelta::seconds(EVERY)];
        let mut total: BTreeMap<String, usize> = BTreeMap::new();
        for burst in shared {
            wait_for_burst(&out, burst, &replicas);
            for (id, n) in shares(&read_lines(&out), burst) {
                *total.entry(id).or_default() += n;
            }
        }
        for id in ["r0", "r1", "r2"] {
            let share = total.get(id).copied().unwrap_or(0);
            assert!(
                share >= shared.len() * JOBS / 3 / 2,
                "{id} ran {share} of the bursts at {shared:?}: {total:?}"
            );
        }

        // Killed halfway to the next burst, its runs of the last one ended
        // (a lease it still held would make the next instant an overrun).
        let halfway = shared[1] + TimeDelta::milliseconds(EVERY * 1000 / 2);
        wait_until("halfway to the next burst", Duration::from_secs(EVERY as u64 * 2), || {
            Utc::now() >= halfway
        });
        let victim = replicas.pop().expect("three replicas");
        victim.signal(Signal::SIGKILL);
        let next = burst_at_or_after(Utc::now());
        let stolen = [next, next + TimeDelta::seconds(EVERY)];
        for burst in stolen {
            wait_for_burst(&out, burst, &replicas);
            let shares = shares(&read_lines(&out), burst);
            assert!(!shares.contains_key("r2"), "the killed replica ran at {burst}: {shares:?}");
        }
        for replica in &replicas {
            replica.signal(Signal::SIGTERM);
        }
        let lines = read_lines(&out);
        let mut runs: BTreeMap<(&str, DateTime<Utc>), usize> = BTreeMap::new();
        for line in &lines {
            *runs.entry((&line.job, line.instant)).or_default() += 1;
        }
        let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "instants run more than once: {twice:?}");
    }
}
