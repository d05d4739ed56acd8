-- Verify pgfence:functions/requeue on pg

BEGIN;

SELECT 'pgfence.requeue(bigint)'::regprocedure,
       'pgfence._raise_transition(bigint, text, text, text)'::regprocedure;
-- The rework after @v0.3.0: the NOTIFY carries the wake-up tag.
SELECT 1 / (prosrc LIKE '%pg_notify(''pgfence_enqueue'', pgfence._wakeup_tag(%')::int
  FROM pg_proc WHERE oid = 'pgfence.requeue(bigint)'::regprocedure;

ROLLBACK;
