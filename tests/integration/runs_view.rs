//! The runs view (`/runs`, `/api/v1/runs`) and a job's figures, on every
//! backend, over runs written straight into the history: each filter, each
//! sort, pages that stay put while runs are recorded, parameters refused
//! by name, and figures that come out as computed by hand.

use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use diesel::connection::SimpleConnection;
use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, wait_until};
use crate::web::{free_port, get_json, http};

/// A time as a statement's literal, as the daemon writes it.
fn at(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

/// One row of `replicron_runs`, as VALUES.
#[expect(clippy::too_many_arguments, reason = "one row's columns")]
fn row(
    job: &str,
    scheduled: &str,
    attempt: i32,
    instance: &str,
    started: &str,
    finished: Option<&str>,
    status: &str,
    trigger: &str,
) -> String {
    let finished = finished.map_or("NULL".to_string(), |f| format!("'{f}'"));
    format!(
        "('{job}', '{scheduled}', {attempt}, '{instance}', 1, '{started}', {finished}, '{status}', '', '{trigger}')"
    )
}

fn insert(db: &TestDb, rows: &[String]) {
    let mut conn = db.raw();
    for row in rows {
        conn.batch_execute(&format!(
            "INSERT INTO replicron_runs (job, scheduled_at, attempt, instance, fence, started_at, finished_at, status, output, triggered_by) VALUES {row}"
        ))
        .expect("insert a run");
    }
}

/// A replica serving the dashboard on a free port, with one job that
/// never runs by itself (`fig`, disabled, every 10 minutes).
fn serve(db: &TestDb) -> (Replica, u16) {
    let port = free_port();
    let config = db.config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
         [[job]]\nname = \"fig\"\nschedule = \"*/10 * * * *\"\ncommand = 'true'\nenabled = false\n"
    ));
    let replica = Replica::start(&config, "runs-view", None, &[]);
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    wait_until("the listener", Duration::from_secs(30), || {
        get_json(port, "/healthz").0 == 200
    });
    (replica, port)
}

fn ids(page: &Value) -> Vec<i64> {
    page["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("runs: {page}"))
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect()
}

fn query(port: u16, q: &str) -> Vec<i64> {
    let (code, page) = get_json(port, &format!("/api/v1/runs?{q}"));
    assert_eq!(code, 200, "{q}: {page}");
    ids(&page)
}

/// Every page of `q`, pages of `limit`, with `between` run after the first.
fn walk(port: u16, q: &str, limit: usize, mut between: impl FnMut()) -> Vec<i64> {
    let mut walked = Vec::new();
    let mut path = format!("/api/v1/runs?{q}&limit={limit}");
    loop {
        let (code, page) = get_json(port, &path);
        assert_eq!(code, 200, "{path}: {page}");
        walked.extend(ids(&page));
        between();
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/v1/runs?{q}&limit={limit}&cursor={cursor}"),
            None => return walked,
        }
        assert!(walked.len() < 100, "the walk ends");
    }
}

backend_test! {
    fn the_runs_view_filters_sorts_and_pages(db: &TestDb) {
        db.migrate();
        insert(db, &[
            row("qa", "2026-01-01 00:00:00.000", 1, "r1", "2026-01-01 00:00:01.000", Some("2026-01-01 00:00:03.000"), "succeeded", "schedule"),
            row("qa", "2026-01-01 00:01:00.000", 1, "r2", "2026-01-01 00:01:01.000", Some("2026-01-01 00:01:11.000"), "failed", "schedule"),
            row("qb", "2026-01-01 00:02:00.000", 1, "r1", "2026-01-01 00:02:01.000", Some("2026-01-01 00:02:02.000"), "succeeded", "manual"),
            row("qb", "2026-01-01 00:03:00.000", 0, "r2", "2026-01-01 00:03:00.000", Some("2026-01-01 00:03:00.000"), "missed", "schedule"),
            row("qc", "2026-01-01 00:04:00.000", 1, "r1", "2026-01-01 00:04:01.000", None, "running", "backfill"),
            row("qa", "2026-01-01 00:01:00.000", 2, "r2", "2026-01-01 00:05:00.000", Some("2026-01-01 00:05:05.000"), "succeeded", "retry"),
        ]);
        let (replica, port) = serve(db);
        let q = |q: &str| query(port, q);
        assert_eq!(q(""), [6, 5, 4, 3, 2, 1], "newest start first");
        assert_eq!(q("job=qa"), [6, 2, 1]);
        assert_eq!(q("job=qa&job=qb"), [6, 4, 3, 2, 1]);
        assert_eq!(q("status=failed,missed"), [4, 2]);
        assert_eq!(q("status=failed&status=missed&job=qb"), [4]);
        assert_eq!(q("replica=r1"), [5, 3, 1]);
        assert_eq!(q("trigger=manual&trigger=backfill"), [5, 3]);
        assert_eq!(q("from=2026-01-01T00:02:00Z&to=2026-01-01T00:04:01Z"), [4, 3], "from included, to not");
        assert_eq!(q("since=2026-01-01T00:04:01Z"), [6, 5]);
        assert_eq!(q("instant=2026-01-01T00:01:00Z"), [6, 2]);
        assert_eq!(q("sort=started"), [1, 2, 3, 4, 5, 6]);
        assert_eq!(q("sort=scheduled"), [1, 2, 6, 3, 4, 5]);
        assert_eq!(q("sort=-scheduled"), [5, 4, 3, 6, 2, 1]);
        let every = "job=qa&job=qb&job=qc";
        assert_eq!(q(&format!("sort=duration&{every}")), [5, 4, 3, 1, 6, 2], "a running run has no duration yet");
        assert_eq!(q(&format!("sort=-duration&{every}")), [2, 6, 1, 3, 4, 5]);

        // Pages stay put while runs are recorded: a page's cursor holds its
        // last row's sort key and id, and newer runs sort before it.
        let mut added = false;
        let walked = walk(port, "", 2, || {
            if !added {
                added = true;
                insert(db, &[row("qa", "2026-01-01 00:06:00.000", 1, "r1", "2026-01-01 00:06:01.000", Some("2026-01-01 00:06:02.000"), "succeeded", "schedule")]);
            }
        });
        assert_eq!(walked, [6, 5, 4, 3, 2, 1]);
        assert_eq!(q("limit=1"), [7], "the run recorded meanwhile is the newest");
        for sort in ["duration", "-duration", "scheduled", "-scheduled", "started"] {
            let all = q(&format!("sort={sort}&job=qa&job=qb&job=qc"));
            for limit in [1, 2, 4] {
                assert_eq!(walk(port, &format!("sort={sort}&job=qa&job=qb&job=qc"), limit, || {}), all, "sort={sort}, pages of {limit}");
            }
        }

        // Every parameter is checked, and a bad one named, in a 400.
        for (bad, named) in [
            ("status=done", "status="), ("trigger=cron", "trigger="), ("from=yesterday", "from="),
            ("to=2026-13-01", "to="), ("instant=soon", "instant="), ("sort=name", "sort="),
            ("limit=0", "limit="), ("limit=5000", "limit="), ("cursor=x", "cursor="),
            ("sort=duration&job=qa&cursor=-started_1_1", "cursor="), ("colour=red", "colour"),
            ("sort=-duration", "sort=duration needs a job"),
            ("limit=1&limit=2", "limit"),
        ] {
            let (code, body) = get_json(port, &format!("/api/v1/runs?{bad}"));
            assert_eq!(code, 400, "{bad}: {body}");
            let error = body["error"].as_str().unwrap_or_default();
            assert!(error.contains(named), "{bad}: {error}");
            let (code, _, page) = http(port, "GET", &format!("/runs?{bad}"), &[], "");
            assert_eq!(code, 400, "/runs?{bad}");
            assert!(page.contains("id=\"error\""), "/runs?{bad}: {page}");
        }

        // The page: the same query, its rows, and a link to its next page.
        let (code, _, page) = http(port, "GET", "/runs?job=qa&status=failed&status=succeeded&limit=2", &[], "");
        assert_eq!(code, 200, "{page}");
        assert!(page.contains("href=\"/runs/7\"") && page.contains("href=\"/runs/6\""), "{page}");
        assert!(!page.contains("href=\"/runs/2\""), "one page of two: {page}");
        let next = page
            .split("id=\"next-page\"")
            .next()
            .and_then(|before| before.rsplit("href=\"").next())
            .and_then(|href| href.split('"').next())
            .expect("a next page link")
            .replace("&amp;", "&");
        assert!(next.starts_with("/runs?job=qa&status=failed&status=succeeded&limit=2&cursor="), "{next}");
        let (code, _, second) = http(port, "GET", &next, &[], "");
        assert_eq!(code, 200);
        assert!(second.contains("href=\"/runs/2\"") && second.contains("href=\"/runs/1\""), "{second}");
        assert!(page.contains("<label for=\"f-job\">"), "the form's fields are labelled");
        drop(replica);
    }
}

backend_test! {
    fn a_jobs_figures_are_its_windows_runs(db: &TestDb) {
        db.migrate();
        // Instants every 10 minutes ending 10 minutes before now: runs of
        // the first 100, late by 10 ms to 1 s and lasting 1 s to 100 s
        // (the first failed); a manual run of the 101st lasting 25 minutes,
        // over the next two instants, which have no row (overruns); the
        // 104th missed.
        let now = Utc::now();
        let last = now.duration_trunc(TimeDelta::minutes(10)).expect("trunc") - TimeDelta::minutes(10);
        let instant = |k: i64| last - TimeDelta::minutes(10 * (103 - k));
        let mut rows = Vec::new();
        for k in 0..100 {
            let start = instant(k) + TimeDelta::milliseconds(10 * (k + 1));
            let end = start + TimeDelta::seconds(k + 1);
            let status = if k == 0 { "failed" } else { "succeeded" };
            rows.push(row("fig", &at(instant(k)), 1, "r1", &at(start), Some(&at(end)), status, "schedule"));
        }
        rows.push(row("fig", &at(instant(100)), 1, "r1", &at(instant(100)), Some(&at(instant(100) + TimeDelta::minutes(25))), "succeeded", "manual"));
        rows.push(row("fig", &at(instant(103)), 0, "r1", &at(instant(103)), Some(&at(instant(103))), "missed", "schedule"));
        // Another job's runs, and this job's older than the window, count not.
        rows.push(row("other", &at(instant(5)), 1, "r1", &at(instant(5)), Some(&at(instant(5))), "failed", "schedule"));
        rows.push(row("fig", &at(now - TimeDelta::days(3)), 1, "r1", &at(now - TimeDelta::days(3)), Some(&at(now - TimeDelta::days(3))), "failed", "schedule"));
        insert(db, &rows);
        let (replica, port) = serve(db);

        let (code, job) = get_json(port, "/api/v1/jobs/fig");
        assert_eq!(code, 200, "{job}");
        let f = &job["figures"];
        assert_eq!(f["window"], "24h", "{f}");
        assert_eq!(f["runs"], 101, "{f}");
        assert_eq!(f["succeeded"], 100, "{f}");
        assert_eq!(f["failed"], 1, "{f}");
        assert_eq!(f["misses"], 1, "{f}");
        assert_eq!(f["overruns"], 2, "{f}");
        let close = |key: &str, want: f64| {
            let got = f[key].as_f64().unwrap_or_else(|| panic!("{key}: {f}"));
            assert!((got - want).abs() < 0.0005, "{key}: {got}, not {want}: {f}");
        };
        close("success_rate", 100.0 / 101.0);
        close("lateness_p50_seconds", 0.50);
        close("lateness_p99_seconds", 0.99);
        // 101 durations: 1 s to 100 s, and 1500 s.
        close("duration_p50_seconds", 51.0);
        close("duration_p99_seconds", 100.0);
        assert_eq!(f["sample_complete"], true, "{f}");

        // Over 30 days, the older run counts too; over an hour, none.
        let (_, month) = get_json(port, "/api/v1/jobs/fig?window=30d");
        assert_eq!(month["figures"]["failed"], 2, "{month}");
        let (_, hour) = get_json(port, "/api/v1/jobs/fig?window=1h");
        assert!(hour["figures"]["runs"].as_i64().is_some_and(|n| n <= 6), "{hour}");
        let (code, bad) = get_json(port, "/api/v1/jobs/fig?window=2w");
        assert_eq!(code, 400, "{bad}");
        assert!(bad["error"].as_str().is_some_and(|e| e.contains("window")), "{bad}");

        // The job's page shows them, and its charts with their names.
        let (code, _, page) = http(port, "GET", "/jobs/fig?window=24h", &[], "");
        assert_eq!(code, 200);
        assert!(page.contains("id=\"fig-success\">99.0 %"), "{page}");
        assert!(page.contains("id=\"chart-duration\""), "{page}");
        assert!(page.contains("<title>Longest duration per bar"), "{page}");
        assert_eq!(http(port, "GET", "/jobs/fig?window=2w", &[], "").0, 400);

        // The overview lists the failures and the miss of the last 24 h,
        // newest first: the miss links to its instant's runs, a failure to
        // its run.
        let (code, _, overview) = http(port, "GET", "/", &[], "");
        assert_eq!(code, 200);
        let failures = overview.split("id=\"failures\"").nth(1).expect("the failures").split("</table>").next().unwrap_or_default();
        let instant_link = format!("/runs?job=fig&amp;instant={}", instant(103).to_rfc3339_opts(chrono::SecondsFormat::Millis, true).replace(':', "%3A"));
        assert!(failures.contains(&instant_link), "{instant_link} in {failures}");
        assert!(failures.contains("href=\"/runs/1\""), "{failures}");
        assert!(failures.contains("href=\"/jobs/other\""), "{failures}");
        assert!(failures.find(&instant_link) < failures.find("href=\"/runs/1\""), "newest first: {failures}");
        let (code, _, instant_page) = http(port, "GET", &instant_link.replace("&amp;", "&"), &[], "");
        assert_eq!(code, 200);
        assert!(instant_page.contains("data-status=\"missed\""), "{instant_page}");
        drop(replica);
    }
}
