//! A database that can lose a commit it acknowledged, a claim among them,
//! is named: the daemon warns at start and `status` says so, naming each
//! setting, its value and what it risks; a durable server gets neither.

use std::time::Duration;

use diesel::connection::SimpleConnection;

use crate::cluster::{PgServer, Server};
use crate::support::{Kind, Replica, TestDb, run};

const JOBS: &str = "[[job]]\nname = \"yearly\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n";

/// The settings `status --format json` names, as `setting=value`.
fn named_by_status(config: &std::path::Path) -> Vec<String> {
    let (code, stdout, stderr) = run(config, &["status", "--format", "json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("status JSON");
    report["durability"]
        .as_array()
        .expect("a durability list")
        .iter()
        .map(|risk| {
            assert!(
                risk["risk"]
                    .as_str()
                    .is_some_and(|r| r.contains("set it to")),
                "{risk}"
            );
            format!(
                "{}={}",
                risk["setting"].as_str().unwrap_or("?"),
                risk["value"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// The table of `status`.
fn status_table(config: &std::path::Path) -> String {
    let (code, stdout, stderr) = run(config, &["status"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    stdout
}

/// Starts a replica on `config`; returns its log once it has started.
fn start_log(config: &std::path::Path, id: &str) -> String {
    let replica = Replica::start(config, id, None, &[]);
    replica.wait_for_log("replicron started", Duration::from_secs(60));
    replica.log_text()
}

/// The warnings of `log` that name a durability setting.
fn warned(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| {
            line["level"] == "WARN"
                && line["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("the database may lose a commit"))
        })
        .map(|line| {
            format!(
                "{}={}",
                line["setting"].as_str().unwrap_or("?"),
                line["value"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// A private MariaDB that flushes its redo log once a second and leaves
/// its binary log to the operating system: the daemon warns of both at
/// start, `status` names both; once set durable, neither says a thing.
#[test]
#[cfg_attr(
    replicron_no_private_mariadb,
    ignore = "needs Debian's mariadb-server and rsync"
)]
fn a_mariadb_that_can_lose_a_claim_is_named_at_start_and_in_status() {
    let Some(server) = Server::start(&[
        "--innodb-flush-log-at-trx-commit=2",
        "--log-bin=binlog",
        "--sync-binlog=0",
    ]) else {
        return;
    };
    server.node.execute("CREATE DATABASE lossy");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("jobs.toml");
    std::fs::write(
        &config,
        format!("[database]\nurl = {:?}\n\n{JOBS}", server.node.url("lossy")),
    )
    .expect("write config");
    let expected = ["innodb_flush_log_at_trx_commit=2", "sync_binlog=0"];
    assert_eq!(warned(&start_log(&config, "lossy")), expected);
    assert_eq!(named_by_status(&config), expected);
    let table = status_table(&config);
    assert!(
        table.contains("WARNING: the database may lose a commit it acknowledged")
            && table.contains("innodb_flush_log_at_trx_commit = 2: ")
            && table.contains("sync_binlog = 0: "),
        "{table}"
    );

    server
        .node
        .execute("SET GLOBAL innodb_flush_log_at_trx_commit = 1; SET GLOBAL sync_binlog = 1");
    assert_eq!(warned(&start_log(&config, "durable")), Vec::<String>::new());
    assert_eq!(named_by_status(&config), Vec::<String>::new());
    assert!(!status_table(&config).contains("WARNING"));
}

/// A PostgreSQL database whose sessions commit without waiting for the
/// flush (`ALTER DATABASE … SET synchronous_commit = off`, as replicron's
/// sessions see it): warned of at start and named by `status`; the
/// server's defaults are not.
#[test]
#[cfg_attr(
    replicron_no_postgres_server,
    ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
)]
fn a_postgres_database_that_commits_before_the_flush_is_named() {
    let db = TestDb::new(Kind::Postgres);
    db.migrate();
    let config = db.config(JOBS);
    assert_eq!(named_by_status(&config), Vec::<String>::new());
    let name = db
        .url
        .rsplit('/')
        .next()
        .expect("database name")
        .to_string();
    db.raw()
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = off"
        ))
        .expect("set synchronous_commit");
    assert_eq!(
        warned(&start_log(&config, "async-commit")),
        ["synchronous_commit=off"]
    );
    assert_eq!(named_by_status(&config), ["synchronous_commit=off"]);
}

/// A private PostgreSQL with `fsync = off`: named at start and by
/// `status`.
#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the postgres feature")]
fn a_postgres_server_without_fsync_is_named() {
    let Some(server) = PgServer::start() else {
        return;
    };
    server.execute("ALTER SYSTEM SET fsync = off");
    server.execute("SELECT pg_reload_conf()");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("jobs.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"postgres://postgres@127.0.0.1:{}/postgres\"\n\n{JOBS}",
            server.port()
        ),
    )
    .expect("write config");
    let migrate =
        crate::support::replicron(&["migrate", "--config", config.to_str().expect("utf-8")]);
    assert!(
        migrate.status.success(),
        "{:?}",
        crate::support::text(&migrate)
    );
    crate::support::wait_until(
        "the server reads fsync = off",
        Duration::from_secs(10),
        || named_by_status(&config) == ["fsync=off"],
    );
    assert_eq!(warned(&start_log(&config, "no-fsync")), ["fsync=off"]);
}
