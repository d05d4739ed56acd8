-- Revert pgfence:viewer from pg

\ir ../include/lock_retry.sql

BEGIN;

-- (ACCESS EXCLUSIVE on each table: lock_timeout 100 ms, retried, as the deploy creates them)
SELECT pg_temp.locked(ARRAY['DROP POLICY IF EXISTS jobs_viewer_reads_all ON pgfence.jobs',
                            'DROP POLICY IF EXISTS finished_jobs_viewer_reads_all ON pgfence.finished_jobs']);
REVOKE ALL ON ALL TABLES IN SCHEMA pgfence FROM pgfence_viewer;
REVOKE ALL ON ALL ROUTINES IN SCHEMA pgfence FROM pgfence_viewer;
REVOKE ALL ON SCHEMA pgfence FROM pgfence_viewer;

-- Cluster-wide: dropped only when nothing (in any database) still depends on it.
DO $$
BEGIN
    DROP ROLE IF EXISTS pgfence_viewer;
EXCEPTION WHEN dependent_objects_still_exist THEN
    RAISE NOTICE 'pgfence: role pgfence_viewer is still used elsewhere; kept';
END $$;

COMMIT;
