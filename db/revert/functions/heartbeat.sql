-- Revert pgfence:functions/heartbeat from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- heartbeat that knows no run timeout.

\ir ../../deploy/functions/heartbeat@v0.7.0.sql
