//! Traces of runs, in a build without the `daemon` feature: replicron
//! exports none of its own. A service that embeds the library sees each
//! run's `run` span through its own `tracing` subscriber.

use chrono::{DateTime, Utc};

pub(crate) use super::trace_config::CLAIM_SENT;

/// Whether traces are on in this process: never without the exporter.
pub(crate) fn enabled() -> bool {
    false
}

/// Nothing to start: no exporter gives the span its run's ids.
pub(crate) fn start_run(_span: &tracing::Span, _job: &str, _instant: DateTime<Utc>, _fence: i64) {}

/// Nothing to link without the exporter.
pub(crate) fn link_runs<'a>(
    _span: &tracing::Span,
    _runs: impl IntoIterator<Item = (&'a str, DateTime<Utc>, i64)>,
) {
}

/// No `traceparent` without OpenTelemetry.
pub(crate) fn trace_context(_span: &tracing::Span) -> Option<(String, String)> {
    None
}
