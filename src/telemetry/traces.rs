//! OpenTelemetry traces of runs: the `run` span (`scheduler::execute`) and
//! its children, exported over OTLP/HTTP by `tracing-opentelemetry` and
//! `opentelemetry-otlp`. Off unless an endpoint is configured, and then
//! nothing here is installed.
//!
//! A run's trace id and span id are derived from its identity (job,
//! instant, fence), so that a dependent job's run, on any replica, can link
//! to the trace of its parents' runs from their history rows alone.
//!
//! Spans leave through a bounded queue and a thread of their own: a
//! receiver that is down or slow never delays a run. What cannot be queued,
//! or was not accepted, is dropped and counted
//! (`replicron_trace_spans_dropped_total`).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId};
use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};

pub(crate) use super::trace_config::{CLAIM_SENT, TelemetryConfig};
use super::trace_config::{PROTOCOLS, protocol_of};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, Sampler,
    SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};
use sha2::{Digest as _, Sha256};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Spans waiting for the exporter at most; past it, a span is dropped.
const QUEUE: usize = 4096;
/// Spans sent in one request at most.
const BATCH: usize = 512;
/// How long a request to the receiver may take, unless
/// `OTEL_EXPORTER_OTLP_TIMEOUT` says otherwise (milliseconds).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the daemon waits at its exit for the last spans to leave.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// What the process environment and the file say, resolved.
#[derive(Debug)]
struct Settings {
    /// Given to the exporter; `None` leaves it to the environment.
    endpoint: Option<String>,
    protocol: Protocol,
    service_name: Option<String>,
    sampler: Option<Sampler>,
    timeout: Duration,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether traces are wanted, and how; `Err` says why they cannot be.
fn settings(
    file: &TelemetryConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Settings>, String> {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return Ok(None);
    }
    let from_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .is_some();
    if !from_env && file.endpoint.is_none() {
        return Ok(None);
    }
    let (protocol_from, protocol) = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .map(|p| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", p))
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| ("OTEL_EXPORTER_OTLP_PROTOCOL", p)))
    {
        Some(found) => found,
        None => (
            "[telemetry] protocol",
            file.protocol
                .clone()
                .unwrap_or_else(|| PROTOCOLS[0].to_string()),
        ),
    };
    let protocol = match protocol_of(&protocol).map_err(|e| format!("{protocol_from}: {e}"))? {
        super::trace_config::Protocol::Protobuf => Protocol::HttpBinary,
        super::trace_config::Protocol::Json => Protocol::HttpJson,
    };
    let timeout = match env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
    {
        Some(ms) => Duration::from_millis(ms.trim().parse().map_err(|_| {
            format!("OTEL_EXPORTER_OTLP_TIMEOUT {ms:?} is not a number of milliseconds")
        })?),
        None => DEFAULT_TIMEOUT,
    };
    let sampler = match (env("OTEL_TRACES_SAMPLER"), file.sample_ratio) {
        // The SDK reads the variable itself.
        (Some(_), _) | (None, None) => None,
        (None, Some(ratio)) => Some(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        )))),
    };
    Ok(Some(Settings {
        endpoint: if from_env {
            None
        } else {
            file.endpoint.as_deref().map(traces_url)
        },
        protocol,
        service_name: if env("OTEL_SERVICE_NAME").is_some()
            || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
                a.split(',')
                    .any(|kv| kv.trim_start().starts_with("service.name="))
            }) {
            None
        } else {
            Some(
                file.service_name
                    .clone()
                    .unwrap_or_else(|| "replicron".to_string()),
            )
        },
        sampler,
        timeout,
    }))
}

/// The receiver's URL for traces, from its base as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// takes it: `/v1/traces` is appended.
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// The exporter's provider, kept to send the last spans at exit.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The layer that turns the daemon's spans into OpenTelemetry spans, if
/// traces are configured; `Err` says what is wrong with their settings.
pub(crate) fn layer<S>(
    file: &TelemetryConfig,
) -> Result<Option<impl tracing_subscriber::Layer<S> + use<S>>, String>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let Some(settings) = settings(file, env)? else {
        return Ok(None);
    };
    let provider = provider(settings)?;
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "replicron");
    let _ = PROVIDER.set(provider);
    Ok(Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("replicron", tracing::Level::INFO),
            ),
    ))
}

fn provider(settings: Settings) -> Result<SdkTracerProvider, String> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(settings.timeout))
            .build(),
    );
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Ureq(agent))
        .with_protocol(settings.protocol)
        .with_timeout(settings.timeout);
    if let Some(endpoint) = &settings.endpoint {
        exporter = exporter.with_endpoint(endpoint);
    }
    let exporter = exporter
        .build()
        .map_err(|e| format!("the OTLP exporter: {e}"))?;
    let pending = Arc::new(AtomicUsize::new(0));
    let batches = BatchSpanProcessor::builder(Counted {
        inner: exporter,
        pending: pending.clone(),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(QUEUE + BATCH)
            .with_max_export_batch_size(BATCH)
            .build(),
    )
    .build();
    let mut resource = Resource::builder();
    if let Some(name) = settings.service_name {
        resource = resource.with_service_name(name);
    }
    if let Ok(host) = hostname::get() {
        resource = resource.with_attribute(KeyValue::new(
            "host.name",
            host.to_string_lossy().into_owned(),
        ));
    }
    let mut provider = SdkTracerProvider::builder()
        .with_span_processor(Gate {
            inner: batches,
            pending,
            claims: Mutex::new(HashMap::new()),
        })
        .with_id_generator(RunIds)
        .with_resource(resource.build());
    if let Some(sampler) = settings.sampler {
        provider = provider.with_sampler(sampler);
    }
    Ok(provider.build())
}

/// Whether traces are on in this process.
pub(crate) fn enabled() -> bool {
    PROVIDER.get().is_some()
}

/// Sends the spans still queued, waiting at most a few seconds.
pub(crate) fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.shutdown_with_timeout(SHUTDOWN_WAIT);
    }
}

/// OTLP over HTTP through `ureq`, the HTTP client replicron already uses
/// for its webhooks: the exporter's thread blocks on it, never the
/// runtime's.
#[derive(Debug)]
struct Ureq(ureq::Agent);

#[async_trait::async_trait]
impl HttpClient for Ureq {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let mut response = self.0.run(request.map(|body| body.to_vec()))?;
        let status = response.status();
        let body = response.body_mut().read_to_vec()?;
        Ok(Response::builder().status(status).body(Bytes::from(body))?)
    }
}

/// Counts what the exporter sent and what it could not.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    /// Spans handed to the batch processor and not yet to the exporter.
    pending: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        self.pending.fetch_sub(spans, Ordering::Relaxed);
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => super::spans_exported(spans),
            Err(e) => {
                super::spans_dropped(super::SpanDrop::NotAccepted, spans);
                tracing::debug!(spans, "spans not accepted by the OTLP receiver: {e}");
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Ahead of the batch processor: drops (and counts) a span its queue has no
/// room for, sets a run's start back to its claim's, and names its
/// attributes `replicron.*`.
#[derive(Debug)]
struct Gate {
    inner: BatchSpanProcessor,
    pending: Arc<AtomicUsize>,
    /// When each run's claim was sent, by the run span's id, until the run
    /// span ends.
    claims: Mutex<HashMap<SpanId, SystemTime>>,
}

impl SpanProcessor for Gate {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        self.claimed_at(&mut span);
        for attribute in &mut span.attributes {
            if !attribute.key.as_str().contains('.') {
                attribute.key = Key::from(format!("replicron.{}", attribute.key.as_str()));
            }
        }
        if self.pending.fetch_add(1, Ordering::Relaxed) >= QUEUE {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            super::spans_dropped(super::SpanDrop::QueueFull, 1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl Gate {
    /// A `claim` span starts when its claim was sent, and so does its run.
    fn claimed_at(&self, span: &mut SpanData) {
        let claims = || self.claims.lock().unwrap_or_else(|e| e.into_inner());
        match span.name.as_ref() {
            "claim" => {
                let sent = span.attributes.iter().find_map(|a| match a.value {
                    Value::I64(us) if a.key.as_str() == CLAIM_SENT => Some(us),
                    _ => None,
                });
                if let Some(us) = sent {
                    span.start_time = span
                        .end_time
                        .checked_sub(Duration::from_micros(us.max(0) as u64))
                        .unwrap_or(span.start_time);
                    claims().insert(span.parent_span_id, span.start_time);
                }
            }
            "run" => {
                if let Some(sent) = claims().remove(&span.span_context.span_id()) {
                    span.start_time = span.start_time.min(sent);
                }
            }
            _ => {}
        }
    }
}

thread_local! {
    /// The ids the next span started on this thread takes.
    static NEXT: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, but for a run's span, which takes those of its run (set
/// around its start, on its thread, by [`start_run`]).
#[derive(Debug)]
struct RunIds;

impl IdGenerator for RunIds {
    fn new_trace_id(&self) -> TraceId {
        match NEXT.get() {
            Some((trace, _)) => trace,
            None => RandomIdGenerator::default().new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match NEXT.get() {
            Some((_, span)) => span,
            None => RandomIdGenerator::default().new_span_id(),
        }
    }
}

/// A run's trace id and span id, from its identity.
pub(crate) fn run_ids(job: &str, instant: DateTime<Utc>, fence: i64) -> (TraceId, SpanId) {
    let digest = Sha256::new()
        .chain_update(b"replicron run\0")
        .chain_update(job.as_bytes())
        .chain_update(b"\0")
        .chain_update(instant.timestamp_micros().to_be_bytes())
        .chain_update(fence.to_be_bytes())
        .finalize();
    let mut trace = [0u8; 16];
    trace.copy_from_slice(&digest[..16]);
    let mut span = [0u8; 8];
    span.copy_from_slice(&digest[16..24]);
    (TraceId::from_bytes(trace), SpanId::from_bytes(span))
}

/// Whether a run with trace id `trace` is traced under `[telemetry]
/// sample_ratio` (unset: every run), as the exporter's sampler decides it
/// (a run span is a root: its trace id alone decides).
fn kept(file: &TelemetryConfig, trace: TraceId) -> bool {
    use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample as _};
    let Some(ratio) = file.sample_ratio else {
        return true;
    };
    let decision = Sampler::TraceIdRatioBased(ratio)
        .should_sample(
            None,
            trace,
            "run",
            &opentelemetry::trace::SpanKind::Internal,
            &[],
            &[],
        )
        .decision;
    decision == SamplingDecision::RecordAndSample
}

/// The trace viewer's URL of a run's trace (`[telemetry] trace_url`, its
/// `{trace_id}` and `{span_id}` filled in), if one is set and the run's
/// trace is one `sample_ratio` keeps.
pub(crate) fn trace_link(
    file: &TelemetryConfig,
    job: &str,
    instant: DateTime<Utc>,
    fence: i64,
) -> Option<String> {
    let template = file.trace_url.as_deref()?;
    let (trace, span) = run_ids(job, instant, fence);
    kept(file, trace).then(|| {
        template
            .replace("{trace_id}", &trace.to_string())
            .replace("{span_id}", &span.to_string())
    })
}

/// Starts `span` (a run's, a root) with its run's ids, when traces are on.
pub(crate) fn start_run(span: &tracing::Span, job: &str, instant: DateTime<Utc>, fence: i64) {
    if PROVIDER.get().is_none() {
        return;
    }
    NEXT.set(Some(run_ids(job, instant, fence)));
    // Starting the span asks for its ids.
    let _ = span.context();
    NEXT.set(None);
}

/// Links `span` to the run spans of other runs (a dependent run's parents).
pub(crate) fn link_runs<'a>(
    span: &tracing::Span,
    runs: impl IntoIterator<Item = (&'a str, DateTime<Utc>, i64)>,
) {
    if PROVIDER.get().is_none() {
        return;
    }
    for (job, instant, fence) in runs {
        let (trace, span_id) = run_ids(job, instant, fence);
        span.add_link(SpanContext::new(
            trace,
            span_id,
            TraceFlags::SAMPLED,
            true,
            Default::default(),
        ));
    }
}

/// W3C `traceparent` and `tracestate` of `span`, if it is traced: by
/// replicron's exporter, or by the OpenTelemetry layer of a service that
/// embeds replicron.
pub(crate) fn trace_context(span: &tracing::Span) -> Option<(String, String)> {
    let context = span.context();
    let span = context.span();
    let span = span.span_context();
    span.is_valid().then(|| {
        (
            format!(
                "00-{}-{}-{:02x}",
                span.trace_id(),
                span.span_id(),
                span.trace_flags().to_u8()
            ),
            span.trace_state().header(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::trace_config::check_trace_url;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert!(matches!(
            settings(&TelemetryConfig::default(), no_env),
            Ok(None)
        ));
        let file = TelemetryConfig {
            endpoint: Some("http://collector:4318/".into()),
            ..TelemetryConfig::default()
        };
        let on = settings(&file, no_env).unwrap().unwrap();
        assert_eq!(
            on.endpoint.as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(on.protocol, Protocol::HttpBinary);
        assert_eq!(on.service_name.as_deref(), Some("replicron"));
        assert_eq!(on.timeout, DEFAULT_TIMEOUT);
        let disabled = |name: &str| (name == "OTEL_SDK_DISABLED").then(|| "true".to_string());
        assert!(matches!(settings(&file, disabled), Ok(None)));
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let file = TelemetryConfig {
            endpoint: Some("http://file:4318".into()),
            protocol: Some("http/protobuf".into()),
            service_name: Some("cron".into()),
            sample_ratio: Some(0.5),
            trace_url: None,
        };
        let env = |name: &str| {
            match name {
                "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://env:4318"),
                "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("http/json"),
                "OTEL_SERVICE_NAME" => Some("billing-cron"),
                "OTEL_TRACES_SAMPLER" => Some("always_on"),
                "OTEL_EXPORTER_OTLP_TIMEOUT" => Some("1500"),
                _ => None,
            }
            .map(String::from)
        };
        let on = settings(&file, env).unwrap().unwrap();
        // Left to the exporter and the SDK, which read the variables.
        assert_eq!(on.endpoint, None);
        let named = |name: &str| {
            (name == "OTEL_RESOURCE_ATTRIBUTES")
                .then(|| "deployment.environment=prod,service.name=billing-cron".to_string())
        };
        assert_eq!(settings(&file, named).unwrap().unwrap().service_name, None);
        assert_eq!(on.service_name, None);
        assert!(on.sampler.is_none());
        assert_eq!(on.protocol, Protocol::HttpJson);
        assert_eq!(on.timeout, Duration::from_millis(1500));
        let grpc = |name: &str| (name == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "grpc".to_string());
        let error = settings(&file, grpc).unwrap_err();
        assert!(
            error.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && error.contains("http/protobuf"),
            "{error}"
        );
    }

    #[test]
    fn a_runs_ids_are_its_identity() {
        let at = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(run_ids("a", at, 1), run_ids("a", at, 1));
        assert_ne!(run_ids("a", at, 1), run_ids("a", at, 2));
        assert_ne!(run_ids("a", at, 1), run_ids("b", at, 1));
        let (trace, span) = run_ids("a", at, 1);
        assert!(trace != TraceId::INVALID && span != SpanId::INVALID);
    }

    #[test]
    fn a_trace_url_needs_http_and_a_trace_id() {
        assert_eq!(
            check_trace_url(" http://jaeger:16686/trace/{trace_id} ").as_deref(),
            Ok("http://jaeger:16686/trace/{trace_id}")
        );
        assert!(check_trace_url("https://tempo.example/explore?t={trace_id}&s={span_id}").is_ok());
        for (bad, needle) in [
            ("jaeger:16686/trace/{trace_id}", "not an http"),
            ("ftp://jaeger/{trace_id}", "not an http"),
            ("http://", "not an http"),
            ("http://jaeger/trace/ {trace_id}", "not an http"),
            ("http://jaeger:16686/trace/", "no {trace_id}"),
        ] {
            let problem = check_trace_url(bad).expect_err(bad);
            assert!(problem.contains(needle), "{bad}: {problem}");
        }
    }

    #[test]
    fn a_runs_trace_link_is_its_ids_in_the_template() {
        let instant = "2026-11-27T10:00:00Z".parse().unwrap();
        let (trace, span) = run_ids("backup", instant, 7);
        let mut file = TelemetryConfig::default();
        assert_eq!(trace_link(&file, "backup", instant, 7), None);
        file.trace_url = Some("http://jaeger:16686/trace/{trace_id}?uiFind={span_id}".into());
        assert_eq!(
            trace_link(&file, "backup", instant, 7).as_deref(),
            Some(format!("http://jaeger:16686/trace/{trace}?uiFind={span}").as_str())
        );
        assert_eq!(trace.to_string().len(), 32);
        assert_eq!(span.to_string().len(), 16);
    }

    /// With a sample ratio, a run gets a link exactly when the exporter's
    /// sampler keeps its trace.
    #[test]
    fn only_sampled_runs_get_a_trace_link() {
        use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample as _};
        let instant: DateTime<Utc> = "2026-11-27T10:00:00Z".parse().unwrap();
        let mut file = TelemetryConfig {
            trace_url: Some("http://v/{trace_id}".into()),
            sample_ratio: Some(0.0),
            ..TelemetryConfig::default()
        };
        assert!((0..50).all(|fence| trace_link(&file, "j", instant, fence).is_none()));
        file.sample_ratio = Some(1.0);
        assert!((0..50).all(|fence| trace_link(&file, "j", instant, fence).is_some()));
        file.sample_ratio = Some(0.3);
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(0.3)));
        let mut linked = 0;
        for fence in 0..1000 {
            let (trace, _) = run_ids("j", instant, fence);
            let sampled = sampler
                .should_sample(
                    None,
                    trace,
                    "run",
                    &opentelemetry::trace::SpanKind::Internal,
                    &[],
                    &[],
                )
                .decision
                == SamplingDecision::RecordAndSample;
            let link = trace_link(&file, "j", instant, fence);
            assert_eq!(link.is_some(), sampled, "fence {fence}");
            linked += usize::from(sampled);
        }
        assert!((200..400).contains(&linked), "{linked} of 1000 kept at 0.3");
    }
}
