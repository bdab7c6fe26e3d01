//! Telling someone, with real replicas and a real HTTP server: one webhook
//! per failed instant across replicas (with its fields and header), the
//! notifier command's stdin, pings in order, a webhook that hangs or fails
//! delaying nothing, and missed instants recorded once each while an
//! overrun is not.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nix::sys::signal::Signal;

use crate::database_time::{
    Line, RECORD_UNSKEWED, assert_each_instant_once, percentile, read_lines, second,
};
use crate::hooks::{Answer, HookServer};
use crate::support::{Replica, TestDb, backend_test, history_json};

fn stop_all(replicas: Vec<Replica>) {
    for replica in &replicas {
        replica.signal(Signal::SIGTERM);
    }
    for mut replica in replicas {
        let status = replica.wait_exit(Duration::from_secs(40)).expect("exits");
        assert!(status.success(), "{status:?}\n{}", replica.log_text());
    }
}

fn time(value: &serde_json::Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().expect("a time"))
        .expect("rfc3339")
        .with_timezone(&Utc)
}

backend_test! {
    /// Three replicas, a job that fails every 2 s and one that succeeds:
    /// each failed instant reaches the webhook once (from the replica that
    /// ran it, with its history id, output and the header whose token is
    /// read from the environment), the notifier command reads the output on
    /// stdin, and the ping URLs see /start then success or /fail, in order.
    fn each_failure_is_notified_once_across_replicas(db: &TestDb) {
        let server = HookServer::start(Answer::Ok);
        let dir = db.dir().display().to_string();
        let config = db.config(&format!(
            "[notify]\n\
             webhook = \"{hook}\"\n\
             webhook_headers = {{ Authorization = \"Bearer ${{HOOK_TOKEN}}\" }}\n\
             command = 'cat > \"$DIR/stdin-$REPLICRON_RUN_ID.txt\"'\n\
             timeout = \"5s\"\n\n\
             [[job]]\nname = \"broken\"\nschedule = \"*/2 * * * * *\"\n\
             command = 'echo \"disk full at $REPLICRON_SCHEDULED_AT, token ${{HOOK_TOKEN:-unset}}\"; exit 3'\n\
             notify = {{ ping_url = \"{ping_broken}\" }}\n\n\
             [[job]]\nname = \"fine\"\nschedule = \"*/2 * * * * *\"\ncommand = 'true'\n\
             notify = {{ ping_url = \"{ping_fine}\", on = [\"failed\", \"recovered\"] }}\n",
            hook = server.url("/hook"),
            ping_broken = server.url("/ping/broken"),
            ping_fine = server.url("/ping/fine"),
        ));
        let env = [("HOOK_TOKEN", "s3cret"), ("DIR", dir.as_str())];
        let replicas: Vec<Replica> = ["n1", "n2", "n3"]
            .iter()
            .map(|id| Replica::start(&config, id, None, &env))
            .collect();
        for replica in &replicas {
            replica.wait_for_log("replicron started", Duration::from_secs(20));
        }
        std::thread::sleep(Duration::from_secs(9));
        stop_all(replicas);

        let failed = history_json(&config, "broken");
        assert!(failed.len() >= 3, "{failed:?}");
        let hooks = server.to("/hook");
        let mut by_instant: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
        for hook in &hooks {
            assert_eq!(hook.method, "POST");
            assert_eq!(hook.header("authorization"), Some("Bearer s3cret"));
            assert_eq!(hook.header("content-type"), Some("application/json"));
            let body = hook.json();
            by_instant
                .entry(body["scheduled_at"].as_str().expect("instant").to_string())
                .or_default()
                .push(body);
        }
        for row in &failed {
            assert_eq!(row["status"], "failed", "{row}");
            let instant = row["scheduled_at"].as_str().expect("instant");
            let sent = by_instant.remove(instant).unwrap_or_default();
            assert_eq!(sent.len(), 1, "webhooks for {instant}: {sent:?}");
            let body = &sent[0];
            assert_eq!(body["job"], "broken");
            assert_eq!(body["event"], "failed");
            assert_eq!(body["status"], "failed");
            assert_eq!(body["exit_code"], 3);
            assert_eq!(body["attempt"], 1);
            assert_eq!(body["instance"], row["instance"]);
            assert_eq!(body["history_id"], row["id"]);
            assert!(body["duration_seconds"].as_f64().is_some_and(|d| d >= 0.0), "{body}");
            let output = body["output"].as_str().expect("output");
            assert!(output.contains(&format!("disk full at {instant}")), "{output}");
            // The secret reaches the webhook, never the job.
            assert!(output.contains("token unset"), "{output}");
            assert!(
                body["text"].as_str().is_some_and(|t| t.contains("broken failed (exit 3)")),
                "{body}"
            );
            let stdin = std::fs::read_to_string(
                db.dir().join(format!("stdin-{}.txt", row["id"])),
            )
            .expect("the notifier command ran for this run");
            assert!(stdin.contains(&format!("disk full at {instant}")), "{stdin}");
        }
        assert!(by_instant.is_empty(), "webhooks for no failed run: {by_instant:?}");

        for (job, end, runs) in [
            ("broken", "/ping/broken/fail", failed.len()),
            ("fine", "/ping/fine", history_json(&config, "fine").len()),
        ] {
            let paths: Vec<String> = server
                .to(&format!("/ping/{job}"))
                .into_iter()
                .map(|r| r.path)
                .collect();
            assert_eq!(paths.len(), 2 * runs, "{job}: {paths:?}");
            for pair in paths.chunks(2) {
                assert_eq!(pair, [format!("/ping/{job}/start"), end.to_string()], "{job}: {paths:?}");
            }
        }
        eprintln!(
            "{:?}: {} failed instants, one webhook each; {} pings in order",
            db.kind,
            failed.len(),
            server.to("/ping").len()
        );
    }
}

backend_test! {
    /// One replica and three jobs: one that times out, one whose program
    /// does not exist, one that fails once and then succeeds. The webhook
    /// hears `timed_out`, `error`, `failed` and (asked for) `recovered`,
    /// each once per instant with its status and exit code, and the
    /// notifier command sees the same in `REPLICRON_EVENT`,
    /// `REPLICRON_STATUS` and `REPLICRON_EXIT_CODE`.
    fn every_kind_of_ending_is_told(db: &TestDb) {
        let server = HookServer::start(Answer::Ok);
        let flag = db.dir().join("failed-once");
        let told = db.dir().join("told.txt");
        let config = db.config(&format!(
            "[notify]\nwebhook = \"{hook}\"\n\
             on = [\"failed\", \"timed_out\", \"lost_lock\", \"abandoned\", \"missed\", \"error\", \"recovered\"]\n\
             command = 'echo \"$REPLICRON_JOB $REPLICRON_EVENT $REPLICRON_STATUS $REPLICRON_EXIT_CODE\" >> {told}'\n\n\
             [[job]]\nname = \"slow\"\nschedule = \"*/4 * * * * *\"\ncommand = 'sleep 30'\n\
             timeout = \"1s\"\nkill_grace = \"1s\"\n\n\
             [[job]]\nname = \"absent\"\nschedule = \"*/4 * * * * *\"\nargs = [\"/nonexistent/notified\"]\n\n\
             [[job]]\nname = \"flaky\"\nschedule = \"*/2 * * * * *\"\n\
             command = 'if [ -e {flag} ]; then exit 0; fi; touch {flag}; exit 4'\n",
            hook = server.url("/hook"),
            told = told.display(),
            flag = flag.display(),
        ));
        let replica = Replica::start(&config, "teller", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(20));
        let expected = [
            "slow timed_out timed_out ",
            "absent error error ",
            "flaky failed failed 4",
            "flaky recovered succeeded 0",
        ];
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&told).unwrap_or_default();
            if expected.iter().all(|e| text.lines().any(|l| l == e.trim_end() || l == *e)) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not every event was told:\n{text}\n{}",
                replica.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        stop_all(vec![replica]);

        let hooks: Vec<serde_json::Value> = server.to("/hook").iter().map(|r| r.json()).collect();
        let mut per_instant: BTreeMap<(String, String, String), usize> = BTreeMap::new();
        for hook in &hooks {
            let key = (
                hook["job"].as_str().expect("job").to_string(),
                hook["event"].as_str().expect("event").to_string(),
                hook["scheduled_at"].as_str().expect("instant").to_string(),
            );
            *per_instant.entry(key).or_default() += 1;
        }
        assert!(per_instant.values().all(|n| *n == 1), "{per_instant:?}");
        let find = |job: &str, event: &str| -> Vec<&serde_json::Value> {
            hooks
                .iter()
                .filter(|h| h["job"] == job && h["event"] == event)
                .collect()
        };
        for hook in find("slow", "timed_out") {
            assert_eq!(hook["status"], "timed_out", "{hook}");
            assert!(hook["exit_code"].is_null(), "{hook}");
        }
        for hook in find("absent", "error") {
            assert_eq!(hook["status"], "error", "{hook}");
            assert!(
                hook["output"].as_str().is_some_and(|o| o.contains("no such command")),
                "{hook}"
            );
        }
        let failed = find("flaky", "failed");
        let recovered = find("flaky", "recovered");
        assert_eq!(failed.len(), 1, "{hooks:?}");
        assert_eq!(failed[0]["exit_code"], 4);
        assert_eq!(recovered.len(), 1, "only the first success after a failure: {hooks:?}");
        assert_eq!(recovered[0]["status"], "succeeded");
        assert!(
            time(&recovered[0]["scheduled_at"]) > time(&failed[0]["scheduled_at"]),
            "{hooks:?}"
        );
        for (job, event) in [("slow", "timed_out"), ("absent", "error")] {
            assert!(!find(job, event).is_empty(), "no {event} for {job}: {hooks:?}");
        }
    }
}

/// Three failing per-second jobs on one replica, for `seconds`, their
/// notifications going to `hooks` (one URL per job) and the first job's
/// pings to `ping`, if any; returns how late each run started (ms) and
/// checks that each instant ran once.
fn failing_jobs(
    db: &TestDb,
    name: &str,
    hooks: [&str; 3],
    ping: Option<&str>,
    seconds: u64,
) -> Vec<f64> {
    let out = db.dir().join(format!("{name}.txt"));
    let jobs: String = hooks
        .iter()
        .enumerate()
        .map(|(n, hook)| {
            let ping = match ping {
                Some(url) if n == 0 => format!(", ping_url = \"{url}\""),
                _ => String::new(),
            };
            format!(
                "[[job]]\nname = \"job-{n:02}\"\nschedule = \"* * * * * *\"\n\
                 command = '{RECORD_UNSKEWED}; exit 1'\nenv = {{ OUT = {out:?} }}\n\
                 notify = {{ webhook = \"{hook}\", timeout = \"2s\", retries = 1{ping} }}\n\n"
            )
        })
        .collect();
    let config = db.config_named(&format!("{name}.toml"), &db.url, &jobs);
    let replica = Replica::start(&config, name, None, &[]);
    replica.wait_for_log("replicron started", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1500));
    let from = second(Utc::now()) + TimeDelta::seconds(1);
    std::thread::sleep(Duration::from_secs(seconds));
    let to = second(Utc::now()) - TimeDelta::seconds(1);
    // A replica running late on a loaded host claims the window's last
    // instants after it ends: they run before it stops.
    std::thread::sleep(Duration::from_secs(3));
    stop_all(vec![replica]);
    let lines: Vec<Line> = read_lines(&out)
        .into_iter()
        .filter(|l| l.instant >= from && l.instant <= to)
        .collect();
    assert_each_instant_once(&lines, 3, from, to);
    let mut late: Vec<f64> = lines.iter().map(Line::late_ms).collect();
    late.sort_by(f64::total_cmp);
    late
}

backend_test! {
    /// The same three failing per-second jobs, first with a webhook that
    /// answers, then with webhooks that hang (two jobs, one of which also
    /// pings a URL that hangs) or answer 500 (one): every instant still runs
    /// once and none starts as late as a delivery takes; the job whose
    /// webhook fails is told of each failure at once, whatever the others'
    /// endpoints do, and twice (retries = 1); the start lateness of both
    /// phases is printed side by side.
    fn a_hanging_or_failing_webhook_delays_no_run(db: &TestDb) {
        let ok = HookServer::start(Answer::Ok);
        let hang = HookServer::start(Answer::Hang);
        let fail = HookServer::start(Answer::Fail);
        let answering = failing_jobs(
            db,
            "answering",
            [&ok.url("/a"), &ok.url("/b"), &ok.url("/c")],
            None,
            6,
        );
        let broken = failing_jobs(
            db,
            "broken",
            [&hang.url("/a"), &hang.url("/b"), &fail.url("/c")],
            Some(&hang.url("/ping")),
            6,
        );
        // A sender that waited for the webhook would start runs seconds
        // late (a 2 s timeout, tried twice), further behind with each
        // failure; an independent one does not. Measured against the
        // answering phase, so that a loaded host's own lateness (a figure
        // for scripts/bench) does not count.
        let latest = broken.last().copied().unwrap_or_default();
        let baseline = answering.last().copied().unwrap_or_default();
        assert!(
            latest < baseline + 2000.0,
            "a run started {latest:.0} ms late, against {baseline:.0} ms with an answering webhook"
        );
        assert!(!ok.requests().is_empty());
        assert!(!hang.requests().is_empty(), "the hanging webhook was called");
        assert!(!hang.to("/ping").is_empty(), "the hanging ping URL was called");
        // Each failed instant of the job with the failing webhook was told
        // twice (retries = 1), the first time as soon as it failed: neither
        // the hanging webhooks nor the hanging pings held its delivery back.
        let mut told: BTreeMap<String, Vec<DateTime<Utc>>> = BTreeMap::new();
        for request in fail.requests() {
            let body = request.json();
            assert_eq!(body["job"], "job-02", "{body}");
            told.entry(body["scheduled_at"].as_str().expect("instant").to_string())
                .or_default()
                .push(request.received);
        }
        assert!(told.len() >= 5, "{told:?}");
        for (instant, times) in &told {
            assert_eq!(times.len(), 2, "deliveries of {instant}: {times:?}");
            let first = times.iter().min().expect("a delivery");
            let after = *first - time(&serde_json::Value::from(instant.as_str()));
            // A sender held behind the hanging deliveries (2 s each,
            // tried twice, two jobs) would tell it many seconds late.
            assert!(
                after < TimeDelta::milliseconds(3500),
                "the failure of {instant} was first told {after} after its instant"
            );
        }
        eprintln!(
            "{:?}: start lateness with an answering webhook: median {:.1} ms, p99 {:.1} ms ({} runs); \
             with hanging and failing webhooks: median {:.1} ms, p99 {:.1} ms ({} runs)",
            db.kind,
            percentile(&answering, 0.5),
            percentile(&answering, 0.99),
            answering.len(),
            percentile(&broken, 0.5),
            percentile(&broken, 0.99),
            broken.len()
        );
    }
}

backend_test! {
    /// A job every 5 s and a slow one (12 s runs, so two of its instants
    /// are overruns) on three replicas; then every replica stops across
    /// three instants and starts again. The three instants of each job that
    /// nobody ran are recorded `missed` once each (attempt 0) and notified
    /// once each; the slow job's overrun instants are not.
    fn missed_instants_are_recorded_once_and_overruns_are_not(db: &TestDb) {
        let server = HookServer::start(Answer::Ok);
        let out = db.dir().join("runs.txt");
        let record = format!("echo \"$REPLICRON_JOB $REPLICRON_SCHEDULED_AT\" >> {}", out.display());
        let config = db.config(&format!(
            "[notify]\nwebhook = \"{hook}\"\n\n\
             [defaults]\nmissed_after = \"2s\"\n\n\
             [[job]]\nname = \"tick\"\nschedule = \"*/5 * * * * *\"\ncommand = '{record}'\n\n\
             [[job]]\nname = \"slow\"\nschedule = \"*/5 * * * * *\"\ncommand = '{record}; sleep 12'\n",
            hook = server.url("/hook"),
        ));
        let start = |ids: &[&str]| -> Vec<Replica> {
            let replicas: Vec<Replica> =
                ids.iter().map(|id| Replica::start(&config, id, None, &[])).collect();
            for replica in &replicas {
                replica.wait_for_log("replicron started", Duration::from_secs(20));
            }
            replicas
        };
        let replicas = start(&["m1", "m2", "m3"]);
        // The slow job's first run: its instant is where the plan starts.
        let first_slow = loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.starts_with("slow ")) {
                break DateTime::parse_from_rfc3339(line.split_whitespace().nth(1).expect("instant"))
                    .expect("rfc3339")
                    .with_timezone(&Utc);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let sleep_until = |t: DateTime<Utc>| {
            if let Ok(wait) = (t - Utc::now()).to_std() {
                std::thread::sleep(wait);
            }
        };
        let at = |seconds: i64| first_slow + TimeDelta::milliseconds(seconds * 1000);
        // Its run ends at +12 s; every replica stops at +13.5 s.
        sleep_until(at(13) + TimeDelta::milliseconds(500));
        stop_all(replicas);
        // +15, +20, +25 come with no replica; all start again at +27.5 s.
        sleep_until(at(27) + TimeDelta::milliseconds(500));
        let replicas = start(&["m1", "m2", "m3"]);
        sleep_until(at(36));
        stop_all(replicas);

        let outage: Vec<String> = [15, 20, 25]
            .iter()
            .map(|s| at(*s).to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .collect();
        let hooks: Vec<serde_json::Value> = server.to("/hook").iter().map(|r| r.json()).collect();
        for job in ["tick", "slow"] {
            let rows = history_json(&config, job);
            let mut missed: Vec<String> = rows
                .iter()
                .filter(|r| r["status"] == "missed")
                .map(|r| {
                    assert_eq!(r["attempt"], 0, "{r}");
                    r["scheduled_at"].as_str().expect("instant").to_string()
                })
                .collect();
            missed.sort();
            // The outage's instants, and no other while the fleet was
            // away. Outside it, an instant claimed later than its
            // `missed_after` (a replica starved that long on a loaded
            // host) is recorded `missed` and then run: such a row needs
            // its run beside it, or it is a miss the test did not make.
            let (during, outside): (Vec<String>, Vec<String>) = missed
                .iter()
                .cloned()
                .partition(|m| (at(13)..at(28)).contains(&time(&serde_json::Value::from(m.as_str()))));
            assert_eq!(during, outage, "{job}: {rows:?}");
            for late in &outside {
                assert!(
                    rows.iter().any(|r| r["scheduled_at"] == late.as_str()
                        && r["attempt"].as_i64().unwrap_or(0) >= 1),
                    "{job}: {late} recorded missed, not in the outage, and never run: {rows:?}"
                );
            }
            let mut notified: Vec<String> = hooks
                .iter()
                .filter(|h| h["job"] == job && h["event"] == "missed")
                .map(|h| h["scheduled_at"].as_str().expect("instant").to_string())
                .collect();
            notified.sort();
            assert_eq!(notified, missed, "{job}: {hooks:?}");
        }
        // The slow job's overruns (+5 s and +10 s) ran for nobody and are
        // not misses; the quick job ran them.
        let slow = history_json(&config, "slow");
        for overrun in [5, 10] {
            let instant = at(overrun);
            assert!(
                !slow.iter().any(|r| time(&r["scheduled_at"]) == instant),
                "{slow:?}"
            );
        }
        let tick = history_json(&config, "tick");
        for ran in [5, 10] {
            let instant = at(ran);
            assert!(
                tick.iter().any(|r| time(&r["scheduled_at"]) == instant && r["status"] == "succeeded"),
                "{tick:?}"
            );
        }
        eprintln!(
            "{:?}: missed {} of tick and of slow, recorded and notified once each; overruns not reported",
            db.kind,
            outage.join(", ")
        );
    }
}

#[test]
#[cfg_attr(
    replicron_no_promtool,
    ignore = "needs promtool, from Debian's prometheus"
)]
fn the_rules_file_passes_promtool() {
    let Some(promtool) = crate::operate::promtool() else {
        return;
    };
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/alerts.yml");
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/alerts.test.yml");
    for args in [
        vec!["check", "rules", rules.to_str().expect("utf-8")],
        vec!["test", "rules", tests.to_str().expect("utf-8")],
    ] {
        let output = std::process::Command::new(promtool)
            .args(&args)
            .output()
            .expect("promtool runs");
        assert!(
            output.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

backend_test! {
    /// Two replicas, a job whose runs take 3 s with `warn_after = "1s"`
    /// and one whose runs take no time with the same: each slow run
    /// reaches the webhook once as `long_running`, from the replica that
    /// holds it, with its run id and `status` running, and is not stopped
    /// (it succeeds, after its 3 s); the fast job's runs never do.
    /// `status` shows the slow run as long-running while it goes.
    fn a_long_run_is_told_once_by_the_replica_that_holds_it(db: &TestDb) {
        let server = HookServer::start(Answer::Ok);
        let config = db.config(&format!(
            "[notify]\n\
             webhook = \"{hook}\"\n\
             on = [\"long_running\", \"late_start\"]\n\
             timeout = \"5s\"\n\n\
             [[job]]\nname = \"slow\"\nschedule = \"*/5 * * * * *\"\ncommand = 'sleep 3'\n\
             warn_after = \"1s\"\ntimeout = \"20s\"\n\n\
             [[job]]\nname = \"fast\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n\
             warn_after = \"1s\"\n",
            hook = server.url("/hook"),
        ));
        let replicas: Vec<Replica> = ["n1", "n2"]
            .iter()
            .map(|id| Replica::start(&config, id, None, &[]))
            .collect();
        for replica in &replicas {
            replica.wait_for_log("replicron started", Duration::from_secs(20));
        }
        let started = std::time::Instant::now();
        // status shows a slow run past its warn_after while it runs, and
        // exits 0 for it: it is no problem.
        let mut shown = serde_json::Value::Null;
        crate::support::wait_until("status shows a long-running run", Duration::from_secs(12), || {
            let (code, out, err) = crate::support::run(&config, &["status", "--format", "json"]);
            let Ok(report) = serde_json::from_str::<serde_json::Value>(&out) else {
                return false;
            };
            let slow = report["jobs"].as_array().into_iter().flatten().find(|j| j["job"] == "slow");
            match slow.filter(|j| j["long_running_seconds"].as_f64().is_some()) {
                Some(job) => {
                    assert_eq!(code, 0, "{out}{err}");
                    shown = job.clone();
                    true
                }
                None => false,
            }
        });
        assert!(shown["long_running_seconds"].as_f64().is_some_and(|s| s > 1.0), "{shown}");
        assert_eq!(shown["last_run"]["status"], "running", "{shown}");
        assert!(shown["late_start_seconds"].is_null(), "{shown}");
        std::thread::sleep(Duration::from_secs(12).saturating_sub(started.elapsed()));
        stop_all(replicas);

        let hooks: Vec<serde_json::Value> = server.to("/hook").iter().map(|h| h.json()).collect();
        assert!(
            hooks.iter().all(|h| h["job"] == "slow" && h["event"] == "long_running"),
            "{hooks:?}"
        );
        let slow = history_json(&config, "slow");
        // The runs that ran their 3 s (not one the shutdown stopped).
        let whole: Vec<&serde_json::Value> =
            slow.iter().filter(|r| r["status"] == "succeeded").collect();
        assert!(!whole.is_empty(), "{slow:?}");
        for row in &whole {
            let duration = row["duration_seconds"].as_f64().expect("duration");
            assert!(duration >= 2.9, "not stopped: {row}");
            let told: Vec<&serde_json::Value> =
                hooks.iter().filter(|h| h["history_id"] == row["id"]).collect();
            assert_eq!(told.len(), 1, "{row}: {hooks:?}");
            let body = told[0];
            assert_eq!(body["instance"], row["instance"], "{body}");
            assert_eq!(body["status"], "running", "{body}");
            assert_eq!(body["scheduled_at"], row["scheduled_at"], "{body}");
            assert_eq!(body["duration_seconds"], 1.0, "{body}");
            assert!(
                body["text"].as_str().is_some_and(|t| t.contains("is still running after 1s")),
                "{body}"
            );
        }
        let ids: std::collections::BTreeSet<String> =
            hooks.iter().map(|h| h["history_id"].to_string()).collect();
        assert_eq!(ids.len(), hooks.len(), "a run told of twice: {hooks:?}");
        eprintln!(
            "{:?}: {} slow runs, {} long_running webhooks",
            db.kind,
            slow.len(),
            hooks.len()
        );
    }
}
