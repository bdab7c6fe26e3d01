//! Applying the embedded migrations, safely when every replica of a
//! multi-primary cluster starts at once.
//!
//! Replicas serialize through a lock row of their own, `replicron_migration_lock`,
//! taken with the same conditional UPDATE on database time as a job's lease.
//! An advisory lock (`GET_LOCK`, `pg_advisory_lock`) would not do: on a
//! Galera cluster `GET_LOCK` holds on one node only, while a conflicting
//! UPDATE of one row is certified across all of them. The table is created
//! with `IF NOT EXISTS`, so replicas racing to create it all succeed.
//!
//! Every migration is idempotent as run here, so that a crash between a
//! migration's DDL and its version row cannot wedge the database. On
//! PostgreSQL and SQLite each migration runs in one transaction with its
//! version row (their DDL is transactional), so it is applied whole or not
//! at all. MariaDB/MySQL commit each DDL statement by itself: there a
//! migration runs statement by statement, and a statement whose object
//! already exists (a table, a column, an index) is taken as done by an
//! earlier, interrupted attempt, logged, and the migration finished.

use std::time::{Duration, Instant};

#[cfg(any(feature = "mysql", feature = "sqlite"))]
use diesel::migration::{Migration, MigrationName};
use diesel::prelude::*;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use tracing::{info, warn};

use crate::backoff::Backoff;

use super::DbConnection;
use super::clock::{At, DbNow, DbNowPlus};
use super::schema::replicron_migration_lock::dsl as lock;

#[cfg(feature = "sqlite")]
const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
#[cfg(feature = "mysql")]
const MYSQL_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/mysql");
#[cfg(feature = "postgres")]
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// The SQL of each migration, for the backends whose migrations run
/// statement by statement (diesel's embedded migrations do not expose it).
/// A unit test checks that each list names exactly the folders of its
/// backend.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
macro_rules! up_sql {
    ($backend:literal: $($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/", $backend, "/", $name, "/up.sql")))),*]
    };
}

#[cfg(feature = "mysql")]
const MYSQL_UP: &[(&str, &str)] = up_sql!("mysql":
    "2026-11-21-000000_create_locks_and_runs",
    "2026-11-21-000001_index_running_runs",
    "2026-11-22-000000_day_one",
    "2026-11-23-000000_missed_instants",
    "2026-11-24-000000_pause",
    "2026-11-24-000001_run_on_every",
    "2026-11-24-000002_registry_drift",
    "2026-11-25-000000_claim_nonce_and_pauses",
    "2026-11-26-000000_web_sessions",
    "2026-11-27-000000_run_trigger_and_params",
    "2026-11-27-000001_overlap",
    "2026-11-28-000000_run_parents",
    "2026-11-29-000000_audit",
    "2026-11-30-000000_runs_view",
    "2026-11-30-000002_web_url",
    "2026-12-01-000300_backfill_progress",
    "2026-12-02-000000_planned_runs",
    "2026-12-02-000100_run_reasons",
    "2026-12-02-000200_resource_limits",
    "2026-12-03-000000_output_files",
);

#[cfg(feature = "sqlite")]
const SQLITE_UP: &[(&str, &str)] = up_sql!("sqlite":
    "2026-11-21-000000_create_locks_and_runs",
    "2026-11-21-000001_index_running_runs",
    "2026-11-22-000000_day_one",
    "2026-11-23-000000_missed_instants",
    "2026-11-24-000000_pause",
    "2026-11-24-000001_run_on_every",
    "2026-11-24-000002_registry_drift",
    "2026-11-25-000000_claim_nonce_and_pauses",
    "2026-11-26-000000_web_sessions",
    "2026-11-27-000000_run_trigger_and_params",
    "2026-11-27-000001_overlap",
    "2026-11-28-000000_run_parents",
    "2026-11-29-000000_audit",
    "2026-11-30-000000_runs_view",
    "2026-11-30-000002_web_url",
    "2026-12-01-000300_backfill_progress",
    "2026-12-02-000000_planned_runs",
    "2026-12-02-000100_run_reasons",
    "2026-12-02-000200_resource_limits",
    "2026-12-03-000000_output_files",
);

/// The row of the migration lock.
const LOCK_NAME: &str = "migrations";

/// How long the migration lock is held before another replica may take it
/// (its holder died mid-migration); extended before each migration.
const LOCK_LEASE: Duration = Duration::from_secs(300);

/// How long a replica waits for another to finish migrating.
const LOCK_WAIT: Duration = Duration::from_secs(360);

/// What [`migrate`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Migrated {
    /// Migrations applied now.
    pub applied: usize,
    /// Migrations found partly applied by an earlier attempt, and finished.
    pub healed: usize,
}

/// Why the pending migrations could not be applied (each message holds
/// its cause's, as [`super::DbError`]'s do).
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// A statement on the migration lock's table or row failed.
    #[error("{doing}: {error}")]
    Lock {
        /// What the statement was for.
        doing: &'static str,
        /// The database's error.
        error: diesel::result::Error,
    },
    /// Another replica held the migration lock for too long.
    #[error(
        "{holder} has held the migration lock for over {}s; if it died, the lock ends by itself {}s after it was taken",
        LOCK_WAIT.as_secs(),
        LOCK_LEASE.as_secs()
    )]
    Held {
        /// Who held it, as it named itself.
        holder: String,
    },
    /// The migration lock was taken over while migrations were applied.
    #[error("the migration lock was taken over by another replica")]
    TakenOver,
    /// A migration (or the reading of those applied) failed.
    #[error("{0}")]
    Migration(Box<dyn std::error::Error + Send + Sync>),
}

impl MigrateError {
    /// Whether it says the database could not be reached (it crashed or
    /// restarted under the migration).
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            MigrateError::Lock { error, .. } => super::diesel_unreachable(error),
            MigrateError::Migration(e) => super::says_connection_lost(&e.to_string()),
            MigrateError::Held { .. } | MigrateError::TakenOver => false,
        }
    }
}

/// The statement for `doing` failed with the database's error.
fn lock_error(doing: &'static str) -> impl FnOnce(diesel::result::Error) -> MigrateError {
    move |error| MigrateError::Lock { doing, error }
}

/// Applies the pending migrations on `conn`, holding the cluster-wide
/// migration lock as `holder` (named in other replicas' messages). A
/// database that has every migration needs no lock: a replica's restart
/// is not held back by a lock that another, killed or cut off before it
/// released it, left to run out its lease.
pub(crate) fn migrate(conn: &mut DbConnection, holder: &str) -> Result<Migrated, MigrateError> {
    if check_migrated(conn).is_ok() {
        return Ok(Migrated::default());
    }
    create_lock_table(conn)?;
    acquire(conn, holder)?;
    let result = apply_pending(conn, holder);
    // The lock ends now rather than at its lease, whatever happened.
    let released = diesel::update(lock::replicron_migration_lock)
        .filter(lock::name.eq(LOCK_NAME))
        .filter(lock::locked_by.eq(holder))
        .set(lock::lock_until.eq(DbNow))
        .execute(conn);
    if let Err(e) = released {
        warn!("the migration lock could not be released; it ends by itself: {e}");
    }
    result
}

/// Creates the lock table and its row, if they do not exist.
fn create_lock_table(conn: &mut DbConnection) -> Result<(), MigrateError> {
    let ddl = match conn {
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(_) => {
            "CREATE TABLE IF NOT EXISTS replicron_migration_lock (\
             name TEXT NOT NULL PRIMARY KEY, lock_until TEXT NOT NULL, locked_by TEXT)"
        }
        #[cfg(feature = "mysql")]
        DbConnection::Mysql(_) => {
            "CREATE TABLE IF NOT EXISTS replicron_migration_lock (\
             name VARCHAR(64) NOT NULL PRIMARY KEY, lock_until DATETIME(3) NOT NULL, \
             locked_by VARCHAR(255) NULL) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
        }
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(_) => {
            "CREATE TABLE IF NOT EXISTS replicron_migration_lock (\
             name VARCHAR(64) NOT NULL PRIMARY KEY, lock_until TIMESTAMP(3) NOT NULL, \
             locked_by VARCHAR(255))"
        }
    };
    // On every start but the first the table exists: no DDL then, which a
    // Galera cluster replicates in total order, aborting what other
    // replicas are doing on the table at that moment.
    let exists = lock::replicron_migration_lock
        .select(lock::name)
        .limit(1)
        .load::<String>(conn)
        .is_ok();
    // PostgreSQL can fail two concurrent `CREATE TABLE IF NOT EXISTS` with
    // a duplicate key in its catalog: the table then exists, so try again.
    let mut result = if exists {
        Ok(0)
    } else {
        diesel::sql_query(ddl).execute(conn)
    };
    for _ in 0..5 {
        if result.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        result = diesel::sql_query(ddl).execute(conn);
    }
    result.map_err(lock_error("creating replicron_migration_lock"))?;
    let inserted = diesel::insert_into(lock::replicron_migration_lock)
        .values((
            lock::name.eq(LOCK_NAME),
            lock::lock_until.eq(At::epoch()),
            lock::locked_by.eq(None::<String>),
        ))
        .execute(conn);
    match inserted {
        Err(e) if !crate::db::is_contention(&e) => {
            Err(lock_error("creating the migration lock row")(e))
        }
        _ => Ok(()),
    }
}

/// Takes the migration lock, waiting for another holder up to [`LOCK_WAIT`].
fn acquire(conn: &mut DbConnection, holder: &str) -> Result<(), MigrateError> {
    let started = Instant::now();
    let mut backoff =
        Backoff::new(Duration::from_millis(50), Duration::from_millis(500)).jitter(0.5);
    let mut said = None;
    loop {
        let claimed = diesel::update(lock::replicron_migration_lock)
            .filter(lock::name.eq(LOCK_NAME))
            .filter(lock::lock_until.le(DbNow))
            .set((
                lock::lock_until.eq(DbNowPlus::new(LOCK_LEASE)),
                lock::locked_by.eq(holder),
            ))
            .execute(conn);
        match claimed {
            Ok(1) => return Ok(()),
            Ok(_) => {}
            // Another node certified its claim first: not won.
            Err(e) if crate::db::is_contention(&e) => {}
            Err(e) => return Err(lock_error("taking the migration lock")(e)),
        }
        let other: Option<Option<String>> = lock::replicron_migration_lock
            .select(lock::locked_by)
            .filter(lock::name.eq(LOCK_NAME))
            .first(conn)
            .optional()
            .map_err(lock_error("reading the migration lock"))?;
        let other = other.flatten().unwrap_or_else(|| "?".to_string());
        if started.elapsed() > LOCK_WAIT {
            return Err(MigrateError::Held { holder: other });
        }
        if said.as_deref() != Some(other.as_str()) {
            info!(holder = %other, "another replica is migrating the database; waiting for it");
            said = Some(other);
        }
        std::thread::sleep(backoff.next_pause());
    }
}

/// How often an extension of the migration lock is tried when the cluster
/// aborted it.
const EXTEND_TRIES: u32 = 20;

/// Keeps the lock for another lease, before each migration. On a Galera
/// cluster a write can be aborted with a deadlock error though nothing here
/// is contended: another replica's `CREATE TABLE IF NOT EXISTS` of the lock
/// table, replicated in total order, aborts the transactions on that table
/// going on at that moment. Such an extension is tried again: the lock is
/// still this replica's until a try says it was taken over.
fn extend(conn: &mut DbConnection, holder: &str) -> Result<(), MigrateError> {
    let mut backoff =
        Backoff::new(Duration::from_millis(20), Duration::from_millis(200)).jitter(0.5);
    let mut tries = 1;
    loop {
        let changed = diesel::update(lock::replicron_migration_lock)
            .filter(lock::name.eq(LOCK_NAME))
            .filter(lock::locked_by.eq(holder))
            .set(lock::lock_until.eq(DbNowPlus::new(LOCK_LEASE)))
            .execute(conn);
        match changed {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(MigrateError::TakenOver),
            Err(e) if crate::db::is_contention(&e) && tries < EXTEND_TRIES => {
                tries += 1;
                std::thread::sleep(backoff.next_pause());
            }
            Err(e) => return Err(lock_error("extending the migration lock")(e)),
        }
    }
}

fn apply_pending(conn: &mut DbConnection, holder: &str) -> Result<Migrated, MigrateError> {
    match conn {
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(c) => {
            let pending = c
                .pending_migrations(SQLITE_MIGRATIONS)
                .map_err(MigrateError::Migration)?;
            let mut done = Migrated::default();
            for migration in pending {
                extend(conn, holder)?;
                let healed = run_tolerant(sqlite(conn)?, migration, SQLITE_UP, true)?;
                done.applied += 1;
                done.healed += usize::from(healed);
            }
            Ok(done)
        }
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(c) => {
            let pending = c
                .pending_migrations(POSTGRES_MIGRATIONS)
                .map_err(MigrateError::Migration)?;
            let mut done = Migrated::default();
            for migration in pending {
                extend(conn, holder)?;
                let c = postgres(conn)?;
                c.run_migration(&migration)
                    .map_err(MigrateError::Migration)?;
                done.applied += 1;
            }
            Ok(done)
        }
        #[cfg(feature = "mysql")]
        DbConnection::Mysql(c) => {
            let pending = c
                .pending_migrations(MYSQL_MIGRATIONS)
                .map_err(MigrateError::Migration)?;
            let mut done = Migrated::default();
            for migration in pending {
                extend(conn, holder)?;
                // MariaDB/MySQL commit each DDL statement by itself: a
                // transaction around them would only pretend.
                let healed = run_tolerant(mysql(conn)?, migration, MYSQL_UP, false)?;
                done.applied += 1;
                done.healed += usize::from(healed);
            }
            Ok(done)
        }
    }
}

/// Runs `migration` statement by statement with its SQL from `up`, taking
/// a statement whose work is already there as done; returns whether any
/// was (the migration had been cut short before).
#[cfg(any(feature = "mysql", feature = "sqlite"))]
fn run_tolerant<DB, C>(
    conn: &mut C,
    migration: Box<dyn Migration<DB>>,
    up: &'static [(&'static str, &'static str)],
    transaction: bool,
) -> Result<bool, MigrateError>
where
    DB: diesel::backend::Backend,
    C: MigrationHarness<DB>,
{
    let name = migration.name().to_string();
    let sql = up
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, sql)| *sql)
        .ok_or_else(|| {
            MigrateError::Migration(
                format!("migration {name} has no SQL listed in src/db/migrate.rs").into(),
            )
        })?;
    let tolerant = Tolerant {
        inner: migration,
        up: sql,
        healed: std::cell::Cell::new(false),
        transaction,
    };
    conn.run_migration(&tolerant)
        .map_err(MigrateError::Migration)?;
    Ok(tolerant.healed.get())
}

macro_rules! backend_accessor {
    ($feature:literal, $name:ident, $variant:ident, $connection:ty, $only:meta) => {
        /// The connection itself, once matched to this backend above.
        #[cfg(feature = $feature)]
        fn $name(conn: &mut DbConnection) -> Result<&mut $connection, MigrateError> {
            match conn {
                DbConnection::$variant(c) => Ok(c),
                #[cfg_attr($only, expect(unreachable_patterns, reason = "the only backend"))]
                _ => Err(MigrateError::Migration(
                    "the connection changed backend".into(),
                )),
            }
        }
    };
}

backend_accessor!(
    "sqlite",
    sqlite,
    Sqlite,
    diesel::SqliteConnection,
    not(any(feature = "mysql", feature = "postgres"))
);
backend_accessor!(
    "postgres",
    postgres,
    Postgres,
    diesel::PgConnection,
    not(any(feature = "mysql", feature = "sqlite"))
);
backend_accessor!(
    "mysql",
    mysql,
    Mysql,
    diesel::MysqlConnection,
    not(any(feature = "sqlite", feature = "postgres"))
);

/// A migration run statement by statement, where a statement whose object
/// already exists (or whose object to drop is gone) counts as done: on
/// MariaDB/MySQL, whose DDL commits statement by statement, and on SQLite,
/// which has no `ADD COLUMN IF NOT EXISTS`.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
struct Tolerant<DB: diesel::backend::Backend> {
    inner: Box<dyn Migration<DB>>,
    up: &'static str,
    healed: std::cell::Cell<bool>,
    transaction: bool,
}

#[cfg(any(feature = "mysql", feature = "sqlite"))]
impl<DB: diesel::backend::Backend> Migration<DB> for Tolerant<DB> {
    fn run(
        &self,
        conn: &mut dyn diesel::connection::BoxableConnection<DB>,
    ) -> diesel::migration::Result<()> {
        for statement in statements(self.up) {
            match conn.batch_execute(statement) {
                Ok(()) => {}
                Err(e) if already_done(&e.to_string()) => {
                    warn!(
                        migration = %self.inner.name(),
                        "an earlier attempt left this migration half-applied ({e}); finishing it"
                    );
                    self.healed.set(true);
                }
                Err(e) => return Err(Box::new(e)),
            }
        }
        Ok(())
    }

    fn revert(
        &self,
        conn: &mut dyn diesel::connection::BoxableConnection<DB>,
    ) -> diesel::migration::Result<()> {
        self.inner.revert(conn)
    }

    fn metadata(&self) -> &dyn diesel::migration::MigrationMetadata {
        if self.transaction {
            &InTransaction(true)
        } else {
            &InTransaction(false)
        }
    }

    fn name(&self) -> &dyn MigrationName {
        self.inner.name()
    }
}

/// Whether a migration runs in a transaction.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
struct InTransaction(bool);

#[cfg(any(feature = "mysql", feature = "sqlite"))]
impl diesel::migration::MigrationMetadata for InTransaction {
    fn run_in_transaction(&self) -> bool {
        self.0
    }
}

/// The statements of a migration: each ends with `;` at the end of a line
/// (the rule `migrations/README.md` states), with the comments above it; a
/// piece that is only comments is no statement.
#[cfg_attr(
    not(any(feature = "mysql", feature = "sqlite", test)),
    expect(
        dead_code,
        reason = "PostgreSQL migrations run whole, in a transaction"
    )
)]
fn statements(sql: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in sql.split_inclusive('\n') {
        offset += line.len();
        if line.trim_end().ends_with(';') {
            out.push(&sql[start..offset]);
            start = offset;
        }
    }
    out.push(&sql[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| {
            s.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
        })
        .collect()
}

/// Whether an error says the statement's work is already there: a table,
/// column or index that exists (MariaDB/MySQL 1050, 1060, 1061; SQLite's
/// "already exists", "duplicate column name"), or one to drop that is gone
/// (1091).
#[cfg_attr(
    not(any(feature = "mysql", feature = "sqlite", test)),
    expect(
        dead_code,
        reason = "PostgreSQL migrations run whole, in a transaction"
    )
)]
fn already_done(message: &str) -> bool {
    [
        "already exists",
        "Duplicate column name",
        "duplicate column name",
        "Duplicate key name",
        "check that",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

/// Whether every migration of this build has been applied, without
/// creating anything: the commands that only use the database (`status`,
/// `history`, `trigger`, …) say "not migrated" instead of changing the
/// schema. `Err` says how many are missing.
pub(crate) fn check_migrated(conn: &mut DbConnection) -> Result<(), NotMigrated> {
    #[derive(QueryableByName)]
    struct Version {
        #[diesel(sql_type = diesel::sql_types::Text)]
        version: String,
    }
    let applied: Vec<String> = diesel::sql_query("SELECT version FROM __diesel_schema_migrations")
        .load::<Version>(conn)
        .map(|rows| rows.into_iter().map(|r| r.version).collect())
        .unwrap_or_default();
    let embedded = embedded_versions(conn);
    let missing = embedded.iter().filter(|v| !applied.contains(v)).count();
    if missing == 0 {
        Ok(())
    } else {
        Err(NotMigrated {
            missing,
            total: embedded.len(),
        })
    }
}

/// The database lacks migrations this build has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the database is not migrated ({missing} of {total} migrations missing): run `replicron migrate` \
     (`replicron run` migrates at start too)"
)]
pub(crate) struct NotMigrated {
    /// How many are missing.
    pub missing: usize,
    /// How many this build has.
    pub total: usize,
}

/// The versions of this backend's embedded migrations, as diesel records
/// them.
fn embedded_versions(conn: &DbConnection) -> Vec<String> {
    use diesel::migration::{Migration as _, MigrationSource};
    fn versions<DB: diesel::backend::Backend>(source: &EmbeddedMigrations) -> Vec<String>
    where
        EmbeddedMigrations: MigrationSource<DB>,
    {
        source
            .migrations()
            .map(|all| all.iter().map(|m| m.name().version().to_string()).collect())
            .unwrap_or_default()
    }
    match conn {
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(_) => versions::<diesel::sqlite::Sqlite>(&SQLITE_MIGRATIONS),
        #[cfg(feature = "mysql")]
        DbConnection::Mysql(_) => versions::<diesel::mysql::Mysql>(&MYSQL_MIGRATIONS),
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(_) => versions::<diesel::pg::Pg>(&POSTGRES_MIGRATIONS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(any(feature = "mysql", feature = "sqlite"))]
    use diesel::migration::MigrationSource;

    #[test]
    fn statements_split_at_line_ends_and_skip_comments() {
        let sql = "-- a comment; still a comment\nCREATE TABLE a (\n  x INT\n);\n\n-- only a comment\nCREATE INDEX i ON a (x);\n";
        assert_eq!(
            statements(sql),
            [
                "-- a comment; still a comment\nCREATE TABLE a (\n  x INT\n);",
                "-- only a comment\nCREATE INDEX i ON a (x);"
            ]
        );
    }

    #[test]
    fn already_done_recognises_existing_objects() {
        assert!(already_done("Table 'replicron_locks' already exists"));
        assert!(already_done(
            "Duplicate key name 'replicron_runs_job_status'"
        ));
        assert!(already_done("Duplicate column name 'paused'"));
        assert!(already_done("duplicate column name: created_at"));
        assert!(already_done("Can't DROP INDEX `x`; check that it exists"));
        assert!(!already_done("You have an error in your SQL syntax"));
    }

    /// The folders of `migrations/<backend>`, sorted.
    #[cfg(any(feature = "mysql", feature = "sqlite"))]
    fn folders(backend: &str) -> Vec<String> {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(backend);
        let mut on_disk: Vec<String> = std::fs::read_dir(folder)
            .expect("migrations folder")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        on_disk
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn every_mysql_migration_has_its_statements() {
        let listed: Vec<String> = MYSQL_UP.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            listed,
            folders("mysql"),
            "MYSQL_UP must list every folder of migrations/mysql"
        );
        let embedded: Vec<String> =
            MigrationSource::<diesel::mysql::Mysql>::migrations(&MYSQL_MIGRATIONS)
                .expect("embedded")
                .iter()
                .map(|m| m.name().to_string())
                .collect();
        assert_eq!(listed, embedded);
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn every_sqlite_migration_has_its_statements() {
        let listed: Vec<String> = SQLITE_UP.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            listed,
            folders("sqlite"),
            "SQLITE_UP must list every folder of migrations/sqlite"
        );
        let embedded: Vec<String> =
            MigrationSource::<diesel::sqlite::Sqlite>::migrations(&SQLITE_MIGRATIONS)
                .expect("embedded")
                .iter()
                .map(|m| m.name().to_string())
                .collect();
        assert_eq!(listed, embedded);
    }
}
