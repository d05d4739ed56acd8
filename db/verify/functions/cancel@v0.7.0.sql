-- Verify pgfence:functions/cancel on pg

BEGIN;

SELECT 'pgfence.cancel(bigint)'::regprocedure;

-- (the rework after @v0.3.0: FOR NO KEY UPDATE, never FOR UPDATE)
SELECT 1 / (prosrc LIKE '%FOR NO KEY UPDATE%' AND prosrc NOT LIKE '%FOR UPDATE%')::int
  FROM pg_proc WHERE oid = 'pgfence.cancel(bigint)'::regprocedure;

-- (the rework after @v0.6.0: what it records carries the job's queue)
SELECT 1 / (prosrc LIKE '%INSERT INTO pgfence.attempts (job_id, queue,%')::int
  FROM pg_proc WHERE oid = 'pgfence.cancel(bigint)'::regprocedure;

ROLLBACK;
