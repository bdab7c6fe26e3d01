-- The backfills in progress across the fleet, one row each while it runs
-- (deleted at its end; one left by a process that died is not in progress
-- once its job's backfill lease row, replicron.backfill.JOB, no longer
-- holds its fence): its range, how many instants it has, how many are done
-- and failed, and the instant it is at, so that every replica shows its
-- progress and bounds the fleet's backfilled instants.
CREATE TABLE IF NOT EXISTS replicron_backfills (
    id BIGSERIAL PRIMARY KEY,
    job VARCHAR(255) NOT NULL,
    fence BIGINT NOT NULL,
    range_from TIMESTAMP(3) NOT NULL,
    range_to TIMESTAMP(3) NOT NULL,
    total BIGINT NOT NULL,
    done BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    current_instant TIMESTAMP(3),
    started_by VARCHAR(255) NOT NULL,
    started_at TIMESTAMP(3) NOT NULL,
    updated_at TIMESTAMP(3) NOT NULL
);
CREATE INDEX IF NOT EXISTS replicron_backfills_job ON replicron_backfills (job);
