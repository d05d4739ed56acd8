-- Revert pgfence:functions/schedules from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence.fire_schedules(integer);
DROP FUNCTION IF EXISTS pgfence.schedules();
DROP FUNCTION IF EXISTS pgfence.resume_schedule(text);
DROP FUNCTION IF EXISTS pgfence.pause_schedule(text);
DROP FUNCTION IF EXISTS pgfence._raise_no_schedule(text);
DROP FUNCTION IF EXISTS pgfence.unschedule(text);
DROP FUNCTION IF EXISTS pgfence.schedule(text, text, text, jsonb, text, integer, integer, text, text, text, interval, boolean, text);
DROP FUNCTION IF EXISTS pgfence._schedule_due(pgfence.schedules, timestamptz, integer);
DROP FUNCTION IF EXISTS pgfence._schedule_next(pgfence.schedules, timestamptz);
DELETE FROM pgfence.routine_grants
 WHERE routine IN ('schedule', 'unschedule', 'pause_schedule', 'resume_schedule', 'schedules', 'fire_schedules');

COMMIT;
