-- Revert pgfence:functions/_checks from pg (back to @v0.7.0)
--
-- The @v0.7.0 script again (re-runnable: CREATE OR REPLACE of the same routines, the
-- privilege rule applied again): the literals as they were. The rework added nothing.

\ir ../../deploy/functions/_checks@v0.7.0.sql
