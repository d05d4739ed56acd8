-- Revert pgfence:roles from pg

BEGIN;

-- Roles are cluster-wide: drop each only when nothing (in any database) still
-- depends on it, e.g. another database with pgfence deployed.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['pgfence_operator', 'pgfence_worker', 'pgfence_producer', 'pgfence_owner'] LOOP
        BEGIN
            EXECUTE format('DROP ROLE IF EXISTS %I', r);
        EXCEPTION WHEN dependent_objects_still_exist THEN
            RAISE NOTICE 'pgfence: role % is still used elsewhere; kept', r;
        END;
    END LOOP;
END $$;

COMMIT;
