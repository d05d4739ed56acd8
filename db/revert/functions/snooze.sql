-- Revert pgfence:functions/snooze from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence.snooze(bigint, uuid, interval);
DROP FUNCTION IF EXISTS pgfence.snooze_many(bigint[], uuid[], interval[]);
DROP FUNCTION IF EXISTS pgfence._check_snooze_delay(text, interval);
DELETE FROM pgfence.routine_grants WHERE routine IN ('snooze', 'snooze_many');

COMMIT;
