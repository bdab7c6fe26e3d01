//! The dashboard's small pieces of text and markup, shared by its pages
//! and by the runs' tables: times as people read them, durations, a
//! status's badge, query-string encoding and a run's trace link. They know
//! nothing of a page around them.

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use crate::history::{RunRecord, RunStatus};

/// How far `at` is from `now`, as people say it: "12 s ago", "in 3 min".
pub(super) fn relative(seconds: f64) -> String {
    let (abs, future) = (seconds.abs(), seconds > 0.0);
    let text = if abs < 1.0 {
        return "now".to_string();
    } else if abs < 90.0 {
        format!("{abs:.0} s")
    } else if abs < 90.0 * 60.0 {
        format!("{:.0} min", abs / 60.0)
    } else if abs < 36.0 * 3600.0 {
        format!("{:.1} h", abs / 3600.0)
    } else {
        format!("{:.1} d", abs / 86400.0)
    };
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

pub(super) fn since(now: DateTime<Utc>, at: &str) -> String {
    DateTime::parse_from_rfc3339(at).map_or_else(
        |_| at.to_string(),
        |at| relative((at.with_timezone(&Utc) - now).num_milliseconds() as f64 / 1000.0),
    )
}

pub(super) fn duration(seconds: Option<f64>) -> String {
    match seconds {
        None => "-".to_string(),
        Some(s) if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) if s < 120.0 => format!("{s:.1} s"),
        Some(s) => format!("{:.1} min", s / 60.0),
    }
}

/// Percent-encodes `text` for a query string.
pub(super) fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) fn status_badge(status: RunStatus) -> Markup {
    html! { span class={"badge s-" (status.as_str())} { (status.as_str()) } }
}

/// The trace viewer's URL of `run`'s trace (`[telemetry] trace_url`), if
/// one is set and its trace is sampled.
pub(super) fn trace_href(
    telemetry: &crate::config::TelemetryConfig,
    run: &RunRecord,
) -> Option<String> {
    let instant = DateTime::parse_from_rfc3339(&run.scheduled_at).ok()?;
    crate::telemetry::traces::trace_link(
        telemetry,
        &run.job,
        instant.with_timezone(&Utc),
        run.fence,
    )
}
