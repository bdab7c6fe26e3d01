ALTER TABLE replicron_runs DROP INDEX replicron_runs_identity;
ALTER TABLE replicron_runs ADD UNIQUE KEY replicron_runs_identity (job, scheduled_at, attempt);
ALTER TABLE replicron_runs DROP COLUMN scope;
