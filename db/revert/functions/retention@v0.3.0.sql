-- Revert pgfence:functions/retention from pg

BEGIN;

DROP FUNCTION pgfence.set_retention(text, interval, interval);
DROP FUNCTION pgfence.purge_finished(integer);

COMMIT;
