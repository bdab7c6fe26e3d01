//! `include`: jobs from a folder beside the job file. A running daemon
//! rereads the folder at SIGHUP: an added file's jobs start, a removed
//! file's jobs stop, a changed file's jobs restart, as a job edited in the
//! job file itself does; an invalid file is refused naming its file and
//! line, and the jobs already running go on.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, history_json, run, wait_until};

/// A job due every second that appends a line to `DIR/NAME.out`.
fn job(name: &str, dir: &str, line: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\ncommand = 'echo {line} >> {dir}/{name}.out'\n"
    )
}

/// The audit log's reloads, oldest first.
fn reloads(config: &std::path::Path) -> Vec<Value> {
    let (code, out, err) = run(config, &["audit", "--format", "json", "--limit", "50"]);
    assert_eq!(code, 0, "{err}");
    let all: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    all.into_iter()
        .rev()
        .filter(|row| row["action"] == "reload")
        .collect()
}

backend_test! {
    fn a_reload_applies_added_changed_and_removed_files(db: &TestDb) {
        let dir = db.dir().display().to_string();
        let folder = db.dir().join("jobs.d");
        std::fs::create_dir_all(&folder).expect("jobs.d");
        std::fs::write(folder.join("a.toml"), job("a", &dir, "a")).expect("a.toml");
        std::fs::write(folder.join("b.toml"), job("b", &dir, "one")).expect("b.toml");
        let config = db.config("");
        // include must come before [database]: write the file again.
        let text = std::fs::read_to_string(&config).expect("config");
        std::fs::write(&config, format!("include = [\"jobs.d/*.toml\"]\n{text}")).expect("config");

        // `check` says where each job comes from.
        let (code, out, err) = run(&config, &["check", "--count", "0"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&format!("file      {}", folder.join("a.toml").display())), "{out}");
        assert!(out.contains(&format!("included {}", folder.join("b.toml").display())), "{out}");

        let replica = Replica::start(&config, "solo", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let a_out = db.dir().join("a.out");
        wait_until("a to run", Duration::from_secs(20), || a_out.exists());

        // A file added, one removed, one changed.
        std::fs::write(folder.join("c.toml"), job("c", &dir, "c")).expect("c.toml");
        std::fs::remove_file(folder.join("a.toml")).expect("remove a.toml");
        std::fs::write(folder.join("b.toml"), job("b", &dir, "two")).expect("b.toml");
        replica.signal(Signal::SIGHUP);
        wait_until("the reload's audit row", Duration::from_secs(20), || {
            !reloads(&config).is_empty()
        });
        let reload = &reloads(&config)[0];
        assert_eq!(reload["result"], "done", "{reload}");
        assert_eq!(reload["args"]["added"], serde_json::json!(["c"]), "{reload}");
        assert_eq!(reload["args"]["changed"], serde_json::json!(["b"]), "{reload}");
        assert_eq!(reload["args"]["removed"], serde_json::json!(["a"]), "{reload}");
        let c_out = db.dir().join("c.out");
        wait_until("c to run", Duration::from_secs(20), || c_out.exists());
        let b_out = db.dir().join("b.out");
        wait_until("b's new command to run", Duration::from_secs(20), || {
            std::fs::read_to_string(&b_out).is_ok_and(|text| text.contains("two"))
        });
        // a's loop is retired: its last run is its last.
        let a_runs = history_json(&config, "a").len();
        wait_until("c to run twice more", Duration::from_secs(20), || {
            history_json(&config, "c").len() >= 3
        });
        assert_eq!(history_json(&config, "a").len(), a_runs, "a ran after it was removed");

        // A file that repeats a job name: refused, naming both files and
        // lines; the running jobs go on.
        std::fs::write(folder.join("d.toml"), format!("\n{}", job("c", &dir, "d"))).expect("d.toml");
        replica.signal(Signal::SIGHUP);
        wait_until("the refused reload", Duration::from_secs(20), || reloads(&config).len() >= 2);
        let refused = &reloads(&config)[1];
        assert_eq!(refused["result"], "refused", "{refused}");
        let why = refused["detail"].as_str().unwrap_or_default();
        assert!(
            why.contains(&format!("{}:3", folder.join("d.toml").display()))
                && why.contains(&format!("{}:2", folder.join("c.toml").display())),
            "{refused}"
        );
        let c_runs = history_json(&config, "c").len();
        wait_until("c to go on running", Duration::from_secs(20), || {
            history_json(&config, "c").len() > c_runs
        });
    }
}
