-- Every operator action, one row each: pause, resume, trigger (with its
-- parameters, secret ones redacted), unlock, backfill, exec, a reload that
-- changed jobs and a replica refused for an instance id in use; from the
-- command line, the API or the dashboard. Who acted (a Unix user, the name
-- of a web token, a replica), from where (a host, a client address), when
-- (database time), what (the action, its job and arguments as JSON) and
-- the result (done, or refused and why). Pruned with the history.
-- A dashboard session remembers the name of the token that signed it in.
CREATE TABLE IF NOT EXISTS replicron_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    acted_at TEXT NOT NULL,
    via TEXT NOT NULL,
    who TEXT NOT NULL,
    sudo_user TEXT,
    host TEXT NOT NULL,
    address TEXT,
    action TEXT NOT NULL,
    job TEXT,
    args TEXT,
    result TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS replicron_audit_acted_at ON replicron_audit (acted_at);
CREATE INDEX IF NOT EXISTS replicron_audit_job ON replicron_audit (job, id);
ALTER TABLE replicron_web_sessions ADD COLUMN token_name TEXT;
