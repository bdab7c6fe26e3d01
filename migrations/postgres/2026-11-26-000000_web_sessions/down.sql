DROP TABLE replicron_web_sessions;
