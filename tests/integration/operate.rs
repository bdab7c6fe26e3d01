//! The operator's side, on every backend: status, trigger, unlock, exec
//! (as a mutex and with --once), import-crontab, reload, /healthz and
//! /metrics, completions and the man page.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use diesel::connection::SimpleConnection;
use nix::sys::signal::Signal;

use crate::proxy::Proxy;
use crate::support::{
    Kind, Replica, TestDb, backend_test, binary, history_json, replicron, run, sql_time, text,
    wait_until,
};
use crate::web::free_port;

/// The sum of `metric`'s samples whose label `label.0` is `label.1`, on the
/// replica's `/metrics` at `port`.
pub(crate) fn metric_total(port: u16, metric: &str, label: (&str, &str)) -> f64 {
    let (code, body) = http_get(port, "/metrics");
    assert_eq!(code, 200);
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && s.labels.get(label.0) == Some(label.1))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

fn http_get(port: u16, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

backend_test! {
    fn trigger_status_and_unlock(db: &TestDb) {
        let config = db.config(
            "[[job]]\nname = \"report\"\nschedule = \"@yearly\"\ncommand = 'echo \"report by $REPLICRON_INSTANCE\"'\n\n\
             [[job]]\nname = \"broken\"\nschedule = \"@yearly\"\ncommand = 'echo \"the output of broken\"; exit 4'\n\n\
             [[job]]\nname = \"off\"\nschedule = \"@daily\"\nenabled = false\ncommand = 'true'\n",
        );
        // Commands other than `run` and `migrate` never change the schema:
        // on a fresh database they say to migrate, and leave it as it was.
        let (code, _, err) = run(&config, &["status"]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("run `replicron migrate"), "{err}");
        for command in [
            &["history"][..],
            &["trigger", "report"],
            &["unlock", "report"],
        ] {
            let (code, _, err) = run(&config, command);
            assert_eq!(code, 1, "{command:?}: {err}");
            assert!(err.contains("replicron migrate"), "{command:?}: {err}");
        }
        if db.kind != Kind::Sqlite {
            let mut conn = db.raw();
            for table in ["replicron_locks", "replicron_runs", "__diesel_schema_migrations"] {
                assert!(
                    conn.batch_execute(&format!("SELECT 1 FROM {table}")).is_err(),
                    "a read-only command created {table}"
                );
            }
        } else {
            assert!(
                !db.dir().join("replicron.db").exists(),
                "a read-only command created the file"
            );
        }
        let (code, out, err) = run(&config, &["migrate"]);
        assert_eq!(code, 0, "{out}{err}");
        let (code, out, err) = run(&config, &["trigger", "report"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("report: succeeded (exit 0)"), "{out}");
        let rows = history_json(&config, "report");
        assert_eq!(rows.len(), 1);
        assert!(
            rows[0]["output"]
                .as_str()
                .is_some_and(|o| o.starts_with("report by "))
        );
        let (code, out, _) = run(&config, &["trigger", "broken"]);
        assert_eq!(code, 4, "{out}");
        // trigger shows the output, not only the status.
        assert!(
            out.contains("broken: failed (exit 4)\n  the output of broken"),
            "{out}"
        );
        let (code, _, err) = run(&config, &["trigger", "nope"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("no job named \"nope\""), "{err}");

        // `broken` failed last: flagged, and status exits 1.
        let (code, out, err) = run(&config, &["status"]);
        assert_eq!(code, 1, "{out}{err}");
        let broken = out
            .lines()
            .find(|l| l.starts_with("broken"))
            .expect("broken row");
        assert!(
            broken.contains("FAILED: last run") && broken.contains("failed (exit 4)"),
            "{out}"
        );
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with("database time ") && lines[0].contains("this host's clock is "),
            "{out}"
        );
        // The clock line, the throttle's and the backfills' line, then the jobs.
        assert!(
            lines[2].starts_with("catch-up, backfill and retry runs start at most"),
            "{out}"
        );
        assert!(lines[4].starts_with("JOB"), "{out}");
        let report = lines
            .iter()
            .find(|l| l.starts_with("report"))
            .expect("report row");
        assert!(
            report.contains("free") && report.contains("succeeded at"),
            "{out}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("off") && l.contains("disabled")),
            "{out}"
        );

        // A lease held with nothing running: stuck, and unlock ends it.
        let mut conn = db.raw();
        let at = Utc::now();
        conn.batch_execute(&format!(
            "UPDATE replicron_locks SET lock_until = '{}', locked_at = '{now}', \
             locked_by = 'ghost:1:x', last_scheduled_at = '{now}', fence = fence + 1 \
             WHERE name = 'report'",
            sql_time(at + TimeDelta::hours(1)),
            now = sql_time(at),
        ))
        .expect("a ghost's lease");
        let (code, out, _) = run(&config, &["status", "--format", "json"]);
        let status: serde_json::Value = serde_json::from_str(&out).expect("json");
        let ahead = status["clock"]["host_ahead_seconds"]
            .as_f64()
            .expect("offset");
        assert!(
            ahead.abs() < 0.5,
            "this host is its own database's clock: {status}"
        );
        assert!(status["clock"]["error_seconds"].as_f64().expect("error") < 0.5);
        let report = status["jobs"]
            .as_array()
            .expect("array")
            .iter()
            .find(|r| r["job"] == "report")
            .expect("row")
            .clone();
        assert_eq!(report["lease_held"], true);
        assert_eq!(report["locked_by"], "ghost:1:x");
        // Held for seconds only: not yet stuck.
        assert!(report["problem"].is_null(), "{report}");
        assert_eq!(code, 1, "broken's failure is still flagged");

        // A run recorded running under the current fence: unlock asks for --force.
        let fence = report["fence"].as_i64().expect("fence");
        conn.batch_execute(&format!(
            "INSERT INTO replicron_runs \
             (job, scheduled_at, attempt, instance, fence, started_at, status, output) \
             VALUES ('report', '{now}', 1, 'ghost:1:x', {fence}, '{now}', 'running', '')",
            now = sql_time(at),
        ))
        .expect("the ghost's run");
        let (code, _, err) = run(&config, &["unlock", "report"]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("--force") && err.contains("ghost:1:x"),
            "{err}"
        );
        let (code, out, err) = run(&config, &["unlock", "report", "--force"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("lease of ghost:1:x"), "{out}");
        // The lease is gone, its run is still recorded running: orphaned.
        let (code, out, _) = run(&config, &["status"]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("ORPHANED"), "{out}");
        let (code, out, _) = run(&config, &["unlock", "report"]);
        assert_eq!((code, out.trim()), (0, "report: not held"));
    }
}

backend_test! {
    fn exec_is_a_mutex_and_once_runs_once(db: &TestDb) {
        let config = db.config("[defaults]\nlock_at_most_for = \"30s\"\n");
        db.migrate();
        let counter = db.dir().join("counter");
        std::fs::write(&counter, "0").expect("counter");
        let script = format!(
            "n=$(cat {0}); sleep 0.01; echo $((n + 1)) > {0}",
            counter.display()
        );
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (config, script) = (config.clone(), script.clone());
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        let status = Command::new(binary())
                            .args(["exec", "--config"])
                            .arg(&config)
                            .args(["--lock", "counter", "--", "sh", "-c", &script])
                            .output()
                            .expect("exec runs");
                        assert!(status.status.success(), "{:?}", text(&status));
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker");
        }
        assert_eq!(
            std::fs::read_to_string(&counter).expect("counter").trim(),
            "40"
        );
        let rows = history_json(&config, "counter");
        assert_eq!(rows.len(), 40);
        assert!(rows.iter().all(|r| r["status"] == "succeeded"));

        // Exit status passes through; --wait gives up.
        let (code, _, _) = run(
            &config,
            &["exec", "--lock", "status", "--", "sh", "-c", "exit 7"],
        );
        assert_eq!(code, 7);

        // --once: four concurrent callers, one run, all see its status.
        let marker = db.dir().join("ran");
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let (config, marker) = (config.clone(), marker.clone());
                std::thread::spawn(move || {
                    Command::new(binary())
                        .args(["exec", "--config"])
                        .arg(&config)
                        .args([
                            "--lock",
                            "migrate",
                            "--once",
                            "release-42",
                            "--",
                            "sh",
                            "-c",
                        ])
                        .arg(format!("echo x >> {}; sleep 1; exit 3", marker.display()))
                        .output()
                        .expect("exec runs")
                        .status
                        .code()
                })
            })
            .collect();
        let codes: Vec<_> = callers
            .into_iter()
            .map(|c| c.join().expect("caller"))
            .collect();
        assert_eq!(codes, [Some(3); 4]);
        assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "x\n");
        // And never again for that key.
        let (code, _, _) = run(
            &config,
            &[
                "exec",
                "--lock",
                "migrate",
                "--once",
                "release-42",
                "--",
                "sh",
                "-c",
                "echo y >> /dev/null",
            ],
        );
        assert_eq!(code, 3);
        let (code, _, _) = run(
            &config,
            &[
                "exec",
                "--lock",
                "migrate",
                "--once",
                "release-43",
                "--",
                "true",
            ],
        );
        assert_eq!(code, 0);
        let rows = history_json(&config, "migrate");
        assert_eq!(rows.len(), 2);
        // Recorded at the time they started, with their key.
        for row in &rows {
            let started =
                chrono::DateTime::parse_from_rfc3339(row["started_at"].as_str().expect("start"))
                    .expect("rfc3339");
            let scheduled = chrono::DateTime::parse_from_rfc3339(
                row["scheduled_at"].as_str().expect("instant"),
            )
            .expect("rfc3339");
            assert!(
                (started - scheduled).abs() < chrono::TimeDelta::seconds(2),
                "{row}"
            );
        }
        let keys: Vec<&str> = rows.iter().filter_map(|r| r["once_key"].as_str()).collect();
        assert_eq!(keys, ["release-43", "release-42"]);
        let (_, table, _) = run(
            &config,
            &["history", "--job", "migrate", "--once-key", "release-42"],
        );
        assert!(
            table.lines().next().is_some_and(|h| h.ends_with("KEY")),
            "{table}"
        );
        assert!(
            table
                .lines()
                .nth(1)
                .is_some_and(|l| l.ends_with("release-42")),
            "{table}"
        );
        assert_eq!(table.lines().count(), 2, "{table}");
    }
}

/// `exec` with a program that does not exist says so plainly.
#[test]
fn exec_of_a_missing_command_says_so() {
    let db = TestDb::new(Kind::Sqlite);
    let config = db.config("");
    db.migrate();
    let (code, out, err) = run(
        &config,
        &["exec", "--lock", "x", "--", "/nonexistent/cmd", "arg"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("no such command: /nonexistent/cmd"), "{err}");
    assert!(!err.contains("setpriv"), "{err}");
    let rows = history_json(&config, "x");
    assert_eq!(rows[0]["status"], "error");
    let (code, _, err) = run(
        &config,
        &["exec", "--lock", "x", "--", "no-such-program-here"],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("no such command: no-such-program-here"),
        "{err}"
    );
}

#[test]
fn exec_wait_gives_up_while_the_lock_is_held() {
    let db = TestDb::new(Kind::Sqlite);
    let config = db.config("");
    db.migrate();
    let holder = Command::new(binary())
        .args(["exec", "--config"])
        .arg(&config)
        .args(["--lock", "busy", "--", "sleep", "3"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("holder");
    sleep(Duration::from_millis(700));
    let started = Instant::now();
    let (code, _, err) = run(
        &config,
        &["exec", "--lock", "busy", "--wait", "500ms", "--", "true"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not acquired within 500ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let _ = holder.wait_with_output();
}

const DEBIAN_CRONTAB: &str = "\
# /etc/crontab: system-wide crontab
SHELL=/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin

# Example of job definition:
# .---------------- minute (0 - 59)
# m h dom mon dow user\tcommand
17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly
25 6\t* * *\troot\ttest -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }
47 6\t* * 7\troot\ttest -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.weekly; }
52 6\t1 * *\troot\ttest -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.monthly; }
";

const USER_CRONTAB: &str = "\
MAILTO=ops@example.com
CRON_TZ=America/New_York
# every 15 minutes in office hours
*/15 9-17 * * mon-fri /usr/local/bin/sync-orders --since 15m
30 2 1,15 * * /usr/local/bin/invoice --run
0 0 13 * 5 echo \"friday or the 13th\"
@hourly /usr/bin/flock -n /tmp/x.lock /usr/local/bin/tidy
@reboot /usr/local/bin/warm-cache
";

#[test]
fn import_crontab_output_passes_check_with_the_same_instants() {
    let dir = tempfile::tempdir().expect("dir");
    for (name, crontab, user_column, expected) in [
        (
            "etc-crontab",
            DEBIAN_CRONTAB,
            "--user-column=true",
            vec![
                ("17 * * * *", "2027-03-01T00:17:00+00:00"),
                ("25 6 * * *", "2027-03-01T06:25:00+00:00"),
                ("47 6 * * 7", "2027-03-07T06:47:00+00:00"),
                ("52 6 1 * *", "2027-03-01T06:52:00+00:00"),
            ],
        ),
        (
            "alice",
            USER_CRONTAB,
            "--user-column=false",
            vec![
                // New York, EST: 09:00 is 14:00 UTC.
                ("*/15 9-17 * * mon-fri", "2027-03-01T14:00:00+00:00"),
                ("30 2 1,15 * *", "2027-03-01T07:30:00+00:00"),
                // Monday 1 March: the next Friday is the 5th (or the 13th).
                ("0 0 13 * 5", "2027-03-05T05:00:00+00:00"),
                ("@hourly", "2027-03-01T01:00:00+00:00"),
            ],
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, crontab).expect("crontab");
        // Pinned to UTC: the importer keeps the host's zone, which the
        // expected instants assume.
        let output = Command::new(binary())
            .args(["import-crontab", path.to_str().expect("utf-8"), user_column])
            .env("TZ", "UTC")
            .output()
            .expect("import-crontab");
        let (toml, notes) = text(&output);
        assert!(output.status.success(), "{notes}");
        let imported = dir.path().join(format!("{name}.toml"));
        std::fs::write(&imported, &toml).expect("toml");
        let check = Command::new(binary())
            .args(["check", "--config"])
            .arg(&imported)
            .args(["--from", "2027-03-01T00:00:00Z", "--count", "1"])
            .env("REPLICRON_DATABASE_URL", "sqlite:///tmp/unused.db")
            .output()
            .expect("check");
        let (out, err) = text(&check);
        assert!(check.status.success(), "{toml}\n{out}{err}");
        for (schedule, first) in expected {
            let block = out
                .split("\njob ")
                .find(|b| b.contains(&format!("schedule  {schedule}\n")))
                .unwrap_or_else(|| panic!("no job with schedule {schedule}:\n{out}"));
            assert!(
                block.contains(&format!("    {first}")),
                "{schedule}: {block}"
            );
        }
        if name == "alice" {
            // Line 1's MAILTO: mailed through this host's mail program,
            // or, without one, a warning.
            assert!(
                notes
                    .lines()
                    .any(|l| l.contains(":1: ") && l.contains("MAILTO")),
                "{notes}"
            );
            assert!(notes.contains(":8: @reboot"), "{notes}");
            assert!(toml.contains("timezone = \"America/New_York\""), "{toml}");
        } else {
            assert!(toml.contains("shell = \"/bin/sh\""), "{toml}");
            assert!(notes.contains("runs as user root"), "{notes}");
        }
    }
}

backend_test! {
    fn sighup_reloads_a_valid_config_and_keeps_the_old_one_on_errors(db: &TestDb) {
        let out = db.dir().join("ran.txt");
        let job = |name: &str| {
            format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\ncommand = 'echo {name} >> {}'\n\n",
                out.display()
            )
        };
        let config = db.config(&job("first"));
        let replica = Replica::start(&config, "solo", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(20));
        let ran = |name: &str| {
            std::fs::read_to_string(&out)
                .unwrap_or_default()
                .lines()
                .filter(|l| *l == name)
                .count()
        };
        wait_until("first to run", Duration::from_secs(10), || ran("first") > 0);

        // Invalid: reported with its errors, the old config keeps running.
        let text = std::fs::read_to_string(&config).expect("config");
        std::fs::write(&config, format!("{text}{}nonsense = 1\n", job("second"))).expect("config");
        replica.signal(Signal::SIGHUP);
        replica.wait_for_log("the old one keeps running", Duration::from_secs(10));
        assert!(
            replica.log_text().contains("nonsense"),
            "{}",
            replica.log_text()
        );
        let before = ran("first");
        wait_until("first to keep running", Duration::from_secs(10), || {
            ran("first") > before + 1
        });
        assert_eq!(ran("second"), 0);

        // Valid: second added, first removed.
        std::fs::write(
            &config,
            format!("[database]\nurl = {:?}\n\n{}", db.url, job("second")),
        )
        .expect("config");
        replica.signal(Signal::SIGHUP);
        replica.wait_for_log("config reloaded", Duration::from_secs(10));
        wait_until("second to run", Duration::from_secs(10), || {
            ran("second") > 0
        });
        sleep(Duration::from_millis(1500));
        let first_total = ran("first");
        sleep(Duration::from_millis(2000));
        assert_eq!(ran("first"), first_total, "the removed job still runs");
        replica.signal(Signal::SIGTERM);
    }
}

#[test]
#[cfg_attr(
    replicron_no_mysql_server,
    ignore = "REPLICRON_TEST_MYSQL_URL is not set"
)]
fn healthz_follows_the_database_and_metrics_count_mysql() {
    healthz_follows_the_database_and_metrics_count(Kind::Mysql);
}

#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn healthz_follows_the_database_and_metrics_count_postgres() {
    healthz_follows_the_database_and_metrics_count(Kind::Postgres);
}

fn healthz_follows_the_database_and_metrics_count(kind: Kind) {
    {
        let db = TestDb::new(kind);
        let proxy = Proxy::start(db.server());
        let port = free_port();
        let jobs = format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n"
        );
        let config = db.config_named("jobs-proxy.toml", &db.url_via(proxy.port), &jobs);
        let replica = Replica::start(&config, "solo", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(20));
        wait_until("/healthz 200", Duration::from_secs(10), || {
            http_get(port, "/healthz").0 == 200
        });

        let count_runs = || metric_total(port, "replicron_runs_total", ("status", "succeeded"));
        wait_until("a run counted", Duration::from_secs(10), || {
            count_runs() >= 1.0
        });
        let before = count_runs();
        wait_until("the counter to move", Duration::from_secs(10), || {
            count_runs() >= before + 2.0
        });
        let (_, body) = http_get(port, "/metrics");
        for metric in [
            "replicron_claims_total",
            "replicron_run_duration_seconds_bucket",
            "replicron_start_lateness_seconds_bucket",
            "replicron_last_success_timestamp_seconds",
            "replicron_database_up",
        ] {
            assert!(body.contains(metric), "{metric} missing:\n{body}");
        }

        proxy.cut();
        wait_until("/healthz 503", Duration::from_secs(60), || {
            let (code, body) = http_get(port, "/healthz");
            code == 503 && body.contains("database")
        });
        proxy.restore();
        wait_until("/healthz 200 again", Duration::from_secs(60), || {
            http_get(port, "/healthz").0 == 200
        });
        replica.signal(Signal::SIGTERM);
        eprintln!(
            "{kind:?}: /healthz went 200 → 503 with the database cut → 200 when restored; runs counted"
        );
    }
}

#[test]
fn completions_and_man_page() {
    for shell in ["bash", "zsh", "fish"] {
        let output = replicron(&["completions", shell]);
        let (out, err) = text(&output);
        assert!(output.status.success(), "{err}");
        assert!(out.contains("import-crontab"), "{shell}: {out}");
    }
    let output = replicron(&["man"]);
    let (out, _) = text(&output);
    assert!(output.status.success());
    assert!(
        out.contains(".TH REPLICRON 1") && out.contains("exec"),
        "{out}"
    );
    // It renders without a warning where groff is installed.
    let dir = tempfile::tempdir().expect("dir");
    let page = dir.path().join("replicron.1");
    std::fs::write(&page, &out).expect("page");
    match Command::new("groff")
        .args(["-man", "-ww", "-z"])
        .arg(&page)
        .output()
    {
        Ok(groff) => {
            let (_, warnings) = text(&groff);
            assert!(groff.status.success() && warnings.is_empty(), "{warnings}");
        }
        Err(_) => eprintln!("skipped: groff is not installed"),
    }
}

backend_test! {
    /// A second process under an instance id that a live replica uses is
    /// refused; a replica restarted under its id after `kill -9` takes it over
    /// at once (its old process is gone from this host).
    fn an_instance_id_in_use_is_refused(db: &TestDb) {
        let config =
            db.config("[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n");
        let first = Replica::start(&config, "twin", None, &[]);
        first.wait_for_log("replicron started", Duration::from_secs(20));
        let mut second = Replica::start(&config, "twin", None, &[]);
        let status = second.wait_exit(Duration::from_secs(20)).expect("refused");
        assert_eq!(status.code(), Some(1), "{}", second.log_text());
        assert!(
            second.log_text().contains("is in use by a live replica"),
            "{}",
            second.log_text()
        );
        first.signal(Signal::SIGKILL);
        drop(first);
        let third = Replica::start(&config, "twin", None, &[]);
        third.wait_for_log("replicron started", Duration::from_secs(20));
        assert!(
            third.log_text().contains("took over the instance id"),
            "{}",
            third.log_text()
        );
        third.signal(Signal::SIGTERM);
    }
}

/// `unlock --force` while the holder runs the job: `status` says the lease
/// ended and the holder (alive) stops the run, not that it vanished; the
/// holder then records the run `lost_lock`.
#[test]
fn unlock_force_of_a_live_holder_is_no_orphan() {
    let db = TestDb::new(Kind::Sqlite);
    let config = db.config(
        "[[job]]\nname = \"long\"\nschedule = \"*/2 * * * * *\"\nlock_at_most_for = \"6s\"\ncommand = 'sleep 30'\n",
    );
    let replica = Replica::start(&config, "holder", None, &[]);
    // A bound, not a wait: it starts within seconds, later on a loaded host.
    replica.wait_for_log("run started", Duration::from_secs(60));
    let (code, out, err) = run(&config, &["unlock", "long", "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run(&config, &["status"]);
    assert_eq!(code, 1, "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("long"))
        .expect("long row");
    assert!(
        row.contains("LEASE ENDED") && row.contains("holder is alive"),
        "{out}"
    );
    assert!(
        !row.contains("ORPHANED") && !row.contains("vanished"),
        "{out}"
    );
    wait_until(
        "the holder to stop its run",
        Duration::from_secs(15),
        || {
            history_json(&config, "long")
                .iter()
                .any(|r| r["status"] == "lost_lock")
        },
    );
    replica.signal(Signal::SIGTERM);
}

/// promtool, if installed (in CI it must be: Debian's prometheus package).
pub(crate) fn promtool() -> Option<&'static str> {
    let found = std::path::Path::new("/usr/bin/promtool").exists();
    assert!(
        found || std::env::var("CI").as_deref() != Ok("true"),
        "promtool is missing: install Debian's prometheus package"
    );
    found.then_some("/usr/bin/promtool")
}

/// `/metrics` passes `promtool check metrics` (every metric has its HELP);
/// a job's alerting series exist at 0 before its first run; the pending
/// history writes go back to 0 once the runs are written.
#[test]
fn metrics_are_described_present_from_the_start_and_true() {
    let db = TestDb::new(Kind::Sqlite);
    let port = free_port();
    let config = db.config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
         [[job]]\nname = \"yearly\"\nschedule = \"@yearly\"\ncommand = 'true'\n\n\
         [[job]]\nname = \"often\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n"
    ));
    let replica = Replica::start(&config, "metered", None, &[]);
    replica.wait_for_log("replicron started", Duration::from_secs(20));
    let sample = |body: &str, series: &str| -> Option<f64> {
        body.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    let (_, body) = http_get(port, "/metrics");
    for series in [
        "replicron_runs_total{job=\"yearly\",status=\"failed\"}",
        "replicron_runs_total{job=\"yearly\",status=\"succeeded\"}",
        "replicron_overruns_total{job=\"yearly\"}",
        "replicron_last_success_timestamp_seconds{job=\"yearly\"}",
        "replicron_instants_skipped_total{job=\"yearly\",reason=\"database_down\"}",
        "replicron_claims_total{job=\"yearly\",result=\"won\"}",
    ] {
        assert_eq!(sample(&body, series), Some(0.0), "{series}:\n{body}");
    }
    wait_until("three runs written", Duration::from_secs(10), || {
        history_json(&config, "often").len() >= 3
    });
    sleep(Duration::from_millis(300));
    let (_, body) = http_get(port, "/metrics");
    assert_eq!(
        sample(&body, "replicron_history_pending_writes"),
        Some(0.0),
        "{body}"
    );
    assert!(
        sample(
            &body,
            "replicron_runs_total{job=\"often\",status=\"succeeded\"}"
        ) >= Some(3.0)
    );
    if let Some(promtool) = promtool() {
        let mut check = Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool");
        check
            .stdin
            .take()
            .expect("stdin")
            .write_all(body.as_bytes())
            .expect("write");
        let result = check.wait_with_output().expect("promtool");
        assert!(
            result.status.success(),
            "promtool check metrics: {:?}\n{body}",
            text(&result)
        );
    } else {
        eprintln!("skipped promtool check metrics: promtool is not installed");
    }
    replica.signal(Signal::SIGTERM);
    let mut replica = replica;
    replica.wait_exit(Duration::from_secs(20)).expect("exits");

    // A replica started later, on which "often" will not run for a year,
    // still knows from the history when it last succeeded.
    let port = free_port();
    let later = db.config_named(
        "later.toml",
        &db.url,
        &format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [[job]]\nname = \"often\"\nschedule = \"@yearly\"\ncommand = 'true'\n"
        ),
    );
    let replica = Replica::start(&later, "later", None, &[]);
    replica.wait_for_log("replicron started", Duration::from_secs(20));
    let (_, body) = http_get(port, "/metrics");
    let last = sample(
        &body,
        "replicron_last_success_timestamp_seconds{job=\"often\"}",
    )
    .unwrap_or_default();
    let now = chrono::Utc::now().timestamp() as f64;
    assert!(
        last > now - 60.0 && last <= now + 1.0,
        "last success {last}, now {now}:\n{body}"
    );
    replica.signal(Signal::SIGTERM);
}
