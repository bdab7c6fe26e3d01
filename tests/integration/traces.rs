//! OpenTelemetry traces, with real replicas and an OTLP/HTTP receiver of
//! the test's own (JSON): one trace per run whichever replica won it, with
//! the run's attributes and its claim, attempts (retries among them), start
//! and end as child spans; the job's `TRACEPARENT` names the run's span;
//! a receiver that is down delays no run, and what it did not take is
//! counted.

#![cfg(feature = "sqlite")]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::hooks::{Answer, HookServer};
use crate::operate::metric_total;
use crate::support::{Replica, TestDb, history_json, wait_until};
use crate::web::free_port;

/// One span as the receiver got it.
#[derive(Clone, Debug)]
struct Span {
    trace: String,
    id: String,
    parent: String,
    name: String,
    attributes: BTreeMap<String, Value>,
    /// The spans it links to: trace id and span id.
    links: Vec<(String, String)>,
}

impl Span {
    fn attr(&self, key: &str) -> &Value {
        self.attributes
            .get(&format!("replicron.{key}"))
            .unwrap_or_else(|| panic!("{} has no replicron.{key}: {self:?}", self.name))
    }

    fn text(&self, key: &str) -> String {
        match self.attr(key) {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// An OTLP attribute's value, as JSON (`intValue` is a string in OTLP JSON).
fn value_of(any: &Value) -> Value {
    if let Some(s) = any.get("stringValue") {
        return s.clone();
    }
    if let Some(i) = any.get("intValue") {
        return match i {
            Value::String(s) => Value::from(s.parse::<i64>().expect("an integer")),
            other => other.clone(),
        };
    }
    any.get("boolValue")
        .or_else(|| any.get("doubleValue"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Every span the receiver was sent.
fn spans(receiver: &HookServer) -> Vec<Span> {
    let mut spans = Vec::new();
    for request in receiver.to("/v1/traces") {
        assert_eq!(
            request.header("content-type"),
            Some("application/json"),
            "{request:?}"
        );
        let body = request.json();
        for resource in body["resourceSpans"].as_array().expect("resourceSpans") {
            let service = resource["resource"]["attributes"]
                .as_array()
                .expect("resource attributes")
                .iter()
                .find(|a| a["key"] == "service.name")
                .map(|a| value_of(&a["value"]));
            assert_eq!(service, Some(Value::from("nightly-cron")));
            for scope in resource["scopeSpans"].as_array().expect("scopeSpans") {
                for span in scope["spans"].as_array().expect("spans") {
                    spans.push(Span {
                        trace: span["traceId"].as_str().expect("traceId").to_string(),
                        id: span["spanId"].as_str().expect("spanId").to_string(),
                        parent: span["parentSpanId"].as_str().unwrap_or("").to_string(),
                        name: span["name"].as_str().expect("name").to_string(),
                        attributes: span["attributes"]
                            .as_array()
                            .map(|attributes| {
                                attributes
                                    .iter()
                                    .map(|a| {
                                        (
                                            a["key"].as_str().expect("key").to_string(),
                                            value_of(&a["value"]),
                                        )
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        links: span["links"]
                            .as_array()
                            .map(|links| {
                                links
                                    .iter()
                                    .map(|l| {
                                        (
                                            l["traceId"].as_str().expect("traceId").to_string(),
                                            l["spanId"].as_str().expect("spanId").to_string(),
                                        )
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                    });
                }
            }
        }
    }
    spans
}

fn stop(replicas: Vec<Replica>) {
    for replica in &replicas {
        replica.signal(Signal::SIGTERM);
    }
    for mut replica in replicas {
        let status = replica.wait_exit(Duration::from_secs(40)).expect("exits");
        assert!(status.success(), "{status:?}\n{}", replica.log_text());
    }
}

/// Two replicas, a job whose first attempt fails and whose retry succeeds:
/// each instant it ran is one trace, from the replica that won it, whose
/// run span carries the run's attributes and has a claim and two attempts
/// below it (each with its start and end); the job printed the run span's
/// trace id and span id in its `TRACEPARENT`. The losers' claims left no
/// span.
#[test]
fn a_run_is_one_trace_that_reaches_into_its_job() {
    let db = TestDb::sqlite();
    let receiver = HookServer::start(Answer::Ok);
    let printed = db.dir().join("traceparents");
    let jobs = format!(
        "[telemetry]\nendpoint = {endpoint:?}\nprotocol = \"http/json\"\nservice_name = \"nightly-cron\"\n\n\
         [[job]]\nname = \"billing\"\nschedule = \"*/3 * * * * *\"\nretries = 1\nretry_backoff = \"200ms\"\n\
         command = 'echo \"$REPLICRON_RUN_ID $TRACEPARENT\" >> {printed}; [ \"$REPLICRON_ATTEMPT\" -gt 1 ]'\n\n\
         [[job]]\nname = \"report\"\nafter = [\"billing\"]\ncommand = 'true'\n",
        endpoint = receiver.url(""),
        printed = printed.display(),
    );
    let config = db.config(&jobs);
    db.migrate();
    // Spans leave every 200 ms rather than every 5 s.
    let env = [("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let replicas = vec![
        Replica::start(&config, "a", None, &env),
        Replica::start(&config, "b", None, &env),
    ];
    let succeeded = || {
        history_json(&config, "billing")
            .iter()
            .filter(|r| r["status"] == "succeeded")
            .count()
    };
    wait_until(
        "two instants retried to success",
        Duration::from_secs(40),
        || succeeded() >= 2,
    );
    wait_until("the report after each", Duration::from_secs(20), || {
        history_json(&config, "report").len() >= succeeded()
    });
    stop(replicas);
    let history = history_json(&config, "billing");
    let spans = spans(&receiver);
    let runs: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "run" && s.text("job") == "billing")
        .collect();
    let reports: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "run" && s.text("job") == "report")
        .collect();

    // Each instant that ran is one run span, and one trace.
    let instants: BTreeSet<String> = history
        .iter()
        .map(|r| r["scheduled_at"].as_str().expect("instant").to_string())
        .collect();
    let traced: Vec<String> = runs.iter().map(|s| s.text("instant")).collect();
    assert_eq!(
        traced.iter().cloned().collect::<BTreeSet<_>>(),
        instants,
        "{runs:#?}"
    );
    assert_eq!(
        traced.len(),
        instants.len(),
        "an instant traced twice: {runs:#?}"
    );
    let traces: BTreeSet<&str> = spans.iter().map(|s| s.trace.as_str()).collect();
    assert_eq!(
        traces.len(),
        runs.len() + reports.len(),
        "a span outside its run's trace"
    );
    // The dependent job's run links to the trace of the run it followed.
    assert!(!reports.is_empty());
    for report in &reports {
        assert_eq!(report.text("trigger"), "dependency");
        let parent = runs
            .iter()
            .find(|r| r.text("instant") == report.text("instant"))
            .expect("the parent's run");
        assert_eq!(
            report.links,
            vec![(parent.trace.clone(), parent.id.clone())],
            "{report:?}"
        );
    }

    let printed = std::fs::read_to_string(&printed).expect("the jobs' TRACEPARENTs");
    for run in &runs {
        let rows: Vec<&Value> = history
            .iter()
            .filter(|r| r["scheduled_at"] == run.text("instant"))
            .collect();
        let last = rows
            .iter()
            .max_by_key(|r| r["attempt"].as_i64())
            .expect("a row");
        assert_eq!(run.text("job"), "billing");
        assert_eq!(run.attr("fence").as_i64(), last["fence"].as_i64());
        assert_eq!(run.attr("run_id").as_i64(), last["id"].as_i64());
        assert_eq!(run.attr("attempt").as_i64(), Some(2), "{run:?}");
        assert_eq!(run.text("trigger"), "schedule");
        assert_eq!(
            run.text("replica"),
            last["instance"].as_str().expect("instance")
        );
        assert_eq!(run.text("status"), "succeeded");
        let children = |parent: &Span, name: &str| -> Vec<Span> {
            spans
                .iter()
                .filter(|s| s.parent == parent.id && s.name == name)
                .cloned()
                .collect()
        };
        assert_eq!(children(run, "claim").len(), 1, "{spans:#?}");
        let mut attempts = children(run, "attempt");
        attempts.sort_by_key(|a| a.attr("attempt").as_i64());
        assert_eq!(attempts.len(), 2, "{spans:#?}");
        for (attempt, span) in attempts.iter().enumerate() {
            let row = rows
                .iter()
                .find(|r| r["attempt"].as_i64() == Some(attempt as i64 + 1))
                .expect("the attempt's row");
            assert_eq!(span.attr("run_id").as_i64(), row["id"].as_i64());
            assert_eq!(span.attr("retry"), &Value::from(attempt > 0));
            assert_eq!(span.text("status"), row["status"].as_str().expect("status"));
            assert_eq!(children(span, "start").len(), 1, "{spans:#?}");
            assert_eq!(children(span, "end").len(), 1, "{spans:#?}");
            // The job's own TRACEPARENT: the run span's trace and id.
            let traceparent = format!("00-{}-{}-01", run.trace, run.id);
            assert!(
                printed.contains(&format!("{} {traceparent}", row["id"])),
                "{traceparent} not printed by run {}: {printed}",
                row["id"]
            );
        }
    }
}

/// A receiver that takes nothing (its port is closed): a per-second job on
/// two replicas runs every instant on time, and the spans it did not take
/// are counted dropped.
#[test]
fn a_receiver_that_is_down_delays_no_run() {
    let db = TestDb::sqlite();
    let metrics = free_port();
    let closed = free_port();
    let jobs = format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{metrics}\"\n\n\
         [telemetry]\nendpoint = \"http://127.0.0.1:{closed}\"\n\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n"
    );
    let config = db.config(&jobs);
    db.migrate();
    let env = [("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let replicas = vec![Replica::start(&config, "solo", None, &env)];
    replicas[0].wait_for_log("replicron started", Duration::from_secs(20));
    let dropped = || {
        metric_total(
            metrics,
            "replicron_trace_spans_dropped_total",
            ("reason", "not_accepted"),
        )
    };
    std::thread::sleep(Duration::from_secs(6));
    wait_until("dropped spans counted", Duration::from_secs(20), || {
        dropped() > 0.0
    });
    stop(replicas);
    let history = history_json(&config, "tick");
    assert!(history.len() >= 5, "{history:#?}");
    for row in &history {
        assert_eq!(row["status"], "succeeded", "{row}");
        let at = |key: &str| {
            chrono::DateTime::parse_from_rfc3339(row[key].as_str().expect(key)).expect("rfc3339")
        };
        // Held back by the exporter would be seconds, every run; a loaded
        // host's lateness is a figure for scripts/bench, not a bound here.
        let late = at("started_at") - at("scheduled_at");
        assert!(
            late < chrono::TimeDelta::seconds(5),
            "started {late} after its instant: {row}"
        );
    }
    let mut instants: Vec<&str> = history
        .iter()
        .map(|r| r["scheduled_at"].as_str().expect("instant"))
        .collect();
    instants.sort();
    let first = chrono::DateTime::parse_from_rfc3339(instants[0]).expect("rfc3339");
    let last = chrono::DateTime::parse_from_rfc3339(instants[instants.len() - 1]).expect("rfc3339");
    assert_eq!(
        (last - first).num_seconds() + 1,
        instants.len() as i64,
        "an instant missing: {instants:?}"
    );
}

/// `[telemetry] trace_url` with a sample ratio of one half: a run's page
/// and its job's runs table link to the trace viewer exactly for the runs
/// whose trace the receiver got, with that trace's id and its run span's.
#[test]
fn a_runs_page_links_to_its_trace_when_it_was_sampled() {
    let db = TestDb::sqlite();
    let receiver = HookServer::start(Answer::Ok);
    let port = free_port();
    let jobs = format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
         [telemetry]\nendpoint = {endpoint:?}\nprotocol = \"http/json\"\nservice_name = \"nightly-cron\"\n\
         sample_ratio = 0.5\ntrace_url = \"http://viewer.test/trace/{{trace_id}}?span={{span_id}}\"\n\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = 'true'\n",
        endpoint = receiver.url(""),
    );
    let config = db.config(&jobs);
    db.migrate();
    let env = [("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let replicas = vec![Replica::start(&config, "solo", None, &env)];
    wait_until("12 runs", Duration::from_secs(40), || {
        history_json(&config, "tick")
            .iter()
            .filter(|r| r["status"] == "succeeded")
            .count()
            >= 12
    });
    // The last spans leave at the exit.
    let pages: Vec<(Value, String)> = history_json(&config, "tick")
        .into_iter()
        .filter(|r| r["status"] == "succeeded")
        .map(|run| {
            let (code, _, page) =
                crate::web::http(port, "GET", &format!("/runs/{}", run["id"]), &[], "");
            assert_eq!(code, 200, "{page}");
            (run, page)
        })
        .collect();
    let (_, _, table) = crate::web::http(port, "GET", "/jobs/tick", &[], "");
    stop(replicas);
    let spans = spans(&receiver);
    let (mut linked, mut unlinked) = (0, 0);
    for (run, page) in &pages {
        let span = spans.iter().find(|s| {
            s.name == "run" && s.text("instant") == run["scheduled_at"].as_str().expect("instant")
        });
        match span {
            Some(span) => {
                let href = format!(
                    "href=\"http://viewer.test/trace/{}?span={}\"",
                    span.trace, span.id
                );
                assert!(
                    page.contains(&href),
                    "no {href} on the page of {run}: {page}"
                );
                assert!(page.contains("id=\"trace\""), "{page}");
                linked += 1;
            }
            None => {
                assert!(
                    !page.contains("viewer.test"),
                    "a trace link for {run}, not sampled: {page}"
                );
                unlinked += 1;
            }
        }
    }
    assert!(
        linked > 0 && unlinked > 0,
        "{linked} runs traced, {unlinked} not"
    );
    let in_table = table
        .matches("class=\"trace\" href=\"http://viewer.test/trace/")
        .count();
    assert!(in_table > 0, "no trace link in the runs table: {table}");
    for span in spans.iter().filter(|s| s.name == "run") {
        let href = format!("http://viewer.test/trace/{}?span={}", span.trace, span.id);
        let listed = table.contains(&format!("/runs/{}\"", span.attr("run_id")));
        assert!(
            !listed || table.contains(&href),
            "run {} listed without {href}",
            span.attr("run_id")
        );
    }
}

/// At `RUST_LOG=trace`, neither a webhook's URL with its `${SECRET}`
/// filled in nor the OTLP receiver's API key is in the daemon's log.
#[cfg(feature = "sqlite")]
#[test]
fn no_secret_reaches_the_log_at_any_level() {
    let db = TestDb::sqlite();
    let receiver = HookServer::start(Answer::Ok);
    let config = db.config(&format!(
        "[notify]\nwebhook = \"{hook}/${{HOOK_TOKEN}}\"\n\n\
         [telemetry]\nendpoint = {endpoint:?}\nprotocol = \"http/json\"\nservice_name = \"nightly-cron\"\n\n\
         [[job]]\nname = \"broken\"\nschedule = \"* * * * * *\"\ncommand = 'exit 3'\n",
        hook = receiver.url("/hook"),
        endpoint = receiver.url(""),
    ));
    let env = [
        ("RUST_LOG", "trace"),
        ("HOOK_TOKEN", "hook-s3cret-in-the-url"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=otlp-s3cret-key"),
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
    ];
    let replica = Replica::start(&config, "solo", None, &env);
    wait_until("a webhook and some spans", Duration::from_secs(30), || {
        !receiver.to("/hook/").is_empty() && !spans(&receiver).is_empty()
    });
    let hook = &receiver.to("/hook/")[0];
    assert!(
        hook.path.contains("hook-s3cret-in-the-url"),
        "{}",
        hook.path
    );
    assert!(
        receiver
            .requests()
            .iter()
            .any(|r| r.header("x-api-key") == Some("otlp-s3cret-key")),
        "the key reached the receiver"
    );
    let log = replica.log_text();
    drop(replica);
    assert!(
        log.contains("DEBUG") || log.contains("TRACE"),
        "trace is on"
    );
    for secret in ["hook-s3cret-in-the-url", "otlp-s3cret-key"] {
        assert!(!log.contains(secret), "{secret} in the log");
    }
}
