ALTER TABLE replicron_instances DROP COLUMN web_url;
