-- Revert pgfence:functions/cancel from pg

BEGIN;

DROP FUNCTION pgfence.cancel(bigint);

COMMIT;
