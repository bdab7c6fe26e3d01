ALTER TABLE replicron_locks DROP COLUMN IF EXISTS stop_fence;
ALTER TABLE replicron_locks DROP COLUMN IF EXISTS queued_for;
