-- Verify pgfence:functions/enqueue on pg

BEGIN;

SELECT 'pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text)'::regprocedure,
       'pgfence._check_enqueue_options(text, integer, text)'::regprocedure,
       'pgfence._enqueue_options_ok(text, integer, text)'::regprocedure,
       'pgfence._check_idempotency_key(text, text)'::regprocedure,
       'pgfence._key_ok(text)'::regprocedure;

ROLLBACK;
