-- Verify pgfence:functions/_fence on pg

BEGIN;

SELECT 'pgfence._raise_fence(bigint, text, text)'::regprocedure,
       'pgfence._accepted(bigint[], uuid[], text)'::regprocedure,
       'pgfence._attempt_ended(bigint, uuid, text[])'::regprocedure,
       'pgfence._record_rejections(bigint[], uuid[], boolean[], text)'::regprocedure,
       'pgfence._batch_answer(bigint[], uuid[], boolean[])'::regprocedure;

ROLLBACK;
