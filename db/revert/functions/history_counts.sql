-- Revert pgfence:functions/history_counts from pg
--
-- metrics(), stats(), purge_finished, complete_many and _mark_done as the changes before
-- this one left them: their scripts run again (re-runnable: CREATE OR REPLACE, their rule
-- rows; purge_plans sets purge_finished's plan settings again), so that the readers count
-- the whole history again and the purge no longer keeps counts; then the counting
-- functions go (the tables: tables/history_counts).
-- A later rework of any of these changes must point its line here at the script it
-- leaves behind (name@tag.sql): tests/test_sql_sqitch.py's revert of this change
-- compares the catalog with the one before it, and fails until it does.

\ir ../../deploy/functions/metrics.sql
\ir ../../deploy/functions/stats.sql
\ir ../../deploy/functions/retention.sql
\ir ../../deploy/functions/purge_plans.sql
\ir ../../deploy/functions/complete.sql
\ir ../../deploy/functions/mark_done.sql

BEGIN;

DROP FUNCTION pgfence._count_history();
DROP FUNCTION pgfence._count_history_rows(timestamptz, timestamptz);
DROP FUNCTION pgfence._history_stored();
DROP FUNCTION pgfence._history_parts();
DROP FUNCTION pgfence._xid8_near(xid, xid8);

COMMIT;
