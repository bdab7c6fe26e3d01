//! The bare spawner: the floor for a job's start lateness on this machine.
//!
//! At each whole second it starts the same N shell children a replicron
//! job would start, as fast as the machine allows: no database, no lease,
//! no history, no guard. Each child is `SHELL -c BODY` with its stdout and
//! stderr piped (as a replicron run's are), stdin from /dev/null, in a
//! process group of its own, and `REPLICRON_SCHEDULED_AT` set to its
//! instant; `BODY` appends its own start (bash's `$EPOCHREALTIME`) to a
//! file. `scripts/bench` runs it beside a replicron fleet running the same
//! body, in the same run, and reports the ratio of the two.
//!
//! `cargo bench --bench spawner` runs 20 children a second for 10 s;
//! `SPAWNER_JOBS`, `SPAWNER_SECONDS`, `SPAWNER_SHELL` and `SPAWNER_BODY`
//! change that (the default body appends to `spawner.txt` in the working
//! directory).

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// The instant's text, as replicron gives it (RFC 3339, milliseconds, Z).
fn instant_text(second: u64) -> String {
    chrono::DateTime::from_timestamp(second as i64, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn main() {
    let jobs: usize = env_or("SPAWNER_JOBS", "20").parse().unwrap_or(20);
    let seconds: u64 = env_or("SPAWNER_SECONDS", "10").parse().unwrap_or(10);
    let shell = env_or("SPAWNER_SHELL", "/bin/bash");
    let body = env_or(
        "SPAWNER_BODY",
        r#"echo "$REPLICRON_SCHEDULED_AT $EPOCHREALTIME" >> spawner.txt"#,
    );
    // Children are reaped and their pipes drained off the spawning thread,
    // as a daemon's event loop would.
    let (reap, reaped) = mpsc::channel::<Child>();
    let reaper = std::thread::spawn(move || {
        for mut child in reaped {
            let mut sink = Vec::new();
            if let Some(mut out) = child.stdout.take() {
                let _ = out.read_to_end(&mut sink);
            }
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_end(&mut sink);
            }
            let _ = child.wait();
        }
    });
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    };
    let first = now().as_secs() + 1;
    for second in first..first + seconds {
        let at = Duration::from_secs(second);
        if let Some(wait) = at.checked_sub(now()) {
            std::thread::sleep(wait);
        }
        let instant = instant_text(second);
        for _ in 0..jobs {
            let spawned = Command::new(&shell)
                .arg("-c")
                .arg(&body)
                .env("REPLICRON_SCHEDULED_AT", &instant)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn();
            match spawned {
                Ok(child) => {
                    let _ = reap.send(child);
                }
                Err(e) => eprintln!("spawn failed: {e}"),
            }
        }
    }
    drop(reap);
    let _ = reaper.join();
}
