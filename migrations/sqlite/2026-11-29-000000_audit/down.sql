ALTER TABLE replicron_web_sessions DROP COLUMN token_name;
DROP TABLE IF EXISTS replicron_audit;
