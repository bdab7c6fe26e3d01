DROP INDEX replicron_runs_job_status ON replicron_runs;
