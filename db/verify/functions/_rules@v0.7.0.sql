-- Verify pgfence:functions/_rules on pg

BEGIN;

SELECT 'pgfence._reclaim(integer)'::regprocedure,
       'pgfence._recover(bigint[], uuid[], text, boolean)'::regprocedure,
       'pgfence._fence_detail(text, uuid, uuid, text, text)'::regprocedure,
       'pgfence._recovery_status(text, integer, integer)'::regprocedure;
SELECT 1 / (pgfence._backoff(1) = interval '1 second'
            AND pgfence._backoff(3) = interval '4 seconds'
            AND pgfence._backoff(2147483647) = interval '5 minutes')::int;

-- (the rework after @v0.3.0: FOR NO KEY UPDATE, never FOR UPDATE)
SELECT 1 / (prosrc LIKE '%FOR NO KEY UPDATE%' AND prosrc NOT LIKE '%FOR UPDATE%')::int
  FROM pg_proc WHERE oid = 'pgfence._reclaim(integer)'::regprocedure;

-- (the rework after @v0.6.0: what it records carries the job's queue)
SELECT 1 / (prosrc LIKE '%INSERT INTO pgfence.attempts (job_id, queue,%')::int
  FROM pg_proc WHERE oid = 'pgfence._recover(bigint[], uuid[], text, boolean)'::regprocedure;

ROLLBACK;
