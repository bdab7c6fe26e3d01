-- The backfills in progress across the fleet, one row each while it runs
-- (deleted at its end; one left by a process that died is not in progress
-- once its job's backfill lease row, replicron.backfill.JOB, no longer
-- holds its fence): its range, how many instants it has, how many are done
-- and failed, and the instant it is at, so that every replica shows its
-- progress and bounds the fleet's backfilled instants.
CREATE TABLE replicron_backfills (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job VARCHAR(255) NOT NULL,
    fence BIGINT NOT NULL,
    range_from DATETIME(3) NOT NULL,
    range_to DATETIME(3) NOT NULL,
    total BIGINT NOT NULL,
    done BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    current_instant DATETIME(3) NULL,
    started_by VARCHAR(255) NOT NULL,
    started_at DATETIME(3) NOT NULL,
    updated_at DATETIME(3) NOT NULL,
    KEY replicron_backfills_job (job)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
