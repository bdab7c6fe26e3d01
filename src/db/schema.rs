//! The tables, as diesel sees them. The SQL lives in the per-backend
//! migrations (`migrations/{sqlite,mysql,postgres}/`); this file names the
//! types every backend agrees on. Time columns are `DATETIME(3)` on
//! MariaDB/MySQL, `TIMESTAMP(3)` (UTC) on PostgreSQL and millisecond text on
//! SQLite: all three are diesel's `Timestamp`.

diesel::table! {
    /// One lease row per job.
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
        /// Database time the row was created (NULL for rows older than
        /// this column).
        created_at -> Nullable<Timestamp>,
        /// Every instant up to this database time has been checked for a
        /// miss (NULL: not yet).
        missed_checked_until -> Nullable<Timestamp>,
        /// Database time the job was last paused.
        paused_at -> Nullable<Timestamp>,
        /// No instant earlier than this is claimed by the scheduler (the
        /// end of a pause; far in the future while paused without end).
        paused_until -> Nullable<Timestamp>,
        /// Who paused it (user and host of the `pause` command).
        paused_by -> Nullable<Text>,
        /// Why, as given to `pause --reason`.
        paused_reason -> Nullable<Text>,
        /// The number the last claim statement wrote: a claim is won when
        /// the row holds its own.
        claim_nonce -> Nullable<BigInt>,
        /// `overlap = "queue"`: the instant waiting for the running run;
        /// it waits while it is later than `last_scheduled_at`.
        queued_for -> Nullable<Timestamp>,
        /// `overlap = "replace"`: the fence of the run asked to stop; a
        /// lease of this fence can no longer be extended.
        stop_fence -> Nullable<BigInt>,
    }
}

diesel::table! {
    /// Every pause of a job, the current one included.
    replicron_pauses (id) {
        /// Auto-increment key.
        id -> BigInt,
        /// The job.
        job -> Text,
        /// Database time the pause began.
        paused_at -> Timestamp,
        /// Its instants end here (far in the future while paused without
        /// end; the resume's time once resumed).
        paused_until -> Timestamp,
        /// Who paused it.
        paused_by -> Nullable<Text>,
        /// Why.
        reason -> Nullable<Text>,
    }
}

diesel::table! {
    /// One row per run attempt.
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
        /// The holder's last confirmation of the run's lease.
        confirmed_at -> Nullable<Timestamp>,
        /// The KEY of an `exec --once` run; a backfill's `backfill FROM..TO`.
        once_key -> Nullable<Text>,
        /// Whose row this is for the instant: empty for a job run once
        /// across the fleet, the instance id for a `run_on = "every"` job.
        scope -> Text,
        /// What started it: `schedule`, `catch_up`, `manual`, `backfill`,
        /// `retry` or `dependency`.
        triggered_by -> Text,
        /// The parameters it was given, as a JSON object; NULL for none.
        params -> Nullable<Text>,
        /// The file its whole output was kept in, on its replica
        /// (`output_store = "files"`); NULL for none.
        output_file -> Nullable<Text>,
    }
}

diesel::table! {
    /// Which parents' runs started a dependent job's run (`after`).
    replicron_run_parents (run_id, parent_id) {
        /// The dependent job's run.
        run_id -> BigInt,
        /// A parent's run whose end started it.
        parent_id -> BigInt,
    }
}

diesel::table! {
    /// Why an operator started a run (`trigger` or `backfill --reason`,
    /// the API's and the dashboard's `reason`): one row per such run.
    replicron_run_reasons (run_id) {
        /// The run.
        run_id -> BigInt,
        /// What the operator said (at most 500 characters, no control
        /// character).
        reason -> Text,
    }
}

diesel::table! {
    /// The replicas running now, kept fresh by their heartbeats.
    replicron_instances (id) {
        /// Instance id.
        id -> Text,
        /// Host name.
        host -> Text,
        /// Process id on that host.
        pid -> BigInt,
        /// replicron's version.
        version -> Text,
        /// Database time it started.
        started_at -> Timestamp,
        /// Database time of its last heartbeat.
        last_seen -> Timestamp,
        /// One `job=digest` line per job it loaded.
        job_digests -> Nullable<Text>,
        /// How far its host's clock is ahead of the database's (µs).
        clock_offset_us -> Nullable<BigInt>,
        /// Where the other replicas reach its dashboard (`[web]
        /// advertise_url`); NULL when it serves none.
        web_url -> Nullable<Text>,
        /// How it holds its runs to their resource limits: `cgroup v2` or
        /// `rlimits`; NULL when it does not say.
        resource_limits -> Nullable<Text>,
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

diesel::table! {
    /// The dashboard's sign-in sessions, each its issuing replica's.
    replicron_web_sessions (id) {
        /// Hex SHA-256 of the cookie's random value.
        id -> Text,
        /// The replica that issued it, the only one that accepts it.
        instance -> Text,
        /// The session's CSRF token.
        csrf -> Text,
        /// Database time it was issued.
        created_at -> Timestamp,
        /// Database time it ends.
        expires_at -> Timestamp,
        /// The name of the token it was signed in with (NULL for a
        /// session older than the names).
        token_name -> Nullable<Text>,
    }
}

diesel::table! {
    /// Every operator action, done or refused.
    replicron_audit (id) {
        /// Auto-increment key.
        id -> BigInt,
        /// Database time of the action.
        acted_at -> Timestamp,
        /// `cli`, `api`, `dashboard` or `daemon`.
        via -> Text,
        /// The Unix user (command line), the token's name (API,
        /// dashboard), or the daemon's Unix user.
        who -> Text,
        /// `SUDO_USER` of a command run through sudo.
        sudo_user -> Nullable<Text>,
        /// The command's host, or the replica that served the request.
        host -> Text,
        /// The client's address (API, dashboard).
        address -> Nullable<Text>,
        /// `pause`, `resume`, `trigger`, `unlock`, `backfill`, `exec`,
        /// `reload` or `refuse_replica`.
        action -> Text,
        /// The job (or `exec` lock, or instance id) acted on.
        job -> Nullable<Text>,
        /// The action's arguments, a JSON object, secrets redacted.
        args -> Nullable<Text>,
        /// `done` or `refused`.
        result -> Text,
        /// What was done, or why it was refused.
        detail -> Nullable<Text>,
    }
}

diesel::table! {
    /// The backfills in progress, one row each (deleted at its end).
    replicron_backfills (id) {
        /// Auto-increment key: the backfill's id.
        id -> BigInt,
        /// Its job.
        job -> Text,
        /// The fence of its job's backfill lease row
        /// (`replicron.backfill.JOB`) while it is in progress.
        fence -> BigInt,
        /// Its range's start.
        range_from -> Timestamp,
        /// Its range's end, not included.
        range_to -> Timestamp,
        /// Its instants.
        total -> BigInt,
        /// The instants it is through (run, or skipped as succeeded).
        done -> BigInt,
        /// Of those, the ones whose run did not succeed.
        failed -> BigInt,
        /// The instant it runs now, if one.
        current_instant -> Nullable<Timestamp>,
        /// The process that runs it.
        started_by -> Text,
        /// Database time it began.
        started_at -> Timestamp,
        /// Database time of its last progress.
        updated_at -> Timestamp,
    }
}

diesel::table! {
    /// The one-time runs asked for (`trigger --at`), one row each until
    /// its instant is claimed or recorded missed.
    replicron_planned_runs (id) {
        /// Auto-increment key.
        id -> BigInt,
        /// Its job.
        job -> Text,
        /// Its instant.
        run_at -> Timestamp,
        /// The parameters given, as a JSON object; NULL for none.
        params -> Nullable<Text>,
        /// Who asked (user and host, or the API's token name).
        requested_by -> Text,
        /// Database time it was asked.
        requested_at -> Timestamp,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    replicron_locks,
    replicron_runs,
    replicron_instances,
    replicron_pauses,
    replicron_run_parents,
    replicron_run_reasons
);
