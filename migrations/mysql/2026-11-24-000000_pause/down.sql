ALTER TABLE replicron_locks DROP COLUMN paused_reason;
ALTER TABLE replicron_locks DROP COLUMN paused_by;
ALTER TABLE replicron_locks DROP COLUMN paused_until;
ALTER TABLE replicron_locks DROP COLUMN paused_at;
