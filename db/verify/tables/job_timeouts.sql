-- Verify pgfence:tables/job_timeouts on pg

BEGIN;

SELECT timeout FROM pgfence.jobs WHERE false;
-- A lease within its timeout: its own CHECK, or one of the rules of jobs_row_rules
-- (tables/job_row_rules).
SELECT 1 / count(*) FROM pg_constraint
 WHERE conrelid = 'pgfence.jobs'::regclass AND conname IN ('jobs_lease_within_timeout', 'jobs_row_rules');
-- The column's rule is its domain's, validated.
SELECT 1 / count(*) FROM pg_attribute a JOIN pg_constraint c ON c.contypid = a.atttypid
 WHERE a.attrelid = 'pgfence.jobs'::regclass AND a.attname = 'timeout'
   AND a.atttypid = 'pgfence.run_timeout'::regtype AND c.conname = 'run_timeout_valid' AND c.convalidated;
SELECT 1 / count(*) FROM pg_constraint
 WHERE conrelid = 'pgfence.attempts'::regclass AND conname = 'attempts_outcome_valid'
   AND pg_get_constraintdef(oid) LIKE '%timed_out%';

ROLLBACK;
