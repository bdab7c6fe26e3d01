DROP INDEX replicron_runs_job_status;
