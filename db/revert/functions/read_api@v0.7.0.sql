-- Revert pgfence:functions/read_api from pg (back to @v0.5.0)
--
-- Runs the @v0.5.0 script again (re-runnable: CREATE OR REPLACE, its rule rows):
-- the definitions that read and write only pgfence.jobs and pgfence.attempts.

\ir ../../deploy/functions/read_api@v0.5.0.sql
