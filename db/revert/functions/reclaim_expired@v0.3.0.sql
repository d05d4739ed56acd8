-- Revert pgfence:functions/reclaim_expired from pg

BEGIN;

DROP FUNCTION pgfence.reclaim_expired(integer);

COMMIT;
