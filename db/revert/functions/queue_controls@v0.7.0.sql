-- Revert pgfence:functions/queue_controls from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence._claim_controlled(text[], integer, timestamptz);
DROP FUNCTION IF EXISTS pgfence.queue_limits();
DROP FUNCTION IF EXISTS pgfence.set_queue_limit(text, integer);
DROP FUNCTION IF EXISTS pgfence.resume_queue(text);
DROP FUNCTION IF EXISTS pgfence.pause_queue(text);
DELETE FROM pgfence.routine_grants
 WHERE routine IN ('pause_queue', 'resume_queue', 'set_queue_limit', 'queue_limits');

COMMIT;
