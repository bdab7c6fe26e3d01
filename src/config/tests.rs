//! One failing config per rule of the job file (the book's "Configure",
//! `config/keys.rs`), each asserting that the error names the line, the job
//! and the key.

use super::*;

const DB: &str = "[database]\nurl = \"sqlite:///tmp/replicron-test.db\"\n";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("jobs.toml"), text, &Environment::default())
}

fn errors(text: &str) -> Vec<Diagnostic> {
    match parse(text) {
        Ok(_) => panic!("config was accepted:\n{text}"),
        Err(e) => e.diagnostics,
    }
}

/// Asserts exactly one error, at `line`, naming `job` and `key`, whose
/// message contains `needle`; returns the rendered error.
fn one_error(text: &str, line: usize, job: Option<&str>, key: &str, needle: &str) -> String {
    let config_error = parse(text).expect_err("config must be rejected");
    let diagnostics = &config_error.diagnostics;
    assert_eq!(diagnostics.len(), 1, "{diagnostics:#?}");
    let d = &diagnostics[0];
    assert_eq!(d.line, Some(line), "{d:#?}");
    assert_eq!(d.job.as_deref(), job, "{d:#?}");
    assert_eq!(d.key.as_deref(), Some(key), "{d:#?}");
    assert!(
        d.message.contains(needle),
        "{:?} does not contain {needle:?}",
        d.message
    );
    let rendered = config_error.to_string();
    assert!(
        rendered.contains(&format!("jobs.toml:{line}:")),
        "{rendered}"
    );
    rendered
}

fn job(body: &str) -> String {
    format!("{DB}\n[[job]]\nname = \"j\"\n{body}\n")
}

// Line numbers below: DB is lines 1-2, a blank line 3, [[job]] 4, name 5,
// and the body from line 6.

#[test]
fn a_valid_config_applies_defaults_and_overrides() {
    let config = parse(&format!(
        "{DB}pool_size = 3\n[daemon]\nshutdown_grace = \"5s\"\nmetrics_listen = \"127.0.0.1:9187\"\n\
         [defaults]\ntimezone = \"Europe/Berlin\"\ntimeout = \"5m\"\nshell = \"/bin/bash\"\n\
         [[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nschedule = \"*/10 * * * * *\"\nargs = [\"/bin/true\"]\ntimezone = \"UTC\"\n\
         enabled = false\nenv = {{ A = \"1\" }}\nworking_dir = \"/tmp\"\noutput_limit = \"1MiB\"\n\
         lock_at_most_for = \"2m\"\nlock_at_least_for = \"30s\"\ncatch_up = \"1h\"\nkill_grace = \"3s\"\n"
    ))
    .expect("valid");
    assert_eq!(config.database.pool_size, 3);
    assert_eq!(config.daemon.shutdown_grace, Duration::from_secs(5));
    assert_eq!(
        config.daemon.metrics_listen,
        Some("127.0.0.1:9187".parse().expect("addr"))
    );
    let a = config.job("a").expect("a");
    assert_eq!(a.schedule.zone(), chrono_tz::Europe::Berlin);
    assert_eq!(a.timeout, Duration::from_secs(300));
    assert_eq!(
        a.command,
        Command::Shell {
            shell: "/bin/bash".into(),
            command: "true".into()
        }
    );
    assert!(a.enabled);
    assert_eq!(a.lock_at_most_for, Duration::from_secs(600));
    let b = config.job("b").expect("b");
    assert_eq!(b.schedule.zone(), chrono_tz::UTC);
    assert!(!b.enabled);
    assert_eq!(
        b.command,
        Command::Exec {
            args: vec!["/bin/true".into()]
        }
    );
    assert_eq!(b.env.get("A").map(String::as_str), Some("1"));
    assert_eq!(b.output_limit, 1 << 20);
    assert_eq!(b.lock_at_least_for, Duration::from_secs(30));
    assert_eq!(b.catch_up, Duration::from_secs(3600));
    assert_eq!(b.kill_grace, Duration::from_secs(3));
    assert_eq!(config.enabled_jobs().count(), 1);
}

#[test]
fn unknown_key_in_a_job() {
    let rendered = one_error(
        &job("schedule = \"* * * * *\"\ncommand = \"true\"\nretry = 3"),
        8,
        Some("\"j\""),
        "retry",
        "unknown field",
    );
    assert!(rendered.contains("job \"j\", key \"retry\""), "{rendered}");
}

#[test]
fn unknown_keys_in_tables_and_at_the_top() {
    let text = format!(
        "{DB}pool = 3\n[daemon]\nshutdown = \"1s\"\n[defaults]\ntz = \"UTC\"\n[cron]\nx = 1\n"
    );
    let found = errors(&text);
    let keys: Vec<_> = found
        .iter()
        .map(|d| d.key.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(
        keys,
        ["database.pool", "daemon.shutdown", "defaults.tz", "cron"],
        "{found:#?}"
    );
    let lines: Vec<_> = found.iter().map(|d| d.line.unwrap_or(0)).collect();
    assert_eq!(lines, [3, 5, 7, 8]);
}

#[test]
fn duplicate_job_names() {
    let text = format!(
        "{DB}[[job]]\nname = \"x\"\nschedule = \"@hourly\"\ncommand = \"true\"\n\
         [[job]]\nname = \"x\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    );
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].line, Some(8));
    assert_eq!(found[0].job.as_deref(), Some("\"x\""));
    assert_eq!(found[0].key.as_deref(), Some("name"));
    assert!(found[0].message.contains("duplicate"));
}

#[test]
fn invalid_job_names() {
    for bad in [
        "has space",
        "",
        "semi;colon",
        &"x".repeat(65),
        "replicron.retention",
    ] {
        let text =
            format!("{DB}[[job]]\nname = {bad:?}\nschedule = \"@hourly\"\ncommand = \"true\"\n");
        let found = errors(&text);
        assert_eq!(found.len(), 1, "{bad:?}: {found:#?}");
        assert_eq!(found[0].key.as_deref(), Some("name"));
        assert_eq!(found[0].job.as_deref(), Some("#1"));
        assert_eq!(found[0].line, Some(4));
    }
}

#[test]
fn invalid_schedule() {
    one_error(
        &job("schedule = \"61 * * * *\"\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "61 * * * *",
    );
    one_error(
        &job("schedule = \"* * *\"\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "3 fields",
    );
}

#[test]
fn unknown_time_zone() {
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\ntimezone = \"Mars/Olympus\""),
        8,
        Some("\"j\""),
        "timezone",
        "Mars/Olympus",
    );
    one_error(
        &format!("{DB}[defaults]\ntimezone = \"CEST+2\"\n"),
        4,
        None,
        "defaults.timezone",
        "unknown time zone",
    );
}

#[test]
fn both_command_and_args() {
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nargs = [\"true\"]"),
        7,
        Some("\"j\""),
        "command",
        "exclusive",
    );
}

#[test]
fn neither_command_nor_args() {
    one_error(
        &job("schedule = \"@daily\""),
        4,
        Some("\"j\""),
        "command",
        "either command",
    );
    one_error(
        &job("schedule = \"@daily\"\nargs = []"),
        7,
        Some("\"j\""),
        "args",
        "program",
    );
}

#[test]
fn zero_durations() {
    for key in ["lock_at_most_for", "timeout", "kill_grace"] {
        one_error(
            &job(&format!(
                "schedule = \"@daily\"\ncommand = \"true\"\n{key} = \"0s\""
            )),
            8,
            Some("\"j\""),
            key,
            "greater than zero",
        );
    }
    one_error(
        &format!("{DB}[daemon]\nshutdown_grace = \"0s\"\n"),
        4,
        None,
        "daemon.shutdown_grace",
        "greater than zero",
    );
    // Zero is meaningful for these two.
    let config = parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\ncatch_up = \"0s\"\nlock_at_least_for = \"0s\"",
    ))
    .expect("valid");
    assert_eq!(config.jobs[0].catch_up, Duration::ZERO);
}

#[test]
fn negative_and_malformed_durations() {
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\ntimeout = \"-5m\""),
        8,
        Some("\"j\""),
        "timeout",
        "negative",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\ncatch_up = \"a while\""),
        8,
        Some("\"j\""),
        "catch_up",
        "invalid duration",
    );
}

#[test]
fn lock_at_least_for_longer_than_lock_at_most_for() {
    one_error(
        &job(
            "schedule = \"@daily\"\ncommand = \"true\"\nlock_at_most_for = \"1m\"\nlock_at_least_for = \"2m\"",
        ),
        9,
        Some("\"j\""),
        "lock_at_least_for",
        "longer than lock_at_most_for",
    );
    // Against the default of 10m, from [defaults]: reported once, there.
    let text = format!(
        "{DB}[defaults]\nlock_at_least_for = \"11m\"\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\n\
         command = \"true\"\n[[job]]\nname = \"b\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    );
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].key.as_deref(), Some("defaults.lock_at_least_for"));
    // A job that shortens lock_at_most_for below an inherited lock_at_least_for.
    one_error(
        &format!(
            "{DB}[defaults]\nlock_at_least_for = \"5m\"\n[[job]]\nname = \"j\"\nschedule = \"@daily\"\n\
             command = \"true\"\nlock_at_most_for = \"1m\"\n"
        ),
        9,
        Some("\"j\""),
        "lock_at_most_for",
        "longer than",
    );
}

/// `output_store = "files"` keeps each run's output whole under `[daemon]
/// output_dir` (a relative one from the working directory), within the
/// job's bounds; a bad store, retention or maximum is refused naming the
/// line, job and key.
#[test]
fn output_files_and_their_bounds() {
    let config = parse(&format!(
        "{DB}\n[daemon]\noutput_dir = \"/srv/out\"\n\n[defaults]\noutput_store = \"files\"\n\
         output_max = \"1G\"\n\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
         output_retention = \"3d\"\n\n[[job]]\nname = \"b\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
         output_store = \"database\"\n"
    ))
    .expect("valid");
    assert_eq!(
        config.jobs[0].output_files,
        Some(crate::config::OutputFiles {
            dir: "/srv/out".into(),
            retention: std::time::Duration::from_secs(3 * 86_400),
            max: 1 << 30,
        })
    );
    assert_eq!(config.jobs[1].output_files, None);
    let relative = parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\noutput_store = \"files\"",
    ))
    .expect("valid");
    let files = relative.jobs[0].output_files.clone().expect("files");
    assert_eq!(files.dir, std::path::Path::new("/var/lib/replicron/output"));
    let relative = parse(&format!(
        "{DB}\n[daemon]\noutput_dir = \"kept\"\n\n[[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
         output_store = \"files\"\n"
    ))
    .expect("valid");
    assert_eq!(
        relative.jobs[0].output_files.as_ref().expect("files").dir,
        std::env::current_dir().expect("cwd").join("kept"),
        "from the job file's folder"
    );
    assert_eq!(files.retention, crate::config::DEFAULT_OUTPUT_RETENTION);
    for (line, key, wanted) in [
        (
            "output_store = \"s3\"",
            "output_store",
            "expected \"database\"",
        ),
        (
            "output_retention = \"0s\"",
            "output_retention",
            "greater than zero",
        ),
        ("output_retention = \"soon\"", "output_retention", "soon"),
        ("output_max = \"1K\"", "output_max", "below 64 KiB"),
        ("output_max = \"big\"", "output_max", "invalid size"),
    ] {
        one_error(
            &job(&format!(
                "schedule = \"@daily\"\ncommand = \"true\"\n{line}"
            )),
            8,
            Some("\"j\""),
            key,
            wanted,
        );
    }
}

#[test]
fn bad_sizes_and_types() {
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\noutput_limit = \"lots\""),
        8,
        Some("\"j\""),
        "output_limit",
        "invalid size",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\noutput_limit = \"17MiB\""),
        8,
        Some("\"j\""),
        "output_limit",
        "at most 16 MiB",
    );
    assert!(
        parse(&job(
            "schedule = \"@daily\"\ncommand = \"true\"\noutput_limit = \"16MiB\""
        ))
        .is_ok()
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nenabled = \"yes\""),
        8,
        Some("\"j\""),
        "enabled",
        "invalid type",
    );
    one_error(
        &format!("{DB}pool_size = 0\n"),
        3,
        None,
        "database.pool_size",
        "between 1 and 1000",
    );
    one_error(
        &format!("{DB}[daemon]\nmetrics_listen = \"localhost\"\n"),
        4,
        None,
        "daemon.metrics_listen",
        "IP:PORT",
    );
}

#[test]
fn retries() {
    let config = parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\nretries = 2\nretry_backoff = \"3s\"",
    ))
    .expect("valid");
    assert_eq!(config.jobs[0].retries, 2);
    assert_eq!(config.jobs[0].retry_backoff, Duration::from_secs(3));
    let defaults = parse(&job("schedule = \"@daily\"\ncommand = \"true\"")).expect("valid");
    assert_eq!(
        (defaults.jobs[0].retries, defaults.jobs[0].retry_backoff),
        (0, Duration::from_secs(10))
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nretries = -1"),
        8,
        Some("\"j\""),
        "retries",
        "between 0 and 100",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nretry_backoff = \"0s\""),
        8,
        Some("\"j\""),
        "retry_backoff",
        "greater than zero",
    );
}

#[test]
fn missing_name_and_schedule() {
    let found = errors(&format!("{DB}[[job]]\ncommand = \"true\"\n"));
    let keys: Vec<_> = found
        .iter()
        .map(|d| d.key.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(keys, ["name", "schedule"], "{found:#?}");
    assert!(
        found
            .iter()
            .all(|d| d.job.as_deref() == Some("#1") && d.line == Some(3))
    );
}

#[test]
fn every_error_is_reported_not_only_the_first() {
    let text = format!(
        "{DB}[[job]]\nname = \"a\"\nschedule = \"bogus\"\ncommand = \"true\"\nfoo = 1\nbar = 2\n\
         [[job]]\nname = \"b\"\nschedule = \"@daily\"\ntimezone = \"Nowhere\"\ncommand = \"true\"\nargs = [\"x\"]\n"
    );
    let found = errors(&text);
    let summary: Vec<_> = found
        .iter()
        .map(|d| {
            (
                d.line.unwrap_or(0),
                d.job.clone().unwrap_or_default(),
                d.key.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (5, "\"a\"".to_string(), "schedule".to_string()),
            (7, "\"a\"".to_string(), "foo".to_string()),
            (8, "\"a\"".to_string(), "bar".to_string()),
            (12, "\"b\"".to_string(), "timezone".to_string()),
            (13, "\"b\"".to_string(), "command".to_string()),
        ]
    );
}

#[test]
fn invalid_toml_names_the_line() {
    let found = errors(&format!("{DB}[[job]]\nname = \"a\nschedule = 3\n"));
    assert!(
        found[0].line == Some(4) || found[0].line == Some(5),
        "{found:#?}"
    );
    assert!(found[0].message.contains("invalid TOML"));
}

/// Every `[database]` and `[daemon]` key can be set from the environment,
/// which wins over the file; a bad value names its variable, not a line.
#[test]
fn the_environment_overrides_database_and_daemon_keys() {
    let text = format!(
        "{DB}pool_size = 4\n\n[daemon]\nshutdown_grace = \"30s\"\nmetrics_listen = \"127.0.0.1:9187\"\nhistory_retention = \"30d\"\n"
    );
    let env = Environment::default()
        .with(POOL_SIZE_ENV, "12")
        .with(SHUTDOWN_GRACE_ENV, "5s")
        .with(METRICS_LISTEN_ENV, "127.0.0.1:9300")
        .with(HISTORY_RETENTION_ENV, "7d");
    if cfg!(feature = "sqlite") {
        let config = Config::parse(Path::new("jobs.toml"), &text, &env).expect("valid");
        assert_eq!(config.database.pool_size, 12);
        assert_eq!(config.daemon.shutdown_grace, Duration::from_secs(5));
        assert_eq!(
            config.daemon.metrics_listen,
            Some("127.0.0.1:9300".parse().expect("addr"))
        );
        assert_eq!(
            config.daemon.history_retention,
            Duration::from_secs(7 * 86_400)
        );
        // Unset, the file's values stand.
        let config =
            Config::parse(Path::new("jobs.toml"), &text, &Environment::default()).expect("valid");
        assert_eq!(config.database.pool_size, 4);
        assert_eq!(config.daemon.shutdown_grace, Duration::from_secs(30));
    }
    let bad = Environment::default()
        .with(POOL_SIZE_ENV, "lots")
        .with(METRICS_LISTEN_ENV, "localhost:9300");
    let error = Config::parse(Path::new("jobs.toml"), &text, &bad).expect_err("rejected");
    let keys: Vec<Option<&str>> = error.diagnostics.iter().map(|d| d.key.as_deref()).collect();
    assert!(keys.contains(&Some(POOL_SIZE_ENV)), "{error}");
    assert!(keys.contains(&Some(METRICS_LISTEN_ENV)), "{error}");
    assert!(
        error.diagnostics.iter().all(|d| d.line.is_none()),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("overrides [daemon] metrics_listen"),
        "{error}"
    );
}

#[test]
fn database_url_rules() {
    // Missing: an error, never a local default.
    let found = errors("[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key.as_deref(), Some("database.url"));
    assert!(found[0].message.contains(DATABASE_URL_ENV));

    // The environment wins over the file.
    let env = Environment::default().with(DATABASE_URL_ENV, "sqlite:///tmp/from-env.db");
    if cfg!(feature = "sqlite") {
        let config = Config::parse(Path::new("jobs.toml"), DB, &env).expect("valid");
        assert_eq!(config.database.url.connection_string(), "/tmp/from-env.db");
    }

    // A password is never printed, whatever goes wrong.
    let text = "[database]\nurl = \"oracle://scott:tiger@db/orcl\"\n";
    let rendered = parse(text).expect_err("rejected").to_string();
    assert!(
        rendered.contains("oracle") && !rendered.contains("tiger"),
        "{rendered}"
    );
    assert!(rendered.contains("jobs.toml:2:"), "{rendered}");
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_backend_not_compiled_in_names_its_feature() {
    let text = "[database]\nurl = \"postgres://app:pw@db/jobs\"\n";
    let rendered = parse(text).expect_err("rejected").to_string();
    assert!(rendered.contains("--features postgres"), "{rendered}");
    assert!(!rendered.contains(":pw@"), "{rendered}");
}

#[test]
fn env_var_names() {
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nenv = { \"A=B\" = \"x\" }"),
        8,
        Some("\"j\""),
        "env",
        "A=B",
    );
}

#[test]
fn jitter_must_be_shorter_than_the_shortest_interval() {
    let config = parse(&job(
        "schedule = \"0 * * * *\"\ncommand = \"true\"\njitter = \"5m\"",
    ))
    .expect("valid");
    let schedule = &config.jobs[0].schedule;
    assert_eq!(schedule.jitter(), chrono::TimeDelta::minutes(5));
    let error = one_error(
        &job("schedule = \"*/5 * * * *\"\ncommand = \"true\"\njitter = \"5m\""),
        8,
        Some("\"j\""),
        "jitter",
        "shorter than the job's shortest interval (5m",
    );
    assert!(error.contains("jitter (5m)"), "{error}");
    // From [defaults]: reported at the default, for the job that breaks it.
    let error = one_error(
        &format!(
            "{DB}\n[defaults]\njitter = \"2m\"\n\n[[job]]\nname = \"hourly\"\nschedule = \"@hourly\"\ncommand = \"true\"\n\n\
             [[job]]\nname = \"minutely\"\nschedule = \"* * * * *\"\ncommand = \"true\"\n"
        ),
        5,
        Some("\"minutely\""),
        "jitter",
        "shortest interval (1m",
    );
    assert!(error.contains("jitter (2m)"), "{error}");
}

#[test]
fn warn_after_and_late_after_are_durations_and_warn_after_is_shorter_than_timeout() {
    let config = parse(&format!(
        "{DB}\n[defaults]\nwarn_after = \"20m\"\nlate_after = \"2m\"\n\n\
         [[job]]\nname = \"nightly\"\nschedule = \"@daily\"\ncommand = \"true\"\n\n\
         [[job]]\nname = \"quiet\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
         warn_after = \"0s\"\nlate_after = \"30s\"\n"
    ))
    .expect("valid");
    let (nightly, quiet) = (&config.jobs[0], &config.jobs[1]);
    assert_eq!(nightly.warn_after, Some(Duration::from_secs(20 * 60)));
    assert_eq!(nightly.late_after, Some(Duration::from_secs(120)));
    assert_eq!(quiet.warn_after, None, "0s turns it off");
    assert_eq!(quiet.late_after, Some(Duration::from_secs(30)));
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nwarn_after = \"soon\""),
        8,
        Some("\"j\""),
        "warn_after",
        "soon",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nlate_after = \"-1m\""),
        8,
        Some("\"j\""),
        "late_after",
        "-1m",
    );
    let error = one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\ntimeout = \"10m\"\nwarn_after = \"10m\""),
        9,
        Some("\"j\""),
        "warn_after",
        "must be shorter than timeout (10m)",
    );
    assert!(error.contains("it would never fire"), "{error}");
    // From [defaults]: reported at the job's timeout that undercuts it.
    one_error(
        &format!(
            "{DB}\n[defaults]\nwarn_after = \"20m\"\n\n[[job]]\nname = \"short\"\n\
             schedule = \"@daily\"\ncommand = \"true\"\ntimeout = \"15m\"\n"
        ),
        11,
        Some("\"short\""),
        "timeout",
        "warn_after (20m) must be shorter than timeout (15m)",
    );
}

#[test]
fn user_and_group_are_names_or_ids_and_a_group_needs_a_user() {
    let config = parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\nuser = \"www-data\"\ngroup = \"adm\"",
    ))
    .expect("valid");
    assert_eq!(
        config.jobs[0].run_as,
        Some(crate::config::RunAs {
            user: "www-data".to_string(),
            group: Some("adm".to_string()),
            line: Some(8),
        })
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\ngroup = \"adm\""),
        8,
        Some("\"j\""),
        "group",
        "group needs user",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nuser = \"\""),
        8,
        Some("\"j\""),
        "user",
        "invalid user",
    );
}

#[test]
fn run_on_is_one_or_every_and_only_every_jobs_may_run_at_reboot() {
    let config = parse(&job(
        "schedule = \"@reboot\"\ncommand = \"true\"\nrun_on = \"every\"",
    ))
    .expect("valid");
    assert_eq!(config.jobs[0].run_on, crate::config::RunOn::Every);
    assert!(config.jobs[0].schedule.is_at_start());
    let error = one_error(
        &job("schedule = \"@reboot\"\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "@reboot runs once per replica start",
    );
    assert!(error.contains("run_on = \"every\""), "{error}");
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nrun_on = \"all\""),
        8,
        Some("\"j\""),
        "run_on",
        "expected \"one\"",
    );
    assert!(crate::Job::new("warm", "@reboot").is_err());
}

#[test]
fn an_every_job_takes_no_shared_locks() {
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nrun_on = \"every\"\nlocks = [\"db\"]"),
        9,
        Some("\"j\""),
        "locks",
        "locks are for jobs run once across the fleet",
    );
}

#[test]
fn a_bare_port_listens_on_loopback() {
    for text in ["9187", ":9187"] {
        let config = parse(&format!("{DB}[daemon]\nmetrics_listen = {text:?}\n")).expect("valid");
        assert_eq!(
            config.daemon.metrics_listen,
            Some("127.0.0.1:9187".parse().expect("addr")),
            "{text}"
        );
    }
    let config = parse(&format!("{DB}[daemon]\nmetrics_listen = \"0.0.0.0:80\"\n")).expect("valid");
    assert_eq!(
        config.daemon.metrics_listen,
        Some("0.0.0.0:80".parse().expect("addr"))
    );
}

#[test]
fn the_web_token_is_named_never_shown_and_hidden_from_jobs() {
    one_error(
        &format!("{DB}[web]\ntoken_env = \"NOT A NAME\"\n"),
        4,
        None,
        "web.token_env",
        "not an environment variable's name",
    );
    one_error(
        &format!("{DB}[web]\ntoken = \"x\"\n"),
        4,
        None,
        "web.token",
        "unknown field",
    );
    let text = format!(
        "{DB}[web]\ntoken_env = \"REPLICRON_TEST_UNSET_TOKEN_VAR\"\n\n[notify]\ncommand = \"true\"\n\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    );
    let config = parse(&text).expect("valid");
    // Nor the headers of the traces' receiver (an API key).
    let otlp = [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ];
    assert_eq!(
        config.jobs[0].hidden_env,
        [otlp[0], otlp[1], "REPLICRON_TEST_UNSET_TOKEN_VAR"],
        "no job inherits the token"
    );
    assert_eq!(
        config.jobs[0].notify.as_ref().expect("notify").hidden_env,
        ["REPLICRON_TEST_UNSET_TOKEN_VAR", otlp[0], otlp[1]],
        "nor does a notifier command"
    );
    let error = config
        .web
        .tokens(Path::new("jobs.toml"))
        .expect_err("an unset variable");
    let message = error.to_string();
    assert!(
        message.contains("jobs.toml:4")
            && message.contains("web.token_env")
            && message.contains("REPLICRON_TEST_UNSET_TOKEN_VAR is not set"),
        "{message}"
    );
    assert_eq!(
        WebConfig::default().tokens(Path::new("jobs.toml")).ok(),
        Some(Vec::new())
    );
}

#[test]
fn tokens_have_rights_and_jobs() {
    let text = format!(
        "{DB}[web]\ntokens = {{ ro = {{ env = \"REPLICRON_TEST_RO\", can = [\"read\"] }}, ci = {{ env = \"REPLICRON_TEST_CI\", can = [\"trigger\", \"backfill\", \"trigger\"], jobs = [\"deploy-*\", \"db-?\"] }}, ops = \"REPLICRON_TEST_OPS\" }}\n\n[[job]]\nname = \"deploy-x\"\nschedule = \"@daily\"\ncommand = \"true\"\n\n[[job]]\nname = \"db-1\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    );
    let config = parse(&text).expect("valid");
    assert!(config.warnings.is_empty(), "{:#?}", config.warnings);
    let grants: Vec<(&str, &str, &Grant)> = config
        .web
        .tokens
        .iter()
        .map(|t| (t.name.as_str(), t.var.as_str(), &t.grant))
        .collect();
    let ci = Grant {
        can: vec![Right::Trigger, Right::Backfill],
        jobs: Some(vec!["deploy-*".to_string(), "db-?".to_string()]),
    };
    let ro = Grant {
        can: vec![Right::Read],
        jobs: None,
    };
    assert_eq!(
        grants,
        [
            ("ci", "REPLICRON_TEST_CI", &ci),
            ("ops", "REPLICRON_TEST_OPS", &Grant::full()),
            ("ro", "REPLICRON_TEST_RO", &ro),
        ]
    );
    // Read comes with any right; admin is every right.
    assert!(ci.allows(Right::Read) && ci.allows(Right::Backfill) && !ci.allows(Right::Pause));
    assert!(ci.reaches("deploy-x") && ci.reaches("db-1") && !ci.reaches("db-12"));
    assert!(!ro.allows(Right::Trigger) && ro.reaches("anything"));
    assert!(Right::ALL.iter().all(|r| Grant::full().allows(*r)));
    assert_eq!(
        config.jobs[0].hidden_env,
        [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "REPLICRON_TEST_CI",
            "REPLICRON_TEST_OPS",
            "REPLICRON_TEST_RO",
        ],
        "no job inherits a scoped token"
    );

    // A pattern that reaches no job is said, not refused.
    let lonely = parse(&format!(
        "{DB}[web]\ntokens = {{ ci = {{ env = \"REPLICRON_TEST_CI\", can = [\"trigger\"], jobs = [\"deploy-*\"] }} }}\n\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    ))
    .expect("valid");
    let [warning] = &lonely.warnings[..] else {
        panic!("{:#?}", lonely.warnings);
    };
    assert_eq!(
        (warning.line, warning.key.as_deref()),
        (Some(4), Some("web.tokens.ci"))
    );
    assert!(
        warning
            .message
            .contains("\"deploy-*\" of its jobs matches no job"),
        "{warning:?}"
    );

    for (bad, says) in [
        (
            "ci = { env = \"CI_TOKEN\", can = [\"deploy\"] }",
            "ci: \"deploy\" is not a right: can lists read, trigger, backfill, pause, unlock, admin",
        ),
        ("ci = { env = \"CI_TOKEN\", can = [] }", "ci: can is empty"),
        ("ci = { env = \"CI_TOKEN\" }", "ci: can is missing"),
        (
            "ci = { env = \"CI_TOKEN\", can = [\"read\"], jobs = [\"deploy-[a-z]\"] }",
            "ci: \"deploy-[a-z]\" is not a pattern of job names",
        ),
        (
            "ci = { env = \"CI_TOKEN\", can = [\"read\"], jobs = [\"\"] }",
            "is not a pattern of job names",
        ),
        (
            "ci = { env = \"CI_TOKEN\", can = [\"read\"], jobs = [] }",
            "ci: jobs is empty",
        ),
        (
            "ci = { env = \"NOT A NAME\", can = [\"read\"] }",
            "not an environment variable",
        ),
        // What serde cannot read is named with the shape it expects.
        (
            "ci = { env = \"CI_TOKEN\", can = \"read\" }",
            "can (read, trigger, backfill, pause, unlock, admin)",
        ),
        (
            "ci = { env = \"CI_TOKEN\", can = [\"read\"], job = [\"x\"] }",
            "{ env = \"CI_TOKEN\", can = [\"trigger\", \"backfill\"], jobs = [\"deploy-*\"] }",
        ),
    ] {
        one_error(
            &format!("{DB}[web]\ntokens = {{ {bad} }}\n"),
            4,
            None,
            "web.tokens",
            says,
        );
    }
}

#[test]
fn tokens_have_names() {
    let text = format!(
        "{DB}[web]\ntoken_env = \"REPLICRON_TEST_TOKEN_A\"\ntokens = {{ ops = \"REPLICRON_TEST_TOKEN_B\", ci-runner = \"REPLICRON_TEST_TOKEN_C\" }}\n\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    );
    let config = parse(&text).expect("valid");
    let names: Vec<(&str, &str, &str)> = config
        .web
        .tokens
        .iter()
        .map(|t| (t.name.as_str(), t.var.as_str(), t.key.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            (
                "ci-runner",
                "REPLICRON_TEST_TOKEN_C",
                "web.tokens.ci-runner"
            ),
            ("default", "REPLICRON_TEST_TOKEN_A", "web.token_env"),
            ("ops", "REPLICRON_TEST_TOKEN_B", "web.tokens.ops"),
        ]
    );
    assert_eq!(
        config.jobs[0].hidden_env,
        [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "REPLICRON_TEST_TOKEN_A",
            "REPLICRON_TEST_TOKEN_B",
            "REPLICRON_TEST_TOKEN_C"
        ],
        "no job inherits a token"
    );
    let message = config
        .web
        .tokens(Path::new("jobs.toml"))
        .expect_err("unset variables")
        .to_string();
    for var in ["TOKEN_A", "TOKEN_B", "TOKEN_C"] {
        assert!(
            message.contains(&format!("REPLICRON_TEST_{var} is not set")),
            "{message}"
        );
    }
    for (bad, says) in [
        (
            "tokens = { default = \"X\" }",
            "name of the token of token_env",
        ),
        ("tokens = { \"a b\" = \"X\" }", "not a token name"),
        (
            "tokens = { ops = \"NOT A NAME\" }",
            "not an environment variable",
        ),
    ] {
        one_error(&format!("{DB}[web]\n{bad}\n"), 4, None, "web.tokens", says);
    }
}

#[test]
fn secret_params_are_declared_params() {
    let job = "[[job]]\nname = \"a\"\nschedule = \"@manual\"\ncommand = \"true\"\nparams = [\"USER_NAME\", \"PASSWORD\"]\n";
    let config = parse(&format!("{DB}{job}secret_params = [\"PASSWORD\"]\n")).expect("valid");
    assert_eq!(config.jobs[0].secret_params, ["PASSWORD"]);
    one_error(
        &format!("{DB}{job}secret_params = [\"TOKEN\"]\n"),
        8,
        Some("\"a\""),
        "secret_params",
        "\"TOKEN\" is not one of the job's params",
    );
}

#[test]
fn a_public_url_is_an_origin() {
    use crate::config::PublicUrl;
    let url = PublicUrl::parse("https://Cron.Example.com/").expect("origin");
    assert_eq!(url.origin, "https://cron.example.com");
    assert_eq!(url.host, "cron.example.com");
    assert!(url.secure);
    let url = PublicUrl::parse("https://cron.example.com:443").expect("origin");
    assert_eq!(url.host, "cron.example.com");
    let url = PublicUrl::parse("http://cron.test:8080").expect("origin");
    assert_eq!(
        (url.origin.as_str(), url.host.as_str(), url.secure),
        ("http://cron.test:8080", "cron.test:8080", false)
    );
    let url = PublicUrl::parse("https://[::1]:9443").expect("origin");
    assert_eq!(url.host, "[::1]:9443");
    for bad in [
        "cron.example.com",
        "ftp://cron.example.com",
        "https://cron.example.com/replicron",
        "https://user@cron.example.com",
        "https://cron.example.com:http",
        "https://",
        "https://[::1",
    ] {
        assert!(PublicUrl::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_manual_job_declares_its_parameters_and_a_scheduled_one_defaults_them() {
    let config = parse(&job(
        "schedule = \"@manual\"\ncommand = \"true\"\nparams = [\"DAYS\", \"TENANT=all\"]",
    ))
    .expect("valid");
    let j = &config.jobs[0];
    assert!(j.schedule.is_manual() && !j.schedule.is_at_start());
    assert_eq!(j.schedule.next_after(chrono::Utc::now()), None);
    let names: Vec<String> = j.params.iter().map(ToString::to_string).collect();
    assert_eq!(names, ["DAYS", "TENANT=all"]);
    // A scheduled job's parameters each have a default.
    parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\nparams = [\"DAYS=1\"]",
    ))
    .expect("valid");
    let error = one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nparams = [\"DAYS\", \"TENANT=all\"]"),
        8,
        Some("\"j\""),
        "params",
        "DAYS has no default, and nobody gives a scheduled run one",
    );
    assert!(error.contains("@manual"), "{error}");
    one_error(
        &job("schedule = \"@manual\"\ncommand = \"true\"\nparams = [\"DAYS\", \"DAYS=2\"]"),
        8,
        Some("\"j\""),
        "params",
        "parameter DAYS is declared twice",
    );
    one_error(
        &job("schedule = \"@manual\"\ncommand = \"true\"\nparams = [\"2DAYS\"]"),
        8,
        Some("\"j\""),
        "params",
        "invalid parameter name \"2DAYS\"",
    );
    one_error(
        &job("schedule = \"@manual\"\ncommand = \"true\"\nparams = [\"REPLICRON_JOB\"]"),
        8,
        Some("\"j\""),
        "params",
        "replicron's own",
    );
    one_error(
        &job(
            "schedule = \"@manual\"\ncommand = \"true\"\nenv = { DAYS = \"1\" }\nparams = [\"DAYS\"]",
        ),
        9,
        Some("\"j\""),
        "params",
        "also set in env",
    );
    one_error(
        &job("schedule = \"@manual\"\ncommand = \"true\"\nrun_on = \"every\""),
        6,
        Some("\"j\""),
        "schedule",
        "@manual is for jobs run once across the fleet",
    );
    // The impossible date people wrote for a manual-only job says what to
    // write instead.
    one_error(
        &job("schedule = \"0 0 30 2 *\"\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "never fires: a job that runs only when asked is written \"@manual\"",
    );
    assert!(crate::Job::new("asked", "@manual").is_err());
}

#[test]
fn a_limit_is_declared_once_and_taken_by_name() {
    let text = format!(
        "{DB}\n[[limit]]\nname = \"vendor-api\"\nmax_running = 2\n\n\
         [[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\nlimits = [\"vendor-api\"]\n"
    );
    let config = parse(&text).expect("valid");
    assert_eq!(config.limits.len(), 1);
    assert_eq!(config.jobs[0].limits, config.limits);
    assert_eq!(
        config.limits[0].rows(),
        [
            "replicron.limit.vendor-api.1",
            "replicron.limit.vendor-api.2"
        ]
    );
    let limit = |body: &str| format!("{DB}\n[[limit]]\n{body}\n");
    one_error(
        &limit("name = \"v\"\nmax_running = 0"),
        6,
        None,
        "limit.max_running",
        "limit \"v\": max_running 0 is out of range 1–1000",
    );
    one_error(
        &limit("name = \"v\"\nmax_running = 1001"),
        6,
        None,
        "limit.max_running",
        "out of range",
    );
    one_error(
        &limit("name = \"v\""),
        4,
        None,
        "limit.max_running",
        "a limit needs max_running",
    );
    one_error(
        &limit("max_running = 2"),
        4,
        None,
        "limit.name",
        "a limit needs a name",
    );
    one_error(
        &limit(&format!("name = \"{}\"\nmax_running = 2", "x".repeat(44))),
        5,
        None,
        "limit.name",
        "invalid limit name",
    );
    one_error(
        &format!(
            "{DB}\n[[limit]]\nname = \"v\"\nmax_running = 1\n\n[[limit]]\nname = \"v\"\nmax_running = 2\n"
        ),
        9,
        None,
        "limit.name",
        "limit \"v\" is declared twice",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nlimits = [\"nope\"]"),
        8,
        Some("\"j\""),
        "limits",
        "no [[limit]] named \"nope\" (the file declares none)",
    );
    one_error(
        &format!(
            "{DB}\n[[limit]]\nname = \"v\"\nmax_running = 2\n\n\
             [[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\nrun_on = \"every\"\nlimits = [\"v\"]\n"
        ),
        13,
        Some("\"j\""),
        "limits",
        "limits are for jobs run once across the fleet",
    );
}

#[test]
fn overlap_is_a_policy_by_name() {
    use crate::config::Overlap;
    let overlap = |body: &str| {
        parse(&job(&format!(
            "schedule = \"@daily\"\ncommand = \"true\"\n{body}"
        )))
        .expect("valid")
        .jobs[0]
            .overlap
    };
    assert_eq!(overlap(""), Overlap::Skip);
    assert_eq!(overlap("overlap = \"skip\""), Overlap::Skip);
    assert_eq!(overlap("overlap = \"queue\""), Overlap::Queue);
    assert_eq!(overlap("overlap = \"replace\""), Overlap::Replace);
    let from_defaults = parse(&format!(
        "{DB}[defaults]\noverlap = \"queue\"\n\n[[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    ))
    .expect("valid");
    assert_eq!(from_defaults.jobs[0].overlap, Overlap::Queue);
    assert_eq!(
        overlap("overlap = \"allow\"\nmax_concurrent = 3"),
        Overlap::Allow(3)
    );
    let with_defaults = |defaults: &str, body: &str| {
        parse(&format!(
            "{DB}[defaults]\n{defaults}\n\n[[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\n{body}\n"
        ))
        .map(|c| c.jobs[0].overlap)
    };
    assert_eq!(
        with_defaults(
            "overlap = \"allow\"\nmax_concurrent = 2",
            "max_concurrent = 5"
        )
        .expect("valid"),
        Overlap::Allow(5)
    );
    assert_eq!(
        with_defaults(
            "overlap = \"allow\"\nmax_concurrent = 2",
            "overlap = \"skip\""
        )
        .expect("valid"),
        Overlap::Skip
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\noverlap = \"parallel\""),
        8,
        Some("\"j\""),
        "overlap",
        "overlap \"parallel\": expected \"skip\", \"queue\", \"replace\" or \"allow\"",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\noverlap = \"allow\""),
        8,
        Some("\"j\""),
        "overlap",
        "overlap = \"allow\" needs max_concurrent",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\noverlap = \"queue\"\nmax_concurrent = 2"),
        9,
        Some("\"j\""),
        "max_concurrent",
        "max_concurrent is for overlap = \"allow\"",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\noverlap = \"allow\"\nmax_concurrent = 0"),
        9,
        Some("\"j\""),
        "max_concurrent",
        "max_concurrent 0 is out of range 1–1000",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nrun_on = \"every\"\noverlap = \"queue\""),
        9,
        Some("\"j\""),
        "overlap",
        "overlap is for jobs run once across the fleet",
    );
}

#[test]
fn a_schedule_may_be_several_expressions() {
    let config = parse(&job(
        "schedule = [\"0 9 * * 1-5\", \"0 12 * * 6\"]\ncommand = \"true\"",
    ))
    .expect("valid");
    assert_eq!(
        config.jobs[0].schedule.expression(),
        "0 9 * * 1-5 | 0 12 * * 6"
    );
    one_error(
        &job("schedule = [\"0 9 * * 1-5\", \"0 25 * * 6\"]\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "hour 25 is out of range",
    );
    one_error(
        &job("schedule = [\"@manual\", \"0 9 * * *\"]\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "cannot be one of several schedules",
    );
    one_error(
        &job("schedule = []\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "holds no expression",
    );
    // A value of another type says what a schedule is (and the job then
    // has none).
    let found = errors(&job("schedule = 5\ncommand = \"true\""));
    assert!(
        found.iter().any(|d| d.line == Some(6)
            && d.key.as_deref() == Some("schedule")
            && d.message
                .contains("a cron expression or macro, or an array of them")),
        "{found:#?}"
    );
}

#[test]
fn calendars_windows_and_the_daylight_saving_policy() {
    let folder = tempfile::tempdir().expect("a folder");
    let ics = folder.path().join("holidays.ics");
    std::fs::write(
        &ics,
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20201225\nRRULE:FREQ=YEARLY\nEND:VEVENT\nEND:VCALENDAR\n",
    )
    .expect("written");
    let path = folder.path().join("jobs.toml");
    let text = format!(
        "{DB}[defaults]\ndst_gap = \"skip\"\n[[calendar]]\nname = \"holidays\"\nics = \"holidays.ics\"\n\
         [[calendar]]\nname = \"freeze\"\ndates = [\"2026-12-28\"]\n\
         [[job]]\nname = \"j\"\nschedule = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\ncommand = \"true\"\n\
         skip_on = [\"holidays\", \"freeze\"]\ndst_repeat = \"both\"\n\
         not_before = \"2026-12-01T00:00:00Z\"\nnot_after = \"2027-12-31T00:00:00+01:00\"\n"
    );
    if cfg!(feature = "sqlite") {
        let config = Config::parse(&path, &text, &Environment::default()).expect("valid");
        let rules = config.jobs[0].schedule.rules();
        assert_eq!(rules.dst_gap, crate::schedule::DstGap::Skip);
        assert_eq!(rules.dst_repeat, crate::schedule::DstRepeat::Both);
        assert_eq!(rules.skip_on.len(), 2);
        assert_eq!(config.calendars.len(), 2);
        assert!(config.jobs[0].definition().contains("rules="));
        // A job without them compares as it did.
        let plain = parse(&job("schedule = \"@daily\"\ncommand = \"true\"")).expect("valid");
        assert!(!plain.jobs[0].definition().contains("rules="));
    }
    // A file that cannot be read, or parsed: a warning naming the file
    // and its line, the job that names it held, the others not, and no
    // error after it (the calendar is declared).
    let second = "[[job]]\nname = \"other\"\nschedule = \"@daily\"\ncommand = \"true\"\n";
    let missing = Config::parse(
        &path,
        &format!("{}{second}", text.replace("holidays.ics", "nowhere.ics")),
        &Environment::default(),
    )
    .expect("a missing calendar holds its jobs");
    let [warning] = &missing.warnings[..] else {
        panic!("{:#?}", missing.warnings);
    };
    let rendered = warning.located(&path);
    assert!(rendered.contains("jobs.toml:7:"), "{rendered}");
    assert!(rendered.contains("nowhere.ics"), "{rendered}");
    assert!(rendered.contains("held"), "{rendered}");
    let held = missing.jobs[0].held().expect("held");
    assert!(
        held.starts_with("calendar \"holidays\" cannot be read: cannot read"),
        "{held}"
    );
    assert_eq!(missing.jobs[1].held(), None);
    assert_eq!(
        missing
            .runnable_jobs()
            .map(|j| j.name.to_string())
            .collect::<Vec<_>>(),
        ["other"]
    );
    std::fs::write(
        &ics,
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20201225\nRRULE:FREQ=WHENEVER\nEND:VEVENT\nEND:VCALENDAR\n",
    )
    .expect("written");
    let bad = Config::parse(&path, &text, &Environment::default()).expect("bad rule: held");
    let rendered = bad.warnings[0].located(&path);
    assert!(rendered.contains("holidays.ics:4:"), "{rendered}");
    assert!(rendered.contains("WHENEVER"), "{rendered}");
    assert!(
        bad.jobs[0]
            .held()
            .is_some_and(|why| why.contains("WHENEVER"))
    );

    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\ndst_gap = \"later\""),
        8,
        Some("\"j\""),
        "dst_gap",
        "expected \"shift\"",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\ndst_repeat = \"twice\""),
        8,
        Some("\"j\""),
        "dst_repeat",
        "\"both\"",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nskip_on = [\"nope\"]"),
        8,
        Some("\"j\""),
        "skip_on",
        "no [[calendar]] declares",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\nnot_before = \"tomorrow\""),
        8,
        Some("\"j\""),
        "not_before",
        "RFC 3339",
    );
    one_error(
        &job(
            "schedule = \"@daily\"\ncommand = \"true\"\nnot_before = \"2027-01-01T00:00:00Z\"\nnot_after = \"2026-01-01T00:00:00Z\"",
        ),
        9,
        Some("\"j\""),
        "not_after",
        "before not_before",
    );
    one_error(
        &job("schedule = \"@manual\"\ncommand = \"true\"\nnot_after = \"2026-01-01T00:00:00Z\""),
        8,
        Some("\"j\""),
        "not_after",
        "a @manual job has none",
    );
    one_error(
        &format!("{DB}[[calendar]]\nname = \"c\"\ndates = [\"2026-02-30\"]\n"),
        5,
        None,
        "calendar.dates",
        "\"2026-02-30\" is no date",
    );
    one_error(
        &format!("{DB}[[calendar]]\nname = \"c\"\n"),
        3,
        None,
        "calendar.dates",
        "needs dates",
    );
}

#[test]
fn a_job_that_can_never_fire_is_warned_of_by_name() {
    let past = "[[calendar]]\nname = \"gone\"\ndates = [\"2001-01-01\"]\n\n";
    let config = parse(&format!(
        "{DB}{past}[[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\nonly_on = [\"gone\"]\n\n\
         [[job]]\nname = \"off\"\nschedule = \"@daily\"\ncommand = \"true\"\nonly_on = [\"gone\"]\nenabled = false\n\n\
         [[job]]\nname = \"child\"\nafter = [\"off\"]\ncommand = \"true\"\n"
    ))
    .expect("valid: warned, not refused");
    let shown: Vec<(Option<usize>, Option<&str>, Option<&str>)> = config
        .warnings
        .iter()
        .map(|w| (w.line, w.job.as_deref(), w.key.as_deref()))
        .collect();
    assert_eq!(
        shown,
        [
            (Some(11), Some("\"j\""), Some("only_on")),
            (Some(22), Some("\"child\""), Some("after")),
        ],
        "{:#?}",
        config.warnings
    );
    assert!(
        config.warnings[0].message.contains("never fire")
            && config.warnings[0]
                .message
                .contains("\"gone\" holds no date"),
        "{:#?}",
        config.warnings
    );
    assert!(
        config.warnings[1]
            .message
            .contains("\"off\", which is disabled"),
        "{:#?}",
        config.warnings
    );
    // A calendar with a date ahead, or an enabled parent: nothing said.
    let fine = parse(&format!(
        "{DB}[[calendar]]\nname = \"ahead\"\ndates = [\"2001-01-01\", \"2999-01-01\"]\n\n\
         [[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\nonly_on = [\"ahead\"]\n\n\
         [[job]]\nname = \"child\"\nafter = [\"j\"]\ncommand = \"true\"\n"
    ))
    .expect("valid");
    assert_eq!(fine.warnings, []);
}

#[test]
fn a_broken_file_still_gives_commands_its_database() {
    let folder = tempfile::tempdir().expect("a folder");
    let path = folder.path().join("jobs.toml");
    let env = Environment::default();
    // One bad job: the database and the good job, the error as a warning.
    std::fs::write(
        &path,
        format!(
            "{DB}\n[[job]]\nname = \"good\"\nschedule = \"@daily\"\ncommand = \"true\"\n\n\
             [[job]]\nname = \"bad\"\nschedule = \"every tuesday\"\ncommand = \"true\"\n"
        ),
    )
    .expect("written");
    assert!(Config::load(&path, &env).is_err());
    let partial = Config::load_for_database(&path, &env).expect("the database");
    assert!(partial.broken);
    assert_eq!(
        partial.database.url.to_string(),
        "sqlite:///tmp/replicron-test.db"
    );
    assert_eq!(
        partial
            .jobs
            .iter()
            .map(|j| j.name.to_string())
            .collect::<Vec<_>>(),
        ["good"]
    );
    assert!(
        partial
            .warnings
            .iter()
            .any(|w| w.job.as_deref() == Some("\"bad\"")),
        "{:#?}",
        partial.warnings
    );
    // TOML that cannot be read: the database the environment names, else
    // the error.
    std::fs::write(&path, "[database\nurl = ").expect("written");
    let error = Config::load_for_database(&path, &env).expect_err("no database");
    assert!(error.to_string().contains("invalid TOML"), "{error}");
    let env = Environment::default().with(DATABASE_URL_ENV, "sqlite:///tmp/elsewhere.db");
    let partial = Config::load_for_database(&path, &env).expect("the environment's database");
    assert!(partial.broken && partial.jobs.is_empty());
    assert_eq!(
        partial.database.url.to_string(),
        "sqlite:///tmp/elsewhere.db"
    );
    // A valid file is the whole config.
    std::fs::write(&path, job("schedule = \"@daily\"\ncommand = \"true\"")).expect("written");
    assert!(
        !Config::load_for_database(&path, &Environment::default())
            .expect("valid")
            .broken
    );
}

#[test]
fn dependencies_name_known_parents_in_no_cycle() {
    let jobs = |body: &str| format!("{DB}\n{body}");
    let sched = |name: &str, schedule: &str| {
        format!("[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\ncommand = \"true\"\n")
    };
    let dep = |name: &str, after: &str| {
        format!("[[job]]\nname = \"{name}\"\nafter = {after}\ncommand = \"true\"\n")
    };
    if cfg!(feature = "sqlite") {
        let config = parse(&jobs(&format!(
            "{}{}{}",
            sched("a", "0 * * * *"),
            dep("b", "[\"a\"]"),
            dep("c", "{ jobs = [\"b\"], on = [\"succeeded\", \"failed\"] }")
        )))
        .expect("valid");
        let c = &config.jobs[2];
        assert_eq!(c.schedule.expression(), "after b");
        let after = c.after.as_ref().expect("after");
        assert_eq!(after.names(), ["b"]);
        assert_eq!(
            after.on,
            [
                crate::run::RunStatus::Succeeded,
                crate::run::RunStatus::Failed
            ]
        );
        assert!(config.jobs[1].schedule.is_after());
    }
    // A cycle, named in order, once.
    let cycle = errors(&jobs(&format!(
        "{}{}{}{}",
        sched("a", "0 * * * *"),
        dep("x", "[\"z\"]"),
        dep("y", "[\"x\"]"),
        dep("z", "[\"y\", \"a\"]")
    )));
    assert_eq!(cycle.len(), 1, "{cycle:#?}");
    assert!(cycle[0].message.contains("x → z → y → x"), "{cycle:#?}");
    assert_eq!(cycle[0].key.as_deref(), Some("after"));
    // An unknown parent, a job after itself, a schedule beside after.
    one_error(
        &jobs(&dep("b", "[\"nope\"]")),
        6,
        Some("\"b\""),
        "after",
        "\"nope\", which is no job",
    );
    one_error(
        &jobs(&dep("b", "[\"b\"]")),
        6,
        Some("\"b\""),
        "after",
        "cannot run after itself",
    );
    one_error(
        &jobs(&format!(
            "{}[[job]]\nname = \"b\"\nafter = [\"a\"]\nschedule = \"@daily\"\ncommand = \"true\"\n",
            sched("a", "@daily")
        )),
        11,
        Some("\"b\""),
        "schedule",
        "no schedule of its own",
    );
    one_error(
        &jobs(&format!(
            "{}[[job]]\nname = \"b\"\nafter = [\"a\"]\nrun_on = \"every\"\ncommand = \"true\"\n",
            sched("a", "@daily")
        )),
        10,
        Some("\"b\""),
        "after",
        "run_on = \"every\"",
    );
    one_error(
        &jobs(&format!(
            "{}[[job]]\nname = \"a\"\nschedule = \"@daily\"\nrun_on = \"every\"\ncommand = \"true\"\n{}",
            "",
            dep("b", "[\"a\"]")
        )),
        11,
        Some("\"b\""),
        "after",
        "a run_on = \"every\" job",
    );
    one_error(
        &jobs(&format!(
            "{}{}",
            sched("a", "@daily"),
            dep("b", "{ jobs = [\"a\"], on = [\"running\"] }")
        )),
        10,
        Some("\"b\""),
        "after",
        "\"running\"",
    );
    // A fan-in whose parents share no instant in a year.
    let fan_in = |a: &str, b: &str| {
        jobs(&format!(
            "{}{}{}",
            sched("a", a),
            sched("b", b),
            dep("c", "[\"a\", \"b\"]")
        ))
    };
    one_error(
        &fan_in("0 9 * * *", "30 9 * * *"),
        14,
        Some("\"c\""),
        "after",
        "share no instant in the next year",
    );
    if cfg!(feature = "sqlite") {
        parse(&fan_in("0 * * * *", "0 9 * * *")).expect("09:00 is both's");
    }
}

/// `[telemetry]`: each bad value named by its key and line; good ones kept.
#[test]
fn telemetry_keys_are_checked() {
    for (body, key, needle) in [
        (
            "endpoint = \"collector:4318\"",
            "telemetry.endpoint",
            "not an http:// or https:// URL",
        ),
        (
            "protocol = \"grpc\"",
            "telemetry.protocol",
            "http/protobuf or http/json",
        ),
        (
            "protocol = \"thrift\"",
            "telemetry.protocol",
            "not a protocol",
        ),
        ("service_name = \" \"", "telemetry.service_name", "empty"),
        (
            "sample_ratio = 1.5",
            "telemetry.sample_ratio",
            "between 0 and 1",
        ),
        ("headers = \"x\"", "telemetry.headers", "unknown field"),
        (
            "trace_url = \"http://jaeger:16686/trace/\"",
            "telemetry.trace_url",
            "no {trace_id}",
        ),
        (
            "trace_url = \"jaeger/{trace_id}\"",
            "telemetry.trace_url",
            "not an http:// or https:// URL",
        ),
    ] {
        one_error(&format!("{DB}[telemetry]\n{body}\n"), 4, None, key, needle);
    }
    let config = parse(&format!(
        "{DB}[telemetry]\nendpoint = \"https://otel.example:4318\"\nprotocol = \"http/json\"\nservice_name = \"cron\"\nsample_ratio = 0.25\ntrace_url = \"http://jaeger:16686/trace/{{trace_id}}\"\n"
    ))
    .expect("valid");
    assert_eq!(
        config.telemetry,
        crate::config::TelemetryConfig {
            endpoint: Some("https://otel.example:4318".into()),
            protocol: Some("http/json".into()),
            service_name: Some("cron".into()),
            sample_ratio: Some(0.25),
            trace_url: Some("http://jaeger:16686/trace/{trace_id}".into()),
        }
    );
}

#[test]
fn an_advertise_url_is_a_plain_http_origin() {
    let config = parse(&format!(
        "{DB}[web]\nadvertise_url = \"http://Replica-2.internal:9187/\"\n"
    ))
    .expect("valid");
    assert_eq!(
        config.web.advertise_url.as_deref(),
        Some("http://replica-2.internal:9187")
    );
    assert_eq!(parse(DB).expect("valid").web.advertise_url, None);
    for (bad, says) in [
        ("https://replica-2:9187", "plain HTTP"),
        ("http://replica-2:9187/dashboard", "no path"),
        ("replica-2:9187", "not a URL"),
    ] {
        one_error(
            &format!("{DB}[web]\nadvertise_url = {bad:?}\n"),
            4,
            None,
            "web.advertise_url",
            says,
        );
    }
}

/// A job file in a fresh folder, with `files` (name, text) beside it.
fn folder_with(main: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let folder = tempfile::tempdir().expect("a folder");
    for (name, text) in files {
        let path = folder.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("folder");
        std::fs::write(path, text).expect("write");
    }
    let path = folder.path().join("jobs.toml");
    std::fs::write(&path, main).expect("write");
    (folder, path)
}

fn a_job(name: &str) -> String {
    format!("[[job]]\nname = \"{name}\"\nschedule = \"@daily\"\ncommand = \"true\"\n")
}

#[test]
fn include_merges_the_jobs_limits_and_calendars_of_every_matching_file_in_name_order() {
    let (_folder, path) = folder_with(
        &format!("include = [\"jobs.d/*.toml\"]\n{DB}{}", a_job("main")),
        &[
            (
                "jobs.d/b.toml",
                &format!(
                    "{}limits = [\"db\"]\nskip_on = [\"holidays\"]\n",
                    a_job("from-b")
                ),
            ),
            (
                "jobs.d/a.toml",
                "[[limit]]\nname = \"db\"\nmax_running = 2\n\n[[calendar]]\nname = \"holidays\"\ndates = [\"2030-12-25\"]\n",
            ),
            ("jobs.d/c.toml.disabled", &a_job("not-read")),
            ("jobs.d/.hidden.toml", &a_job("hidden")),
        ],
    );
    let config = Config::load(&path, &Environment::default()).expect("valid");
    let names: Vec<&str> = config.jobs.iter().map(|j| &*j.name).collect();
    assert_eq!(names, ["main", "from-b"]);
    let folder = path.parent().expect("folder");
    assert_eq!(
        config.included,
        [folder.join("jobs.d/a.toml"), folder.join("jobs.d/b.toml")]
    );
    assert_eq!(config.job_file("main"), path.as_path());
    assert_eq!(config.job_file("from-b"), folder.join("jobs.d/b.toml"));
    let from_b = config.job("from-b").expect("from-b");
    assert_eq!(from_b.limits[0].max_running, 2);
    assert_eq!(config.calendars.len(), 1);
}

#[test]
fn a_job_name_in_two_files_is_an_error_naming_both_files_and_lines() {
    let (_folder, path) = folder_with(
        &format!("include = [\"jobs.d/*.toml\"]\n{DB}\n{}", a_job("twice")),
        &[(
            "jobs.d/other.toml",
            &format!("# another\n\n{}", a_job("twice")),
        )],
    );
    let error = Config::load(&path, &Environment::default()).expect_err("refused");
    assert_eq!(error.diagnostics.len(), 1, "{error}");
    let d = &error.diagnostics[0];
    let other = path.parent().expect("folder").join("jobs.d/other.toml");
    assert_eq!(d.file.as_deref(), Some(other.as_path()), "{d:?}");
    assert_eq!(d.line, Some(4), "{d:?}");
    let rendered = error.to_string();
    assert!(
        rendered.contains(&format!("{}:4: job \"twice\"", other.display())),
        "{rendered}"
    );
    assert!(
        rendered.contains(&format!("at {}:6", path.display())),
        "{rendered}"
    );
    // A limit, the same.
    let (_folder, path) = folder_with(
        &format!("include = [\"more.toml\"]\n{DB}[[limit]]\nname = \"l\"\nmax_running = 1\n"),
        &[("more.toml", "[[limit]]\nname = \"l\"\nmax_running = 2\n")],
    );
    let rendered = Config::load(&path, &Environment::default())
        .expect_err("refused")
        .to_string();
    assert!(
        rendered
            .contains("more.toml:2: key \"limit.name\": limit \"l\" is declared twice: also at")
            && rendered.contains("jobs.toml:5"),
        "{rendered}"
    );
}

#[test]
fn an_included_file_names_its_own_file_and_line_in_errors_and_holds_only_jobs_limits_and_calendars()
{
    let (_folder, path) = folder_with(
        &format!("include = [\"jobs.d/*.toml\"]\n{DB}"),
        &[(
            "jobs.d/bad.toml",
            &format!(
                "[defaults]\ntimeout = \"1m\"\n\n{}timeout = \"soon\"\n",
                a_job("bad")
            ),
        )],
    );
    let error = Config::load(&path, &Environment::default()).expect_err("refused");
    let rendered = error.to_string();
    let bad = path.parent().expect("folder").join("jobs.d/bad.toml");
    assert!(
        rendered.contains(&format!(
            "{}:1: key \"defaults\": an included file holds only",
            bad.display()
        )),
        "{rendered}"
    );
    assert!(
        rendered.contains(&format!(
            "{}:8: job \"bad\", key \"timeout\"",
            bad.display()
        )),
        "{rendered}"
    );
    // Invalid TOML, and an include of its own.
    let (_folder, path) = folder_with(
        &format!("include = [\"a.toml\", \"b.toml\"]\n{DB}"),
        &[
            ("a.toml", "[[job]\n"),
            ("b.toml", "include = [\"a.toml\"]\n"),
        ],
    );
    let rendered = Config::load(&path, &Environment::default())
        .expect_err("refused")
        .to_string();
    assert!(rendered.contains("a.toml:1: invalid TOML"), "{rendered}");
    assert!(
        rendered.contains("b.toml:1: key \"include\": an included file holds only"),
        "{rendered}"
    );
}

#[test]
fn include_patterns_that_name_nothing_readable() {
    let (_folder, path) = folder_with(
        &format!("include = [\"missing.toml\", \"*/x.toml\"]\n{DB}"),
        &[],
    );
    let error = Config::load(&path, &Environment::default()).expect_err("refused");
    assert_eq!(error.diagnostics.len(), 2, "{error}");
    assert!(
        error
            .diagnostics
            .iter()
            .all(|d| d.line == Some(1) && d.file.is_none() && d.key.as_deref() == Some("include"))
    );
    let rendered = error.to_string();
    assert!(rendered.contains("is no file"), "{rendered}");
    assert!(rendered.contains("not folders"), "{rendered}");
    // A folder that does not exist matches nothing, and says so.
    let (_folder, path) = folder_with(&format!("include = [\"jobs.d/*.toml\"]\n{DB}"), &[]);
    let config = Config::load(&path, &Environment::default()).expect("valid");
    assert!(config.jobs.is_empty());
    assert!(
        config.warnings[0].message.contains("no file is included"),
        "{:?}",
        config.warnings
    );
    // Not a list of patterns.
    one_error(
        &format!("include = \"jobs.d/*.toml\"\n{DB}"),
        1,
        None,
        "include",
        "a list of file patterns",
    );
}

#[test]
fn an_after_that_names_a_job_of_another_file_resolves_and_its_errors_name_their_file() {
    let (_folder, path) = folder_with(
        &format!("include = [\"jobs.d/*.toml\"]\n{DB}{}", a_job("parent")),
        &[(
            "jobs.d/child.toml",
            "[[job]]\nname = \"child\"\nafter = [\"parent\"]\ncommand = \"true\"\n\n\
             [[job]]\nname = \"orphan\"\nafter = [\"nobody\"]\ncommand = \"true\"\n",
        )],
    );
    let rendered = Config::load(&path, &Environment::default())
        .expect_err("refused")
        .to_string();
    assert!(
        rendered.contains("child.toml:8: job \"orphan\", key \"after\": after names \"nobody\""),
        "{rendered}"
    );
    assert!(!rendered.contains("\"child\""), "{rendered}");
}

/// `on_abandon`: `"record"` unless set, or `"rerun"` (part of the job's
/// definition, as replicas compare it, only when set so); anything else,
/// and `"rerun"` for a `run_on = "every"` job, is refused naming the job,
/// the key and its line.
#[test]
fn on_abandon() {
    let plain = parse(&job("schedule = \"@daily\"\ncommand = \"true\"")).expect("valid");
    assert_eq!(plain.jobs[0].on_abandon, OnAbandon::Record);
    assert!(!plain.jobs[0].definition().contains("on_abandon"));
    let rerun = parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\non_abandon = \"rerun\"",
    ))
    .expect("valid");
    assert_eq!(rerun.jobs[0].on_abandon, OnAbandon::Rerun);
    assert!(rerun.jobs[0].definition().ends_with(" on_abandon=rerun"));
    let record = parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\non_abandon = \"record\"",
    ))
    .expect("valid");
    assert_eq!(record.jobs[0].definition(), plain.jobs[0].definition());
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\non_abandon = \"retry\""),
        8,
        Some("\"j\""),
        "on_abandon",
        "on_abandon \"retry\": expected \"record\"",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\non_abandon = true"),
        8,
        Some("\"j\""),
        "on_abandon",
        "invalid type",
    );
    one_error(
        &job(
            "schedule = \"@daily\"\ncommand = \"true\"\nrun_on = \"every\"\non_abandon = \"rerun\"",
        ),
        9,
        Some("\"j\""),
        "on_abandon",
        "run_on = \"every\"",
    );
    one_error(
        &format!(
            "{DB}\n[[job]]\nname = \"p\"\nschedule = \"@daily\"\ncommand = \"true\"\n\n\
             [[job]]\nname = \"j\"\nafter = [\"p\"]\ncommand = \"true\"\non_abandon = \"rerun\"\n"
        ),
        13,
        Some("\"j\""),
        "on_abandon",
        "a job with after",
    );
}

/// `priority`: an integer from -1000 to 1000, 0 unless set; anything else
/// is refused naming the job, the key and its line.
#[test]
fn priority() {
    let config = parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\npriority = 10",
    ))
    .expect("valid");
    assert_eq!(config.jobs[0].priority, 10);
    let config = parse(&job(
        "schedule = \"@daily\"\ncommand = \"true\"\npriority = -1000",
    ))
    .expect("valid");
    assert_eq!(config.jobs[0].priority, -1000);
    let plain = parse(&job("schedule = \"@daily\"\ncommand = \"true\"")).expect("valid");
    assert_eq!(plain.jobs[0].priority, 0);
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\npriority = 1001"),
        8,
        Some("\"j\""),
        "priority",
        "priority 1001 is out of range -1000–1000",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\npriority = 99999999999"),
        8,
        Some("\"j\""),
        "priority",
        "out of range",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\npriority = \"high\""),
        8,
        Some("\"j\""),
        "priority",
        "invalid type",
    );
    one_error(
        &job("schedule = \"@daily\"\ncommand = \"true\"\npriority = 1.5"),
        8,
        Some("\"j\""),
        "priority",
        "invalid type",
    );
}

/// `at`: one instant, RFC 3339 with its offset, instead of a schedule; a
/// time without an offset, a fraction of a second, `at` beside `schedule`
/// or `after`, and `at` for a job run on every replica are each an error
/// naming the line, the job and the key.
#[test]
fn at_is_one_instant_instead_of_a_schedule() {
    let config = parse(&job(
        "at = \"2099-01-15T03:00:00+01:00\"\ncommand = \"true\"\ntimezone = \"Europe/Berlin\"",
    ))
    .expect("valid");
    let schedule = &config.jobs[0].schedule;
    let instant = chrono::DateTime::parse_from_rfc3339("2099-01-15T02:00:00Z")
        .expect("time")
        .with_timezone(&chrono::Utc);
    assert_eq!(schedule.once_at(), Some(instant));
    assert_eq!(schedule.expression(), "at 2099-01-15T03:00:00+01:00");
    assert_eq!(
        schedule.upcoming(instant - chrono::TimeDelta::days(1), 5),
        [instant]
    );
    assert!(!schedule.has_ended(instant - chrono::TimeDelta::seconds(1)));
    assert!(schedule.has_ended(instant));
    assert!(config.past_instants.is_empty());

    one_error(
        &job("at = \"2099-01-15T03:00:00\"\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "at",
        "has no offset",
    );
    one_error(
        &job("at = \"next tuesday\"\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "at",
        "is not an RFC 3339 time",
    );
    one_error(
        &job("at = \"2099-01-15T03:00:00.5Z\"\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "at",
        "whole seconds",
    );
    one_error(
        &job("schedule = \"@daily\"\nat = \"2099-01-15T03:00:00Z\"\ncommand = \"true\""),
        7,
        Some("\"j\""),
        "at",
        "at and schedule are exclusive",
    );
    let both = format!(
        "{DB}\n[[job]]\nname = \"parent\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
         [[job]]\nname = \"j\"\nafter = [\"parent\"]\nat = \"2099-01-15T03:00:00Z\"\ncommand = \"true\"\n"
    );
    one_error(&both, 11, Some("\"j\""), "at", "at and after are exclusive");
    one_error(
        &job("at = \"2099-01-15T03:00:00Z\"\nrun_on = \"every\"\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "at",
        "run once across the fleet",
    );
    one_error(
        &job("command = \"true\""),
        4,
        Some("\"j\""),
        "schedule",
        "or at, the one instant it runs at",
    );
}

/// An `at` instant already past by more than `catch_up` is refused, naming
/// the file, line, job and key, unless the database shows the fleet had the
/// job before it (or ran it); one `catch_up` covers is accepted.
#[test]
fn a_past_at_instant_is_refused_unless_catch_up_covers_it_or_the_fleet_had_it() {
    let config = parse(&job(
        "at = \"2020-01-15T03:00:00+01:00\"\ncommand = \"true\"",
    ))
    .expect("the file itself is valid");
    assert_eq!(config.past_instants.len(), 1);
    let refused = config
        .refuse_past_instants(|_, _| false)
        .expect_err("a past instant the fleet never had");
    assert_eq!(refused.diagnostics.len(), 1, "{refused:#?}");
    let d = &refused.diagnostics[0];
    assert_eq!(
        (d.line, d.job.as_deref(), d.key.as_deref()),
        (Some(6), Some("\"j\""), Some("at"))
    );
    assert!(
        d.message.contains("is past") && d.message.contains("catch_up (0s) does not cover it"),
        "{d:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("jobs.toml:6: job \"j\", key \"at\""),
        "{refused}"
    );
    let mut asked = Vec::new();
    config
        .refuse_past_instants(|job, instant| {
            asked.push((job.to_string(), instant));
            true
        })
        .expect("the fleet had the job before its instant");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].0, "j");
    assert_eq!(
        crate::schedule::fmt_instant(asked[0].1),
        "2020-01-15T02:00:00.000Z"
    );
    // A disabled job is never run: its past instant stops nothing.
    let disabled = parse(&job(
        "at = \"2020-01-15T03:00:00Z\"\ncommand = \"true\"\nenabled = false",
    ))
    .expect("valid");
    disabled
        .refuse_past_instants(|_, _| false)
        .expect("disabled");
    // catch_up reaches it: it runs once, when a replica starts.
    let recent = (chrono::Utc::now() - chrono::TimeDelta::minutes(10))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let covered = parse(&job(&format!(
        "at = \"{recent}\"\ncommand = \"true\"\ncatch_up = \"1h\""
    )))
    .expect("valid");
    assert!(covered.past_instants.is_empty());
    let uncovered = parse(&job(&format!(
        "at = \"{recent}\"\ncommand = \"true\"\ncatch_up = \"5m\""
    )))
    .expect("valid");
    assert!(
        uncovered.refuse_past_instants(|_, _| false).is_err(),
        "catch_up of 5m does not reach 10m back"
    );
}

#[test]
fn secret_env_names_where_each_secret_is_read_from_never_its_value() {
    use crate::config::params::SecretSource;
    use std::os::unix::fs::PermissionsExt as _;
    let folder = tempfile::tempdir().expect("a folder");
    let token = folder.path().join("api-token");
    std::fs::write(&token, "tok-3f9a77\n").expect("written");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let with = |extra: &str, spec: &str| {
        job(&format!(
            "schedule = \"@daily\"\ncommand = \"true\"\n{extra}secret_env = {{ API_TOKEN = \"{spec}\" }}"
        ))
    };
    let source = format!("file:{}", token.display());
    let config = parse(&with("", &source)).expect("valid");
    assert_eq!(
        config.jobs[0].secret_env["API_TOKEN"],
        SecretSource::File(token.clone())
    );
    assert!(config.warnings.is_empty(), "{:#?}", config.warnings);
    // The definition replicas compare names the source, not the value.
    let definition = config.jobs[0].definition();
    assert!(definition.contains(&source), "{definition}");
    assert!(!definition.contains("tok-3f9a77"), "{definition}");

    // A value that names no file may be the secret itself: not echoed.
    let rendered = one_error(
        &with("", "hunter2-inline"),
        8,
        Some("\"j\""),
        "secret_env",
        "expected file:/PATH or credential:NAME",
    );
    assert!(!rendered.contains("hunter2"), "{rendered}");
    one_error(
        &with("", "file:relative/token"),
        8,
        Some("\"j\""),
        "secret_env",
        "must be absolute",
    );
    one_error(
        &with("", "credential:../token"),
        8,
        Some("\"j\""),
        "secret_env",
        "expected the name of a systemd credential",
    );

    // A file that cannot be read is refused, by name.
    let missing = folder.path().join("no-such-token");
    let rendered = one_error(
        &with("", &format!("file:{}", missing.display())),
        8,
        Some("\"j\""),
        "secret_env",
        &missing.display().to_string(),
    );
    assert!(rendered.contains("API_TOKEN"), "{rendered}");

    // Names: a variable's, not replicron's own, not also in env or params.
    one_error(
        &job(&format!(
            "schedule = \"@daily\"\ncommand = \"true\"\nsecret_env = {{ \"API-TOKEN\" = \"{source}\" }}"
        )),
        8,
        Some("\"j\""),
        "secret_env",
        "invalid environment variable name \"API-TOKEN\"",
    );
    one_error(
        &job(&format!(
            "schedule = \"@daily\"\ncommand = \"true\"\nsecret_env = {{ REPLICRON_JOB = \"{source}\" }}"
        )),
        8,
        Some("\"j\""),
        "secret_env",
        "replicron's own",
    );
    one_error(
        &with("env = { API_TOKEN = \"x\" }\n", &source),
        9,
        Some("\"j\""),
        "secret_env",
        "also set in env",
    );
    one_error(
        &with("params = [\"API_TOKEN=x\"]\n", &source),
        9,
        Some("\"j\""),
        "secret_env",
        "also one of the job's params",
    );

    // Readable by its group or by others: valid, with a warning naming it.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let config = parse(&with("", &source)).expect("valid, with a warning");
    let [warning] = &config.warnings[..] else {
        panic!("{:#?}", config.warnings);
    };
    assert_eq!(warning.line, Some(8), "{warning:#?}");
    assert_eq!(warning.job.as_deref(), Some("\"j\""), "{warning:#?}");
    assert_eq!(warning.key.as_deref(), Some("secret_env"), "{warning:#?}");
    assert!(
        warning.message.contains("API_TOKEN")
            && warning.message.contains(&token.display().to_string())
            && warning.message.contains("0644")
            && !warning.message.contains("tok-3f9a77"),
        "{warning:#?}"
    );
}

/// `success_exit_codes`, `skip_exit_codes` and `retry_on_exit_codes`:
/// lists of codes from 0 to 255, from `[defaults]` or the job, a job's
/// own list replacing that one list; a code out of range, one in two
/// lists (the defaults' and the job's together) or a value that is no
/// list of integers is refused naming the line, the job and the key.
#[test]
fn exit_codes() {
    use crate::config::exit_codes::ExitCodes;
    const BASE: &str = "schedule = \"@daily\"\ncommand = \"true\"\n";
    let config = parse(&job(&format!(
        "{BASE}success_exit_codes = [3, 0]\nskip_exit_codes = [99]\nretries = 2\n\
         retry_on_exit_codes = [75]"
    )))
    .expect("valid");
    assert_eq!(
        config.jobs[0].exit_codes,
        ExitCodes {
            success: vec![0, 3],
            skip: vec![99],
            retry_on: Some(vec![75]),
        }
    );
    let plain = parse(&job(BASE)).expect("valid");
    assert_eq!(plain.jobs[0].exit_codes, ExitCodes::default());
    let inherited = parse(&format!(
        "{DB}[defaults]\nskip_exit_codes = [99]\nretry_on_exit_codes = [75]\n\n\
         [[job]]\nname = \"j\"\n{BASE}retry_on_exit_codes = [1, 75]\n"
    ))
    .expect("valid");
    assert_eq!(
        inherited.jobs[0].exit_codes,
        ExitCodes {
            success: vec![0],
            skip: vec![99],
            retry_on: Some(vec![1, 75]),
        }
    );

    // Out of range.
    one_error(
        &job(&format!("{BASE}skip_exit_codes = [99, 256]")),
        8,
        Some("\"j\""),
        "skip_exit_codes",
        "exit code 256 in skip_exit_codes is out of range 0–255",
    );
    one_error(
        &job(&format!("{BASE}retry_on_exit_codes = [-1]")),
        8,
        Some("\"j\""),
        "retry_on_exit_codes",
        "exit code -1 in retry_on_exit_codes is out of range 0–255",
    );
    one_error(
        &job(&format!("{BASE}success_exit_codes = []")),
        8,
        Some("\"j\""),
        "success_exit_codes",
        "at least one code",
    );
    // In two lists.
    one_error(
        &job(&format!(
            "{BASE}success_exit_codes = [0, 3]\nskip_exit_codes = [3]"
        )),
        9,
        Some("\"j\""),
        "skip_exit_codes",
        "exit code 3 is in both success_exit_codes and skip_exit_codes",
    );
    one_error(
        &job(&format!("{BASE}skip_exit_codes = [0]")),
        8,
        Some("\"j\""),
        "skip_exit_codes",
        "exit code 0 is in both success_exit_codes and skip_exit_codes (success_exit_codes is [0] unless set)",
    );
    one_error(
        &job(&format!(
            "{BASE}retry_on_exit_codes = [75, 99]\nskip_exit_codes = [99]"
        )),
        8,
        Some("\"j\""),
        "retry_on_exit_codes",
        "exit code 99 is in both skip_exit_codes and retry_on_exit_codes",
    );
    // A job's list against the one it has from [defaults]: the job's key.
    one_error(
        &format!(
            "{DB}[defaults]\nskip_exit_codes = [99]\n\n\
             [[job]]\nname = \"j\"\n{BASE}success_exit_codes = [0, 99]\n"
        ),
        10,
        Some("\"j\""),
        "success_exit_codes",
        "exit code 99 is in both success_exit_codes and skip_exit_codes (skip_exit_codes as [defaults] sets it)",
    );
    // In [defaults] alone: reported once, there.
    one_error(
        &format!(
            "{DB}[defaults]\nskip_exit_codes = [300]\n\n\
             [[job]]\nname = \"j\"\n{BASE}"
        ),
        4,
        None,
        "defaults.skip_exit_codes",
        "out of range 0–255",
    );
    // The wrong type.
    for value in ["\"3\"", "3", "[\"3\"]", "[1.5]"] {
        one_error(
            &job(&format!("{BASE}success_exit_codes = {value}")),
            8,
            Some("\"j\""),
            "success_exit_codes",
            "invalid type",
        );
    }
}

/// `memory_max`, `cpu_max`, `tasks_max` and `nofile_max`: set in
/// `[defaults]` or by a job, which overrides them one by one; unset, none.
#[test]
fn resource_limits() {
    let config = parse(&format!(
        "{DB}[defaults]\nmemory_max = \"1G\"\nnofile_max = 4096\n\
         [[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
         memory_max = \"512M\"\ncpu_max = \"50%\"\ntasks_max = 64\n\
         [[job]]\nname = \"b\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    ))
    .expect("valid");
    let a = config.job("a").expect("a");
    assert_eq!(
        a.resources,
        resources::Resources {
            memory_max: Some(512 << 20),
            cpu_max: Some(50),
            tasks_max: Some(64),
            nofile_max: Some(4096),
        }
    );
    let b = config.job("b").expect("b");
    assert_eq!(
        b.resources,
        resources::Resources {
            memory_max: Some(1 << 30),
            nofile_max: Some(4096),
            ..resources::Resources::default()
        }
    );
    // They are part of the job's definition, as replicas compare it.
    assert!(a.definition().contains("memory_max=512M cpu_max=50%"));
    let plain = parse(&job("schedule = \"@daily\"\ncommand = \"true\"")).expect("valid");
    assert!(plain.jobs[0].resources.is_empty());
    assert!(!plain.jobs[0].definition().contains("memory_max"));
}

/// A bad resource limit is refused naming its line, its job and its key.
#[test]
fn bad_resource_limits() {
    for (line, key, needle) in [
        (
            "memory_max = \"512Q\"",
            "memory_max",
            "expected a size such as \"512M\"",
        ),
        ("memory_max = \"-512M\"", "memory_max", "expected a size"),
        ("memory_max = \"0\"", "memory_max", "too small"),
        ("memory_max = 512", "memory_max", "invalid type"),
        ("cpu_max = \"150%\"", "cpu_max", "from 1% to 100%"),
        ("cpu_max = \"0%\"", "cpu_max", "from 1% to 100%"),
        ("cpu_max = \"50\"", "cpu_max", "from 1% to 100%"),
        (
            "tasks_max = 0",
            "tasks_max",
            "tasks_max 0 is out of range 1–4194304",
        ),
        ("tasks_max = -1", "tasks_max", "out of range"),
        (
            "nofile_max = 0",
            "nofile_max",
            "nofile_max 0 is out of range 3–1048576",
        ),
        ("nofile_max = -16", "nofile_max", "out of range"),
        ("nofile_max = \"many\"", "nofile_max", "invalid type"),
    ] {
        let rendered = one_error(
            &job(&format!(
                "schedule = \"@daily\"\ncommand = \"true\"\n{line}"
            )),
            8,
            Some("\"j\""),
            key,
            needle,
        );
        assert!(rendered.contains(key), "{rendered}");
    }
    // In [defaults]: reported once, there, for no job.
    let errors = errors(&format!(
        "{DB}[defaults]\ncpu_max = \"150%\"\n\
         [[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
         [[job]]\nname = \"b\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
    ));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].line, Some(4));
    assert_eq!(errors[0].key.as_deref(), Some("defaults.cpu_max"));
    assert_eq!(errors[0].job, None);
}

/// `schedule = [{ cron, timezone, params }]`: each entry in its own zone,
/// its instants given its params over the job's defaults; an instant two
/// entries share takes the first one's, and `check` warns about it.
#[test]
fn schedule_entries_have_their_own_zone_and_params() {
    let config = parse(&job(
        "schedule = [\n  { cron = \"0 9 * * 1-5\", timezone = \"America/New_York\", params = { REGION = \"us\" } },\n  \
         { cron = \"0 9 * * 1-5\", timezone = \"Europe/Berlin\", params = { REGION = \"eu\" } },\n  \"0 12 * * 6\",\n]\n\
         params = [\"REGION=all\", \"FORMAT=csv\"]\ncommand = \"true\"",
    ))
    .expect("valid");
    assert!(config.warnings.is_empty(), "{:#?}", config.warnings);
    let schedule = &config.jobs[0].schedule;
    assert_eq!(
        schedule.expression(),
        "0 9 * * 1-5 (America/New_York; REGION=us) | 0 9 * * 1-5 (Europe/Berlin; REGION=eu) | 0 12 * * 6 (UTC)"
    );
    let at = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&chrono::Utc)
    };
    // Monday 2027-03-01: 09:00 in Berlin (UTC+1) comes first, then in New York (UTC-5).
    let monday = at("2027-03-01T00:00:00Z");
    let berlin = schedule.next_after(monday).expect("an instant");
    assert_eq!(berlin, at("2027-03-01T08:00:00Z"));
    let new_york = schedule.next_after(berlin).expect("an instant");
    assert_eq!(new_york, at("2027-03-01T14:00:00Z"));
    let region = |instant| {
        schedule
            .params_at(instant)
            .map(|p| (p["REGION"].clone(), p["FORMAT"].clone()))
    };
    assert_eq!(region(berlin), Some(("eu".to_string(), "csv".to_string())));
    assert_eq!(
        region(new_york),
        Some(("us".to_string(), "csv".to_string()))
    );
    // Saturday noon, in the job's zone (UTC): the plain entry, the defaults.
    assert_eq!(schedule.params_at(at("2027-03-06T12:00:00Z")), None);

    // Two entries that share instants with different params: a warning
    // naming both, and the first one's params win.
    let shared = parse(&job(
        "schedule = [\n  { cron = \"0 * * * *\", params = { R = \"hourly\" } },\n  { cron = \"0 0 * * *\", params = { R = \"daily\" } },\n]\n\
         params = [\"R=none\"]\ncommand = \"true\"",
    ))
    .expect("valid, with a warning");
    let [warning] = &shared.warnings[..] else {
        panic!("{:#?}", shared.warnings);
    };
    assert_eq!(warning.line, Some(6), "{warning:#?}");
    assert_eq!(warning.key.as_deref(), Some("schedule"), "{warning:#?}");
    assert!(
        warning.message.contains("entries 1 and 2"),
        "{}",
        warning.message
    );
    let midnight = at("2027-03-02T00:00:00Z");
    assert_eq!(
        shared.jobs[0].schedule.params_at(midnight).expect("params")["R"],
        "hourly"
    );
    assert_eq!(
        shared.jobs[0]
            .schedule
            .next_after(midnight - chrono::TimeDelta::seconds(1)),
        Some(midnight)
    );

    // A dense and a sparse expression: the one instant a year they share
    // is found all the same.
    let yearly = parse(&job(
        "schedule = [{ cron = \"* * * * *\", params = { R = \"often\" } }, { cron = \"0 0 1 1 *\", params = { R = \"new year\" } }]\n\
         params = [\"R=none\"]\ncommand = \"true\"",
    ))
    .expect("valid, with a warning");
    assert_eq!(yearly.warnings.len(), 1, "{:#?}", yearly.warnings);
    // Each entry's zone is shown once one names its own, so replicas
    // whose job zones differ tell their definitions apart.
    let zoned = |zone: &str| {
        parse(&job(&format!(
            "schedule = [{{ cron = \"0 9 * * *\", timezone = \"Asia/Tokyo\" }}, \"0 12 * * *\"]\ntimezone = \"{zone}\"\ncommand = \"true\""
        )))
        .expect("valid")
        .jobs[0]
        .definition()
    };
    assert_ne!(zoned("UTC"), zoned("Europe/Berlin"));
}

#[test]
fn schedule_entries_refuse_what_the_job_does_not_declare() {
    one_error(
        &job(
            "schedule = [{ cron = \"@daily\", params = { REGION = \"eu\" } }]\ncommand = \"true\"",
        ),
        6,
        Some("\"j\""),
        "schedule",
        "schedule entry 1: parameter REGION is not declared by job j",
    );
    one_error(
        &job(
            "schedule = [{ cron = \"@hourly\", params = { REGION = \"us\" } }, { cron = \"@daily\", params = { REGION = \"\" } }]\nparams = [\"REGION\"]\ncommand = \"true\"",
        ),
        6,
        Some("\"j\""),
        "schedule",
        "schedule entry 2: parameter REGION of job j has no default and was given an empty value",
    );
    // A required param that one entry does not give: no scheduled run of
    // that entry would have it.
    one_error(
        &job(
            "schedule = [\"@hourly\", { cron = \"@daily\", params = { REGION = \"eu\" } }]\nparams = [\"REGION\"]\ncommand = \"true\"",
        ),
        7,
        Some("\"j\""),
        "params",
        "REGION has no default",
    );
    // A secret's value would be shown with the schedule.
    one_error(
        &job(
            "schedule = [{ cron = \"@daily\", params = { TOKEN = \"hunter2\" } }]\nparams = [\"TOKEN=none\"]\nsecret_params = [\"TOKEN\"]\ncommand = \"true\"",
        ),
        6,
        Some("\"j\""),
        "schedule",
        "schedule entry 1: TOKEN is one of secret_params",
    );
    one_error(
        &job("schedule = [{ cron = \"@daily\", timezone = \"Mars/Olympus\" }]\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "schedule entry 1: timezone \"Mars/Olympus\" is not an IANA time zone",
    );
    one_error(
        &job("schedule = [{ cron = \"@daily\", zone = \"UTC\" }]\ncommand = \"true\""),
        6,
        Some("\"j\""),
        "schedule",
        "a table { cron = ",
    );
    one_error(
        &job(
            "schedule = [{ cron = \"@manual\", params = { REGION = \"eu\" } }]\nparams = [\"REGION=x\"]\ncommand = \"true\"",
        ),
        6,
        Some("\"j\""),
        "schedule",
        "@manual stand alone",
    );
}
