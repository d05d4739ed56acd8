-- Revert pgfence:functions/enqueue_many from pg

BEGIN;

DROP FUNCTION pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[]);

COMMIT;
