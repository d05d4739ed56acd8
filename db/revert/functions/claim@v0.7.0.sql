-- Revert pgfence:functions/claim from pg (back to @v0.6.0)
--
-- Runs the @v0.6.0 script again (re-runnable: CREATE OR REPLACE, its rule rows): the
-- claim that knows no queue controls.

\ir ../../deploy/functions/claim@v0.6.0.sql
