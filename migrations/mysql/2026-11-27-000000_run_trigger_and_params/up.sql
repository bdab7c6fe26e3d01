-- What started each run (schedule, catch_up, manual, backfill, retry,
-- dependency), and the parameters it was given, as a JSON object.
ALTER TABLE replicron_runs ADD COLUMN triggered_by VARCHAR(16) NOT NULL DEFAULT 'schedule';
ALTER TABLE replicron_runs ADD COLUMN params TEXT NULL;
