-- Verify pgfence:tables/job_unique_for on pg

BEGIN;

SELECT unique_for FROM pgfence.jobs WHERE false;
SELECT held_until FROM pgfence.held_keys WHERE false;
-- The column's rule is its domain's, validated.
SELECT 1 / count(*) FROM pg_attribute a JOIN pg_constraint c ON c.contypid = a.atttypid
 WHERE a.attrelid = 'pgfence.jobs'::regclass AND a.attname = 'unique_for'
   AND a.atttypid = 'pgfence.unique_for_period'::regtype AND c.conname = 'unique_for_period_valid' AND c.convalidated;

ROLLBACK;
