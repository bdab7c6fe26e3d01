-- The one-time runs asked for with `replicron trigger JOB --at TIME` (or the
-- API), one row each until its instant is claimed by a replica or recorded
-- missed: the job, the instant, the parameters given (a JSON object), who
-- asked and when. A job and an instant make one row: asking again for the
-- same instant is refused.
CREATE TABLE replicron_planned_runs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job VARCHAR(255) NOT NULL,
    run_at DATETIME(3) NOT NULL,
    params TEXT NULL,
    requested_by VARCHAR(255) NOT NULL,
    requested_at DATETIME(3) NOT NULL,
    UNIQUE KEY replicron_planned_runs_job_at (job, run_at),
    KEY replicron_planned_runs_at (run_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
