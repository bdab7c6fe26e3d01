ALTER TABLE replicron_runs DROP COLUMN params;
ALTER TABLE replicron_runs DROP COLUMN triggered_by;
