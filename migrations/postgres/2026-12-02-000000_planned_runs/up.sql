-- The one-time runs asked for with `replicron trigger JOB --at TIME` (or the
-- API), one row each until its instant is claimed by a replica or recorded
-- missed: the job, the instant, the parameters given (a JSON object), who
-- asked and when. A job and an instant make one row: asking again for the
-- same instant is refused.
CREATE TABLE IF NOT EXISTS replicron_planned_runs (
    id BIGSERIAL PRIMARY KEY,
    job VARCHAR(255) NOT NULL,
    run_at TIMESTAMP(3) NOT NULL,
    params TEXT,
    requested_by VARCHAR(255) NOT NULL,
    requested_at TIMESTAMP(3) NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS replicron_planned_runs_job_at ON replicron_planned_runs (job, run_at);
CREATE INDEX IF NOT EXISTS replicron_planned_runs_at ON replicron_planned_runs (run_at);
