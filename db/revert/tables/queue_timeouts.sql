-- Revert pgfence:tables/queue_timeouts from pg

BEGIN;

DROP TABLE IF EXISTS pgfence.queue_timeouts;

COMMIT;
