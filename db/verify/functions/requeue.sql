-- Verify pgfence:functions/requeue on pg

BEGIN;

SELECT 'pgfence.requeue(bigint, text)'::regprocedure, 'pgfence._requeue(bigint)'::regprocedure,
       'pgfence._requeue_row(bigint, timestamptz)'::regprocedure,
       'pgfence._raise_transition(bigint, text, text, text)'::regprocedure;
SELECT 1 / (prosrc LIKE '%pg_notify(''pgfence_enqueue'', pgfence._wakeup_tag(%')::int
  FROM pg_proc WHERE oid = 'pgfence._requeue(bigint)'::regprocedure;
SELECT 1 / (prosrc LIKE '%IF j.idempotency_key IS NULL THEN%')::int  -- (no subtransaction without a key)
  FROM pg_proc WHERE oid = 'pgfence._requeue(bigint)'::regprocedure;
SELECT 1 / (prosrc LIKE '%pgfence._audit(%')::int FROM pg_proc WHERE oid = 'pgfence.requeue(bigint, text)'::regprocedure;
SELECT 1 / (count(*) = 0)::int FROM pg_proc WHERE oid = to_regprocedure('pgfence.requeue(bigint)');

ROLLBACK;
