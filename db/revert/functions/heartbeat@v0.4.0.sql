-- Revert pgfence:functions/heartbeat from pg

BEGIN;

DROP FUNCTION pgfence.heartbeat(bigint, uuid, interval);
DROP FUNCTION pgfence.heartbeat_many(bigint[], uuid[], interval);

COMMIT;
