//! Run control across a fleet of real processes, on every backend: manual
//! jobs and their parameters, and what started each run.

use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Replica, TestDb, backend_test, fleet_of_three, history_json, run, wait_until,
};
use crate::web::{TOKEN, free_ports, get_json, post_json};

/// The succeeded runs of `job` in the history.
fn succeeded(config: &std::path::Path, job: &str) -> Vec<Value> {
    history_json(config, job)
        .into_iter()
        .filter(|r| r["status"] == "succeeded")
        .collect()
}

backend_test! {
    /// Three replicas run a per-second job and a `@manual` one with
    /// parameters: the manual job never runs by itself; each bad parameter
    /// is refused (exit 2 from `trigger`, 400 from the API) with no row;
    /// a trigger from the command line and one through a replica's API
    /// each run it once, with its parameters in its environment and in
    /// its history row, recorded `manual`.
    fn a_manual_job_runs_only_when_asked_with_its_parameters(db: &TestDb) {
        db.migrate();
        let out = db.dir().join("billing.out");
        let jobs = format!(
            "[web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n\n\
             [[job]]\nname = \"billing\"\nschedule = \"@manual\"\nparams = [\"DAYS\", \"TENANT=all\"]\n\
             command = 'echo \"$DAYS|$TENANT|$REPLICRON_JOB\" >> {}'\n",
            out.display()
        );
        let ports = free_ports::<3>();
        let replicas: Vec<Replica> = ports
            .iter()
            .enumerate()
            .map(|(n, port)| {
                let config = db.config_named(
                    &format!("r{n}.toml"),
                    &db.url,
                    &format!("[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n{jobs}"),
                );
                Replica::start(&config, &format!("r{n}"), None, &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)])
            })
            .collect();
        let config = db.config_named("cli.toml", &db.url, &jobs);
        for replica in &replicas {
            replica.wait_for_log("replicron started", Duration::from_secs(30));
        }
        // The fleet is scheduling: five instants of `tick`, and nothing of
        // `billing`.
        wait_until("5 runs of tick", Duration::from_secs(30), || {
            succeeded(&config, "tick").len() >= 5
        });
        assert_eq!(history_json(&config, "billing"), Vec::<Value>::new());
        assert!(
            history_json(&config, "tick").iter().all(|r| r["triggered_by"] == "schedule"),
            "{:?}",
            history_json(&config, "tick")
        );

        let long = format!("DAYS={}", "x".repeat(4097));
        for (args, needle) in [
            (&["trigger", "billing"][..], "parameter DAYS of job billing has no default"),
            (&["trigger", "billing", "--param", "DAYS"], "expected NAME=VALUE"),
            (
                &["trigger", "billing", "--param", "DAYS=1", "--param", "HOST=x"],
                "parameter HOST is not declared by job billing (it declares DAYS, TENANT)",
            ),
            (&["trigger", "billing", "--param", "DAYS=1", "--param", "DAYS=2"], "given twice"),
            (&["trigger", "billing", "--param", &long], "more than 4096"),
        ] {
            let (code, stdout, err) = run(&config, args);
            assert_eq!(code, 2, "{args:?}: {stdout}{err}");
            assert!(err.contains(needle), "{args:?}: {err}");
        }
        let auth = [("Authorization", &*format!("Bearer {TOKEN}"))];
        for body in [
            r#"{"params": {"DAYS": "a\u0000b"}}"#,
            r#"{"params": {"DAYS": "1", "HOST": "x"}}"#,
            r#"{"params": {"TENANT": "acme"}}"#,
            r#"{"params": {"DAYS": 1}}"#,
        ] {
            let (code, answer) = post_json(ports[1], "/api/v1/jobs/billing/trigger", &auth, body);
            assert_eq!(code, 400, "{body}: {answer}");
        }
        assert_eq!(history_json(&config, "billing"), Vec::<Value>::new());
        assert!(!out.exists(), "a refused trigger ran the job");

        let (code, stdout, err) = run(&config, &["trigger", "billing", "--param", "DAYS=30"]);
        assert_eq!(code, 0, "{stdout}{err}");
        let (code, answer) = post_json(
            ports[1],
            "/api/v1/jobs/billing/trigger",
            &auth,
            r#"{"params": {"DAYS": "7", "TENANT": "acme & co"}}"#,
        );
        assert_eq!(code, 202, "{answer}");
        wait_until("two runs of billing", Duration::from_secs(30), || {
            succeeded(&config, "billing").len() == 2
        });
        let lines = std::fs::read_to_string(&out).expect("the job's output");
        assert_eq!(lines, "30|all|billing\n7|acme & co|billing\n");
        let mut rows = history_json(&config, "billing");
        rows.reverse();
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0]["params"], serde_json::json!({"DAYS": "30", "TENANT": "all"}));
        assert_eq!(rows[1]["params"], serde_json::json!({"DAYS": "7", "TENANT": "acme & co"}));
        assert!(rows.iter().all(|r| r["triggered_by"] == "manual"), "{rows:?}");
        assert_eq!(rows[1]["instance"], "r1");
        // The API's run and the table of `history` say the same.
        let (_, run_json) = get_json(ports[0], &format!("/api/v1/runs/{}", rows[1]["id"]));
        assert_eq!(run_json["triggered_by"], "manual");
        assert_eq!(run_json["params"]["TENANT"], "acme & co");
        let (code, table, err) = run(&config, &["history", "--job", "billing"]);
        assert_eq!(code, 0, "{err}");
        assert!(table.contains("TRIGGER") && table.contains("manual"), "{table}");
        assert!(table.contains("DAYS=30 TENANT=all"), "{table}");
        assert!(table.contains("TENANT=\"acme & co\""), "{table}");
        // `status` says the job runs when triggered.
        let (_, status, _) = run(&config, &["status"]);
        let line = status.lines().find(|l| l.starts_with("billing")).expect("billing row");
        assert!(line.contains("manual"), "{status}");
        // Still nothing of its own after all this time.
        assert_eq!(succeeded(&config, "billing").len(), 2);

        // A backfill through the API: five past instants of `tick`, once.
        let from = chrono::Utc::now() - chrono::TimeDelta::minutes(10);
        let from = from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let to = (chrono::DateTime::parse_from_rfc3339(&from).expect("from") + chrono::TimeDelta::seconds(5))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let body = format!(r#"{{"from": "{from}", "to": "{to}"}}"#);
        let backfilled = || history_json(&config, "tick").into_iter().filter(|r| r["triggered_by"] == "backfill").count();
        let (code, answer) = post_json(ports[2], "/api/v1/jobs/tick/backfill", &auth, &body);
        assert_eq!(code, 202, "{answer}");
        wait_until("five backfilled instants", Duration::from_secs(30), || backfilled() == 5);
        let (code, answer) = post_json(ports[0], "/api/v1/jobs/tick/backfill", &auth, &body);
        assert_eq!(code, 202, "{answer}");
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(backfilled(), 5, "the same backfill again runs nothing");
        let future = (chrono::Utc::now() + chrono::TimeDelta::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (code, answer) = post_json(ports[0], "/api/v1/jobs/tick/backfill", &auth, &format!(r#"{{"from": "{from}", "to": "{future}"}}"#));
        assert_eq!(code, 400, "{answer}");
        let (code, answer) = post_json(ports[0], "/api/v1/jobs/billing/backfill", &auth, &body);
        assert_eq!(code, 400, "{answer}");
    }
}

/// The most bodies at once in `records`, lines `start|end NANOS RUN` the
/// jobs wrote themselves, and how many runs started.
fn most_at_once(records: &str) -> (usize, usize) {
    let mut edges: Vec<(u128, i32)> = records
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let step = match words.next()? {
                "start" => 1,
                "end" => -1,
                _ => return None,
            };
            Some((words.next()?.parse().ok()?, step))
        })
        .collect();
    edges.sort();
    let (mut running, mut most) = (0, 0);
    for (_, step) in &edges {
        running += step;
        most = most.max(running);
    }
    let starts = edges.iter().filter(|(_, step)| *step == 1).count();
    (most as usize, starts)
}

backend_test! {
    /// Three jobs that take one `[[limit]]` of 2, each due every 3 s and
    /// running 2 s, on three replicas: by the bodies' own records, never
    /// more than two run at once across the fleet, two often do, and each
    /// job runs; `status` lists the limit.
    fn a_limit_of_two_holds_across_the_fleet(db: &TestDb) {
        db.migrate();
        let records = db.dir().join("bodies.out");
        let body = format!(
            "echo \"start $(date +%s%N) $REPLICRON_RUN_ID\" >> {0}; sleep 2; echo \"end $(date +%s%N) $REPLICRON_RUN_ID\" >> {0}",
            records.display()
        );
        let mut jobs = String::from("[[limit]]\nname = \"vendor-api\"\nmax_running = 2\n\n");
        for name in ["pull-a", "pull-b", "pull-c"] {
            jobs.push_str(&format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"*/3 * * * * *\"\nlimits = [\"vendor-api\"]\ncommand = '{body}'\n\n"
            ));
        }
        let config = db.config(&jobs);
        let replicas = fleet_of_three(&config);
        wait_until("each job ran twice", Duration::from_secs(60), || {
            ["pull-a", "pull-b", "pull-c"].iter().all(|job| succeeded(&config, job).len() >= 2)
        });
        let (_, status, _) = run(&config, &["status"]);
        let limit = status.lines().find(|l| l.starts_with("vendor-api")).unwrap_or_else(|| panic!("{status}"));
        assert!(limit.contains("pull-a, pull-b, pull-c") && limit.contains(" of 2"), "{status}");
        drop(replicas);
        let written = std::fs::read_to_string(&records).expect("the bodies' records");
        let (most, starts) = most_at_once(&written);
        assert_eq!(most, 2, "{written}");
        assert!(starts >= 6, "{written}");
    }
}

/// One body's own record: its instant, start and end (nanoseconds since
/// the epoch, by the host's clock), from `start|end NANOS INSTANT` lines.
#[derive(Debug)]
struct Body {
    instant: String,
    start: u128,
    end: Option<u128>,
}

fn bodies(records: &str) -> Vec<Body> {
    let mut bodies: Vec<Body> = Vec::new();
    for line in records.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [what, nanos, instant] = words[..] else {
            continue;
        };
        let Ok(nanos) = nanos.parse::<u128>() else {
            continue;
        };
        match what {
            "start" => bodies.push(Body {
                instant: instant.to_string(),
                start: nanos,
                end: None,
            }),
            "end" => {
                if let Some(body) = bodies.iter_mut().rev().find(|b| b.instant == instant) {
                    body.end = Some(nanos);
                }
            }
            _ => {}
        }
    }
    bodies.sort_by_key(|b| b.start);
    bodies
}

/// The shell body of a job that records its start and end in `records`,
/// runs `busy`, and records its end when told to stop, too.
fn recorded_body(records: &std::path::Path, busy: &str) -> String {
    format!(
        "echo \"start $(date +%s%N) $REPLICRON_SCHEDULED_AT\" >> {0}; \
         trap \"echo \\\"end \\$(date +%s%N) $REPLICRON_SCHEDULED_AT\\\" >> {0}; exit 143\" TERM; \
         sleep {busy} & wait; echo \"end $(date +%s%N) $REPLICRON_SCHEDULED_AT\" >> {0}",
        records.display()
    )
}

/// Starts `replicron trigger JOB` (a run from outside the fleet), and once
/// its body has written to `records`, three replicas.
fn triggered_then_fleet(
    config: &std::path::Path,
    job: &str,
    records: &std::path::Path,
) -> (std::process::Child, Vec<Replica>) {
    let first = std::process::Command::new(crate::support::binary())
        .args(["trigger", "--config", config.to_str().expect("utf-8"), job])
        .env_remove("REPLICRON_DATABASE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("trigger");
    wait_until("the triggered run", Duration::from_secs(10), || {
        records.exists()
    });
    let replicas = (0..3)
        .map(|n| Replica::start(config, &format!("r{n}"), None, &[]))
        .collect();
    (first, replicas)
}

/// No two bodies ran at once, and no instant ran twice.
fn one_at_a_time_and_once(bodies: &[&Body], written: &str) {
    for pair in bodies.windows(2) {
        let end = pair[0]
            .end
            .unwrap_or_else(|| panic!("{:?} has no end: {written}", pair[0]));
        assert!(
            end <= pair[1].start,
            "{:?} and {:?} overlapped: {written}",
            pair[0],
            pair[1]
        );
    }
    each_once(bodies.iter().map(|b| b.instant.as_str()), written);
}

/// No instant among `instants` comes twice; `context` says where they are.
fn each_once<'a>(instants: impl Iterator<Item = &'a str>, context: &str) {
    let mut instants: Vec<&str> = instants.collect();
    instants.sort();
    let count = instants.len();
    instants.dedup();
    assert_eq!(instants.len(), count, "an instant ran twice: {context}");
}

backend_test! {
    /// `overlap = "queue"`: a job due every 2 s whose body runs 5 s (2.5
    /// intervals). Its first run is a `trigger` from outside the fleet;
    /// the instant that comes while it runs waits, on the replicas, and
    /// starts right after it ends; later ones are overruns. By the bodies'
    /// own records: one at a time, every instant at most once, each
    /// waiting instant started within 100 ms of the previous end (the
    /// median; the slowest within 400 ms, two cores shared by three
    /// replicas and the database).
    fn a_queued_instant_starts_when_the_run_before_it_ends(db: &TestDb) {
        db.migrate();
        let records = db.dir().join("bodies.out");
        let jobs = format!(
            "[[job]]\nname = \"queued\"\nschedule = \"*/2 * * * * *\"\noverlap = \"queue\"\ncommand = '{}'\n",
            recorded_body(&records, "5")
        );
        let config = db.config(&jobs);
        let (first, replicas) = triggered_then_fleet(&config, "queued", &records);
        let triggered = first.wait_with_output().expect("trigger ends");
        assert!(triggered.status.success(), "{triggered:?}");
        wait_until("three runs after the triggered one", Duration::from_secs(60), || {
            succeeded(&config, "queued").len() >= 4
        });
        drop(replicas);
        let written = std::fs::read_to_string(&records).expect("records");
        let bodies = bodies(&written);
        let ended: Vec<&Body> = bodies.iter().filter(|b| b.end.is_some()).collect();
        assert!(ended.len() >= 4, "{written}");
        one_at_a_time_and_once(&ended, &written);
        let mut gaps: Vec<u128> = ended
            .windows(2)
            .map(|pair| (pair[1].start - pair[0].end.expect("ended")) / 1_000_000)
            .collect();
        gaps.sort();
        eprintln!("queued starts after the previous end, ms: {gaps:?}");
        // Each run after the first is the instant that came while the one
        // before it ran, started once that one ended: not an instant of
        // its own that came later (the job is due every 2 s), and not a
        // wait for the next instant.
        for pair in ended.windows(2) {
            let end = pair[0].end.expect("ended");
            let instant = chrono::DateTime::parse_from_rfc3339(&pair[1].instant)
                .expect("instant")
                .timestamp_nanos_opt()
                .expect("in range") as u128;
            assert!(instant < end, "{:?} was no queued instant of {:?}\n{written}", pair[1], pair[0]);
            assert!(pair[1].start - end < 2_000_000_000, "{:?} waited for more than its end\n{written}", pair[1]);
        }
        let rows = history_json(&config, "queued");
        assert!(rows.iter().all(|r| r["status"] == "succeeded" || r["status"] == "running"), "{rows:?}");
        // The first run was the trigger's; the rest were claimed by the
        // replicas, so the waiting instant ran on another process.
        assert!(rows.iter().any(|r| r["triggered_by"] == "manual"), "{rows:?}");
    }
}

backend_test! {
    /// `overlap = "replace"`: a job due every 3 s whose body would run
    /// 100 s, with a lease of 3 s (kept alive every second). Its first run
    /// is a `trigger` from outside the fleet; each instant stops the run
    /// before it, through the database, wherever that runs: the old body
    /// records its end (SIGTERM) before the new one starts, and the old
    /// run is recorded `replaced`.
    fn a_replacing_instant_stops_the_run_before_it_wherever_it_runs(db: &TestDb) {
        db.migrate();
        let records = db.dir().join("bodies.out");
        let jobs = format!(
            "[[job]]\nname = \"latest\"\nschedule = \"*/3 * * * * *\"\noverlap = \"replace\"\n\
             lock_at_most_for = \"3s\"\nkill_grace = \"1s\"\ncommand = '{}'\n",
            recorded_body(&records, "100")
        );
        let config = db.config(&jobs);
        let (first, replicas) = triggered_then_fleet(&config, "latest", &records);
        let triggered = first.wait_with_output().expect("trigger ends");
        let said = String::from_utf8_lossy(&triggered.stdout);
        assert!(said.contains("latest: replaced"), "{said}{}", String::from_utf8_lossy(&triggered.stderr));
        wait_until("three replaced runs", Duration::from_secs(60), || {
            history_json(&config, "latest").iter().filter(|r| r["status"] == "replaced").count() >= 3
        });
        drop(replicas);
        let written = std::fs::read_to_string(&records).expect("records");
        let bodies = bodies(&written);
        let ended: Vec<&Body> = bodies.iter().filter(|b| b.end.is_some()).collect();
        one_at_a_time_and_once(&ended, &written);
        let rows = history_json(&config, "latest");
        let manual: Vec<&Value> = rows.iter().filter(|r| r["triggered_by"] == "manual").collect();
        assert_eq!(manual.len(), 1, "{rows:?}");
        assert_eq!(manual[0]["status"], "replaced", "{rows:?}");
        assert!(
            rows.iter().all(|r| matches!(r["status"].as_str(), Some("replaced" | "running" | "killed"))),
            "{rows:?}"
        );
    }
}

/// `replicron backfill JOB --from FROM --to TO` on `config`, started.
fn start_backfill(
    config: &std::path::Path,
    job: &str,
    from: &str,
    to: &str,
) -> std::process::Child {
    std::process::Command::new(crate::support::binary())
        .args([
            "backfill",
            "--config",
            config.to_str().expect("utf-8"),
            job,
            "--from",
            from,
            "--to",
            to,
        ])
        .env_remove("REPLICRON_DATABASE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("backfill")
}

/// The instants the bodies wrote, in the order they wrote them.
fn instants_written(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

backend_test! {
    /// A backfill of 100 per-minute instants started twice at once (two
    /// operators, two hosts): one is refused, and each instant runs once,
    /// in order, with its own REPLICRON_SCHEDULED_AT, recorded `backfill`. Another range,
    /// killed (SIGKILL) halfway and started again, runs again the instant
    /// the kill cut short and finishes the rest once. (The killed
    /// backfill's lease ends by itself: 3 s.) Bad requests
    /// are refused with exit 2.
    fn a_backfill_runs_each_instant_once_in_order_and_goes_on_after_a_kill(db: &TestDb) {
        db.migrate();
        let out = db.dir().join("instants.out");
        let config = db.config(&format!(
            "[[job]]\nname = \"billing\"\nschedule = \"* * * * *\"\nlock_at_most_for = \"3s\"\n\
             command = 'echo \"$REPLICRON_SCHEDULED_AT\" >> {}; sleep 0.05'\n\n\
             [[job]]\nname = \"asked\"\nschedule = \"@manual\"\ncommand = 'true'\n",
            out.display()
        ));
        let minute = |m: i64| {
            let base = (chrono::Utc::now() - chrono::TimeDelta::hours(6))
                .duration_trunc(chrono::TimeDelta::hours(1))
                .expect("hour");
            (base + chrono::TimeDelta::minutes(m)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        use chrono::DurationRound as _;
        let future = (chrono::Utc::now() + chrono::TimeDelta::hours(1)).to_rfc3339();
        for (args, needle) in [
            (vec!["backfill", "nope", "--from", &minute(0), "--to", &minute(10)], "no job named"),
            (vec!["backfill", "billing", "--from", &minute(0), "--to", &future], "is in the future"),
            (vec!["backfill", "billing", "--from", &minute(10), "--to", &minute(0)], "is not before"),
            (vec!["backfill", "asked", "--from", &minute(0), "--to", &minute(10)], "no instants to backfill"),
            (vec!["backfill", "billing", "--from", "2000-01-01T00:00:00Z", "--to", &minute(0)], "add --yes"),
        ] {
            let (code, stdout, err) = run(&config, &args);
            assert_eq!(code, 2, "{args:?}: {stdout}{err}");
            assert!(err.contains(needle), "{args:?}: {err}");
        }
        let (code, listed, err) = run(&config, &["backfill", "billing", "--from", &minute(0), "--to", &minute(3), "--dry-run"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(listed.matches("never ran; will run").count(), 3, "{listed}");
        assert!(!out.exists(), "a dry run ran the job");

        let (from, to) = (minute(0), minute(100));
        // One backfill of a job at a time: the second is refused, naming
        // the first.
        let twice = [start_backfill(&config, "billing", &from, &to), start_backfill(&config, "billing", &from, &to)];
        let ends: Vec<std::process::Output> = twice.into_iter().map(|b| b.wait_with_output().expect("backfill ends")).collect();
        assert_eq!(ends.iter().filter(|e| e.status.success()).count(), 1, "{ends:?}");
        let refused = ends.iter().find(|e| !e.status.success()).expect("one refused");
        assert_eq!(refused.status.code(), Some(2), "{refused:?}");
        assert!(String::from_utf8_lossy(&refused.stderr).contains("a backfill of it is in progress (by"), "{refused:?}");
        let expected: Vec<String> = (0..100).map(minute).collect();
        assert_eq!(instants_written(&out), expected, "each instant once, in order");
        let rows = history_json(&config, "billing");
        assert_eq!(rows.len(), 100, "{rows:?}");
        assert!(rows.iter().all(|r| r["triggered_by"] == "backfill" && r["status"] == "succeeded"), "{rows:?}");
        // Again: all succeeded already, nothing runs.
        let (code, said, err) = run(&config, &["backfill", "billing", "--from", &from, "--to", &to]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(said.matches("skipped: it succeeded before").count(), 100, "{said}");
        assert_eq!(instants_written(&out).len(), 100);

        // Killed halfway, then started again.
        std::fs::remove_file(&out).expect("reset");
        let (from, to) = (minute(100), minute(200));
        let mut first = start_backfill(&config, "billing", &from, &to);
        wait_until("half of the second range", Duration::from_secs(60), || instants_written(&out).len() >= 50);
        first.kill().expect("kill");
        let _ = first.wait();
        let (code, said, err) = crate::backfill::backfill_once_free(&config, "billing", &from, &to, &[]);
        assert_eq!(code, 0, "{said}{err}");
        let written = instants_written(&out);
        let expected: Vec<String> = (100..200).map(minute).collect();
        // In order, each once but the one the kill cut short, which runs
        // again (right after its first start, so the lines stay in order).
        let mut once = written.clone();
        once.dedup();
        assert_eq!(once, expected, "in order, every instant: {written:?}");
        assert!(written.len() <= once.len() + 1, "at most the cut-short instant twice: {written:?}");
        let rows = history_json(&config, "billing");
        let range: Vec<&Value> = rows.iter().filter(|r| expected.contains(&r["scheduled_at"].as_str().unwrap_or("").to_string())).collect();
        let succeeded = range.iter().filter(|r| r["status"] == "succeeded").count();
        assert_eq!(succeeded, 100, "each instant succeeded once: {range:?}");
        assert!(range.len() <= 101, "a row per instant, and the cut-short one's: {range:?}");
    }
}

backend_test! {
    /// `overlap = "allow"` with `max_concurrent = 3`: a job due every
    /// second whose body runs 4 s (four would overlap), on three replicas.
    /// By the bodies' own records: never more than three at once across
    /// the fleet, three often, and no instant twice; each run recorded
    /// once, as the schedule's.
    fn allow_runs_at_most_max_concurrent_at_once(db: &TestDb) {
        db.migrate();
        let records = db.dir().join("bodies.out");
        let jobs = format!(
            "[[job]]\nname = \"parallel\"\nschedule = \"* * * * * *\"\noverlap = \"allow\"\nmax_concurrent = 3\ncommand = '{}'\n",
            recorded_body(&records, "4")
        );
        let config = db.config(&jobs);
        let replicas = fleet_of_three(&config);
        wait_until("six runs ended", Duration::from_secs(60), || {
            succeeded(&config, "parallel").len() >= 6
        });
        let (_, status, _) = run(&config, &["status", "--format", "json"]);
        let status: Value = serde_json::from_str(&status).expect("status JSON");
        let job = &status["jobs"][0];
        assert_eq!(job["overlap"], "allow 3", "{job}");
        assert!(job["running"].as_u64().is_some_and(|n| (1..=3).contains(&n)), "{job}");
        drop(replicas);
        let written = std::fs::read_to_string(&records).expect("records");
        let (most, _) = most_at_once(&written);
        assert_eq!(most, 3, "{written}");
        each_once(bodies(&written).iter().map(|b| b.instant.as_str()), &written);
        let rows = history_json(&config, "parallel");
        each_once(rows.iter().filter_map(|r| r["scheduled_at"].as_str()), &format!("{rows:?}"));
    }
}

/// `replicron trigger JOB` twice: the second once the first's body has
/// written to `records`. Their outputs, in that order.
fn triggered_twice(
    config: &std::path::Path,
    job: &str,
    records: &std::path::Path,
) -> [std::process::Output; 2] {
    let trigger = || {
        std::process::Command::new(crate::support::binary())
            .args(["trigger", "--config", config.to_str().expect("utf-8"), job])
            .env_remove("REPLICRON_DATABASE_URL")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("trigger")
    };
    let first = trigger();
    wait_until("the first triggered run", Duration::from_secs(20), || {
        records.exists()
    });
    let second = trigger();
    [first, second].map(|child| child.wait_with_output().expect("trigger ends"))
}

backend_test! {
    /// A trigger follows the job's `overlap`, as its scheduled instants
    /// do. Two triggers of a `@manual` job, the second while the first
    /// runs: `allow` (with `max_concurrent = 3`) runs them side by side;
    /// `queue` runs the second once the first ends; `replace` stops the
    /// first (`replaced`) and then runs the second; `skip` refuses the
    /// second (exit 1), and records nothing of it.
    fn a_trigger_follows_the_jobs_overlap_policy(db: &TestDb) {
        db.migrate();
        let records = |job: &str| db.dir().join(format!("{job}.out"));
        let mut jobs = String::new();
        for (job, policy, busy) in [
            ("wide", "overlap = \"allow\"\nmax_concurrent = 3", "3"),
            ("serial", "overlap = \"queue\"", "2"),
            ("latest", "overlap = \"replace\"\nlock_at_most_for = \"3s\"\nkill_grace = \"1s\"", "4"),
            ("single", "overlap = \"skip\"", "3"),
        ] {
            jobs.push_str(&format!(
                "[[job]]\nname = \"{job}\"\nschedule = \"@manual\"\n{policy}\ncommand = '{}'\n\n",
                recorded_body(&records(job), busy)
            ));
        }
        let config = db.config(&jobs);
        let said = |output: &std::process::Output| {
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
        };
        let statuses = |job: &str| {
            let mut rows = history_json(&config, job);
            rows.sort_by_key(|r| r["id"].as_i64());
            rows.iter().map(|r| (r["status"].as_str().unwrap_or("?").to_string(), r["triggered_by"].clone())).collect::<Vec<_>>()
        };
        let manual = |status: &str| (status.to_string(), Value::from("manual"));

        let [one, two] = triggered_twice(&config, "wide", &records("wide"));
        assert!(one.status.success() && two.status.success(), "{}\n{}", said(&one), said(&two));
        let written = std::fs::read_to_string(records("wide")).expect("records");
        let ran = bodies(&written);
        assert_eq!(ran.len(), 2, "{written}");
        assert!(ran[1].start < ran[0].end.expect("an end"), "not side by side: {written}");
        assert_eq!(statuses("wide"), [manual("succeeded"), manual("succeeded")]);

        let [one, two] = triggered_twice(&config, "serial", &records("serial"));
        assert!(one.status.success() && two.status.success(), "{}\n{}", said(&one), said(&two));
        let written = std::fs::read_to_string(records("serial")).expect("records");
        let ran = bodies(&written);
        assert_eq!(ran.len(), 2, "{written}");
        one_at_a_time_and_once(&ran.iter().collect::<Vec<_>>(), &written);
        assert_eq!(statuses("serial"), [manual("succeeded"), manual("succeeded")]);

        let [one, two] = triggered_twice(&config, "latest", &records("latest"));
        assert!(said(&one).contains("latest: replaced"), "{}", said(&one));
        assert!(two.status.success(), "{}", said(&two));
        let written = std::fs::read_to_string(records("latest")).expect("records");
        let ran = bodies(&written);
        assert_eq!(ran.len(), 2, "{written}");
        one_at_a_time_and_once(&ran.iter().collect::<Vec<_>>(), &written);
        assert_eq!(statuses("latest"), [manual("replaced"), manual("succeeded")]);

        let [one, two] = triggered_twice(&config, "single", &records("single"));
        assert!(one.status.success(), "{}", said(&one));
        assert_eq!(two.status.code(), Some(1), "{}", said(&two));
        assert!(said(&two).contains("single is running elsewhere (its lease is held)"), "{}", said(&two));
        assert_eq!(statuses("single"), [manual("succeeded")]);
    }
}
