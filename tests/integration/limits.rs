//! Limits across jobs, on real processes: several replicas, several jobs
//! sharing a limit, and the slot passing from waiter to waiter in the
//! order of their instants, whichever replica's poll comes first.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::support::{Replica, TestDb, backend_test};

/// One body's run, as it wrote it: its job, its instant, when it started
/// and (if it wrote it) when it ended.
#[derive(Debug, Clone)]
struct Body {
    job: String,
    instant: DateTime<Utc>,
    start: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
}

/// The bodies written to `path`: `JOB INSTANT start|end EPOCH` lines.
fn bodies(path: &std::path::Path) -> Vec<Body> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut found: BTreeMap<(String, String), Body> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [job, instant, what, at] = parts[..] else {
            continue;
        };
        let Ok(instant) = DateTime::parse_from_rfc3339(instant) else {
            continue;
        };
        let Ok(seconds) = at.parse::<f64>() else {
            continue;
        };
        let at = DateTime::<Utc>::from_timestamp_micros((seconds * 1e6) as i64).expect("time");
        let entry = found
            .entry((job.to_string(), instant.to_rfc3339()))
            .or_insert(Body {
                job: job.to_string(),
                instant: instant.with_timezone(&Utc),
                start: at,
                end: None,
            });
        match what {
            "start" => entry.start = at,
            _ => entry.end = Some(at),
        }
    }
    found.into_values().collect()
}

backend_test! {
    /// Three jobs on three replicas share a limit of one, due more often
    /// than the limit lets them all run, so their runs wait for it. By the
    /// bodies' own evidence over a window: never two bodies at once; each
    /// job gets its share of the starts; and no body starts while an older
    /// instant of another job has been waiting for over two seconds (a
    /// waiter's place counts from its claim at its instant).
    fn a_limits_waiters_are_served_in_the_order_of_their_instants(db: &TestDb) {
        db.migrate();
        let out = db.dir().join("bodies.out");
        let job = |name: &str, schedule: &str| {
            format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\nlimits = [\"vendor\"]\n\
                 command = 'echo \"{name} $REPLICRON_SCHEDULED_AT start $(date +%s.%N)\" >> {out}; \
                 sleep 1.5; echo \"{name} $REPLICRON_SCHEDULED_AT end $(date +%s.%N)\" >> {out}'\n\n",
                out = out.display()
            )
        };
        let jobs = format!(
            "[[limit]]\nname = \"vendor\"\nmax_running = 1\n\n{}{}{}",
            job("even", "*/2 * * * * *"),
            job("odd", "1-59/2 * * * * *"),
            job("third", "*/3 * * * * *"),
        );
        let config = db.config(&jobs);
        let mut replicas: Vec<Replica> = ["r0", "r1", "r2"]
            .iter()
            .map(|id| Replica::start(&config, id, None, &[]))
            .collect();
        for replica in &replicas {
            replica.wait_for_log("replicron started", Duration::from_secs(30));
        }
        std::thread::sleep(Duration::from_secs(45));
        for replica in &replicas {
            replica.signal(nix::sys::signal::Signal::SIGTERM);
        }
        for replica in &mut replicas {
            assert!(replica.wait_exit(Duration::from_secs(60)).is_some(), "{} did not stop", replica.id);
        }
        let mut bodies = bodies(&out);
        bodies.sort_by_key(|b| b.start);
        assert!(bodies.len() >= 15, "{bodies:#?}");
        // Never two bodies at once.
        for pair in bodies.windows(2) {
            let end = pair[0].end.unwrap_or(DateTime::<Utc>::MAX_UTC);
            assert!(end <= pair[1].start, "two at once: {pair:#?}");
        }
        // Each job gets its share.
        for name in ["even", "odd", "third"] {
            let runs = bodies.iter().filter(|b| b.job == name).count();
            assert!(runs * 5 >= bodies.len(), "{name} ran {runs} of {}: {bodies:#?}", bodies.len());
        }
        // No older instant of another job passed over, once it waits (a
        // replica running late on a loaded host queues its instant
        // seconds after it, and a run that came before may take the slot
        // first).
        let slack = TimeDelta::seconds(4);
        let mut passed = Vec::new();
        for later in &bodies {
            for older in &bodies {
                if older.job != later.job
                    && older.instant < later.instant
                    && later.start < older.start
                    && older.instant + slack < later.start
                {
                    passed.push((older.clone(), later.clone()));
                }
            }
        }
        assert!(passed.is_empty(), "passed over: {passed:#?}");
    }
}
