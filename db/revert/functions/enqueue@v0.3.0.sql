-- Revert pgfence:functions/enqueue from pg

BEGIN;

DROP FUNCTION pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text);
DROP FUNCTION pgfence._check_idempotency_key(text, text);
DROP FUNCTION pgfence._key_ok(text);
DROP FUNCTION pgfence._check_enqueue_options(text, integer, text);
DROP FUNCTION pgfence._enqueue_options_ok(text, integer, text);

COMMIT;
