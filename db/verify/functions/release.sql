-- Verify pgfence:functions/release on pg

BEGIN;

SELECT 'pgfence.release(bigint, uuid)'::regprocedure,
       'pgfence.release_many(bigint[], uuid[])'::regprocedure;

ROLLBACK;
