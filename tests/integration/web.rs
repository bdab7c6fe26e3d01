//! The JSON API on every backend: each endpoint, the runs' filters and
//! cursor pagination, actions with and without the token, and the HTML
//! pages' escaping. The dashboard in a browser is `dashboard.rs`.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, run, wait_until};

/// The token the tests' replicas act with.
pub(crate) const TOKEN: &str = "a-test-token-of-32-characters-00";

pub(crate) fn free_port() -> u16 {
    let [port] = free_ports();
    port
}

/// `N` distinct free ports: their listeners are all held open until every
/// port is chosen (one released at once could be handed out again).
pub(crate) fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("addr").port())
}

/// One HTTP/1.1 request to a replica: its status, headers (lower-case
/// names) and body. Every answer must say `Cache-Control: no-store`.
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let (code, headers, body) = request(port, method, path, headers, body);
    if code != 0 {
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "cache-control" && v == "no-store"),
            "{method} {path} answered {code} without Cache-Control: no-store: {headers:?}"
        );
    }
    (code, headers, body)
}

/// One HTTP/1.1 request to any server: its status, headers (lower-case
/// names) and body.
pub(crate) fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, Vec::new(), String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let _ = stream.write_all(request.as_bytes());
    // Read the head, then the body's Content-Length (a server may keep the
    // connection open after it), or up to the end.
    let mut response = Vec::new();
    let mut buffer = [0_u8; 8192];
    let mut expected: Option<usize> = None;
    loop {
        if let Some(at) = response.windows(4).position(|w| w == b"\r\n\r\n") {
            if expected.is_none() {
                let head = String::from_utf8_lossy(&response[..at]).to_ascii_lowercase();
                expected = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .map(|n| at + 4 + n);
            }
            if expected.is_some_and(|end| response.len() >= end) {
                break;
            }
        }
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&buffer[..n]),
        }
    }
    parse_response(&response)
}

/// A raw HTTP response: its status, headers (lower-case names) and body.
pub(crate) fn parse_response(raw: &[u8]) -> (u16, Vec<(String, String)>, String) {
    let response = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (code, headers, body.to_string())
}

/// `GET path` as JSON, with its status.
pub(crate) fn get_json(port: u16, path: &str) -> (u16, Value) {
    let (code, _, body) = http(port, "GET", path, &[], "");
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

pub(crate) fn post_json(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let (code, _, body) = http(port, "POST", path, headers, body);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Jobs that succeed, fail and print HTML every second, and one that waits
/// for a trigger; the listener on `port`, actions allowed with [`TOKEN`].
pub(crate) fn web_config(db: &TestDb, port: u16, token: bool) -> std::path::PathBuf {
    let web = if token {
        "[web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n"
    } else {
        ""
    };
    db.config_named(
        &format!("web-{port}.toml"),
        &db.url,
        &format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n{web}\
             [[job]]\nname = \"fine\"\nschedule = \"* * * * * *\"\ncommand = 'echo all fine'\n\n\
             [[job]]\nname = \"broken\"\nschedule = \"* * * * * *\"\ncommand = 'echo \"it broke\"; exit 3'\n\n\
             [[job]]\nname = \"html\"\nschedule = \"* * * * * *\"\ncommand = 'echo \"<script>alert(1)</script><b>bold</b>\"'\n\n\
             [[job]]\nname = \"on-demand\"\nschedule = \"@yearly\"\ncommand = 'echo triggered'\n"
        ),
    )
}

/// Starts a replica on `config` (with the token in its environment when
/// `token`) and waits until each per-second job has run 3 times.
pub(crate) fn start_web(config: &std::path::Path, id: &str, port: u16, token: bool) -> Replica {
    let env: &[(&str, &str)] = if token {
        &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)]
    } else {
        &[]
    };
    let replica = Replica::start(config, id, None, env);
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    wait_until("3 runs of each job", Duration::from_secs(30), || {
        ["fine", "broken", "html"].iter().all(|job| {
            let (_, page) = get_json(port, &format!("/api/v1/runs?job={job}&limit=6"));
            page["runs"]
                .as_array()
                .is_some_and(|runs| runs.iter().filter(|r| r["status"] != "running").count() >= 3)
        })
    });
    replica
}

fn ids(page: &Value) -> Vec<i64> {
    page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect()
}

backend_test! {
    fn the_api_answers_every_endpoint(db: &TestDb) {
        let port = free_port();
        let config = web_config(db, port, true);
        let replica = start_web(&config, "web-api", port, true);

        // jobs: every job of the file, its definition, lease and last run.
        let (code, jobs) = get_json(port, "/api/v1/jobs");
        assert_eq!(code, 200, "{jobs}");
        let names: Vec<&str> = jobs["jobs"].as_array().expect("jobs").iter().map(|j| j["name"].as_str().expect("name")).collect();
        assert_eq!(names, ["fine", "broken", "html", "on-demand"]);
        let broken = &jobs["jobs"][1];
        assert_eq!(broken["definition"]["schedule"], "* * * * * *");
        assert_eq!(broken["last_run"]["job"], "broken");
        assert!(broken["last_run"]["output"].is_null(), "a listing carries no output: {broken}");
        assert!(broken["problem"].as_str().is_some_and(|p| p.starts_with("FAILED")), "{broken}");
        assert!(broken["next_start_in_seconds"].as_f64().is_some_and(|s| (0.0..=1.0).contains(&s)), "{broken}");
        assert!(jobs["jobs"][3]["last_run"].is_null() && jobs["jobs"][3]["paused"].is_null());

        // jobs/{name}
        let (code, job) = get_json(port, "/api/v1/jobs/fine");
        assert_eq!((code, job["name"].as_str()), (200, Some("fine")), "{job}");
        for (key, value) in [
            ("long_running_seconds", job.get("long_running_seconds")),
            ("late_start_seconds", job.get("late_start_seconds")),
            ("warn_after_seconds", job["definition"].get("warn_after_seconds")),
            ("late_after_seconds", job["definition"].get("late_after_seconds")),
        ] {
            assert_eq!(value, Some(&Value::Null), "{key}: {job}");
        }
        assert_eq!(get_json(port, "/api/v1/jobs/nope").0, 404);

        // runs: filters by job and status, and never output.
        let (code, failed) = get_json(port, "/api/v1/runs?job=broken&status=failed&limit=1000");
        assert_eq!(code, 200, "{failed}");
        let failed_runs = failed["runs"].as_array().expect("runs");
        assert!(failed_runs.len() >= 3);
        assert!(failed_runs.iter().all(|r| r["job"] == "broken" && r["status"] == "failed" && r["exit_code"] == 3 && r.get("output").is_none()), "{failed}");
        let (_, none) = get_json(port, "/api/v1/runs?job=fine&status=failed");
        assert_eq!(none["runs"].as_array().map(Vec::len), Some(0), "{none}");

        // Cursor pagination: pages of 2 walk the runs newest first, each
        // once, and agree with one big page.
        let (_, all) = get_json(port, "/api/v1/runs?limit=1000");
        let all_ids = ids(&all);
        assert!(all.get("next_cursor").is_some_and(Value::is_null), "one page holds them all: {}", all["next_cursor"]);
        let mut walked: Vec<i64> = Vec::new();
        let mut path = "/api/v1/runs?limit=2".to_string();
        loop {
            let (code, page) = get_json(port, &path);
            assert_eq!(code, 200, "{page}");
            let page_ids = ids(&page);
            assert!((1..=2).contains(&page_ids.len()), "no page is empty: {page}");
            walked.extend(page_ids);
            match page["next_cursor"].as_str() {
                Some(cursor) => path = format!("/api/v1/runs?limit=2&cursor={cursor}"),
                None => break,
            }
            assert!(walked.len() < 10_000, "the walk ends");
        }
        let mut once = walked.clone();
        once.sort_unstable();
        once.dedup();
        assert_eq!(once.len(), walked.len(), "each once: {walked:?}");
        // Runs recorded between the two readings started later than the
        // big page's first, and come first; the others come in its order
        // (newest start first).
        let walked_old: Vec<i64> = walked.iter().copied().filter(|id| all_ids.contains(id)).collect();
        assert_eq!(walked_old, all_ids, "the pages agree with one big page");
        assert!(all_ids.len() >= 9, "{all_ids:?}");

        // since: an RFC 3339 time or a duration before now.
        let middle = &all["runs"][all_ids.len() / 2];
        let since = middle["started_at"].as_str().expect("started_at");
        let (code, recent) = get_json(port, &format!("/api/v1/runs?limit=1000&since={since}"));
        assert_eq!(code, 200, "{recent}");
        let recent = recent["runs"].as_array().expect("runs").clone();
        assert!(!recent.is_empty() && recent.len() < all_ids.len() + 20);
        assert!(recent.iter().all(|r| r["started_at"].as_str().expect("time") >= since), "since {since}");
        let (_, hour) = get_json(port, "/api/v1/runs?limit=1000&since=1h");
        assert!(hour["runs"].as_array().expect("runs").len() >= all_ids.len());
        for (query, names) in [("since=yesterday", "since"), ("limit=0", "limit"), ("limit=1001", "limit"), ("status=bogus", "status"), ("cursor=x", "cursor")] {
            let (code, error) = get_json(port, &format!("/api/v1/runs?{query}"));
            assert_eq!(code, 400, "{query}: {error}");
            assert!(error["error"].as_str().is_some_and(|e| e.contains(names)), "{query}: {error}");
        }

        // runs/{id}: one run, with its output as the job printed it.
        let (_, html_runs) = get_json(port, "/api/v1/runs?job=html&status=succeeded&limit=1");
        let id = ids(&html_runs)[0];
        let (code, one) = get_json(port, &format!("/api/v1/runs/{id}"));
        assert_eq!(code, 200, "{one}");
        assert_eq!(one["output"], "<script>alert(1)</script><b>bold</b>\n");
        assert_eq!(get_json(port, "/api/v1/runs/99999999").0, 404);
        assert_eq!(get_json(port, "/api/v1/runs/x").0, 400);
        // The page shows it as text.
        let (code, _, page) = http(port, "GET", &format!("/runs/{id}"), &[], "");
        assert_eq!(code, 200);
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;"), "{page}");
        assert!(!page.contains("<script>alert") && !page.contains("<b>bold"), "{page}");

        // instances and notifications.
        let (code, instances) = get_json(port, "/api/v1/instances");
        assert_eq!(code, 200);
        let me = instances["instances"].as_array().expect("instances").iter().find(|i| i["id"] == "web-api").cloned().expect("this replica");
        assert_eq!(me["alive"], true, "{me}");
        assert!(me["clock_offset_seconds"].is_number() && me["drifted_jobs"] == serde_json::json!([]), "{me}");
        let (code, notifications) = get_json(port, "/api/v1/notifications");
        assert_eq!((code, notifications["instance"].as_str()), (200, Some("web-api")));
        assert!(notifications["notifications"].is_array());
        let (code, spec) = get_json(port, "/api/v1/openapi.json");
        assert_eq!(code, 200);
        assert!(spec["paths"]["/api/v1/runs"]["get"].is_object(), "{spec}");

        // Actions: the token, and nothing else.
        let bearer = format!("Bearer {TOKEN}");
        let json = ("Content-Type", "application/json");
        assert_eq!(post_json(port, "/api/v1/jobs/on-demand/pause", &[], "").0, 401);
        assert_eq!(post_json(port, "/api/v1/jobs/on-demand/pause", &[("Authorization", "Bearer wrong-token-wrong-token")], "").0, 401);
        assert_eq!(post_json(port, "/api/v1/jobs/on-demand/pause", &[("Cookie", "replicron_session=00")], "").0, 401);
        let (code, paused) = post_json(port, "/api/v1/jobs/on-demand/pause", &[("Authorization", &bearer), json], r#"{"reason": "maintenance", "until": "2h"}"#);
        assert_eq!(code, 200, "{paused}");
        let (code, status, _) = run(&config, &["status", "--format", "json"]);
        let status: Value = serde_json::from_str(&status).expect("status JSON");
        let row = status["jobs"].as_array().expect("jobs").iter().find(|j| j["job"] == "on-demand").cloned().expect("on-demand");
        assert_eq!(row["paused"]["reason"], "maintenance", "status exit {code}: {row}");
        assert_eq!(row["paused"]["by"], "token default@web-api", "{row}");
        let (_, job) = get_json(port, "/api/v1/jobs/on-demand");
        assert_eq!(job["paused"]["reason"], "maintenance", "{job}");
        // A paused job is triggered only with force.
        let (code, refused) = post_json(port, "/api/v1/jobs/on-demand/trigger", &[("Authorization", &bearer)], "");
        assert_eq!(code, 409, "{refused}");
        let (code, resumed) = post_json(port, "/api/v1/jobs/on-demand/resume", &[("Authorization", &bearer)], "");
        assert_eq!((code, resumed["message"].as_str()), (200, Some("on-demand: resumed")), "{resumed}");
        let (_, job) = get_json(port, "/api/v1/jobs/on-demand");
        assert!(job["paused"].is_null(), "{job}");
        let (code, triggered) = post_json(port, "/api/v1/jobs/on-demand/trigger", &[("Authorization", &bearer)], "");
        assert_eq!(code, 202, "{triggered}");
        wait_until("the triggered run", Duration::from_secs(20), || {
            let (_, runs) = get_json(port, "/api/v1/runs?job=on-demand");
            runs["runs"][0]["status"] == "succeeded"
        });
        let (code, unlocked) = post_json(port, "/api/v1/jobs/on-demand/unlock", &[("Authorization", &bearer)], "");
        assert_eq!(code, 200, "{unlocked}");
        assert_eq!(post_json(port, "/api/v1/jobs/nope/pause", &[("Authorization", &bearer)], "").0, 404);
        assert_eq!(post_json(port, "/api/v1/jobs/fine/explode", &[("Authorization", &bearer)], "").0, 404);
        let (code, bad) = post_json(port, "/api/v1/jobs/on-demand/pause", &[("Authorization", &bearer), json], r#"{"until": "someday"}"#);
        assert_eq!(code, 400, "{bad}");

        // Signing in: the token, and back to a page of this dashboard only.
        let form = ("Content-Type", "application/x-www-form-urlencoded");
        let (code, headers, _) = http(port, "POST", "/login", &[form], &format!("token={TOKEN}&next=%2Fjobs%2Ffine"));
        let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap_or_default();
        assert_eq!((code, header("location").as_str()), (303, "/jobs/fine"));
        assert!(header("set-cookie").contains("HttpOnly") && header("set-cookie").contains("SameSite=Strict"));
        for next in ["%2F%09%2Fevil.example", "%2F%2Fevil.example", "https%3A%2F%2Fevil.example", "%2F%5Cevil.example"] {
            let (code, headers, _) = http(port, "POST", "/login", &[form], &format!("token={TOKEN}&next={next}"));
            let location = headers.iter().find(|(n, _)| n == "location").map(|(_, v)| v.clone());
            assert_eq!((code, location.as_deref()), (303, Some("/")), "next={next}");
        }
        let (code, _, _) = http(port, "POST", "/login", &[form], "token=not-the-token");
        assert_eq!(code, 401);
        // A link cannot put words on a job's page; only an action's own
        // (signed) message shows.
        let (_, _, page) = http(port, "GET", "/jobs/fine?msg=Your+session+expired%3A+sign+in+at+evil.example&sig=00", &[], "");
        assert!(!page.contains("evil.example"), "{page}");
        // Only this host's names, on a loopback listener.
        let (code, _, _) = http(port, "GET", "/api/v1/jobs", &[("Host", "rebound.example:80")], "");
        assert_eq!(code, 421);

        // A second replica without a token: everything reads, no action.
        let read_only_port = free_port();
        let read_only = web_config(db, read_only_port, false);
        let other = Replica::start(&read_only, "web-read-only", None, &[]);
        other.wait_for_log("replicron started", Duration::from_secs(30));
        wait_until("the read-only listener", Duration::from_secs(10), || get_json(read_only_port, "/api/v1/jobs").0 == 200);
        for action in ["trigger", "pause", "resume", "unlock"] {
            let (code, refused) = post_json(read_only_port, &format!("/api/v1/jobs/on-demand/{action}"), &[("Authorization", &bearer)], "");
            assert_eq!(code, 403, "{action}: {refused}");
            let (code, _, _) = http(read_only_port, "POST", &format!("/jobs/on-demand/{action}"), &[("Content-Type", "application/x-www-form-urlencoded")], "csrf=x");
            assert_eq!(code, 403, "the form's {action}");
            let (code, _, _) = http(read_only_port, "POST", &format!("/jobs/on-demand/{action}?force=maybe"), &[], "");
            assert_eq!(code, 403, "{action}, however it is asked");
            let (code, _, _) = http(read_only_port, "POST", &format!("/api/v1/jobs/on-demand/{action}?force=maybe"), &[], "");
            assert_eq!(code, 403, "{action}, however it is asked");
        }
        let (_, job) = get_json(port, "/api/v1/jobs/on-demand");
        assert!(job["paused"].is_null(), "{job}");
        drop(other);
        drop(replica);
    }
}

/// 2,000 connections that send half a request head and wait, against a
/// replica limited to 1,024 descriptors: every per-second job keeps running
/// on time, connections past the listener's cap are answered 503 at once,
/// and the held ones are closed once their head is overdue.
#[cfg(feature = "sqlite")]
#[test]
fn half_open_connections_starve_neither_the_jobs_nor_the_listener() {
    let db = TestDb::sqlite();
    let port = free_port();
    let config = web_config(&db, port, false);
    let replica = Replica::start_with_nofile(&config, "held", &[], 1024);
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    let flood_from = chrono::Utc::now();
    let mut held = Vec::new();
    let mut refused_at_once = 0;
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut not_connected = 0;
    for _ in 0..2000 {
        // A listener that stopped accepting leaves its backlog full.
        let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200))
        else {
            not_connected += 1;
            continue;
        };
        let _ = stream.write_all(b"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        held.push(stream);
    }
    // Those past the cap were answered 503 and closed, without a head.
    for stream in &mut held {
        let _ = stream.set_nonblocking(true);
        let mut buffer = [0_u8; 64];
        if let Ok(n) = stream.read(&mut buffer)
            && n > 0
            && buffer.starts_with(b"HTTP/1.1 503")
        {
            refused_at_once += 1;
        }
        let _ = stream.set_nonblocking(false);
    }
    // A client with a whole request is answered at once meanwhile: 200,
    // or 503 while the listener is full.
    let answered =
        TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok_and(|mut stream| {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.write_all(
                b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            );
            let mut head = [0_u8; 12];
            stream.read_exact(&mut head).is_ok()
                && (head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.1 503"))
        });
    // Held past the head deadline (10 s), every connection is closed.
    std::thread::sleep(Duration::from_secs(12));
    let flood_to = chrono::Utc::now();
    let mut still_open = 0;
    for stream in &mut held {
        let _ = stream.set_read_timeout(Some(Duration::from_millis(20)));
        let mut buffer = [0_u8; 256];
        match stream.read(&mut buffer) {
            Ok(0) => {}
            Ok(_) => {
                // The 503 (or a 408) was unread: the end follows.
                if !matches!(stream.read(&mut buffer), Ok(0) | Err(_)) {
                    still_open += 1;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(_) => still_open += 1,
        }
    }
    drop(held);
    std::thread::sleep(Duration::from_secs(2));
    let log = replica.log_text();
    replica.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(!log.contains("Too many open files"), "{log}");
    // Every instant of the per-second jobs during the flood ran, on time.
    let mut late = Vec::new();
    let mut missing = Vec::new();
    for job in ["fine", "broken", "html"] {
        let page = crate::support::history_json(&config, job);
        let runs: Vec<(chrono::DateTime<chrono::Utc>, f64)> = page
            .iter()
            .filter(|r| r["status"] != "missed")
            .filter_map(|r| {
                let at = chrono::DateTime::parse_from_rfc3339(r["scheduled_at"].as_str()?).ok()?;
                let started =
                    chrono::DateTime::parse_from_rfc3339(r["started_at"].as_str()?).ok()?;
                Some((
                    at.with_timezone(&chrono::Utc),
                    (started - at).num_milliseconds() as f64,
                ))
            })
            .collect();
        let mut t =
            chrono::DurationRound::duration_trunc(flood_from, chrono::TimeDelta::seconds(1))
                .expect("truncate")
                + chrono::TimeDelta::seconds(1);
        while t < flood_to - chrono::TimeDelta::seconds(1) {
            match runs.iter().find(|(at, _)| *at == t) {
                None => missing.push(format!("{job} {t}")),
                // Starved: held back for seconds, not a loaded host's
                // lateness (which scripts/bench measures).
                Some((_, ms)) if *ms > 5000.0 => late.push(format!("{job} {t} {ms} ms")),
                Some(_) => {}
            }
            t += chrono::TimeDelta::seconds(1);
        }
    }
    eprintln!(
        "2000 half-open connections: {not_connected} not accepted, {refused_at_once} answered 503 at once, {still_open} still open after 12 s, a whole request answered: {answered}; \
         instants of 3 per-second jobs not run: {}, started over 5 s late: {}",
        missing.len(),
        late.len()
    );
    assert!(
        answered,
        "a whole request was not answered during the flood"
    );
    assert!(missing.is_empty(), "{missing:?}\n{log}");
    assert!(late.is_empty(), "{late:?}");
    assert!(refused_at_once > 1000, "{refused_at_once}");
    assert_eq!(still_open, 0);
}

/// The API's edges, each a finding of an audit: every error is JSON and
/// every answer `Cache-Control: no-store` (checked by [`http`] on each
/// request); replicron's own lease rows are not unlocked; a disabled job
/// is triggered only with force; a pause reason is bounded; parameters come
/// from the query string or a JSON object, never both, never an array.
#[cfg(feature = "sqlite")]
#[test]
fn the_api_refuses_what_it_should_not_do() {
    let db = TestDb::sqlite();
    let port = free_port();
    let config = db.config_named(
        "edges.toml",
        &db.url,
        &format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"fine\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n\n\
             [[job]]\nname = \"off\"\nschedule = \"@yearly\"\nenabled = false\ncommand = 'echo ran'\n\n\
             [[job]]\nname = \"hostile\"\nschedule = \"* * * * * *\"\ncommand = 'printf \"r1\\342\\200\\256lave \\033[31mred\\n\"'\n"
        ),
    );
    let replica = Replica::start(
        &config,
        "edges",
        None,
        &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)],
    );
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("Authorization", bearer.as_str())];
    let json = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let error = |(code, body): (u16, Value)| -> (u16, String) {
        let message = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{code}: not a JSON error: {body}"));
        (code, message.to_string())
    };

    for row in [
        "replicron.missed",
        "replicron.retention",
        "replicron.lock.db",
    ] {
        let (code, message) = error(post_json(
            port,
            &format!("/api/v1/jobs/{row}/unlock"),
            &auth,
            "",
        ));
        assert_eq!(code, 400, "{row}: {message}");
        assert!(message.contains("replicron's own lease rows"), "{message}");
    }

    let (code, message) = error(post_json(port, "/api/v1/jobs/off/trigger", &auth, ""));
    assert_eq!(code, 409, "{message}");
    assert!(message.contains("disabled"), "{message}");
    let (code, body) = post_json(port, "/api/v1/jobs/off/trigger?force=true", &auth, "");
    assert_eq!(code, 202, "{body}");

    let long = "x".repeat(501);
    let (code, message) = error(post_json(
        port,
        "/api/v1/jobs/fine/pause",
        &json,
        &serde_json::json!({ "reason": long }).to_string(),
    ));
    assert_eq!(code, 400, "{message}");
    assert!(message.contains("at most 500"), "{message}");
    let megabyte = serde_json::json!({ "reason": "x".repeat(200 << 10) }).to_string();
    let (code, _) = error(post_json(port, "/api/v1/jobs/fine/pause", &json, &megabyte));
    assert_eq!(code, 413);

    for body in ["[]", "[\"a reason\"]", "\"a reason\"", "null"] {
        let (code, message) = error(post_json(port, "/api/v1/jobs/fine/pause", &json, body));
        assert_eq!(code, 400, "{body}: {message}");
        assert!(message.contains("must be an object"), "{message}");
    }
    let (code, message) = error(post_json(
        port,
        "/api/v1/jobs/fine/pause?until=1h",
        &json,
        "{\"reason\": \"both\"}",
    ));
    assert_eq!(code, 400, "{message}");
    assert!(message.contains("one of the two"), "{message}");
    // None of those paused it.
    let (_, job) = get_json(port, "/api/v1/jobs/fine");
    assert!(job["paused"].is_null(), "{job}");

    // Errors that no handler of ours wrote are JSON too.
    let (code, _) = error(get_json(port, "/api/v1/runs?limit=1&limit=2"));
    assert_eq!(code, 400);
    let (code, _) = error(get_json(port, "/nowhere"));
    assert_eq!(code, 404);
    let (code, _, body) = http(port, "GET", "/api/v1/jobs/fine/pause", &[], "");
    assert_eq!(code, 405, "{body}");
    assert!(
        serde_json::from_str::<Value>(&body).is_ok_and(|b| b["error"].is_string()),
        "{body}"
    );
    let (code, _) = error(post_json(
        port,
        "/api/v1/jobs",
        &[("Host", "evil.example")],
        "",
    ));
    assert_eq!(code, 421);

    // Sign-out needs the dashboard's form: a cross-site one is refused.
    let (code, _, _) = http(
        port,
        "POST",
        "/logout",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        "",
    );
    assert_eq!(code, 403);

    // A bidirectional override in an output is shown, not obeyed, and an
    // escape sequence reaches the log written out.
    let mut id = None;
    wait_until("a run of hostile", Duration::from_secs(20), || {
        let (_, page) = get_json(port, "/api/v1/runs?job=hostile&status=succeeded&limit=1");
        id = page["runs"][0]["id"].as_i64();
        id.is_some()
    });
    let (code, _, page) = http(
        port,
        "GET",
        &format!("/runs/{}", id.unwrap_or_default()),
        &[],
        "",
    );
    assert_eq!(code, 200);
    assert!(page.contains("r1⟨U+202E⟩lave"), "{page}");
    assert!(!page.contains('\u{202E}'), "{page}");
    let log = replica.log_text();
    assert!(log.contains(r"r1\\u{202e}lave \\u{1b}[31mred"), "{log}");
    assert!(!log.contains(r"\u001b[31mred"), "{log}");
    drop(replica);
}

/// Signs in on `port` from its own origin: the session cookie (`name=value`).
pub(crate) fn sign_in(port: u16) -> String {
    sign_in_with(port, TOKEN)
}

/// [`sign_in`] with `token`.
fn sign_in_with(port: u16, token: &str) -> String {
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let (code, headers, body) = http(port, "POST", "/login", &[form], &format!("token={token}"));
    assert_eq!(code, 303, "{body}");
    let cookie = headers
        .iter()
        .find(|(n, _)| n == "set-cookie")
        .map(|(_, v)| v.split(';').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    assert!(cookie.starts_with("replicron_session="), "{headers:?}");
    cookie
}

/// The CSRF token of the page `/jobs/fine` as `cookie` sees it, if signed in.
fn csrf_of(port: u16, cookie: &str) -> Option<String> {
    let (code, _, page) = http(port, "GET", "/jobs/fine", &[("Cookie", cookie)], "");
    assert_eq!(code, 200, "{page}");
    page.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .filter(|csrf| !csrf.is_empty())
        .map(str::to_string)
}

/// Sessions live in the database and belong to their replica: a cookie of
/// one replica's is refused by another on the same host (browsers send it
/// to every port), each session has its own CSRF token, sign-out ends the
/// session on the server (a copy of the cookie is refused after it), and
/// the 20th wrong token in a second is throttled, logged and counted.
#[cfg(feature = "sqlite")]
#[test]
fn sessions_are_their_replicas_end_at_sign_out_and_sign_in_is_throttled() {
    let db = TestDb::sqlite();
    let [a, b] = free_ports::<2>();
    let env = [("REPLICRON_TEST_WEB_TOKEN", TOKEN)];
    let config_a = web_config(&db, a, true);
    let config_b = web_config(&db, b, true);
    let replica_a = Replica::start(&config_a, "session-a", None, &env);
    let replica_b = Replica::start(&config_b, "session-b", None, &env);
    replica_a.wait_for_log("replicron started", Duration::from_secs(30));
    replica_b.wait_for_log("replicron started", Duration::from_secs(30));
    let pause = |port: u16, cookie: &str, csrf: &str| {
        post_json(
            port,
            "/api/v1/jobs/fine/pause",
            &[("Cookie", cookie), ("X-CSRF-Token", csrf)],
            "",
        )
        .0
    };

    let first = sign_in(a);
    let csrf = csrf_of(a, &first).expect("signed in on its replica");
    // The same cookie on the other replica's port is no session there.
    assert_eq!(csrf_of(b, &first), None);
    assert_eq!(pause(b, &first, &csrf), 401);
    // A second session has a CSRF token of its own.
    let second = sign_in(a);
    let other_csrf = csrf_of(a, &second).expect("signed in");
    assert_ne!(csrf, other_csrf);
    assert_eq!(pause(a, &first, &other_csrf), 403);
    assert_eq!(pause(a, &first, &csrf), 200);
    assert_eq!(
        post_json(
            a,
            "/api/v1/jobs/fine/resume",
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            ""
        )
        .0,
        200
    );

    // Sign-out ends the session itself.
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let (code, _, _) = http(
        a,
        "POST",
        "/logout",
        &[form, ("Cookie", &first)],
        &format!("csrf={csrf}"),
    );
    assert_eq!(code, 303);
    assert_eq!(csrf_of(a, &first), None);
    assert_eq!(pause(a, &first, &csrf), 401);
    assert!(csrf_of(a, &second).is_some(), "the other session goes on");

    // Wrong tokens: a few are free, then each waits longer.
    let mut codes = Vec::new();
    for _ in 0..20 {
        let (code, _, _) = http(b, "POST", "/login", &[form], "token=not-the-token");
        codes.push(code);
    }
    assert_eq!(codes[0], 401, "{codes:?}");
    assert_eq!(codes[19], 429, "{codes:?}");
    // Throttled for the right token too, until the wait is over.
    let (code, headers, _) = http(b, "POST", "/login", &[form], &format!("token={TOKEN}"));
    assert_eq!(code, 429);
    assert!(
        headers.iter().any(|(n, _)| n == "retry-after"),
        "{headers:?}"
    );
    let (_, _, metrics) = http(b, "GET", "/metrics", &[], "");
    let count = |result: &str| -> f64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "replicron_web_sign_ins_total{{result=\"{result}\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1.0)
    };
    assert!(
        count("refused") >= 6.0 && count("throttled") >= 1.0,
        "{metrics}"
    );
    assert!(
        replica_b
            .log_text()
            .contains("sign-in refused: not the token")
    );
    drop(replica_a);
    drop(replica_b);
}

backend_test! {
    /// A session is bound to the value its token has now: once the token
    /// is changed, the replica restarted with the new one, the session is
    /// none (not acting as the token's name for the rest of its 12 hours),
    /// while a session signed in with the new value acts; sign-out ends it
    /// for every replica.
    fn a_session_ends_when_its_token_changes(db: &TestDb) {
        let port = free_port();
        let config = web_config(db, port, true);
        let start = |token: &str| {
            let replica = Replica::start(&config, "bound", None, &[("REPLICRON_TEST_WEB_TOKEN", token)]);
            replica.wait_for_log("replicron started", Duration::from_secs(30));
            replica
        };
        let pause = |cookie: &str, csrf: &str| {
            post_json(
                port,
                "/api/v1/jobs/on-demand/pause",
                &[("Cookie", cookie), ("X-CSRF-Token", csrf)],
                "",
            )
            .0
        };
        let replica = start(TOKEN);
        let old = sign_in(port);
        let csrf = csrf_of(port, &old).expect("signed in");
        assert_eq!(pause(&old, &csrf), 200);
        drop(replica);

        // The same token again: the session goes on.
        let replica = start(TOKEN);
        assert_eq!(csrf_of(port, &old).as_deref(), Some(csrf.as_str()));
        drop(replica);

        let rotated = "a-rotated-token-of-32-characters";
        let replica = start(rotated);
        assert_eq!(csrf_of(port, &old), None, "a session of the old token");
        assert_eq!(pause(&old, &csrf), 401);
        let form = ("Content-Type", "application/x-www-form-urlencoded");
        let new = sign_in_with(port, rotated);
        let new_csrf = csrf_of(port, &new).expect("signed in with the new token");
        assert_eq!(pause(&new, &new_csrf), 200);
        let (code, _, _) = http(
            port,
            "POST",
            "/logout",
            &[form, ("Cookie", &new)],
            &format!("csrf={new_csrf}"),
        );
        assert_eq!(code, 303);
        drop(replica);
        let _replica = start(rotated);
        assert_eq!(csrf_of(port, &new), None, "signed out");
    }
}
