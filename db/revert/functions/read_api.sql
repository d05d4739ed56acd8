-- Revert pgfence:functions/read_api from pg (back to @v0.7.0)
--
-- job() goes (its @v0.7.0 result has no timeout and unique_for, so it is dropped, not
-- replaced), then the @v0.7.0 script runs again (re-runnable: CREATE OR REPLACE, its
-- rule rows, which name no pgfence_viewer).

BEGIN;

DROP FUNCTION IF EXISTS pgfence.job(bigint);

COMMIT;

\ir ../../deploy/functions/read_api@v0.7.0.sql
