-- Revert pgfence:functions/fail from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- array-lengths message of fail_many as it was.

\ir ../../deploy/functions/fail@v0.7.0.sql
