//! No secret a job can read: the database URL, the web token, a
//! notification's token and a credential reach the daemon through its
//! environment and `$CREDENTIALS_DIRECTORY`; jobs running as the daemon's
//! user, as another user, and (with the daemon itself as another user) as
//! the daemon's own unprivileged user look for them in their environment
//! and in every `/proc/PID/environ` and `cmdline` they can read.

#![cfg(feature = "sqlite")]

use std::time::Duration;

use crate::databases::TestDb;
use crate::support::{Replica, history_json, wait_until};

/// What a job prints: its environment, its parent's (the daemon's)
/// environment block and command line, with their sizes, every line of
/// every other process's environment it can read (each line once: on a
/// busy machine the whole would pass the output limit, which keeps the
/// end), and whether it can read the daemon's memory.
const PEEK: &str = r#"echo "== env"; env
echo "== parent environ $(wc -c 2>&1 < /proc/$PPID/environ)"; tr '\0' '\n' < /proc/$PPID/environ 2>&1 | grep -v '^$'
echo "== parent cmdline"; tr '\0' ' ' < /proc/$PPID/cmdline 2>&1; echo
echo "== every environ"; for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>/dev/null | grep -v '^$'; done | sort -u
echo "== parent mem"; head -c 1 /proc/$PPID/mem 2>&1 >/dev/null
true"#;

fn jobs(as_nobody: bool) -> String {
    let mut jobs = format!(
        "[web]\ntoken_env = \"PEEK_WEB_TOKEN\"\n\n\
         [notify]\nwebhook = \"http://127.0.0.1:9/hook/${{PEEK_HOOK_TOKEN}}\"\n\n\
         [[job]]\nname = \"as-daemon\"\nschedule = \"* * * * * *\"\noutput_limit = \"1MiB\"\ncommand = '''\n{PEEK}\n'''\n"
    );
    if as_nobody {
        jobs.push_str(&format!(
            "\n[[job]]\nname = \"as-nobody\"\nschedule = \"* * * * * *\"\nuser = \"nobody\"\noutput_limit = \"1MiB\"\ncommand = '''\n{PEEK}\n'''\n"
        ));
    }
    jobs
}

/// The secrets of one daemon, each a string found nowhere else.
struct Secrets {
    token: String,
    hook: String,
    credential: String,
    url_marker: String,
}

impl Secrets {
    fn new() -> Secrets {
        let mark = |what: &str| format!("{what}-{:016x}", rand::random::<u64>());
        Secrets {
            token: mark("webtoken"),
            hook: mark("hooktoken"),
            credential: mark("credential"),
            url_marker: mark("dbpath"),
        }
    }

    fn all(&self) -> [&str; 4] {
        [&self.token, &self.hook, &self.credential, &self.url_marker]
    }
}

/// Starts a daemon (through `wrapper`) with the secrets, waits for two runs
/// of each job and returns their outputs.
fn peek(
    db_dir: &std::path::Path,
    wrapper: &[&str],
    as_nobody: bool,
    secrets: &Secrets,
) -> Vec<(String, String)> {
    let url = format!(
        "sqlite://{}",
        db_dir.join(format!("{}.db", secrets.url_marker)).display()
    );
    let config = db_dir.join("secrets.toml");
    std::fs::write(
        &config,
        format!("[database]\nurl = \"{url}\"\n\n{}", jobs(as_nobody)),
    )
    .expect("config");
    let credentials = db_dir.join("credentials");
    std::fs::create_dir_all(&credentials).expect("credentials");
    std::fs::write(
        credentials.join("PEEK_CREDENTIAL"),
        format!("{}\n", secrets.credential),
    )
    .expect("credential");
    let replica = Replica::start_through(
        wrapper,
        &config,
        "peek",
        &[
            ("REPLICRON_DATABASE_URL", url.as_str()),
            ("PEEK_WEB_TOKEN", secrets.token.as_str()),
            ("PEEK_HOOK_TOKEN", secrets.hook.as_str()),
            (
                "CREDENTIALS_DIRECTORY",
                credentials.to_str().expect("utf-8"),
            ),
        ],
    );
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    let names: &[&str] = if as_nobody {
        &["as-daemon", "as-nobody"]
    } else {
        &["as-daemon"]
    };
    wait_until("two runs of each job", Duration::from_secs(30), || {
        names.iter().all(|job| {
            history_json(&config, job)
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .count()
                >= 2
        })
    });
    let log = replica.log_text();
    drop(replica);
    assert!(
        log.contains("read from systemd credentials (never passed on to jobs): PEEK_CREDENTIAL"),
        "{log}"
    );
    names
        .iter()
        .flat_map(|job| {
            history_json(&config, job)
                .into_iter()
                .filter(|r| r["status"] == "succeeded")
                .map(move |r| {
                    (
                        job.to_string(),
                        r["output"].as_str().unwrap_or("").to_string(),
                    )
                })
        })
        .collect()
}

fn assert_nothing_found(outputs: &[(String, String)], secrets: &Secrets) {
    for (job, output) in outputs {
        for secret in secrets.all() {
            assert!(!output.contains(secret), "{job} found {secret}:\n{output}");
        }
        assert!(
            !output.contains("CREDENTIALS_DIRECTORY="),
            "{job}:\n{output}"
        );
        // It did look: the sections are all there.
        assert!(output.contains("== every environ"), "{job}:\n{output}");
    }
}

/// A root daemon: its jobs, as root and as nobody, find no secret. Root can
/// read the daemon's environment block, which holds nothing any more.
#[test]
fn a_job_as_root_or_as_another_user_finds_no_secret() {
    if !nix::unistd::Uid::effective().is_root() {
        assert!(std::env::var("CI").is_err(), "CI runs the suite as root");
        eprintln!("skipped: jobs as another user need a root test process");
        return;
    }
    let db = TestDb::sqlite();
    let dir = tempfile::tempdir().expect("dir");
    let secrets = Secrets::new();
    let outputs = peek(dir.path(), &[], true, &secrets);
    assert_nothing_found(&outputs, &secrets);
    for (job, output) in &outputs {
        if job == "as-daemon" {
            // Root reads the block: it is there, and empty.
            let size = output
                .lines()
                .find_map(|l| l.strip_prefix("== parent environ "))
                .and_then(|n| n.trim().parse::<u64>().ok());
            assert!(size.is_some_and(|n| n > 0), "{output}");
        }
    }
    drop(db);
}

/// A daemon running as an unprivileged user: a job running as that same
/// user can read neither the daemon's environment nor its memory (the
/// daemon is not dumpable), and finds no secret.
#[test]
fn a_job_as_the_daemons_own_user_cannot_read_the_daemon() {
    if !nix::unistd::Uid::effective().is_root() {
        assert!(std::env::var("CI").is_err(), "CI runs the suite as root");
        eprintln!("skipped: starting the daemon as nobody needs a root test process");
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let nobody = "65534";
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).expect("chown");
    let secrets = Secrets::new();
    let outputs = peek(
        dir.path(),
        &[
            "setpriv",
            &format!("--reuid={nobody}"),
            &format!("--regid={nobody}"),
            "--clear-groups",
            "--",
        ],
        false,
        &secrets,
    );
    assert_nothing_found(&outputs, &secrets);
    for (_, output) in &outputs {
        let mem = output.split("== parent mem").nth(1).unwrap_or_default();
        assert!(mem.contains("Permission denied"), "{output}");
        let environ = output
            .lines()
            .find(|l| l.starts_with("== parent environ"))
            .unwrap_or_default();
        assert!(environ.contains("Permission denied"), "{output}");
    }
}
