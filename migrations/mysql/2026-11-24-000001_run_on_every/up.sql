-- run_on = "every": each replica records the same instant of an `every` job
-- under its own scope (its instance id). A job run once across the fleet has
-- the empty scope, so each of its instants still has one row per attempt.
ALTER TABLE replicron_runs ADD COLUMN scope VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE replicron_runs DROP INDEX replicron_runs_identity;
ALTER TABLE replicron_runs ADD UNIQUE KEY replicron_runs_identity (job, scheduled_at, attempt, scope);
