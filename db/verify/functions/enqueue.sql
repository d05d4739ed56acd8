-- Verify pgfence:functions/enqueue on pg

BEGIN;

SELECT 'pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, interval, interval)'::regprocedure,
       'pgfence._check_enqueue_options(text, integer, text)'::regprocedure,
       'pgfence._enqueue_options_ok(text, integer, text)'::regprocedure,
       'pgfence._check_idempotency_key(text, text)'::regprocedure,
       'pgfence._key_ok(text)'::regprocedure,
       'pgfence._unique_for_ok(interval)'::regprocedure,
       'pgfence._check_unique_for(text, interval)'::regprocedure,
       'pgfence._check_unique_for_has_key(interval, boolean)'::regprocedure;
-- The rework after @v0.3.0: the NOTIFY carries the wake-up tag.
SELECT 1 / (prosrc LIKE '%pg_notify(''pgfence_enqueue'', pgfence._wakeup_tag(%')::int
  FROM pg_proc WHERE oid = 'pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, interval, interval)'::regprocedure;
-- The rework after @v0.7.0: the old signature is gone (no overload).
SELECT 1 / (to_regprocedure('pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text)') IS NULL)::int;

ROLLBACK;
