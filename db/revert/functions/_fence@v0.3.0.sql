-- Revert pgfence:functions/_fence from pg

BEGIN;

DROP FUNCTION pgfence._batch_answer(bigint[], uuid[], boolean[]);
DROP FUNCTION pgfence._record_rejections(bigint[], uuid[], boolean[], text);
DROP FUNCTION pgfence._attempt_ended(bigint, uuid, text[]);
DROP FUNCTION pgfence._accepted(bigint[], uuid[], text);
DROP FUNCTION pgfence._raise_fence(bigint, text, text);

COMMIT;
