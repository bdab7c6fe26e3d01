//! Migrations as operators run them, on every backend.

use crate::support::{Kind, TestDb, backend_test, replicron, text};

backend_test! {
    fn migrate_is_idempotent(db: &TestDb) {
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
    }
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

backend_test! {
    /// Replicas starting together migrate one at a time: four processes run
    /// `migrate` at the same moment on a fresh database, and all succeed with
    /// the migrations applied exactly once between them.
    fn simultaneous_migrations_all_succeed(db: &TestDb) {
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
    }
}

backend_test! {
    /// A database whose tables exist but whose migrations were never recorded
    /// (a start cut short between the DDL and the version rows) is finished by
    /// the next start instead of failing with "already exists" forever.
    fn a_half_applied_migration_heals(db: &TestDb) {
        let config = db.config("");
        let config = config.to_str().expect("utf-8 path");
        let first = replicron(&["migrate", "--config", config]);
        assert!(first.status.success(), "{:?}", text(&first));
        let mut conn = db.raw();
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
    }
}
