-- Revert pgfence:functions/limits from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule row):
-- limits() without the snooze rows.

\ir ../../deploy/functions/limits@v0.7.0.sql
