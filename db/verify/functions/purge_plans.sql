-- Verify pgfence:functions/purge_plans on pg

BEGIN;

SELECT 1 / (proconfig @> '{enable_seqscan=off,jit=off,lock_timeout=5s}')::int
  FROM pg_proc WHERE oid = 'pgfence.purge_finished(integer)'::regprocedure;

ROLLBACK;
