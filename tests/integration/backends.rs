//! The database wiring on every backend.

use diesel::RunQueryDsl;

use crate::support::{Kind, TestDb, kinds, replicron, text};

fn select_one(kind: Kind) {
    let Some(db) = TestDb::new(kind) else { return };
    let pool = db.pool(2);
    let mut conn = pool.get().expect("connection");
    assert_eq!(replicron::db::ping(&mut conn).expect("SELECT 1"), 1);
    // The migrations created both tables.
    let locks: i64 = replicron::db::schema::replicron_locks::table
        .count()
        .get_result(&mut **conn)
        .expect("count locks");
    assert_eq!(locks, 0);
}

use diesel::QueryDsl;

#[test]
fn sqlite_select_one() {
    select_one(Kind::Sqlite);
}

#[derive(diesel::QueryableByName)]
struct Synchronous {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    synchronous: i32,
}

#[derive(diesel::QueryableByName)]
struct JournalMode {
    #[diesel(sql_type = diesel::sql_types::Text)]
    journal_mode: String,
}

/// A claim that has returned must survive a power loss: WAL with
/// `synchronous = FULL` (2) on every pooled connection, not WAL's `NORMAL`.
#[test]
fn sqlite_commits_are_durable() {
    let Some(db) = TestDb::new(Kind::Sqlite) else {
        return;
    };
    let pool = db.pool(3);
    let mut conns: Vec<_> = (0..3).map(|_| pool.get().expect("connection")).collect();
    for conn in &mut conns {
        let sync: Synchronous = diesel::sql_query("PRAGMA synchronous")
            .get_result(&mut ***conn)
            .expect("PRAGMA synchronous");
        assert_eq!(sync.synchronous, 2, "synchronous must be FULL");
        let mode: JournalMode = diesel::sql_query("PRAGMA journal_mode")
            .get_result(&mut ***conn)
            .expect("PRAGMA journal_mode");
        assert_eq!(mode.journal_mode, "wal");
    }
}

#[test]
fn mysql_select_one() {
    if kinds().contains(&Kind::Mysql) {
        select_one(Kind::Mysql);
    }
}

#[test]
fn postgres_select_one() {
    if kinds().contains(&Kind::Postgres) {
        select_one(Kind::Postgres);
    }
}

#[test]
fn migrate_is_idempotent_on_every_backend() {
    crate::support::on_each_backend(|db| {
        let config = db.config("");
        let config = config.to_str().expect("utf-8 path");
        let first = replicron(&["migrate", "--config", config]);
        let (out, err) = text(&first);
        assert!(first.status.success(), "{out}{err}");
        let migrations =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"))
                .expect("migrations")
                .count();
        assert!(
            out.contains(&format!("{migrations} migrations applied")),
            "{out}"
        );
        let second = replicron(&["migrate", "--config", config]);
        let (out, err) = text(&second);
        assert!(second.status.success(), "{out}{err}");
        assert!(out.contains("0 migrations applied"), "{out}");
    });
}

#[test]
fn a_server_that_is_down_is_a_clear_redacted_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    for url in [
        "mysql://app:hunter2@127.0.0.1:1/jobs",
        "postgres://app:hunter2@127.0.0.1:1/jobs",
    ] {
        let path = dir.path().join("jobs.toml");
        std::fs::write(&path, format!("[database]\nurl = {url:?}\n")).expect("write");
        let started = std::time::Instant::now();
        let output = replicron(&["migrate", "--config", path.to_str().expect("utf-8")]);
        let (out, err) = text(&output);
        assert!(!output.status.success());
        assert!(
            !err.contains("hunter2") && !out.contains("hunter2"),
            "{err}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        if err.contains("--features") {
            continue; // this build lacks that backend: the message says which feature
        }
        assert_eq!(output.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot connect to") && err.contains("***"),
            "{err}"
        );
    }
}

/// Replicas starting together migrate one at a time: four processes run
/// `migrate` at the same moment on a fresh database, and all succeed with
/// the migrations applied exactly once between them.
#[test]
fn simultaneous_migrations_all_succeed() {
    crate::support::on_each_backend(|db| {
        let config = db.config("");
        let children: Vec<_> = (0..4)
            .map(|_| {
                std::process::Command::new(crate::support::binary())
                    .args(["migrate", "--config"])
                    .arg(&config)
                    .env_remove("REPLICRON_DATABASE_URL")
                    .output()
            })
            .collect::<Vec<_>>();
        let mut applied = 0;
        for child in children {
            let output = child.expect("migrate runs");
            let (out, err) = text(&output);
            assert!(output.status.success(), "{out}{err}");
            applied += out
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse::<usize>().ok())
                .expect("a count of migrations");
        }
        let migrations =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"))
                .expect("migrations")
                .count();
        assert_eq!(applied, migrations);
    });
}

/// A database whose tables exist but whose migrations were never recorded
/// (a start cut short between the DDL and the version rows) is finished by
/// the next start instead of failing with "already exists" forever.
#[test]
fn a_half_applied_migration_heals() {
    crate::support::on_each_backend(|db| {
        let config = db.config("");
        let config = config.to_str().expect("utf-8 path");
        let first = replicron(&["migrate", "--config", config]);
        assert!(first.status.success(), "{:?}", text(&first));
        let mut conn = crate::support::connect(&db.url);
        diesel::connection::SimpleConnection::batch_execute(
            &mut conn,
            "DELETE FROM __diesel_schema_migrations",
        )
        .expect("forget the versions");
        let again = replicron(&["migrate", "--config", config]);
        let (out, err) = text(&again);
        assert!(again.status.success(), "{out}{err}");
        assert!(!out.contains(" 0 migrations"), "{out}");
        if db.kind == Kind::Mysql {
            assert!(err.contains("half-applied"), "{err}");
        }
        let third = replicron(&["migrate", "--config", config]);
        assert!(text(&third).0.contains(" 0 migrations applied"));
    });
}
