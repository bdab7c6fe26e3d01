ALTER TABLE replicron_runs DROP COLUMN IF EXISTS output_file;
