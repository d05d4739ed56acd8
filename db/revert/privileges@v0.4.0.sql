-- Revert pgfence:privileges from pg

BEGIN;

DROP POLICY jobs_operator_reads_all ON pgfence.jobs;
DROP POLICY jobs_producer_reads_own ON pgfence.jobs;
ALTER TABLE pgfence.jobs DISABLE ROW LEVEL SECURITY;

-- Back to the deploying role, invoker rights, and no grants to the pgfence roles,
-- so that the roles can be dropped and earlier changes reverted.
DO $$
DECLARE
    obj record;
BEGIN
    FOR obj IN SELECT c.oid::regclass AS name FROM pg_catalog.pg_class c
                WHERE c.relnamespace = 'pgfence'::regnamespace AND c.relkind = 'r' LOOP
        EXECUTE format('REVOKE ALL ON TABLE %s FROM pgfence_producer, pgfence_worker, pgfence_operator', obj.name);
        EXECUTE format('ALTER TABLE %s OWNER TO %I', obj.name, current_user);
    END LOOP;
    FOR obj IN SELECT p.oid::regprocedure AS name, p.prokind FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = 'pgfence'::regnamespace LOOP
        EXECUTE format('REVOKE ALL ON ROUTINE %s FROM pgfence_producer, pgfence_worker, pgfence_operator', obj.name);
        IF obj.prokind = 'f' THEN
            EXECUTE format('ALTER FUNCTION %s SECURITY INVOKER RESET search_path', obj.name);
        END IF;
        EXECUTE format('ALTER ROUTINE %s OWNER TO %I', obj.name, current_user);
        EXECUTE format('GRANT EXECUTE ON ROUTINE %s TO PUBLIC', obj.name);
    END LOOP;
END $$;
REVOKE ALL ON SCHEMA pgfence FROM pgfence_producer, pgfence_worker, pgfence_operator;
ALTER SCHEMA pgfence OWNER TO CURRENT_USER;

COMMIT;
