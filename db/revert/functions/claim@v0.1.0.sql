-- Revert pgfence:functions/claim from pg

BEGIN;

DROP FUNCTION pgfence.claim(text, text[], interval, integer);
DROP FUNCTION pgfence._queued_queues();

COMMIT;
