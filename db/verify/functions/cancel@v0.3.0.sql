-- Verify pgfence:functions/cancel on pg

BEGIN;

SELECT 'pgfence.cancel(bigint)'::regprocedure;

ROLLBACK;
