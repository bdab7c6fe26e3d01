-- Times are text 'YYYY-MM-DD HH:MM:SS.SSS' in UTC, so that they sort as
-- time; "now" is replicron_now(), the clock of the process that holds the
-- connection, which replicron registers on each connection.
CREATE TABLE IF NOT EXISTS replicron_locks (
    name TEXT NOT NULL PRIMARY KEY,
    lock_until TEXT NOT NULL,
    locked_at TEXT,
    locked_by TEXT,
    last_scheduled_at TEXT,
    fence BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS replicron_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    scheduled_at TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    instance TEXT NOT NULL,
    fence BIGINT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    exit_code INTEGER,
    output TEXT NOT NULL DEFAULT '',
    CONSTRAINT replicron_runs_identity UNIQUE (job, scheduled_at, attempt)
);

CREATE INDEX IF NOT EXISTS replicron_runs_started_at ON replicron_runs (started_at);
CREATE INDEX IF NOT EXISTS replicron_runs_job_id ON replicron_runs (job, id);
