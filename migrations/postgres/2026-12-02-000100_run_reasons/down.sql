DROP TABLE IF EXISTS replicron_run_reasons;
