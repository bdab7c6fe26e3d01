//! The tables, as diesel sees them. The SQL lives in the per-backend
//! migrations (`migrations/{sqlite,mysql,postgres}/`); this file names the
//! types every backend agrees on. Time columns are `DATETIME(3)` on
//! MariaDB/MySQL, `TIMESTAMP(3)` (UTC) on PostgreSQL and millisecond text on
//! SQLite: all three are diesel's `Timestamp`.

diesel::table! {
    /// One lease row per job (SPEC §4).
    replicron_locks (name) {
        /// Job name.
        name -> Text,
        /// The lease ends at this database time.
        lock_until -> Timestamp,
        /// Database time of the last claim.
        locked_at -> Nullable<Timestamp>,
        /// Instance id of the last claimant.
        locked_by -> Nullable<Text>,
        /// The scheduled instant of the last claim.
        last_scheduled_at -> Nullable<Timestamp>,
        /// +1 on every successful claim.
        fence -> BigInt,
    }
}

diesel::table! {
    /// One row per run attempt (SPEC §5).
    replicron_runs (id) {
        /// Auto-increment key.
        id -> BigInt,
        /// Job name.
        job -> Text,
        /// The instant this run is for.
        scheduled_at -> Timestamp,
        /// 1, or more when retried.
        attempt -> Integer,
        /// Who ran it.
        instance -> Text,
        /// Under which lease.
        fence -> BigInt,
        /// Database time the run started.
        started_at -> Timestamp,
        /// Database time it finished; NULL while running.
        finished_at -> Nullable<Timestamp>,
        /// `running`, `succeeded`, `failed`, …
        status -> Text,
        /// Exit code, NULL when killed by a signal.
        exit_code -> Nullable<Integer>,
        /// The tail of stdout and stderr.
        output -> Text,
    }
}

diesel::table! {
    /// The lock that lets one replica at a time apply migrations. Created by
    /// the migration runner itself (`IF NOT EXISTS`), not by a migration.
    replicron_migration_lock (name) {
        /// Always `migrations`.
        name -> Text,
        /// The lock ends at this database time.
        lock_until -> Timestamp,
        /// Who holds it.
        locked_by -> Nullable<Text>,
    }
}

diesel::allow_tables_to_appear_in_same_query!(replicron_locks, replicron_runs);
