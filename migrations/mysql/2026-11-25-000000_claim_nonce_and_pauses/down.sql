DROP TABLE replicron_pauses;
ALTER TABLE replicron_locks DROP COLUMN claim_nonce;
