ALTER TABLE replicron_locks DROP COLUMN IF EXISTS paused_reason;
ALTER TABLE replicron_locks DROP COLUMN IF EXISTS paused_by;
ALTER TABLE replicron_locks DROP COLUMN IF EXISTS paused_until;
ALTER TABLE replicron_locks DROP COLUMN IF EXISTS paused_at;
