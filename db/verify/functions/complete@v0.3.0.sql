-- Verify pgfence:functions/complete on pg

BEGIN;

SELECT 'pgfence.complete(bigint, uuid, jsonb)'::regprocedure,
       'pgfence.complete_many(bigint[], uuid[], jsonb[])'::regprocedure;

ROLLBACK;
