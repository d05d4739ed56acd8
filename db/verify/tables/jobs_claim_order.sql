-- Verify pgfence:tables/jobs_claim_order on pg

BEGIN;

-- present and valid (a failed CREATE INDEX CONCURRENTLY leaves an invalid one)
SELECT 1 / (indisvalid AND indisready)::int FROM pg_catalog.pg_index
 WHERE indexrelid = 'pgfence.jobs_claim_order_idx'::regclass;

ROLLBACK;
