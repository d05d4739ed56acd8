-- Revert pgfence:tables/queue_sets from pg

BEGIN;

DROP TABLE IF EXISTS pgfence.queue_sets;

COMMIT;
