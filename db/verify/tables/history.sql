-- Verify pgfence:tables/history on pg

BEGIN;

SELECT id, queue, purge_at, earlier_attempts FROM pgfence.finished_jobs WHERE false;
SELECT queue, idempotency_key, job_id, purge_at FROM pgfence.held_keys WHERE false;
SELECT partition_width FROM pgfence.history_settings WHERE false;
SELECT lower_bound, upper_bound, name FROM pgfence.history_partitions WHERE false;
SELECT id, status FROM pgfence.all_jobs WHERE false;
SELECT job_id, outcome FROM pgfence.all_attempts WHERE false;
SELECT 1/count(*) FROM pg_catalog.pg_inherits WHERE inhparent = 'pgfence.finished_jobs'::regclass
   AND inhrelid = 'pgfence.finished_jobs_default'::regclass;

ROLLBACK;
