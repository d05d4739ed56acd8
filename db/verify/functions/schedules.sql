-- Verify pgfence:functions/schedules on pg

BEGIN;

SELECT 'pgfence.schedule(text, text, text, jsonb, text, integer, integer, text, text, text, interval, boolean, text)'::regprocedure,
       'pgfence.unschedule(text)'::regprocedure,
       'pgfence.pause_schedule(text)'::regprocedure,
       'pgfence.resume_schedule(text)'::regprocedure,
       'pgfence.schedules()'::regprocedure,
       'pgfence.fire_schedules(integer)'::regprocedure,
       'pgfence._schedule_next(pgfence.schedules, timestamptz)'::regprocedure,
       'pgfence._schedule_due(pgfence.schedules, timestamptz, integer)'::regprocedure,
       'pgfence._raise_no_schedule(text)'::regprocedure;
SELECT 1 / has_function_privilege('pgfence_operator', 'pgfence.fire_schedules(integer)', 'EXECUTE')::int;
SELECT 1 / (NOT has_function_privilege('pgfence_producer', 'pgfence.schedule(text, text, text, jsonb, text, integer, integer, text, text, text, interval, boolean, text)', 'EXECUTE'))::int;

ROLLBACK;
