-- DATETIME(3), never TIMESTAMP: a TIMESTAMP column converts through the
-- session time zone and breaks at DST. Every time is UTC_TIMESTAMP(3).
CREATE TABLE replicron_locks (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    lock_until DATETIME(3) NOT NULL,
    locked_at DATETIME(3) NULL,
    locked_by VARCHAR(255) NULL,
    last_scheduled_at DATETIME(3) NULL,
    fence BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE replicron_runs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job VARCHAR(64) NOT NULL,
    scheduled_at DATETIME(3) NOT NULL,
    attempt INT NOT NULL DEFAULT 1,
    instance VARCHAR(255) NOT NULL,
    fence BIGINT NOT NULL,
    started_at DATETIME(3) NOT NULL,
    finished_at DATETIME(3) NULL,
    status VARCHAR(16) NOT NULL,
    exit_code INT NULL,
    output MEDIUMTEXT NOT NULL,
    UNIQUE KEY replicron_runs_identity (job, scheduled_at, attempt),
    KEY replicron_runs_started_at (started_at),
    KEY replicron_runs_job_id (job, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
