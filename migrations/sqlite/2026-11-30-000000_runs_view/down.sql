DROP INDEX IF EXISTS replicron_runs_started_id;
DROP INDEX IF EXISTS replicron_runs_scheduled_id;
DROP INDEX IF EXISTS replicron_runs_job_started;
DROP INDEX IF EXISTS replicron_runs_status_started;
DROP INDEX IF EXISTS replicron_runs_instance_started;
DROP INDEX IF EXISTS replicron_runs_trigger_started;
