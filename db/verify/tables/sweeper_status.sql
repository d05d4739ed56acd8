-- Verify pgfence:tables/sweeper_status on pg

BEGIN;

SELECT 1 / count(*) FROM pgfence.sweeper_status;

ROLLBACK;
