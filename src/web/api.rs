//! `/api/v1/`: the JSON API (`docs/api.md`, `docs/openapi.json`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::auth::{CSRF_HEADER, Caller, same_origin};
use super::data::{self, Recent};
use super::{ActionParams, Shared};
use crate::db::audit::{Action, Actor, AuditFilter, Via};
use crate::history::{RunFilter, RunRecord};

/// The largest page of `runs`.
const MAX_LIMIT: i64 = 1000;
/// A page of `runs` unless `limit` says otherwise.
const DEFAULT_LIMIT: i64 = 100;

/// An API error: `{"error": message}` with `status`.
pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// The answer to a token that lacks a right: 403, naming the right and
/// the job.
pub(super) fn forbidden(denied: &super::auth::Denied) -> Response {
    (
        StatusCode::FORBIDDEN,
        Json(json!({
            "error": denied.why,
            "right": denied.right.as_str(),
            "job": denied.job,
        })),
    )
        .into_response()
}

/// The API's answer when the database did not answer.
pub(super) fn unavailable(e: impl std::fmt::Display) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

pub(super) async fn jobs(State(web): State<Shared>, headers: HeaderMap) -> Response {
    let caller = super::caller(&web, &headers).await;
    let config = web.config();
    match data::overview(&web.store, &config, Recent::Last, None).await {
        Ok(mut overview) => {
            super::narrow_overview(&web, &caller, &mut overview);
            Json(json!({
            "database_now": crate::schedule::fmt_instant(overview.now),
            "jobs": overview.jobs,
            "backfills": overview.backfills,
            }))
            .into_response()
        }
        Err(e) => unavailable(e),
    }
}

/// The answer to `caller` asking to read the job `name`, if its token
/// does not reach it: 403, naming the right and the job.
fn out_of_reach(web: &super::Web, caller: &Caller, name: &str) -> Option<Response> {
    (!web.auth.shows(caller, name)).then(|| {
        let denied = web
            .auth
            .denied(caller, crate::config::Right::Read, name)
            .unwrap_or_else(|| super::auth::Denied {
                why: format!("{name}: not shown to this token"),
                right: crate::config::Right::Read,
                job: name.to_string(),
            });
        forbidden(&denied)
    })
}

/// `job`'s query: the window of its figures.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct JobQuery {
    window: Option<String>,
}

pub(super) async fn job(
    State(web): State<Shared>,
    Path(name): Path<String>,
    query: Result<Query<JobQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    if let Some(refused) = out_of_reach(&web, &caller, &name) {
        return refused;
    }
    let window = match query
        .map_err(|e| e.body_text())
        .and_then(|Query(q)| super::runs::window_param(q.window.as_deref()))
    {
        Ok(window) => window,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let config = web.config();
    let overview = match data::overview(&web.store, &config, Recent::Last, Some(&name)).await {
        Ok(overview) => overview,
        Err(e) => return unavailable(e),
    };
    let backfills = overview.backfills;
    let Some(job) = overview.jobs.into_iter().find(|j| j.name == name) else {
        return error(StatusCode::NOT_FOUND, format!("no job {name:?}"));
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
        Err(e) => return unavailable(e),
    };
    let mut value = serde_json::to_value(&job).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert(
            "figures".to_string(),
            serde_json::to_value(&figures).unwrap_or_default(),
        );
        object.insert(
            "backfills".to_string(),
            serde_json::to_value(&backfills).unwrap_or_default(),
        );
    }
    Json(value).into_response()
}

/// The parameters the audit log's query shares with the history's older
/// filter (the runs view has its own, `runs::RunsParams`).
#[derive(Debug, Default)]
pub(crate) struct RunsQuery {
    job: Option<String>,
    since: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

impl RunsQuery {
    /// The filter it asks for, or what is wrong with it.
    pub(crate) fn filter(&self, now: chrono::DateTime<chrono::Utc>) -> Result<RunFilter, String> {
        let limit = match self.limit.as_deref() {
            None | Some("") => DEFAULT_LIMIT,
            Some(text) => match text.parse::<i64>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => return Err(format!("limit={text:?}: expected 1 to {MAX_LIMIT}")),
            },
        };
        let since = match self.since.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => Some(data::parse_since(text, now)?),
        };
        let before_id = match self.cursor.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => Some(
                text.parse::<i64>()
                    .map_err(|_| format!("cursor={text:?}: pass a next_cursor as given"))?,
            ),
        };
        Ok(RunFilter {
            job: self.job.clone().filter(|j| !j.is_empty()),
            since,
            before_id,
            limit,
            ..Default::default()
        })
    }
}

/// `audit`'s query.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct AuditQuery {
    pub(crate) job: Option<String>,
    pub(crate) action: Option<String>,
    pub(crate) who: Option<String>,
    pub(crate) since: Option<String>,
    pub(crate) until: Option<String>,
    pub(crate) limit: Option<String>,
    pub(crate) cursor: Option<String>,
}

impl AuditQuery {
    /// The filter it asks for, or what is wrong with it.
    pub(crate) fn filter(&self, now: chrono::DateTime<chrono::Utc>) -> Result<AuditFilter, String> {
        let runs = RunsQuery {
            job: self.job.clone(),
            since: self.since.clone(),
            limit: self.limit.clone(),
            cursor: self.cursor.clone(),
        }
        .filter(now)?;
        let given = |value: &Option<String>| value.clone().filter(|v| !v.is_empty());
        let until = match given(&self.until) {
            None => None,
            Some(text) => {
                Some(data::parse_since(&text, now).map_err(|e| e.replacen("since=", "until=", 1))?)
            }
        };
        Ok(AuditFilter {
            job: runs.job,
            action: given(&self.action).map(|a| Action::parse(&a)).transpose()?,
            who: given(&self.who),
            since: runs.since,
            until,
            before_id: runs.before_id,
            limit: runs.limit,
            jobs: None,
        })
    }
}

pub(super) async fn audit(
    State(web): State<Shared>,
    Query(query): Query<AuditQuery>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let now = match web.store.database_now().await {
        Ok(now) => now,
        Err(e) => return unavailable(e),
    };
    let mut filter = match query.filter(now) {
        Ok(filter) => filter,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    super::narrow_audit(&web, &caller, &mut filter);
    match data::audit(&web.store, filter).await {
        Ok(page) => Json(page).into_response(),
        Err(e) => unavailable(e),
    }
}

pub(super) async fn run(
    State(web): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let Ok(id) = id.parse::<i64>() else {
        return error(StatusCode::BAD_REQUEST, format!("{id:?} is not a run id"));
    };
    match web.store.find_run(id).await {
        Ok(Some(run)) => {
            if let Some(refused) = out_of_reach(&web, &caller, &run.job) {
                return refused;
            }
            let mut record = [RunRecord::from(run)];
            web.store.with_parents(&mut record).await;
            web.store.with_reasons(&mut record).await;
            let [record] = record;
            Json(record).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no run {id}")),
        Err(e) => unavailable(e),
    }
}

pub(super) async fn instances(State(web): State<Shared>, headers: HeaderMap) -> Response {
    let caller = super::caller(&web, &headers).await;
    match data::instances(&web.store).await {
        Ok(mut instances) => {
            super::narrow_instances(&web, &caller, &mut instances);
            Json(json!({ "instances": instances })).into_response()
        }
        Err(e) => unavailable(e),
    }
}

pub(super) async fn notifications(State(web): State<Shared>, headers: HeaderMap) -> Response {
    let caller = super::caller(&web, &headers).await;
    let mut sent = web.notifications.recent();
    sent.retain(|s| web.auth.shows(&caller, &s.job));
    Json(json!({
        "instance": web.instance,
        "notifications": sent,
    }))
    .into_response()
}

pub(super) async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("../../docs/openapi.json"),
    )
        .into_response()
}

/// `POST /api/v1/jobs/{name}/{action}`: with the bearer token, or from a
/// browser session with its CSRF token in `X-CSRF-Token`. Parameters come
/// as a JSON body or in the query string.
pub(super) async fn act(
    State(web): State<Shared>,
    path: Result<Path<(String, super::Action)>, axum::extract::rejection::PathRejection>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    body: Bytes,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let client = web.client(peer.map(|peer| peer.0.0.ip()), &headers);
    match &caller {
        Caller::ReadOnly => {
            return error(
                StatusCode::FORBIDDEN,
                "actions are off: [web] token_env is not set, so the dashboard and the API are read-only",
            );
        }
        Caller::Anonymous => {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"replicron\"")],
                Json(json!({ "error": "send the token of [web] token_env as Authorization: Bearer TOKEN" })),
            )
                .into_response();
        }
        Caller::Session(_) => {
            let csrf = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
            if !same_origin(&headers, web.public.as_ref())
                || !csrf.is_some_and(|c| caller.is_csrf(c))
            {
                return error(
                    StatusCode::FORBIDDEN,
                    "a browser session must send the page's CSRF token in X-CSRF-Token, from the dashboard's origin",
                );
            }
        }
        Caller::Bearer(_) => {}
    }
    let (name, action) = match super::action_path(path) {
        Ok(path) => path,
        Err((status, message)) => return error(status, message),
    };
    let actor = Actor::web(
        Via::Api,
        caller.token_name().unwrap_or("?"),
        &web.instance,
        client.to_string(),
    );
    // Beyond the token's rights: refused, and recorded without what it
    // was given.
    if let Some(denied) = web.auth.denied(&caller, action.right(), &name) {
        super::refused_unread(&web, &name, action, &actor, &denied.why).await;
        return forbidden(&denied);
    }
    let params = action_params(query.as_deref(), &body)
        .and_then(|params| secrets_not_in_query(&web, &name, query.as_deref(), params));
    let params = match params {
        Ok(params) => params,
        Err(e) => {
            // Recorded without what it was given: none of it was accepted.
            super::refused_unread(&web, &name, action, &actor, &e).await;
            return error(StatusCode::BAD_REQUEST, e);
        }
    };
    match super::act(&web, &name, action, &params, &actor).await {
        Ok((status, message)) => (status, Json(json!({ "message": message }))).into_response(),
        Err((status, message)) => error(status, message),
    }
}

/// The keys a JSON body of an action may have.
const BODY_KEYS: [&str; 11] = [
    "params",
    "at",
    "force",
    "until",
    "reason",
    "from",
    "to",
    "only_missing",
    "rerun_succeeded",
    "id",
    "priority",
];

/// `params`, unless it gives a secret parameter of `job` in the query
/// string, which proxies and access logs keep.
fn secrets_not_in_query(
    web: &super::Web,
    job: &str,
    query: Option<&str>,
    params: ActionParams,
) -> Result<ActionParams, String> {
    if query.is_none_or(str::is_empty) {
        return Ok(params);
    }
    let config = web.config();
    let Some(job) = config.job(job) else {
        return Ok(params);
    };
    match params
        .params
        .iter()
        .find(|(name, _)| job.secret_params.contains(name))
    {
        Some((name, _)) => Err(format!(
            "parameter {name} of job {} is secret: send it in a JSON body ({{\"params\": {{\"{name}\": \"…\"}}}}), not in the query string, which proxies and logs keep",
            job.name
        )),
        None => Ok(params),
    }
}

/// An action's parameters: from the query string, or from a JSON object as
/// the body, never both (one would be silently ignored). A key of the body
/// that is not one of [`BODY_KEYS`] is refused by name, as is a
/// `param.NAME` of the body (a misplaced parameter would be lost).
fn action_params(query: Option<&str>, body: &[u8]) -> Result<ActionParams, String> {
    let query = query.unwrap_or("");
    if body.iter().all(u8::is_ascii_whitespace) {
        let mut params = serde_urlencoded::from_str::<ActionParams>(query)
            .map_err(|e| format!("the query string: {e}"))?;
        params.params = super::form_params(query.as_bytes());
        return Ok(params);
    }
    if !query.is_empty() {
        return Err(
            "parameters in both the query string and the body: send them in one of the two"
                .to_string(),
        );
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut object)) => {
            if let Some(unknown) = object.keys().find(|k| !BODY_KEYS.contains(&k.as_str())) {
                return Err(format!(
                    "the JSON body: unknown key {unknown:?}: expected {} (a run's parameters go in params, e.g. {{\"params\": {{\"DAYS\": \"30\"}}}})",
                    BODY_KEYS.join(", ")
                ));
            }
            let run_params = match object.remove("params") {
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(serde_json::Value::Object(given)) => given
                    .into_iter()
                    .map(|(name, value)| match value {
                        serde_json::Value::String(value) => Ok((name, value)),
                        _ => Err(format!(
                            "the JSON body: params.{name} must be a string, e.g. {{\"params\": {{\"DAYS\": \"30\"}}}}"
                        )),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => {
                    return Err(
                        "the JSON body: params must be an object of strings, e.g. {\"params\": {\"DAYS\": \"30\"}}"
                            .to_string(),
                    );
                }
            };
            let mut params =
                serde_json::from_value::<ActionParams>(serde_json::Value::Object(object))
                    .map_err(|e| format!("the JSON body: {e}"))?;
            params.params = run_params;
            Ok(params)
        }
        Ok(_) => Err("the JSON body must be an object, e.g. {\"reason\": \"…\"}".to_string()),
        Err(e) => Err(format!("the JSON body: {e}")),
    }
}

/// `GET /api/v1/runs`.
pub(super) async fn runs(
    State(web): State<Shared>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    let caller = super::caller(&web, &headers).await;
    let now = match web.store.database_now().await {
        Ok(now) => now,
        Err(e) => return unavailable(e),
    };
    let params = match super::runs::RunsParams::parse(query.as_deref().unwrap_or(""), now) {
        Ok(params) => params,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match super::runs::page_for(&web, &caller, params.search).await {
        Ok(page) => axum::Json(page).into_response(),
        Err(e) => unavailable(e),
    }
}

#[cfg(test)]
mod tests {
    use super::action_params;

    #[test]
    fn parameters_come_from_one_place() {
        let params = action_params(Some("reason=r&force=1"), b"").expect("query");
        assert_eq!(params.reason.as_deref(), Some("r"));
        assert!(params.force);
        let params = action_params(None, br#"{"reason": "r", "force": true}"#).expect("body");
        assert_eq!(params.reason.as_deref(), Some("r"));
        assert!(params.force);
        assert!(action_params(Some("force=1"), br#"{"reason": "r"}"#).is_err());
        for body in [&b"[]"[..], b"[\"r\"]", b"\"r\"", b"1", b"null"] {
            let e = action_params(None, body).expect_err("not an object");
            assert!(e.contains("must be an object"), "{e}");
        }
        assert!(action_params(None, b"{").is_err());
        // A key it does not know is refused by name, not ignored.
        for (body, key) in [
            (&br#"{"params": {"DAYS": "1"}, "DAYS": "30"}"#[..], "DAYS"),
            (br#"{"param": {"DAYS": "30"}}"#, "param"),
            (br#"{"param.DAYS": "30"}"#, "param.DAYS"),
        ] {
            let e = action_params(None, body).expect_err("unknown key");
            assert!(e.contains(&format!("unknown key \"{key}\"")), "{e}");
        }
    }

    #[test]
    fn a_backfills_priority_is_a_number_or_job() {
        let body = action_params(None, br#"{"from": "x", "priority": -5}"#).expect("body");
        assert_eq!(body.priority.as_deref(), Some("-5"));
        let query = action_params(Some("priority=job"), b"").expect("query");
        assert_eq!(query.priority.as_deref(), Some("job"));
        // The dashboard's empty field is no priority.
        let form = action_params(Some("priority="), b"").expect("query");
        assert_eq!(form.priority, None);
    }

    #[test]
    fn a_triggers_parameters_come_as_param_fields_or_a_params_object() {
        let pairs = |p: &super::ActionParams| p.params.clone();
        let query =
            action_params(Some("param.DAYS=30&param.TENANT=a%26b&force=1"), b"").expect("query");
        assert_eq!(
            pairs(&query),
            vec![
                ("DAYS".into(), "30".into()),
                ("TENANT".into(), "a&b".into())
            ]
        );
        let body =
            action_params(None, br#"{"params": {"DAYS": "30"}, "force": true}"#).expect("body");
        assert_eq!(pairs(&body), vec![("DAYS".into(), "30".into())]);
        assert!(body.force);
        for bad in [
            &br#"{"params": {"DAYS": 30}}"#[..],
            br#"{"params": ["DAYS"]}"#,
        ] {
            let e = action_params(None, bad).expect_err("not strings");
            assert!(e.contains("params"), "{e}");
        }
    }
}
