-- Revert pgfence:functions/requeue from pg

BEGIN;

DROP FUNCTION pgfence.requeue(bigint);
DROP FUNCTION pgfence._raise_transition(bigint, text, text, text);

COMMIT;
