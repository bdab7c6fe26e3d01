//! Prometheus metrics, recorded through the `metrics` facade (a no-op
//! until a recorder is installed: the daemon installs one, a service that
//! embeds replicron may install its own) and rendered by
//! `metrics-exporter-prometheus`.

use std::sync::OnceLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use metrics::{counter, gauge, histogram};
#[cfg(feature = "daemon")]
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
#[cfg(feature = "daemon")]
use tracing::debug;

use crate::run::{Event, RunStatus};

#[cfg(feature = "daemon")]
/// Installs the Prometheus recorder once per process and returns its handle.
pub(crate) fn install() -> PrometheusHandle {
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

#[cfg(feature = "daemon")]
/// The HELP text of every metric (`promtool check metrics` wants one).
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "replicron_claims_total",
        "Claims of a job's instants by this replica, by result (won: it ran the instant; lost: another replica or a later instant had it)"
    );
    describe_counter!(
        "replicron_claims_stolen_total",
        "Instants this replica won as a stealer: claimed after the steal delay because the live replica the rendezvous hash gave them to had not claimed them"
    );
    describe_counter!(
        "replicron_overruns_total",
        "Instants not run because the job's previous run was still going when they came (or lock_at_least_for kept its lease)"
    );
    describe_counter!(
        "replicron_instants_skipped_total",
        "Instants this replica did not claim, by reason: database_down, too_late (more than 60 s late), unanswered (the claim's answer was lost), paused, minority (its definition of the job is in the minority among live replicas), error"
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
    describe_counter!(
        "replicron_runs_long_running_total",
        "Runs this replica held that were still going warn_after after their attempt started (once per run; the run goes on)"
    );
    describe_counter!(
        "replicron_runs_late_start_total",
        "Runs this replica started more than late_after after they were due (their instant plus the job's jitter delay)"
    );
    describe_histogram!(
        "replicron_run_duration_seconds",
        Unit::Seconds,
        "How long run attempts took, by job"
    );
    describe_gauge!(
        "replicron_last_success_timestamp_seconds",
        Unit::Seconds,
        "Unix time of the job's last successful run on this replica (a run skipped by skip_exit_codes, which had nothing to do, counts; 0: none since it started)"
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
        "replicron_live_output_streams",
        "Live output streams of running runs this replica serves now (GET /runs/ID/output)"
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
    describe_counter!(
        "replicron_notifications_total",
        "Notifications (webhook, command) and pings this replica sent, by job, event and result: sent, failed (after its retries), dropped (the queue, or the job's backlog of pings, was full)"
    );
    describe_counter!(
        "replicron_missed_instants_total",
        "Instants no replica claimed in time, recorded missed by this replica's check"
    );
    describe_gauge!(
        "replicron_next_run_timestamp_seconds",
        Unit::Seconds,
        "Unix time of the job's next scheduled instant"
    );
    describe_gauge!(
        "replicron_last_run_status",
        "1 for the status of the last run that ended on this replica, 0 for the others"
    );
    describe_gauge!(
        "replicron_config_drift",
        "1 while live replicas define the job differently (their job files differ), else 0; read every 10 s"
    );
    describe_gauge!(
        "replicron_job_held",
        "1 while the job is held on this replica (a calendar it names cannot be read: it is not run), else 0"
    );
    describe_gauge!(
        "replicron_job_paused",
        "1 while the job is paused fleet-wide (replicron pause), else 0; read every 10 s"
    );
    describe_gauge!(
        "replicron_job_interval_seconds",
        Unit::Seconds,
        "The time between two instants of the job's schedule (the next two, for an irregular one)"
    );
    describe_counter!(
        "replicron_web_sign_ins_total",
        "Sign-ins to this replica's dashboard, by result: ok, refused (not the token), throttled (too many wrong tokens from the address)"
    );
    describe_counter!(
        "replicron_trace_spans_exported_total",
        "Spans of runs the OTLP receiver accepted (only while traces are on)"
    );
    describe_counter!(
        "replicron_trace_spans_dropped_total",
        "Spans of runs dropped, by reason: queue_full (the exporter's queue had no room), not_accepted (the receiver was down or refused them); only while traces are on"
    );
    describe_counter!(
        "replicron_throttled_starts_total",
        "Catch-up, backfill and retry runs this replica held back under [daemon] max_starts_per_second, by kind: catch_up, backfill, retry"
    );
    counter!("replicron_database_errors_total").increment(0);
    gauge!("replicron_history_pending_writes").set(0.0);
    for kind in ["catch_up", "backfill", "retry"] {
        counter!("replicron_throttled_starts_total", "kind" => kind).increment(0);
    }
    if super::traces::enabled() {
        counter!("replicron_trace_spans_exported_total").increment(0);
        for reason in [SpanDrop::QueueFull, SpanDrop::NotAccepted] {
            counter!("replicron_trace_spans_dropped_total", "reason" => reason.as_str())
                .increment(0);
        }
    }
    for result in ["ok", "refused", "throttled"] {
        counter!("replicron_web_sign_ins_total", "result" => result).increment(0);
    }
}

/// A catch-up, backfill or retry run held back by the start throttle.
pub(crate) fn throttled_start(kind: &'static str) {
    counter!("replicron_throttled_starts_total", "kind" => kind).increment(1);
}

/// A sign-in to the dashboard: `ok`, `refused` or `throttled`.
pub(crate) fn sign_in(result: &'static str) {
    counter!("replicron_web_sign_ins_total", "result" => result).increment(1);
}

/// Every per-job counter and gauge an alert may need, at 0, so that a rule
/// such as `increase(replicron_runs_total{status="failed"}[1h]) > 0` sees
/// the job before its first failure.
pub(crate) fn register_job(job: &str) {
    for result in ["won", "lost"] {
        counter!("replicron_claims_total", "job" => job.to_string(), "result" => result)
            .increment(0);
    }
    counter!("replicron_overruns_total", "job" => job.to_string()).increment(0);
    for reason in Skip::ALL {
        counter!("replicron_instants_skipped_total", "job" => job.to_string(), "reason" => reason.as_str())
            .increment(0);
    }
    for status in RunStatus::ALL {
        if status != RunStatus::Running {
            counter!("replicron_runs_total", "job" => job.to_string(), "status" => status.as_str())
                .increment(0);
        }
    }
    counter!("replicron_lease_extensions_failed_total", "job" => job.to_string()).increment(0);
    counter!("replicron_runs_long_running_total", "job" => job.to_string()).increment(0);
    counter!("replicron_runs_late_start_total", "job" => job.to_string()).increment(0);
    gauge!("replicron_last_success_timestamp_seconds", "job" => job.to_string()).increment(0.0);
    counter!("replicron_missed_instants_total", "job" => job.to_string()).increment(0);
    gauge!("replicron_job_paused", "job" => job.to_string()).increment(0.0);
    gauge!("replicron_config_drift", "job" => job.to_string()).increment(0.0);
    for event in Event::ALL {
        for result in ["sent", "failed", "dropped"] {
            counter!("replicron_notifications_total", "job" => job.to_string(), "event" => event.as_str(), "result" => result)
                .increment(0);
        }
    }
}

/// The job's schedule: its next instant and its interval.
pub(crate) fn schedule(
    job: &str,
    next: Option<chrono::DateTime<chrono::Utc>>,
    interval: Option<Duration>,
) {
    if let Some(next) = next {
        gauge!("replicron_next_run_timestamp_seconds", "job" => job.to_string())
            .set(next.timestamp_millis() as f64 / 1000.0);
    }
    if let Some(interval) = interval {
        gauge!("replicron_job_interval_seconds", "job" => job.to_string())
            .set(interval.as_secs_f64());
    }
}

/// A notification's (or a ping's) outcome.
pub(crate) fn notification(job: &str, event: &'static str, result: &'static str) {
    counter!("replicron_notifications_total", "job" => job.to_string(), "event" => event, "result" => result)
        .increment(1);
}

/// Instants recorded missed.
pub(crate) fn missed(job: &str, count: usize) {
    counter!("replicron_missed_instants_total", "job" => job.to_string()).increment(count as u64);
}

/// A claim this replica won or lost.
pub(crate) fn claim(job: &str, won: bool) {
    let result = if won { "won" } else { "lost" };
    counter!("replicron_claims_total", "job" => job.to_string(), "result" => result).increment(1);
}

/// An instant won as a stealer: claimed after its first claimant, another
/// live replica, let it pass.
pub(crate) fn claim_stolen() {
    counter!("replicron_claims_stolen_total").increment(1);
}

/// An instant skipped because the job's lease stayed held.
pub(crate) fn overrun(job: &str) {
    counter!("replicron_overruns_total", "job" => job.to_string()).increment(1);
}

/// Whether live replicas define the job differently.
pub(crate) fn config_drift(job: &str, drifted: bool) {
    gauge!("replicron_config_drift", "job" => job.to_string()).set(if drifted { 1.0 } else { 0.0 });
}

/// Whether the job is held on this replica (a calendar of its cannot be
/// read).
pub(crate) fn job_held(job: &str, held: bool) {
    gauge!("replicron_job_held", "job" => job.to_string()).set(if held { 1.0 } else { 0.0 });
}

/// Whether the job is paused fleet-wide.
pub(crate) fn paused(job: &str, paused: bool) {
    gauge!("replicron_job_paused", "job" => job.to_string()).set(if paused { 1.0 } else { 0.0 });
}

/// Why an instant was not run here (overruns are counted by [`overrun`]):
/// `replicron_instants_skipped_total`'s `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Skip {
    /// The database could not be reached.
    DatabaseDown,
    /// More than `LATE_LIMIT` late.
    TooLate,
    /// Its claim got no answer, and whether it committed could not be
    /// learnt in time.
    Unanswered,
    /// The job is paused fleet-wide.
    Paused,
    /// This replica's definition of the job is in the minority.
    Minority,
    /// The claim or the run could not be set up.
    Error,
    /// The replica stopped (or a reload retired the job) while the instant
    /// waited for the job's run, and no other replica claimed it.
    Stopped,
}

impl Skip {
    /// Every reason.
    pub(crate) const ALL: [Skip; 7] = [
        Skip::DatabaseDown,
        Skip::TooLate,
        Skip::Unanswered,
        Skip::Paused,
        Skip::Minority,
        Skip::Error,
        Skip::Stopped,
    ];

    /// Its label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Skip::DatabaseDown => "database_down",
            Skip::TooLate => "too_late",
            Skip::Unanswered => "unanswered",
            Skip::Paused => "paused",
            Skip::Minority => "minority",
            Skip::Error => "error",
            Skip::Stopped => "stopped",
        }
    }
}

/// Instants skipped for `reason`.
pub(crate) fn skipped(job: &str, reason: Skip, count: usize) {
    counter!("replicron_instants_skipped_total", "job" => job.to_string(), "reason" => reason.as_str())
        .increment(count as u64);
}

/// How late a run started after its instant.
pub(crate) fn start_lateness(job: &str, late: Duration) {
    histogram!("replicron_start_lateness_seconds", "job" => job.to_string())
        .record(late.as_secs_f64());
}

/// A run still going `warn_after` after its attempt started.
pub(crate) fn long_running(job: &str) {
    counter!("replicron_runs_long_running_total", "job" => job.to_string()).increment(1);
}

/// A run that started more than `late_after` after it was due.
pub(crate) fn late_start(job: &str) {
    counter!("replicron_runs_late_start_total", "job" => job.to_string()).increment(1);
}

/// The job's last success: when a run of it ended well, and at start as
/// the history has it, so that the gauge tells the truth for the fleet
/// from the first scrape, not only after a success on this replica.
pub(crate) fn last_success(job: &str, at: DateTime<Utc>) {
    gauge!("replicron_last_success_timestamp_seconds", "job" => job.to_string())
        .set(at.timestamp_millis() as f64 / 1000.0);
}

/// A run ended.
pub(crate) fn run_finished(job: &str, status: RunStatus, duration: Duration, ended: DateTime<Utc>) {
    counter!("replicron_runs_total", "job" => job.to_string(), "status" => status.as_str())
        .increment(1);
    histogram!("replicron_run_duration_seconds", "job" => job.to_string())
        .record(duration.as_secs_f64());
    if status == RunStatus::Succeeded {
        last_success(job, ended);
    }
    for each in RunStatus::ALL {
        if !matches!(each, RunStatus::Running | RunStatus::Missed) {
            let value = if each == status { 1.0 } else { 0.0 };
            gauge!("replicron_last_run_status", "job" => job.to_string(), "status" => each.as_str())
                .set(value);
        }
    }
}

/// A lease extension failed (not answered, or the lease was gone).
pub(crate) fn extension_failed(job: &str) {
    counter!("replicron_lease_extensions_failed_total", "job" => job.to_string()).increment(1);
}

/// A database call failed.
pub(crate) fn database_error() {
    counter!("replicron_database_errors_total").increment(1);
}

/// History writes waiting for the database.
pub(crate) fn pending_history_writes(n: usize) {
    gauge!("replicron_history_pending_writes").set(n as f64);
}

/// The last estimate of this host's clock against the database's: how far
/// the host is ahead (negative: behind), and the estimate's error bound.
pub(crate) fn clock_offset(estimate: crate::schedule::Offset) {
    let ahead = -(estimate.offset.num_microseconds().unwrap_or(0) as f64) / 1e6;
    gauge!("replicron_clock_offset_seconds").set(ahead);
    gauge!("replicron_clock_offset_error_seconds").set(estimate.error.as_secs_f64());
}

/// Whether the database answers.
pub(crate) fn database_up(up: bool) {
    gauge!("replicron_database_up").set(if up { 1.0 } else { 0.0 });
}

/// Why spans of runs were dropped.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SpanDrop {
    /// The exporter's queue had no room.
    QueueFull,
    /// The receiver was down, or refused them.
    NotAccepted,
}

impl SpanDrop {
    fn as_str(self) -> &'static str {
        match self {
            SpanDrop::QueueFull => "queue_full",
            SpanDrop::NotAccepted => "not_accepted",
        }
    }
}

/// Spans the OTLP receiver accepted.
pub(crate) fn spans_exported(spans: usize) {
    counter!("replicron_trace_spans_exported_total").increment(spans as u64);
}

/// Spans dropped, and why.
pub(crate) fn spans_dropped(reason: SpanDrop, spans: usize) {
    counter!("replicron_trace_spans_dropped_total", "reason" => reason.as_str())
        .increment(spans as u64);
}

#[cfg(feature = "daemon")]
/// Runs the recorder's housekeeping (histogram windows) now and then.
pub(crate) async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}
