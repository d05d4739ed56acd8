-- Revert pgfence:functions/history_counts from pg
--
-- metrics(), stats() and purge_finished as the changes before this one left them: their
-- scripts run again (re-runnable: CREATE OR REPLACE, their rule rows; purge_plans sets
-- purge_finished's plan settings again), so that they count the whole history again and
-- the purge no longer keeps counts; then the counts go.

\ir ../../deploy/functions/metrics.sql
\ir ../../deploy/functions/stats.sql
\ir ../../deploy/functions/retention.sql
\ir ../../deploy/functions/purge_plans.sql

BEGIN;

DROP FUNCTION pgfence._count_history();
DROP FUNCTION pgfence._count_history_rows(timestamptz, timestamptz);
DROP FUNCTION pgfence._history_stored();
DROP FUNCTION pgfence._history_parts();
DROP FUNCTION pgfence._xid8_near(xid, xid8);
DROP TABLE pgfence.history_count_state;
DROP TABLE pgfence.history_count_marks;
DROP TABLE pgfence.history_counts;

COMMIT;
