//! The daemon's HTTP listener (`[daemon] metrics_listen`): the dashboard
//! at `/` ([`pages`]), the JSON API under `/api/v1/` ([`api`],
//! `docs/api.md`), `/metrics` and `/healthz`. Served by axum on hyper.
//!
//! Everything is read-only unless `[web] token_env` names a token
//! ([`auth`]); then trigger, pause, resume and unlock are POSTs that carry
//! it. What is shown comes from [`data`], which reads through the store.

mod api;
mod auth;
pub(crate) mod data;
mod pages;

use std::net::SocketAddr;
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
use crate::scheduler::trigger::{self, Answer};
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
    /// The listener is on a loopback address: requests must name this host
    /// (`localhost`, `127.0.0.1`, `[::1]`), so that a web page whose DNS
    /// name is rebound to 127.0.0.1 cannot read the dashboard through a
    /// browser on this host.
    pub(crate) loopback: bool,
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

/// Every route.
pub(crate) fn router(web: Shared) -> Router {
    Router::new()
        .route("/", get(pages::overview))
        .route("/jobs/{name}", get(pages::job))
        .route("/jobs/{name}/{action}", post(pages::act))
        .route("/runs/{id}", get(pages::run))
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/api/v1/jobs", get(api::jobs))
        .route("/api/v1/jobs/{name}", get(api::job))
        .route("/api/v1/jobs/{name}/{action}", post(api::act))
        .route("/api/v1/runs", get(api::runs))
        .route("/api/v1/runs/{id}", get(api::run))
        .route("/api/v1/instances", get(api::instances))
        .route("/api/v1/notifications", get(api::notifications))
        .route("/api/v1/openapi.json", get(api::openapi))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .layer(axum::middleware::map_response(security_headers))
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            local_names_only,
        ))
        .with_state(web)
}

/// Serves [`router`] on `listener` until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, web: Shared) {
    if let Ok(addr) = listener.local_addr()
        && !addr.ip().is_loopback()
    {
        if web.auth.actions() {
            warn!(%addr, "the dashboard and API are reachable beyond this host over plain HTTP: anyone who reaches {addr} sees every job, run and output, and the token crosses the network in clear; put a TLS proxy in front, or listen on 127.0.0.1");
        } else {
            warn!(%addr, "the dashboard and API are reachable beyond this host and read-only: anyone who reaches {addr} sees every job, run and output; set [web] token_env to allow actions, and firewall the port");
        }
    }
    let app = router(web).into_make_service_with_connect_info::<SocketAddr>();
    if let Err(e) = axum::serve(listener, app).await {
        warn!("the HTTP listener stopped: {e}");
    }
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
        if !local {
            return (
                StatusCode::MISDIRECTED_REQUEST,
                "this replica listens on a loopback address and answers only to localhost, 127.0.0.1 or [::1]\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// No script runs on these pages, nothing is framed, and forms post only
/// to the dashboard itself.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
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
            axum::Json(serde_json::json!({"status": "unhealthy", "reason": reason})),
        )
            .into_response(),
    }
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "not found: try /, /api/v1/jobs, /metrics or /healthz\n",
    )
        .into_response()
}

/// An action on a job, from the dashboard or the API.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub(crate) struct ActionParams {
    /// `pause`: RFC 3339 time or a duration from now; unset, until resumed.
    #[serde(default)]
    pub(crate) until: Option<String>,
    /// `pause`: why.
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// `trigger`: even though paused; `unlock`: even though its run is
    /// recorded running.
    #[serde(default, deserialize_with = "checkbox")]
    pub(crate) force: bool,
    /// A form's CSRF token.
    #[serde(default)]
    pub(crate) csrf: Option<String>,
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
pub(crate) type Acted = Result<(StatusCode, String), (StatusCode, String)>;

fn failed(e: impl std::fmt::Display) -> (StatusCode, String) {
    (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

/// Carries out `action` on `name` for `by`.
pub(crate) async fn act(
    web: &Web,
    name: &str,
    action: &str,
    params: &ActionParams,
    by: &str,
) -> Acted {
    let config = web.config();
    let job = config.job(name);
    let conflict = |text: String| Err((StatusCode::CONFLICT, text));
    if action != "unlock" && job.is_none() {
        return Err((
            StatusCode::NOT_FOUND,
            format!("{name}: no such job in {}", config.path.display()),
        ));
    }
    match action {
        "trigger" => {
            let Some(job) = job else {
                return conflict(format!("{name}: no such job"));
            };
            let (reply, answer) = oneshot::channel();
            let request = trigger::Request {
                job: crate::scheduler::Job::from_config(job),
                force: params.force,
                reply,
            };
            if web.triggers.send(request).await.is_err() {
                return Err(failed("replicron is shutting down"));
            }
            match tokio::time::timeout(Duration::from_secs(30), answer).await {
                Ok(Ok(Ok(Answer::Running(fence)))) => Ok((
                    StatusCode::ACCEPTED,
                    format!(
                        "{name}: triggered on {} (lease fence {fence})",
                        web.instance
                    ),
                )),
                Ok(Ok(Ok(Answer::Paused(why)))) => conflict(format!(
                    "{name} is {why}; trigger it with force to run it anyway"
                )),
                Ok(Ok(Ok(Answer::Held))) => conflict(format!(
                    "{name} is running elsewhere (its lease is held); not triggered"
                )),
                Ok(Ok(Ok(Answer::NotRunnable))) => {
                    conflict(format!("{name} has nothing to run on this replica"))
                }
                Ok(Ok(Err(e))) => Err(failed(e)),
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
        "pause" => {
            let now = web.store.database_now().await.map_err(failed)?;
            let until = match params
                .until
                .as_deref()
                .map(str::trim)
                .filter(|u| !u.is_empty())
            {
                Some(text) => Some(
                    crate::cli::pause::parse_future_until(text, now)
                        .map_err(|e| (StatusCode::BAD_REQUEST, e))?,
                ),
                None => None,
            };
            let reason = params.reason.clone().filter(|r| !r.trim().is_empty());
            web.store
                .pause(name, until, by.to_string(), reason)
                .await
                .map_err(failed)?;
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
        "resume" => {
            if web.store.resume(name).await.map_err(failed)? {
                Ok((StatusCode::OK, format!("{name}: resumed")))
            } else {
                Ok((StatusCode::OK, format!("{name}: not paused")))
            }
        }
        "unlock" => {
            let Some(lock) = web.store.find_lock(name).await.map_err(failed)? else {
                return Err((StatusCode::NOT_FOUND, format!("{name} has no lease row")));
            };
            if !web.store.is_held(name).await.map_err(failed)? {
                return Ok((StatusCode::OK, format!("{name}: not held")));
            }
            let running = web
                .store
                .running_under(name, lock.fence)
                .await
                .map_err(failed)?;
            if let Some(run) = running
                && !params.force
            {
                return conflict(format!(
                    "{name} is held by {} whose run {} is still recorded running; unlock with force to end the lease anyway (its holder then stops that run)",
                    run.instance, run.id
                ));
            }
            web.store.force_unlock(name).await.map_err(failed)?;
            Ok((
                StatusCode::OK,
                format!(
                    "{name}: lease of {} (fence {}) ended",
                    lock.locked_by.as_deref().unwrap_or("?"),
                    lock.fence
                ),
            ))
        }
        other => Err((
            StatusCode::NOT_FOUND,
            format!("unknown action {other:?}: trigger, pause, resume or unlock"),
        )),
    }
}
