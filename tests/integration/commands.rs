//! The one-off commands as a person runs them: a job run from the command
//! line notifies before the command exits, the commands that need only the
//! database work with a broken job file, and output cut short by its
//! reader ends the command quietly.

use std::time::{Duration, Instant};

use chrono::DurationRound as _;

use crate::support::{TestDb, backend_test, run};

backend_test! {
    /// A failing `@manual` job run by `trigger`, and the failing instants
    /// of a `backfill`, are each notified (the notifier command has run
    /// when the command exits), with what started them.
    fn a_failed_run_from_the_command_line_is_notified(db: &TestDb) {
        db.migrate();
        let told = db.dir().join("told");
        let notify = format!(
            "notify = {{ command = 'echo \"$REPLICRON_JOB $REPLICRON_EVENT $REPLICRON_TRIGGER $REPLICRON_SCHEDULED_AT\" >> {}' }}",
            told.display()
        );
        let config = db.config(&format!(
            "[[job]]\nname = \"rebill\"\nschedule = \"@manual\"\ncommand = 'exit 3'\n{notify}\n\n\
             [[job]]\nname = \"nightly\"\nschedule = \"0 * * * *\"\ncommand = 'exit 4'\n{notify}\n"
        ));
        let (code, out, err) = run(&config, &["trigger", "rebill"]);
        assert_eq!(code, 3, "{out}{err}");
        let lines = std::fs::read_to_string(&told).expect("the trigger's failure was told");
        assert!(lines.starts_with("rebill failed manual "), "{lines}");

        let hour = |h: i64| {
            let base = (chrono::Utc::now() - chrono::TimeDelta::hours(6))
                .duration_trunc(chrono::TimeDelta::hours(1))
                .expect("hour");
            (base + chrono::TimeDelta::hours(h)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        let (code, out, err) = run(
            &config,
            &["backfill", "nightly", "--from", &hour(0), "--to", &hour(3)],
        );
        assert_eq!(code, 1, "{out}{err}");
        let lines = std::fs::read_to_string(&told).expect("told");
        let backfilled: Vec<&str> = lines.lines().filter(|l| l.starts_with("nightly ")).collect();
        assert_eq!(
            backfilled,
            (0..3)
                .map(|h| format!("nightly failed backfill {}", hour(h)))
                .collect::<Vec<_>>(),
            "{lines}"
        );
    }
}

/// A notifier command that does not end holds the command no longer than
/// its bound, and the command says what it did not send.
#[test]
fn a_notification_that_hangs_is_given_up_and_named() {
    let db = TestDb::sqlite();
    db.migrate();
    let config = db.config(
        "[[job]]\nname = \"rebill\"\nschedule = \"@manual\"\ncommand = 'exit 3'\n\
         notify = { command = 'sleep 60', timeout = \"2m\" }\n",
    );
    let started = Instant::now();
    let (code, out, err) = run(&config, &["trigger", "rebill"]);
    let took = started.elapsed();
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        took >= Duration::from_secs(14) && took < Duration::from_secs(40),
        "{took:?}"
    );
    assert!(
        err.contains("1 notification(s) of rebill not sent before exit"),
        "{err}"
    );
}

/// Each command that needs only the database, with `config`: none stops
/// at the job file (exit 2); each says what is wrong with it (`needle`).
fn database_commands_work(config: &std::path::Path, job: &str, needle: &str) {
    let from = (chrono::Utc::now() - chrono::TimeDelta::hours(2))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let to = (chrono::Utc::now() - chrono::TimeDelta::hours(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for args in [
        vec!["status"],
        vec!["history"],
        vec!["audit"],
        vec!["pause", job],
        vec!["resume", job],
        vec!["unlock", job],
        vec!["verify", "--from", &from, "--to", &to],
    ] {
        let (code, out, err) = run(config, &args);
        assert!(code == 0 || code == 1, "{args:?} exited {code}: {out}{err}");
        assert!(!err.contains("error in config"), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?} does not say what is broken: {err}"
        );
    }
}

backend_test! {
    /// A calendar's file is missing: the commands that need only the
    /// database work, naming it; a replica starts, runs the other job and
    /// holds the one that names the calendar (never run, `HELD` in
    /// `status`, the API and `replicron_job_held`); once the file is back,
    /// a reload releases it.
    fn a_missing_calendar_holds_its_jobs_and_nothing_else(db: &TestDb) {
        db.migrate();
        let port = crate::web::free_port();
        let config = db.config(&format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [[calendar]]\nname = \"holidays\"\nics = \"holidays.ics\"\n\n\
             [[job]]\nname = \"fine\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n\n\
             [[job]]\nname = \"cal\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n\
             skip_on = [\"holidays\"]\n"
        ));
        let needle = "calendar \"holidays\": cannot read";
        let (code, out, err) = run(&config, &["check"]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains(needle) && err.contains("would hold (never run) \"cal\""), "{err}");
        assert!(!err.contains("no [[calendar]] declares"), "{err}");

        let mut replica = crate::support::Replica::start(&config, "r1", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        crate::support::wait_until("3 runs of fine", Duration::from_secs(30), || {
            crate::support::history_json(&config, "fine").len() >= 3
        });
        assert_eq!(crate::support::history_json(&config, "cal"), Vec::<serde_json::Value>::new());
        assert!(replica.log_text().contains("held, not run"), "{}", replica.log_text());
        let held = |value: &str| {
            let (_, _, body) = crate::web::http(port, "GET", "/metrics", &[], "");
            body.lines().any(|l| l == format!("replicron_job_held{{job=\"cal\"}} {value}"))
        };
        assert!(held("1"));
        let (code, jobs) = crate::web::get_json(port, "/api/v1/jobs");
        assert_eq!(code, 200, "{jobs}");
        let cal = jobs["jobs"].as_array().into_iter().flatten().find(|j| j["name"] == "cal").cloned();
        assert!(
            cal.as_ref().and_then(|j| j["problem"].as_str()).is_some_and(|p| p.starts_with("HELD:")),
            "{jobs}"
        );
        let (code, out, err) = run(&config, &["status"]);
        assert_eq!(code, 1, "{out}{err}");
        let row = out.lines().find(|l| l.starts_with("cal ")).unwrap_or_default();
        assert!(row.contains("HELD"), "{out}");
        database_commands_work(&config, "cal", needle);

        std::fs::write(
            db.dir().join("holidays.ics"),
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20010101\nEND:VEVENT\nEND:VCALENDAR\n",
        )
        .expect("written");
        replica.signal(nix::sys::signal::Signal::SIGHUP);
        crate::support::wait_until("a run of cal", Duration::from_secs(30), || {
            !crate::support::history_json(&config, "cal").is_empty()
        });
        assert!(held("0"));
        replica.signal(nix::sys::signal::Signal::SIGTERM);
        let status = replica.wait_exit(Duration::from_secs(40)).expect("exits");
        assert!(status.success(), "{status:?}");
    }
}

backend_test! {
    /// A job file with a bad job: the commands that need only the database
    /// work, naming the error; the commands that run jobs still refuse it.
    fn a_broken_job_file_leaves_the_database_commands_working(db: &TestDb) {
        db.migrate();
        let good = db.config("[[job]]\nname = \"nightly\"\nschedule = \"@daily\"\ncommand = 'true'\n");
        let (code, out, err) = run(&good, &["pause", "nightly"]);
        assert_eq!(code, 0, "{out}{err}");
        let config = db.config(
            "[[job]]\nname = \"nightly\"\nschedule = \"every tuesday\"\ncommand = 'true'\n",
        );
        database_commands_work(&config, "nightly", "jobs.toml:6: job \"nightly\", key \"schedule\"");
        let (code, out, err) = run(&config, &["trigger", "nightly"]);
        assert_eq!(code, 2, "{out}{err}");
        let (code, out, err) = run(&config, &["pause", "nightly"]);
        assert_eq!(code, 0, "{out}{err}");
        // A name the file has nowhere is still refused.
        let (code, out, err) = run(&config, &["pause", "nightlly"]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains("no job named \"nightlly\""), "{err}");
    }
}

/// Listings whose reader has gone (`replicron history | head`) end as
/// `ls | head` does: by SIGPIPE, quietly, never with a panic.
#[test]
fn a_closed_pipe_ends_a_listing_quietly() {
    use std::os::unix::process::ExitStatusExt as _;
    let db = TestDb::sqlite();
    db.migrate();
    let config =
        db.config("[[job]]\nname = \"nightly\"\nschedule = \"@daily\"\ncommand = 'true'\n");
    let (code, out, err) = run(&config, &["pause", "nightly"]);
    assert_eq!(code, 0, "{out}{err}");
    let path = config.to_str().expect("utf-8");
    for args in [
        vec!["history", "--config", path],
        vec!["audit", "--config", path],
        vec!["status", "--config", path],
        vec!["check", "--config", path],
        vec!["man"],
    ] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let output = std::process::Command::new(crate::support::binary())
            .args(&args)
            .env_remove("REPLICRON_DATABASE_URL")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?} {err}",
            output.status
        );
        assert_eq!(err, "", "{args:?}");
    }
}

/// `verify --from A --to B` checks `[A, B)`, as `backfill` runs it: an
/// instant at B is the next range's.
#[test]
fn verify_checks_a_half_open_range() {
    let db = TestDb::sqlite();
    db.migrate();
    let config =
        db.config("[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n");
    let at = |s: i64| {
        let base = (chrono::Utc::now() - chrono::TimeDelta::hours(1))
            .duration_trunc(chrono::TimeDelta::minutes(1))
            .expect("minute");
        (base + chrono::TimeDelta::seconds(s)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    let due = |from: &str, to: &str| {
        let (_, out, err) = run(
            &config,
            &["verify", "--from", from, "--to", to, "--format", "json"],
        );
        let report: serde_json::Value = serde_json::from_str(&out).expect(&err);
        report["jobs"][0]["due"].as_u64().expect("due")
    };
    assert_eq!(due(&at(0), &at(10)), 10);
    assert_eq!(due(&at(10), &at(20)), 10);
    assert_eq!(due(&at(0), &at(20)), 20);
}

/// Each run is told what started it, in `REPLICRON_TRIGGER`, as its
/// history row says: a scheduled instant, its retry, the dependent job it
/// started, an instant caught up at start, a trigger and a backfill.
#[test]
fn a_run_knows_what_started_it() {
    let db = TestDb::sqlite();
    db.migrate();
    let out = db.dir().join("triggers");
    let record = format!(
        "echo \"$REPLICRON_JOB $REPLICRON_ATTEMPT $REPLICRON_TRIGGER\" >> {}",
        out.display()
    );
    let config = db.config(&format!(
        "[[job]]\nname = \"tick\"\nschedule = \"*/2 * * * * *\"\nretries = 1\nretry_backoff = \"100ms\"\n\
         command = '{record}; [ \"$REPLICRON_ATTEMPT\" = 2 ]'\n\n\
         [[job]]\nname = \"child\"\nafter = [\"tick\"]\ncommand = '{record}'\n\n\
         [[job]]\nname = \"asked\"\nschedule = \"@manual\"\ncommand = '{record}'\n\n\
         [[job]]\nname = \"late\"\nschedule = \"*/5 * * * * *\"\ncatch_up = \"1m\"\ncommand = '{record}'\n"
    ));
    let mut replica = crate::support::Replica::start(&config, "r1", None, &[]);
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    let lines = || std::fs::read_to_string(&out).unwrap_or_default();
    crate::support::wait_until("a child's run", Duration::from_secs(30), || {
        lines().contains("child 1 dependency")
    });
    replica.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        replica
            .wait_exit(Duration::from_secs(40))
            .expect("exits")
            .success()
    );
    // An instant of `late` passes while no replica runs: the next start
    // catches it up.
    let now = chrono::Utc::now();
    let next = now
        .duration_trunc(chrono::TimeDelta::seconds(5))
        .expect("5 s")
        + chrono::TimeDelta::milliseconds(6500);
    std::thread::sleep((next - now).to_std().expect("ahead"));
    let mut replica = crate::support::Replica::start(&config, "r2", None, &[]);
    crate::support::wait_until("a caught-up run", Duration::from_secs(30), || {
        lines().contains("late 1 catch_up")
    });
    replica.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        replica
            .wait_exit(Duration::from_secs(40))
            .expect("exits")
            .success()
    );
    let (code, o, e) = run(&config, &["trigger", "asked"]);
    assert_eq!(code, 0, "{o}{e}");
    let from = (chrono::Utc::now() - chrono::TimeDelta::hours(1))
        .duration_trunc(chrono::TimeDelta::minutes(1))
        .expect("minute");
    let to =
        (from + chrono::TimeDelta::seconds(2)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let from = from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (code, o, e) = run(&config, &["backfill", "tick", "--from", &from, "--to", &to]);
    assert_eq!(code, 0, "{o}{e}");
    let lines = lines();
    for needle in [
        "tick 1 schedule",
        "tick 2 retry",
        "child 1 dependency",
        "asked 1 manual",
        "tick 1 backfill",
        "tick 2 retry",
    ] {
        assert!(lines.contains(needle), "{needle}: {lines}");
    }
}

/// `check` accepts a job that can never fire, and warns of it by name.
#[test]
fn check_warns_of_a_job_that_can_never_fire() {
    let db = TestDb::sqlite();
    let config = db.config(
        "[[calendar]]\nname = \"gone\"\ndates = [\"2001-01-01\"]\n\n\
         [[job]]\nname = \"once\"\nschedule = \"@daily\"\nonly_on = [\"gone\"]\ncommand = 'true'\n\n\
         [[job]]\nname = \"parent\"\nschedule = \"@daily\"\nenabled = false\ncommand = 'true'\n\n\
         [[job]]\nname = \"child\"\nafter = [\"parent\"]\ncommand = 'true'\n",
    );
    let (code, out, err) = run(&config, &["check", "--count", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    for needle in [
        "warning: ",
        "job \"once\", key \"only_on\": the job can never fire",
        "job \"child\", key \"after\": the job can never fire: after names \"parent\", which is disabled",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
}
