-- Verify pgfence:functions/_fence on pg

BEGIN;

SELECT 'pgfence._raise_fence(bigint, text, text)'::regprocedure,
       'pgfence._accepted(bigint[], uuid[], text)'::regprocedure,
       'pgfence._attempt_ended(bigint, uuid, text[])'::regprocedure,
       'pgfence._record_rejections(bigint[], uuid[], boolean[], text)'::regprocedure,
       'pgfence._batch_answer(bigint[], uuid[], boolean[])'::regprocedure,
       'pgfence._token_held(bigint, uuid, uuid)'::regprocedure,
       'pgfence._refusal_detail(bigint, uuid, text, uuid, text, text)'::regprocedure,
       'pgfence._record_rejection(bigint, uuid, text, text)'::regprocedure;
-- A made-up token is never recorded: the batch functions ask _token_held first.
SELECT 1 / (pgfence._token_held(-1, '00000000-0000-0000-0000-000000000000', NULL) = false)::int;

-- (the rework after @v0.6.0: what it records carries the job's queue)
SELECT 1 / (prosrc LIKE '%INSERT INTO pgfence.rejections (job_id, queue,%')::int
  FROM pg_proc WHERE oid = 'pgfence._record_rejection(bigint, uuid, text, text)'::regprocedure;

ROLLBACK;
