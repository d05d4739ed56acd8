-- Verify pgfence:functions/metrics on pg

BEGIN;

SELECT 'pgfence.metrics()'::regprocedure;

ROLLBACK;
