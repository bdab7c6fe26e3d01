//! A running run's output, live, read through a replica that does not run
//! it: two `replicron run` processes on one database, a run triggered on
//! one, and its output stream and page read from the other while the job
//! still prints.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::{Replica, TestDb, backend_test, wait_until};
use crate::web::{TOKEN, free_ports, get_json, http, post_json};

/// A job that prints to both streams, in colour, for a few seconds.
const TALKER: &str = "printf 'line 1\\n'; printf 'warn 1\\n' >&2; sleep 1; \
     printf '\\033[31mred 2\\033[0m\\n'; printf 'warn 2\\n' >&2; sleep 3; printf 'line 3\\n'";

fn config(db: &TestDb, port: u16) -> std::path::PathBuf {
    db.config_named(
        &format!("live-{port}.toml"),
        &db.url,
        &format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"talker\"\nschedule = \"@yearly\"\ncommand = {TALKER:?}\n"
        ),
    )
}

/// The server-sent events of one stream, each with when it came: reads
/// `GET path` (HTTP/1.0, so the body ends with the connection) until the
/// stream ends or `within` passes.
fn events(port: u16, path: &str, within: Duration) -> Vec<(Instant, String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .expect("send");
    let until = Instant::now() + within;
    let (mut raw, mut buffer, mut seen) = (Vec::new(), [0_u8; 8192], Vec::new());
    let mut body_at = None;
    while Instant::now() < until {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => panic!("read: {e}"),
        }
        let text = String::from_utf8_lossy(&raw).into_owned();
        if body_at.is_none() {
            body_at = text.find("\r\n\r\n").map(|at| at + 4);
            assert!(text.starts_with("HTTP/1."), "{text}");
        }
        let Some(at) = body_at else { continue };
        // Complete events not seen yet, stamped now.
        let complete: Vec<&str> = text[at..].split("\n\n").collect();
        for block in &complete[..complete.len() - 1][seen.len().min(complete.len() - 1)..] {
            let name = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("")
                .to_string();
            let data = block
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect::<Vec<_>>()
                .join("\n");
            seen.push((Instant::now(), name, data));
        }
    }
    seen
}

fn text_of(data: &str) -> String {
    let spans: Vec<(String, String)> = serde_json::from_str(data).unwrap_or_default();
    spans.into_iter().map(|(text, _)| text).collect()
}

backend_test! {
    fn a_replica_that_does_not_run_a_run_streams_its_output_as_it_is_written(db: &TestDb) {
        let [holder_port, other_port] = free_ports();
        let env = [("REPLICRON_TEST_WEB_TOKEN", TOKEN)];
        let holder = Replica::start(&config(db, holder_port), "live-holder", None, &env);
        holder.wait_for_log("replicron started", Duration::from_secs(30));
        let other = Replica::start(&config(db, other_port), "live-other", None, &env);
        other.wait_for_log("replicron started", Duration::from_secs(30));
        // Each publishes where its dashboard is, and warns that other
        // hosts cannot reach a loopback address.
        wait_until("both dashboards' addresses", Duration::from_secs(10), || {
            let (_, replicas) = get_json(other_port, "/api/v1/instances");
            replicas.to_string().contains("live-holder")
        });
        assert!(
            holder.log_text().contains("listens on a loopback address, which replicas on other hosts cannot reach"),
            "{}",
            holder.log_text()
        );

        let bearer = format!("Bearer {TOKEN}");
        let (code, answer) = post_json(
            holder_port,
            "/api/v1/jobs/talker/trigger",
            &[("authorization", &bearer)],
            "",
        );
        assert_eq!(code, 202, "{answer}");
        let mut id = 0;
        wait_until("the run is recorded running", Duration::from_secs(10), || {
            let (_, page) = get_json(other_port, "/api/v1/runs?job=talker");
            page["runs"].as_array().and_then(|runs| runs.first()).is_some_and(|run| {
                id = run["id"].as_i64().unwrap_or(0);
                run["status"] == "running" && run["instance"] == "live-holder"
            })
        });

        // The page of the other replica, without a script: the output so
        // far, each stream told apart, and how long the run has run.
        wait_until("the other replica's page shows the output so far", Duration::from_secs(5), || {
            let (code, _, page) = http(other_port, "GET", &format!("/runs/{id}"), &[], "");
            code == 200 && page.contains("line 1") && page.contains("running for")
        });
        let (_, _, page) = http(other_port, "GET", &format!("/runs/{id}"), &[], "");
        assert!(
            page.contains(r#"<span class="stderr" title="stderr">warn 1"#),
            "{page}"
        );
        assert!(page.contains("data-stream=\"/runs/"), "{page}");

        // Its stream, passed through from the holder, while the job prints.
        let (_, headers, _) = http(holder_port, "GET", &format!("/runs/{id}/output?snapshot=1"), &[], "");
        assert!(
            headers.iter().any(|(n, v)| n == "x-replicron-run" && *v == id.to_string()),
            "the holder says whose stream it is: {headers:?}"
        );
        let seen = events(other_port, &format!("/runs/{id}/output"), Duration::from_secs(20));
        let names: Vec<&str> = seen.iter().map(|(_, name, _)| name.as_str()).collect();
        assert_eq!(names.first(), Some(&"start"), "{seen:?}");
        assert_eq!(names.last(), Some(&"end"), "the stream ends with the run: {seen:?}");
        // A browser dispatches no event without data.
        assert!(seen.iter().all(|(_, _, data)| !data.is_empty()), "{seen:?}");
        let when = |needle: &str| {
            seen.iter()
                .find(|(_, name, data)| (name == "out" || name == "err") && text_of(data).contains(needle))
                .unwrap_or_else(|| panic!("no event with {needle:?}: {seen:?}"))
        };
        let (red_at, red_name, red) = when("red 2");
        assert_eq!(red_name, "out");
        assert!(red.contains(r#"["red 2","a-red"]"#), "colour as a class: {red}");
        assert!(!red.contains("\\u001b"), "no escape left: {red}");
        assert_eq!(when("warn 2").1, "err");
        let (end_at, _, _) = seen.last().expect("end");
        let (line3_at, _, _) = when("line 3");
        // "red 2" came while the job still slept its 3 s before "line 3".
        assert!(
            *line3_at - *red_at >= Duration::from_secs(2),
            "red 2 at {red_at:?}, line 3 at {line3_at:?}: not live"
        );
        assert!(end_at >= line3_at);

        // A request passed through once is not passed on again; an ended
        // run's stream says so and ends (once its row says it ended, which
        // is written after its output closes).
        wait_until("the run's row says it ended", Duration::from_secs(10), || {
            get_json(other_port, &format!("/api/v1/runs/{id}")).1["status"] == "succeeded"
        });
        let (_, _, hop) = http(
            other_port,
            "GET",
            &format!("/runs/{id}/output"),
            &[("x-replicron-hop", "1")],
            "",
        );
        assert!(hop.contains("event: end") || hop.contains("event: gone"), "{hop}");
        let (_, _, ended) = http(holder_port, "GET", &format!("/runs/{id}/output"), &[], "");
        assert!(ended.contains("event: end"), "{ended}");
        let (code, _, _) = http(other_port, "GET", "/runs/999999999/output", &[], "");
        assert_eq!(code, 404);

        // Streams are capped: with 32 open on the holder, the next is
        // refused at once, and its pages still answer.
        // (Once the first run's lease is released.)
        wait_until("a second run is triggered", Duration::from_secs(10), || {
            post_json(
                holder_port,
                "/api/v1/jobs/talker/trigger",
                &[("authorization", &bearer)],
                "",
            )
            .0 == 202
        });
        let mut id = 0;
        wait_until("the second run prints", Duration::from_secs(10), || {
            let (_, page) = get_json(holder_port, "/api/v1/runs?job=talker&limit=1");
            id = page["runs"][0]["id"].as_i64().unwrap_or(0);
            page["runs"][0]["status"] == "running"
                && http(holder_port, "GET", &format!("/runs/{id}/output?snapshot=1"), &[], "")
                    .2
                    .contains("line 1")
        });
        let open: Vec<TcpStream> = (0..32)
            .map(|_| {
                let mut stream = TcpStream::connect(("127.0.0.1", holder_port)).expect("connect");
                write!(
                    stream,
                    "GET /runs/{id}/output HTTP/1.0\r\nHost: 127.0.0.1:{holder_port}\r\n\r\n"
                )
                .expect("send");
                stream
            })
            .collect();
        // Each has its answer, and so its place.
        for mut stream in &open {
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut head = [0_u8; 12];
            stream.read_exact(&mut head).expect("an answer");
            assert_eq!(&head, b"HTTP/1.0 200", "{}", String::from_utf8_lossy(&head));
        }
        wait_until("the 33rd stream is refused", Duration::from_secs(5), || {
            let (code, _, _) = http(holder_port, "GET", &format!("/runs/{id}/output"), &[], "");
            code == 503
        });
        let (code, _, _) = http(holder_port, "GET", &format!("/runs/{id}"), &[], "");
        assert_eq!(code, 200, "a page beside 32 streams");
        drop(open);
    }
}
