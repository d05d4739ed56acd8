-- Revert pgfence:functions/claim from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- claim whose lease knows no run timeout.

\ir ../../deploy/functions/claim@v0.7.0.sql
