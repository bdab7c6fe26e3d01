//! Secrets read from files (`secret_env`) and the reason an operator gives
//! an action (`--reason`), on every backend, with a real daemon and real
//! commands: the job gets its secret and nothing else ever shows it; the
//! reason is in the audit log, the run's history and the job's
//! environment.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, history_json, run, wait_until};
use crate::web::{TOKEN, free_port, get_json, http, post_json};

/// The audit log, newest first, as `replicron audit --format json` prints it.
fn audit(config: &Path) -> Vec<Value> {
    let (code, out, err) = run(config, &["audit", "--format", "json", "--limit", "500"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("JSON")
}

/// The `action` rows of the audit log, oldest first.
fn audited(config: &Path, action: &str) -> Vec<Value> {
    audit(config)
        .into_iter()
        .rev()
        .filter(|r| r["action"] == action)
        .collect()
}

/// A file holding `text`, readable by its owner only.
fn private_file(path: &Path, text: &str) {
    std::fs::write(path, text).expect("written");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

backend_test! {
    /// A job's `secret_env` is read from its file at each run's start: the
    /// run gets it (it writes its digest), and its value is in no history
    /// row, no `history` output, no API answer, no dashboard page, no
    /// audit row, no log line and no notification, where its source is
    /// shown instead. A run whose file is gone by then is not started,
    /// recorded `error` naming the file, and notified.
    fn a_secret_from_a_file_reaches_the_run_and_nothing_else(db: &TestDb) {
        db.migrate();
        let secret = format!("tok-{:016x}", rand::random::<u64>());
        let token_file = db.dir().join("api-token");
        private_file(&token_file, &format!("{secret}\n"));
        let gone_file = db.dir().join("gone-token");
        private_file(&gone_file, "soon gone\n");
        let digest = db.dir().join("digest");
        let notified = db.dir().join("notified");
        let port = free_port();
        let jobs = format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [notify]\non = [\"error\"]\n\
             command = 'printf \"%s %s\\n\" \"$REPLICRON_EVENT\" \"$REPLICRON_JOB\" >> {notified}; cat >> {notified}; env >> {notified}'\n\n\
             [[job]]\nname = \"uses-secret\"\nschedule = \"@manual\"\n\
             secret_env = {{ API_TOKEN = \"file:{token}\" }}\n\
             command = 'printf %s \"$API_TOKEN\" | sha256sum | cut -d\" \" -f1 > {digest}; echo \"token=$API_TOKEN\"'\n\n\
             [[job]]\nname = \"locked-out\"\nschedule = \"@manual\"\n\
             secret_env = {{ GONE = \"file:{gone}\" }}\ncommand = 'echo ran'\n",
            notified = notified.display(),
            token = token_file.display(),
            digest = digest.display(),
            gone = gone_file.display(),
        );
        let config = db.config(&jobs);
        let (code, out, err) = run(&config, &["check", "--count", "0"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains(&format!("API_TOKEN=file:{}", token_file.display())), "{out}");
        let replica = Replica::start(&config, "r0", None, &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));

        // From the command line, and through the API.
        let (code, cli_out, cli_err) = run(&config, &["trigger", "uses-secret"]);
        assert_eq!(code, 0, "{cli_out}{cli_err}");
        assert!(cli_out.contains("token=[redacted]"), "{cli_out}");
        let auth = [("Authorization", &*format!("Bearer {TOKEN}"))];
        let (code, answer) = post_json(port, "/api/v1/jobs/uses-secret/trigger", &auth, "{}");
        assert_eq!(code, 202, "{answer}");
        wait_until("two runs of uses-secret", Duration::from_secs(30), || {
            history_json(&config, "uses-secret")
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .count()
                == 2
        });
        let expected = {
            use sha2::Digest as _;
            sha2::Sha256::digest(secret.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        assert_eq!(std::fs::read_to_string(&digest).expect("digest").trim(), expected);

        // The file is gone by the run's start: not started, said, notified.
        std::fs::remove_file(&gone_file).expect("removed");
        let (code, answer) = post_json(port, "/api/v1/jobs/locked-out/trigger", &auth, "{}");
        assert_eq!(code, 202, "{answer}");
        wait_until("the error of locked-out", Duration::from_secs(30), || {
            history_json(&config, "locked-out").iter().any(|r| r["status"] == "error")
        });
        let rows = history_json(&config, "locked-out");
        let output = rows[0]["output"].as_str().unwrap_or("");
        assert!(
            output.contains("secret_env GONE") && output.contains(&gone_file.display().to_string()),
            "{output}"
        );
        wait_until("the notification of the error", Duration::from_secs(30), || {
            std::fs::read_to_string(&notified).is_ok_and(|text| text.contains("error locked-out"))
        });

        // Nowhere else.
        let rows = history_json(&config, "uses-secret");
        let id = rows[0]["id"].as_i64().expect("an id");
        assert!(
            rows.iter().all(|r| r["output"] == "token=[redacted]\n"),
            "{rows:?}"
        );
        let (_, table, _) = run(&config, &["history", "--job", "uses-secret"]);
        let (_, job_json) = get_json(port, "/api/v1/jobs/uses-secret");
        assert_eq!(
            job_json["definition"]["secret_env"]["API_TOKEN"],
            format!("file:{}", token_file.display()),
            "{job_json}"
        );
        let (_, run_json) = get_json(port, &format!("/api/v1/runs/{id}"));
        let (_, _, job_page) = http(port, "GET", "/jobs/uses-secret", &[], "");
        assert!(job_page.contains(&format!("file:{}", token_file.display())), "{job_page}");
        let (_, _, run_page) = http(port, "GET", &format!("/runs/{id}"), &[], "");
        let audit_text = serde_json::to_string(&audit(&config)).expect("JSON");
        let notified_text = std::fs::read_to_string(&notified).expect("notified");
        let log = replica.log_text();
        drop(replica);
        for (what, text) in [
            ("the trigger's output", format!("{cli_out}{cli_err}")),
            ("history", serde_json::to_string(&rows).expect("JSON")),
            ("history's table", table),
            ("the API's job", job_json.to_string()),
            ("the API's run", run_json.to_string()),
            ("the job's page", job_page),
            ("the run's page", run_page),
            ("the audit log", audit_text),
            ("the notification", notified_text),
            ("the daemon's log", log),
        ] {
            assert!(!text.contains(&secret), "the secret is in {what}: {text}");
        }
    }
}

backend_test! {
    /// `--reason` of trigger, pause, resume and unlock, and the API's
    /// `reason`: in the audit log; a trigger's also in its run's history
    /// row (history, the API, the dashboard's run page) and in the run's
    /// `REPLICRON_REASON`. One too long or with a control character is
    /// refused, and nothing runs.
    fn a_reason_is_recorded_with_the_action_and_its_run(db: &TestDb) {
        db.migrate();
        let seen = db.dir().join("reasons");
        let port = free_port();
        let jobs = format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"rerun\"\nschedule = \"@manual\"\n\
             command = 'echo \"[$REPLICRON_TRIGGER] ${{REPLICRON_REASON-none}}\" >> {}'\n",
            seen.display()
        );
        let config = db.config(&jobs);
        let replica = Replica::start(&config, "r0", None, &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));

        let long = "x".repeat(501);
        for bad in ["two\nlines", "\u{1b}[2Jcleared", long.as_str()] {
            let (code, out, err) = run(&config, &["trigger", "rerun", "--reason", bad]);
            assert_eq!(code, 2, "{out}{err}");
            assert!(err.contains("reason"), "{err}");
            let (code, out, err) = run(&config, &["pause", "rerun", "--reason", bad]);
            assert_ne!(code, 0, "{out}{err}");
        }
        let auth = [("Authorization", &*format!("Bearer {TOKEN}"))];
        let (code, answer) = post_json(
            port,
            "/api/v1/jobs/rerun/trigger",
            &auth,
            r#"{"reason": "bell\u0007"}"#,
        );
        assert_eq!(code, 400, "{answer}");
        assert!(!seen.exists(), "a refused reason ran the job");
        assert!(history_json(&config, "rerun").is_empty());

        let (code, out, err) = run(&config, &["trigger", "rerun", "--reason", "ticket 42: rerun after the fix"]);
        assert_eq!(code, 0, "{out}{err}");
        let (code, answer) = post_json(
            port,
            "/api/v1/jobs/rerun/trigger",
            &auth,
            r#"{"reason": "from CI, build 7"}"#,
        );
        assert_eq!(code, 202, "{answer}");
        wait_until("two runs of rerun", Duration::from_secs(30), || {
            history_json(&config, "rerun").iter().filter(|r| r["status"] == "succeeded").count() == 2
        });
        assert_eq!(
            std::fs::read_to_string(&seen).expect("the job's lines"),
            "[manual] ticket 42: rerun after the fix\n[manual] from CI, build 7\n"
        );
        let mut rows = history_json(&config, "rerun");
        rows.reverse();
        assert_eq!(rows[0]["reason"], "ticket 42: rerun after the fix", "{rows:?}");
        assert_eq!(rows[1]["reason"], "from CI, build 7", "{rows:?}");
        let (_, table, _) = run(&config, &["history", "--job", "rerun"]);
        assert!(table.contains("REASON") && table.contains("ticket 42: rerun after the fix"), "{table}");
        let (_, run_json) = get_json(port, &format!("/api/v1/runs/{}", rows[1]["id"]));
        assert_eq!(run_json["reason"], "from CI, build 7", "{run_json}");
        let (_, _, page) = http(port, "GET", &format!("/runs/{}", rows[0]["id"]), &[], "");
        assert!(page.contains("ticket 42: rerun after the fix"), "{page}");

        let (code, out, err) = run(&config, &["pause", "rerun", "--reason", "maintenance window"]);
        assert_eq!(code, 0, "{out}{err}");
        let (code, out, err) = run(&config, &["resume", "rerun", "--reason", "window over"]);
        assert_eq!(code, 0, "{out}{err}");
        let (code, out, err) = run(&config, &["unlock", "rerun", "--reason", "stuck lease"]);
        assert_eq!(code, 0, "{out}{err}");
        drop(replica);

        let triggers = audited(&config, "trigger");
        let done = |via: &str, reason: &str| {
            triggers
                .iter()
                .any(|r| r["via"] == via && r["result"] == "done" && r["args"]["reason"] == reason)
        };
        assert!(
            done("cli", "ticket 42: rerun after the fix") && done("api", "from CI, build 7"),
            "{triggers:#?}"
        );
        // The refused ones are recorded refused, without what they said.
        let refused: Vec<&Value> = triggers.iter().filter(|r| r["result"] == "refused").collect();
        assert_eq!(refused.len(), 4, "{triggers:#?}");
        assert!(refused.iter().all(|r| r["args"].get("reason").is_none()), "{refused:#?}");
        for (action, reason) in [
            ("pause", "maintenance window"),
            ("resume", "window over"),
            ("unlock", "stuck lease"),
        ] {
            let rows = audited(&config, action);
            assert!(
                rows.iter().any(|r| r["result"] == "done" && r["args"]["reason"] == reason),
                "{action}: {rows:#?}"
            );
        }
    }
}
