-- The dashboard's sign-in sessions: each belongs to the replica that
-- issued it, holds its own CSRF token, and ends at its expiry or at
-- sign-out (its row is deleted). The id is the SHA-256 of the cookie's
-- random value, so that a reader of this table cannot sign in with it.
CREATE TABLE IF NOT EXISTS replicron_web_sessions (
    id TEXT NOT NULL PRIMARY KEY,
    instance TEXT NOT NULL,
    csrf TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS replicron_web_sessions_expiry ON replicron_web_sessions (expires_at);
