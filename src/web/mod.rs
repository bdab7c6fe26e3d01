//! The daemon's HTTP listener (`[daemon] metrics_listen`): the dashboard
//! at `/` ([`pages`]), the JSON API under `/api/v1/` ([`api`],
//! `docs/api.md`), `/metrics` and `/healthz`. Served by axum on hyper.
//!
//! Everything is read-only unless `[web] token_env` or `tokens` names a
//! token ([`auth`]); then trigger, pause, resume and unlock are POSTs that
//! carry it, each within the token's grant (its rights, its jobs), and a
//! token limited to some jobs is shown only those. What is shown comes from
//! [`data`], which reads through the store.

mod ansi;
mod api;
mod assets;
mod auth;
pub(crate) mod data;
pub(crate) mod listener;
pub(crate) mod live;
mod markup;
mod pages;
mod runs;
mod runs_page;
mod sessions;
mod throttle;
mod timeline;
mod whole;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

pub(crate) use self::auth::Auth;
use crate::config::Config;
use crate::db::Store;
use crate::db::audit;
use crate::ops::actions::{self, Refused, Unlocked};
use crate::scheduler::trigger::{self, Answer, Refusal};
use crate::telemetry::Liveness;

/// What the handlers share.
pub(crate) struct Web {
    /// The database.
    pub(crate) store: Store,
    /// The job file as last loaded (a reload replaces it).
    pub(crate) config: Arc<RwLock<Arc<Config>>>,
    /// This replica's id.
    pub(crate) instance: String,
    /// Who may act.
    pub(crate) auth: Auth,
    /// The metrics.
    pub(crate) metrics: PrometheusHandle,
    /// For `/healthz`.
    pub(crate) liveness: Arc<Liveness>,
    /// Triggered runs go to the scheduler.
    pub(crate) triggers: mpsc::Sender<trigger::Request>,
    /// The notifications the scheduler sent, or failed to.
    pub(crate) notifications: crate::notify::SentLog,
    /// The listener is on a loopback address: requests must name this host
    /// (`localhost`, `127.0.0.1`, `[::1]`), so that a web page whose DNS
    /// name is rebound to 127.0.0.1 cannot read the dashboard through a
    /// browser on this host.
    pub(crate) loopback: bool,
    /// `[web] public_url`: the origin a reverse proxy serves the dashboard
    /// at.
    pub(crate) public: Option<crate::config::PublicUrl>,
    /// `[web]`'s session cookie settings, as at start.
    pub(crate) cookie: CookieSettings,
    /// Wrong tokens per client address.
    pub(crate) throttle: throttle::Throttle,
    /// `[web] trusted_proxies`.
    pub(crate) trusted_proxies: Vec<std::net::IpAddr>,
}

impl Web {
    /// The client's address: the peer's, or, from a trusted proxy, the
    /// last address of `X-Forwarded-For` that is not a trusted proxy
    /// (proxies append the address they heard from).
    pub(crate) fn client(
        &self,
        peer: Option<std::net::IpAddr>,
        headers: &axum::http::HeaderMap,
    ) -> std::net::IpAddr {
        let peer = peer.unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
        if !self.trusted_proxies.contains(&peer) {
            return peer;
        }
        let forwarded: Vec<Option<std::net::IpAddr>> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|hop| hop.trim().parse().ok())
            .collect();
        // From the right: the hops our proxies added, then the first one
        // they heard from. What a client wrote further left is not
        // believed; an unreadable hop leaves the proxy's own address.
        forwarded
            .into_iter()
            .rev()
            .find(|hop| !hop.is_some_and(|ip| self.trusted_proxies.contains(&ip)))
            .flatten()
            .unwrap_or(peer)
    }
}

/// The session cookie: its name, path and `Secure` flag.
#[derive(Clone, Debug)]
pub(crate) struct CookieSettings {
    /// `[web] cookie_name`.
    pub(crate) name: String,
    /// `[web] cookie_path`.
    pub(crate) path: String,
    /// `[web] cookie_secure`.
    pub(crate) secure: bool,
}

impl CookieSettings {
    /// From `[web]`.
    pub(crate) fn of(web: &crate::config::WebConfig) -> Self {
        CookieSettings {
            name: web.cookie_name.clone(),
            path: web.cookie_path.clone(),
            secure: web.cookie_secure,
        }
    }

    /// The `Set-Cookie` value that sets `value` for `life` (zero: removes
    /// the cookie).
    pub(crate) fn set(&self, value: &str, life: Duration) -> String {
        format!(
            "{}={value}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}{}",
            self.name,
            self.path,
            life.as_secs(),
            if self.secure { "; Secure" } else { "" }
        )
    }
}

/// Who sent `headers`: a bearer token is checked at once, a session cookie
/// looked up in the database (a session of another replica's, expired,
/// signed out, or whose token changed or was removed is none).
pub(crate) async fn caller(web: &Web, headers: &axum::http::HeaderMap) -> auth::Caller {
    match web.auth.credential(headers, &web.cookie.name) {
        auth::Credential::Known(caller) => caller,
        auth::Credential::Cookie(value) => {
            let tokens = web.auth.bindings();
            match web.store.find_session(&web.instance, value, tokens).await {
                Ok(Some(session)) => auth::Caller::Session(session),
                Ok(None) => auth::Caller::Anonymous,
                Err(e) => {
                    warn!("a session could not be read; the request is taken as signed out: {e}");
                    auth::Caller::Anonymous
                }
            }
        }
    }
}

/// The names of the file's jobs `caller` is shown.
pub(crate) fn shown_jobs(web: &Web, caller: &auth::Caller) -> Vec<String> {
    web.config()
        .jobs
        .iter()
        .map(|j| j.name.to_string())
        .filter(|name| web.auth.shows(caller, name))
        .collect()
}

/// `overview` as `caller` is shown it: the jobs its token reaches, their
/// backfills, and of each replica's drifted jobs only those.
pub(crate) fn narrow_overview(web: &Web, caller: &auth::Caller, overview: &mut data::Overview) {
    if !web.auth.scoped(caller) {
        return;
    }
    overview.jobs.retain(|j| web.auth.shows(caller, &j.name));
    overview
        .backfills
        .retain(|b| web.auth.shows(caller, &b.job));
    narrow_instances(web, caller, &mut overview.instances);
}

/// Of each replica's drifted jobs, those `caller` is shown.
pub(crate) fn narrow_instances(
    web: &Web,
    caller: &auth::Caller,
    instances: &mut [data::InstanceView],
) {
    for instance in instances {
        instance
            .drifted_jobs
            .retain(|job| web.auth.shows(caller, job));
    }
}

/// `filter` narrowed to the jobs `caller` is shown: a token limited to
/// some jobs reads only the rows about them (not the rows about no job).
pub(crate) fn narrow_audit(
    web: &Web,
    caller: &auth::Caller,
    filter: &mut crate::db::audit::AuditFilter,
) {
    if web.auth.scoped(caller) {
        filter.jobs = Some(match &filter.job {
            Some(job) if web.auth.shows(caller, job) => vec![job.clone()],
            Some(_) => Vec::new(),
            None => shown_jobs(web, caller),
        });
    }
}

impl Web {
    /// The job file as last loaded.
    pub(crate) fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }
}

type Shared = Arc<Web>;

/// The largest request body taken.
const MAX_BODY: usize = 64 * 1024;

/// Every route.
pub(crate) fn router(web: Shared) -> Router {
    Router::new()
        .route("/", get(pages::overview))
        .route("/jobs/{name}", get(pages::job))
        .route("/jobs/{name}/{action}", post(pages::act))
        .route("/runs", get(runs_page::view))
        .route("/runs/{id}", get(pages::run))
        .route("/runs/{id}/output", get(live::output))
        .route("/audit", get(pages::audit))
        .route("/timeline", get(timeline::page))
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/api/v1/jobs", get(api::jobs))
        .route("/api/v1/jobs/{name}", get(api::job))
        .route("/api/v1/jobs/{name}/{action}", post(api::act))
        .route("/api/v1/runs", get(api::runs))
        .route("/api/v1/runs/{id}", get(api::run))
        .route("/api/v1/runs/{id}/output", get(whole::whole))
        .route("/api/v1/instances", get(api::instances))
        .route("/api/v1/audit", get(api::audit))
        .route("/api/v1/timeline", get(timeline::api))
        .route("/api/v1/notifications", get(api::notifications))
        .route("/api/v1/openapi.json", get(api::openapi))
        .route("/static/{name}", get(assets::file))
        .route("/favicon.ico", get(assets::favicon))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        // No request of ours carries more than a pause reason or a sign-in.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            local_names_only,
        ))
        .layer(axum::middleware::from_fn(json_errors))
        // Outermost: every answer carries them, a refusal too.
        .layer(axum::middleware::map_response(security_headers))
        .with_state(web)
}

/// Serves [`router`] on `listener` until the task is dropped, at most
/// `cap` connections at once ([`listener`]).
pub(crate) async fn serve(listener: TcpListener, web: Shared, cap: usize) {
    if let Ok(addr) = listener.local_addr()
        && !addr.ip().is_loopback()
    {
        if web.auth.actions() {
            warn!(%addr, "the dashboard and API are reachable beyond this host over plain HTTP: anyone who reaches {addr} sees every job, run and output, and the token crosses the network in clear; put a TLS proxy in front, or listen on 127.0.0.1");
        } else {
            warn!(%addr, "the dashboard and API are reachable beyond this host and read-only: anyone who reaches {addr} sees every job, run and output; set [web] token_env to allow actions, and firewall the port");
        }
    }
    listener::serve(listener, router(web), cap).await;
}

/// On a loopback listener, a request must name this host.
async fn local_names_only(
    State(web): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if web.loopback {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.split(':').next().unwrap_or(""),
        };
        let local =
            matches!(name, "localhost" | "127.0.0.1" | "::1") || name.ends_with(".localhost");
        let public = web
            .public
            .as_ref()
            .is_some_and(|public| host.eq_ignore_ascii_case(&public.host));
        if !local && !public {
            return (
                StatusCode::MISDIRECTED_REQUEST,
                "this replica listens on a loopback address and answers only to localhost, 127.0.0.1, [::1] or the host of [web] public_url\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Every error answer that is not a page is JSON, `{"error": "…"}`,
/// whatever gave it: a handler, an extractor's rejection (a malformed query
/// string), the body limit, an unknown path or method, the host check.
async fn json_errors(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let kind = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if kind.starts_with("application/json") || kind.starts_with("text/html") {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let text = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    } else {
        text
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = serde_json::json!({ "error": text }).to_string();
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// No script runs on these pages but the dashboard's own file, which
/// fetches only from the dashboard; nothing is framed, forms post only to
/// the dashboard itself, and nothing is kept by a browser or a proxy (pages
/// hold runs' output, signed-in pages their forms' tokens) but the static
/// files, which say so themselves.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

async fn metrics(State(web): State<Shared>) -> Response {
    live::record_gauges();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        web.metrics.render(),
    )
        .into_response()
}

async fn healthz(State(web): State<Shared>) -> Response {
    match web.liveness.problem() {
        None => (
            StatusCode::OK,
            axum::Json(serde_json::json!({"status": "ok"})),
        )
            .into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({"status": "unhealthy", "reason": reason.as_str()})),
        )
            .into_response(),
    }
}

async fn not_found(
    State(web): State<Shared>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
) -> Response {
    // A browser is shown a page it can leave by its links; the API's
    // clients keep their JSON.
    let wants_page = !uri.path().starts_with("/api/")
        && headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.contains("text/html"));
    if wants_page {
        return pages::not_found(&web, &headers).await;
    }
    (
        StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({
            "error": "not found: try /, /runs, /timeline, /audit, /api/v1/jobs, /api/v1/audit, /metrics or /healthz"
        })),
    )
        .into_response()
}

/// An action on a job, from the dashboard or the API.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub(crate) struct ActionParams {
    /// `pause`: RFC 3339 time or a duration from now; unset, until resumed.
    #[serde(default)]
    pub(crate) until: Option<String>,
    /// Why (every action): recorded in the audit log, and for a trigger
    /// or a backfill in its runs' history and their `REPLICRON_REASON`.
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// `trigger`, `backfill`: even though paused; `unlock`: even though
    /// its run is recorded running.
    #[serde(default, deserialize_with = "checkbox")]
    pub(crate) force: bool,
    /// A form's CSRF token.
    #[serde(default)]
    pub(crate) csrf: Option<String>,
    /// `backfill`: the range's start (RFC 3339).
    #[serde(default)]
    pub(crate) from: Option<String>,
    /// `backfill`: its end, not included (RFC 3339).
    #[serde(default)]
    pub(crate) to: Option<String>,
    /// `backfill`: run again the instants that have a succeeded run too.
    #[serde(default, deserialize_with = "checkbox")]
    pub(crate) rerun_succeeded: bool,
    /// `cancel-backfill`: the backfill's id (unset: the job's backfill in
    /// progress, whichever it is).
    #[serde(default, deserialize_with = "optional_id")]
    pub(crate) id: Option<String>,
    /// `trigger`: run it once at this time (RFC 3339 with an offset, to
    /// come) instead of now.
    #[serde(default)]
    pub(crate) at: Option<String>,
    /// `backfill`: the instants' priority among the waiters for a lock or
    /// a limit, -1000 to 1000 or `job` (the job's own); unset, behind
    /// every run that is not a backfill's.
    #[serde(default, deserialize_with = "optional_id")]
    pub(crate) priority: Option<String>,
    /// `trigger`: the run's parameters, as `NAME=VALUE` pairs: a form's
    /// and a query string's `param.NAME` fields, a JSON body's `params`
    /// object.
    #[serde(skip)]
    pub(crate) params: Vec<(String, String)>,
}

/// The `param.NAME=VALUE` fields of a form or query string.
pub(crate) fn form_params(form: &[u8]) -> Vec<(String, String)> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(form)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(key, value)| Some((key.strip_prefix("param.")?.to_string(), value)))
        .collect()
}

/// A number, or its text (a form's field).
fn optional_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(i64),
        Text(String),
    }
    Ok(match <Option<Id> as serde::Deserialize>::deserialize(d)? {
        Some(Id::Number(n)) => Some(n.to_string()),
        Some(Id::Text(t)) if !t.trim().is_empty() => Some(t.trim().to_string()),
        _ => None,
    })
}

/// `true`, `on` (an HTML checkbox) or `1`.
fn checkbox<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Text(String),
    }
    Ok(
        match <Option<Flag> as serde::Deserialize>::deserialize(d)? {
            Some(Flag::Bool(b)) => b,
            Some(Flag::Text(t)) => matches!(t.as_str(), "true" | "on" | "1" | "yes"),
            None => false,
        },
    )
}

/// How an action ended: the status to answer and a sentence for people.
type Acted = Result<(StatusCode, String), (StatusCode, String)>;

fn failed(e: impl std::fmt::Display) -> (StatusCode, String) {
    (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

/// The answer to an action the operations layer refused.
fn refused(refused: Refused) -> (StatusCode, String) {
    let status = match &refused {
        Refused::Invalid(_) | Refused::Reserved(_) => StatusCode::BAD_REQUEST,
        Refused::NoRow(_) => StatusCode::NOT_FOUND,
        Refused::Running { .. } => StatusCode::CONFLICT,
        Refused::Db(_) | Refused::Unaudited(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, refused.to_string())
}

/// What an operator does to a job: the last segment of
/// `POST /jobs/{name}/{action}` and `POST /api/v1/jobs/{name}/{action}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Action {
    /// Run it once now, here.
    Trigger,
    /// Pause it on every replica.
    Pause,
    /// End its pause.
    Resume,
    /// End its lease.
    Unlock,
    /// Run each past instant of a range once.
    Backfill,
    /// Cancel its backfill in progress.
    #[serde(rename = "cancel-backfill")]
    CancelBackfill,
}

/// The path of an action, as axum read it: an action it does not know is
/// no such page (404), whatever the job.
pub(crate) fn action_path(
    path: Result<axum::extract::Path<(String, Action)>, axum::extract::rejection::PathRejection>,
) -> Result<(String, Action), (StatusCode, String)> {
    match path {
        Ok(axum::extract::Path(path)) => Ok(path),
        Err(_) => Err((
            StatusCode::NOT_FOUND,
            "unknown action: trigger, pause, resume, unlock, backfill or cancel-backfill"
                .to_string(),
        )),
    }
}

/// The backfill `params` ask of `job`: a past range of its instants, at
/// most [`backfill::CONFIRM_ABOVE`] of them (more is the command line's,
/// with `--yes`).
async fn backfill_of(
    web: &Web,
    job: &crate::config::Job,
    params: &ActionParams,
) -> Result<trigger::Backfill, (StatusCode, String)> {
    use crate::scheduler::backfill;
    let bad = |text: String| Err((StatusCode::BAD_REQUEST, format!("{}: {text}", job.name)));
    let time = |value: &Option<String>, key: &str| match value.as_deref().map(str::trim) {
        Some(text) if !text.is_empty() => chrono::DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| {
                format!("{key} {text:?}: {e}: expected RFC 3339, such as 2027-03-28T00:00:00Z")
            }),
        _ => Err(format!("a backfill needs {key}, an RFC 3339 time")),
    };
    let (from, to) = match (time(&params.from, "from"), time(&params.to, "to")) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(e), _) | (_, Err(e)) => return bad(e),
    };
    let refused = |refused: backfill::Refused| (StatusCode::BAD_REQUEST, refused.to_string());
    backfill::check_range(job, from, to).map_err(refused)?;
    let now = web.store.database_now().await.map_err(failed)?;
    backfill::check_past(to, now).map_err(refused)?;
    let instants = backfill::instants(&job.schedule, from, to, backfill::CONFIRM_ABOVE + 1);
    if instants.len() > backfill::CONFIRM_ABOVE {
        return bad(format!(
            "more than {} instants: run it with replicron backfill --yes",
            backfill::CONFIRM_ABOVE
        ));
    }
    let priority = match params.priority.as_deref() {
        None => None,
        Some("job") => Some(job.priority),
        Some(text) => match text.parse::<i32>() {
            Ok(priority) if crate::config::PRIORITY_RANGE.contains(&priority) => Some(priority),
            _ => {
                return bad(format!(
                    "priority {text:?}: expected a whole number from {} to {}, or job (the job's own, {})",
                    crate::config::PRIORITY_RANGE.start(),
                    crate::config::PRIORITY_RANGE.end(),
                    job.priority
                ));
            }
        },
    };
    Ok(trigger::Backfill {
        from,
        to,
        instants,
        rerun_succeeded: params.rerun_succeeded,
        limit: web.config().daemon.max_backfill_instants,
        priority,
    })
}

impl Action {
    /// The right a token needs for it.
    pub(crate) fn right(self) -> crate::config::Right {
        use crate::config::Right;
        match self {
            Action::Trigger => Right::Trigger,
            Action::Backfill | Action::CancelBackfill => Right::Backfill,
            Action::Pause | Action::Resume => Right::Pause,
            Action::Unlock => Right::Unlock,
        }
    }

    /// The audit log's name of it.
    fn audited(self) -> audit::Action {
        match self {
            Action::Trigger => audit::Action::Trigger,
            Action::Pause => audit::Action::Pause,
            Action::Resume => audit::Action::Resume,
            Action::Unlock => audit::Action::Unlock,
            Action::Backfill | Action::CancelBackfill => audit::Action::Backfill,
        }
    }
}

/// What the audit log says `action` was given (secrets redacted): what
/// the operations layer does not record itself (trigger, backfill).
fn audit_entry(web: &Web, name: &str, action: Action, params: &ActionParams) -> audit::Entry {
    let entry = audit::Entry::new(action.audited(), name).arg("force", params.force);
    let entry = match action {
        Action::Trigger => match web.config().job(name) {
            Some(job) => {
                actions::trigger_entry(job, params.force, params.params.iter().map(|(n, v)| (n, v)))
                    .arg("at", params.at.clone())
                    .arg("reason", params.reason.clone())
            }
            None => entry.arg("reason", params.reason.clone()),
        },
        Action::Backfill => entry
            .arg("from", params.from.clone())
            .arg("to", params.to.clone())
            .arg("rerun_succeeded", params.rerun_succeeded)
            .arg("priority", params.priority.clone())
            .arg("reason", params.reason.clone()),
        Action::CancelBackfill => audit::Entry::new(action.audited(), name)
            .arg("cancel", true)
            .arg("id", params.id.clone())
            .arg("reason", params.reason.clone()),
        Action::Pause => entry
            .arg("until", params.until.clone())
            .arg("reason", params.reason.clone()),
        Action::Resume | Action::Unlock => entry,
    };
    web.auth.redact_entry(entry)
}

/// Records in the audit log that `action` on `name` by `actor` was refused
/// before what it was given could be read, for `why`, with none of what it
/// was given.
pub(crate) async fn refused_unread(
    web: &Web,
    name: &str,
    action: Action,
    actor: &audit::Actor,
    why: &str,
) {
    let entry = audit::Entry::new(action.audited(), name);
    let outcome = audit::Outcome::Refused(web.auth.redact(why));
    web.store.audit(actor, entry, outcome).await;
}

/// Carries out `action` on `name` for `actor`, and records it in the audit
/// log (pause, resume and unlock through the operations layer, which
/// records them itself; the rest here).
pub(crate) async fn act(
    web: &Web,
    name: &str,
    action: Action,
    params: &ActionParams,
    actor: &audit::Actor,
) -> Acted {
    // An unknown job is refused before the operations layer sees it
    // (but unlock, which ends lease rows of jobs no longer in the file).
    let recorded_by_ops = action == Action::Unlock
        || (matches!(action, Action::Pause | Action::Resume) && web.config().job(name).is_some());
    if recorded_by_ops {
        return act_unaudited(web, name, action, params, actor).await;
    }
    // A reason refused is not written: it may hold what a terminal would
    // act on. A token pasted into one is not stored.
    let reason = match actions::check_reason(params.reason.as_deref()) {
        Ok(reason) => reason.map(|r| web.auth.redact(&r)),
        Err(refused) => {
            let why = refused.to_string();
            refused_unread(web, name, action, actor, &why).await;
            return Err((StatusCode::BAD_REQUEST, why));
        }
    };
    let params = &ActionParams {
        reason,
        ..params.clone()
    };
    // Carried out only once its row is written.
    let entry = audit_entry(web, name, action, params);
    let row = match web.store.audit_ahead(actor, &entry).await {
        Ok(row) => row,
        Err(e) => return Err(refused(Refused::Unaudited(e))),
    };
    let acted = act_unaudited(web, name, action, params, actor).await;
    let outcome = match &acted {
        Ok((_, done)) => audit::Outcome::Done(web.auth.redact(done)),
        Err((_, why)) => audit::Outcome::Refused(web.auth.redact(why)),
    };
    web.store.audit_settle(row, outcome).await;
    acted
}

async fn act_unaudited(
    web: &Web,
    name: &str,
    action: Action,
    params: &ActionParams,
    actor: &audit::Actor,
) -> Acted {
    let config = web.config();
    let job = config.job(name);
    let conflict = |text: String| Err((StatusCode::CONFLICT, text));
    if !matches!(action, Action::Unlock | Action::CancelBackfill) && job.is_none() {
        return Err((
            StatusCode::NOT_FOUND,
            format!("{name}: no such job in {}", config.path.display()),
        ));
    }
    match action {
        Action::Trigger => {
            let Some(job) = job else {
                return conflict(format!("{name}: no such job"));
            };
            let run_params =
                match crate::config::params::resolve(&job.name, &job.params, &params.params) {
                    Ok(run_params) => run_params,
                    Err(e) => return Err((StatusCode::BAD_REQUEST, format!("{name}: {e}"))),
                };
            if let Some(at) = &params.at {
                let at = chrono::DateTime::parse_from_rfc3339(at.trim())
                    .map(|t| t.with_timezone(&chrono::Utc))
                    .map_err(|e| {
                        (
                            StatusCode::BAD_REQUEST,
                            format!(
                                "at {at:?}: {e}: expected RFC 3339, such as 2027-03-28T00:00:00Z"
                            ),
                        )
                    })?;
                if params.force {
                    return Err((
                        StatusCode::BAD_REQUEST,
                        "at and force are exclusive: a one-time run is claimed at its instant as a scheduled one, and a paused job's is not run".to_string(),
                    ));
                }
                return match actions::trigger_at_unaudited(&web.store, actor, job, at, &run_params)
                    .await
                {
                    Ok(id) => Ok((
                        StatusCode::ACCEPTED,
                        format!(
                            "{name}: planned once at {} (one-time run {id})",
                            crate::schedule::fmt_instant(at)
                        ),
                    )),
                    Err(e) => Err(refused(e)),
                };
            }
            if !job.enabled && !params.force {
                return conflict(format!(
                    "{name} is disabled (enabled = false in {}); trigger it with force to run it anyway",
                    config.path.display()
                ));
            }
            let (reply, answer) = oneshot::channel();
            let request = trigger::Request {
                job: crate::scheduler::Job::from_config(job),
                force: params.force,
                params: run_params,
                reason: params.reason.as_deref().map(std::sync::Arc::from),
                backfill: None,
                reply,
            };
            if web.triggers.send(request).await.is_err() {
                return Err(failed("replicron is shutting down"));
            }
            match tokio::time::timeout(Duration::from_secs(30), answer).await {
                Ok(Ok(Answer::Running(fence))) => Ok((
                    StatusCode::ACCEPTED,
                    format!(
                        "{name}: triggered on {} (lease fence {fence})",
                        web.instance
                    ),
                )),
                Ok(Ok(Answer::Refused(Refusal::Paused(pause)))) => conflict(format!(
                    "{name} is {pause}; trigger it with force to run it anyway"
                )),
                Ok(Ok(Answer::Refused(Refusal::Held))) => conflict(format!(
                    "{name} is running elsewhere (its lease is held); not triggered"
                )),
                Ok(Ok(Answer::Refused(Refusal::NotRunnable))) => {
                    conflict(format!("{name} has nothing to run on this replica"))
                }
                Ok(Ok(Answer::InProgress(_))) => Err(failed("the scheduler answered a backfill")),
                Ok(Ok(Answer::Failed(e))) => Err(failed(e)),
                Ok(Ok(Answer::Backfilling(_))) => Err(failed("the scheduler answered a backfill")),
                Ok(Err(_)) => Err(failed("the scheduler did not answer")),
                // Still queued: it may yet run. Saying it failed would invite
                // a second trigger.
                Err(_) => Ok((
                    StatusCode::ACCEPTED,
                    format!(
                        "{name}: the trigger is queued but has not started within 30 s; look at its runs before triggering again"
                    ),
                )),
            }
        }
        Action::Backfill => {
            let Some(job) = job else {
                return conflict(format!("{name}: no such job"));
            };
            let backfill = backfill_of(web, job, params).await?;
            let (reply, answer) = oneshot::channel();
            let request = trigger::Request {
                job: crate::scheduler::Job::from_config(job),
                force: params.force,
                params: crate::history::Params::new(),
                reason: params.reason.as_deref().map(std::sync::Arc::from),
                backfill: Some(backfill),
                reply,
            };
            if web.triggers.send(request).await.is_err() {
                return Err(failed("replicron is shutting down"));
            }
            match tokio::time::timeout(Duration::from_secs(30), answer).await {
                Ok(Ok(Answer::Backfilling(count))) => Ok((
                    StatusCode::ACCEPTED,
                    format!(
                        "{name}: backfill of {count} instants started on {}; its runs are recorded as backfill",
                        web.instance
                    ),
                )),
                Ok(Ok(Answer::Refused(Refusal::Paused(pause)))) => conflict(format!(
                    "{name} is {pause}; backfill it with force to run it anyway"
                )),
                Ok(Ok(Answer::InProgress(text))) => conflict(text),
                Ok(Ok(Answer::Failed(e))) => Err(failed(e)),
                Ok(Ok(other)) => Err(failed(format!("unexpected answer: {other:?}"))),
                Ok(Err(_)) | Err(_) => Err(failed("the scheduler did not answer")),
            }
        }
        Action::CancelBackfill => {
            let id = match params.id.as_deref().map(str::parse::<i64>) {
                None => None,
                Some(Ok(id)) if id > 0 => Some(id),
                Some(_) => {
                    return Err((
                        StatusCode::BAD_REQUEST,
                        format!(
                            "id {:?}: expected a backfill's id, a number",
                            params.id.as_deref().unwrap_or("")
                        ),
                    ));
                }
            };
            let cancelled = crate::scheduler::backfill::cancel_by(&web.store, Some(name), id)
                .await
                .map_err(failed)?;
            match cancelled.result {
                Ok(text) => Ok((StatusCode::OK, text)),
                Err(text) => conflict(text),
            }
        }
        Action::Pause => {
            let until = params
                .until
                .as_deref()
                .map(str::trim)
                .filter(|u| !u.is_empty());
            // A token pasted into a reason is not stored.
            let reason = params
                .reason
                .as_deref()
                .filter(|r| !r.trim().is_empty())
                .map(|r| web.auth.redact(r));
            let until = actions::pause(&web.store, actor, name, until, reason)
                .await
                .map_err(refused)?;
            Ok((
                StatusCode::OK,
                match until {
                    Some(until) => format!(
                        "{name}: paused on every replica until {}",
                        crate::schedule::fmt_instant(until)
                    ),
                    None => format!("{name}: paused on every replica until resumed"),
                },
            ))
        }
        Action::Resume => {
            let reason = params.reason.as_deref().map(|r| web.auth.redact(r));
            if actions::resume(&web.store, actor, name, reason)
                .await
                .map_err(refused)?
            {
                Ok((StatusCode::OK, format!("{name}: resumed")))
            } else {
                Ok((StatusCode::OK, format!("{name}: not paused")))
            }
        }
        Action::Unlock => match actions::unlock(
            &web.store,
            actor,
            name,
            params.force,
            params.reason.as_deref().map(|r| web.auth.redact(r)),
        )
        .await
        {
            Ok(Unlocked::NotHeld) => Ok((StatusCode::OK, format!("{name}: not held"))),
            Ok(Unlocked::Ended { holder, fence }) => Ok((
                StatusCode::OK,
                format!(
                    "{name}: lease of {} (fence {fence}) ended",
                    holder.as_deref().unwrap_or("?"),
                ),
            )),
            Err(Refused::Running { job, run }) => conflict(format!(
                "{job} is held by {} whose run {} is still recorded running; unlock with force to end the lease anyway (its holder then stops that run)",
                run.instance, run.id
            )),
            Err(e) => Err(refused(e)),
        },
    }
}
