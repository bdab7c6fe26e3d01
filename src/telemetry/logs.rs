//! The daemon's JSON log lines: one object per event, with the fields of the
//! spans it happened in (a run's `job`, `instant`, `fence`, `run_id`,
//! `attempt`) at the top level beside its own, so that a reader finds a
//! run's job where it always did, whether or not the line spelled it.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats an event as one JSON object: `timestamp`, `level`, the fields of
/// its spans (outermost first), its own fields (`message` among them; an
/// event's field wins over a span's of the same name) and `target`.
pub(crate) struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                .into(),
        );
        line.insert("level".into(), event.metadata().level().as_str().into());
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<JsonFields>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    line.extend(fields);
                }
            }
        }
        event.record(&mut Fields(&mut line));
        line.insert("target".into(), event.metadata().target().into());
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// An event's fields, as JSON values.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields;

    use super::FlatJson;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;

        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    /// A run's line carries the run's fields at the top level, recorded
    /// late ones too, and the line's own fields beside them.
    #[test]
    fn a_line_in_a_run_carries_the_runs_fields() {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .with_writer(buffer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let run = tracing::info_span!(
                "run",
                job = "billing",
                instant = "2030-01-01T00:00:00Z",
                fence = 7,
                run_id = tracing::field::Empty
            );
            let _in_run = run.enter();
            run.record("run_id", 42);
            tracing::warn!(attempt = 2, "stopping the run: \"quoted\"");
        });
        tracing::info!("outside any subscriber");
        let text = String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(lines[0]).expect("one JSON object");
        assert_eq!(line["job"], "billing");
        assert_eq!(line["instant"], "2030-01-01T00:00:00Z");
        assert_eq!(line["fence"], 7);
        assert_eq!(line["run_id"], 42);
        assert_eq!(line["attempt"], 2);
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["message"], "stopping the run: \"quoted\"");
        assert!(line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
    }
}
