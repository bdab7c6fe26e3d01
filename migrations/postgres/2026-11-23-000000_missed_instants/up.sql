-- How far the fleet-wide check for missed instants has looked at a job:
-- every instant up to this time (database time) has been checked once.
-- Missed instants are history rows with status 'missed' and attempt 0, so
-- that a catch-up run of the same instant (attempt 1) can still be recorded.
ALTER TABLE replicron_locks ADD COLUMN IF NOT EXISTS missed_checked_until TIMESTAMP(3);
