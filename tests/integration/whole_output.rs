//! A run's whole output kept in a file (`output_store = "files"`): two
//! `replicron run` processes on one database, each with its own
//! `output_dir`; a run triggered on one is read whole, while it runs and
//! once it ended, through the other's API and from the command line with
//! either's job file, and a run whose replica is gone says where its file
//! was.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{Replica, TestDb, backend_test, history_json, run, wait_until};
use crate::web::{TOKEN, free_ports, get_json, http, parse_response, post_json};

/// Prints 50,000 lines to stdout, a second later one to stderr, and its
/// last line once the test has created `$MARK`: the file is read while the
/// job waits.
const TALKER: &str = "seq 1 50000; sleep 1; echo warn >&2; \
     while [ ! -e \"$MARK\" ]; do sleep 0.1; done; echo done";

fn config(db: &TestDb, name: &str, port: u16) -> (PathBuf, PathBuf) {
    let dir = db.dir().join(format!("output-{name}"));
    let mark = db.dir().join("mark");
    let path = db.config_named(
        &format!("{name}.toml"),
        &db.url,
        &format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\noutput_dir = {dir:?}\n\n\
             [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"talker\"\nschedule = \"@yearly\"\ncommand = {TALKER:?}\n\
             env = {{ MARK = {mark:?} }}\n\
             output_store = \"files\"\noutput_limit = \"1KiB\"\noutput_retention = \"3d\"\noutput_max = \"10M\"\n\n\
             [[job]]\nname = \"tail-only\"\nschedule = \"@yearly\"\ncommand = \"echo short\"\n"
        ),
    );
    (path, dir)
}

fn trigger(port: u16, job: &str) {
    let bearer = format!("Bearer {TOKEN}");
    let (code, answer) = post_json(
        port,
        &format!("/api/v1/jobs/{job}/trigger"),
        &[("authorization", &bearer)],
        "",
    );
    assert_eq!(code, 202, "{answer}");
}

/// The id of `job`'s last run, once its row says `status`.
fn last_run(config: &Path, job: &str, status: &str) -> (i64, serde_json::Value) {
    let mut found = (0, serde_json::Value::Null);
    wait_until(
        &format!("{job}'s run is {status}"),
        Duration::from_secs(20),
        || {
            let runs = history_json(config, job);
            runs.first().is_some_and(|run| {
                found = (run["id"].as_i64().unwrap_or(0), run.clone());
                run["status"] == status
            })
        },
    );
    found
}

/// `GET path` over HTTP/1.0, whose body ends with the connection (a
/// streamed body is not chunked): its status, headers and body.
fn get(port: u16, path: &str) -> (u16, Vec<(String, String)>, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .expect("send");
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

fn seq(to: u32) -> String {
    (1..=to).map(|n| format!("{n}\n")).collect()
}

backend_test! {
    fn a_runs_whole_output_is_kept_and_read_from_either_replica(db: &TestDb) {
        let [holder_port, other_port] = free_ports();
        let env = [("REPLICRON_TEST_WEB_TOKEN", TOKEN)];
        let (holder_config, holder_dir) = config(db, "holder", holder_port);
        let (other_config, other_dir) = config(db, "other", other_port);
        let mut holder = Replica::start(&holder_config, "whole-holder", None, &env);
        holder.wait_for_log("replicron started", Duration::from_secs(30));
        let other = Replica::start(&other_config, "whole-other", None, &env);
        other.wait_for_log("replicron started", Duration::from_secs(30));
        wait_until("both dashboards' addresses", Duration::from_secs(10), || {
            let (_, replicas) = get_json(other_port, "/api/v1/instances");
            replicas.to_string().contains("whole-holder")
        });

        trigger(holder_port, "talker");
        let (id, _) = last_run(&holder_config, "talker", "running");
        // While it sleeps, what it printed is in its file (flushed within
        // a second), which the other replica, whose own output_dir does
        // not have it, asks the holder for.
        let path = format!("/api/v1/runs/{id}/output?stream=stdout");
        let mut running = String::new();
        wait_until("the other replica passes the running run's output on", Duration::from_secs(10), || {
            let (code, _, body) = get(other_port, &path);
            running = body;
            code == 200 && running.contains("\n50000\n")
        });
        assert_eq!(running, seq(50000), "in order, stdout only");
        wait_until("its stderr is kept too", Duration::from_secs(10), || {
            get(other_port, &format!("/api/v1/runs/{id}/output?stream=stderr")).2 == "warn\n"
        });
        // The command line, with the other's job file: from the holder too.
        let (code, out, err) = run(&other_config, &["history", "--output", &id.to_string()]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out, seq(50000));
        assert_eq!(err, "warn\n");

        std::fs::write(db.dir().join("mark"), "").expect("mark");
        let (_, row) = last_run(&holder_config, "talker", "succeeded");
        let file = row["output_file"].as_str().expect("the row names its file").to_string();
        assert_eq!(
            PathBuf::from(&file),
            holder_dir.join("talker").join(format!("{id}.gz"))
        );
        assert!(!other_dir.join("talker").exists(), "only the holder keeps it");
        // The row keeps its tail as before: the last 1 KiB.
        let tail = row["output"].as_str().unwrap_or_default();
        assert!(tail.len() <= 1024 && tail.ends_with("done\n"), "{tail:?}");
        let (code, out, err) = run(&holder_config, &["history", "--output", &id.to_string()]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out, seq(50000) + "done\n");
        assert_eq!(err, "warn\n");

        // Through the API: both streams in order, one of them, a download.
        let (code, headers, whole) = get(other_port, &format!("/api/v1/runs/{id}/output"));
        assert_eq!(code, 200, "{whole}");
        assert_eq!(whole, seq(50000) + "warn\ndone\n");
        assert!(headers.iter().any(|(n, v)| n == "content-type" && v.starts_with("text/plain")), "{headers:?}");
        let (_, _, err) = get(holder_port, &format!("/api/v1/runs/{id}/output?stream=stderr"));
        assert_eq!(err, "warn\n");
        let (_, headers, _) = get(holder_port, &format!("/api/v1/runs/{id}/output?download=1"));
        assert!(
            headers.iter().any(|(n, v)| n == "content-disposition"
                && v == &format!("attachment; filename=\"talker-{id}.log\"")),
            "{headers:?}"
        );
        for bad in ["?stream=both2", "?format=zip", "?format=gzip&stream=stdout"] {
            let (code, _, body) = http(holder_port, "GET", &format!("/api/v1/runs/{id}/output{bad}"), &[], "");
            assert_eq!(code, 400, "{bad}: {body}");
        }
        // The run's page offers it.
        let (_, _, page) = http(other_port, "GET", &format!("/runs/{id}"), &[], "");
        assert!(page.contains("Its whole output is kept"), "{page}");
        assert!(page.contains(&format!("/api/v1/runs/{id}/output?download=1")), "{page}");

        // A job that keeps only its tail says so.
        trigger(holder_port, "tail-only");
        let (short, _) = last_run(&holder_config, "tail-only", "succeeded");
        let (code, _, body) = http(holder_port, "GET", &format!("/api/v1/runs/{short}/output"), &[], "");
        assert_eq!(code, 404, "{body}");
        assert!(body.contains("kept no file of its whole output"), "{body}");
        let (code, _, err) = run(&holder_config, &["history", "--output", &short.to_string()]);
        assert_eq!(code, 1);
        assert!(err.contains("kept no file"), "{err}");
        let (code, _, err) = run(&holder_config, &["history", "--output", "999999999"]);
        assert_ne!(code, 0);
        assert!(err.contains("no run 999999999"), "{err}");

        // The holder goes, and its file with its host: the run says where
        // it was.
        holder.signal(nix::sys::signal::Signal::SIGTERM);
        holder.wait_exit(Duration::from_secs(30));
        std::fs::rename(&holder_dir, db.dir().join("elsewhere")).expect("move");
        let (code, _, err) = run(&other_config, &["history", "--output", &id.to_string()]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(&file) && err.contains("whole-holder") && err.contains("gone"), "{err}");
        let (code, _, body) = http(other_port, "GET", &format!("/api/v1/runs/{id}/output"), &[], "");
        assert_eq!(code, 410, "{body}");
        assert!(body.contains(&file), "{body}");
        drop(other);
    }
}
