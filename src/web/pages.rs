//! The dashboard: HTML rendered on the server with maud, which escapes
//! every string it is given (a job's output of `<script>` is shown as
//! text). The pages need no JavaScript: the durations chart is inline SVG
//! and actions are HTML forms that POST with a CSRF token. Where the
//! dashboard's one script runs (`/static/replicron.js`, the only script the
//! CSP allows), it keeps a page's live part fresh without reloading it;
//! without it, a page is reloaded by hand.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde::Deserialize;
use std::time::Duration;
use tracing::{info, warn};

use super::auth::{Caller, same_origin};
use super::data::{self, CHART_RUNS, InstanceView, JobView, Recent};
use super::{ActionParams, Shared, assets};
use crate::config::Right;
use crate::db::audit::{Actor, Via};
use crate::history::{RunFilter, RunRecord, RunStatus};

/// Seconds between a page's refreshes.
const REFRESH: u32 = 5;
/// Runs per page on a job's page.
const RUNS_PER_PAGE: i64 = 100;

const STYLE: &str = r#"
:root{color-scheme:light dark;--fg:#1d2330;--bg:#f6f7f9;--panel:#fff;--border:#d5d9e0;--thead:#eef0f3;--muted:#50576a;--link:#1a56c4;--ok:#1b7a43;--bad:#c62828;--warn:#a65a00;--run:#2456c7;--idle:#5f6673;--problem:#b02a2a;--good-bg:#e7f5ec;--bad-bg:#fbeaea;--focus:#1a56c4}
@media (prefers-color-scheme:dark){:root{--fg:#e4e7ed;--bg:#111418;--panel:#1b1f27;--border:#353b47;--thead:#252a34;--muted:#a9b0bd;--link:#8db4ff;--problem:#ff9a92;--good-bg:#173523;--bad-bg:#3d1a1a;--focus:#8db4ff}}
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:var(--fg);background:var(--bg)}
a{color:var(--link)}
:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
.skip{position:absolute;left:-999px;top:0;background:var(--panel);color:var(--link);padding:6px 10px;z-index:2}
.skip:focus{left:8px}
header{background:#1d2330;color:#fff;padding:8px 16px;display:flex;gap:8px 16px;align-items:center;flex-wrap:wrap}
header a{color:#fff;text-decoration:none;font-weight:600}
header a:hover,header a:focus-visible{text-decoration:underline}
header :focus-visible{outline-color:#fff}
header .meta{color:#c5cad3;font-size:12px;margin-left:auto}
header form{display:inline;margin:0}
main{padding:12px 16px}
h1{font-size:20px;margin:8px 0;overflow-wrap:anywhere}
h2{font-size:16px;margin:20px 0 8px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;background:var(--panel);width:100%;box-shadow:0 1px 2px #0001}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--border);vertical-align:top}
th{background:var(--thead);font-weight:600;font-size:12px;text-transform:uppercase;color:var(--muted)}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.dot{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:4px;vertical-align:middle}
.s-succeeded{background:var(--ok);fill:var(--ok)}.s-running{background:var(--run);fill:var(--run)}
.s-failed,.s-timed_out,.s-error,.s-lost_lock,.s-abandoned,.s-missed{background:var(--bad);fill:var(--bad)}
.s-killed{background:var(--warn);fill:var(--warn)}.s-skipped,.s-never,.s-paused,.s-disabled{background:var(--idle);fill:var(--idle)}
.nowrap{white-space:nowrap}
.badge{display:inline-block;padding:0 6px;border-radius:8px;color:#fff;font-size:12px}
.problem{color:var(--problem)}
.muted{color:var(--muted);font-size:12px}
.updates{display:flex;gap:8px;align-items:center;flex-wrap:wrap;margin:4px 0}
pre.output{background:#10131a;color:#e6e6e6;padding:10px;overflow:auto;max-height:70vh;white-space:pre-wrap;word-break:break-all}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;background:var(--panel);padding:10px;margin:0}
dt{color:var(--muted);font-weight:600}dd{margin:0;overflow-wrap:anywhere}
.actions form{display:inline-block;margin:0 8px 8px 0;padding:6px;background:var(--panel);border:1px solid var(--border)}
.flash{padding:8px;margin:8px 0;background:var(--good-bg);border:1px solid var(--ok)}
.flash.bad{background:var(--bad-bg);border-color:var(--bad)}
code{font-family:ui-monospace,monospace;font-size:13px;overflow-wrap:anywhere}
svg{vertical-align:middle}
input,select,textarea,button{font:inherit;max-width:100%}
@media (max-width:600px){main{padding:8px}header{padding:8px}dl{grid-template-columns:1fr}dt{margin-top:6px}th,td{padding:4px 6px}}
/* The runs view, the failures of the last 24 h and a job's figures. */
.runs-filter{display:flex;flex-wrap:wrap;gap:6px 10px;align-items:flex-end;margin:8px 0;padding:8px;background:var(--panel,#fff);border:1px solid var(--border,#e4e6eb)}
.runs-filter label{font-weight:600;font-size:12px;color:var(--muted,#556)}
.runs-filter select,.runs-filter input{font:inherit}
nav.pages,nav.windows{margin:8px 0}
nav.pages a,nav.windows a,nav.windows strong{margin-right:12px}
dl.figures{grid-template-columns:max-content 1fr}
.charts{display:flex;flex-wrap:wrap;gap:16px;margin:8px 0}
.charts figure{margin:0;padding:6px;background:var(--panel,#fff);border:1px solid var(--border,#e4e6eb)}
.charts figcaption{font-size:12px;color:var(--muted,#556)}
svg.figchart .bar{fill:var(--run,#2f6fdb)}
svg.figchart .bar.bad,svg.figchart .badmark{fill:var(--bad,#d23c3c)}
.tl-choices{margin:8px 0}
.tl-legend{list-style:none;padding:0;margin:8px 0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px}
.tl-wrap{overflow-x:auto;background:var(--panel,#fff);border:1px solid var(--border,#e4e6eb)}
.tl-svg{display:block;width:100%;min-width:900px;height:auto}
.tl-band{fill:var(--panel,#fff)}.tl-band-alt{fill:var(--bg,#f6f7f9)}
.tl-label,.tl-tick,.tl-note,.tl-now-label{fill:var(--fg,#1d2330);font-size:12px}
.tl-tick,.tl-note{fill:var(--muted,#555)}
.tl-label{text-decoration:underline;fill:var(--link,#1a56b0)}
.tl-grid{stroke:var(--border,#e4e6eb);stroke-width:1}
.tl-pause{fill:var(--muted,#555);fill-opacity:.22}
.tl-run,.tl-group{stroke:var(--fg,#1d2330);stroke-width:.5}
.tl-group{fill-opacity:.75}
.tl-next{fill:var(--panel,#fff);stroke:var(--run,#2f6fdb);stroke-width:2}
.tl-next-paused{stroke:var(--muted,#555);stroke-dasharray:2 2}
.tl-nextband{fill:var(--muted,#555);fill-opacity:.35}.tl-nextband-due{fill:var(--run,#2f6fdb)}
.tl-excluded circle{fill:none;stroke:var(--muted,#555);stroke-width:1.5}
.tl-excluded path{stroke:var(--bad,#d23c3c);stroke-width:1.5}
.tl-dep path{fill:none;stroke:var(--link,#1a56b0);stroke-width:1.5;stroke-opacity:.8}
.tl-dep circle{fill:var(--link,#1a56b0)}
.tl-now{stroke:var(--bad,#d23c3c);stroke-width:1.5}
.tl-now-label{font-weight:600}
.tl-swatch{vertical-align:middle}
a.trace{font-size:12px}
.outbox{display:flex;flex-direction:column-reverse;overflow:auto;max-height:70vh;background:#10131a}
.outbox pre.output{max-height:none;overflow:visible;margin:0;background:transparent}
pre.output .a-red{color:#ff7b72}pre.output .a-green{color:#7ee787}pre.output .a-yellow{color:#e3b341}
pre.output .a-blue{color:#79c0ff}pre.output .a-magenta{color:#d2a8ff}pre.output .a-cyan{color:#56d4dd}
pre.output .a-bold{font-weight:700}
pre.output .stderr,.sample-stderr{background:#3b1219;color:#ffdcd7;box-shadow:inset 3px 0 0 #ff7b72}
.sample-stderr{padding:0 4px}
pre.output .gap{color:#c9d1d9;font-style:italic}
.over{font-weight:700}
"#;

pub(super) use super::markup::{duration, encode, relative, since, status_badge, trace_href};

/// An RFC 3339 time with its zone's offset, as people read it:
/// `2026-11-25 07:00:00 +01:00`.
fn local(rfc3339: &str) -> String {
    DateTime::parse_from_rfc3339(rfc3339).map_or_else(
        |_| rfc3339.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S %:z").to_string(),
    )
}

/// A job's state as one word, for its dot.
fn job_state(job: &JobView) -> &'static str {
    if job.paused.is_some() {
        "paused"
    } else if job.in_config && !job.enabled {
        "disabled"
    } else {
        job.last_run.as_ref().map_or("never", |r| r.status.as_str())
    }
}

/// The last runs' durations, oldest left, each bar coloured by its status.
/// `linked`: each bar is its own element, with a tooltip and a link to its
/// run (a job's page); else one path per status, which keeps the overview
/// of many jobs small.
fn chart(runs: &[RunRecord], linked: bool) -> Markup {
    const WIDTH: usize = 3;
    const GAP: usize = 1;
    const HEIGHT: f64 = 22.0;
    let longest = runs
        .iter()
        .filter_map(|r| r.duration_seconds)
        .fold(0.0_f64, f64::max)
        .max(0.001);
    let width = (WIDTH + GAP) * CHART_RUNS as usize;
    let bars: Vec<(usize, f64, &RunRecord)> = runs
        .iter()
        .rev()
        .enumerate()
        .map(|(i, run)| {
            let h = run
                .duration_seconds
                .map_or(HEIGHT, |d| (d / longest * HEIGHT).max(1.0));
            ((WIDTH + GAP) * i, h, run)
        })
        .collect();
    let mut paths: std::collections::BTreeMap<&str, String> = Default::default();
    if !linked {
        for (x, h, run) in &bars {
            paths
                .entry(run.status.as_str())
                .or_default()
                .push_str(&format!("M{x} {:.1}h{WIDTH}V24h-{WIDTH}z", 24.0 - h));
        }
    }
    html! {
        @if linked {
            // A chart of links is a group of them, each named, not an image.
            svg class="chart" width=(width) height="24" viewBox={"0 0 " (width) " 24"} role="group" aria-label="durations of the last runs, each a link to its run" {
                @for (x, h, run) in &bars {
                    a href={"/runs/" (run.id)} aria-label={"run " (run.id) ": " (run.status.as_str()) ", " (duration(run.duration_seconds))} {
                        rect class={"s-" (run.status.as_str())} x=(x) y=(format!("{:.1}", 24.0 - h)) width=(WIDTH) height=(format!("{h:.1}")) {
                            title { "run " (run.id) ": " (run.status.as_str()) ", " (duration(run.duration_seconds)) ", " (run.started_at) }
                        }
                    }
                }
            }
        } @else {
            svg class="chart" width=(width) height="24" viewBox={"0 0 " (width) " 24"} role="img" aria-label="durations of the last runs" {
                @for (status, d) in &paths {
                    path class={"s-" (status)} d=(d) {}
                }
            }
        }
    }
}

/// The page around `body`.
pub(super) fn layout(
    web: &Shared,
    title: &str,
    refresh: bool,
    caller: &Caller,
    body: Markup,
) -> Markup {
    let page = page(web, title, refresh, caller, body).into_string();
    // Nothing of ours holds one: a bidirectional control comes from a
    // command, an output, a reason or an instance id, and is shown, not
    // obeyed.
    PreEscaped(crate::text::bidi_visible(&page).into_owned())
}

/// The CSRF token a signed-in page's forms carry.
fn csrf_of(caller: &Caller) -> &str {
    match caller {
        Caller::Session(session) => &session.csrf,
        _ => "",
    }
}

fn page(web: &Shared, title: &str, refresh: bool, caller: &Caller, body: Markup) -> Markup {
    let csrf = csrf_of(caller).to_string();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · replicron" }
                link rel="icon" href=(assets::path("favicon.svg")) type="image/svg+xml";
                style { (PreEscaped(STYLE)) }
                @if refresh { script src=(assets::path("replicron.js")) defer {} }
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header {
                    a href="/" { "replicron" }
                    a href="/runs" id="nav-runs" { "runs" }
                    a href="/timeline" id="nav-timeline" { "timeline" }
                    a href="/audit" id="nav-audit" { "audit log" }
                    span { "replica " code { (web.instance) } }
                    span class="meta" {
                        @match caller {
                            Caller::ReadOnly => "read-only (no [web] token_env)",
                            Caller::Session(_) | Caller::Bearer(_) => {
                                "signed in as " span id="token-name" { (caller.token_name().unwrap_or("?")) } " · "
                                form method="post" action="/logout" {
                                    input type="hidden" name="csrf" value=(csrf);
                                    button type="submit" { "sign out" }
                                }
                            }
                            Caller::Anonymous => a href="/login" { "sign in to act" },
                        }
                    }
                }
                @if refresh {
                    main id="main" tabindex="-1" data-refresh=(REFRESH) {
                        p class="updates muted" {
                            span id="updates" { "Shown as of loading; " }
                            a id="reload" href="" { "reload" }
                        }
                        div id="live" data-live { (body) }
                    }
                } @else {
                    main id="main" tabindex="-1" { (body) }
                }
            }
        }
    }
}

/// The page that refuses `caller` the job `name`, if its token does not
/// reach it.
fn out_of_reach(web: &Shared, caller: &Caller, name: &str) -> Option<Response> {
    if web.auth.shows(caller, name) {
        return None;
    }
    let why = web
        .auth
        .denied(caller, Right::Read, name)
        .map_or_else(|| format!("{name}: not shown to this token"), |d| d.why);
    Some(
        (
            StatusCode::FORBIDDEN,
            layout(
                web,
                "refused",
                false,
                caller,
                html! { h1 { "Refused" } p id="refused" { (why) } p { a href="/" { "Your jobs" } } },
            ),
        )
            .into_response(),
    )
}

/// The page for a path the dashboard does not have.
pub(super) async fn not_found(web: &Shared, headers: &HeaderMap) -> Response {
    let caller = super::caller(web, headers).await;
    (
        StatusCode::NOT_FOUND,
        layout(
            web,
            "not found",
            false,
            &caller,
            html! {
                h1 { "No such page" }
                p { "The dashboard has no page at this address. Its pages start at the " a href="/" { "overview" } "." }
            },
        ),
    )
        .into_response()
}

pub(super) fn unavailable(web: &Shared, caller: &Caller, e: impl std::fmt::Display) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        layout(
            web,
            "database unavailable",
            true,
            caller,
            html! { h1 { "The database did not answer" } p class="problem" { (e.to_string()) } },
        ),
    )
        .into_response()
}

fn jobs_table(jobs: &[JobView], now: DateTime<Utc>) -> Markup {
    html! {
        div class="scroll" tabindex="0" role="region" aria-label="jobs" { table id="jobs" {
            thead { tr { th { "Job" } th { "Schedule" } th { "Next start" } th { "Last run" } th { "Last " (CHART_RUNS) " durations" } th { "Problem" } } }
            tbody {
                @for job in jobs {
                    @let state = job_state(job);
                    tr class="job" data-job=(job.name) data-state=(state) {
                        td {
                            span class={"dot s-" (state)} title=(state) {}
                            a href={"/jobs/" (encode(&job.name))} { (job.name) }
                            @if job.paused.is_some() { " " span class="badge s-paused" { "paused" } }
                        }
                        td {
                            @if let Some(d) = &job.definition {
                                code class="nowrap" { (d.schedule) } br; span class="muted" { (d.timezone) }
                            } @else { span class="muted" { "not in the job file" } }
                        }
                        td {
                            @if let (Some(start), Some(secs)) = (&job.next_start, job.next_start_in_seconds) {
                                (relative(secs)) br; span class="muted nowrap" { (local(start)) }
                            } @else if is_manual(job) { span class="muted" { "when triggered" } } @else if is_dependent(job) { span class="muted" { "after its parents" } } @else if job.ended { span class="muted" { "ended" } } @else { "-" }
                        }
                        td class="last" {
                            @if let Some(run) = &job.last_run {
                                a href={"/runs/" (run.id)} { (status_badge(run.status)) }
                                " " (since(now, &run.started_at)) br;
                                span class="muted" {
                                    @if run.status == RunStatus::Running {
                                        (super::live::running_for(now, run, super::live::usual_of(&job.recent)))
                                    } @else { (duration(run.duration_seconds)) }
                                    " on " (run.instance)
                                }
                                @if let Some(alerts) = job.alerts.describe() { br; span class="problem alerts" { (alerts) } }
                            } @else { span class="muted" { "never ran" } }
                        }
                        td { (chart(&job.recent, false)) }
                        td class="problem" { @if let Some(problem) = &job.problem { a href=(super::runs::problem_link(&job.name, problem)) { (problem.headline()) } } }
                    }
                }
            }
        } }
    }
}

fn replicas_table(instances: &[InstanceView]) -> Markup {
    html! {
        div class="scroll" tabindex="0" role="region" aria-label="replicas" { table id="replicas" {
            thead { tr { th { "Replica" } th { "Host" } th { "PID" } th { "Version" } th { "State" } th { "Last seen" } th { "Clock" } th { "Drift" } } }
            tbody {
                @for view in instances {
                    @let i = &view.replica;
                    tr {
                        td { code { (i.id) } }
                        td { (i.host) }
                        td class="num" { (i.pid) }
                        td { (i.version) }
                        td { @if i.alive { span class="dot s-succeeded" {} "alive" } @else { span class="dot s-failed" {} "STALE" } }
                        td { (i.last_seen) }
                        td class="num" { @if let Some(s) = i.clock_offset_seconds { (format!("{s:+.3} s")) } @else { "?" } }
                        td { @if view.drifted_jobs.is_empty() { "-" } @else { span class="problem" { (view.drifted_jobs.join(", ")) } } }
                    }
                }
            }
        } }
    }
}

fn notifications_table(sent: &[crate::notify::Sent]) -> Markup {
    html! {
        @if sent.is_empty() {
            p class="muted" { "None sent by this replica since it started." }
        } @else {
            div class="scroll" tabindex="0" role="region" aria-label="failed notifications" { table id="notifications" {
                thead { tr { th { "At" } th { "Job" } th { "Event" } th { "To" } th { "Result" } } }
                tbody {
                    @for n in sent.iter().take(50) {
                        tr {
                            td { (n.at) }
                            td { (n.job) }
                            td { (n.event) @if let Some(id) = n.run_id { " (" a href={"/runs/" (id)} { "run " (id) } ")" } }
                            td { (n.to) }
                            td { (n.result) @if let Some(e) = &n.error { br; span class="problem" { (e) } } }
                        }
                    }
                }
            } }
        }
    }
}

pub(super) async fn overview(State(web): State<Shared>, headers: HeaderMap) -> Response {
    let caller = super::caller(&web, &headers).await;
    let config = web.config();
    let mut overview =
        match data::overview(&web.store, &config, Recent::Runs(CHART_RUNS), None).await {
            Ok(o) => o,
            Err(e) => return unavailable(&web, &caller, e),
        };
    super::narrow_overview(&web, &caller, &mut overview);
    let mut sent = web.notifications.recent();
    sent.retain(|s| web.auth.shows(&caller, &s.job));
    let problems = overview.jobs.iter().filter(|j| j.problem.is_some()).count();
    let failures = super::runs::failures(&web, &caller, overview.now).await;
    layout(
        &web,
        "jobs",
        true,
        &caller,
        html! {
            h1 { (overview.jobs.len()) " jobs" @if problems > 0 { ", " span class="problem" { (problems) " need a look" } } }
            p class="muted" { "Database time " (crate::schedule::fmt_instant(overview.now)) "." }
            (jobs_table(&overview.jobs, overview.now))
            @if !overview.backfills.is_empty() {
                h2 { "Backfills in progress" }
                (backfills_table(&web, &overview.backfills, &caller))
            }
            (failures)
            h2 { "Replicas" }
            (replicas_table(&overview.instances))
            h2 { "Notifications sent by this replica" }
            (notifications_table(&sent))
        },
    )
    .into_response()
}

/// How many of a job's last actions its page shows.
const AUDIT_ON_JOB_PAGE: i64 = 10;

/// A job page's query: the runs' page, and the message of an action just
/// taken (signed, so that a link cannot put its own words there).
#[derive(Debug, Default, Deserialize)]
pub(super) struct JobQuery {
    before: Option<i64>,
    window: Option<String>,
    msg: Option<String>,
    sig: Option<String>,
    exp: Option<u64>,
    bad: Option<String>,
}

fn flash(web: &Shared, job: &str, query: &JobQuery) -> Markup {
    let shown = match (&query.msg, &query.sig, query.exp) {
        (Some(msg), Some(sig), Some(exp))
            if web.auth.is_signed(job, &web.instance, exp, msg, sig) =>
        {
            Some(msg)
        }
        _ => None,
    };
    html! {
        @if let Some(msg) = shown {
            div class={"flash" @if query.bad.is_some() { " bad" }} role="status" { (msg) }
        }
    }
}

/// Whether the job runs after others.
fn is_dependent(job: &JobView) -> bool {
    job.definition.as_ref().is_some_and(|d| !d.after.is_empty())
}

/// Whether the job runs only when triggered.
fn is_manual(job: &JobView) -> bool {
    job.definition
        .as_ref()
        .is_some_and(|d| d.schedule == "@manual")
}

/// The forms of the actions on `job` that `caller`'s token may take
/// (the server checks each all the same).
fn action_forms(web: &Shared, job: &JobView, caller: &Caller) -> Markup {
    let csrf = csrf_of(caller).to_string();
    let action = |name: &str| format!("/jobs/{}/{name}", encode(&job.name));
    let may = |right: Right| web.auth.may(caller, right, &job.name);
    let (trigger, backfill, pause, unlock) = (
        may(Right::Trigger),
        may(Right::Backfill),
        may(Right::Pause),
        may(Right::Unlock),
    );
    html! {
        div class="actions" {
            @match caller {
                Caller::ReadOnly => p class="muted" { "Read-only: set [web] token_env to trigger, pause, resume and unlock from here." },
                Caller::Anonymous => p { a href={"/login?next=/jobs/" (encode(&job.name))} { "Sign in" } " to trigger, pause, resume or unlock." },
                Caller::Session(_) | Caller::Bearer(_) => {
                    @if !(trigger || backfill || pause || unlock) {
                        p class="muted" id="read-only-token" { "The token " code { (caller.token_name().unwrap_or("?")) } " may read " (job.name) ", not act on it." }
                    }
                    @if job.in_config && trigger {
                        form method="post" action=(action("trigger")) {
                            input type="hidden" name="csrf" value=(csrf);
                            @for param in job.definition.iter().flat_map(|d| &d.params) {
                                label {
                                    (param.name) " "
                                    @if param.secret {
                                        input type="password" name={"param." (param.name)}
                                            placeholder=[param.has_default.then_some("default set")]
                                            required[!param.has_default]
                                            autocomplete="off" maxlength="4096" size="12";
                                    } @else {
                                        input type="text" name={"param." (param.name)}
                                            value=[param.default.as_deref()]
                                            required[!param.has_default]
                                            maxlength="4096" size="12";
                                    }
                                }
                            }
                            input type="text" name="reason" placeholder="reason" size="16" maxlength="500";
                            button type="submit" name="go" id="trigger" { "Trigger now" }
                            label { input type="checkbox" name="force" value="on"; " even if paused" }
                        }
                    }
                    @if job.in_config && backfill && !is_manual(job) && job.definition.as_ref().is_some_and(|d| d.run_on == "one" && d.schedule != "@reboot") {
                        form method="post" action=(action("backfill")) {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="text" name="from" placeholder="from (RFC 3339)" size="20" required;
                            input type="text" name="to" placeholder="to, not included" size="20" required;
                            input type="number" name="priority" placeholder="priority" aria-label="priority" min="-1000" max="1000" step="1" title="The instants' priority for locks and limits, -1000 to 1000; empty: behind every other run";
                            label { input type="checkbox" name="rerun_succeeded" value="on"; " rerun succeeded" }
                            label { input type="checkbox" name="force" value="on"; " even if paused" }
                            input type="text" name="reason" placeholder="reason" size="16" maxlength="500";
                            button type="submit" id="backfill" { "Backfill" }
                        }
                    }
                    @if job.in_config && pause {
                        @if job.paused.is_some() {
                            form method="post" action=(action("resume")) {
                                input type="hidden" name="csrf" value=(csrf);
                                input type="text" name="reason" placeholder="reason" size="16" maxlength="500";
                                button type="submit" id="resume" { "Resume" }
                            }
                        } @else {
                            form method="post" action=(action("pause")) {
                                input type="hidden" name="csrf" value=(csrf);
                                input type="text" name="reason" placeholder="reason" size="16" maxlength="500";
                                input type="text" name="until" placeholder="until (2h, RFC 3339)" size="18";
                                button type="submit" id="pause" { "Pause" }
                            }
                        }
                    }
                    @if job.lease.held && unlock {
                        form method="post" action=(action("unlock")) {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="text" name="reason" placeholder="reason" size="16" maxlength="500";
                            button type="submit" id="unlock" { "Unlock" }
                            label { input type="checkbox" name="force" value="on"; " even if its run is recorded running" }
                        }
                    }
                }
            }
        }
    }
}

/// The backfills in progress, each with its progress, and for a signed-in
/// caller a button that cancels it.
fn backfills_table(
    web: &Shared,
    backfills: &[crate::ops::fleet::BackfillMark],
    caller: &Caller,
) -> Markup {
    let csrf = csrf_of(caller).to_string();
    let signed_in = matches!(caller, Caller::Session(_) | Caller::Bearer(_));
    let may = |job: &str| signed_in && web.auth.may(caller, Right::Backfill, job);
    let can_act = backfills.iter().any(|b| may(&b.job));
    html! {
        div class="scroll" tabindex="0" role="region" aria-label="backfills in progress" { table id="backfills" {
            thead { tr { th { "Id" } th { "Job" } th { "Range" } th { "Done" } th { "Failed" } th { "At" } th { "Run by" } @if can_act { th {} } } }
            tbody {
                @for b in backfills {
                    @let p = b.progress.as_ref();
                    tr {
                        td { (p.map(|p| p.id.to_string()).unwrap_or_default()) }
                        td { a href={"/jobs/" (encode(&b.job))} { (b.job) } }
                        td { @if let Some(p) = p { (p.from) " to " (p.to) } }
                        td { @if let Some(p) = p {
                            progress value=(p.done) max=(p.total.max(1)) {}
                            " " (p.done) "/" (p.total)
                        } }
                        td { (p.map(|p| p.failed.to_string()).unwrap_or_default()) }
                        td { (p.and_then(|p| p.current.clone()).unwrap_or_default()) }
                        td { (b.by.clone().unwrap_or_default()) " since " (b.since.clone().unwrap_or_default()) }
                        @if can_act {
                            td { @if may(&b.job) {
                                form method="post" action={"/jobs/" (encode(&b.job)) "/cancel-backfill"} {
                                    input type="hidden" name="csrf" value=(csrf);
                                    @if let Some(p) = p { input type="hidden" name="id" value=(p.id); }
                                    button type="submit" class="cancel-backfill" { "Cancel" }
                                }
                            } }
                        }
                    }
                }
            }
        } }
    }
}

/// The rows of the audit log, newest first.
fn audit_table(entries: &[crate::db::audit::AuditRecord]) -> Markup {
    html! {
        div class="scroll" tabindex="0" role="region" aria-label="audit log" { table id="audit" {
            thead { tr { th { "At" } th { "Via" } th { "Who" } th { "From" } th { "Action" } th { "Job" } th { "Arguments" } th { "Result" } } }
            tbody {
                @if entries.is_empty() { tr { td colspan="8" class="muted" { "No actions recorded." } } }
                @for e in entries {
                    tr class="audit" data-action=(e.action) data-result=(e.result) {
                        td class="nowrap" { (e.acted_at) }
                        td { (e.via) }
                        td { (e.who) @if let Some(sudo) = &e.sudo_user { br; span class="muted" { (crate::db::audit::sudo_claim(sudo)) } } }
                        td { @if let Some(address) = &e.address { (address) br; span class="muted" { "via " (e.host) } } @else { (e.host) } }
                        td { (e.action) }
                        td { @if let Some(job) = &e.job { a href={"/audit?job=" (encode(job))} { (job) } } @else { "-" } }
                        td { code { (e.args_text()) } }
                        td {
                            @if e.result == "done" { span class="badge s-succeeded" { "done" } } @else { span class="badge s-failed" { (e.result) } }
                            @if let Some(detail) = &e.detail { br; span class="muted" { (detail) } }
                        }
                    }
                }
            }
        } }
    }
}

/// `/audit`: the audit log, filtered as `/api/v1/audit` is.
pub(super) async fn audit(
    State(web): State<Shared>,
    Query(query): Query<super::api::AuditQuery>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let now = match web.store.database_now().await {
        Ok(now) => now,
        Err(e) => return unavailable(&web, &caller, e),
    };
    let mut filter = match query.filter(now) {
        Ok(filter) => filter,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                layout(
                    &web,
                    "audit log",
                    false,
                    &caller,
                    html! { h1 { "Audit log" } p class="problem" { (e) } },
                ),
            )
                .into_response();
        }
    };
    super::narrow_audit(&web, &caller, &mut filter);
    let page = match data::audit(&web.store, filter.clone()).await {
        Ok(page) => page,
        Err(e) => return unavailable(&web, &caller, e),
    };
    let mut next = String::new();
    for (key, value) in [
        ("job", &query.job),
        ("action", &query.action),
        ("who", &query.who),
        ("since", &query.since),
        ("until", &query.until),
        ("limit", &query.limit),
    ] {
        if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
            next.push_str(&format!("{key}={}&", encode(value)));
        }
    }
    layout(
        &web,
        "audit log",
        false,
        &caller,
        html! {
            h1 { "Audit log" @if let Some(job) = &filter.job { " of " a href={"/jobs/" (encode(job))} { (job) } } }
            p class="muted" { "Every operator action, from the command line, the API and the dashboard, done or refused; pruned with the history." }
            form method="get" action="/audit" {
                input type="text" name="job" placeholder="job" size="12" value=(query.job.clone().unwrap_or_default());
                " " input type="text" name="action" placeholder="action" size="10" value=(query.action.clone().unwrap_or_default());
                " " input type="text" name="who" placeholder="who" size="10" value=(query.who.clone().unwrap_or_default());
                " " input type="text" name="since" placeholder="since (1d, RFC 3339)" size="16" value=(query.since.clone().unwrap_or_default());
                " " input type="text" name="until" placeholder="until" size="16" value=(query.until.clone().unwrap_or_default());
                " " button type="submit" { "Filter" }
            }
            (audit_table(&page.entries))
            @if let Some(cursor) = &page.next_cursor {
                p { a href={"/audit?" (next) "cursor=" (cursor)} { "Older actions →" } }
            }
        },
    )
    .into_response()
}

pub(super) async fn job(
    State(web): State<Shared>,
    Path(name): Path<String>,
    Query(query): Query<JobQuery>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    if let Some(refused) = out_of_reach(&web, &caller, &name) {
        return refused;
    }
    let config = web.config();
    let overview =
        match data::overview(&web.store, &config, Recent::Runs(CHART_RUNS), Some(&name)).await {
            Ok(o) => o,
            Err(e) => return unavailable(&web, &caller, e),
        };
    let Some(job) = overview.jobs.iter().find(|j| j.name == name) else {
        return (
            StatusCode::NOT_FOUND,
            layout(
                &web,
                "no such job",
                false,
                &caller,
                html! { h1 { "No job " code { (name) } } p { a href="/" { "All jobs" } } },
            ),
        )
            .into_response();
    };
    let window = match super::runs::window_param(query.window.as_deref()) {
        Ok(window) => window,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                layout(
                    &web,
                    &name,
                    false,
                    &caller,
                    html! { h1 { (name) } p class="problem" { (e) } },
                ),
            )
                .into_response();
        }
    };
    let figures = match super::runs::figures(
        &web.store,
        &name,
        config.job(&name),
        window,
        overview.now,
    )
    .await
    {
        Ok(figures) => figures,
        Err(e) => return unavailable(&web, &caller, e),
    };
    let page = data::runs(
        &web.store,
        RunFilter {
            job: Some(name.clone()),
            before_id: query.before,
            limit: RUNS_PER_PAGE,
            ..Default::default()
        },
    )
    .await;
    let page = match page {
        Ok(page) => page,
        Err(e) => return unavailable(&web, &caller, e),
    };
    let now = overview.now;
    let actions = data::audit(
        &web.store,
        crate::db::audit::AuditFilter {
            job: Some(name.clone()),
            limit: AUDIT_ON_JOB_PAGE,
            ..Default::default()
        },
    )
    .await
    .map(|page| page.entries)
    .unwrap_or_default();
    layout(
        &web,
        &name,
        // Not while its forms may be being filled in, nor on older pages.
        query.before.is_none()
            && query.msg.is_none()
            && !matches!(caller, Caller::Session(_) | Caller::Bearer(_)),
        &caller,
        html! {
            h1 { span class={"dot s-" (job_state(job))} {} (job.name) }
            (flash(&web, &job.name, &query))
            @if let Some(problem) = &job.problem { p class="problem" { a href=(super::runs::problem_link(&job.name, problem)) { (problem.headline()) } } }
            dl {
                @if let Some(d) = &job.definition {
                    @if d.after.is_empty() {
                        dt { "Schedule" } dd { code { (d.schedule) } " in " (d.timezone) @if d.jitter_seconds > 0.0 { ", jitter up to " (duration(Some(d.jitter_seconds))) } }
                    } @else {
                        dt { "Runs after" } dd id="after" {
                            @for (i, parent) in d.after.iter().enumerate() {
                                @if i > 0 { ", " }
                                a href={"/jobs/" (encode(parent))} { (parent) }
                            }
                            " (each instant at which " @if d.after.len() > 1 { "every one" } @else { "it" } " ended " (d.after_on.join(" or ")) ")"
                        }
                    }
                    @if !d.dependents.is_empty() {
                        dt { "Then runs" } dd id="dependents" {
                            @for (i, child) in d.dependents.iter().enumerate() {
                                @if i > 0 { ", " }
                                a href={"/jobs/" (encode(child))} { (child) }
                            }
                        }
                    }
                    @if !d.skip_on.is_empty() { dt { "Not on" } dd { "the dates of " (d.skip_on.join(", ")) } }
                    @if !d.only_on.is_empty() { dt { "Only on" } dd { "the dates of " (d.only_on.join(", ")) } }
                    @if d.not_before.is_some() || d.not_after.is_some() {
                        dt { "Window" } dd { (d.not_before.clone().unwrap_or_else(|| "any time".to_string())) " to " (d.not_after.clone().unwrap_or_else(|| "no end".to_string())) @if job.ended { " (ended)" } }
                    }
                    dt { "Command" } dd { code { (d.command) } }
                    dt { "Runs on" } dd { @if d.run_on == "every" { "every replica" } @else { "one replica per instant" } @if let Some(u) = &d.user { ", as " (u) } }
                    @if !d.secret_env.is_empty() {
                        dt { "Secrets" } dd id="secret-env" {
                            @for (i, (name, source)) in d.secret_env.iter().enumerate() {
                                @if i > 0 { ", " }
                                code { (name) } " from " code { (source) }
                            }
                        }
                    }
                    @if !d.locks.is_empty() { dt { "Locks" } dd { (d.locks.join(", ")) } }
                    @if !d.limits.is_empty() { dt { "Limits" } dd { (d.limits.join(", ")) } }
                    dt { "Overlap" } dd { (d.overlap) }
                    dt { "Timeout" } dd { (duration(Some(d.timeout_seconds))) ", lease " (duration(Some(d.lock_at_most_for_seconds))) ", retries " (d.retries) }
                    @if d.warn_after_seconds.is_some() || d.late_after_seconds.is_some() {
                        dt { "Alerts" } dd id="alerts" {
                            @if let Some(w) = d.warn_after_seconds { "long_running after " (duration(Some(w))) }
                            @if d.warn_after_seconds.is_some() && d.late_after_seconds.is_some() { ", " }
                            @if let Some(l) = d.late_after_seconds { "late_start after " (duration(Some(l))) }
                            @if let Some(alerts) = job.alerts.describe() { " · " span class="problem" { "its last run: " (alerts) } }
                        }
                    }
                } @else {
                    dt { "Definition" } dd { "not in the job file (a lease row is left)" }
                }
                dt { "Next start" } dd {
                    @if let (Some(start), Some(secs)) = (&job.next_start, job.next_start_in_seconds) { (local(start)) " (" (relative(secs)) ")" } @else if is_manual(job) { "when triggered (@manual)" } @else if is_dependent(job) { "when its parents end" } @else if job.ended { "none: its window has ended" } @else { "-" }
                }
                dt { "Paused" } dd id="paused" {
                    @if let Some(p) = &job.paused {
                        "by " (p.by.clone().unwrap_or_default()) " since " (p.since.clone().unwrap_or_default())
                        " until " (p.until.clone().unwrap_or_else(|| "resumed".to_string()))
                        @if let Some(r) = &p.reason { " (" (r) ")" }
                    } @else { "no" }
                }
                dt { "Lease" } dd {
                    @if job.lease.held { "held by " (job.lease.holder.clone().unwrap_or_default()) " until " (job.lease.until.clone().unwrap_or_default()) }
                    @else { "free" }
                    " · fence " (job.lease.fence)
                }
                @if let Some(running) = job.running_runs { dt { "Running" } dd id="running" { (running) " runs going" } }
                @if let Some(waiting) = &job.waiting_instant { dt { "Waiting" } dd id="waiting" { (waiting) " waits for the running run" } }
                @if let Some(drift) = &job.drift { dt { "Drift" } dd class="problem" { (drift) } }
                dt { "Durations" } dd { (chart(&job.recent, true)) }
            }
            @if !overview.backfills.is_empty() {
                h2 { "Backfill in progress" }
                (backfills_table(&web, &overview.backfills, &caller))
            }
            (action_forms(&web, job, &caller))
            (super::runs::section(&job.name, &figures))
            h2 { "Runs" }
            p { a href={"/runs?job=" (encode(&name))} id="job-runs" { "Search " (name) "'s runs →" } }
            (super::runs::table(&page.runs, now, &config.telemetry, &super::runs::Table {
                id: "runs",
                with_job: false,
                usual: super::live::usual_of(&job.recent),
                empty: "No runs yet.",
            }))
            @if let Some(cursor) = &page.next_cursor {
                p { a href={"/jobs/" (encode(&name)) "?before=" (cursor)} { "Older runs →" } }
            }
            h2 { "Actions" }
            (audit_table(&actions))
            p { a href={"/audit?job=" (encode(&name))} id="job-audit" { "Every action on " (name) " →" } }
        },
    )
    .into_response()
}

pub(super) async fn run(
    State(web): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let Ok(id) = id.parse::<i64>() else {
        return (StatusCode::BAD_REQUEST, "not a run id\n").into_response();
    };
    let run = match web.store.find_run(id).await {
        Ok(Some(run)) => {
            if let Some(refused) = out_of_reach(&web, &caller, &run.job) {
                return refused;
            }
            let mut record = [RunRecord::from(run)];
            web.store.with_parents(&mut record).await;
            web.store.with_reasons(&mut record).await;
            let [record] = record;
            record
        }
        Ok(None) => {
            return (
                StatusCode::NOT_FOUND,
                layout(
                    &web,
                    "no such run",
                    false,
                    &caller,
                    html! { h1 { "No run " (id) } },
                ),
            )
                .into_response();
        }
        Err(e) => return unavailable(&web, &caller, e),
    };
    // A running run's page follows its output with a script of its own
    // (super::live), not the pages' refresh.
    let output = super::live::section(&web, &run).await;
    layout(
        &web,
        &format!("run {id}"),
        false,
        &caller,
        html! {
            h1 { "Run " (run.id) " of " a href={"/jobs/" (encode(&run.job))} { (run.job) } " " (status_badge(run.status)) }
            dl {
                dt { "Instant" } dd { (run.scheduled_at) }
                dt { "Attempt" } dd { (run.attempt) }
                dt { "Trigger" } dd id="trigger" {
                    (run.triggered_by.as_str())
                    @if !run.parent_runs.is_empty() {
                        ", after "
                        @for (i, parent) in run.parent_runs.iter().enumerate() {
                            @if i > 0 { ", " }
                            a href={"/runs/" (parent)} { "run " (parent) }
                        }
                    }
                }
                @if let Some(reason) = &run.reason {
                    dt { "Reason" } dd id="reason" { (reason) }
                }
                @if !run.params.is_empty() {
                    dt { "Parameters" } dd id="params" {
                        @for (name, value) in &run.params { code { (name) "=" (value) } " " }
                    }
                }
                dt { "Replica" } dd { (run.instance) }
                dt { "Lease fence" } dd { (run.fence) }
                dt { "Started" } dd { (run.started_at) }
                dt { "Finished" } dd { (run.finished_at.clone().unwrap_or_else(|| "-".to_string())) }
                dt { "Duration" } dd { (duration(run.duration_seconds)) }
                dt { "Exit code" } dd { @if let Some(c) = run.exit_code { (c) } @else { "-" } }
                @if let Some(href) = trace_href(&web.config().telemetry, &run) {
                    dt { "Trace" } dd { a id="trace" class="trace" href=(href) rel="noreferrer" { "trace of run " (run.id) } }
                }
            }
            (output)
        },
    )
    .into_response()
}

/// `/login`'s query and form.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Login {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: Option<String>,
}

/// Where to go after signing in: a path of this dashboard, nothing else
/// (no scheme, no `//host`, no characters a browser would strip or bend).
fn local_path(next: Option<&str>) -> String {
    next.filter(|n| {
        n.starts_with('/')
            && !n.starts_with("//")
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "/-._~%?=&+".contains(c))
    })
    .unwrap_or("/")
    .to_string()
}

fn login_page(web: &Shared, caller: &Caller, next: &str, problem: Option<&str>) -> Markup {
    layout(
        web,
        "sign in",
        false,
        caller,
        html! {
            h1 { "Sign in" }
            @if *caller == Caller::ReadOnly {
                p { "Actions are off: this replica has no [web] token_env, so the dashboard is read-only." }
            } @else {
                @if let Some(problem) = problem { div class="flash bad" { (problem) } }
                form method="post" action="/login" {
                    input type="hidden" name="next" value=(next);
                    label { "Token (of [web] token_env or tokens) " input type="password" name="token" id="token" autocomplete="current-password"; }
                    " " button type="submit" id="sign-in" { "Sign in" }
                }
            }
        },
    )
}

pub(super) async fn login_form(
    State(web): State<Shared>,
    Query(query): Query<Login>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    login_page(&web, &caller, &local_path(query.next.as_deref()), None).into_response()
}

pub(super) async fn login(
    State(web): State<Shared>,
    headers: HeaderMap,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    axum::Form(form): axum::Form<Login>,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let next = local_path(form.next.as_deref());
    if !web.auth.actions() {
        return (
            StatusCode::FORBIDDEN,
            login_page(&web, &caller, &next, None),
        )
            .into_response();
    }
    if !same_origin(&headers, web.public.as_ref()) {
        return (StatusCode::FORBIDDEN, "cross-site sign-in refused\n").into_response();
    }
    let client = web.client(peer.map(|peer| peer.0.0.ip()), &headers);
    if let Some(wait) = web.throttle.wait(client) {
        crate::telemetry::sign_in("throttled");
        let seconds = wait.as_secs() + 1;
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, seconds.to_string())],
            login_page(
                &web,
                &caller,
                &next,
                Some(&format!(
                    "Too many wrong tokens from your address: try again in {seconds} s."
                )),
            ),
        )
            .into_response();
    }
    let Some(token_name) = web.auth.token_name(&form.token).map(str::to_string) else {
        let wait = web.throttle.failed(client);
        crate::telemetry::sign_in("refused");
        warn!(
            client = %client,
            wait_s = wait.as_secs(),
            "sign-in refused: not the token"
        );
        return (
            StatusCode::UNAUTHORIZED,
            login_page(&web, &caller, &next, Some("That is not a token.")),
        )
            .into_response();
    };
    web.throttle.succeeded(client);
    let bindings = web.auth.bindings();
    let token_hash = bindings
        .iter()
        .find(|(name, _)| *name == token_name)
        .map_or("", |(_, hash)| hash.as_str());
    match web
        .store
        .create_session(
            &web.instance,
            (&token_name, token_hash),
            super::auth::SESSION_LIFE,
        )
        .await
    {
        Ok((cookie, _)) => {
            crate::telemetry::sign_in("ok");
            info!(client = %client, token = %token_name, "signed in");
            (
                [(
                    header::SET_COOKIE,
                    web.cookie.set(&cookie, super::auth::SESSION_LIFE),
                )],
                Redirect::to(&next),
            )
                .into_response()
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            login_page(
                &web,
                &caller,
                &next,
                Some(&format!("The session could not be stored: {e}")),
            ),
        )
            .into_response(),
    }
}

/// Sign-out: a form of the dashboard's own, with its session's CSRF token
/// (a cross-site form cannot sign anyone out). The session ends on the
/// server, so a copy of the cookie is worth nothing after it.
pub(super) async fn logout(
    State(web): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let csrf_ok = serde_urlencoded::from_bytes::<ActionParams>(&body)
        .ok()
        .and_then(|params| params.csrf)
        .is_some_and(|csrf| caller.is_csrf(&csrf));
    if !csrf_ok || !same_origin(&headers, web.public.as_ref()) {
        return (
            StatusCode::FORBIDDEN,
            "sign-out refused: the form did not come from the dashboard (its CSRF token is missing or wrong)\n",
        )
            .into_response();
    }
    if let Caller::Session(session) = &caller
        && let Err(e) = web.store.revoke_session(&session.id).await
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("sign-out failed: the session could not be ended: {e}\n"),
        )
            .into_response();
    }
    (
        [(header::SET_COOKIE, web.cookie.set("", Duration::ZERO))],
        Redirect::to("/"),
    )
        .into_response()
}

/// A form's POST of an action: a signed-in session with the page's CSRF
/// token, from the dashboard's own origin.
pub(super) async fn act(
    State(web): State<Shared>,
    path: Result<Path<(String, super::Action)>, axum::extract::rejection::PathRejection>,
    headers: HeaderMap,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    body: axum::body::Bytes,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let client = web.client(peer.map(|peer| peer.0.0.ip()), &headers);
    let refused = |status: StatusCode, text: &str| {
        let page = layout(
            &web,
            "refused",
            false,
            &caller,
            html! { h1 { "Refused" } p { (text) } },
        );
        let mut response = (status, page).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"replicron\""),
            );
        }
        response
    };
    match caller {
        Caller::ReadOnly => {
            return refused(
                StatusCode::FORBIDDEN,
                "Actions are off: this replica has no [web] token_env, so the dashboard is read-only.",
            );
        }
        Caller::Anonymous => return refused(StatusCode::UNAUTHORIZED, "Sign in first."),
        Caller::Session(_) | Caller::Bearer(_) => {}
    }
    let mut params: ActionParams = match serde_urlencoded::from_bytes(&body) {
        Ok(params) => ActionParams {
            params: super::form_params(&body),
            ..params
        },
        Err(e) => {
            return refused(
                StatusCode::BAD_REQUEST,
                &format!("The form could not be read: {e}"),
            );
        }
    };
    // A bearer token cannot come from a cross-site form; a session must
    // show its page's CSRF token.
    let csrf_ok = matches!(caller, Caller::Bearer(_))
        || params.csrf.as_deref().is_some_and(|c| caller.is_csrf(c));
    if !csrf_ok || !same_origin(&headers, web.public.as_ref()) {
        return refused(
            StatusCode::FORBIDDEN,
            "This form did not come from the dashboard (its CSRF token is missing or wrong). Reload the page and try again.",
        );
    }
    let (name, action) = match super::action_path(path) {
        Ok(path) => path,
        Err((status, message)) => return refused(status, &message),
    };
    let actor = Actor::web(
        Via::Dashboard,
        caller.token_name().unwrap_or("?"),
        &web.instance,
        client.to_string(),
    );
    // The page showed no form for it; the server checks all the same.
    if let Some(denied) = web.auth.denied(&caller, action.right(), &name) {
        super::refused_unread(&web, &name, action, &actor, &denied.why).await;
        return refused(StatusCode::FORBIDDEN, &denied.why);
    }
    // A secret's box is shown empty: left so, the run gets its default.
    if let Some(job) = web.config().job(&name) {
        params.params.retain(|(param, value)| {
            !(value.is_empty()
                && job.secret_params.contains(param)
                && job
                    .params
                    .iter()
                    .any(|p| &p.name == param && p.default.is_some()))
        });
    }
    let (message, bad) = match super::act(&web, &name, action, &params, &actor).await {
        Ok((_, message)) => (message, false),
        Err((_, message)) => (message, true),
    };
    let expires = super::auth::unix_now() + super::auth::MESSAGE_LIFE.as_secs();
    let signature = web
        .auth
        .sign(&name, &web.instance, expires, &message)
        .unwrap_or_default();
    let mut to = format!(
        "/jobs/{}?msg={}&sig={signature}&exp={expires}",
        encode(&name),
        encode(&message)
    );
    if bad {
        to.push_str("&bad=1");
    }
    Redirect::to(&to).into_response()
}
