ALTER TABLE replicron_instances DROP COLUMN IF EXISTS resource_limits;
