-- Verify pgfence:functions/fail on pg

BEGIN;

SELECT 'pgfence.fail(bigint, uuid, text, interval, boolean)'::regprocedure,
       'pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[])'::regprocedure,
       'pgfence._check_error(text, text)'::regprocedure,
       'pgfence._check_retry_in(text, interval)'::regprocedure,
       'pgfence._fail_status(boolean, integer, integer)'::regprocedure,
       'pgfence._check_fail_inputs(integer, text[], interval[], boolean[])'::regprocedure;

-- (the rework after @v0.6.0: what it records carries the job's queue)
SELECT 1 / (prosrc LIKE '%INSERT INTO pgfence.attempts (job_id, queue,%')::int
  FROM pg_proc WHERE oid = 'pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[])'::regprocedure;

-- (the rework after @v0.7.0: an array not given shows as NULL in the lengths message)
SELECT 1 / (prosrc LIKE '%coalesce(cardinality(permanents)::text, ''NULL'')%')::int
  FROM pg_proc WHERE oid = 'pgfence._check_fail_inputs(integer, text[], interval[], boolean[])'::regprocedure;

-- (never a sequential scan of pgfence.jobs, no JIT)
SELECT 1 / (proconfig @> '{enable_seqscan=off,jit=off}')::int
  FROM pg_proc WHERE oid = 'pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[])'::regprocedure;

ROLLBACK;
