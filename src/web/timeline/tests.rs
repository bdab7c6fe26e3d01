//! The timeline's data, from a job file and rows made here: the upcoming
//! instants as the schedule and the pauses decide them, the runs, their
//! groups when dense, the replicas and the dependency links; and the
//! drawing's marks.

use std::collections::HashMap;
use std::path::Path;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};

use super::*;
use crate::config::{Config, Environment};

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("a test time")
        .with_timezone(&Utc)
}

fn naive(text: &str) -> NaiveDateTime {
    at(text).naive_utc()
}

const NOW: &str = "2026-11-27T12:00:00Z";

fn config() -> Config {
    let text = "[database]\nurl = \"sqlite:///tmp/replicron-test.db\"\n\n\
        [[calendar]]\nname = \"holidays\"\ndates = [\"2026-11-27\"]\n\n\
        [[job]]\nname = \"tick\"\nschedule = \"*/10 * * * *\"\ncommand = \"true\"\n\n\
        [[job]]\nname = \"holiday\"\nschedule = \"*/20 * * * *\"\nskip_on = [\"holidays\"]\ncommand = \"true\"\n\n\
        [[job]]\nname = \"paused\"\nschedule = \"*/15 * * * *\"\ncommand = \"true\"\n\n\
        [[job]]\nname = \"windowed\"\nschedule = \"*/30 * * * *\"\nnot_after = \"2026-11-27T12:45:00Z\"\ncommand = \"true\"\n\n\
        [[job]]\nname = \"child\"\nafter = [\"tick\"]\ncommand = \"true\"\n\n\
        [[job]]\nname = \"off\"\nschedule = \"* * * * *\"\nenabled = false\ncommand = \"true\"\n";
    Config::parse(Path::new("jobs.toml"), text, &Environment::default()).expect("a valid file")
}

fn run(id: i64, job: &str, started: &str, status: RunStatus, replica: &str) -> RunBrief {
    let started = naive(started);
    RunBrief {
        id,
        job: job.to_string(),
        scheduled_at: started,
        attempt: 1,
        instance: replica.to_string(),
        fence: id,
        started_at: started,
        finished_at: (status != RunStatus::Running).then(|| started + TimeDelta::seconds(20)),
        status,
        exit_code: None,
        confirmed_at: None,
        once_key: None,
        triggered_by: if job == "child" {
            Trigger::Dependency
        } else {
            Trigger::Schedule
        },
        params: None,
        output_file: None,
    }
}

fn window() -> (&'static str, TimeDelta) {
    TimelineQuery::default()
        .window()
        .expect("the default window")
}

fn timeline(
    runs: Vec<RunBrief>,
    parents: HashMap<i64, Vec<i64>>,
    pauses: Vec<(String, NaiveDateTime, NaiveDateTime)>,
    replica: Option<&str>,
) -> Timeline {
    build(
        &config(),
        window(),
        at(NOW),
        replica.map(str::to_string),
        Read {
            runs,
            runs_truncated: false,
            parents,
            pauses,
        },
    )
}

fn lane<'a>(t: &'a Timeline, job: &str) -> &'a Lane {
    t.lanes
        .iter()
        .find(|l| l.job == job)
        .unwrap_or_else(|| panic!("no lane {job}"))
}

fn states(lane: &Lane) -> Vec<(String, &'static str)> {
    lane.upcoming
        .iter()
        .map(|u| (u.instant.clone(), u.state))
        .collect()
}

fn due(instants: &[&str]) -> Vec<(String, &'static str)> {
    instants.iter().map(|i| (i.to_string(), "due")).collect()
}

#[test]
fn the_window_is_one_of_the_spans() {
    assert_eq!(window(), ("1h", TimeDelta::hours(1)));
    let asked = |w: &str| {
        TimelineQuery {
            window: Some(w.to_string()),
            replica: None,
        }
        .window()
    };
    assert_eq!(asked("24h"), Ok(("24h", TimeDelta::hours(24))));
    let bad = asked("2y").expect_err("2y");
    assert!(bad.contains("15m, 1h, 6h, 24h"), "{bad}");
}

/// The upcoming instants are the schedule's up to the window's end; a
/// calendar's date shows its first instant excluded; the window's end
/// shows the first instant after it excluded; a pause covers
/// `paused_at <= t < paused_until`; a dependent, disabled job has none.
#[test]
fn upcoming_instants_honour_calendars_windows_and_pauses() {
    let pauses = vec![(
        "paused".to_string(),
        naive("2026-11-27T11:30:00Z"),
        naive("2026-11-27T12:30:00Z"),
    )];
    let t = timeline(Vec::new(), HashMap::new(), pauses, None);
    assert_eq!(t.now, "2026-11-27T12:00:00.000Z");
    assert_eq!(t.from, "2026-11-27T11:00:00.000Z");
    assert_eq!(t.to, "2026-11-27T13:00:00.000Z");
    assert_eq!(
        states(lane(&t, "tick")),
        due(&[
            "2026-11-27T12:10:00.000Z",
            "2026-11-27T12:20:00.000Z",
            "2026-11-27T12:30:00.000Z",
            "2026-11-27T12:40:00.000Z",
            "2026-11-27T12:50:00.000Z",
            "2026-11-27T13:00:00.000Z",
        ])
    );
    let holiday = lane(&t, "holiday");
    assert_eq!(
        states(holiday),
        vec![("2026-11-27T12:20:00.000Z".to_string(), "excluded")]
    );
    let reason = holiday.upcoming[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("skip_on calendar \"holidays\""), "{reason}");
    // 12:30 is the pause's end: not covered.
    assert_eq!(
        states(lane(&t, "paused")),
        vec![
            ("2026-11-27T12:15:00.000Z".to_string(), "paused"),
            ("2026-11-27T12:30:00.000Z".to_string(), "due"),
            ("2026-11-27T12:45:00.000Z".to_string(), "due"),
            ("2026-11-27T13:00:00.000Z".to_string(), "due"),
        ]
    );
    assert_eq!(lane(&t, "paused").pauses.len(), 1);
    assert_eq!(
        lane(&t, "paused").pauses[0].until.as_deref(),
        Some("2026-11-27T12:30:00.000Z")
    );
    assert_eq!(
        states(lane(&t, "windowed")),
        vec![
            ("2026-11-27T12:30:00.000Z".to_string(), "due"),
            ("2026-11-27T13:00:00.000Z".to_string(), "excluded"),
        ]
    );
    for (job, note) in [("child", "after its parents"), ("off", "disabled")] {
        assert!(lane(&t, job).upcoming.is_empty(), "{job}");
        assert_eq!(lane(&t, job).note, Some(note));
    }
    assert_eq!(lane(&t, "tick").note, None);
}

/// A pause until resumed covers every instant from its start.
#[test]
fn a_pause_until_resumed_covers_every_upcoming_instant() {
    let pauses = vec![(
        "tick".to_string(),
        naive("2026-11-27T12:05:00Z"),
        crate::db::clock::far_future(),
    )];
    let t = timeline(Vec::new(), HashMap::new(), pauses, None);
    let tick = lane(&t, "tick");
    assert!(!tick.upcoming.is_empty());
    assert!(tick.upcoming.iter().all(|u| u.state == "paused"));
    assert_eq!(tick.pauses[0].until, None);
    let reason = tick.upcoming[0].reason.clone().unwrap_or_default();
    assert!(reason.ends_with("until resumed"), "{reason}");
}

/// Runs sit in their job's lane with their replica; a dependent run is
/// linked to the parent's run that started it, when both are shown; a job
/// only the history names has a lane of its own; the replica filter keeps
/// that replica's runs and still counts every replica.
#[test]
fn runs_replicas_and_dependency_links() {
    let runs = vec![
        run(5, "child", "2026-11-27T11:50:30Z", RunStatus::Failed, "b"),
        run(4, "tick", "2026-11-27T11:50:00Z", RunStatus::Succeeded, "a"),
        run(
            3,
            "child",
            "2026-11-27T11:40:30Z",
            RunStatus::Succeeded,
            "a",
        ),
        run(2, "tick", "2026-11-27T11:40:00Z", RunStatus::Succeeded, "b"),
        run(1, "gone", "2026-11-27T11:30:00Z", RunStatus::Running, "a"),
    ];
    // Run 3's parent is older than the window.
    let parents = HashMap::from([(5, vec![4]), (3, vec![99])]);
    let t = timeline(runs.clone(), parents.clone(), Vec::new(), None);
    let ids = |job: &str| lane(&t, job).runs.iter().map(|m| m.id).collect::<Vec<_>>();
    assert_eq!(ids("tick"), vec![2, 4]);
    assert_eq!(ids("child"), vec![3, 5]);
    assert_eq!(lane(&t, "tick").runs[0].replica, "b");
    let gone = lane(&t, "gone");
    assert!(!gone.in_config);
    assert_eq!(gone.runs[0].status, RunStatus::Running);
    assert_eq!(t.lanes.last().map(|l| l.job.as_str()), Some("gone"));
    assert_eq!(t.links.len(), 1, "{:?}", t.links);
    let link = &t.links[0];
    assert_eq!(
        (
            link.parent_run,
            link.parent_job.as_str(),
            link.run,
            link.job.as_str()
        ),
        (4, "tick", 5, "child")
    );
    assert_eq!(
        t.replicas,
        BTreeMap::from([("a".into(), 3), ("b".into(), 2)])
    );

    let only_a = timeline(runs, parents, Vec::new(), Some("a"));
    assert_eq!(
        lane(&only_a, "tick")
            .runs
            .iter()
            .map(|m| m.id)
            .collect::<Vec<_>>(),
        vec![4]
    );
    assert!(only_a.links.is_empty(), "run 5 ran on b");
    assert_eq!(only_a.replicas.len(), 2);
}

/// More runs in a lane than it shows one by one: they are grouped by span
/// of time, every run counted once, each group coloured by its worst.
#[test]
fn a_dense_lane_is_grouped() {
    let start = at("2026-11-27T11:00:00Z");
    let runs: Vec<RunBrief> = (0..3600_i64)
        .map(|i| {
            let started = start + TimeDelta::seconds(i);
            let status = if i == 1000 {
                RunStatus::Failed
            } else {
                RunStatus::Succeeded
            };
            run(
                i + 1,
                "tick",
                &fmt_instant(started),
                status,
                if i % 2 == 0 { "a" } else { "b" },
            )
        })
        .collect();
    let t = timeline(runs, HashMap::new(), Vec::new(), None);
    let tick = lane(&t, "tick");
    assert!(tick.runs.is_empty());
    assert_eq!(tick.groups.len() as i64, BUCKETS);
    assert_eq!(tick.groups.iter().map(|g| g.runs).sum::<usize>(), 3600);
    let failed: Vec<&Group> = tick
        .groups
        .iter()
        .filter(|g| g.worst == RunStatus::Failed)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].statuses.get("failed"), Some(&1));
    assert!(failed[0].replicas.contains("a") && failed[0].replicas.contains("b"));
    // The drawing has a mark per group, not per run.
    let page = render(&t).into_string();
    assert_eq!(page.matches("class=\"tl-group ").count(), BUCKETS as usize);
    let drawing = page.split("id=\"timeline\"").nth(1).expect("the drawing");
    assert!(!drawing.contains("class=\"tl-run "));
}

/// The drawing: a lane per job whose label links to it, a mark per run
/// with its status's class and a title naming job, instant, status and
/// replica, the pause, the excluded and upcoming instants, the dependency
/// link and now; no link inside a link, no script, no inline style.
#[test]
fn the_drawing_has_every_mark() {
    let runs = vec![
        run(5, "child", "2026-11-27T11:50:30Z", RunStatus::Failed, "b"),
        run(4, "tick", "2026-11-27T11:50:00Z", RunStatus::Succeeded, "a"),
    ];
    let pauses = vec![(
        "paused".to_string(),
        naive("2026-11-27T11:30:00Z"),
        naive("2026-11-27T12:30:00Z"),
    )];
    let t = timeline(runs, HashMap::from([(5, vec![4])]), pauses, None);
    let page = render(&t).into_string();
    assert_eq!(page.matches("class=\"tl-lane\"").count(), 6);
    for job in ["tick", "holiday", "paused", "windowed", "child", "off"] {
        assert!(page.contains(&format!("href=\"/jobs/{job}\"")), "{job}");
    }
    assert!(
        page.contains("class=\"tl-run s-succeeded\" data-run=\"4\" data-replica=\"a\""),
        "{page}"
    );
    assert!(
        page.contains("class=\"tl-run s-failed\" data-run=\"5\" data-replica=\"b\""),
        "{page}"
    );
    assert!(
        page.contains("<title>tick: run 4 of instant 2026-11-27T11:50:00.000Z, succeeded, on a"),
        "{page}"
    );
    assert_eq!(
        page.matches("class=\"tl-pause\"").count(),
        1 + 1,
        "the lane's and the legend's"
    );
    assert!(page.contains("class=\"tl-excluded\" data-instant=\"2026-11-27T12:20:00.000Z\""));
    assert!(
        page.contains("class=\"tl-next tl-next-paused\" data-instant=\"2026-11-27T12:15:00.000Z\"")
    );
    assert!(page.contains("class=\"tl-next\" data-instant=\"2026-11-27T12:10:00.000Z\""));
    assert!(page.contains("class=\"tl-dep\" data-parent=\"4\" data-run=\"5\""));
    assert!(page.contains("run 4 of tick started run 5 of child"));
    assert!(page.contains("class=\"tl-now\""));
    assert!(page.contains("id=\"timeline-text\"") && page.contains("id=\"timeline-legend\""));
    // No link opens before the one before it closed.
    let mut open = false;
    for piece in page.split('<').skip(1) {
        if piece.starts_with("a ") {
            assert!(!open, "a link in a link: {page}");
            open = true;
        } else if piece.starts_with("/a>") {
            open = false;
        }
    }
    assert!(!page.contains("<script") && !page.contains(" style="));
    for (i, _) in page.match_indices(" on") {
        let name: String = page[i + 3..]
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        assert!(
            !page[i + 3 + name.len()..].starts_with('='),
            "an on{name}= attribute"
        );
    }
}

/// Upcoming instants closer than the drawing can tell apart are one band
/// from the first to the last of a state, drawn with the first's mark.
#[test]
fn dense_upcoming_instants_are_drawn_as_a_band() {
    let now = at(NOW);
    let times = Times {
        from: now - TimeDelta::hours(1),
        now,
        to: now + TimeDelta::hours(1),
    };
    let instant = |seconds: i64, state: &'static str| {
        let at = now + TimeDelta::seconds(seconds);
        Upcoming {
            instant: fmt_instant(at),
            state,
            reason: None,
            at,
        }
    };
    let mut upcoming: Vec<Upcoming> = (1..=100).map(|i| instant(2 * i, "due")).collect();
    upcoming.push(instant(202, "paused"));
    upcoming.push(instant(600, "due"));
    upcoming.push(instant(1200, "due"));
    assert_eq!(
        dense_runs(&upcoming, times),
        vec![0..100, 100..101, 101..102, 102..103]
    );
    let lane = Lane {
        job: "tick".into(),
        in_config: true,
        note: None,
        runs: Vec::new(),
        groups: Vec::new(),
        pauses: Vec::new(),
        upcoming,
        upcoming_truncated: false,
    };
    let t = Timeline {
        now: fmt_instant(now),
        from: fmt_instant(times.from),
        to: fmt_instant(times.to),
        window: "1h",
        replica: None,
        replicas: BTreeMap::new(),
        lanes: vec![lane],
        links: Vec::new(),
        runs_truncated: false,
        times,
    };
    let drawing = svg(&t).into_string();
    assert_eq!(
        drawing
            .matches("class=\"tl-nextband tl-nextband-due\"")
            .count(),
        1
    );
    assert!(drawing.contains(
        "tick: 100 instants from 2026-11-27T12:00:02.000Z to 2026-11-27T12:03:20.000Z, due"
    ));
    assert_eq!(drawing.matches("<circle class=\"tl-next\"").count(), 3);
    assert_eq!(
        drawing
            .matches("<circle class=\"tl-next tl-next-paused\"")
            .count(),
        1
    );
}
