-- Verify pgfence:functions/sweep on pg

BEGIN;

SELECT 'pgfence.sweep(bigint, integer)'::regprocedure,
       'pgfence.run_sweeper(interval, timestamptz)'::regprocedure;

ROLLBACK;
