//! `replicron verify` on every backend: a clean run of three replicas is
//! clean; each kind of violation, planted in the tables by hand, is found,
//! named with its job, instant, rows and replicas, and exits 1; bad input
//! exits 2.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use nix::sys::signal::Signal;

use crate::support::{Replica, TestDb, backend_test, history_json, sql_time, text, wait_until};

fn verify(config: &std::path::Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut all = vec!["verify", "--config", config.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let output = crate::support::replicron(&all);
    let (out, err) = text(&output);
    let report = serde_json::from_str(&out).unwrap_or(serde_json::Value::Null);
    (
        output.status.code().unwrap_or(-1),
        report,
        format!("{out}{err}"),
    )
}

fn parse(t: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(t)
        .expect("time")
        .with_timezone(&chrono::Utc)
}

backend_test! {
    fn verify_is_clean_on_a_clean_fleet_and_names_each_violation(db: &TestDb) {
        let config = db.config(
            "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nmissed_after = \"2s\"\ncommand = \"true\"\n",
        );
        let replicas: Vec<Replica> = ["v1", "v2", "v3"]
            .iter()
            .map(|id| Replica::start(&config, id, None, &[]))
            .collect();
        // Eight that succeeded: the planting below takes the eighth (a first
        // instant recorded `missed` does not count).
        wait_until("eight runs", Duration::from_secs(30), || {
            history_json(&config, "tick")
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .count()
                >= 8
        });
        for replica in &replicas {
            replica.signal(Signal::SIGTERM);
        }
        for mut replica in replicas {
            assert!(replica.wait_exit(Duration::from_secs(30)).is_some_and(|s| s.success()));
        }
        // Every instant settled: past missed_after and a round of the check.
        std::thread::sleep(Duration::from_secs(4));
        // The runs in the order of their instants. A first instant that
        // came while the replicas were still starting is recorded `missed`
        // by the check, after later instants ran (so with a later id): it
        // is left out.
        let mut runs: Vec<_> = history_json(&config, "tick")
            .into_iter()
            .filter(|r| r["status"] == "succeeded")
            .collect();
        runs.sort_by(|a, b| {
            let key = |r: &serde_json::Value| r["scheduled_at"].as_str().unwrap_or("").to_string();
            key(a).cmp(&key(b))
        });
        let instants: Vec<String> = runs
            .iter()
            .map(|r| r["scheduled_at"].as_str().expect("instant").to_string())
            .collect();
        // The first instant may have come before the job's row existed; the
        // range ends after the last (`--to` is not included).
        let from = instants[1].clone();
        let to = (parse(&instants[instants.len() - 1]) + chrono::TimeDelta::seconds(1))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let (code, report, out) = verify(&config, &["--from", &from, "--to", &to]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(report["clean"], true, "{out}");
        let due = report["jobs"][0]["due"].as_u64().expect("due");
        assert_eq!(report["jobs"][0]["ran"].as_u64(), Some(due), "{out}");
        let text_output = crate::support::replicron(&[
            "verify", "--config", config.to_str().expect("utf-8"), "--from", &from, "--to", &to,
        ]);
        assert!(text(&text_output).0.contains("clean"), "{:?}", text(&text_output));

        // Plant one of each kind, on instants inside the range.
        let at = |i: usize| parse(&instants[i]);
        let id = |i: usize| runs[i]["id"].as_i64().expect("id");
        let mut conn = db.raw();
        conn.batch_execute(&format!(
            "DELETE FROM replicron_runs WHERE id = {gone}; \
             UPDATE replicron_runs SET started_at = '{early}' WHERE id = {early_id}; \
             UPDATE replicron_runs SET finished_at = '{long}' WHERE id = {long_id}; \
             UPDATE replicron_runs SET status = 'running', finished_at = NULL WHERE id = {left_id}",
            gone = id(2),
            early = sql_time(at(3) - chrono::TimeDelta::milliseconds(700)),
            early_id = id(3),
            // Past the next run's start, however late that started.
            long = sql_time(parse(runs[5]["started_at"].as_str().expect("started")) + chrono::TimeDelta::milliseconds(500)),
            long_id = id(4),
            left_id = id(6),
        ))
        .expect("plant");
        let (code, report, out) = verify(&config, &["--from", &from, "--to", &to]);
        assert_eq!(code, 1, "{out}");
        assert_eq!(report["clean"], false);
        let found: Vec<(String, String)> = report["violations"]
            .as_array()
            .expect("violations")
            .iter()
            .map(|v| {
                (
                    v["kind"].as_str().unwrap_or("").to_string(),
                    v["instant"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        for (kind, instant) in [
            ("unaccounted", &instants[2]),
            ("early", &instants[3]),
            ("overlap", &instants[5]),
            ("left_running", &instants[6]),
        ] {
            assert!(
                found.iter().any(|(k, i)| k == kind && i == instant),
                "{kind} at {instant} not found: {found:?}\n{out}"
            );
        }
        let violations = report["violations"].as_array().expect("violations");
        let unaccounted = violations
            .iter()
            .find(|v| v["kind"] == "unaccounted")
            .expect("unaccounted");
        assert_eq!(unaccounted["job"], "tick");
        let overlap = violations.iter().find(|v| v["kind"] == "overlap").expect("overlap");
        assert_eq!(overlap["runs"].as_array().map(Vec::len), Some(2), "{overlap}");
        assert!(!overlap["replicas"].as_array().expect("replicas").is_empty());

        // A second run of one instant, under another lease.
        let dup = &runs[7];
        // Copied from the row, times as the backend wrote them.
        conn.batch_execute(&format!(
            "INSERT INTO replicron_runs (job, scheduled_at, attempt, instance, fence, started_at, finished_at, status, output, scope) \
             SELECT job, scheduled_at, 2, 'intruder', fence + 1000, started_at, finished_at, 'succeeded', '', '' \
             FROM replicron_runs WHERE id = {}",
            dup["id"].as_i64().expect("id"),
        ))
        .expect("plant a duplicate");
        let (code, report, out) = verify(&config, &["--from", &from, "--to", &to, "--job", "tick"]);
        assert_eq!(code, 1);
        assert!(
            report["violations"]
                .as_array()
                .expect("violations")
                .iter()
                .any(|v| v["kind"] == "duplicate" && v["instant"] == dup["scheduled_at"]),
            "{out}"
        );

        // Bad input: exit 2, naming what is wrong.
        let (code, _, out) = verify(&config, &["--from", &to, "--to", &from]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("is not before"), "{out}");
        let (code, _, out) = verify(&config, &["--from", &from, "--to", &to, "--job", "nope"]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("no job named \"nope\""), "{out}");
        let (code, _, out) = verify(&config, &["--from", "yesterday", "--to", &to]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("RFC 3339"), "{out}");
    }
}
