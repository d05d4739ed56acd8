-- Verify pgfence:functions/queue_sets on pg

BEGIN;

SELECT 'pgfence.define_queue_set(text, text[])'::regprocedure,
       'pgfence.drop_queue_set(text)'::regprocedure,
       'pgfence.queue_sets()'::regprocedure,
       'pgfence._queue_set_tag(text)'::regprocedure;
SELECT 1 / has_function_privilege('pgfence_worker', 'pgfence.define_queue_set(text, text[])', 'EXECUTE')::int;
SELECT 1 / has_function_privilege('pgfence_viewer', 'pgfence.queue_sets()', 'EXECUTE')::int;
SELECT 1 / (NOT has_function_privilege('pgfence_producer', 'pgfence.define_queue_set(text, text[])', 'EXECUTE'))::int;

ROLLBACK;
