//! The runs view: `/runs` and `/api/v1/runs`, one query read from one
//! parameter list ([`RunsParams`]); the overview's failures and misses of
//! the last 24 hours; and a job's figures over a window, with their
//! charts (`docs/design.md#the-runs-view-and-a-jobs-figures`).

use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use maud::{Markup, html};
use serde::Serialize;

use super::markup::{duration, encode, since, status_badge, trace_href};
use crate::db::{DbError, Store};
use crate::history::search::{self, Cursor, RunSearch, SortKey};
use crate::history::{RunRecord, RunStatus, Trigger, rfc3339};

/// The most jobs a sort by duration may name: each is read whole.
const MAX_DURATION_JOBS: usize = 5;

/// The largest page.
pub(crate) const MAX_LIMIT: i64 = 1000;
/// A page unless `limit` says otherwise.
pub(crate) const DEFAULT_LIMIT: i64 = 100;

/// The parameters the runs view takes, in the order its links write them.
const KEYS: [&str; 11] = [
    "job", "status", "replica", "trigger", "from", "to", "instant", "sort", "limit", "cursor",
    "since",
];

/// The statuses the overview lists as failures and misses.
pub(crate) const BAD: [RunStatus; 6] = [
    RunStatus::Failed,
    RunStatus::TimedOut,
    RunStatus::LostLock,
    RunStatus::Abandoned,
    RunStatus::Error,
    RunStatus::Missed,
];

/// A runs view's query, read and checked: the search, and its parameters
/// as given (without the cursor), for the links of its pages.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunsParams {
    /// The search.
    pub(crate) search: RunSearch,
    /// The parameters, without `cursor` and empty ones.
    pub(crate) given: Vec<(String, String)>,
}

fn time_param(key: &str, text: &str, now: DateTime<Utc>) -> Result<NaiveDateTime, String> {
    super::data::parse_since(text, now).map_err(|e| e.replacen("since=", &format!("{key}="), 1))
}

fn sort_param(text: &str) -> Result<(SortKey, bool), String> {
    let (ascending, name) = match text.strip_prefix('-') {
        Some(name) => (false, name),
        None => (true, text),
    };
    SortKey::ALL
        .into_iter()
        .find(|k| k.as_str() == name)
        .map(|k| (k, ascending))
        .ok_or_else(|| {
            format!(
                "sort={text:?}: expected started, scheduled or duration, oldest or shortest first, or with a leading - (-started) newest or longest first"
            )
        })
}

/// The `sort` parameter of a sort.
fn sort_text(sort: SortKey, ascending: bool) -> String {
    format!("{}{}", if ascending { "" } else { "-" }, sort.as_str())
}

/// A cursor as its parameter: the sort, the last row's key and id.
fn cursor_text(sort: SortKey, ascending: bool, cursor: Cursor) -> String {
    format!(
        "{}_{}_{}",
        sort_text(sort, ascending),
        cursor.key,
        cursor.id
    )
}

impl RunsParams {
    /// Reads a query string: repeated parameters (`job=a&job=b`) or, for
    /// `status` and `trigger`, comma-separated values select several;
    /// empty ones are ignored (a form's blank fields). Every value is
    /// checked, and an unknown parameter named.
    pub(crate) fn parse(query: &str, now: DateTime<Utc>) -> Result<RunsParams, String> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
            .map_err(|e| format!("the query string could not be read: {e}"))?;
        let mut params = RunsParams::default();
        let search = &mut params.search;
        search.limit = DEFAULT_LIMIT;
        let mut cursor = None;
        for (key, value) in pairs {
            let value = value.trim().to_string();
            if !KEYS.contains(&key.as_str()) && key != "instance" {
                return Err(format!(
                    "unknown parameter {key:?}: the runs view takes {}",
                    KEYS.join(", ")
                ));
            }
            if value.is_empty() {
                continue;
            }
            let single = !matches!(
                key.as_str(),
                "job" | "status" | "trigger" | "replica" | "instance"
            );
            if single && params.given.iter().any(|(k, _)| *k == key)
                || key == "cursor" && cursor.is_some()
            {
                return Err(format!("{key} is given twice: give it once"));
            }
            if key != "cursor" {
                params.given.push((key.clone(), value.clone()));
            }
            let several = || value.split(',').map(str::trim).filter(|v| !v.is_empty());
            match key.as_str() {
                "job" => {
                    if value.len() > 255 {
                        return Err("job: a job's name is at most 255 characters".to_string());
                    }
                    search.jobs.push(value.clone());
                }
                "status" => {
                    for one in several() {
                        search.statuses.push(RunStatus::from_str(one).map_err(|e| {
                            format!(
                                "status={one:?}: {e}; expected one of {}",
                                RunStatus::ALL.map(|s| s.as_str()).join(", ")
                            )
                        })?);
                    }
                }
                "trigger" => {
                    for one in several() {
                        search.triggers.push(Trigger::from_str(one).map_err(|e| {
                            format!(
                                "trigger={one:?}: {e}; expected one of {}",
                                Trigger::ALL.map(|t| t.as_str()).join(", ")
                            )
                        })?);
                    }
                }
                "replica" | "instance" => search.instances.push(value.clone()),
                "from" | "since" => search.from = Some(time_param(&key, &value, now)?),
                "to" => search.to = Some(time_param(&key, &value, now)?),
                "instant" => {
                    let at = DateTime::parse_from_rfc3339(&value).map_err(|e| {
                        format!(
                            "instant={value:?}: {e}: expected an RFC 3339 time such as 2026-12-01T06:00:00Z"
                        )
                    })?;
                    let at = at.with_timezone(&Utc);
                    crate::db::clock::storable(at)
                        .map_err(|e| format!("instant={value:?}: {e}"))?;
                    search.instant = Some(at.naive_utc());
                }
                "sort" => (search.sort, search.ascending) = sort_param(&value)?,
                "limit" => {
                    search.limit = match value.parse::<i64>() {
                        Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                        _ => return Err(format!("limit={value:?}: expected 1 to {MAX_LIMIT}")),
                    }
                }
                _ => cursor = Some(value.clone()),
            }
        }
        if let (Some(from), Some(to)) = (search.from, search.to)
            && from > to
        {
            return Err("from is after to: nothing started in that range".to_string());
        }
        // No index holds a run's duration: sorted by it, every run the
        // filters leave is read and sorted, which across all jobs is the
        // whole history, on the pool the scheduler claims through.
        // Naming every job would be the same: the jobs are few.
        if search.sort == SortKey::Duration
            && (search.jobs.is_empty() || search.jobs.len() > MAX_DURATION_JOBS)
        {
            return Err(format!(
                "sort=duration needs a job (job=NAME, at most {MAX_DURATION_JOBS}): sorting every job's runs by duration reads the whole history"
            ));
        }
        if let Some(text) = cursor {
            let bad = || format!("cursor={text:?}: pass a next_cursor as given");
            let mut parts = text.rsplitn(3, '_');
            let (Some(id), Some(key), Some(sort)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            if sort != sort_text(search.sort, search.ascending) {
                return Err(format!(
                    "cursor={text:?}: it pages sort={sort}, not sort={}; start again without a cursor",
                    sort_text(search.sort, search.ascending)
                ));
            }
            let (Ok(key), Ok(id)) = (key.parse::<i64>(), id.parse::<i64>()) else {
                return Err(bad());
            };
            if search.sort != SortKey::Duration && search::from_millis(key).is_none() {
                return Err(bad());
            }
            search.after = Some(Cursor { key, id });
        }
        Ok(params)
    }

    /// The query string of this view with `cursor` (none: its first page).
    pub(crate) fn link(&self, cursor: Option<&str>) -> String {
        let mut link = String::from("/runs?");
        for (key, value) in &self.given {
            link.push_str(&format!("{key}={}&", encode(value)));
        }
        if let Some(cursor) = cursor {
            link.push_str(&format!("cursor={}", encode(cursor)));
        }
        link.trim_end_matches(['&', '?']).to_string()
    }

    pub(crate) fn given(&self, key: &str) -> Vec<&str> {
        self.given
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// A page of runs.
#[derive(Debug, Serialize)]
pub(crate) struct RunPage {
    /// The runs, without output.
    pub(crate) runs: Vec<RunRecord>,
    /// Pass as `cursor`, with the same parameters, for the next page;
    /// `None` on the last.
    pub(crate) next_cursor: Option<String>,
}

/// The page `search` asks for.
pub(crate) async fn page(store: &Store, mut search: RunSearch) -> Result<RunPage, DbError> {
    // One more than the page: whether another page follows.
    let limit = search.limit.max(0) as usize;
    search.limit += 1;
    let (sort, ascending) = (search.sort, search.ascending);
    let mut briefs = store.search_runs(search).await?;
    let more = briefs.len() > limit;
    briefs.truncate(limit);
    let next_cursor = more
        .then(|| {
            briefs
                .last()
                .map(|r| cursor_text(sort, ascending, search::cursor_of(r, sort)))
        })
        .flatten();
    let mut runs: Vec<RunRecord> = briefs.iter().map(RunRecord::from).collect();
    store.with_parents(&mut runs).await;
    Ok(RunPage { runs, next_cursor })
}

/// `search` narrowed to the jobs `caller` is shown (a token limited to
/// some jobs: those of the file it reaches); `None` if that leaves none.
pub(crate) fn narrowed(
    web: &super::Web,
    caller: &super::auth::Caller,
    mut search: RunSearch,
) -> Option<RunSearch> {
    if !web.auth.scoped(caller) {
        return Some(search);
    }
    if search.jobs.is_empty() {
        search.jobs = super::shown_jobs(web, caller);
    } else {
        search.jobs.retain(|job| web.auth.shows(caller, job));
    }
    (!search.jobs.is_empty()).then_some(search)
}

/// [`page`] of `search` as `caller` is shown it: no runs of a job its
/// token does not reach.
pub(crate) async fn page_for(
    web: &super::Web,
    caller: &super::auth::Caller,
    search: RunSearch,
) -> Result<RunPage, DbError> {
    match narrowed(web, caller, search) {
        Some(search) => page(&web.store, search).await,
        None => Ok(RunPage {
            runs: Vec::new(),
            next_cursor: None,
        }),
    }
}

/// How a runs table is drawn.
pub(crate) struct Table<'a> {
    /// The table's element id.
    pub(crate) id: &'a str,
    /// With a column of each run's job (not on the job's own page).
    pub(crate) with_job: bool,
    /// The job's usual duration and how many runs it is of, for a running
    /// run's "usually".
    pub(crate) usual: Option<(f64, usize)>,
    /// What an empty table says.
    pub(crate) empty: &'a str,
}

/// A table of runs, each run's id (and job) a link of its own: the runs
/// view's and a job's page's.
pub(crate) fn table(
    runs: &[RunRecord],
    now: DateTime<Utc>,
    telemetry: &crate::config::TelemetryConfig,
    how: &Table<'_>,
) -> Markup {
    let columns = if how.with_job { 10 } else { 9 };
    html! {
        div class="scroll" tabindex="0" role="region" aria-label="runs" { table id=(how.id) {
            thead { tr {
                th { "Run" } @if how.with_job { th { "Job" } } th { "Instant" } th { "Attempt" } th { "Trigger" }
                th { "Replica" } th { "Started" } th { "Duration" } th { "Status" } th { "Exit" }
            } }
            tbody {
                @if runs.is_empty() { tr { td colspan=(columns) class="muted" { (how.empty) } } }
                @for run in runs {
                    tr class="run" data-status=(run.status.as_str()) {
                        td class="num" {
                            a href={"/runs/" (run.id)} { (run.id) }
                            @if let Some(href) = trace_href(telemetry, run) { br; a class="trace" href=(href) rel="noreferrer" { "trace" } }
                        }
                        @if how.with_job { td { a href={"/jobs/" (encode(&run.job))} { (run.job) } } }
                        td class="nowrap" { (run.scheduled_at) }
                        td class="num" { (run.attempt) }
                        td { (run.triggered_by.as_str()) }
                        td { (run.instance) }
                        td class="nowrap" { (run.started_at) br; span class="muted" { (since(now, &run.started_at)) } }
                        td class="num" {
                            @if run.status == RunStatus::Running { (super::live::running_for(now, run, how.usual)) }
                            @else { (duration(run.duration_seconds)) }
                        }
                        td { (status_badge(run.status)) }
                        td class="num" { @if let Some(code) = run.exit_code { (code) } @else { "-" } }
                    }
                }
            }
        } }
    }
}

/// How many failures and misses the overview lists.
const FAILURES_SHOWN: i64 = 20;

/// The overview's section: runs that failed and instants missed in the
/// last 24 hours, newest first.
pub(crate) async fn failures(
    web: &super::Web,
    caller: &super::auth::Caller,
    now: DateTime<Utc>,
) -> Markup {
    let from = (now - TimeDelta::hours(24)).naive_utc();
    let found = page_for(
        web,
        caller,
        RunSearch {
            statuses: BAD.to_vec(),
            from: Some(from),
            limit: FAILURES_SHOWN,
            ..Default::default()
        },
    )
    .await;
    let all = format!(
        "/runs?{}from=24h",
        BAD.iter()
            .map(|s| format!("status={}&", s.as_str()))
            .collect::<String>()
    );
    html! {
        section aria-labelledby="failures-title" {
            h2 id="failures-title" { "Failures and misses in the last 24 h" }
            @match found {
                Err(e) => p class="problem" { (e.to_string()) },
                Ok(page) if page.runs.is_empty() => p class="muted" id="no-failures" { "None." },
                Ok(page) => {
                    div class="scroll" tabindex="0" role="region" aria-label="failures and misses" { table id="failures" {
                        thead { tr { th { "Started" } th { "Job" } th { "Status" } th { "Replica" } th { "See" } } }
                        tbody {
                            @for run in &page.runs {
                                tr class="failure" data-status=(run.status.as_str()) {
                                    td class="nowrap" { (since(now, &run.started_at)) br; span class="muted" { (run.started_at) } }
                                    td { a href={"/jobs/" (encode(&run.job))} { (run.job) } }
                                    td { (status_badge(run.status)) @if let Some(code) = run.exit_code { " exit " (code) } }
                                    td { (run.instance) }
                                    td {
                                        @if run.status == RunStatus::Missed {
                                            a href=(instant_link(&run.job, &run.scheduled_at)) { "instant " (run.scheduled_at) }
                                        } @else {
                                            a href={"/runs/" (run.id)} { "run " (run.id) }
                                        }
                                    }
                                }
                            }
                        }
                    } }
                    @if page.next_cursor.is_some() { p { a href=(all) id="all-failures" { "All failures and misses of the last 24 h →" } } }
                }
            }
        }
    }
}

/// The runs view of one instant of `job` (RFC 3339).
pub(crate) fn instant_link(job: &str, instant: &str) -> String {
    format!("/runs?job={}&instant={}", encode(job), encode(instant))
}

/// Where a problem points: its run, or the job's runs.
pub(crate) fn problem_link(job: &str, problem: &crate::ops::fleet::Problem) -> String {
    match problem.run() {
        Some(id) => format!("/runs/{id}"),
        None => format!("/runs?job={}", encode(job)),
    }
}

/// The windows a job's figures are read over.
pub(crate) const WINDOWS: [(&str, i64); 4] = [
    ("1h", 3600),
    ("24h", 86400),
    ("7d", 7 * 86400),
    ("30d", 30 * 86400),
];

/// The window a `window` parameter names (none or empty: 24 h).
pub(crate) fn window_param(text: Option<&str>) -> Result<(&'static str, i64), String> {
    window_among(&WINDOWS, "24h", text)
}

/// The one of `windows` (each a name and its seconds) that a `window`
/// parameter names, `default`'s when it is missing or empty.
pub(crate) fn window_among(
    windows: &[(&'static str, i64)],
    default: &str,
    text: Option<&str>,
) -> Result<(&'static str, i64), String> {
    let text = text
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(default);
    windows
        .iter()
        .copied()
        .find(|(name, _)| *name == text)
        .ok_or_else(|| {
            let names: Vec<&str> = windows.iter().map(|(name, _)| *name).collect();
            format!("window={text:?}: expected one of {}", names.join(", "))
        })
}

/// The most runs a job's percentiles, overruns and charts are read from
/// (the newest of the window); the counts are over the whole window.
pub(crate) const SAMPLE_CAP: i64 = 10_000;

/// A job's figures over a window.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub(crate) struct Figures {
    /// The window's name (`24h`).
    pub(crate) window: String,
    /// Its start (RFC 3339, UTC): runs that started at or after it count.
    pub(crate) from: String,
    /// Its end: the database's now.
    pub(crate) to: String,
    /// Rows of runs in it (every attempt; missed instants not included).
    pub(crate) runs: i64,
    /// Of those, how many succeeded.
    pub(crate) succeeded: i64,
    /// How many ended otherwise (failed, timed out, lost their lock, were
    /// abandoned, killed, replaced, or could not start).
    pub(crate) failed: i64,
    /// How many are running.
    pub(crate) running: i64,
    /// Succeeded of ended (skipped instants not counted), 0 to 1; `None`
    /// with none ended.
    pub(crate) success_rate: Option<f64>,
    /// Start lateness of its scheduled first attempts (start − instant −
    /// jitter delay), in seconds: the median and the 99th percentile.
    pub(crate) lateness_p50_seconds: Option<f64>,
    /// See `lateness_p50_seconds`.
    pub(crate) lateness_p99_seconds: Option<f64>,
    /// Durations of the runs that ended, in seconds.
    pub(crate) duration_p50_seconds: Option<f64>,
    /// See `duration_p50_seconds`.
    pub(crate) duration_p99_seconds: Option<f64>,
    /// Instants recorded `missed`.
    pub(crate) misses: i64,
    /// Instants recorded `skipped` (a shared lock stayed held).
    pub(crate) skipped: i64,
    /// Instants of its schedule that came while one of its runs was going
    /// and have no row: shed as overruns.
    pub(crate) overruns: i64,
    /// How many runs the percentiles, overruns and charts read: the
    /// newest [`SAMPLE_CAP`] of the window.
    pub(crate) sampled: i64,
    /// Whether they are all of the window's runs.
    pub(crate) sample_complete: bool,
    /// The charts' buckets, oldest first.
    #[serde(skip)]
    pub(crate) buckets: Vec<Bucket>,
}

/// One bar of a job's charts.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Bucket {
    /// Its start.
    pub(crate) start: DateTime<Utc>,
    /// Runs that started in it.
    pub(crate) runs: usize,
    /// The longest of their durations, in seconds.
    pub(crate) longest: Option<f64>,
    /// The latest of their starts, in seconds.
    pub(crate) latest: Option<f64>,
    /// Whether one of them ended badly or was missed.
    pub(crate) bad: bool,
}

/// The value at quantile `q` of sorted `values`, by nearest rank.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// How many buckets a chart has.
const BUCKETS: usize = 48;
/// The most instants of the schedule examined for overruns.
const MAX_INSTANTS: usize = 100_000;

fn seconds(d: TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}

/// Computes a job's figures from its window's counts and newest runs.
pub(crate) fn compute(
    job: Option<&crate::config::Job>,
    window: (&str, i64),
    now: DateTime<Utc>,
    counts: &[(RunStatus, i64)],
    sample: &[search::Sample],
) -> Figures {
    let from = now - TimeDelta::seconds(window.1);
    let count = |wanted: &[RunStatus]| -> i64 {
        counts
            .iter()
            .filter(|(s, _)| wanted.contains(s))
            .map(|(_, n)| n)
            .sum()
    };
    let total: i64 = counts.iter().map(|(_, n)| n).sum();
    let misses = count(&[RunStatus::Missed]);
    let skipped = count(&[RunStatus::Skipped]);
    let succeeded = count(&[RunStatus::Succeeded]);
    let running = count(&[RunStatus::Running]);
    let failed = total - misses - skipped - succeeded - running;
    let ended = succeeded + failed;
    let ran = |s: &search::Sample| {
        s.attempt > 0 && !matches!(s.status, RunStatus::Missed | RunStatus::Skipped)
    };
    let start_of = |instant: NaiveDateTime| {
        job.map_or(instant.and_utc(), |j| {
            j.schedule.start_of(instant.and_utc())
        })
    };
    let late = |s: &search::Sample| {
        (ran(s) && s.attempt == 1 && s.triggered_by == Trigger::Schedule)
            .then(|| seconds(s.started_at.and_utc() - start_of(s.scheduled_at)))
    };
    let took = |s: &search::Sample| {
        ran(s)
            .then(|| s.finished_at.map(|end| seconds(end - s.started_at)))
            .flatten()
    };
    let sorted = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values
    };
    let lateness = sorted(sample.iter().filter_map(late).collect());
    let durations = sorted(sample.iter().filter_map(took).collect());
    let complete = (sample.len() as i64) >= total || sample.len() < SAMPLE_CAP as usize;
    // The sample's span: the whole window, or from its oldest run on.
    let span_from = if complete {
        from
    } else {
        sample
            .iter()
            .map(|s| s.started_at.and_utc())
            .min()
            .unwrap_or(from)
    };
    let overruns = job.map_or(0, |j| overruns(&j.schedule, sample, span_from, now));
    let step = (window.1 as f64 / BUCKETS as f64).max(1.0);
    let mut buckets: Vec<Bucket> = (0..BUCKETS)
        .map(|i| Bucket {
            start: from + TimeDelta::milliseconds((step * 1000.0 * i as f64) as i64),
            ..Default::default()
        })
        .collect();
    for s in sample {
        let offset = seconds(s.started_at.and_utc() - from);
        if offset < 0.0 {
            continue;
        }
        let Some(bucket) = buckets.get_mut(((offset / step) as usize).min(BUCKETS - 1)) else {
            continue;
        };
        bucket.runs += 1;
        if let Some(d) = took(s) {
            bucket.longest = Some(bucket.longest.map_or(d, |l| l.max(d)));
        }
        if let Some(l) = late(s) {
            bucket.latest = Some(bucket.latest.map_or(l, |m| m.max(l)));
        }
        bucket.bad |= BAD.contains(&s.status);
    }
    Figures {
        window: window.0.to_string(),
        from: rfc3339(from.naive_utc()),
        to: rfc3339(now.naive_utc()),
        runs: total - misses,
        succeeded,
        failed,
        running,
        success_rate: (ended > 0).then(|| succeeded as f64 / ended as f64),
        lateness_p50_seconds: percentile(&lateness, 0.5),
        lateness_p99_seconds: percentile(&lateness, 0.99),
        duration_p50_seconds: percentile(&durations, 0.5),
        duration_p99_seconds: percentile(&durations, 0.99),
        misses,
        skipped,
        overruns,
        sampled: sample.len() as i64,
        sample_complete: complete,
        buckets,
    }
}

/// The instants of `schedule` in `[from, to]` that have no row in
/// `sample` and came while one of its runs was going (from its start to
/// its end, or now).
fn overruns(
    schedule: &crate::schedule::Schedule,
    sample: &[search::Sample],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> i64 {
    let recorded: std::collections::HashSet<i64> = sample
        .iter()
        .map(|s| search::millis(s.scheduled_at))
        .collect();
    let mut spans: Vec<(DateTime<Utc>, DateTime<Utc>)> = sample
        .iter()
        .filter(|s| s.attempt > 0 && !matches!(s.status, RunStatus::Missed | RunStatus::Skipped))
        .map(|s| {
            (
                s.started_at.and_utc(),
                s.finished_at.map_or(to, |end| end.and_utc()),
            )
        })
        .collect();
    spans.sort();
    let (mut next_span, mut reach) = (0, None::<DateTime<Utc>>);
    let mut count = 0;
    let mut cursor = from - TimeDelta::milliseconds(1);
    for _ in 0..MAX_INSTANTS {
        let Some(instant) = schedule.next_after(cursor).filter(|i| *i <= to) else {
            break;
        };
        cursor = instant;
        while let Some((start, end)) = spans.get(next_span).filter(|(s, _)| *s <= instant) {
            reach = Some(reach.map_or(*end, |r| r.max(*end)));
            let _ = start;
            next_span += 1;
        }
        if reach.is_some_and(|r| r > instant) && !recorded.contains(&instant.timestamp_millis()) {
            count += 1;
        }
    }
    count
}

/// `job`'s figures over `window`, read at the database's `now`.
pub(crate) async fn figures(
    store: &Store,
    job_name: &str,
    job: Option<&crate::config::Job>,
    window: (&str, i64),
    now: DateTime<Utc>,
) -> Result<Figures, DbError> {
    let from = (now - TimeDelta::seconds(window.1)).naive_utc();
    let (counts, sample) = store.run_window(job_name, from, SAMPLE_CAP).await?;
    Ok(compute(job, window, now, &counts, &sample))
}

fn shown(value: Option<f64>) -> String {
    match value {
        Some(s) if s < 0.0 => format!("-{}", duration(Some(-s))),
        other => duration(other),
    }
}

/// A chart of one value per bucket: a bar each, its height the bucket's
/// value against the largest; a bucket with a failure or miss is marked.
fn bars(
    figures: &Figures,
    title: &str,
    id: &str,
    value: impl Fn(&Bucket) -> Option<f64>,
) -> Markup {
    const BAR: usize = 6;
    const HEIGHT: f64 = 40.0;
    let largest = figures
        .buckets
        .iter()
        .filter_map(&value)
        .fold(0.0_f64, f64::max)
        .max(0.001);
    let width = BAR * figures.buckets.len();
    let label = format!(
        "{title} over the last {}, {} bars of {} each, largest {}",
        figures.window,
        figures.buckets.len(),
        humantime::format_duration(std::time::Duration::from_secs(
            WINDOWS
                .iter()
                .find(|(n, _)| *n == figures.window)
                .map_or(0, |(_, s)| *s as u64)
                / figures.buckets.len().max(1) as u64
        )),
        shown(Some(largest))
    );
    html! {
        svg class="figchart" id=(id) width=(width) height=(HEIGHT as usize + 4) viewBox={"0 0 " (width) " " (HEIGHT as usize + 4)} role="img" aria-label=(label) {
            title { (label) }
            @for (i, b) in figures.buckets.iter().enumerate() {
                @if let Some(v) = value(b) {
                    @let h = (v.max(0.0) / largest * HEIGHT).max(1.0);
                    rect class=(if b.bad { "bar bad" } else { "bar" }) x=(i * BAR) y=(format!("{:.1}", HEIGHT - h)) width=(BAR - 1) height=(format!("{h:.1}")) {}
                }
                @if b.bad { rect class="badmark" x=(i * BAR) y=(HEIGHT as usize + 1) width=(BAR - 1) height="3" {} }
            }
        }
    }
}

/// The figures section of a job's page: the window's links, the
/// figures, the charts, and the charts' values as a table.
pub(crate) fn section(job: &str, figures: &Figures) -> Markup {
    let rate = figures
        .success_rate
        .map_or("-".to_string(), |r| format!("{:.1} %", r * 100.0));
    html! {
        section id="figures" aria-labelledby="figures-title" {
            h2 id="figures-title" { "Figures over the last " (figures.window) }
            nav class="windows" aria-label="window" {
                @for (name, _) in WINDOWS {
                    @if name == figures.window { strong aria-current="page" { (name) } } @else { a href={"/jobs/" (encode(job)) "?window=" (name) "#figures"} { (name) } }
                    " "
                }
            }
            dl class="figures" {
                dt { "Runs" } dd id="fig-runs" { (figures.runs) " (" (figures.succeeded) " succeeded, " (figures.failed) " not, " (figures.running) " running)" }
                dt { "Success rate" } dd id="fig-success" { (rate) }
                dt { "Start lateness" } dd id="fig-lateness" { "p50 " (shown(figures.lateness_p50_seconds)) ", p99 " (shown(figures.lateness_p99_seconds)) }
                dt { "Duration" } dd id="fig-duration" { "p50 " (shown(figures.duration_p50_seconds)) ", p99 " (shown(figures.duration_p99_seconds)) }
                dt { "Misses" } dd id="fig-misses" {
                    @if figures.misses > 0 {
                        a href={"/runs?job=" (encode(job)) "&status=missed&from=" (encode(&figures.from))} { (figures.misses) }
                    } @else { "0" }
                }
                dt { "Overruns" } dd id="fig-overruns" { (figures.overruns) @if figures.skipped > 0 { ", and " (figures.skipped) " skipped (a shared lock stayed held)" } }
                @if !figures.sample_complete { dt { "Read" } dd { "percentiles, overruns and charts from the newest " (figures.sampled) " runs" } }
            }
            div class="charts" {
                figure {
                    (bars(figures, "Longest duration per bar", "chart-duration", |b| b.longest))
                    figcaption { "Longest duration; marked below: a failure or miss" }
                }
                figure {
                    (bars(figures, "Latest start per bar", "chart-lateness", |b| b.latest))
                    figcaption { "Latest start" }
                }
            }
            details {
                summary { "The charts' values" }
                div class="scroll" tabindex="0" role="region" aria-label="the charts' values" { table id="figures-table" {
                    thead { tr { th { "From" } th { "Runs" } th { "Longest" } th { "Latest start" } th { "Failure or miss" } } }
                    tbody {
                        @for b in figures.buckets.iter().filter(|b| b.runs > 0) {
                            tr {
                                td class="nowrap" { (crate::schedule::fmt_instant(b.start)) }
                                td class="num" { (b.runs) }
                                td class="num" { (shown(b.longest)) }
                                td class="num" { (shown(b.latest)) }
                                td { @if b.bad { "yes" } @else { "no" } }
                            }
                        }
                    }
                } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2027-01-02T00:00:00Z")
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn every_parameter_is_checked_and_named() {
        for (query, named) in [
            ("status=done", "status="),
            ("trigger=cron", "trigger="),
            ("from=yesterday", "from="),
            ("to=soon", "to="),
            ("since=x", "since="),
            ("instant=1h", "instant="),
            ("sort=name", "sort="),
            ("limit=0", "limit="),
            ("limit=1001", "limit="),
            ("cursor=12", "cursor="),
            ("cursor=-duration_5_1", "cursor="),
            ("sort=duration", "sort=duration needs a job"),
            (
                "sort=duration&job=a&job=b&job=c&job=d&job=e&job=f",
                "at most 5",
            ),
            ("colour=red", "\"colour\""),
            ("limit=1&limit=2", "limit is given twice"),
            (
                "from=2027-01-02T00:00:00Z&to=2027-01-01T00:00:00Z",
                "from is after to",
            ),
        ] {
            let e = RunsParams::parse(query, now()).expect_err(query);
            assert!(e.contains(named), "{query}: {e}");
        }
    }

    #[test]
    fn several_values_and_a_cursor_are_read() {
        let params = RunsParams::parse(
            "job=a&job=b&status=failed,missed&status=&trigger=manual&replica=r1&sort=-duration&limit=5&cursor=-duration_1500_42",
            now(),
        )
        .expect("parse");
        let s = &params.search;
        assert_eq!(s.jobs, ["a", "b"]);
        assert_eq!(s.statuses, [RunStatus::Failed, RunStatus::Missed]);
        assert_eq!(s.triggers, [Trigger::Manual]);
        assert_eq!(s.instances, ["r1"]);
        assert_eq!(
            (s.sort, s.ascending, s.limit),
            (SortKey::Duration, false, 5)
        );
        assert_eq!(s.after, Some(Cursor { key: 1500, id: 42 }));
        assert_eq!(
            params.link(Some("-duration_1_2")),
            "/runs?job=a&job=b&status=failed%2Cmissed&trigger=manual&replica=r1&sort=-duration&limit=5&cursor=-duration_1_2"
        );
    }

    #[test]
    fn percentiles_are_by_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(50.0));
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
