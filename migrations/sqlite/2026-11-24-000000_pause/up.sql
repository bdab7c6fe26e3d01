-- Pause and resume (`replicron pause`/`resume`): no instant of a job earlier
-- than paused_until is claimed by the scheduler. resume sets paused_until to
-- the database's now, so the instants of the pause are never run later; the
-- other columns say who paused it, when and why.
ALTER TABLE replicron_locks ADD COLUMN paused_at TEXT;
ALTER TABLE replicron_locks ADD COLUMN paused_until TEXT;
ALTER TABLE replicron_locks ADD COLUMN paused_by TEXT;
ALTER TABLE replicron_locks ADD COLUMN paused_reason TEXT;
