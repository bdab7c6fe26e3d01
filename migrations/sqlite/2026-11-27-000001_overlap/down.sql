ALTER TABLE replicron_locks DROP COLUMN stop_fence;
ALTER TABLE replicron_locks DROP COLUMN queued_for;
