//! `[telemetry]` as the job file gives it, and the checks of its values:
//! what the file's check and the `run` span need, with or without the
//! exporter built in (`traces`).

/// `[telemetry]`: where the runs' traces go. OpenTelemetry's own
/// variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, …) win over each key.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TelemetryConfig {
    /// The OTLP/HTTP receiver's base URL (`http://collector:4318`).
    pub(crate) endpoint: Option<String>,
    /// `http/protobuf` or `http/json`.
    pub(crate) protocol: Option<String>,
    /// The service's name in the traces (default `replicron`).
    pub(crate) service_name: Option<String>,
    /// The share of runs traced, 0 to 1 (default all).
    pub(crate) sample_ratio: Option<f64>,
    /// A trace viewer's URL of a trace, `{trace_id}` (and `{span_id}`, the
    /// run span's) in it: the dashboard links each run to its trace.
    pub(crate) trace_url: Option<String>,
}

/// The `claim` span's field saying how long before its end the claim was
/// sent, in microseconds.
pub(crate) const CLAIM_SENT: &str = "sent_us_before";

/// OpenTelemetry's variables that may hold a secret (the receiver's
/// headers: an API key): no job or notification command inherits them.
pub(crate) const SECRET_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
];

/// The protocols spans can be sent with.
pub(crate) const PROTOCOLS: [&str; 2] = ["http/protobuf", "http/json"];

/// A protocol spans can be sent with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// `http/protobuf`.
    Protobuf,
    /// `http/json`.
    Json,
}

/// A protocol's name as OpenTelemetry spells it.
pub(crate) fn protocol_of(name: &str) -> Result<Protocol, String> {
    match name.trim() {
        "http/protobuf" => Ok(Protocol::Protobuf),
        "http/json" => Ok(Protocol::Json),
        "grpc" => Err(format!(
            "\"grpc\" is not built in: use {} (the receiver's port 4318)",
            PROTOCOLS.join(" or ")
        )),
        other => Err(format!(
            "{other:?} is not a protocol replicron sends: use {}",
            PROTOCOLS.join(" or ")
        )),
    }
}

/// `[telemetry] trace_url` as written, trimmed, if it is an http(s) URL
/// with `{trace_id}` in it; else why not.
pub(crate) fn check_trace_url(url: &str) -> Result<String, String> {
    let url = url.trim();
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with(['/', '{'])
                && !url.contains(char::is_whitespace) =>
        {
            if url.contains("{trace_id}") {
                Ok(url.to_string())
            } else {
                Err(format!(
                    "{url:?} has no {{trace_id}}: a trace viewer's URL of one trace, such as http://jaeger:16686/trace/{{trace_id}}"
                ))
            }
        }
        _ => Err(format!(
            "{url:?} is not an http:// or https:// URL (a trace viewer's, such as http://jaeger:16686/trace/{{trace_id}})"
        )),
    }
}
