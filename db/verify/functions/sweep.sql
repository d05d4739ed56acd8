-- Verify pgfence:functions/sweep on pg (reworked after @v0.7.0)

BEGIN;

SELECT 'pgfence.sweep(bigint, integer)'::regprocedure,
       'pgfence.run_sweeper(interval, timestamptz)'::regprocedure,
       'pgfence.sweep_batch(integer, bigint)'::regprocedure,
       'pgfence.sweeper_begin(interval, timestamptz)'::regprocedure,
       'pgfence.sweeper_step(pgfence.sweeper_state)'::regprocedure,
       'pgfence.note_sweeper_pass(bigint, bigint, text)'::regprocedure,
       'pgfence.sweeper_last_pass()'::regprocedure,
       'pgfence.sweeper_health()'::regprocedure,
       'pgfence.pause_sweeper()'::regprocedure,
       'pgfence.resume_sweeper()'::regprocedure;
-- The procedures pin their search_path and take no advisory lock (the rework after @v0.3.0).
SELECT 1 / (count(*) = 2)::int FROM pg_catalog.pg_proc
 WHERE oid IN ('pgfence.sweep(bigint, integer)'::regprocedure, 'pgfence.run_sweeper(interval, timestamptz)'::regprocedure)
   AND prosrc LIKE '%pg_catalog.set_config(''search_path'', ''pg_catalog, pgfence, pg_temp'', true)%'
   AND prosrc NOT LIKE '%advisory%';
-- Both fire the due schedules (the rework after @v0.7.0).
SELECT 1 / (count(*) = 2)::int FROM pg_catalog.pg_proc
 WHERE oid IN ('pgfence.sweep(bigint, integer)'::regprocedure, 'pgfence.sweeper_step(pgfence.sweeper_state)'::regprocedure)
   AND prosrc LIKE '%pgfence.fire_schedules(100)%';
SELECT 1 / has_function_privilege('pgfence_operator', 'pgfence.pause_sweeper()', 'EXECUTE')::int;
SELECT 1 / (NOT has_function_privilege('pgfence_worker', 'pgfence.pause_sweeper()', 'EXECUTE'))::int;

ROLLBACK;
