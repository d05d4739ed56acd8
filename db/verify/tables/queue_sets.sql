-- Verify pgfence:tables/queue_sets on pg

BEGIN;

SELECT queue_set, members, queue_count, defined_at, defined_by FROM pgfence.queue_sets WHERE false;

ROLLBACK;
