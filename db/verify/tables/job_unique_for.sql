-- Verify pgfence:tables/job_unique_for on pg

BEGIN;

SELECT unique_for FROM pgfence.jobs WHERE false;
SELECT held_until FROM pgfence.held_keys WHERE false;
SELECT 1 / count(*) FROM pg_constraint
 WHERE conrelid = 'pgfence.jobs'::regclass AND conname = 'jobs_unique_for_valid';

ROLLBACK;
