-- Deploy pgfence:viewer to pg
-- requires: roles
-- requires: privileges
-- requires: schema
-- requires: tables/operator_audit
-- requires: tables/metric_totals
--
-- pgfence_viewer: the read-only role (the operator console's read mode, metrics
-- scrapers). It may read every job (row-level security policies that let it see every
-- row of pgfence.jobs and pgfence.finished_jobs), the history, the attempts and the
-- rejections, and call the read functions the privilege rule names for it (job,
-- attempts_of, stats, history_summary, metrics, audit_of, ...); it can change nothing:
-- no write grant on any table, no write routine. Created only when missing (roles are
-- cluster-wide), like the four roles of the change roles. Tables added after this
-- change state their own grant to it. Re-runnable.

\ir ../include/lock_retry.sql

BEGIN;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgfence_viewer') THEN
        CREATE ROLE pgfence_viewer NOLOGIN;
    END IF;
END $$;
COMMENT ON ROLE pgfence_viewer IS
  'pgfence: may read every job, its history and attempts, the operator audit and the metrics; changes nothing.';

GRANT USAGE ON SCHEMA pgfence TO pgfence_viewer;
GRANT SELECT ON pgfence.jobs, pgfence.finished_jobs, pgfence.all_jobs, pgfence.attempts, pgfence.all_attempts,
    pgfence.rejections, pgfence.rejection_overflow, pgfence.sweeper_status, pgfence.retention,
    pgfence.history_partitions, pgfence.queue_controls, pgfence.operator_audit, pgfence.operator_audit_settings, pgfence.metric_totals
    TO pgfence_viewer;

-- (Created where missing. CREATE POLICY takes ACCESS EXCLUSIVE on the table: taken with
-- lock_timeout 100 ms and retried (pg_temp.locked), so claims and completions queued behind
-- the request wait at most 100 ms per try, even behind a long transaction.)
SELECT pg_temp.locked(array_remove(ARRAY[
    CASE WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_policy WHERE polrelid = 'pgfence.jobs'::regclass
                                                             AND polname = 'jobs_viewer_reads_all')
         THEN 'CREATE POLICY jobs_viewer_reads_all ON pgfence.jobs FOR SELECT TO pgfence_viewer USING (true)' END,
    CASE WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_policy WHERE polrelid = 'pgfence.finished_jobs'::regclass
                                                             AND polname = 'finished_jobs_viewer_reads_all')
         THEN 'CREATE POLICY finished_jobs_viewer_reads_all ON pgfence.finished_jobs FOR SELECT TO pgfence_viewer'
              ' USING (true)' END]::text[], NULL));

SELECT pgfence._apply_privileges();

COMMIT;
