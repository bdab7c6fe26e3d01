DROP TABLE replicron_planned_runs;
