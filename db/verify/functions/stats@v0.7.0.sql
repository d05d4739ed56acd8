-- Verify pgfence:functions/stats on pg

BEGIN;

SELECT 'pgfence.stats()'::regprocedure;

ROLLBACK;
