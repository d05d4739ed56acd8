-- Verify pgfence:functions/heartbeat on pg

BEGIN;

SELECT 'pgfence.heartbeat(bigint, uuid, interval)'::regprocedure,
       'pgfence.heartbeat_many(bigint[], uuid[], interval)'::regprocedure;

ROLLBACK;
