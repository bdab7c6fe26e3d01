//! What the daemon tells the outside: Prometheus metrics (recorded through
//! the `metrics` facade, rendered by `metrics-exporter-prometheus`), the
//! `/metrics` and `/healthz` endpoints, and systemd's readiness and
//! watchdog notifications.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{debug, warn};

use crate::history::RunStatus;

/// `/healthz` fails when the tick loop has not beaten for this long.
const TICK_STALE_AFTER: Duration = Duration::from_secs(5);
/// `/healthz` fails when the database has not answered for this long.
const DATABASE_STALE_AFTER: Duration = Duration::from_secs(30);

/// Installs the Prometheus recorder once per process and returns its handle.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0, 300.0, 1800.0, 3600.0,
            ];
            let recorder = PrometheusBuilder::new()
                .set_buckets(&buckets)
                .map(PrometheusBuilder::build_recorder)
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                debug!("a metrics recorder was already installed");
            }
            describe();
            handle
        })
        .clone()
}

/// The HELP text of every metric (`promtool check metrics` wants one).
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "replicron_claims_total",
        "Claims of a job's instants by this replica, by result (won: it ran the instant; lost: another replica or a later instant had it)"
    );
    describe_counter!(
        "replicron_overruns_total",
        "Instants not run because the job's previous run was still going when they came (or lock_at_least_for kept its lease)"
    );
    describe_counter!(
        "replicron_instants_skipped_total",
        "Instants this replica did not claim, by reason: database_down, too_late (more than 60 s late), error"
    );
    describe_histogram!(
        "replicron_start_lateness_seconds",
        Unit::Seconds,
        "Time from a scheduled instant (by the database's clock) to its run's process start"
    );
    describe_counter!(
        "replicron_runs_total",
        "Run attempts that ended on this replica, by status"
    );
    describe_histogram!(
        "replicron_run_duration_seconds",
        Unit::Seconds,
        "How long run attempts took, by job"
    );
    describe_gauge!(
        "replicron_last_success_timestamp_seconds",
        Unit::Seconds,
        "Unix time of the job's last successful run on this replica (0: none since it started)"
    );
    describe_counter!(
        "replicron_lease_extensions_failed_total",
        "Keep-alive extensions of a running job's lease that failed (not answered, or the lease was gone)"
    );
    describe_counter!(
        "replicron_database_errors_total",
        "Database calls that failed"
    );
    describe_gauge!(
        "replicron_history_pending_writes",
        "History writes (runs' ends) queued until the database takes them"
    );
    describe_gauge!(
        "replicron_clock_offset_seconds",
        Unit::Seconds,
        "How far this host's clock is ahead of the database's (negative: behind); replicas fire on the database's clock"
    );
    describe_gauge!(
        "replicron_clock_offset_error_seconds",
        Unit::Seconds,
        "The error bound of replicron_clock_offset_seconds: half the sample's round trip plus the database clock's resolution"
    );
    describe_gauge!(
        "replicron_database_up",
        "1 while the database answers, 0 while it is unreachable"
    );
    counter!("replicron_database_errors_total").increment(0);
    gauge!("replicron_history_pending_writes").set(0.0);
}

/// Every per-job counter and gauge an alert may need, at 0, so that a rule
/// such as `increase(replicron_runs_total{status="failed"}[1h]) > 0` sees
/// the job before its first failure.
pub fn register_job(job: &str) {
    for result in ["won", "lost"] {
        counter!("replicron_claims_total", "job" => job.to_string(), "result" => result)
            .increment(0);
    }
    counter!("replicron_overruns_total", "job" => job.to_string()).increment(0);
    for reason in ["database_down", "too_late", "error"] {
        counter!("replicron_instants_skipped_total", "job" => job.to_string(), "reason" => reason)
            .increment(0);
    }
    for status in RunStatus::ALL {
        if status != RunStatus::Running {
            counter!("replicron_runs_total", "job" => job.to_string(), "status" => status.as_str())
                .increment(0);
        }
    }
    counter!("replicron_lease_extensions_failed_total", "job" => job.to_string()).increment(0);
    gauge!("replicron_last_success_timestamp_seconds", "job" => job.to_string()).increment(0.0);
}

/// A claim this replica won or lost.
pub fn claim(job: &str, won: bool) {
    let result = if won { "won" } else { "lost" };
    counter!("replicron_claims_total", "job" => job.to_string(), "result" => result).increment(1);
}

/// An instant skipped because the job's lease stayed held.
pub fn overrun(job: &str) {
    counter!("replicron_overruns_total", "job" => job.to_string()).increment(1);
}

/// Instants skipped for `reason` (`database_down`, `too_late`, `error`);
/// overruns are counted by [`overrun`].
pub fn skipped(job: &str, reason: &'static str, count: usize) {
    counter!("replicron_instants_skipped_total", "job" => job.to_string(), "reason" => reason)
        .increment(count as u64);
}

/// How late a run started after its instant.
pub fn start_lateness(job: &str, late: Duration) {
    histogram!("replicron_start_lateness_seconds", "job" => job.to_string())
        .record(late.as_secs_f64());
}

/// A run ended.
pub fn run_finished(job: &str, status: RunStatus, duration: Duration, wall_clock_end: f64) {
    counter!("replicron_runs_total", "job" => job.to_string(), "status" => status.as_str())
        .increment(1);
    histogram!("replicron_run_duration_seconds", "job" => job.to_string())
        .record(duration.as_secs_f64());
    if status == RunStatus::Succeeded {
        gauge!("replicron_last_success_timestamp_seconds", "job" => job.to_string())
            .set(wall_clock_end);
    }
}

/// A lease extension failed (not answered, or the lease was gone).
pub fn extension_failed(job: &str) {
    counter!("replicron_lease_extensions_failed_total", "job" => job.to_string()).increment(1);
}

/// A database call failed.
pub fn database_error() {
    counter!("replicron_database_errors_total").increment(1);
}

/// History writes waiting for the database.
pub fn pending_history_writes(n: usize) {
    gauge!("replicron_history_pending_writes").set(n as f64);
}

/// The last estimate of this host's clock against the database's: how far
/// the host is ahead (negative: behind), and the estimate's error bound.
pub fn clock_offset(estimate: crate::schedule::Offset) {
    let ahead = -(estimate.offset.num_microseconds().unwrap_or(0) as f64) / 1e6;
    gauge!("replicron_clock_offset_seconds").set(ahead);
    gauge!("replicron_clock_offset_error_seconds").set(estimate.error.as_secs_f64());
}

/// Whether the database answers.
pub fn database_up(up: bool) {
    gauge!("replicron_database_up").set(if up { 1.0 } else { 0.0 });
}

/// Beats of the daemon's tick loop and answers of the database, for
/// `/healthz` and the systemd watchdog.
pub struct Liveness {
    started: Instant,
    tick_ms: AtomicU64,
    database_ms: AtomicU64,
    database_down: AtomicBool,
}

impl Liveness {
    /// Both fresh now.
    pub fn new() -> Self {
        Liveness {
            started: Instant::now(),
            tick_ms: AtomicU64::new(0),
            database_ms: AtomicU64::new(0),
            database_down: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The tick loop is alive.
    pub fn tick(&self) {
        self.tick_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// The database answered.
    pub fn database_answered(&self) {
        self.database_ms.store(self.now_ms(), Ordering::Relaxed);
        self.database_down.store(false, Ordering::Relaxed);
    }

    /// The database could not be reached.
    pub fn database_unreachable(&self) {
        self.database_down.store(true, Ordering::Relaxed);
    }

    /// `None` when healthy, else why not.
    pub fn problem(&self) -> Option<&'static str> {
        let now = self.now_ms();
        let age =
            |at: &AtomicU64| Duration::from_millis(now.saturating_sub(at.load(Ordering::Relaxed)));
        if age(&self.tick_ms) > TICK_STALE_AFTER {
            Some("the tick loop is not running")
        } else if self.database_down.load(Ordering::Relaxed) {
            Some("the database is unreachable")
        } else if age(&self.database_ms) > DATABASE_STALE_AFTER {
            Some("the database has not answered recently")
        } else {
            None
        }
    }
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::new()
    }
}

/// Beats every second while the runtime runs tasks, and passes the beat on
/// to systemd's watchdog when one is configured.
pub async fn heartbeat(liveness: Arc<Liveness>) {
    let watchdog = sd_notify::watchdog_enabled();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        liveness.tick();
        if watchdog.is_some() && liveness.problem() != Some("the tick loop is not running") {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        }
    }
}

/// Tells systemd (if it started us) what the daemon is doing.
pub fn notify_systemd(state: &str) {
    let state = match state {
        "ready" => sd_notify::NotifyState::Ready,
        "reloading" => sd_notify::NotifyState::Reloading,
        _ => sd_notify::NotifyState::Stopping,
    };
    if let Err(e) = sd_notify::notify(&[state]) {
        warn!("cannot notify systemd: {e}");
    }
}

/// Serves `/metrics` and `/healthz` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, handle: PrometheusHandle, liveness: Arc<Liveness>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let (handle, liveness) = (handle.clone(), liveness.clone());
        tokio::spawn(async move {
            let mut request = Vec::with_capacity(1024);
            let mut buffer = [0_u8; 1024];
            // The request line is all that matters; stop at the header end.
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                    Ok(Ok(n)) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request);
            let mut words = line.split_whitespace();
            let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let (status, content_type, body) = match (method, path.split('?').next().unwrap_or(""))
            {
                ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", handle.render()),
                ("GET", "/healthz") => match liveness.problem() {
                    None => (
                        "200 OK",
                        "application/json",
                        "{\"status\":\"ok\"}\n".to_string(),
                    ),
                    Some(reason) => (
                        "503 Service Unavailable",
                        "application/json",
                        format!("{{\"status\":\"unhealthy\",\"reason\":\"{reason}\"}}\n"),
                    ),
                },
                ("GET", _) => (
                    "404 Not Found",
                    "text/plain",
                    "try /metrics or /healthz\n".to_string(),
                ),
                _ => (
                    "405 Method Not Allowed",
                    "text/plain",
                    "GET only\n".to_string(),
                ),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Runs the recorder's housekeeping (histogram windows) now and then.
pub async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}
