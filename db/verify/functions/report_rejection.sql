-- Verify pgfence:functions/report_rejection on pg

BEGIN;

SELECT 'pgfence.report_rejection(bigint, uuid, text)'::regprocedure;
-- The rework after @v0.3.0: only tokens that held an attempt of the job.
SELECT 1 / (prosrc LIKE '%pgfence._token_held(job_id, attempt_token, j.attempt_token)%')::int
  FROM pg_proc WHERE oid = 'pgfence.report_rejection(bigint, uuid, text)'::regprocedure;

-- The rework after @v0.7.0: the operation snooze.
SELECT 1 / (prosrc LIKE '%''snooze''%')::int
  FROM pg_proc WHERE oid = 'pgfence.report_rejection(bigint, uuid, text)'::regprocedure;

-- (no sequential scan, no JIT: the plans of _record_rejection are shared with the batches)
SELECT 1 / (proconfig @> '{enable_seqscan=off,jit=off}')::int
  FROM pg_proc WHERE oid = 'pgfence.report_rejection(bigint, uuid, text)'::regprocedure;

ROLLBACK;
