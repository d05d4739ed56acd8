-- Revert pgfence:functions/_rules from pg

BEGIN;

DROP FUNCTION pgfence._reclaim(integer);
DROP FUNCTION pgfence._recover(bigint[], uuid[], text, boolean);
DROP FUNCTION pgfence._fence_detail(text, uuid, uuid, text, text);
DROP FUNCTION pgfence._recovery_status(text, integer, integer);
DROP FUNCTION pgfence._backoff(integer);

COMMIT;
