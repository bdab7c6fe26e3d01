//! What every integration test needs: the built binary, a temporary folder,
//! and a fresh database per test on each backend, removed on `Drop`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use diesel::connection::SimpleConnection;
use replicron::config::DatabaseUrl;
use replicron::db::{DbConnection, Pool};

/// The `replicron` binary cargo built for these tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_replicron"))
}

/// Runs the binary with `args`, without `REPLICRON_DATABASE_URL` from the
/// caller's environment.
pub fn replicron(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("REPLICRON_DATABASE_URL")
        .output()
        .expect("the replicron binary runs")
}

/// stdout and stderr as text.
pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The backends a test can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Mysql,
    Postgres,
}

/// The backends this build supports.
pub fn kinds() -> Vec<Kind> {
    let mut kinds = Vec::new();
    if cfg!(feature = "sqlite") {
        kinds.push(Kind::Sqlite);
    }
    if cfg!(feature = "mysql") {
        kinds.push(Kind::Mysql);
    }
    if cfg!(feature = "postgres") {
        kinds.push(Kind::Postgres);
    }
    kinds
}

/// A database of its own for one test, dropped afterwards.
pub struct TestDb {
    pub kind: Kind,
    /// The URL replicron is given.
    pub url: String,
    dir: tempfile::TempDir,
    drop_sql: Option<(String, String)>,
}

fn unique_name() -> String {
    format!(
        "replicron_t_{}_{}",
        std::process::id(),
        rand::random::<u32>()
    )
}

impl TestDb {
    /// A fresh database on `kind`, or `None` when the server is not
    /// configured (never in CI, where that is a failure).
    pub fn new(kind: Kind) -> Option<TestDb> {
        let dir = tempfile::tempdir().expect("temp dir");
        match kind {
            Kind::Sqlite => Some(TestDb {
                kind,
                url: format!("sqlite://{}", dir.path().join("replicron.db").display()),
                dir,
                drop_sql: None,
            }),
            Kind::Mysql | Kind::Postgres => {
                let var = match kind {
                    Kind::Mysql => "REPLICRON_TEST_MYSQL_URL",
                    _ => "REPLICRON_TEST_POSTGRES_URL",
                };
                let Ok(admin_url) = std::env::var(var) else {
                    assert!(
                        std::env::var("CI").as_deref() != Ok("true"),
                        "{var} is not set: in CI every backend must be tested"
                    );
                    eprintln!("skipped {kind:?}: {var} is not set");
                    return None;
                };
                let name = unique_name();
                let mut admin = connect(&admin_url);
                admin
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .expect("create the test database");
                let base = admin_url
                    .rsplit_once('/')
                    .map_or(admin_url.as_str(), |(b, _)| b);
                let drop = match kind {
                    Kind::Mysql => format!("DROP DATABASE IF EXISTS {name}"),
                    _ => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                };
                Some(TestDb {
                    kind,
                    url: format!("{base}/{name}"),
                    dir,
                    drop_sql: Some((admin_url, drop)),
                })
            }
        }
    }

    /// A temporary folder that lives as long as this database.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The parsed URL.
    pub fn database_url(&self) -> DatabaseUrl {
        DatabaseUrl::parse(&self.url, Path::new(".")).expect("valid test URL")
    }

    /// A migrated pool of `size` connections.
    pub fn pool(&self, size: u32) -> Pool {
        let pool = Pool::open(&self.database_url(), size).expect("open the test database");
        pool.migrate().expect("migrate the test database");
        pool
    }

    /// The database server's address (MariaDB and PostgreSQL).
    pub fn server(&self) -> std::net::SocketAddr {
        let authority = self.url.split_once("://").map_or("", |(_, rest)| rest);
        let host_port = authority.split('/').next().unwrap_or("");
        let host_port = host_port.rsplit('@').next().unwrap_or(host_port);
        host_port.parse().expect("an IP:port database address")
    }

    /// This database's URL, but reached through `port` on 127.0.0.1.
    pub fn url_via(&self, port: u16) -> String {
        self.url
            .replace(&self.server().to_string(), &format!("127.0.0.1:{port}"))
    }

    /// Writes a config file `name` beside the others, for `url`.
    pub fn config_named(&self, name: &str, url: &str, jobs: &str) -> PathBuf {
        let path = self.dir().join(name);
        std::fs::write(&path, format!("[database]\nurl = {url:?}\n\n{jobs}"))
            .expect("write config");
        path
    }

    /// Writes a config file for this database with `jobs` appended and
    /// returns its path.
    pub fn config(&self, jobs: &str) -> PathBuf {
        let path = self.dir().join("jobs.toml");
        std::fs::write(&path, format!("[database]\nurl = {:?}\n\n{jobs}", self.url))
            .expect("write config");
        path
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((admin_url, sql)) = &self.drop_sql {
            let mut admin = connect(admin_url);
            if let Err(e) = admin.batch_execute(sql) {
                eprintln!("could not drop a test database: {e}");
            }
        }
    }
}

/// One connection, outside any pool.
pub fn connect(url: &str) -> DbConnection {
    let url = DatabaseUrl::parse(url, Path::new(".")).expect("valid URL");
    replicron::db::establish(&url).expect("connect")
}

/// Runs `test` once per backend of this build, each with a fresh database.
pub fn on_each_backend(test: impl Fn(&TestDb)) {
    for kind in kinds() {
        if let Some(db) = TestDb::new(kind) {
            eprintln!("--- on {kind:?}");
            test(&db);
        }
    }
}

/// A `replicron run` process, killed (SIGKILL) on drop if still running.
pub struct Replica {
    pub id: String,
    pub log: PathBuf,
    child: std::process::Child,
}

impl Replica {
    /// Starts `replicron run` on `config` as instance `id`, logging to a file
    /// beside the config. With `skew`, the replica's wall clock is shifted
    /// by libfaketime (e.g. `"+3s"`), its monotonic clock left alone.
    pub fn start(config: &Path, id: &str, skew: Option<&str>, env: &[(&str, &str)]) -> Replica {
        let dir = config.parent().expect("config folder");
        let log = dir.join(format!("replica-{id}.log"));
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(binary());
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
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// What it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its log contains `needle`.
    pub fn wait_for_log(&self, needle: &str, timeout: std::time::Duration) {
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
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal);
    }

    /// Waits for it to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
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
pub fn process_alive(pid: i32) -> bool {
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

/// The history of a config's database, as `history --format json` prints it.
pub fn history_json(config: &Path, job: &str) -> Vec<serde_json::Value> {
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
pub fn libfaketime() -> Option<PathBuf> {
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

/// Polls `done` every 50 ms; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: std::time::Duration, done: impl FnMut() -> bool) {
    wait_until_or(what, timeout, done, String::new);
}

/// [`wait_until`], with what `explain` says (history, logs) in the panic.
pub fn wait_until_or(
    what: &str,
    timeout: std::time::Duration,
    mut done: impl FnMut() -> bool,
    explain: impl Fn() -> String,
) {
    let deadline = std::time::Instant::now() + timeout;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            explain()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
