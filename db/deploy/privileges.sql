-- Deploy pgfence:privileges to pg (reworked after @v0.4.0)
-- requires: privileges@v0.4.0
-- requires: roles
-- requires: cron/reclaim
--
-- Who may do what, whole: the schema and every table owned by pgfence_owner, nobody
-- else able to write a table (so nobody can UPDATE jobs SET status = 'queued' around
-- the fence), the tables each role may read, row-level security on jobs, and the
-- routines' privileges by the rule (pgfence.routine_grants, applied by
-- pgfence._apply_privileges). No statement here names a routine's signature, so no
-- rework of a function has to come back here. Re-runnable.

BEGIN;

-- 1. Ownership: pgfence_owner owns the schema and its tables; PUBLIC gets nothing.
ALTER SCHEMA pgfence OWNER TO pgfence_owner;
REVOKE ALL ON SCHEMA pgfence FROM PUBLIC;
GRANT USAGE ON SCHEMA pgfence TO pgfence_producer, pgfence_worker, pgfence_operator;

DO $$
DECLARE
    obj record;
BEGIN
    -- Deploy-time statements over the catalog; no caller input reaches them.
    FOR obj IN SELECT c.oid::regclass AS name FROM pg_catalog.pg_class c
                WHERE c.relnamespace = 'pgfence'::regnamespace AND c.relkind IN ('r', 'p') LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO pgfence_owner', obj.name);
        EXECUTE format('REVOKE ALL ON TABLE %s FROM PUBLIC', obj.name);
    END LOOP;
END $$;

-- 2. Reading: operators read the tables of jobs, history, sweeper and retention;
--    producers read only the jobs they enqueued (row-level security; the owner, and
--    so every pgfence function, is not subject to it). Workers read nothing: what
--    they need, the functions return. (Tables added by later changes state their
--    own grants, as tables/rejections_cap and tables/secret_key do.)
GRANT SELECT ON pgfence.jobs TO pgfence_producer, pgfence_operator;
GRANT SELECT ON pgfence.attempts, pgfence.rejections, pgfence.sweeper_status, pgfence.retention
    TO pgfence_operator;
ALTER TABLE pgfence.jobs ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS jobs_producer_reads_own ON pgfence.jobs;
CREATE POLICY jobs_producer_reads_own ON pgfence.jobs FOR SELECT TO pgfence_producer
    USING (enqueued_by = current_user);
DROP POLICY IF EXISTS jobs_operator_reads_all ON pgfence.jobs;
CREATE POLICY jobs_operator_reads_all ON pgfence.jobs FOR SELECT TO pgfence_operator
    USING (true);

-- 3. Routines: owner, SECURITY DEFINER and search_path, EXECUTE, by the rule.
SELECT pgfence._apply_privileges();

COMMIT;
