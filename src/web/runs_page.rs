//! `GET /runs`: the runs of every job, filtered as `/api/v1/runs` is, in
//! the dashboard's page.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::Shared;
use super::pages::{layout, unavailable};
use super::runs::{RunsParams, Table, page_for, table};
use crate::history::{RunStatus, Trigger};

fn form(params: &RunsParams, jobs: &[String]) -> Markup {
    let chosen = |key: &str, value: &str| {
        params
            .given(key)
            .iter()
            .any(|v| *v == value || (key != "job" && v.split(',').any(|one| one.trim() == value)))
    };
    let one = |key: &str| {
        params
            .given(key)
            .first()
            .map(|v| v.to_string())
            .unwrap_or_default()
    };
    let sort = one("sort");
    html! {
        form method="get" action="/runs" class="runs-filter" aria-label="filter the runs" {
            label for="f-job" { "Job" }
            select id="f-job" name="job" multiple size="4" {
                @for job in jobs { option value=(job) selected[chosen("job", job)] { (job) } }
            }
            label for="f-status" { "Status" }
            select id="f-status" name="status" multiple size="4" {
                @for s in RunStatus::ALL { option value=(s.as_str()) selected[chosen("status", s.as_str())] { (s.as_str()) } }
            }
            label for="f-trigger" { "Trigger" }
            select id="f-trigger" name="trigger" multiple size="4" {
                @for t in Trigger::ALL { option value=(t.as_str()) selected[chosen("trigger", t.as_str())] { (t.as_str()) } }
            }
            label for="f-replica" { "Replica" }
            input id="f-replica" type="text" name="replica" size="14" value=(one("replica"));
            label for="f-from" { "Started from" }
            input id="f-from" type="text" name="from" size="18" placeholder="24h or RFC 3339" value=(one("from"));
            label for="f-to" { "to (not included)" }
            input id="f-to" type="text" name="to" size="18" placeholder="RFC 3339 or 1h" value=(one("to"));
            label for="f-instant" { "Instant" }
            input id="f-instant" type="text" name="instant" size="18" placeholder="RFC 3339" value=(one("instant"));
            label for="f-sort" { "Sort" }
            select id="f-sort" name="sort" {
                @for (value, text) in [("-started", "newest start first"), ("started", "oldest start first"), ("-scheduled", "newest instant first"), ("scheduled", "oldest instant first"), ("-duration", "longest first"), ("duration", "shortest first")] {
                    option value=(value) selected[sort == value || (sort.is_empty() && value == "-started")] { (text) }
                }
            }
            label for="f-limit" { "Per page" }
            select id="f-limit" name="limit" {
                @for n in ["25", "50", "100", "200", "500"] {
                    option value=(n) selected[one("limit") == n || (one("limit").is_empty() && n == "100")] { (n) }
                }
            }
            button type="submit" id="filter" { "Show runs" }
        }
    }
}

/// `GET /runs`.
pub(super) async fn view(
    State(web): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let now = match web.store.database_now().await {
        Ok(now) => now,
        Err(e) => return unavailable(&web, &caller, e),
    };
    let config = web.config();
    let jobs: Vec<String> = config
        .jobs
        .iter()
        .map(|j| j.name.to_string())
        .filter(|job| web.auth.shows(&caller, job))
        .collect();
    let params = match RunsParams::parse(query.as_deref().unwrap_or(""), now) {
        Ok(params) => params,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                layout(
                    &web,
                    "runs",
                    false,
                    &caller,
                    html! {
                        h1 { "Runs" }
                        p class="problem" role="alert" id="error" { (e) }
                        (form(&RunsParams::default(), &jobs))
                    },
                ),
            )
                .into_response();
        }
    };
    let page = match page_for(&web, &caller, params.search.clone()).await {
        Ok(page) => page,
        Err(e) => return unavailable(&web, &caller, e),
    };
    layout(
        &web,
        "runs",
        false,
        &caller,
        html! {
            h1 { "Runs" }
            (form(&params, &jobs))
            p class="muted" {
                (page.runs.len()) " runs shown. "
                a href=(params.link(None)) id="runs-link" { "Link to this view" }
                " · " a href={"/api/v1/runs" (params.link(None).trim_start_matches("/runs"))} { "as JSON" }
            }
            (table(&page.runs, now, &config.telemetry, &Table { id: "runs", with_job: true, usual: None, empty: "No runs match." }))
            nav class="pages" aria-label="pages" {
                @if params.search.after.is_some() { a href=(params.link(None)) id="first-page" { "← First page" } " " }
                @if let Some(cursor) = &page.next_cursor { a href=(params.link(Some(cursor))) id="next-page" rel="next" { "Next page →" } }
            }
        },
    )
    .into_response()
}
