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
             [[job]]\nname = \"talker\"\nschedule = \"@yearly\"\ncommand = {TALKER:?}\n\n\
             [[job]]\nname = \"long\"\nschedule = \"@yearly\"\ncommand = \"printf 'line 1\\\\n'; sleep 60\"\n"
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

/// A stream of run `id`'s output from `port` (as client `forwarded`, from
/// a trusted proxy), answered 200, of which nothing more is read.
fn open_stream(port: u16, id: i64, forwarded: Option<&str>) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let forwarded = forwarded.map_or(String::new(), |ip| format!("X-Forwarded-For: {ip}\r\n"));
    write!(
        stream,
        "GET /runs/{id}/output HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{forwarded}\r\n"
    )
    .expect("send");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut head = [0_u8; 12];
    stream.read_exact(&mut head).expect("an answer");
    assert_eq!(&head, b"HTTP/1.0 200", "{}", String::from_utf8_lossy(&head));
    stream
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

        // Streams are capped per client, also through a pass-through: a
        // client's 8 streams through the other replica are the other
        // replica's 8 at the holder, and a 9th is refused at once.
        let (code, answer) = post_json(
            holder_port,
            "/api/v1/jobs/long/trigger",
            &[("authorization", &bearer)],
            "",
        );
        assert_eq!(code, 202, "{answer}");
        let mut id = 0;
        wait_until("the long run prints", Duration::from_secs(10), || {
            let (_, page) = get_json(holder_port, "/api/v1/runs?job=long&limit=1");
            id = page["runs"][0]["id"].as_i64().unwrap_or(0);
            page["runs"][0]["status"] == "running"
                && http(holder_port, "GET", &format!("/runs/{id}/output?snapshot=1"), &[], "")
                    .2
                    .contains("line 1")
        });
        let open: Vec<TcpStream> = (0..8).map(|_| open_stream(other_port, id, None)).collect();
        wait_until("the 9th stream of one client is refused", Duration::from_secs(5), || {
            let (code, _, body) = http(holder_port, "GET", &format!("/runs/{id}/output"), &[], "");
            code == 503 && body.contains("to your address")
        });
        // A signed-in caller still gets one.
        let (code, _, body) = http(
            holder_port,
            "GET",
            &format!("/runs/{id}/output?snapshot=1"),
            &[("authorization", &bearer)],
            "",
        );
        assert!(code == 200 && body.contains("line 1"), "{code}: {body}");
        let (code, _, _) = http(holder_port, "GET", &format!("/runs/{id}"), &[], "");
        assert_eq!(code, 200, "a page beside its streams");
        drop(open);
    }
}

/// The resident memory of process `pid`, in bytes.
#[cfg(feature = "sqlite")]
fn rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// The value of gauge `name` in `/metrics`.
#[cfg(feature = "sqlite")]
fn gauge(port: u16, name: &str) -> f64 {
    let (_, _, text) = http(port, "GET", "/metrics", &[], "");
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// Readers that never read hold a bounded piece of a run's output each,
/// whatever its `output_limit` (16 MiB here); anonymous clients cannot take
/// every stream of a replica, and a signed-in one still gets one. (On
/// SQLite only: the database plays no part.)
#[cfg(feature = "sqlite")]
#[test]
fn readers_that_never_read_hold_bounded_memory() {
    let db = &TestDb::sqlite();
    {
        let [port] = free_ports();
        let config = db.config_named(
            &format!("live-memory-{port}.toml"),
            &db.url,
            &format!(
                "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
                 [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\ntrusted_proxies = [\"127.0.0.1\"]\n\n\
                 [[job]]\nname = \"flood\"\nschedule = \"@yearly\"\noutput_limit = \"16MiB\"\n\
                 command = \"head -c 16777216 /dev/zero | tr '\\\\0' x; sleep 120\"\n"
            ),
        );
        let env = [("REPLICRON_TEST_WEB_TOKEN", TOKEN)];
        let replica = Replica::start(&config, "live-memory", None, &env);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let bearer = format!("Bearer {TOKEN}");
        let (code, answer) = post_json(
            port,
            "/api/v1/jobs/flood/trigger",
            &[("authorization", &bearer)],
            "",
        );
        assert_eq!(code, 202, "{answer}");
        let mut id = 0;
        wait_until(
            "the run printed its 16 MiB",
            Duration::from_secs(60),
            || {
                let (_, page) = get_json(port, "/api/v1/runs?job=flood&limit=1");
                id = page["runs"][0]["id"].as_i64().unwrap_or(0);
                id > 0
                    && http(
                        port,
                        "GET",
                        &format!("/runs/{id}/output?snapshot=1"),
                        &[],
                        "",
                    )
                    .2
                    .contains("\"total\":16777216")
            },
        );
        let before = rss(replica.pid());

        // 28 streams, 7 for each of 4 clients, that are never read.
        let clients = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"];
        let open: Vec<TcpStream> = clients
            .iter()
            .flat_map(|client| (0..7).map(move |_| *client))
            .map(|client| open_stream(port, id, Some(client)))
            .collect();
        wait_until("28 streams are served", Duration::from_secs(10), || {
            gauge(port, "replicron_live_output_streams") == 28.0
        });
        // The replica's memory, sampled for 2 s while their clients'
        // sockets fill up: a piece of 64 KiB each at most, and what the
        // connections buffer (a reader that read the whole 16 MiB tail at
        // once held it twice over, as bytes and as events: 28 of them,
        // about 1 GiB).
        let mut most = 0;
        let until = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < until {
            most = most.max(rss(replica.pid()));
            std::thread::yield_now();
        }
        eprintln!(
            "28 readers that never read: resident memory {} MiB -> {} MiB",
            before >> 20,
            most >> 20
        );
        assert!(
            most.saturating_sub(before) < 200 << 20,
            "resident memory grew from {before} to {most} bytes"
        );

        // The anonymous slots are taken: a fifth client is refused, and a
        // signed-in one is served.
        let (code, _, body) = http(
            port,
            "GET",
            &format!("/runs/{id}/output"),
            &[("x-forwarded-for", "10.0.0.5")],
            "",
        );
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("signed-in callers only"), "{body}");
        let (code, _, body) = http(
            port,
            "GET",
            &format!("/runs/{id}/output?snapshot=1"),
            &[("x-forwarded-for", "10.0.0.5"), ("authorization", &bearer)],
            "",
        );
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("event: out"), "{body}");
        drop(open);
        wait_until(
            "the streams end with their clients",
            Duration::from_secs(30),
            || gauge(port, "replicron_live_output_streams") == 0.0,
        );
    }
}

backend_test! {
    /// A job's printed secret values are masked as it prints them: in its
    /// live output, in the replica's log and in the output its history
    /// keeps, one given to the run and one read from its default's file
    /// alike, and one printed in two pieces a second apart too.
    fn printed_secrets_are_masked_live(db: &TestDb) {
        let [port] = free_ports();
        let secret = db.dir().join("password");
        std::fs::write(&secret, "s3cret-from-file\n").expect("secret");
        let command = "printf 'pw=%s\\\\n' \\\"$PASSWORD\\\"; printf 'tok=%.4s' \\\"$TOKEN\\\"; sleep 1; \
                       printf '%s\\\\n' \\\"${TOKEN#????}\\\"; sleep 2; echo done";
        let config = db.config_named(
            &format!("live-secrets-{port}.toml"),
            &db.url,
            &format!(
                "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
                 [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
                 [[job]]\nname = \"leaky\"\nschedule = \"@manual\"\ncommand = \"{command}\"\n\
                 params = [\"PASSWORD=file:{}\", \"TOKEN\"]\nsecret_params = [\"PASSWORD\", \"TOKEN\"]\n",
                secret.display()
            ),
        );
        let env = [("REPLICRON_TEST_WEB_TOKEN", TOKEN)];
        let replica = Replica::start(&config, "live-secrets", None, &env);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let bearer = format!("Bearer {TOKEN}");
        let (code, answer) = post_json(
            port,
            "/api/v1/jobs/leaky/trigger",
            &[("authorization", &bearer)],
            r#"{"params":{"TOKEN":"abcdefgh-token"}}"#,
        );
        assert_eq!(code, 202, "{answer}");
        let mut id = 0;
        wait_until("the run is recorded running", Duration::from_secs(10), || {
            let (_, page) = get_json(port, "/api/v1/runs?job=leaky&limit=1");
            id = page["runs"][0]["id"].as_i64().unwrap_or(0);
            page["runs"][0]["status"] == "running"
        });
        let seen = events(port, &format!("/runs/{id}/output"), Duration::from_secs(20));
        let live: String = seen
            .iter()
            .filter(|(_, name, _)| name == "out")
            .map(|(_, _, data)| text_of(data))
            .collect();
        assert_eq!(seen.last().map(|e| e.1.as_str()), Some("end"), "{seen:?}");
        assert!(
            live.contains("pw=[redacted]\ntok=[redacted]\ndone"),
            "{live:?}"
        );
        assert!(!live.contains("s3cret") && !live.contains("abcd"), "{live:?}");
        wait_until("the run's row says it ended", Duration::from_secs(10), || {
            get_json(port, &format!("/api/v1/runs/{id}")).1["status"] == "succeeded"
        });
        let (_, run) = get_json(port, &format!("/api/v1/runs/{id}"));
        let kept = run["output"].as_str().unwrap_or_default();
        assert!(kept.contains("pw=[redacted]\ntok=[redacted]"), "{run}");
        let log = replica.log_text();
        assert!(log.contains("tok=[redacted]"), "{log}");
        assert!(!log.contains("s3cret") && !log.contains("abcdefgh"), "{log}");
    }
}

backend_test! {
    /// A replica of another host that advertised a loopback address is not
    /// dialled (this host's own loopback would answer): the stream says
    /// that replica is not reachable from here. A finished run's stream
    /// just says it ended.
    fn another_hosts_loopback_address_is_never_dialled(db: &TestDb) {
        use diesel::connection::SimpleConnection;
        let [port] = free_ports();
        let config = config(db, port);
        db.migrate();
        // A replica of another host, alive, and its run; and a run that
        // ended.
        db.raw()
            .batch_execute(&format!(
                "INSERT INTO replicron_instances (id, host, pid, version, started_at, last_seen, web_url) \
                 VALUES ('elsewhere', 'another-host.invalid', 1, '0', '2026-01-01 00:00:00', '2999-01-01 00:00:00', 'http://127.0.0.1:{port}'); \
                 INSERT INTO replicron_runs (job, scheduled_at, attempt, instance, fence, started_at, finished_at, status, output) VALUES \
                 ('talker', '2026-01-01 00:00:00', 1, 'elsewhere', 1, '2026-01-01 00:00:01', NULL, 'running', ''), \
                 ('talker', '2026-01-01 00:01:00', 1, 'elsewhere', 2, '2026-01-01 00:01:01', '2026-01-01 00:01:02', 'succeeded', 'done\n')"
            ))
            .expect("seed");
        let env = [("REPLICRON_TEST_WEB_TOKEN", TOKEN)];
        let replica = Replica::start(&config, "live-here", None, &env);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let (_, page) = get_json(port, "/api/v1/runs?job=talker");
        let id_of = |status: &str| {
            page["runs"]
                .as_array()
                .and_then(|runs| runs.iter().find(|r| r["status"] == status))
                .and_then(|r| r["id"].as_i64())
                .unwrap_or_else(|| panic!("a {status} run: {page}"))
        };
        let (code, _, body) = http(port, "GET", &format!("/runs/{}/output", id_of("running")), &[], "");
        assert_eq!(code, 200, "{body}");
        assert!(
            body.contains("event: gone") && body.contains("not reachable from this host"),
            "{body}"
        );
        let (_, _, ended) = http(port, "GET", &format!("/runs/{}/output", id_of("succeeded")), &[], "");
        assert!(ended.contains("event: end") && !ended.contains("done"), "{ended}");
        drop(replica);
    }
}
