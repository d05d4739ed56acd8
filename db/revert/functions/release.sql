-- Revert pgfence:functions/release from pg

BEGIN;

DROP FUNCTION pgfence.release(bigint, uuid);
DROP FUNCTION pgfence.release_many(bigint[], uuid[]);

COMMIT;
