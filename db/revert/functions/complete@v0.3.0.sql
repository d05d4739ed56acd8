-- Revert pgfence:functions/complete from pg

BEGIN;

DROP FUNCTION pgfence.complete(bigint, uuid, jsonb);
DROP FUNCTION pgfence.complete_many(bigint[], uuid[], jsonb[]);

COMMIT;
