-- Verify pgfence:functions/snooze on pg

BEGIN;

SELECT 'pgfence.snooze(bigint, uuid, interval)'::regprocedure,
       'pgfence.snooze_many(bigint[], uuid[], interval[])'::regprocedure,
       'pgfence._check_snooze_delay(text, interval)'::regprocedure;

-- (never a sequential scan of pgfence.jobs, no JIT)
SELECT 1 / (proconfig @> '{enable_seqscan=off,jit=off}')::int
  FROM pg_proc WHERE oid = 'pgfence.snooze_many(bigint[], uuid[], interval[])'::regprocedure;

ROLLBACK;
