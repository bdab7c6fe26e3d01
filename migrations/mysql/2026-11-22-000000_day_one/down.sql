DROP TABLE replicron_instances;
ALTER TABLE replicron_runs DROP COLUMN once_key;
ALTER TABLE replicron_runs DROP COLUMN confirmed_at;
ALTER TABLE replicron_locks DROP COLUMN created_at;
