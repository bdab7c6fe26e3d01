//! One-time runs across a fleet of real processes, on every backend: a run
//! planned with `trigger --at`, and a job written `at` an instant.

use std::time::Duration;

use chrono::{SecondsFormat, TimeDelta, Utc};
use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, history_json, run, wait_until};
use crate::web::{TOKEN, free_ports, post_json};

/// A time `ahead` of now, in whole seconds, as RFC 3339.
fn whole_seconds_from_now(ahead: TimeDelta) -> String {
    (Utc::now() + ahead).to_rfc3339_opts(SecondsFormat::Secs, true)
}

backend_test! {
    /// Two replicas and a `@manual` job: `trigger --at` a time to come
    /// stores a one-time run, which runs once across the fleet at its
    /// instant, with its parameters, recorded `manual` and in the audit
    /// log; a time past and the same instant again are refused (exit 2).
    /// The API's trigger with `at` plans one the same way.
    fn a_run_planned_with_trigger_at_runs_once_at_its_time(db: &TestDb) {
        db.migrate();
        let out = db.dir().join("report.out");
        let jobs = format!(
            "[web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"report\"\nschedule = \"@manual\"\nparams = [\"DAYS=1\"]\n\
             command = 'echo \"$DAYS|$REPLICRON_JOB\" >> {}'\n",
            out.display()
        );
        let config = db.config(&jobs);
        let ports = free_ports::<2>();
        let replicas: Vec<Replica> = ports
            .iter()
            .enumerate()
            .map(|(n, port)| {
                let own = db.config_named(
                    &format!("r{n}.toml"),
                    &db.url,
                    &format!("[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n{jobs}"),
                );
                Replica::start(&own, &format!("r{n}"), None, &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)])
            })
            .collect();
        for replica in &replicas {
            replica.wait_for_log("replicron started", Duration::from_secs(30));
        }
        let past = whole_seconds_from_now(-TimeDelta::hours(1));
        let (code, said, err) = run(&config, &["trigger", "report", "--at", &past]);
        assert_eq!(code, 2, "{said}{err}");
        assert!(err.contains("is not after the database's now"), "{err}");
        let (code, said, err) = run(&config, &["trigger", "report", "--at", &past, "--force"]);
        assert_eq!(code, 2, "{said}{err}");

        let at = whole_seconds_from_now(TimeDelta::seconds(15));
        let (code, said, err) = run(&config, &["trigger", "report", "--at", &at, "--param", "DAYS=5"]);
        assert_eq!(code, 0, "{said}{err}");
        assert!(said.contains("report: planned once at"), "{said}");
        let (code, said, err) = run(&config, &["trigger", "report", "--at", &at]);
        assert_eq!(code, 2, "{said}{err}");
        assert!(err.contains("is planned already"), "{err}");
        assert_eq!(history_json(&config, "report"), Vec::<Value>::new());
        let (_, status, err) = run(&config, &["status"]);
        assert!(status.contains("of report planned at"), "{status}{err}");

        wait_until("the one-time run", Duration::from_secs(60), || {
            history_json(&config, "report").iter().any(|r| r["status"] == "succeeded")
        });
        // Long enough for a second run, had any replica started one.
        std::thread::sleep(Duration::from_secs(6));
        let rows = history_json(&config, "report");
        assert_eq!(rows.len(), 1, "{rows:?}");
        let instant = chrono::DateTime::parse_from_rfc3339(&at).expect("at");
        let scheduled = rows[0]["scheduled_at"].as_str().expect("scheduled_at");
        assert_eq!(
            chrono::DateTime::parse_from_rfc3339(scheduled).expect("scheduled_at"),
            instant,
            "{rows:?}"
        );
        assert_eq!(rows[0]["triggered_by"], "manual", "{rows:?}");
        assert_eq!(rows[0]["params"], serde_json::json!({"DAYS": "5"}), "{rows:?}");
        let lines = std::fs::read_to_string(&out).expect("the job's output");
        assert_eq!(lines, "5|report\n");
        let (_, status, err) = run(&config, &["status"]);
        assert!(!status.contains("planned at"), "{status}{err}");

        // The API plans one too, and refuses a time past.
        let auth = [("Authorization", &*format!("Bearer {TOKEN}"))];
        let body = |at: &str| format!(r#"{{"at": "{at}", "params": {{"DAYS": "9"}}}}"#);
        let (code, answer) = post_json(ports[0], "/api/v1/jobs/report/trigger", &auth, &body(&past));
        assert_eq!(code, 400, "{answer}");
        let later = whole_seconds_from_now(TimeDelta::seconds(5));
        let (code, answer) = post_json(ports[0], "/api/v1/jobs/report/trigger", &auth, &body(&later));
        assert_eq!(code, 202, "{answer}");
        assert!(answer["message"].as_str().is_some_and(|m| m.contains("planned once at")), "{answer}");
        wait_until("the API's one-time run", Duration::from_secs(60), || {
            history_json(&config, "report").iter().filter(|r| r["status"] == "succeeded").count() == 2
        });
        std::thread::sleep(Duration::from_secs(6));
        let lines = std::fs::read_to_string(&out).expect("the job's output");
        assert_eq!(lines, "5|report\n9|report\n");
        assert_eq!(history_json(&config, "report").len(), 2);

        let (code, audit, err) = run(&config, &["audit", "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let audit: Value = serde_json::from_str(&audit).expect("audit JSON");
        let entries = audit.as_array().cloned().unwrap_or_else(|| {
            audit["entries"].as_array().cloned().unwrap_or_default()
        });
        let planned: Vec<&Value> = entries
            .iter()
            .filter(|e| e.to_string().contains("planned once at"))
            .collect();
        // The command line's and the API's.
        assert_eq!(planned.len(), 2, "{audit}");
        for time in [&at, &later] {
            assert!(planned.iter().any(|e| e.to_string().contains(&time[..19])), "{time}: {audit}");
        }
        let refused = entries
            .iter()
            .filter(|e| e.to_string().contains("is planned already"))
            .count();
        assert_eq!(refused, 1, "{audit}");
    }
}

backend_test! {
    /// A job written `at` an instant: `check` lists the instant; one
    /// already past that `catch_up` does not cover is refused by `check`
    /// and `run` (exit 2) naming the file, line, job and key, unless the
    /// fleet had the job before its instant.
    fn a_job_at_a_past_instant_is_refused_unless_the_fleet_had_it(db: &TestDb) {
        db.migrate();
        let soon = whole_seconds_from_now(TimeDelta::seconds(10));
        let job = |at: &str| format!("[[job]]\nname = \"once\"\nat = \"{at}\"\ncommand = 'true'\n");
        let config = db.config(&job(&soon));
        let (code, said, err) = run(&config, &["check"]);
        assert_eq!(code, 0, "{said}{err}");
        assert!(said.contains("  once at   "), "{said}");
        assert!(said.contains(&soon[..19]), "{said}");

        let replica = Replica::start(&config, "r0", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        wait_until("the job's one run", Duration::from_secs(45), || {
            history_json(&config, "once").iter().any(|r| r["status"] == "succeeded")
        });
        drop(replica);
        // Its instant is past, but the fleet had the job before it: the
        // file stays valid, and the job has ended.
        let (code, said, err) = run(&config, &["check"]);
        assert_eq!(code, 0, "{said}{err}");
        assert!(said.contains("ended: its one instant came before"), "{said}");
        let (_, said, err) = run(&config, &["status"]);
        let line = said.lines().find(|l| l.starts_with("once")).expect("the job's row");
        assert!(line.contains("ended (once, at"), "{said}{err}");

        // A job the fleet never had, at an instant long past.
        let past = "2020-01-15T03:00:00+01:00";
        let stale = db.config_named(
            "stale.toml",
            &db.url,
            &format!("[[job]]\nname = \"stale\"\nat = \"{past}\"\ncommand = 'true'\n"),
        );
        for args in [&["check"][..], &["run"]] {
            let (code, said, err) = run(&stale, args);
            assert_eq!(code, 2, "{args:?}: {said}{err}");
            assert!(
                err.contains("stale.toml:6: job \"stale\", key \"at\": at \"2020-01-15T03:00:00+01:00\" is past"),
                "{args:?}: {err}"
            );
        }
        assert_eq!(history_json(&config, "stale"), Vec::<Value>::new());
    }
}
