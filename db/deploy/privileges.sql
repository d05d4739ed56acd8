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
-- rework of a function has to come back here. Re-runnable, and on a deployed database
-- it takes no lock that would stop the queue.

BEGIN;

-- 1. Ownership: pgfence_owner owns the schema and its tables; PUBLIC gets nothing.
--    (Changed only where it differs: ALTER TABLE takes an ACCESS EXCLUSIVE lock, which
--    on a live queue would wait for every open transaction on the table and hold up
--    every claim behind it. GRANT and REVOKE take no such lock.)
DO $$
DECLARE
    obj record;
BEGIN
    -- Deploy-time statements over the catalog; no caller input reaches them.
    IF (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'pgfence') <> 'pgfence_owner'::regrole THEN
        ALTER SCHEMA pgfence OWNER TO pgfence_owner;
    END IF;
    FOR obj IN SELECT c.oid::regclass AS name FROM pg_catalog.pg_class c
                WHERE c.relnamespace = 'pgfence'::regnamespace AND c.relkind IN ('r', 'p')
                  AND c.relowner <> 'pgfence_owner'::regrole LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO pgfence_owner', obj.name);
    END LOOP;
    FOR obj IN SELECT c.oid::regclass AS name FROM pg_catalog.pg_class c
                WHERE c.relnamespace = 'pgfence'::regnamespace AND c.relkind IN ('r', 'p') LOOP
        EXECUTE format('REVOKE ALL ON TABLE %s FROM PUBLIC', obj.name);
    END LOOP;
END $$;
REVOKE ALL ON SCHEMA pgfence FROM PUBLIC;
GRANT USAGE ON SCHEMA pgfence TO pgfence_producer, pgfence_worker, pgfence_operator;

-- 2. Reading: operators read the tables of jobs, history, sweeper and retention;
--    producers read only the jobs they enqueued (row-level security; the owner, and
--    so every pgfence function, is not subject to it). Workers read nothing: what
--    they need, the functions return. (Tables added by later changes state their
--    own grants, as tables/rejections_cap and tables/secret_key do.)
GRANT SELECT ON pgfence.jobs TO pgfence_producer, pgfence_operator;
GRANT SELECT ON pgfence.attempts, pgfence.rejections, pgfence.sweeper_status, pgfence.retention
    TO pgfence_operator;
-- (Row-level security and its policies are created where missing, for the same
-- reason: ALTER TABLE and CREATE/DROP POLICY lock the table. Their definitions have
-- not changed since @v0.1.0; a change of one would be a new change that replaces it.)
DO $$
BEGIN
    IF NOT (SELECT relrowsecurity FROM pg_catalog.pg_class WHERE oid = 'pgfence.jobs'::regclass) THEN
        ALTER TABLE pgfence.jobs ENABLE ROW LEVEL SECURITY;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_policy WHERE polrelid = 'pgfence.jobs'::regclass
                                                        AND polname = 'jobs_producer_reads_own') THEN
        CREATE POLICY jobs_producer_reads_own ON pgfence.jobs FOR SELECT TO pgfence_producer
            USING (enqueued_by = current_user);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_policy WHERE polrelid = 'pgfence.jobs'::regclass
                                                        AND polname = 'jobs_operator_reads_all') THEN
        CREATE POLICY jobs_operator_reads_all ON pgfence.jobs FOR SELECT TO pgfence_operator
            USING (true);
    END IF;
END $$;

-- 3. Routines: owner, SECURITY DEFINER and search_path, EXECUTE, by the rule.
SELECT pgfence._apply_privileges();

COMMIT;
