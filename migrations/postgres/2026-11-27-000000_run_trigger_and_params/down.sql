ALTER TABLE replicron_runs DROP COLUMN IF EXISTS params;
ALTER TABLE replicron_runs DROP COLUMN IF EXISTS triggered_by;
