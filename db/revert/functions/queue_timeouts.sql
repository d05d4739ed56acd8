-- Revert pgfence:functions/queue_timeouts from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence.queue_timeouts();
DROP FUNCTION IF EXISTS pgfence.set_queue_timeout(text, interval);
DROP FUNCTION IF EXISTS pgfence._timeout_length(interval);
DROP FUNCTION IF EXISTS pgfence._check_timeout(text, interval);
DROP FUNCTION IF EXISTS pgfence._timeout_ok(interval);
DELETE FROM pgfence.routine_grants WHERE routine IN ('set_queue_timeout', 'queue_timeouts');

COMMIT;
