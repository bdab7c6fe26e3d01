//! The timeline (`/timeline`, `/api/v1/timeline`) of two real replicas on
//! every backend: each job's lane, its runs with their status and the
//! replica that ran them, the dependency links from a parent's run to the
//! run it started, a pause over its lane with the upcoming instants it
//! covers, and the instants a calendar excludes.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, run, wait_until};
use crate::web::{free_port, get_json, http};

/// A lane of `/api/v1/timeline`'s answer.
pub(crate) fn lane<'a>(timeline: &'a Value, job: &str) -> &'a Value {
    timeline["lanes"]
        .as_array()
        .and_then(|lanes| lanes.iter().find(|l| l["job"] == job))
        .unwrap_or_else(|| panic!("no lane {job}: {timeline}"))
}

fn count(lane: &Value, key: &str, pick: impl Fn(&Value) -> bool) -> usize {
    lane[key]
        .as_array()
        .map_or(0, |items| items.iter().filter(|i| pick(i)).count())
}

/// Two replicas, `tl-a` serving on the port returned: `parent` every 2 s
/// (succeeds), `child` after it (fails), `holiday` every minute but not on
/// today's nor tomorrow's date, and `held`, paused for 30 minutes before
/// they start. Waits until the timeline shows runs of both and links.
pub(crate) fn timeline_fleet(db: &TestDb) -> (u16, PathBuf, Vec<Replica>) {
    db.migrate();
    let port = free_port();
    let today = chrono::Utc::now().date_naive();
    let tomorrow = today.succ_opt().expect("tomorrow");
    let jobs = |daemon: &str| {
        format!(
            "{daemon}[defaults]\nlock_at_most_for = \"20s\"\n\n\
             [[calendar]]\nname = \"closed\"\ndates = [\"{today}\", \"{tomorrow}\"]\n\n\
             [[job]]\nname = \"parent\"\nschedule = \"*/2 * * * * *\"\ncommand = 'true'\n\n\
             [[job]]\nname = \"child\"\nafter = [\"parent\"]\ncommand = 'exit 3'\n\n\
             [[job]]\nname = \"holiday\"\nschedule = \"0 * * * * *\"\nskip_on = [\"closed\"]\ncommand = 'true'\n\n\
             [[job]]\nname = \"held\"\nschedule = \"*/5 * * * * *\"\ncommand = 'true'\n"
        )
    };
    let config = db.config_named(
        "timeline-a.toml",
        &db.url,
        &jobs(&format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n"
        )),
    );
    let other = db.config_named("timeline-b.toml", &db.url, &jobs(""));
    let (code, out, err) = run(
        &config,
        &["pause", "held", "--until", "30m", "--reason", "maintenance"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let replicas = vec![
        Replica::start(&config, "tl-a", None, &[]),
        Replica::start(&other, "tl-b", None, &[]),
    ];
    replicas[0].wait_for_log("replicron started", Duration::from_secs(30));
    wait_until(
        "runs of parent and child, and their links",
        Duration::from_secs(60),
        || {
            let (code, timeline) = get_json(port, "/api/v1/timeline");
            code == 200
                && count(lane(&timeline, "parent"), "runs", |r| {
                    r["status"] == "succeeded"
                }) >= 4
                && count(lane(&timeline, "child"), "runs", |r| {
                    r["status"] == "failed"
                }) >= 2
                && timeline["links"].as_array().is_some_and(|l| l.len() >= 2)
        },
    );
    (port, config, replicas)
}

backend_test! {
    /// The API's timeline and the page's drawing agree with the history:
    /// runs by status and replica, links from the parent's run to the run
    /// it started, the pause and the instants it covers, the excluded
    /// instant; a span that is not offered is refused.
    fn the_timeline_shows_runs_pauses_exclusions_and_links(db: &TestDb) {
        let (port, _config, replicas) = timeline_fleet(db);
        let (code, timeline) = get_json(port, "/api/v1/timeline");
        assert_eq!(code, 200, "{timeline}");
        assert_eq!(timeline["window"], "1h");
        let jobs: Vec<&str> = timeline["lanes"]
            .as_array()
            .expect("lanes")
            .iter()
            .map(|l| l["job"].as_str().expect("job"))
            .collect();
        assert_eq!(jobs, ["parent", "child", "holiday", "held"]);

        let parent = lane(&timeline, "parent");
        let child = lane(&timeline, "child");
        // Every run names the replica that ran it, one of the two.
        for run in parent["runs"].as_array().expect("runs").iter().chain(child["runs"].as_array().expect("runs")) {
            assert!(["tl-a", "tl-b"].contains(&run["replica"].as_str().expect("replica")), "{run}");
        }
        let replicas_counted: u64 = timeline["replicas"]
            .as_object()
            .expect("replicas")
            .values()
            .map(|n| n.as_u64().expect("a count"))
            .sum();
        assert!(replicas_counted >= 6, "{timeline}");
        // Each link goes from a parent's run to the child's run it started,
        // with the same instant.
        let run_of = |lane: &Value, id: &Value| -> Value {
            lane["runs"]
                .as_array()
                .and_then(|runs| runs.iter().find(|r| r["id"] == *id))
                .cloned()
                .unwrap_or(Value::Null)
        };
        for link in timeline["links"].as_array().expect("links") {
            assert_eq!(link["parent_job"], "parent", "{link}");
            assert_eq!(link["job"], "child", "{link}");
            let (p, c) = (run_of(parent, &link["parent_run"]), run_of(child, &link["run"]));
            assert_eq!(p["scheduled_at"], c["scheduled_at"], "{link}");
            assert_eq!(c["triggered_by"], "dependency", "{c}");
        }
        assert!(count(parent, "upcoming", |u| u["state"] == "due") > 0, "{parent}");
        assert_eq!(parent["upcoming_truncated"], true, "every 2 s for an hour: more than listed");
        assert_eq!(child["note"], "after its parents");
        assert_eq!(count(child, "upcoming", |_| true), 0);

        let holiday = lane(&timeline, "holiday");
        let excluded: Vec<&Value> = holiday["upcoming"]
            .as_array()
            .expect("upcoming")
            .iter()
            .filter(|u| u["state"] == "excluded")
            .collect();
        assert!(!excluded.is_empty(), "{holiday}");
        assert!(excluded[0]["reason"].as_str().unwrap_or("").contains("skip_on calendar \"closed\""), "{holiday}");
        assert_eq!(count(holiday, "upcoming", |u| u["state"] == "due"), 0, "{holiday}");
        assert_eq!(count(holiday, "runs", |_| true), 0, "{holiday}");

        let held = lane(&timeline, "held");
        assert_eq!(count(held, "pauses", |_| true), 1, "{held}");
        assert!(held["pauses"][0]["until"].is_string(), "{held}");
        assert!(count(held, "upcoming", |_| true) > 0, "{held}");
        assert_eq!(
            count(held, "upcoming", |u| u["state"] == "paused"),
            count(held, "upcoming", |_| true),
            "{held}"
        );
        assert_eq!(count(held, "runs", |_| true), 0, "{held}");

        // The answer has what the OpenAPI document says it has.
        let (code, spec) = get_json(port, "/api/v1/openapi.json");
        assert_eq!(code, 200);
        assert!(spec["paths"]["/api/v1/timeline"]["get"].is_object(), "{spec}");
        let schemas = &spec["components"]["schemas"];
        for (schema, value) in [
            ("Timeline", &timeline),
            ("TimelineLane", parent),
            ("TimelineRun", &parent["runs"][0]),
            ("TimelineInstant", &holiday["upcoming"][0]),
            ("TimelineLink", &timeline["links"][0]),
        ] {
            let mut required: Vec<&str> = schemas[schema]["required"]
                .as_array()
                .expect("required")
                .iter()
                .map(|k| k.as_str().expect("a key"))
                .collect();
            let mut keys: Vec<&str> = value.as_object().expect("an object").keys().map(String::as_str).collect();
            required.sort_unstable();
            keys.sort_unstable();
            assert_eq!(keys, required, "{schema}: {value}");
        }

        // Only one replica's runs.
        let (code, only_a) = get_json(port, "/api/v1/timeline?window=6h&replica=tl-a");
        assert_eq!(code, 200, "{only_a}");
        assert_eq!(only_a["window"], "6h");
        assert!(lane(&only_a, "parent")["runs"].as_array().expect("runs").iter().all(|r| r["replica"] == "tl-a"));
        let (code, refused) = get_json(port, "/api/v1/timeline?window=2y");
        assert_eq!(code, 400, "{refused}");
        assert!(refused["error"].as_str().unwrap_or("").contains("15m, 1h, 6h, 24h"), "{refused}");

        // The page: linked from the header, a lane per job, the marks.
        let (code, _, overview) = http(port, "GET", "/", &[], "");
        assert_eq!(code, 200);
        assert!(overview.contains("href=\"/timeline\""), "no link to the timeline");
        let (code, _, page) = http(port, "GET", "/timeline", &[], "");
        assert_eq!(code, 200, "{page}");
        assert_eq!(page.matches("class=\"tl-lane\"").count(), 4, "{page}");
        for needle in [
            "class=\"tl-run s-succeeded\"",
            "class=\"tl-run s-failed\"",
            "class=\"tl-pause\"",
            "class=\"tl-excluded\"",
            "class=\"tl-next tl-next-paused\"",
            "class=\"tl-next\"",
            "class=\"tl-dep\"",
            "class=\"tl-now\"",
            "id=\"timeline-text\"",
        ] {
            assert!(page.contains(needle), "no {needle} on the page");
        }
        let (code, _, bad) = http(port, "GET", "/timeline?window=2y", &[], "");
        assert_eq!(code, 400, "{bad}");
        drop(replicas);
    }
}
