-- Verify pgfence:tables/jobs_no_truncate on pg

BEGIN;

SELECT 1 / (count(*) = 1)::int FROM pg_class
 WHERE oid = 'pgfence.jobs'::regclass AND 'vacuum_truncate=false' = ANY (reloptions);

ROLLBACK;
