-- The runs view (/runs, /api/v1/runs): each filter it takes, followed by
-- the start time and the id it pages by, so that a filtered page newest
-- first is one index range whatever the table's size; and both sorts by
-- time, unfiltered. A job's figures read its runs through (job, started_at).
CREATE INDEX IF NOT EXISTS replicron_runs_started_id ON replicron_runs (started_at, id);
CREATE INDEX IF NOT EXISTS replicron_runs_scheduled_id ON replicron_runs (scheduled_at, id);
CREATE INDEX IF NOT EXISTS replicron_runs_job_started ON replicron_runs (job, started_at, id);
CREATE INDEX IF NOT EXISTS replicron_runs_status_started ON replicron_runs (status, started_at, id);
CREATE INDEX IF NOT EXISTS replicron_runs_instance_started ON replicron_runs (instance, started_at, id);
CREATE INDEX IF NOT EXISTS replicron_runs_trigger_started ON replicron_runs (triggered_by, started_at, id);
