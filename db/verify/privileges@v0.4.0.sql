-- Verify pgfence:privileges on pg

BEGIN;

-- No pgfence routine is executable by PUBLIC.
SELECT 1 / (count(*) = 0)::int FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'pgfence'::regnamespace
   AND has_function_privilege('public', p.oid, 'EXECUTE');
-- Every SECURITY DEFINER routine pins search_path.
SELECT 1 / (count(*) = 0)::int FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'pgfence'::regnamespace AND p.prosecdef
   AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%');
-- Row-level security is on.
SELECT 1 / relrowsecurity::int FROM pg_catalog.pg_class WHERE oid = 'pgfence.jobs'::regclass;

ROLLBACK;
