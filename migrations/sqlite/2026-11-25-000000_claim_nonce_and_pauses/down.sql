DROP TABLE IF EXISTS replicron_pauses;
ALTER TABLE replicron_locks DROP COLUMN claim_nonce;
