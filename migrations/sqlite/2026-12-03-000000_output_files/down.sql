ALTER TABLE replicron_runs DROP COLUMN output_file;
