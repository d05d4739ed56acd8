-- Revert pgfence:tables/jobs_no_truncate from pg
--
-- Vacuum truncates pgfence.jobs again (the default).

\ir ../../include/lock_retry.sql

BEGIN;

SELECT pg_temp.locked(ARRAY['ALTER TABLE pgfence.jobs RESET (vacuum_truncate)']);

COMMIT;
