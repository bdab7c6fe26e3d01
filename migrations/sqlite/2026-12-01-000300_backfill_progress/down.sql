DROP TABLE replicron_backfills;
