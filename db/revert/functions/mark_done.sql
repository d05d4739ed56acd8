-- Revert pgfence:functions/mark_done from pg

BEGIN;

DROP FUNCTION pgfence.mark_done(bigint, text, jsonb);
DROP FUNCTION pgfence._mark_done(bigint, jsonb);
DELETE FROM pgfence.routine_grants WHERE routine = 'mark_done';

COMMIT;
