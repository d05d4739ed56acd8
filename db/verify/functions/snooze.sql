-- Verify pgfence:functions/snooze on pg

BEGIN;

SELECT 'pgfence.snooze(bigint, uuid, interval)'::regprocedure,
       'pgfence.snooze_many(bigint[], uuid[], interval[])'::regprocedure,
       'pgfence._check_snooze_delay(text, interval)'::regprocedure;

ROLLBACK;
