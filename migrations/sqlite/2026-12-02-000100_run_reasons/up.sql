-- Why an operator started a run (trigger or backfill --reason, the API's
-- and the dashboard's reason): one row per such run. A table of its own:
-- replicron_runs has the 16 columns diesel's tables take in this build.
CREATE TABLE IF NOT EXISTS replicron_run_reasons (
    run_id BIGINT NOT NULL PRIMARY KEY,
    reason TEXT NOT NULL
);
