-- Where a replica's dashboard is reached by the other replicas ([web]
-- advertise_url), so that a run's live output can be read from the replica
-- that runs it.
ALTER TABLE replicron_instances ADD COLUMN web_url TEXT NULL;
