-- When a lease row was created: catch-up runs only instants after it, so a
-- job new to the fleet has missed nothing.
ALTER TABLE replicron_locks ADD COLUMN created_at DATETIME(3) NULL;

-- The holder's last confirmation of a run's lease: the best bound for when
-- an abandoned run ended, which is otherwise unknown.
ALTER TABLE replicron_runs ADD COLUMN confirmed_at DATETIME(3) NULL;

-- The KEY of an `exec --once` run.
ALTER TABLE replicron_runs ADD COLUMN once_key VARCHAR(255) NULL;

-- The replicas that run now: one row per instance id, kept fresh by its
-- heartbeat, so that a second process with the same id is refused.
CREATE TABLE replicron_instances (
    id VARCHAR(255) NOT NULL PRIMARY KEY,
    host VARCHAR(255) NOT NULL,
    pid BIGINT NOT NULL,
    version VARCHAR(64) NOT NULL,
    started_at DATETIME(3) NOT NULL,
    last_seen DATETIME(3) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
