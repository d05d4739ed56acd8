-- Verify pgfence:tables/queue_timeouts on pg

BEGIN;

SELECT queue, timeout, set_at, set_by FROM pgfence.queue_timeouts WHERE false;

ROLLBACK;
