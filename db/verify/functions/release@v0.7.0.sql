-- Verify pgfence:functions/release on pg

BEGIN;

SELECT 'pgfence.release(bigint, uuid, boolean)'::regprocedure,
       'pgfence.release_many(bigint[], uuid[], boolean)'::regprocedure;

ROLLBACK;
