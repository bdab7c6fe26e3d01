-- Every operator action, one row each: pause, resume, trigger (with its
-- parameters, secret ones redacted), unlock, backfill, exec, a reload that
-- changed jobs and a replica refused for an instance id in use; from the
-- command line, the API or the dashboard. Who acted (a Unix user, the name
-- of a web token, a replica), from where (a host, a client address), when
-- (database time), what (the action, its job and arguments as JSON) and
-- the result (done, or refused and why). Pruned with the history.
-- A dashboard session remembers the name of the token that signed it in.
CREATE TABLE IF NOT EXISTS replicron_audit (
    id BIGSERIAL PRIMARY KEY,
    acted_at TIMESTAMP(3) NOT NULL,
    via VARCHAR(16) NOT NULL,
    who VARCHAR(255) NOT NULL,
    sudo_user VARCHAR(255),
    host VARCHAR(255) NOT NULL,
    address VARCHAR(64),
    action VARCHAR(32) NOT NULL,
    job VARCHAR(255),
    args TEXT,
    result VARCHAR(16) NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS replicron_audit_acted_at ON replicron_audit (acted_at);
CREATE INDEX IF NOT EXISTS replicron_audit_job ON replicron_audit (job, id);
ALTER TABLE replicron_web_sessions ADD COLUMN IF NOT EXISTS token_name VARCHAR(255);
