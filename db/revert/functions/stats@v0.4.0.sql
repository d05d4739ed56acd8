-- Revert pgfence:functions/stats from pg

BEGIN;

DROP FUNCTION pgfence.stats();

COMMIT;
