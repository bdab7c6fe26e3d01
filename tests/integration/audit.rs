//! The audit log, on every backend: each operator action, from the command
//! line (a real process, whose Unix user and SUDO_USER are who acted) and
//! from the API (whose token's name is), writes one row, a refused one is
//! recorded refused, and no secret is in any row.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, binary, history_json, text, wait_until};
use crate::web::{free_port, get_json, http, post_json};

const DEFAULT_TOKEN: &str = "the-default-token-0123456789";
const CI_TOKEN: &str = "the-ci-token-abcdefghijklmnop";
const SECRET: &str = "hunter2-is-a-secret";

/// `replicron ARGS[0] --config CONFIG ARGS[1..]` run through sudo by
/// alice, as far as the process can tell: its code, stdout and stderr.
fn as_alice(config: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec![args[0], "--config", config.to_str().expect("utf-8")];
    all.extend_from_slice(&args[1..]);
    let output = Command::new(binary())
        .args(&all)
        .env_remove("REPLICRON_DATABASE_URL")
        .env("SUDO_USER", "alice")
        .output()
        .expect("the replicron binary runs");
    let (out, err) = text(&output);
    (output.status.code().unwrap_or(-1), out, err)
}

/// The audit log as `replicron audit --format json` reads it, with `filter`.
fn audit(config: &std::path::Path, filter: &[&str]) -> Vec<Value> {
    let mut args = vec!["audit", "--format", "json", "--limit", "500"];
    args.extend_from_slice(filter);
    let (code, out, err) = as_alice(config, &args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Vec<Value>>(&out).expect("JSON")
}

/// The rows of `action` by `via`, oldest first.
fn rows<'a>(all: &'a [Value], via: &str, action: &str) -> Vec<&'a Value> {
    all.iter()
        .rev()
        .filter(|r| r["via"] == via && r["action"] == action)
        .collect()
}

fn jobs(port: u16) -> String {
    format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
         [web]\ntoken_env = \"REPLICRON_TEST_AUDIT_DEFAULT\"\ntokens = {{ ci = \"REPLICRON_TEST_AUDIT_CI\" }}\n\n\
         [[job]]\nname = \"load\"\nschedule = \"@manual\"\ncommand = 'test \"$PASSWORD\" != \"[redacted]\"'\n\
         params = [\"TENANT\", \"PASSWORD=none\"]\nsecret_params = [\"PASSWORD\"]\n\n\
         [[job]]\nname = \"hourly\"\nschedule = \"0 * * * *\"\ncommand = 'true'\n\n\
         [[job]]\nname = \"printer\"\nschedule = \"@manual\"\ncommand = 'echo \"pw=$PASSWORD\"'\n\
         params = [\"PASSWORD\"]\nsecret_params = [\"PASSWORD\"]\n"
    )
}

backend_test! {
    fn every_action_writes_one_row_with_who_and_no_secret(db: &TestDb) {
        let port = free_port();
        let config = db.config(&jobs(port));
        let unix_user = String::from_utf8(
            Command::new("id").arg("-un").output().expect("id").stdout,
        )
        .expect("utf-8")
        .trim()
        .to_string();
        let (code, _, err) = as_alice(&config, &["migrate"]);
        assert_eq!(code, 0, "{err}");

        // The command line.
        let cli = |args: &[&str], expected: i32| {
            let (code, out, err) = as_alice(&config, args);
            assert_eq!(code, expected, "{args:?}: {out}{err}");
        };
        cli(&["pause", "hourly", "--reason", "maintenance"], 0);
        cli(&["pause", "hourly", "--until", "2001-01-01T00:00:00Z"], 2);
        cli(&["resume", "hourly"], 0);
        let tenant = "--param=TENANT=acme";
        let password = format!("--param=PASSWORD={SECRET}");
        cli(&["trigger", "load", tenant, &password], 0);
        cli(&["unlock", "load"], 0);
        cli(&["unlock", "--force", "load"], 0);
        cli(&["unlock", "nothing"], 1);
        let now = chrono::Utc::now();
        let from = (now - chrono::TimeDelta::hours(2)).format("%Y-%m-%dT%H:00:00Z").to_string();
        let to = (now - chrono::TimeDelta::hours(1)).format("%Y-%m-%dT%H:00:00Z").to_string();
        cli(&["backfill", "hourly", "--from", &from, "--to", &to], 0);
        cli(&["exec", "--lock", "mutex", "--", "true", SECRET], 0);
        cli(&["exec", "--lock", "mutex", "--once", "k1", "--", "true"], 0);
        cli(&["exec", "--lock", "mutex", "--once", "k1", "--", "true"], 0);

        // The API, with two named tokens.
        let replica = Replica::start(
            &config,
            "audited",
            None,
            &[
                ("REPLICRON_TEST_AUDIT_DEFAULT", DEFAULT_TOKEN),
                ("REPLICRON_TEST_AUDIT_CI", CI_TOKEN),
            ],
        );
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let ci = format!("Bearer {CI_TOKEN}");
        let default = format!("Bearer {DEFAULT_TOKEN}");
        let api = |path: &str, token: &str, body: &str, expected: u16| {
            let (code, answer) = post_json(
                port,
                path,
                &[("Authorization", token), ("Content-Type", "application/json")],
                body,
            );
            assert_eq!(code, expected, "{path}: {answer}");
        };
        // A token pasted into a reason is not stored.
        api(
            "/api/v1/jobs/hourly/pause",
            &ci,
            &format!(r#"{{"reason": "by {CI_TOKEN}"}}"#),
            200,
        );
        api("/api/v1/jobs/hourly/resume", &default, "", 200);
        api(
            "/api/v1/jobs/load/trigger",
            &ci,
            &format!(r#"{{"params": {{"TENANT": "acme", "PASSWORD": "{SECRET}"}}}}"#),
            202,
        );
        api("/api/v1/jobs/load/trigger", &ci, r#"{"params": {"NOPE": "1"}}"#, 400);
        api("/api/v1/jobs/nothing/trigger", &ci, "", 404);
        wait_until("the triggered run to end", Duration::from_secs(20), || {
            let (_, page) = get_json(port, "/api/v1/runs?job=load&status=running");
            page["runs"].as_array().is_some_and(Vec::is_empty)
        });
        api("/api/v1/jobs/load/unlock", &ci, r#"{"force": true}"#, 200);
        api(
            "/api/v1/jobs/hourly/backfill",
            &ci,
            &format!(r#"{{"from": "{from}", "to": "{to}"}}"#),
            202,
        );

        // The daemon: a reload that changed jobs, a replica refused.
        let text = std::fs::read_to_string(&config).expect("config");
        std::fs::write(
            &config,
            format!("{text}\n[[job]]\nname = \"added\"\nschedule = \"@daily\"\ncommand = 'true'\n"),
        )
        .expect("config");
        replica.signal(Signal::SIGHUP);
        replica.wait_for_log("config reloaded", Duration::from_secs(20));
        let mut twin = Replica::start(
            &config,
            "audited",
            None,
            &[
                ("REPLICRON_TEST_AUDIT_DEFAULT", DEFAULT_TOKEN),
                ("REPLICRON_TEST_AUDIT_CI", CI_TOKEN),
            ],
        );
        twin.wait_exit(Duration::from_secs(20)).expect("refused");

        let all = audit(&config, &[]);
        let whole = serde_json::to_string(&all).expect("JSON");
        for secret in [SECRET, DEFAULT_TOKEN, CI_TOKEN] {
            assert!(!whole.contains(secret), "{secret} in the audit log: {whole}");
        }
        // Nor in the history: the runs were given the value (they succeed
        // only then), their rows say [redacted].
        wait_until("the triggered runs to end", Duration::from_secs(20), || {
            let runs = history_json(&config, "load");
            !runs.is_empty() && runs.iter().all(|r| r["status"] != "running")
        });
        let runs = history_json(&config, "load");
        let history = serde_json::to_string(&runs).expect("JSON");
        assert!(!history.contains(SECRET), "the secret in history: {history}");
        assert!(history.contains("[redacted]"), "{history}");
        assert!(
            runs.iter().all(|r| r["status"] == "succeeded"),
            "{history}"
        );
        let count = |via: &str, action: &str| rows(&all, via, action).len();
        for (action, n) in [
            ("pause", 2),
            ("resume", 1),
            ("trigger", 1),
            ("unlock", 3),
            ("backfill", 1),
            ("exec", 3),
        ] {
            assert_eq!(count("cli", action), n, "cli {action}: {whole}");
        }
        for (action, n) in [("pause", 1), ("resume", 1), ("trigger", 3), ("unlock", 1), ("backfill", 1)] {
            assert_eq!(count("api", action), n, "api {action}: {whole}");
        }
        assert_eq!(count("daemon", "reload"), 1, "{whole}");
        assert_eq!(count("daemon", "refuse_replica"), 1, "{whole}");

        // Who, from where, what, and the result.
        for row in all.iter().filter(|r| r["via"] == "cli") {
            assert_eq!(row["who"], unix_user.as_str(), "{row}");
            assert_eq!(row["sudo_user"], "alice", "{row}");
            assert!(row["address"].is_null(), "{row}");
        }
        for row in all.iter().filter(|r| r["via"] == "api") {
            let expected = if row["action"] == "resume" { "default" } else { "ci" };
            assert_eq!(row["who"], expected, "{row}");
            assert_eq!(row["host"], "audited", "{row}");
            assert_eq!(row["address"], "127.0.0.1", "{row}");
        }
        let result = |via: &str, action: &str| -> Vec<String> {
            rows(&all, via, action)
                .iter()
                .map(|r| r["result"].as_str().unwrap_or("").to_string())
                .collect()
        };
        assert_eq!(result("cli", "pause"), ["done", "refused"]);
        assert_eq!(result("cli", "unlock"), ["done", "done", "refused"]);
        assert_eq!(result("cli", "exec"), ["done", "done", "refused"]);
        assert_eq!(result("api", "trigger"), ["done", "refused", "refused"]);
        let pause = rows(&all, "cli", "pause")[0];
        assert_eq!(pause["args"]["reason"], "maintenance");
        assert_eq!(pause["job"], "hourly");
        let refused = rows(&all, "cli", "pause")[1];
        assert!(refused["detail"].as_str().is_some_and(|d| d.contains("not in the future")), "{refused}");
        let trigger = rows(&all, "cli", "trigger")[0];
        assert_eq!(trigger["args"]["params"]["TENANT"], "acme");
        assert_eq!(trigger["args"]["params"]["PASSWORD"], "[redacted]");
        assert_eq!(rows(&all, "cli", "unlock")[1]["args"]["force"], true);
        assert_eq!(rows(&all, "cli", "exec")[1]["args"]["once"], "k1");
        let api_trigger = rows(&all, "api", "trigger")[0];
        assert_eq!(api_trigger["args"]["params"]["PASSWORD"], "[redacted]");
        assert_eq!(rows(&all, "api", "pause")[0]["args"]["reason"], "by [redacted]");
        let reload = rows(&all, "daemon", "reload")[0];
        assert_eq!(reload["args"]["added"], serde_json::json!(["added"]));
        let twin_row = rows(&all, "daemon", "refuse_replica")[0];
        assert_eq!((twin_row["job"].as_str(), twin_row["result"].as_str()), (Some("audited"), Some("refused")));

        // The filters.
        assert_eq!(audit(&config, &["--job", "load", "--action", "trigger"]).len(), 3);
        assert_eq!(audit(&config, &["--who", "alice"]).len(), all.iter().filter(|r| r["via"] == "cli").count());
        assert_eq!(audit(&config, &["--who", "ci"]).len(), 6);
        assert_eq!(audit(&config, &["--since", "1h"]).len(), all.len());
        assert!(audit(&config, &["--until", "1h"]).is_empty());
        let (code, _, err) = as_alice(&config, &["audit", "--since", "yesterday"]);
        assert_eq!(code, 2, "{err}");

        // The API and the dashboard read it.
        let (code, page) = get_json(port, "/api/v1/audit?who=ci&action=trigger&limit=2");
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["entries"].as_array().map(Vec::len), Some(2), "{page}");
        assert!(page["next_cursor"].is_string(), "{page}");
        let (code, page) = get_json(port, "/api/v1/audit?action=stop");
        assert_eq!(code, 400, "{page}");
        let (code, _, body) = http(port, "GET", "/audit?job=load", &[], "");
        assert_eq!(code, 200);
        assert!(body.contains("Audit log") && body.contains("[redacted]") && !body.contains(SECRET), "{body}");
        let (code, _, body) = http(port, "GET", "/jobs/load", &[], "");
        assert_eq!(code, 200);
        assert!(body.contains("id=\"job-audit\"") && body.contains("href=\"/audit\""), "{body}");
        replica.signal(Signal::SIGTERM);
    }
}

/// `replicron ARGS[0] --config CONFIG ARGS[1..]` with `stdin`, as
/// [`as_alice`].
fn as_alice_with_stdin(
    config: &std::path::Path,
    args: &[&str],
    stdin: &str,
) -> (i32, String, String) {
    use std::io::Write as _;
    let mut all = vec![args[0], "--config", config.to_str().expect("utf-8")];
    all.extend_from_slice(&args[1..]);
    let mut child = Command::new(binary())
        .args(&all)
        .env_remove("REPLICRON_DATABASE_URL")
        .env("SUDO_USER", "alice")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the replicron binary runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("stdin written");
    let output = child.wait_with_output().expect("it ends");
    let (out, err) = text(&output);
    (output.status.code().unwrap_or(-1), out, err)
}

backend_test! {
    /// A refused action is recorded with who and why, and with no value
    /// that was not accepted as a declared parameter that is not secret: a
    /// secret under a misspelt name, from the API and from the command line
    /// alike, is written `[redacted]`. An empty value for a parameter
    /// without a default, a key of a JSON body the API does not know and a
    /// secret in a query string are refused by name; a refused reload is
    /// recorded. A secret's default is shown nowhere.
    fn refusals_are_recorded_without_a_value_that_was_not_accepted(db: &TestDb) {
        let port = free_port();
        let config = db.config(&jobs(port));
        let (code, _, err) = as_alice(&config, &["migrate"]);
        assert_eq!(code, 0, "{err}");

        // The command line.
        let misspelt = format!("--param=password={SECRET}");
        let (code, _, err) = as_alice(&config, &["trigger", "load", "--param=TENANT=acme", &misspelt]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("parameter password is not declared") && !err.contains(SECRET), "{err}");
        let (code, _, err) = as_alice(&config, &["trigger", "load", "--param=TENANT="]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("parameter TENANT") && err.contains("empty value"), "{err}");
        // A secret read from stdin, not from the command line.
        let (code, out, err) = as_alice_with_stdin(
            &config,
            &["trigger", "load", "--param-file", "-"],
            &format!("# for the load\nTENANT=acme\n\nPASSWORD={SECRET}\n"),
        );
        assert_eq!(code, 0, "{out}{err}");
        // A job that prints its secret keeps it masked in its history.
        let (code, out, err) = as_alice_with_stdin(
            &config,
            &["trigger", "printer", "--param-file", "-"],
            &format!("PASSWORD={SECRET}\n"),
        );
        assert_eq!(code, 0, "{out}{err}");
        let printed = serde_json::to_string(&history_json(&config, "printer")).expect("JSON");
        assert!(printed.contains("pw=[redacted]") && !printed.contains(SECRET), "{printed}");

        let replica = Replica::start(
            &config,
            "audited",
            None,
            &[
                ("REPLICRON_TEST_AUDIT_DEFAULT", DEFAULT_TOKEN),
                ("REPLICRON_TEST_AUDIT_CI", CI_TOKEN),
            ],
        );
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let ci = format!("Bearer {CI_TOKEN}");
        let api = |path: &str, body: &str| {
            post_json(
                port,
                path,
                &[("Authorization", &ci), ("Content-Type", "application/json")],
                body,
            )
        };
        for (body, named) in [
            (format!(r#"{{"params": {{"TENANT": "acme", "password": "{SECRET}"}}}}"#), "password"),
            (r#"{"params": {"TENANT": ""}}"#.to_string(), "TENANT"),
            (format!(r#"{{"params": {{"TENANT": "acme"}}, "PASSWORD": "{SECRET}"}}"#), "\"PASSWORD\""),
        ] {
            let (code, answer) = api("/api/v1/jobs/load/trigger", &body);
            assert_eq!(code, 400, "{body}: {answer}");
            let error = answer["error"].as_str().unwrap_or("");
            assert!(error.contains(named) && !error.contains(SECRET), "{error}");
        }
        // Resuming a job that is not in the file is refused, and recorded.
        let (code, answer) = api("/api/v1/jobs/nothing/resume", "");
        assert_eq!(code, 404, "{answer}");
        let (code, answer) = api(
            &format!("/api/v1/jobs/load/trigger?param.TENANT=acme&param.PASSWORD={SECRET}"),
            "",
        );
        assert_eq!(code, 400, "{answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains("PASSWORD of job load is secret")), "{answer}");

        // A secret default is not shown: neither by the API, nor in the
        // trigger form of a signed-in page.
        let (_, jobs) = get_json(port, "/api/v1/jobs");
        let load = jobs["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["name"] == "load"))
            .cloned()
            .unwrap_or_default();
        let params = &load["definition"]["params"];
        assert_eq!(params[1]["name"], "PASSWORD", "{load}");
        assert_eq!(
            (params[1]["default"].clone(), params[1]["has_default"].clone(), params[1]["secret"].clone()),
            (Value::Null, Value::Bool(true), Value::Bool(true)),
            "{load}"
        );
        assert_eq!(params[0]["has_default"], false, "{load}");
        let (code, _, page) = http(port, "GET", "/jobs/load", &[("Authorization", &ci)], "");
        assert_eq!(code, 200);
        assert!(page.contains("type=\"password\" name=\"param.PASSWORD\""), "{page}");
        assert!(!page.contains("value=\"none\""), "{page}");

        // A reload of an invalid file.
        let text = std::fs::read_to_string(&config).expect("config");
        std::fs::write(
            &config,
            format!("{text}\n[[job]]\nname = \"bad\"\nschedule = \"every now and then\"\ncommand = 'true'\n"),
        )
        .expect("config");
        replica.signal(Signal::SIGHUP);
        replica.wait_for_log("the new config is invalid", Duration::from_secs(20));
        std::fs::write(&config, &text).expect("config");

        let all = audit(&config, &[]);
        let whole = serde_json::to_string(&all).expect("JSON");
        assert!(!whole.contains(SECRET), "the secret in the audit log: {whole}");
        let (_, page) = get_json(port, "/api/v1/audit?limit=100");
        assert!(!page.to_string().contains(SECRET), "{page}");
        for path in ["/audit", "/jobs/load"] {
            let (code, _, body) = http(port, "GET", path, &[], "");
            assert_eq!(code, 200);
            assert!(!body.contains(SECRET), "{path}: {body}");
        }
        let result = |via: &str, action: &str| -> Vec<String> {
            rows(&all, via, action)
                .iter()
                .map(|r| r["result"].as_str().unwrap_or("").to_string())
                .collect()
        };
        assert_eq!(result("cli", "trigger"), ["refused", "refused", "done", "done"], "{whole}");
        assert_eq!(result("api", "trigger"), ["refused"; 4], "{whole}");
        let cli = rows(&all, "cli", "trigger");
        assert_eq!(cli[0]["args"]["params"]["password"], "[redacted]", "{whole}");
        assert_eq!(cli[0]["args"]["params"]["TENANT"], "acme", "{whole}");
        assert_eq!(cli[0]["sudo_user"], "alice", "{whole}");
        assert!(cli[0]["detail"].as_str().is_some_and(|d| d.contains("password")), "{whole}");
        assert!(cli[1]["detail"].as_str().is_some_and(|d| d.contains("TENANT")), "{whole}");
        assert_eq!(cli[2]["args"]["params"]["PASSWORD"], "[redacted]", "{whole}");
        let api_rows = rows(&all, "api", "trigger");
        assert_eq!(api_rows[0]["args"]["params"]["password"], "[redacted]", "{whole}");
        for (row, named) in api_rows.iter().zip(["password", "TENANT", "PASSWORD", "PASSWORD"]) {
            assert_eq!(row["who"], "ci", "{row}");
            assert!(row["detail"].as_str().is_some_and(|d| d.contains(named)), "{row}");
        }
        let resume = rows(&all, "api", "resume");
        assert_eq!(resume.len(), 1, "{whole}");
        assert_eq!(
            (resume[0]["job"].as_str(), resume[0]["result"].as_str(), resume[0]["who"].as_str()),
            (Some("nothing"), Some("refused"), Some("ci")),
            "{whole}"
        );
        let reload = rows(&all, "daemon", "reload");
        assert_eq!(reload.len(), 1, "{whole}");
        assert_eq!(reload[0]["result"], "refused", "{whole}");
        assert!(
            reload[0]["detail"].as_str().is_some_and(|d| d.contains("invalid") && d.contains("schedule")),
            "{whole}"
        );
        replica.signal(Signal::SIGTERM);
    }
}

/// A secret parameter's default may be read from a file (or a systemd
/// credential) at each run's start, so that a job on a schedule need not
/// hold its secret in the job file; `check` refuses a file it cannot read,
/// naming it and not what it holds.
#[cfg(feature = "sqlite")]
#[test]
fn a_secret_default_is_read_from_its_file_at_each_run() {
    let db = TestDb::sqlite();
    let config = db.config("");
    let dir = config.parent().expect("a directory").to_path_buf();
    let secret = dir.join("password");
    let seen = dir.join("seen");
    std::fs::write(&secret, "s3cret-one\n").expect("secret");
    let jobs = format!(
        "[[job]]\nname = \"load\"\nschedule = \"@manual\"\ncommand = 'printf %s \"$PASSWORD\" > {seen}'\n\
         params = [\"PASSWORD=file:{secret}\"]\nsecret_params = [\"PASSWORD\"]\n\n\
         [[job]]\nname = \"nightly\"\nschedule = \"0 3 * * *\"\ncommand = 'true'\n\
         params = [\"PASSWORD=credential:db-password\"]\nsecret_params = [\"PASSWORD\"]\n",
        seen = seen.display(),
        secret = secret.display(),
    );
    let config = db.config(&jobs);
    let credentials = dir.join("credentials");
    std::fs::create_dir_all(&credentials).expect("credentials");
    std::fs::write(credentials.join("db-password"), "from-systemd").expect("credential");
    let replicron = |args: &[&str]| {
        let output = Command::new(binary())
            .args(args)
            .args(["--config", config.to_str().expect("utf-8")])
            .env("CREDENTIALS_DIRECTORY", &credentials)
            .output()
            .expect("replicron runs");
        let (out, err) = text(&output);
        (output.status.code().unwrap_or(-1), format!("{out}{err}"))
    };
    let (code, out) = replicron(&["check"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = replicron(&["migrate"]);
    assert_eq!(code, 0, "{out}");
    for value in ["s3cret-one", "s3cret-two"] {
        std::fs::write(&secret, format!("{value}\n")).expect("secret");
        let (code, out) = replicron(&["trigger", "load"]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(std::fs::read_to_string(&seen).expect("seen"), value);
    }
    let (code, history) = replicron(&["history", "--job", "load", "--format", "json"]);
    assert_eq!(code, 0, "{history}");
    assert!(
        history.contains("succeeded") && !history.contains("s3cret"),
        "{history}"
    );

    std::fs::remove_file(&secret).expect("removed");
    let (code, out) = replicron(&["check"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("PASSWORD") && out.contains(&secret.display().to_string()),
        "{out}"
    );
    std::fs::write(credentials.join("db-password"), "").expect("credential");
    std::fs::remove_file(credentials.join("db-password")).expect("removed");
    let (code, out) = replicron(&["check"]);
    assert!(code != 0 && out.contains("credential:db-password"), "{out}");
    assert!(
        !out.contains("s3cret") && !out.contains("from-systemd"),
        "{out}"
    );
}

/// Makes the audit table refuse every new row (a trigger of the test's own
/// database, as a full disk or a revoked grant would).
fn make_audit_unwritable(db: &TestDb) {
    use crate::support::Kind;
    use diesel::connection::SimpleConnection;
    let sql = match db.kind {
        Kind::Sqlite => {
            "CREATE TRIGGER audit_read_only BEFORE INSERT ON replicron_audit \
             BEGIN SELECT RAISE(ABORT, 'the audit table is read-only'); END;"
        }
        Kind::Mysql => {
            "CREATE TRIGGER audit_read_only BEFORE INSERT ON replicron_audit FOR EACH ROW \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the audit table is read-only'"
        }
        Kind::Postgres => {
            "CREATE FUNCTION audit_read_only() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'the audit table is read-only'; END $$; \
             CREATE TRIGGER audit_read_only BEFORE INSERT ON replicron_audit \
             FOR EACH ROW EXECUTE FUNCTION audit_read_only();"
        }
    };
    db.raw()
        .batch_execute(sql)
        .expect("the audit table made read-only");
}

/// The status of `job` in `replicron status --format json`.
fn status_of(config: &std::path::Path, job: &str) -> Value {
    let (code, out, err) = as_alice(config, &["status", "--format", "json"]);
    assert!(code == 0 || code == 1, "{err}");
    let status: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("status: {out}{err}"));
    status["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job"] == job)
        .unwrap_or_else(|| panic!("{job} in {status}"))
        .clone()
}

backend_test! {
    /// An action whose row cannot be written to the audit log is not
    /// carried out: a pause and a trigger from the command line and from
    /// the API are refused, saying why, and nothing is paused or run.
    fn an_action_that_cannot_be_recorded_is_not_done(db: &TestDb) {
        let port = free_port();
        let config = db.config(&jobs(port));
        let (code, _, err) = as_alice(&config, &["migrate"]);
        assert_eq!(code, 0, "{err}");
        // Recorded while the table takes rows.
        let (code, out, err) = as_alice(&config, &["pause", "hourly"]);
        assert_eq!(code, 0, "{out}{err}");
        let (code, out, err) = as_alice(&config, &["resume", "hourly"]);
        assert_eq!(code, 0, "{out}{err}");
        make_audit_unwritable(db);

        let refused = |args: &[&str]| {
            let (code, out, err) = as_alice(&config, args);
            assert_eq!(code, 1, "{args:?}: {out}{err}");
            assert!(
                err.contains("could not be recorded in the audit log")
                    && err.contains("the audit table is read-only"),
                "{args:?}: {err}"
            );
        };
        refused(&["pause", "hourly"]);
        assert!(status_of(&config, "hourly")["paused"].is_null(), "paused unrecorded");
        refused(&["trigger", "printer", "--param=PASSWORD=abcdefgh"]);
        assert!(history_json(&config, "printer").is_empty(), "run unrecorded");

        // The API, likewise.
        let replica = Replica::start(
            &config,
            "audit-unwritable",
            None,
            &[
                ("REPLICRON_TEST_AUDIT_DEFAULT", DEFAULT_TOKEN),
                ("REPLICRON_TEST_AUDIT_CI", CI_TOKEN),
            ],
        );
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let bearer = format!("Bearer {CI_TOKEN}");
        let (code, answer) = post_json(port, "/api/v1/jobs/hourly/pause", &[("authorization", &bearer)], "");
        assert_eq!(code, 503, "{answer}");
        assert!(answer.to_string().contains("could not be recorded in the audit log"), "{answer}");
        let (code, answer) = post_json(port, "/api/v1/jobs/load/trigger", &[("authorization", &bearer)], r#"{"params":{"TENANT":"acme"}}"#);
        assert_eq!(code, 503, "{answer}");
        assert!(answer.to_string().contains("could not be recorded in the audit log"), "{answer}");
        let (_, jobs) = get_json(port, "/api/v1/jobs");
        assert!(jobs.to_string().contains("\"hourly\""), "{jobs}");
        assert!(history_json(&config, "load").is_empty(), "run unrecorded");
        assert!(status_of(&config, "hourly")["paused"].is_null(), "paused unrecorded");
        // Only the rows written before.
        let all = audit(&config, &[]);
        assert_eq!(rows(&all, "cli", "pause").len(), 1, "{all:?}");
        assert!(all.iter().all(|r| r["result"] == "done" && r["action"] != "trigger"), "{all:?}");
        drop(replica);
    }
}
