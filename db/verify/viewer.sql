-- Verify pgfence:viewer on pg

BEGIN;

SELECT 1 / count(*) FROM pg_catalog.pg_roles WHERE rolname = 'pgfence_viewer';
SELECT 1 / count(*) FROM pg_catalog.pg_policy WHERE polrelid = 'pgfence.jobs'::regclass
                                                AND polname = 'jobs_viewer_reads_all';
SELECT 1 / has_table_privilege('pgfence_viewer', 'pgfence.finished_jobs', 'SELECT')::int;
SELECT 1 / (NOT has_table_privilege('pgfence_viewer', 'pgfence.jobs', 'UPDATE'))::int;

ROLLBACK;
