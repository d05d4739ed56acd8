-- Revert pgfence:functions/read_api from pg (back to @v0.7.0)
--
-- job() is dropped (its @v0.7.0 result has no timeout and unique_for, so it cannot be
-- replaced), then the @v0.7.0 script runs again (re-runnable: CREATE OR REPLACE, its
-- rule rows, which name no pgfence_viewer), in the same transaction (the script's BEGIN
-- warns that one is open, its COMMIT commits both): no moment without job().

BEGIN;

DROP FUNCTION IF EXISTS pgfence.job(bigint);

\ir ../../deploy/functions/read_api@v0.7.0.sql
