-- Revert pgfence:functions/sweep from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- sweep and background sweeper that fire no schedules.

\ir ../../deploy/functions/sweep@v0.7.0.sql
