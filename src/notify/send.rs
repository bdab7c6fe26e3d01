//! One delivery: a webhook's POST, a command's run or a ping's GET, with
//! its timeout and its retries. HTTP goes through ureq (rustls, the
//! platform's certificate store), on tokio's blocking pool so that no
//! runtime thread waits on the network.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tracing::{debug, error, warn};

use super::{Notice, Notify, Ping, SentLog, Template};
use crate::backoff::Backoff;
use crate::config::Command;

/// Why one try of a delivery failed (each message holds its cause's).
#[derive(Debug, thiserror::Error)]
enum SendError {
    /// The URL or a header named an environment variable that is not set.
    #[error("{0}")]
    Template(String),
    /// The request failed, or was answered with an error status.
    #[error("{method} {target}: {error}")]
    Http {
        method: &'static str,
        /// The scheme and host only: no secret path or token.
        target: String,
        error: ureq::Error,
    },
    /// The blocking task that sent the request failed.
    #[error("the request's task failed: {0}")]
    Task(tokio::task::JoinError),
    /// The whole try took longer than the timeout.
    #[error("no answer within {}", humantime::format_duration(*.0))]
    NoAnswer(Duration),
    #[error("cannot start the notifier command: {0}")]
    Spawn(std::io::Error),
    #[error("the notifier command did not end within {}", humantime::format_duration(*.0))]
    CommandTimeout(Duration),
    #[error("the notifier command: {0}")]
    Wait(std::io::Error),
    /// The command exited with a failure: its status and the last line of
    /// its stderr.
    #[error("the notifier command exited {status}: {last}")]
    Exited {
        status: std::process::ExitStatus,
        last: String,
    },
}

/// Sends `notice` to the job's webhook and command, each with its retries.
pub(super) async fn event(notify: &Notify, notice: &Notice, log: &SentLog) {
    if let Some(url) = &notify.webhook {
        let body = match serde_json::to_vec(notice) {
            Ok(body) => body,
            Err(e) => {
                error!(job = %notice.job, "cannot encode a notification: {e}");
                return;
            }
        };
        let headers = notify.webhook_headers.clone();
        let url = url.clone();
        let timeout = notify.timeout;
        deliver(
            (notify, log),
            &notice.job,
            notice.event.as_str(),
            notice.history_id,
            "webhook",
            || {
                let (url, headers, body) = (url.clone(), headers.clone(), body.clone());
                async move { post(&url, &headers, body, timeout).await }
            },
        )
        .await;
    }
    if let Some(command) = &notify.command {
        deliver(
            (notify, log),
            &notice.job,
            notice.event.as_str(),
            notice.history_id,
            "command",
            || run(command, notice, notify.timeout, &notify.hidden_env),
        )
        .await;
    }
}

/// Pings the job's URL for `ping` of run `run_id`.
pub(super) async fn ping(notify: &Notify, job: &str, ping: Ping, run_id: i64, log: &SentLog) {
    let Some(url) = &notify.ping_url else {
        return;
    };
    let timeout = notify.timeout;
    deliver(
        (notify, log),
        job,
        ping.label(),
        Some(run_id),
        "ping",
        || {
            let url = url.clone();
            async move { get(&url, ping.suffix(), timeout).await }
        },
    )
    .await;
}

/// Tries `send` once and then up to `retries` more times with backoff;
/// counts, keeps in `log` and, when every try failed, logs the result.
async fn deliver<F, Fut>(
    (notify, log): (&Notify, &SentLog),
    job: &str,
    event: &'static str,
    run_id: Option<i64>,
    to: &'static str,
    send: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), SendError>>,
{
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30)).jitter(0.2);
    let tries = 1 + notify.retries;
    for attempt in 1..=tries {
        // The timeout bounds the whole try, whatever the transport does.
        let result =
            match tokio::time::timeout(notify.timeout + Duration::from_secs(1), send()).await {
                Ok(result) => result,
                Err(_) => Err(SendError::NoAnswer(notify.timeout)),
            };
        match result {
            Ok(()) => {
                log.record(job, event, run_id, to, "sent", None);
                debug!(job = %job, event, run_id, to, "notification sent");
                return;
            }
            Err(e) if attempt < tries => {
                warn!(job = %job, event, run_id, to, attempt, "notification not sent, trying again: {e}");
                backoff.wait().await;
            }
            Err(e) => {
                log.record(job, event, run_id, to, "failed", Some(e.to_string()));
                error!(job = %job, event, run_id, to, attempts = tries, "notification failed: {e}");
            }
        }
    }
}

/// The scheme and host of `url`: enough to say where a request went
/// without printing a secret path or token.
fn describe(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit('@').next().unwrap_or(host);
    format!("{scheme}://{host}")
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .user_agent(concat!("replicron/", env!("CARGO_PKG_VERSION")))
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .into()
}

async fn post(
    url: &Template,
    headers: &std::collections::BTreeMap<String, Template>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), SendError> {
    let url = url.render(env_var).map_err(SendError::Template)?;
    let mut rendered = Vec::new();
    for (name, value) in headers {
        rendered.push((
            name.clone(),
            value.render(env_var).map_err(SendError::Template)?,
        ));
    }
    let target = describe(&url);
    tokio::task::spawn_blocking(move || {
        let mut request = agent(timeout)
            .post(&url)
            .header("Content-Type", "application/json");
        for (name, value) in &rendered {
            request = request.header(name, value);
        }
        request
            .send(&body[..])
            .map(drop)
            .map_err(|error| SendError::Http {
                method: "POST",
                target,
                error,
            })
    })
    .await
    .map_err(SendError::Task)?
}

async fn get(url: &Template, suffix: &str, timeout: Duration) -> Result<(), SendError> {
    let url = format!(
        "{}{suffix}",
        url.render(env_var)
            .map_err(SendError::Template)?
            .trim_end_matches('/')
    );
    let target = describe(&url);
    tokio::task::spawn_blocking(move || {
        agent(timeout)
            .get(&url)
            .call()
            .map(drop)
            .map_err(|error| SendError::Http {
                method: "GET",
                target,
                error,
            })
    })
    .await
    .map_err(SendError::Task)?
}

/// Runs the notifier command with the notice in its environment and the
/// output's tail on stdin; it must exit 0 within the timeout.
async fn run(
    command: &Command,
    notice: &Notice,
    timeout: Duration,
    hidden: &[String],
) -> Result<(), SendError> {
    let mut process = match command {
        Command::Shell { shell, command } => {
            let mut c = tokio::process::Command::new(shell);
            c.arg("-c").arg(command);
            c
        }
        Command::Exec { args } => {
            let mut c = tokio::process::Command::new(&args[0]);
            c.args(&args[1..]);
            c
        }
    };
    for var in crate::config::daemon_env_vars().chain(crate::secrets::never_inherited()) {
        process.env_remove(var);
    }
    for var in hidden {
        process.env_remove(var);
    }
    let exit_code = notice.exit_code.map(|c| c.to_string()).unwrap_or_default();
    process
        .env("REPLICRON_EVENT", notice.event.as_str())
        .env("REPLICRON_JOB", &notice.job)
        .env("REPLICRON_SCHEDULED_AT", &notice.scheduled_at)
        .env("REPLICRON_STATUS", notice.status.as_str())
        .env("REPLICRON_EXIT_CODE", exit_code)
        .env("REPLICRON_ATTEMPT", notice.attempt.to_string())
        .env("REPLICRON_INSTANCE", &notice.instance)
        .env(
            "REPLICRON_RUN_ID",
            notice
                .history_id
                .map(|id| id.to_string())
                .unwrap_or_default(),
        )
        .env(
            "REPLICRON_LATE_SECONDS",
            notice
                .late_seconds
                .map(|late| format!("{late:.3}"))
                .unwrap_or_default(),
        )
        .env("REPLICRON_TEXT", &notice.text)
        .env("REPLICRON_TRIGGER", notice.trigger.as_str())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Its own process group, so that a timeout ends what it started too
        // (a `mail` it ran, say), not only the shell.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = process.spawn().map_err(SendError::Spawn)?;
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(nix::unistd::Pid::from_raw);
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its stdin is no failure.
        let _ = stdin.write_all(notice.output.as_bytes()).await;
    }
    let waited = tokio::time::timeout(timeout, child.wait_with_output()).await;
    match waited {
        Err(_) => {
            if let Some(group) = group {
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            }
            Err(SendError::CommandTimeout(timeout))
        }
        Ok(Err(e)) => Err(SendError::Wait(e)),
        Ok(Ok(output)) if output.status.success() => Ok(()),
        Ok(Ok(output)) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().last().unwrap_or("").trim().to_string();
            Err(SendError::Exited {
                status: output.status,
                last,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn a_url_is_described_without_its_secrets() {
        assert_eq!(
            describe("https://hooks.slack.com/services/T00/B00/XXXX?token=1"),
            "https://hooks.slack.com"
        );
        assert_eq!(
            describe("http://user:pw@hc.local:8000/ping/uuid"),
            "http://hc.local:8000"
        );
    }
}
