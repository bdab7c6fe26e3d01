-- The dashboard's sign-in sessions: each belongs to the replica that
-- issued it, holds its own CSRF token, and ends at its expiry or at
-- sign-out (its row is deleted). The id is the SHA-256 of the cookie's
-- random value, so that a reader of this table cannot sign in with it.
CREATE TABLE replicron_web_sessions (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    instance VARCHAR(255) NOT NULL,
    csrf VARCHAR(64) NOT NULL,
    created_at DATETIME(3) NOT NULL,
    expires_at DATETIME(3) NOT NULL,
    KEY replicron_web_sessions_expiry (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
