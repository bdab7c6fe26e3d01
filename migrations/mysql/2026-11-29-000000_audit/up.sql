-- Every operator action, one row each: pause, resume, trigger (with its
-- parameters, secret ones redacted), unlock, backfill, exec, a reload that
-- changed jobs and a replica refused for an instance id in use; from the
-- command line, the API or the dashboard. Who acted (a Unix user, the name
-- of a web token, a replica), from where (a host, a client address), when
-- (database time), what (the action, its job and arguments as JSON) and
-- the result (done, or refused and why). Pruned with the history.
-- A dashboard session remembers the name of the token that signed it in.
CREATE TABLE replicron_audit (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    acted_at DATETIME(3) NOT NULL,
    via VARCHAR(16) NOT NULL,
    who VARCHAR(255) NOT NULL,
    sudo_user VARCHAR(255) NULL,
    host VARCHAR(255) NOT NULL,
    address VARCHAR(64) NULL,
    action VARCHAR(32) NOT NULL,
    job VARCHAR(255) NULL,
    args TEXT NULL,
    result VARCHAR(16) NOT NULL,
    detail TEXT NULL,
    KEY replicron_audit_acted_at (acted_at),
    KEY replicron_audit_job (job, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
ALTER TABLE replicron_web_sessions ADD COLUMN token_name VARCHAR(255) NULL;
