-- The backfills in progress across the fleet, one row each while it runs
-- (deleted at its end; one left by a process that died is not in progress
-- once its job's backfill lease row, replicron.backfill.JOB, no longer
-- holds its fence): its range, how many instants it has, how many are done
-- and failed, and the instant it is at, so that every replica shows its
-- progress and bounds the fleet's backfilled instants.
CREATE TABLE IF NOT EXISTS replicron_backfills (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    fence BIGINT NOT NULL,
    range_from TEXT NOT NULL,
    range_to TEXT NOT NULL,
    total BIGINT NOT NULL,
    done BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    current_instant TEXT,
    started_by TEXT NOT NULL,
    started_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS replicron_backfills_job ON replicron_backfills (job);
