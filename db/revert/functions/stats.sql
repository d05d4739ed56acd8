-- Revert pgfence:functions/stats from pg (back to @v0.7.0)
--
-- Runs the @v0.7.0 script again (re-runnable: CREATE OR REPLACE, its rule rows, which
-- name no pgfence_viewer).

\ir ../../deploy/functions/stats@v0.7.0.sql
