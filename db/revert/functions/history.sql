-- Revert pgfence:functions/history from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- partition maintenance that counts nothing into pgfence.metric_totals.

\ir ../../deploy/functions/history@v0.7.0.sql
