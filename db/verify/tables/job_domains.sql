-- Verify pgfence:tables/job_domains on pg

BEGIN;

-- Each column has its domain, and each domain its validated check.
SELECT 1 / (count(*) = 9)::int FROM pg_attribute a JOIN pg_constraint c ON c.contypid = a.atttypid
 WHERE a.attrelid = 'pgfence.jobs'::regclass AND c.convalidated
   AND (a.attname, a.atttypid) IN (('status', 'pgfence.job_status'::regtype),
                                   ('recovery_policy', 'pgfence.recovery_policy'::regtype),
                                   ('queue', 'pgfence.job_name'::regtype), ('kind', 'pgfence.job_name'::regtype),
                                   ('idempotency_key', 'pgfence.idempotency_key'::regtype),
                                   ('payload', 'pgfence.job_payload'::regtype),
                                   ('attempts', 'pgfence.job_count'::regtype),
                                   ('reclaim_count', 'pgfence.job_count'::regtype),
                                   ('max_attempts', 'pgfence.max_attempts'::regtype));
SELECT 1 / (count(*) = 0)::int FROM pg_constraint
 WHERE conrelid = 'pgfence.jobs'::regclass AND conname IN ('jobs_status_valid', 'jobs_queue_length');
SELECT id, queue, status FROM pgfence.all_jobs WHERE false;

ROLLBACK;
