//! `replicron check` on valid and invalid files.

use crate::support::{replicron, text};

fn write(dir: &std::path::Path, body: &str) -> String {
    let path = dir.join("jobs.toml");
    std::fs::write(&path, body).expect("write config");
    path.to_str().expect("utf-8 path").to_string()
}

const DB: &str = "[database]\nurl = \"sqlite://replicron.db\"\n";

#[test]
fn the_example_config_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/jobs.example.toml");
    let output = replicron(&[
        "check",
        "--config",
        example,
        "--from",
        "2027-03-26T00:00:00Z",
    ]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    for job in ["purge-tmp-exports", "daily-report", "heartbeat"] {
        assert!(out.contains(&format!("job \"{job}\"")), "{out}");
    }
    // The Berlin report across the spring-forward weekend (Easter, whose
    // Friday and Monday its holiday calendar excludes): 07:00 CET, then
    // 07:00 CEST.
    assert!(
        out.contains(
            "2027-03-26T06:00:00+00:00  2027-03-26T07:00:00+01:00  excluded: skip_on calendar \"de-holidays\""
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "2027-03-29T05:00:00+00:00  2027-03-29T07:00:00+02:00  excluded: skip_on calendar \"de-holidays\""
        ),
        "{out}"
    );
    assert!(
        out.contains("    2027-03-30T05:00:00+00:00  2027-03-30T07:00:00+02:00\n"),
        "{out}"
    );
    // The mail after it: the report's instants.
    let mail = out
        .split("job \"mail-report\"")
        .nth(1)
        .expect("mail-report");
    assert!(mail.contains("after     daily-report"), "{out}");
    assert!(mail.contains("2027-03-30T05:00:00+00:00"), "{out}");
}

/// A file that uses every key of calendars, windows, the daylight-saving
/// policy, several schedules and dependencies: `check --from --count`
/// shows each job's window, calendars, what the policy does at the zone's
/// next transition, the instants with the excluded ones named by their
/// calendar, and a dependent job's parents and instants.
#[test]
fn check_shows_calendars_windows_the_dst_policy_and_dependencies() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("holidays.ics"),
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20201225\r\n\
         DTEND;VALUE=DATE:20201227\r\nRRULE:FREQ=YEARLY\r\nSUMMARY:Christmas\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
    )
    .expect("ics");
    let path = write(
        dir.path(),
        &format!(
            "{DB}[defaults]\ntimezone = \"Europe/Berlin\"\n\n\
             [[calendar]]\nname = \"holidays\"\nics = \"holidays.ics\"\n\n\
             [[calendar]]\nname = \"trading\"\ndates = [\"2026-12-23\", \"2026-12-28\"]\n\n\
             [[job]]\nname = \"billing\"\nschedule = [\"30 2 * * 1-5\", \"0 12 * * 6\"]\n\
             skip_on = [\"holidays\"]\ndst_gap = \"skip\"\ndst_repeat = \"both\"\n\
             not_before = \"2026-12-01T00:00:00Z\"\nnot_after = \"2036-12-31T23:00:00+01:00\"\ncommand = \"true\"\n\n\
             [[job]]\nname = \"settle\"\nschedule = \"30 2 * * *\"\ncommand = \"true\"\n\n\
             [[job]]\nname = \"close\"\nschedule = \"0 17 * * *\"\nonly_on = [\"trading\"]\ncommand = \"true\"\n\n\
             [[job]]\nname = \"report\"\nafter = {{ jobs = [\"billing\", \"settle\"], on = [\"succeeded\"] }}\ncommand = \"true\"\n\n\
             [[job]]\nname = \"cleanup\"\nafter = [\"report\"]\ncommand = \"true\"\n"
        ),
    );
    let output = replicron(&[
        "check",
        "--config",
        &path,
        "--from",
        "2026-12-22T00:00:00Z",
        "--count",
        "6",
    ]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    for line in [
        "calendar \"holidays\": 160 dates; next 2026-12-25 2026-12-26 2027-12-25 2027-12-26 2028-12-25",
        "calendar \"trading\": 2 dates; next 2026-12-23 2026-12-28",
        "  schedule  30 2 * * 1-5 | 0 12 * * 6",
        "  window    2026-12-01T00:00:00Z to 2036-12-31T22:00:00Z",
        "  skip_on   \"holidays\"",
        "  only_on   \"trading\"",
        "  dst       next transition 2027-03-28T01:00:00.000Z: clocks go forward 1h, from 2027-03-28 02:00 to 2027-03-28 03:00",
        "  dst       dst_gap = \"skip\": a time from 02:00 to 02:59 does not fire that day",
        "    2026-12-25T01:30:00+00:00  2026-12-25T02:30:00+01:00  excluded: skip_on calendar \"holidays\" (every instant of 2026-12-25)",
        "    2026-12-28T01:30:00+00:00  2026-12-28T02:30:00+01:00\n",
        "    2026-12-24T16:00:00+00:00  2026-12-24T17:00:00+01:00  excluded: not in only_on calendar \"trading\"",
        "    2026-12-28T16:00:00+00:00  2026-12-28T17:00:00+01:00\n",
        "  after     billing, settle (once for each instant at which every one of them ended succeeded)",
        "  after     report (once for each instant at which it ended succeeded)",
    ] {
        assert!(out.contains(line), "no {line:?} in\n{out}");
    }
    // The fan-in's instants: the weekdays' 02:30 but the holidays.
    let report = out.split("job \"report\"").nth(1).expect("report");
    assert!(report.contains("    2026-12-24T01:30:00+00:00  2026-12-24T02:30:00+01:00\n    2026-12-28T01:30:00+00:00"), "{out}");
    // Its parents share no instant (02:30 and 12:00 against 18:00):
    // refused, naming them.
    let refused = write(
        dir.path(),
        &std::fs::read_to_string(&path).expect("read").replace(
            "name = \"settle\"\nschedule = \"30 2 * * *\"",
            "name = \"settle\"\nschedule = \"0 18 * * *\"",
        ),
    );
    let output = replicron(&["check", "--config", &refused]);
    let (out, err) = text(&output);
    assert!(!output.status.success(), "{out}{err}");
    assert!(err.contains("share no instant in the next year"), "{err}");
}

#[test]
fn check_lists_the_requested_instants_in_utc_and_the_job_zone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write(
        dir.path(),
        &format!(
            "{DB}[[job]]\nname = \"nightly\"\nschedule = \"30 2 * * *\"\ntimezone = \"America/New_York\"\ncommand = \"true\"\n"
        ),
    );
    let output = replicron(&[
        "check",
        "--config",
        &path,
        "--from",
        "2027-03-12T12:00:00Z",
        "--count",
        "3",
    ]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    let instants: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("    "))
        .map(str::trim)
        .collect();
    assert_eq!(
        instants,
        [
            "2027-03-13T07:30:00+00:00  2027-03-13T02:30:00-05:00",
            // 02:30 does not exist on the 14th: once, at 03:00 EDT.
            "2027-03-14T07:00:00+00:00  2027-03-14T03:00:00-04:00",
            "2027-03-15T06:30:00+00:00  2027-03-15T02:30:00-04:00",
        ]
    );
}

#[test]
fn an_invalid_config_reports_every_error_and_exits_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write(
        dir.path(),
        &format!(
            "{DB}\n[[job]]\nname = \"a\"\nschedule = \"every day\"\ncommand = \"true\"\n\n\
             [[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\ntimeout = \"0s\"\n"
        ),
    );
    let output = replicron(&["check", "--config", &path]);
    let (out, err) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("3 errors"), "{err}");
    assert!(
        err.contains(&format!("{path}:6: job \"a\", key \"schedule\"")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{path}:10: job \"a\", key \"name\": duplicate")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{path}:13: job \"a\", key \"timeout\"")),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn unknown_keys_are_named_with_their_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write(
        dir.path(),
        &format!("{DB}[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncomand = \"true\"\n"),
    );
    let output = replicron(&["check", "--config", &path]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{path}:6: job \"a\", key \"comand\": unknown field"
        )),
        "{err}"
    );
}

/// `[telemetry] trace_url` must be a trace viewer's http(s) URL with
/// `{trace_id}`: a bad one is named with its key and line.
#[test]
fn a_trace_url_without_its_trace_id_is_refused_with_its_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (url, needle) in [
        ("http://jaeger:16686/trace/", "has no {trace_id}"),
        (
            "jaeger:16686/trace/{trace_id}",
            "not an http:// or https:// URL",
        ),
    ] {
        let path = write(
            dir.path(),
            &format!("{DB}[telemetry]\ntrace_url = \"{url}\"\n"),
        );
        let output = replicron(&["check", "--config", &path]);
        let (_, err) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{err}");
        let line = err
            .lines()
            .find(|l| l.contains("trace_url"))
            .unwrap_or_else(|| panic!("no trace_url in {err}"));
        assert!(line.starts_with(&format!("{path}:4: ")), "{err}");
        assert!(line.contains(needle), "{err}");
    }
    let path = write(
        dir.path(),
        &format!(
            "{DB}[telemetry]\ntrace_url = \"https://tempo.example/trace/{{trace_id}}?span={{span_id}}\"\n"
        ),
    );
    let output = replicron(&["check", "--config", &path]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
}

#[test]
fn a_missing_file_or_url_is_an_error_not_a_default() {
    let output = replicron(&["check", "--config", "/nonexistent/jobs.toml"]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/nonexistent/jobs.toml") && err.contains("cannot read"),
        "{err}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let path = write(
        dir.path(),
        "[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n",
    );
    let output = replicron(&["check", "--config", &path]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("REPLICRON_DATABASE_URL"), "{err}");
}

#[test]
fn the_environment_url_wins_and_is_redacted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write(
        dir.path(),
        &format!("{DB}[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n"),
    );
    let output = std::process::Command::new(crate::support::binary())
        .args(["check", "--config", &path])
        .env(
            "REPLICRON_DATABASE_URL",
            "mysql://app:hunter2@db.internal:3306/cron",
        )
        .output()
        .expect("runs");
    let (out, err) = text(&output);
    assert!(
        !out.contains("hunter2") && !err.contains("hunter2"),
        "{out}{err}"
    );
    if output.status.success() {
        assert!(
            out.contains("mysql://app:***@db.internal:3306/cron"),
            "{out}"
        );
    } else {
        assert!(err.contains("--features mysql"), "{err}");
    }
}

#[test]
fn bad_arguments_exit_2() {
    let output = replicron(&["check", "--config", "x.toml", "--from", "yesterday"]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("RFC 3339"), "{err}");
}

/// Logs written to a file (or the journal) carry no colour codes: the
/// daemon's text log, with the default settings and with `NO_COLOR`, and
/// the JSON log.
#[test]
fn logs_into_a_file_have_no_colour_codes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("jobs.toml");
    std::fs::write(
        &config,
        "[database]\nurl = \"sqlite://replicron.db\"\n\n[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"echo tick\"\n",
    )
    .expect("write config");
    for (format, no_color) in [("text", None), ("text", Some("1")), ("json", None)] {
        let log = dir.path().join(format!("{format}.log"));
        let mut command = std::process::Command::new(crate::support::binary());
        command
            .args(["--log-format", format, "run", "--config"])
            .arg(&config)
            .env_remove("REPLICRON_DATABASE_URL")
            .env_remove("NO_COLOR")
            .env("RUST_LOG", "info")
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(std::fs::File::create(&log).expect("log"));
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let mut child = command.spawn().expect("start replicron run");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("run finished")
        {
            assert!(std::time::Instant::now() < deadline, "no run finished");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = child.wait();
        let text = std::fs::read_to_string(&log).expect("log");
        assert!(
            !text.contains('\u{1b}'),
            "{format} log (NO_COLOR={no_color:?}) has escape codes:\n{text}"
        );
    }
}

/// A URL without its `://` still has its password hidden, from the file and
/// from the environment.
#[test]
fn a_malformed_url_never_prints_its_password() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write(
        dir.path(),
        "[database]\nurl = \"mysql//admin:Sup3rS3cret@127.0.0.1/nc\"\n",
    );
    let output = replicron(&["check", "--config", &path]);
    let (out, err) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{out}{err}");
    assert!(err.contains("has no scheme"), "{err}");
    assert!(err.contains("admin:***@127.0.0.1"), "{err}");
    assert!(
        !err.contains("Sup3rS3cret") && !out.contains("Sup3rS3cret"),
        "{err}"
    );
    let path = write(dir.path(), "");
    let output = std::process::Command::new(crate::support::binary())
        .args(["check", "--config", &path])
        .env(
            "REPLICRON_DATABASE_URL",
            "postgres:/app:Sup3rS3cret@db/jobs",
        )
        .output()
        .expect("check");
    let (out, err) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{out}{err}");
    assert!(
        !err.contains("Sup3rS3cret") && !out.contains("Sup3rS3cret"),
        "{err}"
    );
}

/// `--config` defaults to `REPLICRON_CONFIG`, else
/// `/etc/replicron/jobs.toml`; the file named is the one read and reported.
#[test]
fn the_config_comes_from_replicron_config_or_etc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write(
        dir.path(),
        &format!(
            "{DB}\n[[job]]\nname = \"env-named\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
        ),
    );
    let output = std::process::Command::new(crate::support::binary())
        .args(["check", "--count", "0"])
        .env("REPLICRON_CONFIG", &path)
        .env_remove("REPLICRON_DATABASE_URL")
        .output()
        .expect("check");
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    assert!(
        out.contains(&format!("{path}: valid")) && out.contains("env-named"),
        "{out}"
    );
    let output = std::process::Command::new(crate::support::binary())
        .args(["check", "--count", "0"])
        .env_remove("REPLICRON_CONFIG")
        .env_remove("REPLICRON_DATABASE_URL")
        .output()
        .expect("check");
    let (out, err) = text(&output);
    if std::path::Path::new("/etc/replicron/jobs.toml").exists() {
        eprintln!("/etc/replicron/jobs.toml exists here: its check is not asserted");
    } else {
        assert_eq!(output.status.code(), Some(2), "{out}{err}");
        assert!(err.contains("/etc/replicron/jobs.toml"), "{err}");
    }
}
