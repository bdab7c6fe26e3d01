ALTER TABLE replicron_web_sessions DROP COLUMN IF EXISTS token_name;
DROP TABLE IF EXISTS replicron_audit;
