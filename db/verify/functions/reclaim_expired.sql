-- Verify pgfence:functions/reclaim_expired on pg

BEGIN;

SELECT 'pgfence.reclaim_expired(integer)'::regprocedure;
SELECT 1 / ('jit=off' = ANY (proconfig))::int FROM pg_proc WHERE oid = 'pgfence.reclaim_expired(integer)'::regprocedure;

ROLLBACK;
