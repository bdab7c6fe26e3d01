//! A schedule of several entries, each with its own params, on a fleet of
//! real processes on every backend: each instant runs once, with the
//! params of the first entry that has it; a backfill of past instants
//! gives them the same.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

use crate::support::{TestDb, backend_test, fleet_of_three, history_json, run, wait_until};

/// The lines the bodies wrote: each instant with the params it ran with.
fn ran(out: &std::path::Path) -> Vec<(DateTime<Utc>, String)> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (at, region) = line.split_once(' ')?;
            let at = DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc);
            Some((at, region.to_string()))
        })
        .collect()
}

/// What `instant` of `*/2` (R=two) and `*/3` (R=three) runs with: the
/// first entry's, where both have it.
fn expected(instant: DateTime<Utc>) -> &'static str {
    if instant.timestamp() % 2 == 0 {
        "two"
    } else {
        "three"
    }
}

backend_test! {
    /// Three replicas, a job every 2 s giving R=two and every 3 s giving
    /// R=three (every 6 s both: the first entry's). Each instant ran once,
    /// with its entry's params, recorded in the history with the job's
    /// default for the param the entries do not give; a backfill of
    /// instants from before the fleet started gives them the same.
    fn each_entry_runs_its_instants_with_its_params(db: &TestDb) {
        db.migrate();
        let out = db.dir().join("ran.out");
        let config = db.config(&format!(
            "[[job]]\nname = \"r\"\n\
             schedule = [{{ cron = \"*/2 * * * * *\", params = {{ R = \"two\" }} }}, \
             {{ cron = \"*/3 * * * * *\", timezone = \"Asia/Kolkata\", params = {{ R = \"three\" }} }}]\n\
             params = [\"R=none\", \"FORMAT=csv\"]\n\
             command = 'echo \"$REPLICRON_SCHEDULED_AT $R $FORMAT\" >> {}'\n",
            out.display()
        ));
        let started = Utc::now();
        let replicas = fleet_of_three(&config);
        wait_until("twelve runs", Duration::from_secs(60), || ran(&out).len() >= 12);
        drop(replicas);
        let lines = ran(&out);
        let mut seen: BTreeMap<DateTime<Utc>, usize> = BTreeMap::new();
        for (instant, params) in &lines {
            *seen.entry(*instant).or_default() += 1;
            assert!(instant.timestamp() % 2 == 0 || instant.timestamp() % 3 == 0, "{lines:?}");
            assert_eq!(params, &format!("{} csv", expected(*instant)), "{instant}: {lines:?}");
        }
        assert!(seen.values().all(|n| *n == 1), "an instant ran twice: {lines:?}");
        assert!(seen.keys().any(|i| i.timestamp() % 6 == 0), "no shared instant: {lines:?}");
        for row in history_json(&config, "r").iter().filter(|r| r["status"] == "succeeded") {
            let at = DateTime::parse_from_rfc3339(row["scheduled_at"].as_str().expect("instant"))
                .expect("rfc3339")
                .with_timezone(&Utc);
            assert_eq!(row["params"]["R"], expected(at), "{row}");
            assert_eq!(row["params"]["FORMAT"], "csv", "{row}");
        }

        // Six seconds from a multiple of six, a minute before the fleet
        // started: +0 and +2 and +4 give R=two, +3 R=three.
        std::fs::remove_file(&out).expect("reset");
        let from = DateTime::from_timestamp((started - TimeDelta::seconds(60)).timestamp() / 6 * 6, 0)
            .expect("time");
        let text = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let (code, said, err) = run(
            &config,
            &["backfill", "r", "--from", &text(from), "--to", &text(from + TimeDelta::seconds(6))],
        );
        assert_eq!(code, 0, "{said}{err}");
        let backfilled: Vec<(i64, String)> =
            ran(&out).into_iter().map(|(t, p)| ((t - from).num_seconds(), p)).collect();
        assert_eq!(
            backfilled,
            vec![
                (0, "two csv".to_string()),
                (2, "two csv".to_string()),
                (3, "three csv".to_string()),
                (4, "two csv".to_string()),
            ],
            "{said}"
        );
    }
}
