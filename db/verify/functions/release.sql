-- Verify pgfence:functions/release on pg

BEGIN;

SELECT 'pgfence.release(bigint, uuid, boolean)'::regprocedure,
       'pgfence.release_many(bigint[], uuid[], boolean)'::regprocedure;
-- (the rework after @v0.7.0: never a sequential scan, no JIT)
SELECT 1 / (proconfig @> '{enable_seqscan=off,jit=off}')::int
  FROM pg_proc WHERE oid = 'pgfence.release_many(bigint[], uuid[], boolean)'::regprocedure;

ROLLBACK;
