-- The file a run's whole output was kept in, on the replica that ran it
-- (`output_store = "files"`); NULL for a run that kept none.
ALTER TABLE replicron_runs ADD COLUMN output_file TEXT;
