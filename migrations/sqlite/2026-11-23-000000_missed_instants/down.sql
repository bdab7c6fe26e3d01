ALTER TABLE replicron_locks DROP COLUMN missed_checked_until;
