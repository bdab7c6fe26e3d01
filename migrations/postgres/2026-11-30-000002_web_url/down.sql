ALTER TABLE replicron_instances DROP COLUMN IF EXISTS web_url;
