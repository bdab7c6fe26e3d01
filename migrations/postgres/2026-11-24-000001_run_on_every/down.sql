ALTER TABLE replicron_runs DROP CONSTRAINT IF EXISTS replicron_runs_identity;
ALTER TABLE replicron_runs ADD CONSTRAINT replicron_runs_identity UNIQUE (job, scheduled_at, attempt);
ALTER TABLE replicron_runs DROP COLUMN IF EXISTS scope;
