-- Verify pgfence:functions/heartbeat on pg

BEGIN;

SELECT 'pgfence.heartbeat(bigint, uuid, interval)'::regprocedure,
       'pgfence.heartbeat_many(bigint[], uuid[], interval)'::regprocedure;

-- (the rework after @v0.7.0: no lease past the run timeout)
SELECT 1 / (prosrc LIKE '%j.reserved_at + j.timeout%')::int
  FROM pg_proc WHERE oid = 'pgfence.heartbeat_many(bigint[], uuid[], interval)'::regprocedure;

-- (never a sequential scan of pgfence.jobs, no JIT)
SELECT 1 / (proconfig @> '{enable_seqscan=off,jit=off}')::int
  FROM pg_proc WHERE oid = 'pgfence.heartbeat_many(bigint[], uuid[], interval)'::regprocedure;

ROLLBACK;
