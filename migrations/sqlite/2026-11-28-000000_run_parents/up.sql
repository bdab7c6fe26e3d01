-- Which parents' runs started a dependent job's run (a job with `after`):
-- one row per parent (two or more for a fan-in).
CREATE TABLE IF NOT EXISTS replicron_run_parents (
    run_id BIGINT NOT NULL,
    parent_id BIGINT NOT NULL,
    PRIMARY KEY (run_id, parent_id)
);
