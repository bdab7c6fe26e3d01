DROP TABLE replicron_run_parents;
