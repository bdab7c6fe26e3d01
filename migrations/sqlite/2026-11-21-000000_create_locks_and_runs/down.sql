DROP TABLE replicron_runs;
DROP TABLE replicron_locks;
