ALTER TABLE replicron_instances DROP COLUMN IF EXISTS clock_offset_us;
ALTER TABLE replicron_instances DROP COLUMN IF EXISTS job_digests;
