-- Revert pgfence:functions/release from pg

BEGIN;

DROP FUNCTION pgfence.release(bigint, uuid, boolean);
DROP FUNCTION pgfence.release_many(bigint[], uuid[], boolean);

COMMIT;
