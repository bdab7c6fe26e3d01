-- A random number each claim statement writes with its claim: a claim is
-- won exactly when the row holds this statement's number, never merely
-- because it names this instance and the instant (a process restarted under
-- the same instance id, or a claim asked twice, would look the same). A
-- replica whose claim got no answer reads it back to learn whether the
-- claim committed.
ALTER TABLE replicron_locks ADD COLUMN IF NOT EXISTS claim_nonce BIGINT;
-- Every pause of a job, whole: the lease row holds only the current one, so
-- a pause that was replaced (a pause, resume and pause again, or a pause
-- that expired and another that followed) would otherwise turn its instants
-- into misses. Re-pausing a paused job keeps its paused_at.
CREATE TABLE IF NOT EXISTS replicron_pauses (
    id BIGSERIAL PRIMARY KEY,
    job VARCHAR(64) NOT NULL,
    paused_at TIMESTAMP(3) NOT NULL,
    paused_until TIMESTAMP(3) NOT NULL,
    paused_by VARCHAR(255),
    reason TEXT
);
CREATE INDEX IF NOT EXISTS replicron_pauses_job ON replicron_pauses (job, paused_until);
INSERT INTO replicron_pauses (job, paused_at, paused_until, paused_by, reason)
SELECT name, paused_at, paused_until, paused_by, paused_reason FROM replicron_locks
 WHERE paused_at IS NOT NULL AND paused_until IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM replicron_pauses p WHERE p.job = replicron_locks.name);
