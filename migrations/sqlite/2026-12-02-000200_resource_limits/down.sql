ALTER TABLE replicron_instances DROP COLUMN resource_limits;
