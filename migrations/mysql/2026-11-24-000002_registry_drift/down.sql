ALTER TABLE replicron_instances DROP COLUMN clock_offset_us;
ALTER TABLE replicron_instances DROP COLUMN job_digests;
