-- run_on = "every": each replica records the same instant of an `every` job
-- under its own scope (its instance id). A job run once across the fleet has
-- the empty scope, so each of its instants still has one row per attempt.
-- SQLite cannot change a table's constraint: the table is rebuilt, within
-- the migration's transaction.
CREATE TABLE replicron_runs_rebuilt (
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
    confirmed_at TEXT,
    once_key TEXT,
    scope TEXT NOT NULL DEFAULT '',
    CONSTRAINT replicron_runs_identity UNIQUE (job, scheduled_at, attempt, scope)
);

INSERT INTO replicron_runs_rebuilt
    (id, job, scheduled_at, attempt, instance, fence, started_at, finished_at, status, exit_code, output, confirmed_at, once_key)
SELECT id, job, scheduled_at, attempt, instance, fence, started_at, finished_at, status, exit_code, output, confirmed_at, once_key
FROM replicron_runs;

DROP TABLE replicron_runs;

ALTER TABLE replicron_runs_rebuilt RENAME TO replicron_runs;

CREATE INDEX IF NOT EXISTS replicron_runs_started_at ON replicron_runs (started_at);
CREATE INDEX IF NOT EXISTS replicron_runs_job_id ON replicron_runs (job, id);
CREATE INDEX IF NOT EXISTS replicron_runs_job_status ON replicron_runs (job, status);
