-- Verify pgfence:roles on pg

BEGIN;

SELECT 1 / (count(*) = 4)::int FROM pg_catalog.pg_roles
 WHERE rolname IN ('pgfence_owner', 'pgfence_producer', 'pgfence_worker', 'pgfence_operator')
   AND NOT rolcanlogin;

ROLLBACK;
