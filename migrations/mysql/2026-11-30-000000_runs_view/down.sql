DROP INDEX replicron_runs_started_id ON replicron_runs;
DROP INDEX replicron_runs_scheduled_id ON replicron_runs;
DROP INDEX replicron_runs_job_started ON replicron_runs;
DROP INDEX replicron_runs_status_started ON replicron_runs;
DROP INDEX replicron_runs_instance_started ON replicron_runs;
DROP INDEX replicron_runs_trigger_started ON replicron_runs;
