-- TIMESTAMP(3) holding UTC, always written from clock_timestamp() AT TIME
-- ZONE 'UTC', so no session setting can shift a stored time.
CREATE TABLE IF NOT EXISTS replicron_locks (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    lock_until TIMESTAMP(3) NOT NULL,
    locked_at TIMESTAMP(3),
    locked_by VARCHAR(255),
    last_scheduled_at TIMESTAMP(3),
    fence BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS replicron_runs (
    id BIGSERIAL PRIMARY KEY,
    job VARCHAR(64) NOT NULL,
    scheduled_at TIMESTAMP(3) NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    instance VARCHAR(255) NOT NULL,
    fence BIGINT NOT NULL,
    started_at TIMESTAMP(3) NOT NULL,
    finished_at TIMESTAMP(3),
    status VARCHAR(16) NOT NULL,
    exit_code INTEGER,
    output TEXT NOT NULL DEFAULT '',
    CONSTRAINT replicron_runs_identity UNIQUE (job, scheduled_at, attempt)
);

CREATE INDEX IF NOT EXISTS replicron_runs_started_at ON replicron_runs (started_at);
CREATE INDEX IF NOT EXISTS replicron_runs_job_id ON replicron_runs (job, id);
