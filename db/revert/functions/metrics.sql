-- Revert pgfence:functions/metrics from pg

BEGIN;

DROP FUNCTION pgfence.metrics();
DELETE FROM pgfence.routine_grants WHERE routine = 'metrics';

COMMIT;
