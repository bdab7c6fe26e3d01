//! Tokens with rights and jobs (`[web] tokens`' `can` and `jobs`) against
//! the real listener: what each may do and see over the API and in the
//! dashboard, the refusals' answers and audit rows, and a backfill's
//! priority given over the API.

use std::time::Duration;

use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, wait_until};
use crate::web::{free_port, get_json, http, post_json};

const RO: &str = "a-read-only-token-of-32-chars-00";
const CI: &str = "a-ci-token-for-deploys-32-chars0";
const OPS: &str = "an-operators-token-of-32-chars-0";

/// `GET path` as `token` sees it.
fn get_as(port: u16, token: &str, path: &str) -> (u16, Value) {
    let bearer = format!("Bearer {token}");
    let (code, _, body) = http(port, "GET", path, &[("Authorization", &bearer)], "");
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// `POST path` with `token` and a JSON `body`.
fn post_as(port: u16, token: &str, path: &str, body: &str) -> (u16, Value) {
    let bearer = format!("Bearer {token}");
    post_json(
        port,
        path,
        &[
            ("Authorization", &bearer),
            ("Content-Type", "application/json"),
        ],
        body,
    )
}

/// The names of the jobs a listing holds.
fn names(jobs: &Value) -> Vec<String> {
    jobs["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .filter_map(|j| j["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Signs in with `token` from the dashboard's own origin: the session
/// cookie (`name=value`).
fn sign_in_as(port: u16, token: &str) -> String {
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let (code, headers, body) = http(port, "POST", "/login", &[form], &format!("token={token}"));
    assert_eq!(code, 303, "{body}");
    headers
        .iter()
        .find(|(n, _)| n == "set-cookie")
        .map(|(_, v)| v.split(';').next().unwrap_or_default().to_string())
        .expect("a session cookie")
}

/// `path`'s page as the session `cookie` sees it.
fn page_as(port: u16, cookie: &str, path: &str) -> (u16, String) {
    let (code, _, page) = http(port, "GET", path, &[("Cookie", cookie)], "");
    (code, page)
}

backend_test! {
    /// A read-only token reads but is refused a trigger (403 naming the
    /// right, and an audit row with its name); a CI token triggers the jobs
    /// of its pattern only and is shown only them; a plain token does
    /// everything; the dashboard shows each session only its own forms.
    fn tokens_act_and_read_within_their_grant(db: &TestDb) {
        let port = free_port();
        let config = db.config_named(
            &format!("tokens-{port}.toml"),
            &db.url,
            &format!(
                "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
                 [web]\ntokens = {{ ro = {{ env = \"REPLICRON_TEST_RO\", can = [\"read\"] }}, ci = {{ env = \"REPLICRON_TEST_CI\", can = [\"trigger\", \"backfill\"], jobs = [\"deploy-*\"] }}, ops = \"REPLICRON_TEST_OPS\" }}\n\n\
                 [[job]]\nname = \"deploy-x\"\nschedule = \"@yearly\"\ncommand = 'echo deployed'\n\n\
                 [[job]]\nname = \"other-job\"\nschedule = \"@yearly\"\ncommand = 'echo other'\n"
            ),
        );
        let replica = Replica::start(
            &config,
            "tokens",
            None,
            &[
                ("REPLICRON_TEST_RO", RO),
                ("REPLICRON_TEST_CI", CI),
                ("REPLICRON_TEST_OPS", OPS),
            ],
        );
        replica.wait_for_log("replicron started", Duration::from_secs(30));

        // ro: reads everything, acts on nothing.
        let (code, jobs) = get_as(port, RO, "/api/v1/jobs");
        assert_eq!((code, names(&jobs)), (200, vec!["deploy-x".to_string(), "other-job".to_string()]), "{jobs}");
        assert_eq!(get_as(port, RO, "/api/v1/jobs/other-job").0, 200);
        let (code, refused) = post_as(port, RO, "/api/v1/jobs/deploy-x/trigger", "");
        assert_eq!(code, 403, "{refused}");
        assert_eq!((refused["right"].as_str(), refused["job"].as_str()), (Some("trigger"), Some("deploy-x")), "{refused}");
        let error = refused["error"].as_str().unwrap_or_default();
        assert!(error.contains("\"ro\"") && error.contains("lacks the right trigger") && !error.contains(RO), "{error}");
        let (_, audit) = get_json(port, "/api/v1/audit?job=deploy-x&who=ro");
        let entries = audit["entries"].as_array().cloned().unwrap_or_default();
        assert!(
            entries.iter().any(|e| e["action"] == "trigger" && e["result"] == "refused" && e["via"] == "api"
                && e["detail"].as_str().is_some_and(|d| d.contains("lacks the right trigger"))),
            "{audit}"
        );
        assert!(!audit.to_string().contains(RO), "{audit}");

        // ci: acts on deploy-* only, and is shown only them.
        let (code, done) = post_as(port, CI, "/api/v1/jobs/deploy-x/trigger", "");
        assert_eq!(code, 202, "{done}");
        let (code, refused) = post_as(port, CI, "/api/v1/jobs/other-job/trigger", "");
        assert_eq!(code, 403, "{refused}");
        assert_eq!((refused["right"].as_str(), refused["job"].as_str()), (Some("trigger"), Some("other-job")), "{refused}");
        assert!(refused["error"].as_str().is_some_and(|e| e.contains("its jobs are deploy-*")), "{refused}");
        let (code, refused) = post_as(port, CI, "/api/v1/jobs/deploy-x/pause", "");
        assert_eq!((code, refused["right"].as_str()), (403, Some("pause")), "{refused}");
        let (code, jobs) = get_as(port, CI, "/api/v1/jobs");
        assert_eq!((code, names(&jobs)), (200, vec!["deploy-x".to_string()]), "{jobs}");
        let (code, refused) = get_as(port, CI, "/api/v1/jobs/other-job");
        assert_eq!((code, refused["right"].as_str()), (403, Some("read")), "{refused}");

        // ops (a plain variable's name): everything.
        let (code, done) = post_as(port, OPS, "/api/v1/jobs/other-job/trigger", "");
        assert_eq!(code, 202, "{done}");
        assert_eq!(post_as(port, OPS, "/api/v1/jobs/other-job/pause", "").0, 200);
        assert_eq!(post_as(port, OPS, "/api/v1/jobs/other-job/resume", "").0, 200);

        // The runs and audit rows ci reads are deploy-x's only.
        wait_until("both triggered runs", Duration::from_secs(30), || {
            let (_, page) = get_json(port, "/api/v1/runs?status=succeeded");
            page["runs"].as_array().is_some_and(|runs| runs.len() >= 2)
        });
        assert_eq!(post_as(port, OPS, "/api/v1/jobs/deploy-x/unlock", "").0, 200);
        let (code, runs) = get_as(port, CI, "/api/v1/runs");
        let runs = runs["runs"].as_array().cloned().unwrap_or_default();
        assert!(code == 200 && !runs.is_empty() && runs.iter().all(|r| r["job"] == "deploy-x"), "{runs:?}");
        assert_eq!(get_as(port, CI, "/api/v1/runs?job=other-job").1["runs"], serde_json::json!([]));
        let (_, other) = get_json(port, "/api/v1/runs?job=other-job");
        let other_id = other["runs"][0]["id"].as_i64().expect("a run of other-job");
        assert_eq!(get_as(port, CI, &format!("/api/v1/runs/{other_id}")).0, 403);
        let (code, audit) = get_as(port, CI, "/api/v1/audit?limit=100");
        let entries = audit["entries"].as_array().cloned().unwrap_or_default();
        assert!(code == 200 && !entries.is_empty() && entries.iter().all(|e| e["job"] == "deploy-x"), "{audit}");
        let (_, timeline) = get_as(port, CI, "/api/v1/timeline");
        let lanes: Vec<&str> = timeline["lanes"].as_array().map(|l| l.iter().filter_map(|l| l["job"].as_str()).collect()).unwrap_or_default();
        assert_eq!(lanes, ["deploy-x"], "{timeline}");

        // A backfill's priority: within -1000..1000, audited.
        let (code, refused) = post_as(
            port,
            CI,
            "/api/v1/jobs/deploy-x/backfill",
            r#"{"from": "2020-01-01T00:00:00Z", "to": "2021-01-01T00:00:00Z", "priority": 5000}"#,
        );
        assert_eq!(code, 400, "{refused}");
        assert!(refused["error"].as_str().is_some_and(|e| e.contains("priority") && e.contains("-1000 to 1000")), "{refused}");
        let (code, started) = post_as(
            port,
            CI,
            "/api/v1/jobs/deploy-x/backfill",
            r#"{"from": "2020-01-01T00:00:00Z", "to": "2021-01-01T00:00:00Z", "priority": 5}"#,
        );
        assert_eq!(code, 202, "{started}");
        let (_, audit) = get_json(port, "/api/v1/audit?job=deploy-x&action=backfill&who=ci");
        let entries = audit["entries"].as_array().cloned().unwrap_or_default();
        assert!(entries.iter().any(|e| e["result"] == "done" && e["args"]["priority"] == "5"), "{audit}");

        // The dashboard: each session is shown the forms it may use.
        let ro = sign_in_as(port, RO);
        let (code, page) = page_as(port, &ro, "/jobs/deploy-x");
        assert_eq!(code, 200, "{page}");
        assert!(page.contains("signed in as") && page.contains("id=\"read-only-token\""), "{page}");
        for form in ["/trigger\"", "/backfill\"", "/pause\"", "id=\"trigger\""] {
            assert!(!page.contains(form), "{form}: {page}");
        }
        // The server refuses it all the same, and records it.
        let csrf = page
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the sign-out form's CSRF token")
            .to_string();
        let form = ("Content-Type", "application/x-www-form-urlencoded");
        let (code, _, refused) = http(port, "POST", "/jobs/deploy-x/trigger", &[form, ("Cookie", &ro)], &format!("csrf={csrf}"));
        assert_eq!(code, 403, "{refused}");
        assert!(refused.contains("lacks the right trigger"), "{refused}");
        let (_, audit) = get_json(port, "/api/v1/audit?job=deploy-x&who=ro&action=trigger");
        assert!(
            audit["entries"].as_array().is_some_and(|e| e.iter().any(|e| e["via"] == "dashboard" && e["result"] == "refused")),
            "{audit}"
        );

        let ci = sign_in_as(port, CI);
        let (_, page) = page_as(port, &ci, "/jobs/deploy-x");
        assert!(page.contains("id=\"trigger\"") && page.contains("id=\"backfill\"") && page.contains("name=\"priority\""), "{page}");
        assert!(!page.contains("id=\"pause\"") && !page.contains("id=\"read-only-token\""), "{page}");
        assert_eq!(page_as(port, &ci, "/jobs/other-job").0, 403);
        let (_, overview) = page_as(port, &ci, "/");
        assert!(overview.contains("/jobs/deploy-x") && !overview.contains("/jobs/other-job"), "{overview}");

        let ops = sign_in_as(port, OPS);
        let (_, page) = page_as(port, &ops, "/jobs/other-job");
        assert!(page.contains("id=\"trigger\"") && page.contains("id=\"pause\""), "{page}");
        drop(replica);
    }
}
