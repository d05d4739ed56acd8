-- Verify pgfence:functions/sweep on pg

BEGIN;

SELECT 'pgfence.sweep(bigint, integer)'::regprocedure,
       'pgfence.run_sweeper(interval, timestamptz)'::regprocedure,
       'pgfence.sweeper_last_pass()'::regprocedure,
       'pgfence.note_sweeper_pass(bigint, bigint, text)'::regprocedure;
SELECT 1 / has_function_privilege('pgfence_operator', 'pgfence.note_sweeper_pass(bigint, bigint, text)', 'EXECUTE')::int;

ROLLBACK;
