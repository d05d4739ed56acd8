-- Revert pgfence:functions/limits from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence.limits();
DELETE FROM pgfence.routine_grants WHERE routine = 'limits';

COMMIT;
