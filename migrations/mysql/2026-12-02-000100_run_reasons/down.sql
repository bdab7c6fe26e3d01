DROP TABLE replicron_run_reasons;
