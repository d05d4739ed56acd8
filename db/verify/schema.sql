-- Verify pgfence:schema on pg

BEGIN;

SELECT 1 / (pgfence.schema_version() = 3)::int;
SELECT 'pgfence._apply_privileges()'::regprocedure, 'pgfence.routine_grants'::regclass;
-- Every public routine is in the privilege rule.
SELECT 1 / (count(*) = 0)::int FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'pgfence'::regnamespace AND p.proname !~ '^_'
   AND NOT EXISTS (SELECT 1 FROM pgfence.routine_grants g WHERE g.routine = p.proname);

-- The rework after @v0.7.0: the rule knows pgfence_viewer.
SELECT 1 / (pg_get_constraintdef(oid) LIKE '%pgfence_viewer%')::int FROM pg_constraint
 WHERE conrelid = 'pgfence.routine_grants'::regclass AND conname = 'routine_grants_roles';
SELECT 1 / (prosrc LIKE '%pgfence_viewer%')::int FROM pg_proc WHERE oid = 'pgfence._apply_privileges()'::regprocedure;

ROLLBACK;
