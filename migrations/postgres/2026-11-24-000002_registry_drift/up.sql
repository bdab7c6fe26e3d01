-- What each replica runs and how its clock stands, kept fresh by its
-- heartbeat: one "job=digest" line per job of its loaded job file (so that
-- replicas can tell a job whose definition differs between them), and how
-- far its host's clock is ahead of the database's, in microseconds.
ALTER TABLE replicron_instances ADD COLUMN IF NOT EXISTS job_digests TEXT;
ALTER TABLE replicron_instances ADD COLUMN IF NOT EXISTS clock_offset_us BIGINT;
