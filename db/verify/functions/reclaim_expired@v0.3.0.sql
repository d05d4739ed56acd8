-- Verify pgfence:functions/reclaim_expired on pg

BEGIN;

SELECT 'pgfence.reclaim_expired(integer)'::regprocedure;

ROLLBACK;
