-- Deploy pgfence:roles to pg
-- requires: schema

BEGIN;

-- The four roles (cluster-wide, so created only when missing):
--   pgfence_owner     NOLOGIN; owns the schema, tables and functions.
--   pgfence_producer  enqueue, and read the jobs it enqueued.
--   pgfence_worker    claim, heartbeat, complete, fail, release.
--   pgfence_operator  requeue, cancel, reclaim, retention, stats; reads everything.
-- Grant one of the last three to each application login role.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['pgfence_owner', 'pgfence_producer', 'pgfence_worker', 'pgfence_operator'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END $$;

COMMENT ON ROLE pgfence_owner IS 'pgfence: owns schema pgfence; no login.';
COMMENT ON ROLE pgfence_producer IS 'pgfence: may enqueue and read the jobs it enqueued.';
COMMENT ON ROLE pgfence_worker IS 'pgfence: may claim, heartbeat, complete, fail and release jobs.';
COMMENT ON ROLE pgfence_operator IS 'pgfence: may requeue, cancel, reclaim, set retention and read all jobs.';

COMMIT;
