-- overlap = "queue": the instant that waits for the job's running run
-- (the latest claimed instant is at least this one once it ran or lost).
-- overlap = "replace": the fence of the run asked to stop; its lease can
-- no longer be extended.
ALTER TABLE replicron_locks ADD COLUMN queued_for TEXT;
ALTER TABLE replicron_locks ADD COLUMN stop_fence BIGINT;
