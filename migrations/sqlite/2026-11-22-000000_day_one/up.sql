-- When a lease row was created: catch-up runs only instants after it, so a
-- job new to the fleet has missed nothing.
ALTER TABLE replicron_locks ADD COLUMN created_at TEXT;

-- The holder's last confirmation of a run's lease: the best bound for when
-- an abandoned run ended, which is otherwise unknown.
ALTER TABLE replicron_runs ADD COLUMN confirmed_at TEXT;

-- The KEY of an `exec --once` run.
ALTER TABLE replicron_runs ADD COLUMN once_key TEXT;

-- The replicas that run now: one row per instance id, kept fresh by its
-- heartbeat, so that a second process with the same id is refused.
CREATE TABLE IF NOT EXISTS replicron_instances (
    id TEXT NOT NULL PRIMARY KEY,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    version TEXT NOT NULL,
    started_at TEXT NOT NULL,
    last_seen TEXT NOT NULL
);
