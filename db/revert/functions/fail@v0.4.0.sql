-- Revert pgfence:functions/fail from pg

BEGIN;

DROP FUNCTION pgfence.fail(bigint, uuid, text, interval, boolean);
DROP FUNCTION pgfence._check_retry_in(text, interval);
DROP FUNCTION pgfence._check_error(text, text);
DROP FUNCTION pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[]);
DROP FUNCTION pgfence._fail_status(boolean, integer, integer);

COMMIT;
