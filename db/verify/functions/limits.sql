-- Verify pgfence:functions/limits on pg

BEGIN;

SELECT 1 / (count(*) = 1)::int FROM pgfence.limits() WHERE name = 'max_jobs' AND value = 1000;
SELECT 1 / (count(*) = 1)::int FROM pgfence.limits() WHERE name = 'snoozes_per_job' AND value = 100;

ROLLBACK;
