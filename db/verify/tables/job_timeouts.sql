-- Verify pgfence:tables/job_timeouts on pg

BEGIN;

SELECT timeout FROM pgfence.jobs WHERE false;
SELECT 1 / count(*) FROM pg_constraint
 WHERE conrelid = 'pgfence.jobs'::regclass AND conname IN ('jobs_timeout_valid', 'jobs_lease_within_timeout')
HAVING count(*) = 2;
SELECT 1 / count(*) FROM pg_constraint
 WHERE conrelid = 'pgfence.attempts'::regclass AND conname = 'attempts_outcome_valid'
   AND pg_get_constraintdef(oid) LIKE '%timed_out%';

ROLLBACK;
