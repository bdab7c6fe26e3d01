ALTER TABLE replicron_locks DROP COLUMN IF EXISTS missed_checked_until;
