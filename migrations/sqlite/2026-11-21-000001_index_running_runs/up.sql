-- Finding a job's runs still recorded `running` (to mark them abandoned)
-- must not read the job's whole history.
CREATE INDEX IF NOT EXISTS replicron_runs_job_status ON replicron_runs (job, status);
