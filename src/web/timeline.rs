//! `/timeline` and `/api/v1/timeline`: every job's past runs and upcoming
//! instants on one time axis, a lane per job, with the replicas that ran
//! them, the pauses, the instants the calendars and windows exclude and the
//! dependency links between runs.
//!
//! The upcoming instants are the schedule's own (`Schedule::upcoming_marked`,
//! which the `check` command lists too), and an instant a pause covers is
//! told by `lease::pause_covers`, the rule of the scheduler's claims: this
//! module decides nothing about instants itself. The page is one inline SVG
//! drawn on the server, with a legend, a `<title>` per mark and the same
//! facts as a table for whoever does not see it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use super::Shared;
use super::pages::{encode, layout, unavailable};
use crate::config::Config;
use crate::db::{DbError, Store};
use crate::history::{RunBrief, RunFilter, RunStatus, rfc3339};
use crate::run::Trigger;
use crate::schedule::{Excluded, fmt_instant};

/// The spans the timeline shows, before and after now alike.
pub(crate) const WINDOWS: [(&str, i64); 4] = [
    ("15m", 15 * 60),
    ("1h", 3600),
    ("6h", 6 * 3600),
    ("24h", 24 * 3600),
];
/// The span shown unless `window` says otherwise.
pub(crate) const DEFAULT_WINDOW: &str = "1h";
/// A lane with more runs than this shows them grouped.
pub(crate) const MAX_MARKS: usize = 120;
/// The groups of a lane's runs across the past span.
const BUCKETS: i64 = 60;
/// The most runs read; the newest are kept.
pub(crate) const MAX_RUNS: i64 = 5000;
/// The most upcoming instants listed per lane.
pub(crate) const MAX_UPCOMING: usize = 120;
/// The most dependency links drawn.
const MAX_LINKS: usize = 500;

/// `/timeline`'s and `/api/v1/timeline`'s query.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct TimelineQuery {
    /// `15m`, `1h`, `6h` or `24h`: the span before and after now.
    window: Option<String>,
    /// Only the runs this replica ran.
    replica: Option<String>,
}

impl TimelineQuery {
    /// The window asked for, or what is wrong with it.
    fn window(&self) -> Result<(&'static str, TimeDelta), String> {
        super::runs::window_among(&WINDOWS, DEFAULT_WINDOW, self.window.as_deref())
            .map(|(name, seconds)| (name, TimeDelta::seconds(seconds)))
    }

    fn replica(&self) -> Option<String> {
        self.replica
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string)
    }
}

/// Everything the timeline shows.
#[derive(Debug, Serialize)]
pub(crate) struct Timeline {
    /// The database's now.
    pub(crate) now: String,
    /// The axis's start: `window` before now.
    pub(crate) from: String,
    /// Its end: `window` after now.
    pub(crate) to: String,
    /// The span before and after now.
    pub(crate) window: &'static str,
    /// Only this replica's runs, if asked.
    pub(crate) replica: Option<String>,
    /// The replicas that ran the window's runs, with how many each.
    pub(crate) replicas: BTreeMap<String, usize>,
    /// One per job: the job file's, then those only the history names.
    pub(crate) lanes: Vec<Lane>,
    /// Runs that a parent's run started, both in the window.
    pub(crate) links: Vec<Link>,
    /// Whether there were more than [`MAX_RUNS`] runs in the window (the
    /// oldest are left out).
    pub(crate) runs_truncated: bool,
    #[serde(skip)]
    times: Times,
}

#[derive(Clone, Copy, Debug)]
struct Times {
    from: DateTime<Utc>,
    now: DateTime<Utc>,
    to: DateTime<Utc>,
}

/// A job's lane.
#[derive(Debug, Serialize)]
pub(crate) struct Lane {
    /// The job.
    pub(crate) job: String,
    /// Whether the job file defines it.
    pub(crate) in_config: bool,
    /// Why it has no upcoming instants of its own, if it has none by its
    /// nature: `disabled`, `after its parents`, `when triggered`, `at each
    /// start`, `ended`.
    pub(crate) note: Option<&'static str>,
    /// Its runs in the window, oldest first; empty when they are grouped.
    pub(crate) runs: Vec<Mark>,
    /// Its runs grouped by span of time, when more than [`MAX_MARKS`].
    pub(crate) groups: Vec<Group>,
    /// Its pauses that cover some of the window.
    pub(crate) pauses: Vec<PauseSpan>,
    /// Its instants from now to the window's end, the excluded and paused
    /// ones marked.
    pub(crate) upcoming: Vec<Upcoming>,
    /// Whether more instants fall before the window's end than listed.
    pub(crate) upcoming_truncated: bool,
}

/// A run.
#[derive(Debug, Serialize)]
pub(crate) struct Mark {
    /// Its id.
    pub(crate) id: i64,
    /// Its instant.
    pub(crate) scheduled_at: String,
    /// When it started.
    pub(crate) started_at: String,
    /// When it ended, if it has.
    pub(crate) finished_at: Option<String>,
    /// How it ended, or that it has not.
    pub(crate) status: RunStatus,
    /// The replica that ran it.
    pub(crate) replica: String,
    /// Its attempt.
    pub(crate) attempt: i32,
    /// What started it.
    pub(crate) triggered_by: Trigger,
    #[serde(skip)]
    start: DateTime<Utc>,
    #[serde(skip)]
    end: Option<DateTime<Utc>>,
}

/// Runs of a lane too dense to show one by one.
#[derive(Debug, Serialize)]
pub(crate) struct Group {
    /// The span's start.
    pub(crate) from: String,
    /// Its end.
    pub(crate) to: String,
    /// How many runs started in it.
    pub(crate) runs: usize,
    /// How many of them ended so, by status.
    pub(crate) statuses: BTreeMap<&'static str, usize>,
    /// The worst of those statuses (its colour).
    pub(crate) worst: RunStatus,
    /// The replicas that ran them.
    pub(crate) replicas: BTreeSet<String>,
    #[serde(skip)]
    start: DateTime<Utc>,
    #[serde(skip)]
    end: DateTime<Utc>,
}

/// A pause.
#[derive(Debug, Serialize)]
pub(crate) struct PauseSpan {
    /// When it began.
    pub(crate) from: String,
    /// When it ends or ended; `None`: until resumed.
    pub(crate) until: Option<String>,
    #[serde(skip)]
    start: DateTime<Utc>,
    #[serde(skip)]
    end: Option<DateTime<Utc>>,
}

/// An upcoming instant of a job's schedule.
#[derive(Debug, Serialize)]
pub(crate) struct Upcoming {
    /// The instant.
    pub(crate) instant: String,
    /// `due` (it will run), `excluded` (a calendar or the window takes it
    /// away) or `paused` (a pause covers it: not run, not missed).
    pub(crate) state: &'static str,
    /// Why it is excluded or paused.
    pub(crate) reason: Option<String>,
    #[serde(skip)]
    at: DateTime<Utc>,
}

/// A run a parent's run started (`after`).
#[derive(Debug, Serialize)]
pub(crate) struct Link {
    /// The parent's run.
    pub(crate) parent_run: i64,
    /// The parent job.
    pub(crate) parent_job: String,
    /// The run it started.
    pub(crate) run: i64,
    /// The dependent job.
    pub(crate) job: String,
    #[serde(skip)]
    from: (usize, DateTime<Utc>),
    #[serde(skip)]
    to: (usize, DateTime<Utc>),
}

/// How bad a status is, for a group's colour: the worst shows.
fn severity(status: RunStatus) -> u8 {
    match status {
        RunStatus::Succeeded => 0,
        RunStatus::Skipped => 1,
        RunStatus::Running => 2,
        RunStatus::Replaced | RunStatus::Killed => 3,
        RunStatus::Missed => 4,
        _ => 5,
    }
}

fn utc(time: NaiveDateTime) -> DateTime<Utc> {
    time.and_utc()
}

/// Why a lane has no instants of its own, if by its nature.
fn note_of(job: &crate::config::Job, now: DateTime<Utc>) -> Option<&'static str> {
    let schedule = &job.schedule;
    if !job.enabled {
        Some("disabled")
    } else if schedule.is_after() {
        Some("after its parents")
    } else if schedule.is_manual() {
        Some("when triggered")
    } else if schedule.is_at_start() {
        Some("at each start")
    } else if schedule.has_ended(now) {
        Some("ended")
    } else {
        None
    }
}

/// The instants of `job` from `now` to `to`, each marked by the schedule
/// (excluded by a calendar or the window) and by the pauses (`lease::
/// pause_covers`, as a claim heeds them); and whether more fall before
/// `to` than [`MAX_UPCOMING`].
fn upcoming(
    job: &crate::config::Job,
    pauses: &[(NaiveDateTime, NaiveDateTime)],
    now: DateTime<Utc>,
    to: DateTime<Utc>,
) -> (Vec<Upcoming>, bool) {
    if !job.enabled {
        return (Vec::new(), false);
    }
    let marked = job.schedule.upcoming_marked(now, MAX_UPCOMING);
    let due = marked.iter().filter(|(_, e)| e.is_none()).count();
    let truncated = due >= MAX_UPCOMING && marked.last().is_some_and(|(at, _)| *at < to);
    let listed = marked
        .into_iter()
        .filter(|(at, _)| *at <= to)
        .map(|(at, excluded)| {
            let paused = pauses.iter().find(|(from, until)| {
                crate::lease::pause_covers(Some(*from), Some(*until), at.naive_utc())
            });
            let (state, reason) = match (excluded, paused) {
                (Some(excluded), _) => ("excluded", Some(excluded_reason(&excluded))),
                (None, Some((from, until))) => (
                    "paused",
                    Some(format!(
                        "paused since {}{}",
                        rfc3339(*from),
                        until_text(*until)
                    )),
                ),
                (None, None) => ("due", None),
            };
            Upcoming {
                instant: fmt_instant(at),
                state,
                reason,
                at,
            }
        })
        .collect();
    (listed, truncated)
}

fn excluded_reason(excluded: &Excluded) -> String {
    match excluded {
        Excluded::SkipOn(_) | Excluded::NotOn(_) => {
            format!("excluded by {excluded} (every instant of that date)")
        }
        _ => format!("excluded: {excluded}"),
    }
}

fn until_text(until: NaiveDateTime) -> String {
    if until >= crate::db::clock::far_future() {
        " until resumed".to_string()
    } else {
        format!(" until {}", rfc3339(until))
    }
}

/// What the timeline reads from the database.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// The runs started in the window's past, newest first.
    pub(crate) runs: Vec<RunBrief>,
    /// Whether more were left out.
    pub(crate) runs_truncated: bool,
    /// The parents' runs of its dependent runs, by run id.
    pub(crate) parents: HashMap<i64, Vec<i64>>,
    /// The pauses that cover some of the window: job, start, end.
    pub(crate) pauses: Vec<(String, NaiveDateTime, NaiveDateTime)>,
}

/// Shapes what was read into the timeline: `runs` started in the window
/// (newest first, as read), the parents' runs of its dependent runs, the
/// pauses that cover some of it.
pub(crate) fn build(
    config: &Config,
    window: (&'static str, TimeDelta),
    now: DateTime<Utc>,
    replica: Option<String>,
    read: Read,
) -> Timeline {
    let Read {
        mut runs,
        runs_truncated,
        parents,
        pauses,
    } = read;
    let times = Times {
        from: now - window.1,
        now,
        to: now + window.1,
    };
    let mut replicas: BTreeMap<String, usize> = BTreeMap::new();
    for run in &runs {
        *replicas.entry(run.instance.clone()).or_default() += 1;
    }
    if let Some(replica) = &replica {
        runs.retain(|r| r.instance == *replica);
    }
    runs.sort_by_key(|r| (r.started_at, r.id));
    let mut by_job: BTreeMap<String, Vec<RunBrief>> = BTreeMap::new();
    for run in runs {
        by_job.entry(run.job.clone()).or_default().push(run);
    }
    let mut pauses_of: HashMap<String, Vec<(NaiveDateTime, NaiveDateTime)>> = HashMap::new();
    for (job, from, until) in pauses {
        pauses_of.entry(job).or_default().push((from, until));
    }
    let mut names: Vec<(String, bool)> = config
        .jobs
        .iter()
        .map(|j| (j.name.to_string(), true))
        .collect();
    for job in by_job.keys() {
        if config.job(job).is_none() {
            names.push((job.clone(), false));
        }
    }
    // Where each shown run is: its lane and its start and end.
    let mut placed: HashMap<i64, (usize, String, DateTime<Utc>, DateTime<Utc>)> = HashMap::new();
    let mut lanes = Vec::with_capacity(names.len());
    for (index, (name, in_config)) in names.into_iter().enumerate() {
        let job = config.job(&name);
        let job_runs = by_job.remove(&name).unwrap_or_default();
        for run in &job_runs {
            let start = utc(run.started_at);
            let end = run.finished_at.map_or(now, utc);
            placed.insert(run.id, (index, name.clone(), start, end));
        }
        let (marks, groups) = if job_runs.len() > MAX_MARKS {
            (Vec::new(), group(&job_runs, times))
        } else {
            (job_runs.iter().map(mark).collect(), Vec::new())
        };
        let mut job_pauses = pauses_of.remove(&name).unwrap_or_default();
        job_pauses.sort();
        let (upcoming, upcoming_truncated) = match job {
            Some(job) => upcoming(job, &job_pauses, now, times.to),
            None => (Vec::new(), false),
        };
        lanes.push(Lane {
            note: job.and_then(|j| note_of(j, now)),
            job: name,
            in_config,
            runs: marks,
            groups,
            pauses: job_pauses
                .iter()
                .map(|(from, until)| {
                    let open = *until >= crate::db::clock::far_future();
                    PauseSpan {
                        from: rfc3339(*from),
                        until: (!open).then(|| rfc3339(*until)),
                        start: utc(*from),
                        end: (!open).then(|| utc(*until)),
                    }
                })
                .collect(),
            upcoming,
            upcoming_truncated,
        });
    }
    let mut links = Vec::new();
    let mut children: Vec<(&i64, &Vec<i64>)> = parents.iter().collect();
    children.sort();
    'links: for (child, parent_ids) in children {
        let Some((child_lane, child_job, child_start, _)) = placed.get(child) else {
            continue;
        };
        for parent in parent_ids {
            let Some((parent_lane, parent_job, _, parent_end)) = placed.get(parent) else {
                continue;
            };
            if links.len() >= MAX_LINKS {
                break 'links;
            }
            links.push(Link {
                parent_run: *parent,
                parent_job: parent_job.clone(),
                run: *child,
                job: child_job.clone(),
                from: (*parent_lane, *parent_end),
                to: (*child_lane, *child_start),
            });
        }
    }
    Timeline {
        now: fmt_instant(now),
        from: fmt_instant(times.from),
        to: fmt_instant(times.to),
        window: window.0,
        replica,
        replicas,
        lanes,
        links,
        runs_truncated,
        times,
    }
}

fn mark(run: &RunBrief) -> Mark {
    Mark {
        id: run.id,
        scheduled_at: rfc3339(run.scheduled_at),
        started_at: rfc3339(run.started_at),
        finished_at: run.finished_at.map(rfc3339),
        status: run.status,
        replica: run.instance.clone(),
        attempt: run.attempt,
        triggered_by: run.triggered_by,
        start: utc(run.started_at),
        end: run.finished_at.map(utc),
    }
}

/// `runs` (oldest first) in [`BUCKETS`] spans of the past half of the
/// window.
fn group(runs: &[RunBrief], times: Times) -> Vec<Group> {
    let span = (times.now - times.from).num_milliseconds().max(1);
    let width = (span / BUCKETS).max(1);
    let mut groups: BTreeMap<i64, Group> = BTreeMap::new();
    for run in runs {
        let offset = (utc(run.started_at) - times.from).num_milliseconds();
        let bucket = (offset / width).clamp(0, BUCKETS - 1);
        let start = times.from + TimeDelta::milliseconds(bucket * width);
        let end = start + TimeDelta::milliseconds(width);
        let group = groups.entry(bucket).or_insert_with(|| Group {
            from: fmt_instant(start),
            to: fmt_instant(end),
            runs: 0,
            statuses: BTreeMap::new(),
            worst: run.status,
            replicas: BTreeSet::new(),
            start,
            end,
        });
        group.runs += 1;
        *group.statuses.entry(run.status.as_str()).or_default() += 1;
        if severity(run.status) > severity(group.worst) {
            group.worst = run.status;
        }
        group.replicas.insert(run.instance.clone());
    }
    groups.into_values().collect()
}

/// Reads what the timeline shows, at the database's now: the runs started
/// in the window's past (at most [`MAX_RUNS`], newest kept), their
/// parents' runs, and every pause that covers some of the window (a fixed
/// number of statements, whatever the number of jobs).
pub(crate) async fn read(
    store: &Store,
    config: &Config,
    window: (&'static str, TimeDelta),
    replica: Option<String>,
    shows: Option<&(dyn Fn(&str) -> bool + Sync)>,
) -> Result<Timeline, DbError> {
    let now = store.database_now().await?;
    let (from, to) = (now - window.1, now + window.1);
    let mut runs = store
        .list_briefs(RunFilter {
            since: Some(from.naive_utc()),
            limit: MAX_RUNS + 1,
            ..Default::default()
        })
        .await?;
    let truncated = runs.len() > MAX_RUNS as usize;
    runs.truncate(MAX_RUNS as usize);
    // A token limited to some jobs is shown their lanes only (a link to
    // a hidden job's run is not drawn: that run is not placed).
    let narrowed;
    let config = match shows {
        Some(shows) => {
            runs.retain(|r| shows(&r.job));
            let mut only = config.clone();
            only.jobs.retain(|j| shows(&j.name));
            narrowed = only;
            &narrowed
        }
        None => config,
    };
    let dependent: Vec<i64> = runs
        .iter()
        .filter(|r| r.triggered_by == Trigger::Dependency)
        .map(|r| r.id)
        .collect();
    let parents = if dependent.is_empty() {
        HashMap::new()
    } else {
        store
            .call("reading the parents' runs of runs", move |conn| {
                crate::history::parents_of(conn, &dependent)
            })
            .await?
    };
    let mut pauses = store.all_pauses_between(from, to).await?;
    if let Some(shows) = shows {
        pauses.retain(|(job, _, _)| shows(job));
    }
    let read = Read {
        runs,
        runs_truncated: truncated,
        parents,
        pauses,
    };
    Ok(build(config, window, now, replica, read))
}

/// `GET /api/v1/timeline`.
pub(super) async fn api(
    State(web): State<Shared>,
    Query(query): Query<TimelineQuery>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let window = match query.window() {
        Ok(window) => window,
        Err(e) => return super::api::error(StatusCode::BAD_REQUEST, e),
    };
    let shows = |job: &str| web.auth.shows(&caller, job);
    let scoped = web
        .auth
        .scoped(&caller)
        .then_some(&shows as &(dyn Fn(&str) -> bool + Sync));
    match read(&web.store, &web.config(), window, query.replica(), scoped).await {
        Ok(timeline) => axum::Json(timeline).into_response(),
        Err(e) => super::api::unavailable(e),
    }
}

/// `GET /timeline`.
pub(super) async fn page(
    State(web): State<Shared>,
    Query(query): Query<TimelineQuery>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let window = match query.window() {
        Ok(window) => window,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                layout(
                    &web,
                    "timeline",
                    false,
                    &caller,
                    html! { h1 { "Timeline" } p class="problem" { (e) } p { a href="/timeline" { "The last hour and the next" } } },
                ),
            )
                .into_response();
        }
    };
    let shows = |job: &str| web.auth.shows(&caller, job);
    let scoped = web
        .auth
        .scoped(&caller)
        .then_some(&shows as &(dyn Fn(&str) -> bool + Sync));
    let timeline = match read(&web.store, &web.config(), window, query.replica(), scoped).await {
        Ok(timeline) => timeline,
        Err(e) => return unavailable(&web, &caller, e),
    };
    // Refreshed while a refresh is cheap.
    let refresh = window.1 <= TimeDelta::hours(1);
    layout(&web, "timeline", refresh, &caller, render(&timeline)).into_response()
}

// The drawing, in the SVG's own units.
const WIDTH: f64 = 1000.0;
const PLOT_START: f64 = 178.0;
const PLOT_END: f64 = 990.0;
const AXIS: f64 = 30.0;
const LANE: f64 = 26.0;
/// The most rows of the table below the drawing.
const MAX_ROWS: usize = 1000;

impl Times {
    /// Where `t` is on the axis (clamped to it).
    fn x(&self, t: DateTime<Utc>) -> f64 {
        let span = (self.to - self.from).num_milliseconds().max(1) as f64;
        let at = (t - self.from).num_milliseconds() as f64 / span;
        PLOT_START + at.clamp(0.0, 1.0) * (PLOT_END - PLOT_START)
    }
}

fn lane_y(index: usize) -> f64 {
    AXIS + index as f64 * LANE
}

fn f(v: f64) -> String {
    format!("{v:.1}")
}

/// The ticks of the axis: a step that gives 4 to 12 of them.
fn ticks(times: Times) -> Vec<DateTime<Utc>> {
    let span = (times.to - times.from).num_minutes();
    let step = [5, 10, 15, 30, 60, 120, 240, 360]
        .into_iter()
        .find(|step| span / step <= 12)
        .unwrap_or(720);
    let step_ms = step * 60_000;
    let first = (times.from.timestamp_millis() / step_ms + 1) * step_ms;
    (0..)
        .map(|i| first + i * step_ms)
        .take_while(|t| *t < times.to.timestamp_millis())
        .filter_map(DateTime::from_timestamp_millis)
        .collect()
}

fn short(t: DateTime<Utc>) -> String {
    t.format("%H:%M").to_string()
}

fn label_of(name: &str) -> String {
    if name.chars().count() > 22 {
        format!("{}…", name.chars().take(21).collect::<String>())
    } else {
        name.to_string()
    }
}

fn group_text(g: &Group) -> String {
    let statuses: Vec<String> = g.statuses.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let replicas: Vec<&str> = g.replicas.iter().map(String::as_str).collect();
    format!(
        "{} runs from {} to {}: {}; on {}",
        g.runs,
        g.from,
        g.to,
        statuses.join(", "),
        replicas.join(", ")
    )
}

fn run_text(job: &str, m: &Mark) -> String {
    format!(
        "{job}: run {} of instant {}, {}, on {} ({}, attempt {}), started {}{}",
        m.id,
        m.scheduled_at,
        m.status.as_str(),
        m.replica,
        m.triggered_by.as_str(),
        m.attempt,
        m.started_at,
        m.finished_at
            .as_deref()
            .map(|f| format!(", ended {f}"))
            .unwrap_or_default()
    )
}

fn upcoming_text(job: &str, u: &Upcoming) -> String {
    match &u.reason {
        Some(reason) => format!("{job}: instant {}, {}: {reason}", u.instant, u.state),
        None => format!("{job}: instant {}, due", u.instant),
    }
}

fn pause_text(job: &str, p: &PauseSpan) -> String {
    format!(
        "{job}: paused from {} until {}",
        p.from,
        p.until.as_deref().unwrap_or("resumed")
    )
}

fn link_text(l: &Link) -> String {
    format!(
        "run {} of {} started run {} of {}",
        l.parent_run, l.parent_job, l.run, l.job
    )
}

/// The drawing.
fn svg(t: &Timeline) -> Markup {
    let times = t.times;
    let height = lane_y(t.lanes.len()) + 6.0;
    let now_x = times.x(times.now);
    html! {
        svg class="tl-svg" id="timeline" xmlns="http://www.w3.org/2000/svg" viewBox={"0 0 " (WIDTH) " " (f(height))} aria-labelledby="tl-svg-title" {
            title id="tl-svg-title" { "Timeline from " (t.from) " to " (t.to) ": " (t.lanes.len()) " jobs" }
            g class="tl-axis" {
                text class="tl-tick" x="4" y="18" { "UTC" }
                @for tick in ticks(times) {
                    @let x = times.x(tick);
                    line class="tl-grid" x1=(f(x)) y1=(f(AXIS - 6.0)) x2=(f(x)) y2=(f(height)) {}
                    text class="tl-tick" x=(f(x)) y="18" text-anchor="middle" { (short(tick)) }
                }
            }
            @for (i, lane) in t.lanes.iter().enumerate() {
                @let y = lane_y(i);
                g class="tl-lane" data-job=(lane.job) {
                    rect class={"tl-band" @if i % 2 == 1 { " tl-band-alt" }} x="0" y=(f(y)) width=(WIDTH) height=(LANE) {}
                    a href={"/jobs/" (encode(&lane.job))} aria-label={"job " (lane.job)} {
                        text class="tl-label" x="6" y=(f(y + 17.0)) { title { (lane.job) } (label_of(&lane.job)) }
                    }
                    @for p in &lane.pauses {
                        @let x1 = times.x(p.start);
                        @let x2 = times.x(p.end.unwrap_or(times.to));
                        rect class="tl-pause" x=(f(x1)) y=(f(y + 1.0)) width=(f((x2 - x1).max(2.0))) height=(f(LANE - 2.0)) {
                            title { (pause_text(&lane.job, p)) }
                        }
                    }
                    @for g in &lane.groups {
                        @let x1 = times.x(g.start);
                        @let x2 = times.x(g.end);
                        rect class={"tl-group s-" (g.worst.as_str())} x=(f(x1)) y=(f(y + 6.0)) width=(f((x2 - x1 - 0.5).max(1.5))) height="14" {
                            title { (lane.job) ": " (group_text(g)) }
                        }
                    }
                    @for m in &lane.runs {
                        @let x1 = times.x(m.start);
                        @let x2 = times.x(m.end.unwrap_or(times.now));
                        a href={"/runs/" (m.id)} aria-label={(lane.job) " run " (m.id) ", " (m.status.as_str()) ", on " (m.replica)} {
                            rect class={"tl-run s-" (m.status.as_str())} data-run=(m.id) data-replica=(m.replica) x=(f(x1)) y=(f(y + 6.0)) width=(f((x2 - x1).max(3.0))) height="14" {
                                title { (run_text(&lane.job, m)) }
                            }
                        }
                    }
                    @for run in dense_runs(&lane.upcoming, times) {
                        @let (first, last) = (&lane.upcoming[run.start], &lane.upcoming[run.end - 1]);
                        @if run.len() > 1 {
                            rect class={"tl-nextband tl-nextband-" (first.state)} x=(f(times.x(first.at))) y=(f(y + 9.0)) width=(f((times.x(last.at) - times.x(first.at)).max(1.0))) height="8" {
                                title { (lane.job) ": " (run.len()) " instants from " (first.instant) " to " (last.instant) ", " (first.state) @if let Some(reason) = &first.reason { ": " (reason) } }
                            }
                        }
                        (instant_mark(&lane.job, first, times.x(first.at), y + 13.0))
                    }
                    @if lane.upcoming_truncated {
                        text class="tl-note" x=(f(PLOT_END)) y=(f(y + 17.0)) text-anchor="end" { title { "more instants than shown before " (t.to) } "…" }
                    }
                    @if let Some(note) = lane.note {
                        text class="tl-note" x=(f(now_x + 6.0)) y=(f(y + 17.0)) { (note) }
                    }
                }
            }
            @for l in &t.links {
                @let (x1, y1) = (times.x(l.from.1), lane_y(l.from.0) + 13.0);
                @let (x2, y2) = (times.x(l.to.1), lane_y(l.to.0) + 13.0);
                @let bend = ((x2 - x1).abs() / 2.0).max(12.0);
                g class="tl-dep" data-parent=(l.parent_run) data-run=(l.run) {
                    title { (link_text(l)) }
                    path d={"M" (f(x1)) " " (f(y1)) "C" (f(x1 + bend)) " " (f(y1)) " " (f(x2 - bend)) " " (f(y2)) " " (f(x2)) " " (f(y2))} {}
                    circle cx=(f(x2)) cy=(f(y2)) r="2.5" {}
                }
            }
            line class="tl-now" x1=(f(now_x)) y1=(f(AXIS - 8.0)) x2=(f(now_x)) y2=(f(height)) { title { "now: " (t.now) } }
            text class="tl-now-label" x=(f(now_x + 3.0)) y=(f(AXIS - 2.0)) { "now" }
        }
    }
}

/// The closest two upcoming marks may be, in the drawing's units, before
/// they are drawn as one band.
const DENSE: f64 = 3.0;

/// Runs of consecutive upcoming instants of one state closer than
/// [`DENSE`]: each is drawn as its first mark over a band to its last.
fn dense_runs(upcoming: &[Upcoming], times: Times) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, u) in upcoming.iter().enumerate() {
        match runs.last_mut() {
            Some(run)
                if upcoming[run.end - 1].state == u.state
                    && times.x(u.at) - times.x(upcoming[run.end - 1].at) < DENSE =>
            {
                run.end = i + 1;
            }
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

/// One upcoming instant's mark: a circle, dashed when a pause covers it,
/// crossed out when it is excluded.
fn instant_mark(job: &str, u: &Upcoming, x: f64, cy: f64) -> Markup {
    html! {
        @match u.state {
            "excluded" => g class="tl-excluded" data-instant=(u.instant) {
                title { (upcoming_text(job, u)) }
                circle cx=(f(x)) cy=(f(cy)) r="5" {}
                path d={"M" (f(x - 3.5)) " " (f(cy - 3.5)) "L" (f(x + 3.5)) " " (f(cy + 3.5)) "M" (f(x - 3.5)) " " (f(cy + 3.5)) "L" (f(x + 3.5)) " " (f(cy - 3.5))} {}
            },
            "paused" => circle class="tl-next tl-next-paused" data-instant=(u.instant) cx=(f(x)) cy=(f(cy)) r="4.5" {
                title { (upcoming_text(job, u)) }
            },
            _ => circle class="tl-next" data-instant=(u.instant) cx=(f(x)) cy=(f(cy)) r="4.5" {
                title { (upcoming_text(job, u)) }
            },
        }
    }
}

/// A swatch of the legend.
fn swatch(kind: &str) -> Markup {
    html! {
        svg class="tl-swatch" width="22" height="14" viewBox="0 0 22 14" aria-hidden="true" {
            @match kind {
                "pause" => rect class="tl-pause" x="0" y="0" width="22" height="14" {},
                "next" => circle class="tl-next" cx="11" cy="7" r="4.5" {},
                "next-paused" => circle class="tl-next tl-next-paused" cx="11" cy="7" r="4.5" {},
                "band" => rect class="tl-nextband tl-nextband-due" x="1" y="3" width="20" height="8" {},
                "excluded" => g class="tl-excluded" { circle cx="11" cy="7" r="5" {} path d="M7.5 3.5L14.5 10.5M7.5 10.5L14.5 3.5" {} },
                "dep" => g class="tl-dep" { path d="M1 12C8 12 14 2 21 2" {} circle cx="21" cy="2" r="1.5" {} },
                "now" => line class="tl-now" x1="11" y1="0" x2="11" y2="14" {},
                status => rect class={"tl-run s-" (status)} x="2" y="2" width="18" height="10" {},
            }
        }
    }
}

/// The legend: each kind of mark by its shape and its word.
fn legend() -> Markup {
    let items = [
        ("succeeded", "run succeeded"),
        ("failed", "failed, timed out, error, lost lock or abandoned"),
        ("running", "running"),
        ("killed", "killed"),
        ("missed", "missed"),
        ("skipped", "skipped"),
        ("pause", "paused"),
        ("next", "upcoming instant"),
        ("next-paused", "upcoming instant a pause covers (not run)"),
        ("band", "upcoming instants too close to tell apart"),
        ("excluded", "instant a calendar or window excludes"),
        ("dep", "dependency: a parent's run started this run"),
        ("now", "now"),
    ];
    html! {
        ul class="tl-legend" id="timeline-legend" {
            @for (kind, words) in items {
                li { (swatch(kind)) " " (words) }
            }
        }
    }
}

/// The rows of the table: when, what, replica, run.
fn rows(t: &Timeline) -> Vec<(String, String, String, Markup)> {
    let mut rows: Vec<(String, String, String, Markup)> = Vec::new();
    for lane in &t.lanes {
        for p in &lane.pauses {
            rows.push((
                p.from.clone(),
                pause_text(&lane.job, p),
                String::new(),
                html! {},
            ));
        }
        for g in &lane.groups {
            rows.push((
                g.from.clone(),
                format!("{}: {}", lane.job, group_text(g)),
                g.replicas.iter().cloned().collect::<Vec<_>>().join(", "),
                html! {},
            ));
        }
        for m in &lane.runs {
            rows.push((
                m.started_at.clone(),
                format!(
                    "{}: {} ({}, instant {})",
                    lane.job,
                    m.status.as_str(),
                    m.triggered_by.as_str(),
                    m.scheduled_at
                ),
                m.replica.clone(),
                html! { a href={"/runs/" (m.id)} { "run " (m.id) } },
            ));
        }
        for u in &lane.upcoming {
            rows.push((
                u.instant.clone(),
                upcoming_text(&lane.job, u),
                String::new(),
                html! {},
            ));
        }
    }
    for l in &t.links {
        rows.push((
            String::new(),
            link_text(l),
            String::new(),
            html! { a href={"/runs/" (l.run)} { "run " (l.run) } },
        ));
    }
    rows
}

/// The whole page's body.
pub(crate) fn render(t: &Timeline) -> Markup {
    let all_rows = rows(t);
    let total = all_rows.len();
    let filter = |window: &str, replica: Option<&str>| {
        let mut href = format!("/timeline?window={window}");
        if let Some(replica) = replica {
            href.push_str(&format!("&replica={}", encode(replica)));
        }
        href
    };
    html! {
        h1 { "Timeline" }
        p class="muted" {
            "From " (t.from) " to " (t.to) " (database time, UTC): past runs left of now, upcoming instants right of it."
            @if t.runs_truncated { " Only the newest " (MAX_RUNS) " runs are shown." }
        }
        nav class="tl-choices" aria-label="timeline span and replica" {
            "Span: "
            @for (name, _) in WINDOWS {
                @if name == t.window { strong aria-current="true" { "±" (name) } } @else { a href=(filter(name, t.replica.as_deref())) { "±" (name) } }
                " "
            }
            " · Replica: "
            @if t.replica.is_none() { strong aria-current="true" { "all" } } @else { a href=(filter(t.window, None)) { "all" } }
            @for (replica, count) in &t.replicas {
                " "
                @if t.replica.as_deref() == Some(replica.as_str()) {
                    strong aria-current="true" { code { (replica) } " (" (count) ")" }
                } @else {
                    a href=(filter(t.window, Some(replica))) class="tl-replica" { code { (replica) } " (" (count) ")" }
                }
            }
        }
        (legend())
        div class="tl-wrap" role="region" aria-label="timeline drawing" tabindex="0" {
            (svg(t))
        }
        details id="timeline-text" {
            summary { "The timeline as a table (" (total) " rows)" }
            table id="timeline-table" {
                thead { tr { th { "When (UTC)" } th { "What" } th { "Replica" } th { "Run" } } }
                tbody {
                    @for (when, what, replica, run) in all_rows.into_iter().take(MAX_ROWS) {
                        tr { td class="nowrap" { (when) } td { (what) } td { (replica) } td { (run) } }
                    }
                }
            }
            @if total > MAX_ROWS { p class="muted" { "The first " (MAX_ROWS) " rows." } }
        }
    }
}

#[cfg(test)]
mod tests;
