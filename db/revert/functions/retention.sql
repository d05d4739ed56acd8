-- Revert pgfence:functions/retention from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- purge that counts nothing into pgfence.metric_totals and leaves the audit alone.

\ir ../../deploy/functions/retention@v0.7.0.sql

BEGIN;
DROP FUNCTION IF EXISTS pgfence._forget_jobs(bigint[]);
COMMIT;
