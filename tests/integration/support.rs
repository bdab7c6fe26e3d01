//! What every integration test needs: the built binary, a temporary folder,
//! the replicas it starts, and a fresh database per test on each backend
//! (`tests/support/databases.rs`), removed on `Drop`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) use crate::databases::{Kind, TestDb, backend_test};

/// The `replicron` binary cargo built for these tests.
pub(crate) fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_replicron"))
}

/// Runs the binary with `args`, without `REPLICRON_DATABASE_URL` from the
/// caller's environment.
pub(crate) fn replicron(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("REPLICRON_DATABASE_URL")
        .output()
        .expect("the replicron binary runs")
}

/// `replicron ARGS[0] --config CONFIG ARGS[1..]`: its exit code, stdout
/// and stderr.
pub(crate) fn run(config: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec![args[0], "--config", config.to_str().expect("utf-8")];
    all.extend_from_slice(&args[1..]);
    let output = replicron(&all);
    let (out, err) = text(&output);
    (output.status.code().unwrap_or(-1), out, err)
}

/// stdout and stderr as text.
pub(crate) fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Writes `jobs` under a `[database]` section for `url`, to `path`.
fn write_config(path: &Path, url: &str, jobs: &str) {
    std::fs::write(path, format!("[database]\nurl = {url:?}\n\n{jobs}")).expect("write config");
}

impl TestDb {
    /// Writes a config file `name` beside the others, for `url`.
    pub(crate) fn config_named(&self, name: &str, url: &str, jobs: &str) -> PathBuf {
        let path = self.dir().join(name);
        write_config(&path, url, jobs);
        path
    }

    /// Writes a config file for this database with `jobs` appended and
    /// returns its path.
    pub(crate) fn config(&self, jobs: &str) -> PathBuf {
        let path = self.dir().join("jobs.toml");
        write_config(&path, &self.url, jobs);
        path
    }

    /// Creates replicron's tables, as an operator does: `replicron migrate`.
    pub(crate) fn migrate(&self) {
        let config = self.config_named("migrate.toml", &self.url, "");
        let output = replicron(&["migrate", "--config", config.to_str().expect("utf-8")]);
        assert!(output.status.success(), "{:?}", text(&output));
    }
}

/// Held by each test that loads the machine on its own (private database
/// servers, a fault campaign, a browser, hundreds of megabytes of
/// output): only one of them runs at a time, beside the lighter tests,
/// so that their replicas' lateness stays within the bounds the tests
/// assert. A test that failed while holding it leaves it usable.
pub(crate) fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A `replicron run` process, killed (SIGKILL) on drop if still running.
pub(crate) struct Replica {
    pub id: String,
    pub log: PathBuf,
    child: std::process::Child,
}

impl Replica {
    /// Starts `replicron run` on `config` as instance `id`, logging to a file
    /// beside the config. With `skew`, the replica's wall clock is shifted
    /// by libfaketime (e.g. `"+3s"`), its monotonic clock left alone.
    pub(crate) fn start(
        config: &Path,
        id: &str,
        skew: Option<&str>,
        env: &[(&str, &str)],
    ) -> Replica {
        Replica::launch(&binary(), config, id, skew, env, false, &[])
    }

    /// [`Replica::start`] with a limit of `nofile` open descriptors, soft
    /// and hard (through prlimit(1), which execs the daemon).
    #[cfg(feature = "sqlite")]
    pub(crate) fn start_with_nofile(
        config: &Path,
        id: &str,
        env: &[(&str, &str)],
        nofile: u64,
    ) -> Replica {
        let limit = format!("--nofile={nofile}:{nofile}");
        Replica::launch(
            &binary(),
            config,
            id,
            None,
            env,
            false,
            &["prlimit", &limit, "--"],
        )
    }

    /// [`Replica::start`] through `wrapper`, a command that execs the
    /// daemon it is given (`setpriv --reuid=… --`, `prlimit … --`), or
    /// runs it as its child (`unshare --fork …`).
    pub(crate) fn start_through(
        wrapper: &[&str],
        config: &Path,
        id: &str,
        env: &[(&str, &str)],
    ) -> Replica {
        Replica::launch(&binary(), config, id, None, env, false, wrapper)
    }

    /// [`Replica::start`] of another build of replicron. A replica started
    /// again under the same id logs on after its predecessor, so that the
    /// log of an id tells its whole story.
    pub(crate) fn start_binary(
        binary: &Path,
        config: &Path,
        id: &str,
        skew: Option<&str>,
        env: &[(&str, &str)],
    ) -> Replica {
        Replica::launch(binary, config, id, skew, env, true, &[])
    }

    fn launch(
        binary: &Path,
        config: &Path,
        id: &str,
        skew: Option<&str>,
        env: &[(&str, &str)],
        append: bool,
        wrapper: &[&str],
    ) -> Replica {
        let dir = config.parent().expect("config folder");
        let log = dir.join(format!("replica-{id}.log"));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&log)
            .expect("log file");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut wrapped = Command::new(program);
                wrapped.args(args).arg(binary);
                wrapped
            }
            None => Command::new(binary),
        };
        if let Some(offset) = skew {
            // Preloaded directly: the `faketime` wrapper would stand between
            // the test and the replica and swallow its signals.
            command
                .env(
                    "LD_PRELOAD",
                    libfaketime().expect("libfaketime is installed"),
                )
                .env("FAKETIME", offset)
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        command
            .args(["--log-format", "json", "run", "--config"])
            .arg(config)
            .args(["--instance-id", id])
            .current_dir(dir)
            .env_remove("REPLICRON_DATABASE_URL")
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("start replicron run");
        Replica {
            id: id.to_string(),
            log,
            child,
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// What it logged so far.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its log contains `needle`.
    pub(crate) fn wait_for_log(&self, needle: &str, timeout: std::time::Duration) {
        let deadline = std::time::Instant::now() + timeout;
        while !self.log_text().contains(needle) {
            assert!(
                std::time::Instant::now() < deadline,
                "replica {} did not log {needle:?} within {timeout:?}:\n{}",
                self.id,
                self.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Sends `signal` to the process.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal);
    }

    /// Waits for it to exit, at most `timeout`.
    pub(crate) fn wait_exit(
        &mut self,
        timeout: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether process `pid` still exists (a zombie counts as gone).
pub(crate) fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

/// Three replicas on `config`, `r0` to `r2`, started.
pub(crate) fn fleet_of_three(config: &Path) -> Vec<Replica> {
    let replicas: Vec<Replica> = (0..3)
        .map(|n| Replica::start(config, &format!("r{n}"), None, &[]))
        .collect();
    for replica in &replicas {
        replica.wait_for_log("replicron started", std::time::Duration::from_secs(30));
    }
    replicas
}

/// The history of a config's database, as `history --format json` prints it.
pub(crate) fn history_json(config: &Path, job: &str) -> Vec<serde_json::Value> {
    let output = replicron(&[
        "history",
        "--config",
        config.to_str().expect("utf-8"),
        "--job",
        job,
        "--limit",
        "100000",
        "--format",
        "json",
    ]);
    let (out, err) = text(&output);
    // Replicas that have only just been started may not have migrated yet:
    // nothing has run then.
    if err.contains("not migrated") || err.contains("no database at") {
        return Vec::new();
    }
    assert!(output.status.success(), "{out}{err}");
    let value: serde_json::Value = serde_json::from_str(&out).expect("history json");
    value.as_array().cloned().unwrap_or_default()
}

/// Debian's multi-threaded libfaketime, if installed. In CI it must be.
pub(crate) fn libfaketime() -> Option<PathBuf> {
    let found = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|dir| Path::new(dir).join("faketime/libfaketimeMT.so.1"))
    .find(|path| path.exists());
    assert!(
        found.is_some() || std::env::var("CI").as_deref() != Ok("true"),
        "libfaketime is missing: install Debian's faketime package"
    );
    found
}

/// Polls `done`, first every 25 ms, then less often, down to every
/// 250 ms: most checks start a `replicron` process, and a test polling
/// for seconds would otherwise take a core from the replicas it watches.
/// Panics naming `what` after `timeout`.
pub(crate) fn wait_until(what: &str, timeout: std::time::Duration, done: impl FnMut() -> bool) {
    wait_until_or(what, timeout, done, String::new);
}

/// [`wait_until`], with what `explain` says (history, logs) in the panic.
pub(crate) fn wait_until_or(
    what: &str,
    timeout: std::time::Duration,
    mut done: impl FnMut() -> bool,
    explain: impl Fn() -> String,
) {
    let deadline = std::time::Instant::now() + timeout;
    let mut pause = std::time::Duration::from_millis(25);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            explain()
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(250));
    }
}

/// `t` as a timestamp literal every backend reads into replicron's columns.
pub(crate) fn sql_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}
