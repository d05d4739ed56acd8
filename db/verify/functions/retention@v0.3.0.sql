-- Verify pgfence:functions/retention on pg

BEGIN;

SELECT 'pgfence.purge_finished(integer)'::regprocedure,
       'pgfence.set_retention(text, interval, interval)'::regprocedure;

ROLLBACK;
