-- Verify pgfence:functions/queue_timeouts on pg

BEGIN;

SELECT 'pgfence.set_queue_timeout(text, interval)'::regprocedure,
       'pgfence.queue_timeouts()'::regprocedure,
       'pgfence._timeout_ok(interval)'::regprocedure,
       'pgfence._check_timeout(text, interval)'::regprocedure,
       'pgfence._timeout_length(interval)'::regprocedure;
SELECT 1 / has_function_privilege('pgfence_operator', 'pgfence.set_queue_timeout(text, interval)', 'EXECUTE')::int;

ROLLBACK;
