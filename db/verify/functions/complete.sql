-- Verify pgfence:functions/complete on pg

BEGIN;

SELECT 'pgfence.complete(bigint, uuid, jsonb)'::regprocedure,
       'pgfence.complete_many(bigint[], uuid[], jsonb[])'::regprocedure,
       'pgfence._utc_plus(timestamptz, interval)'::regprocedure;
-- The rework after @v0.3.0: results are checked.
SELECT 1 / (prosrc LIKE '%pgfence._check_result(''result'', result)%')::int
  FROM pg_proc WHERE oid = 'pgfence.complete(bigint, uuid, jsonb)'::regprocedure;

-- (the rework after @v0.7.0: refused past the run timeout)
SELECT 1 / (prosrc LIKE '%pgfence._end_timed_out(%')::int
  FROM pg_proc WHERE oid = 'pgfence.complete_many(bigint[], uuid[], jsonb[])'::regprocedure;

SELECT 1 / (prosrc LIKE '%held_until%')::int
  FROM pg_proc WHERE oid = 'pgfence.complete_many(bigint[], uuid[], jsonb[])'::regprocedure;

-- (never a sequential scan of pgfence.jobs, no JIT)
SELECT 1 / (proconfig @> '{enable_seqscan=off,jit=off}')::int
  FROM pg_proc WHERE oid = 'pgfence.complete_many(bigint[], uuid[], jsonb[])'::regprocedure;

ROLLBACK;
