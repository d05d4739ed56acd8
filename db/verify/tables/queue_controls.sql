-- Verify pgfence:tables/queue_controls on pg

BEGIN;

SELECT queue, paused_at, paused_by, max_running, limited_at, limited_by FROM pgfence.queue_controls WHERE false;

ROLLBACK;
