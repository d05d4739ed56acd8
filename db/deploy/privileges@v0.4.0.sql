-- Deploy pgfence:privileges to pg
-- requires: roles
-- requires: cron/reclaim

BEGIN;

-- 1. pgfence_owner owns everything; nobody else may write the tables, so nobody
--    can UPDATE jobs SET status = 'queued' around the fence.
ALTER SCHEMA pgfence OWNER TO pgfence_owner;
REVOKE ALL ON SCHEMA pgfence FROM PUBLIC;
GRANT USAGE ON SCHEMA pgfence TO pgfence_producer, pgfence_worker, pgfence_operator;

DO $$
DECLARE
    obj record;
BEGIN
    -- Deploy-time statements over the catalog; no caller input reaches them.
    FOR obj IN SELECT c.oid::regclass AS name FROM pg_catalog.pg_class c
                WHERE c.relnamespace = 'pgfence'::regnamespace AND c.relkind = 'r' LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO pgfence_owner', obj.name);
        EXECUTE format('REVOKE ALL ON TABLE %s FROM PUBLIC', obj.name);
    END LOOP;
    FOR obj IN SELECT p.oid::regprocedure AS name FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = 'pgfence'::regnamespace LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO pgfence_owner', obj.name);
        EXECUTE format('REVOKE ALL ON ROUTINE %s FROM PUBLIC', obj.name);
    END LOOP;
END $$;

-- 2. The public API runs as the owner, with a pinned search_path (pg_temp last).
--    Private helpers (names starting with _) run inside these; nobody else may call them.
--    sweep and run_sweeper stay SECURITY INVOKER: procedures that COMMIT cannot be
--    SECURITY DEFINER; they only call reclaim_expired and purge_finished.
ALTER FUNCTION pgfence.schema_version() SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[])
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.claim(text, text[], interval, integer)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.heartbeat(bigint, uuid, interval)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.heartbeat_many(bigint[], uuid[], interval)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.complete(bigint, uuid, jsonb)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.complete_many(bigint[], uuid[], jsonb[])
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.fail(bigint, uuid, text, interval, boolean)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[])
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.release(bigint, uuid, boolean)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.release_many(bigint[], uuid[], boolean)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.report_rejection(bigint, uuid, text)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.reclaim_expired(integer)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.requeue(bigint) SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.cancel(bigint) SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.stats() SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.purge_finished(integer) SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.set_retention(text, interval, interval)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.sweeper_last_pass() SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
ALTER FUNCTION pgfence.note_sweeper_pass(bigint, bigint)
    SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;

-- 3. What each role may call.
GRANT EXECUTE ON FUNCTION pgfence.schema_version() TO pgfence_producer, pgfence_worker, pgfence_operator;
GRANT EXECUTE ON FUNCTION pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text),
                          pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[])
    TO pgfence_producer;
GRANT EXECUTE ON FUNCTION pgfence.claim(text, text[], interval, integer),
                          pgfence.heartbeat(bigint, uuid, interval),
                          pgfence.heartbeat_many(bigint[], uuid[], interval),
                          pgfence.complete(bigint, uuid, jsonb),
                          pgfence.complete_many(bigint[], uuid[], jsonb[]),
                          pgfence.fail(bigint, uuid, text, interval, boolean),
                          pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[]),
                          pgfence.release(bigint, uuid, boolean),
                          pgfence.release_many(bigint[], uuid[], boolean),
                          pgfence.report_rejection(bigint, uuid, text),
                          pgfence.sweeper_last_pass()
    TO pgfence_worker;
GRANT EXECUTE ON FUNCTION pgfence.requeue(bigint),
                          pgfence.cancel(bigint),
                          pgfence.reclaim_expired(integer),
                          pgfence.purge_finished(integer),
                          pgfence.set_retention(text, interval, interval),
                          pgfence.stats(),
                          pgfence.sweeper_last_pass(),
                          pgfence.note_sweeper_pass(bigint, bigint)
    TO pgfence_operator;
GRANT EXECUTE ON PROCEDURE pgfence.sweep(bigint, integer),
                           pgfence.run_sweeper(interval, timestamptz)
    TO pgfence_operator;

-- 4. Reading: operators read everything; producers read only the jobs they
--    enqueued (row-level security; the owner, and so every pgfence function, is
--    not subject to it).
GRANT SELECT ON pgfence.jobs TO pgfence_producer, pgfence_operator;
GRANT SELECT ON pgfence.attempts, pgfence.rejections, pgfence.sweeper_status, pgfence.retention
    TO pgfence_operator;
ALTER TABLE pgfence.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_producer_reads_own ON pgfence.jobs FOR SELECT TO pgfence_producer
    USING (enqueued_by = current_user);
CREATE POLICY jobs_operator_reads_all ON pgfence.jobs FOR SELECT TO pgfence_operator
    USING (true);

COMMIT;
