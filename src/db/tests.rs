//! The database wiring on every backend: a migrated pool answers, and
//! SQLite's commits survive a power loss.

use diesel::{ExpressionMethods, QueryDsl, RunQueryDsl};

use super::DbError;
use crate::testing::{TestDb, backend_test};

backend_test! {
    /// A migrated pool answers `SELECT 1`, and the migrations created the
    /// lease table.
    fn a_migrated_pool_answers(db: &TestDb) {
        let pool = db.pool(2);
        let mut conn = pool.get().expect("connection");
        assert_eq!(crate::db::pool::ping(&mut conn).expect("SELECT 1"), 1);
        let locks: i64 = crate::db::schema::replicron_locks::table
            .count()
            .get_result(&mut **conn)
            .expect("count locks");
        assert_eq!(locks, 0);
    }
}

backend_test! {
    /// A replica killed, or cut off, while it held the migration lock
    /// leaves it held for its lease (5 min): a start on a database that
    /// has every migration does not wait for it.
    fn a_migrated_database_is_started_on_past_a_held_migration_lock(db: &TestDb) {
        use crate::db::schema::replicron_migration_lock::dsl as lock;
        let pool = db.pool(1);
        let mut conn = pool.get().expect("connection");
        diesel::update(lock::replicron_migration_lock)
            .set((
                lock::locked_by.eq("dead:1"),
                lock::lock_until.eq(crate::db::clock::DbNowPlus::new(
                    std::time::Duration::from_secs(300),
                )),
            ))
            .execute(&mut **conn)
            .expect("hold the migration lock");
        let started = std::time::Instant::now();
        let done = crate::db::migrate::migrate(&mut conn, "alive:2").expect("migrate");
        assert_eq!(done, crate::db::migrate::Migrated::default());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use diesel::RunQueryDsl;

    use crate::testing::TestDb;

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
        let db = TestDb::sqlite();
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

    /// A daemon's store tells its health tracker how each call went: a call
    /// that gets no answer makes the database down, the next answer up
    /// again. A call tried again on a fresh connection tells only how it
    /// ended, so one dead pooled connection makes no outage of a moment.
    #[tokio::test]
    async fn the_store_tells_its_health_how_each_call_went() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::Duration;

        use crate::db::Store;
        use crate::db::health::{DbState, Health};

        let db = TestDb::sqlite();
        let pool = db.pool(4).with_call_timeout(Duration::from_millis(200));
        let health = Arc::new(Health::new(Arc::default()));
        let states = health.subscribe();
        let store = Store::new(pool).reporting_to(health.clone());
        let hang = |conn: &mut crate::db::DbConnection| {
            std::thread::sleep(Duration::from_millis(400));
            crate::db::pool::ping(conn)
        };

        store
            .call("pinging slowly", hang)
            .await
            .expect_err("no answer in time");
        assert_eq!(*states.borrow(), DbState::Down);
        store.ping().await.expect("an answer");
        assert_eq!(*states.borrow(), DbState::Up);

        // The first try hangs, the second answers: no outage is told.
        let tried = Arc::new(AtomicBool::new(false));
        let mut changes = health.subscribe();
        changes.mark_unchanged();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        store
            .call_until("pinging, once slowly", deadline, move |conn| {
                if tried.swap(true, Ordering::SeqCst) {
                    crate::db::pool::ping(conn)
                } else {
                    hang(conn)
                }
            })
            .await
            .expect("the second try answers");
        assert!(
            !changes.has_changed().expect("the tracker lives"),
            "a failed try was told"
        );

        // A command's store tells nobody.
        let quiet = Store::new(db.pool(1).with_call_timeout(Duration::from_millis(200)));
        quiet
            .call("pinging slowly", hang)
            .await
            .expect_err("no answer in time");
        assert_eq!(*states.borrow(), DbState::Up);
    }
}

/// Statements in a session whose time zone is not UTC.
#[cfg(any(feature = "mysql", feature = "postgres"))]
mod zones {
    use std::time::Duration;

    use chrono::{DateTime, TimeDelta, Utc};

    use crate::testing::TestDb;

    /// The session time zone of `conn`.
    fn session_time_zone(conn: &mut crate::db::DbConnection) -> String {
        use diesel::RunQueryDsl;
        #[derive(diesel::QueryableByName)]
        struct Zone {
            #[diesel(sql_type = diesel::sql_types::Text)]
            zone: String,
        }
        let sql = match conn.backend() {
            crate::db::Backend::Mysql => "SELECT @@session.time_zone AS zone",
            _ => "SELECT current_setting('TimeZone') AS zone",
        };
        diesel::sql_query(sql)
            .get_result::<Zone>(conn)
            .expect("session time zone")
            .zone
    }

    /// Every lease and history statement, on a connection whose session is in
    /// `zone`: the database's clock, a claim's lease end, an extension, a
    /// release, and a run's start and end come out in UTC. (replicron's own
    /// sessions are UTC, as diesel sets them; this checks that the statements
    /// do not depend on it: `UTC_TIMESTAMP(3)` into `DATETIME(3)` on MariaDB,
    /// `clock_timestamp() AT TIME ZONE 'UTC'` on PostgreSQL.)
    fn statements_ignore_the_session_zone(db: &TestDb, set_zone: &str, zone: &str) {
        use crate::history::{self, NewRun, RunFinish, RunStatus};
        use crate::lease;
        use diesel::connection::SimpleConnection;
        drop(db.pool(1));
        let mut conn = db.connect();
        conn.batch_execute(set_zone)
            .expect("set the session's time zone");
        assert_eq!(session_time_zone(&mut conn), zone, "the test's premise");
        let near_now = |t: DateTime<Utc>, what: &str| {
            assert!(
                (t - Utc::now()).abs() < TimeDelta::seconds(5),
                "{what} {t} is not now in UTC (session zone {zone})"
            );
        };
        near_now(
            crate::db::clock::database_now(&mut conn).expect("now"),
            "the database's clock",
        );
        lease::ensure_rows(&mut conn, &["zoned"]).expect("rows");
        let held = lease::claim_at_database_now(&mut conn, "zoned", "z", Duration::from_secs(60))
            .expect("claim")
            .won()
            .expect("won");
        near_now(held.instant, "the claimed instant");
        let row = lease::find_lock(&mut conn, "zoned")
            .expect("find")
            .expect("row");
        near_now(
            row.lock_until.and_utc() - TimeDelta::seconds(60),
            "the lease's end minus its length",
        );
        near_now(
            row.locked_at.expect("locked_at").and_utc(),
            "the claim's time",
        );
        assert!(lease::extend(&mut conn, &held, Duration::from_secs(120)).expect("extend"));
        let row = lease::find_lock(&mut conn, "zoned")
            .expect("find")
            .expect("row");
        near_now(
            row.lock_until.and_utc() - TimeDelta::seconds(120),
            "the extended end",
        );
        let id = history::record_run_started(
            &mut conn,
            &NewRun {
                job: "zoned".into(),
                scheduled_at: held.instant,
                attempt: 1,
                instance: "z".into(),
                fence: held.fence,
                once_key: None,
                scope: String::new(),
                lease_row: None,
                trigger: Default::default(),
                params: None,
            },
        )
        .expect("start");
        history::record_run_finished(
            &mut conn,
            id,
            &RunFinish {
                status: RunStatus::Succeeded,
                exit_code: Some(0),
                output: String::new(),
                duration: Duration::from_millis(1500),
                output_file: None,
            },
            true,
        )
        .expect("finish");
        let run = history::latest_run(&mut conn, "zoned")
            .expect("run")
            .expect("row");
        near_now(run.started_at.and_utc(), "the run's start");
        assert_eq!(
            run.finished_at.expect("end") - run.started_at,
            TimeDelta::milliseconds(1500)
        );
        assert!(lease::release(&mut conn, &held, Duration::ZERO).expect("release"));
        assert!(
            !lease::is_held(&mut conn, "zoned").expect("held"),
            "released in UTC terms"
        );
    }

    /// A MariaDB session at UTC+05:30 (a named zone needs the server's zone
    /// tables; an offset shows the same thing).
    #[cfg(feature = "mysql")]
    #[test]
    #[cfg_attr(
        replicron_no_mysql_server,
        ignore = "REPLICRON_TEST_MYSQL_URL is not set"
    )]
    fn a_zoned_session_changes_no_time_mysql() {
        statements_ignore_the_session_zone(&TestDb::mysql(), "SET time_zone = '+05:30'", "+05:30");
    }

    /// A PostgreSQL session in New York.
    #[cfg(feature = "postgres")]
    #[test]
    #[cfg_attr(
        replicron_no_postgres_server,
        ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
    )]
    fn a_zoned_session_changes_no_time_postgres() {
        statements_ignore_the_session_zone(
            &TestDb::postgres(),
            "SET TimeZone = 'America/New_York'",
            "America/New_York",
        );
    }
}

/// After a failure because the server could not be reached, the pool's
/// other idle connections are checked before use: when every server
/// process behind the pool died (a failover, a restart), one statement
/// fails, not one per pooled connection.
#[cfg(any(feature = "mysql", feature = "postgres"))]
mod outage {
    use diesel::RunQueryDsl;
    use diesel::connection::SimpleConnection;

    use crate::testing::TestDb;

    async fn one_failure_after_every_connection_died(db: &TestDb) {
        let pool = db.pool(4);
        // Four connections, each in use once, then idle in the pool.
        let held: Vec<_> = (0..4).map(|_| pool.get().expect("connection")).collect();
        drop(held);
        // Every session on this database but the killer's own dies.
        let mut killer = db.connect();
        match killer.backend() {
            crate::db::Backend::Mysql => {
                #[derive(diesel::QueryableByName)]
                struct Session {
                    #[diesel(sql_type = diesel::sql_types::BigInt)]
                    id: i64,
                }
                let sessions: Vec<Session> = diesel::sql_query(
                    "SELECT CAST(id AS SIGNED) AS id FROM information_schema.PROCESSLIST \
                     WHERE db = DATABASE() AND id <> CONNECTION_ID()",
                )
                .load(&mut killer)
                .expect("sessions");
                assert!(sessions.len() >= 4, "{} sessions", sessions.len());
                for session in sessions {
                    killer
                        .batch_execute(&format!("KILL {}", session.id))
                        .expect("kill");
                }
            }
            _ => killer
                .batch_execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .expect("terminate"),
        }
        let mut failures = 0;
        for _ in 0..8 {
            let answered = pool
                .run_blocking(|conn| {
                    diesel::sql_query("SELECT 1")
                        .execute(conn)
                        .map_err(|e| crate::db::DbError::query("selecting one", e))
                })
                .await;
            if answered.is_err() {
                failures += 1;
            }
        }
        assert_eq!(
            failures, 1,
            "one failure, then fresh or checked connections"
        );
    }

    #[cfg(feature = "mysql")]
    #[tokio::test]
    #[cfg_attr(
        replicron_no_mysql_server,
        ignore = "REPLICRON_TEST_MYSQL_URL is not set"
    )]
    async fn dead_pooled_connections_fail_one_statement_not_each_mysql() {
        one_failure_after_every_connection_died(&TestDb::mysql()).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    #[cfg_attr(
        replicron_no_postgres_server,
        ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
    )]
    async fn dead_pooled_connections_fail_one_statement_not_each_postgres() {
        one_failure_after_every_connection_died(&TestDb::postgres()).await;
    }
}

/// A migration that lost its connection (the server crashed or restarted
/// under it) is the database being unreachable, which a starting replica
/// waits out; one the database refused is not.
#[test]
fn a_migration_that_lost_its_connection_is_unreachable() {
    use super::migrate::MigrateError;
    let migrate = |error: MigrateError| DbError::Migrate {
        url: "mysql://root@127.0.0.1:3306/test".to_string(),
        error,
    };
    let refused = |message: &str| {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::Unknown,
            Box::new(message.to_string()),
        )
    };
    assert!(
        migrate(MigrateError::Lock {
            doing: "taking the migration lock",
            error: refused("Lost connection to server during query"),
        })
        .is_unreachable()
    );
    assert!(
        migrate(MigrateError::Migration(
            "running 2026-11-26-000000_web_sessions: server closed the connection unexpectedly"
                .into()
        ))
        .is_unreachable()
    );
    assert!(
        !migrate(MigrateError::Migration(
            "running 2026-11-26-000000_web_sessions: syntax error at or near \"(\"".into()
        ))
        .is_unreachable()
    );
    assert!(
        !migrate(MigrateError::Held {
            holder: "db-2:4242".to_string()
        })
        .is_unreachable()
    );
}

/// A statement that gave up waiting for a lock may succeed when sent
/// again: the history's queue waits such an error out instead of dropping
/// the write (a run's end) as refused. The messages are the backends' own.
#[test]
fn a_lock_given_up_is_transient_and_a_refusal_is_not() {
    use diesel::result::{DatabaseErrorKind, Error};
    let query = |kind: DatabaseErrorKind, message: &str| {
        DbError::query(
            "recording a run's end",
            Error::DatabaseError(kind, Box::new(message.to_string())),
        )
    };
    for transient in [
        query(DatabaseErrorKind::Unknown, "database is locked"),
        query(
            DatabaseErrorKind::Unknown,
            "Deadlock found when trying to get lock; try restarting transaction",
        ),
        query(
            DatabaseErrorKind::Unknown,
            "Lock wait timeout exceeded; try restarting transaction",
        ),
        query(DatabaseErrorKind::SerializationFailure, "deadlock detected"),
        query(
            DatabaseErrorKind::SerializationFailure,
            "could not serialize access due to concurrent update",
        ),
        query(
            DatabaseErrorKind::ClosedConnection,
            "server closed the connection",
        ),
        DbError::Timeout {
            context: "recording a run's end".to_string(),
        },
    ] {
        assert!(transient.is_transient(), "{transient}");
    }
    for refused in [
        query(DatabaseErrorKind::Unknown, "no such table: replicron_runs"),
        query(
            DatabaseErrorKind::CheckViolation,
            "new row violates check constraint",
        ),
        query(
            DatabaseErrorKind::Unknown,
            "Data too long for column 'output'",
        ),
    ] {
        assert!(!refused.is_transient(), "{refused}");
    }
}

/// A connection the pool could not give names the URL once, though the
/// pool quotes the connection's own error.
#[test]
fn a_connection_the_pool_could_not_give_names_the_url_once() {
    let url = "mysql://root@127.0.0.1:3306/test";
    let refused = DbError::Connect {
        url: url.to_string(),
        message: "Lost connection to server at 'handshake'".to_string(),
    };
    // As r2d2 words its error around the reason it was given.
    let pooled = format!(
        "timed out waiting for connection: {}",
        super::pool::connect_reason(refused)
    );
    let error = DbError::Connect {
        url: url.to_string(),
        message: pooled,
    };
    assert_eq!(
        error.to_string(),
        format!(
            "cannot connect to {url}: timed out waiting for connection: Lost connection to server at 'handshake'"
        )
    );
}

/// A database error printed with its chain of causes (as the command line
/// prints its errors) says each thing once.
#[test]
fn a_database_error_says_its_cause_once() {
    use super::migrate::MigrateError;
    let migrate = DbError::Migrate {
        url: "mysql://root@127.0.0.1:3306/test".into(),
        error: MigrateError::Lock {
            doing: "taking the migration lock",
            error: diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::Unknown,
                Box::new("Lock wait timeout exceeded".to_string()),
            ),
        },
    };
    assert_eq!(
        format!("{:#}", anyhow::Error::new(migrate)),
        "cannot apply migrations to mysql://root@127.0.0.1:3306/test: \
         taking the migration lock: Lock wait timeout exceeded"
    );
    let query = DbError::query("reading the job's lease", diesel::result::Error::NotFound);
    assert_eq!(
        format!("{:#}", anyhow::Error::new(query)),
        "reading the job's lease: Record not found"
    );
}
