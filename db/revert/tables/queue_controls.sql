-- Revert pgfence:tables/queue_controls from pg

BEGIN;

DROP TABLE IF EXISTS pgfence.queue_controls;

COMMIT;
