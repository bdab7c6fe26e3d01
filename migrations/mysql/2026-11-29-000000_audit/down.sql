ALTER TABLE replicron_web_sessions DROP COLUMN token_name;
DROP TABLE replicron_audit;
